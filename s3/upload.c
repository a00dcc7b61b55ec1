/*
 * s3/upload.c — writes that must not leave garbage or lie about their outcome: PutObject,
 * CompleteMultipartUpload, and s3_upload (single PUT or parallel multipart upload).
 *
 * Integrity. The engine checks every PUT and part it sends against what the server stored
 * (verify_write: the answer's CRC32C, else the signed SHA-256, else an MD5 ETag); a copy that
 * differs is never acknowledged. A part is simply re-sent (the same part number replaces it).
 * A PUT's request ends at a differing copy (end_on_corrupt) and the op replaces it within what
 * is left of max_attempts: with If-None-Match the corrupt object — recognised by the ETag it
 * came back with — is deleted first, or the retry would meet 412. Under S3_VERIFY_READ_BACK an
 * unchecked PUT is read back before success, and a multipart object after its Complete.
 *
 * Ambiguity. With hedges, retries and libcurl's own re-sends, a refusal may come from an
 * earlier attempt of ours that the server carried out although we never saw its answer:
 *  - PUT with If-None-Match: 412, or 409 ConditionalRequestConflict once no twin is left;
 *  - Complete: NoSuchUpload (or 412).
 * Each is settled by a HEAD comparing the ETag with ours (the body's MD5, or the multipart
 * ETag computed from the parts' ETags) — whatever the number of attempts counted: our keys are
 * unique, the HEAD costs one request on a rare path. Equal means success; a 409 whose object
 * is not there yet is retried within the attempts left.
 *
 * Outcomes and cleanup. An outcome is reported as soon as it is known — success, failure after
 * every attempt, or cancel (the next loop turn) — and what may be left on the server is then
 * removed by a detached cleanup (s3/cleanup.c) that owns copies of what it needs:
 *  - a PUT that may have landed: HEAD, DELETE when the ETag is ours (or a corrupt copy's);
 *  - a multipart upload: abort; HEAD/DELETE if a Complete was sent; abort stray uploads of a
 *    retried Create (after a success, only the strays).
 * Rule: an outcome reported as success is never cleaned up; a cancel or failure is reported
 * before any cleanup request goes out.
 *
 * DURABILITY: s3_upload's callback with err 0 means the object is complete in the store and
 * holds exactly the bytes given: the single PUT or the CompleteMultipartUpload was acknowledged
 * with its copies checked (or, after an ambiguous answer, a HEAD found our ETag). A crash before
 * that leaves at most an incomplete multipart upload (removed by gc through
 * ListMultipartUploads) or a complete orphan object.
 *
 * Threads: the client's thread only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "s3/s3_int.h"

static bool is_conflict(const s3_reply *rep)
{
    return rep->status == 409 && strcmp(rep->s3_code, "ConditionalRequestConflict") == 0;
}

/* ==== PutObject ==== */

typedef enum {
    P_PUT,            /* the PUT request */
    P_SETTLE,         /* HEAD (or read back) after 412 / 409: whose object is it? */
    P_CORRUPT_HEAD,   /* If-None-Match: is the corrupt copy still there? */
    P_CORRUPT_DELETE, /* ... then remove it before the retry */
    P_READ_BACK,      /* S3_VERIFY_READ_BACK: GET and compare before success */
} put_phase;

typedef struct put_op {
    s3_op op;
    char *bucket, *key;
    const void *body;
    size_t len;
    bool inm;
    put_phase phase;
    s3_req *req;
    s3_op *child;
    int attempts;        /* spent by the PUT requests so far (a restart gets what is left) */
    bool maybe_landed;   /* some attempt may have stored something */
    bool settling_409;   /* P_SETTLE for a 409 (an absent object: retry) rather than a 412 */
    s3_result outcome;   /* the last PUT request's result */
    char md5[72];        /* our ETag, computed when needed */
    char bad_etag[72];   /* the last corrupt copy's ETag ("" when none) */
    char got_etag[72];   /* an ETag a 2xx gave that is not settled yet (read back) */
    uint8_t *back;       /* read-back buffer (len + 1 bytes: a longer object shows) */
} put_op;

static void put_destroy(s3_op *op)
{
    put_op *p = (put_op *)op;
    if (p->req) s3_req_cancel(p->req);
    s3_op_drop(p->child);
    free(p->bucket);
    free(p->key);
    free(p->back);
}

static const char *put_md5(put_op *p)
{
    if (!p->md5[0]) s3_md5_etag(p->body, p->len, p->md5);
    return p->md5;
}

/* Removes, after the report, what may have landed: the key when its ETag is ours (the body's
 * MD5, a corrupt copy's, an unsettled one's). The MD5 is computed now: the body is the
 * caller's and may be gone once the callback has run. */
static void put_cleanup(put_op *p)
{
    if (!p->maybe_landed) return;
    const char *etags[3] = {put_md5(p), p->bad_etag, p->got_etag};
    s3_cleanup_spec cs = {.bucket = p->bucket, .key = p->key, .etags = etags, .n_etags = 3};
    if (s3_cleanup_start(p->op.c, &cs)) s3_result_append(&p->outcome, "%s", "; no cleanup (out of memory)");
}

/* Reports the outcome (cleaning up detached after a failure). */
static void put_report(put_op *p)
{
    if (p->outcome.err) put_cleanup(p);
    p->op.res = p->outcome;
    p->op.res.list = NULL;
    s3_op_finish(&p->op);
}

/* Reports success with etag, after a settle or a read back. */
static void put_succeed(put_op *p, const char *etag, s3_write_check how)
{
    s3_result ok;
    memset(&ok, 0, sizeof ok);
    ok.attempts = p->attempts;
    ok.http_status = p->outcome.http_status;
    ok.server_date_ms = p->outcome.server_date_ms;
    ok.write_check = how;
    snprintf(ok.etag, sizeof ok.etag, "%s", etag);
    snprintf(ok.request_id, sizeof ok.request_id, "%s", p->outcome.request_id);
    p->outcome = ok;
    /* DURABILITY: the object is complete and holds our bytes (its ETag is our MD5, or it was
     * read back); a crash from here on leaves it, and the caller may acknowledge it. */
    put_report(p);
}

static void put_done(void *ctx, s3_req *req, const s3_reply *rep);
static void put_child_done(void *ctx, const s3_result *r);

static int put_start_request(put_op *p)
{
    int left = s3_client_opts(p->op.c)->max_attempts - p->attempts;
    if (left <= 0) return -ETIMEDOUT;
    s3_kv h[] = {{"if-none-match", "*"}};
    s3_req_spec spec = {.method = "PUT", .bucket = p->bucket, .key = p->key, .headers = h,
                        .n_headers = p->inm ? 1 : 0, .body = p->body, .body_len = p->len,
                        .max_attempts = left, .verify_write = true, .end_on_corrupt = true};
    p->phase = P_PUT;
    return s3_req_start(p->op.c, &spec, put_done, p, &p->req);
}

/* Sends the PUT again (the budget is what is left of max_attempts); reports when it cannot. */
static void put_restart(put_op *p)
{
    int rc = put_start_request(p);
    if (!rc) return;
    if (rc != -ETIMEDOUT) s3_result_append(&p->outcome, "; could not start another attempt: %s",
                                 strerrordesc_np(-rc));
    put_report(p);
}

static void put_read_back(put_op *p, put_phase phase)
{
    int rc = 0;
    p->phase = phase;
    if (!p->back) p->back = malloc(p->len + 1);
    if (!p->back) rc = -ENOMEM;
    else S3_CHILD(s3_get_object(p->op.c, p->bucket, p->key, 0, p->back, p->len + 1, &p->child,
                                put_child_done, p), p->child);
    if (rc) {
        s3_result_fail(&p->outcome, rc, "PUT s3://%s/%s: could not read the object back: %s",
                       p->bucket, p->key, strerrordesc_np(-rc));
        put_report(p);
    }
}

static void put_head(put_op *p, put_phase phase)
{
    int rc;
    p->phase = phase;
    S3_CHILD(s3_head_object(p->op.c, p->bucket, p->key, &p->child, put_child_done, p), p->child);
    if (rc) {
        s3_result_append(&p->outcome, "; could not start a HEAD: %s", strerrordesc_np(-rc));
        put_report(p);
    }
}

/* The copy the server stored (ETag etag) differs from the body: replace it, if attempts are
 * left. With If-None-Match it must go first (or the retry meets 412). */
static void put_corrupt(put_op *p, const char *etag)
{
    snprintf(p->bad_etag, sizeof p->bad_etag, "%.71s", etag);
    p->got_etag[0] = '\0';
    if (p->attempts >= s3_client_opts(p->op.c)->max_attempts) {
        put_report(p); /* the error says what differed; the cleanup removes the copy */
        return;
    }
    if (p->inm && p->bad_etag[0]) put_head(p, P_CORRUPT_HEAD);
    else put_restart(p);
}

static void put_settle(put_op *p, bool conflict)
{
    p->settling_409 = conflict;
    if (s3_client_opts(p->op.c)->verify_writes == S3_VERIFY_READ_BACK && p->len > 0)
        put_read_back(p, P_SETTLE); /* ETags are not MD5s there: compare the bytes */
    else put_head(p, P_SETTLE);
}

static bool read_back_equal(const put_op *p, const s3_result *r)
{
    return r->bytes == p->len && memcmp(p->back, p->body, p->len) == 0;
}

static void put_child_done(void *ctx, const s3_result *r)
{
    put_op *p = ctx;
    p->child = NULL;
    bool by_read = p->back && (p->phase == P_READ_BACK ||
                               (p->phase == P_SETTLE &&
                                s3_client_opts(p->op.c)->verify_writes == S3_VERIFY_READ_BACK));
    switch (p->phase) {
    case P_SETTLE:
        if (!r->err && (by_read ? read_back_equal(p, r) : s3_etag_eq(r->etag, put_md5(p)))) {
            /* the refusal was our own earlier attempt (or libcurl's re-send of it) */
            put_succeed(p, r->etag[0] ? r->etag : p->outcome.etag,
                        by_read ? S3_CHECK_READ_BACK : S3_CHECK_MD5);
        } else if (!r->err) {
            if (p->settling_409) {
                p->outcome.err = -EEXIST;
                s3_result_append(&p->outcome, "%s", "; the object that landed is not ours");
            }
            put_report(p); /* -EEXIST: someone else's object */
        } else if (r->err == -ENOENT && p->settling_409) {
            put_restart(p); /* the conflicting upload did not land (yet): try again */
        } else {
            p->maybe_landed = true;
            s3_result_append(&p->outcome, "; could not tell whose object it is: %s", r->error);
            put_report(p);
        }
        return;
    case P_READ_BACK:
        if (!r->err && read_back_equal(p, r)) {
            put_succeed(p, p->got_etag, S3_CHECK_READ_BACK);
        } else if (!r->err || r->err == -ERANGE) {
            s3_result_fail(&p->outcome, DSTL_EREMOTE,
                           "PUT s3://%.63s/%.200s: the stored copy differs from what was sent "
                           "(read back %" PRIu64 " bytes of %zu) (%d attempts)",
                           p->bucket, p->key, r->bytes, p->len, p->attempts);
            put_corrupt(p, p->got_etag);
        } else {
            s3_result_fail(&p->outcome, r->err, "PUT s3://%.63s/%.200s: could not read it back "
                           "to check it: %.250s", p->bucket, p->key, r->error);
            put_report(p);
        }
        return;
    case P_CORRUPT_HEAD:
        if (!r->err && s3_etag_eq(r->etag, p->bad_etag)) {
            int rc;
            p->phase = P_CORRUPT_DELETE;
            S3_CHILD(s3_delete_object(p->op.c, p->bucket, p->key, &p->child, put_child_done, p),
                     p->child);
            if (!rc) return;
            s3_result_append(&p->outcome, "; could not start deleting the corrupt copy: %s",
                   strerrordesc_np(-rc));
            put_report(p);
        } else if (!r->err && s3_etag_eq(r->etag, put_md5(p))) {
            put_succeed(p, r->etag, S3_CHECK_MD5); /* a twin's good copy is there */
        } else if (r->err == -ENOENT) {
            put_restart(p);
        } else {
            s3_result_append(&p->outcome, "; could not remove the corrupt copy: %s",
                   r->err ? r->error : "another object is there now");
            put_report(p);
        }
        return;
    case P_CORRUPT_DELETE:
        if (r->err) {
            s3_result_append(&p->outcome, "; could not delete the corrupt copy: %s", r->error);
            put_report(p);
        } else {
            put_restart(p);
        }
        return;
    case P_PUT:
        return;
    }
}

static void put_done(void *ctx, s3_req *req, const s3_reply *rep)
{
    (void)req;
    put_op *p = ctx;
    p->req = NULL;
    p->attempts += rep->attempts;
    if (rep->maybe_applied) p->maybe_landed = true;
    s3_reply all = *rep; /* the result counts the attempts of every request of this PUT */
    all.attempts = p->attempts;
    s3_result_set(&p->outcome, "PUT", p->bucket, p->key, &all);
    if (!rep->err) {
        p->maybe_landed = true;
        if (rep->write_check == S3_CHECK_NONE && p->len > 0) {
            snprintf(p->got_etag, sizeof p->got_etag, "%.71s", rep->etag);
            put_read_back(p, P_READ_BACK);
            return;
        }
        /* DURABILITY: the PUT was acknowledged and its copy checked (CRC32C, SHA-256 or MD5
         * ETag): the object is complete; a crash from here on leaves it. */
        put_report(p);
    } else if (rep->net_err == -EBADMSG) {
        put_corrupt(p, rep->etag);
    } else if ((p->inm && rep->status == 412) || is_conflict(rep)) {
        put_settle(p, is_conflict(rep));
    } else {
        put_report(p);
    }
}

static void put_cancel(s3_op *op)
{
    put_op *p = (put_op *)op;
    if (p->req) {
        p->attempts += s3_req_launched(p->req);
        if (s3_req_launched(p->req)) p->maybe_landed = true;
        s3_req_cancel(p->req);
        p->req = NULL;
    }
    if (p->phase != P_PUT) p->maybe_landed = true; /* settling or checking: it may be there */
    s3_op_drop(p->child);
    p->child = NULL;
    s3_result_fail(&p->outcome, -ECANCELED, "PUT s3://%s/%s: cancelled", p->bucket, p->key);
    p->outcome.attempts = p->attempts;
    put_report(p); /* the callback on the next turn; then the cleanup, detached */
}

int s3_put_object(s3_client *c, const char *bucket, const char *key, const void *body,
                  size_t len, bool if_none_match, s3_op **op_out, s3_done_fn cb, void *ctx)
{
    if (!c || !bucket || !*bucket || !key || !*key || strlen(key) > 1024 || (len && !body) || !cb)
        return -EINVAL;
    put_op *p = (put_op *)s3_op_new(c, sizeof *p, cb, ctx);
    if (!p) return -ENOMEM;
    p->op.cancel = put_cancel;
    p->op.destroy = put_destroy;
    p->bucket = strdup(bucket);
    p->key = strdup(key);
    p->body = body;
    p->len = len;
    p->inm = if_none_match;
    int rc = p->bucket && p->key ? put_start_request(p) : -ENOMEM;
    if (rc) {
        s3_op_discard(&p->op);
        return rc == -ETIMEDOUT ? -EINVAL : rc;
    }
    if (op_out) *op_out = &p->op;
    return 0;
}

/* ==== CompleteMultipartUpload ==== */

typedef struct complete_op {
    s3_op op;
    char *bucket, *key, *upload_id;
    char *body;
    s3_req *req;
    s3_op *child;
    char expect[72]; /* the multipart ETag, "" when the parts' ETags are not MD5s */
    s3_result outcome;
} complete_op;

static void complete_destroy(s3_op *op)
{
    complete_op *m = (complete_op *)op;
    if (m->req) s3_req_cancel(m->req);
    s3_op_drop(m->child);
    free(m->bucket);
    free(m->key);
    free(m->upload_id);
    free(m->body);
}

static int check_complete(void *ctx, s3_reply *rep)
{
    (void)ctx;
    char etag[128] = "";
    int rc = s3_xml_parse_complete(rep->body, rep->body_len, etag, sizeof etag, rep->s3_code,
                                   sizeof rep->s3_code, rep->message, sizeof rep->message);
    /* some servers give the ETag without its quotes: quote it like every other ETag */
    if (rc == 0 && etag[0])
        snprintf(rep->etag, sizeof rep->etag, etag[0] == '"' ? "%.120s" : "\"%.120s\"", etag);
    return rc; /* 1: an error inside a 200 (classified by its code) */
}

static void complete_report(complete_op *m)
{
    m->op.res = m->outcome;
    s3_op_finish(&m->op);
}

static void complete_child_done(void *ctx, const s3_result *r)
{
    complete_op *m = ctx;
    m->child = NULL;
    if (!r->err && s3_etag_eq(r->etag, m->expect)) {
        /* the refusal was our own completion (an earlier attempt, or libcurl's re-send) */
        int attempts = m->outcome.attempts;
        int64_t date = m->outcome.server_date_ms;
        memset(&m->outcome, 0, sizeof m->outcome);
        m->outcome.attempts = attempts;
        m->outcome.server_date_ms = date;
        snprintf(m->outcome.etag, sizeof m->outcome.etag, "%s", r->etag);
    } else if (r->err && r->err != -ENOENT) {
        s3_result_append(&m->outcome, "; could not tell whether the object is ours: %s", r->error);
    }
    complete_report(m);
}

static void complete_done(void *ctx, s3_req *req, const s3_reply *rep)
{
    (void)req;
    complete_op *m = ctx;
    m->req = NULL;
    s3_result_set(&m->outcome, "CompleteMultipartUpload", m->bucket, m->key, rep);
    /* RGW leaves <ETag> empty: the computed multipart ETag is the object's */
    if (!rep->err && !m->outcome.etag[0])
        snprintf(m->outcome.etag, sizeof m->outcome.etag, "%s", m->expect);
    if ((rep->err == -ENOENT || rep->err == -EEXIST) && m->expect[0]) {
        int rc;
        S3_CHILD(s3_head_object(m->op.c, m->bucket, m->key, &m->child, complete_child_done, m),
                 m->child);
        if (!rc) return;
    }
    complete_report(m);
}

static void complete_cancel(s3_op *op)
{
    complete_op *m = (complete_op *)op;
    if (m->req) {
        m->outcome.attempts = s3_req_launched(m->req);
        s3_req_cancel(m->req);
        m->req = NULL;
    }
    s3_op_drop(m->child);
    m->child = NULL;
    s3_result_fail(&m->outcome, -ECANCELED, "CompleteMultipartUpload s3://%s/%s: cancelled",
                   m->bucket, m->key);
    complete_report(m);
}

int s3_complete_multipart_upload(s3_client *c, const char *bucket, const char *key,
                                 const char *upload_id, const s3_part_info *parts, size_t n,
                                 bool if_none_match, s3_op **op_out, s3_done_fn cb, void *ctx)
{
    if (!c || !bucket || !*bucket || !key || !*key || !upload_id || !*upload_id || !parts ||
        n == 0 || n > 10000 || !cb)
        return -EINVAL;
    complete_op *m = (complete_op *)s3_op_new(c, sizeof *m, cb, ctx);
    if (!m) return -ENOMEM;
    m->op.cancel = complete_cancel;
    m->op.destroy = complete_destroy;
    m->bucket = strdup(bucket);
    m->key = strdup(key);
    m->upload_id = strdup(upload_id);
    size_t blen = 0;
    m->body = s3_xml_build_complete(parts, n, &blen);
    if (s3_multipart_etag(parts, n, m->expect)) m->expect[0] = '\0';
    int rc = m->bucket && m->key && m->upload_id && m->body ? 0 : -ENOMEM;
    if (!rc) {
        s3_kv q[] = {{"uploadId", upload_id}};
        s3_kv h[] = {{"if-none-match", "*"}};
        s3_req_spec spec = {.method = "POST", .bucket = bucket, .key = key, .query = q,
                            .n_query = 1, .headers = h, .n_headers = if_none_match ? 1 : 0,
                            .body = m->body, .body_len = blen, .content_type = "application/xml",
                            .check = check_complete};
        rc = s3_req_start(c, &spec, complete_done, m, &m->req);
    }
    if (rc) {
        s3_op_discard(&m->op);
        return rc;
    }
    if (op_out) *op_out = &m->op;
    return 0;
}

/* ==== s3_upload ==== */

#define DEFAULT_PART_SIZE (8u << 20)
#define DEFAULT_MULTIPART_THRESHOLD (16u << 20)

typedef enum {
    U_SINGLE,    /* a PutObject child */
    U_PRECHECK,  /* If-None-Match multipart: HEAD first */
    U_CREATE,
    U_PARTS,
    U_COMPLETE,
    U_READ_BACK, /* S3_VERIFY_READ_BACK: the object, one part-sized range at a time */
} up_phase;

typedef struct part_slot {
    struct up_op *u;
    int number;
    s3_op *child;
    s3_part_info info;
} part_slot;

typedef struct up_op {
    s3_op op;
    char *bucket, *key;
    const uint8_t *buf;
    size_t len, part_size;
    bool inm;
    up_phase phase;
    s3_op *single, *precheck, *create, *complete, *reader;
    char upload_id[512];
    part_slot *parts;
    size_t n_parts, n_parts_done;
    bool strays_possible, complete_sent;
    s3_write_check check;  /* the lowest of the parts' */
    char expect[72];       /* the multipart ETag computed from the parts' */
    char done_etag[128];   /* the Complete's */
    uint8_t *back;         /* read-back buffer (one part) */
    size_t back_next;      /* the next part to read back */
    s3_result outcome;
} up_op;

static void up_drop_children(up_op *u)
{
    s3_op_drop(u->single);
    s3_op_drop(u->precheck);
    s3_op_drop(u->create);
    s3_op_drop(u->complete);
    s3_op_drop(u->reader);
    u->single = u->precheck = u->create = u->complete = u->reader = NULL;
    for (size_t i = 0; u->parts && i < u->n_parts; i++) {
        s3_op_drop(u->parts[i].child);
        u->parts[i].child = NULL;
    }
}

static void up_destroy(s3_op *op)
{
    up_op *u = (up_op *)op;
    up_drop_children(u);
    free(u->bucket);
    free(u->key);
    free(u->parts);
    free(u->back);
}

/* The detached cleanup of a multipart upload: after a failure the upload is aborted and, if a
 * Complete was sent, the object deleted when it is ours; stray uploads of a retried Create go
 * either way (they hold no object). */
static void up_cleanup(up_op *u, bool failed)
{
    const char *etags[2] = {u->expect, u->done_etag};
    s3_cleanup_spec cs = {.bucket = u->bucket, .key = u->key, .abort_strays = u->strays_possible,
                          .keep_upload_id = u->upload_id};
    if (failed) {
        cs.abort_upload_id = u->upload_id;
        if (u->complete_sent) {
            cs.etags = etags;
            cs.n_etags = 2;
        }
    }
    if (s3_cleanup_start(u->op.c, &cs))
        s3_result_append(&u->outcome, "%s", "; no cleanup (out of memory): left for gc");
}

static void up_report(up_op *u)
{
    u->op.res = u->outcome;
    u->op.res.list = NULL;
    u->op.res.parts = (int)u->n_parts;
    s3_op_finish(&u->op);
}

/* Fails the upload now: what is in flight is dropped, the caller is told, the cleanup runs
 * detached. suffix (may be NULL) is appended to r's error. */
static void up_fail(up_op *u, const s3_result *r, const char *suffix)
{
    u->outcome = *r;
    u->outcome.list = NULL;
    if (suffix) s3_result_append(&u->outcome, "%s", suffix);
    up_drop_children(u);
    if (u->phase != U_PRECHECK && u->phase != U_SINGLE) up_cleanup(u, true);
    up_report(u);
}

static void up_fail_start(up_op *u, int rc, const char *what)
{
    s3_result e;
    memset(&e, 0, sizeof e);
    s3_result_fail(&e, rc, "%s s3://%s/%s: could not start: %s", what, u->bucket, u->key,
                   strerrordesc_np(-rc));
    up_fail(u, &e, NULL);
}

static void up_succeed(up_op *u)
{
    /* DURABILITY: CompleteMultipartUpload was acknowledged (or settled as ours by HEAD) over
     * parts whose stored copies were checked (or the object was read back): the object is
     * complete and holds our bytes; a crash from here on leaves it. */
    u->outcome.write_check = u->check;
    if (u->strays_possible) up_cleanup(u, false);
    up_report(u);
}

static void up_read_next(up_op *u);

static void up_read_done(void *ctx, const s3_result *r)
{
    up_op *u = ctx;
    u->reader = NULL;
    size_t i = u->back_next - 1;
    uint64_t off, n;
    s3_part_range(u->len, u->part_size, i, &off, &n);
    if (r->err) {
        char sfx[64];
        snprintf(sfx, sizeof sfx, " (reading part %zu of %zu back)", i + 1, u->n_parts);
        up_fail(u, r, sfx);
        return;
    }
    if (r->bytes != n || r->object_size != u->len || memcmp(u->back, u->buf + off, (size_t)n)) {
        s3_result e;
        memset(&e, 0, sizeof e);
        s3_result_fail(&e, DSTL_EREMOTE,
                       "upload s3://%.63s/%.200s: the stored object differs from what was sent "
                       "in part %zu of %zu (read back: %" PRIu64 " of %" PRIu64 " bytes at offset "
                       "%" PRIu64 ", object %" PRIu64 " bytes)",
                       u->bucket, u->key, i + 1, u->n_parts, r->bytes, n, off, r->object_size);
        up_fail(u, &e, NULL); /* the cleanup deletes the object: it is ours and wrong */
        return;
    }
    if (u->back_next < u->n_parts) up_read_next(u);
    else {
        u->check = S3_CHECK_READ_BACK;
        up_succeed(u);
    }
}

static void up_read_next(up_op *u)
{
    uint64_t off, n;
    s3_part_range(u->len, u->part_size, u->back_next++, &off, &n);
    int rc = 0;
    if (!u->back) u->back = malloc(u->part_size);
    if (!u->back) rc = -ENOMEM;
    else S3_CHILD(s3_get_object(u->op.c, u->bucket, u->key, off, u->back, (size_t)n, &u->reader,
                                up_read_done, u), u->reader);
    if (rc) up_fail_start(u, rc, "GET (read back)");
}

static void up_complete_done(void *ctx, const s3_result *r)
{
    up_op *u = ctx;
    u->complete = NULL;
    if (r->err) {
        up_fail(u, r, NULL);
        return;
    }
    u->outcome = *r;
    u->outcome.list = NULL;
    snprintf(u->done_etag, sizeof u->done_etag, "%s", r->etag);
    if (u->check == S3_CHECK_NONE) {
        u->phase = U_READ_BACK; /* S3_VERIFY_READ_BACK: no part was checked on its way */
        up_read_next(u);
        return;
    }
    up_succeed(u);
}

static void up_part_done(void *ctx, const s3_result *r)
{
    part_slot *p = ctx;
    up_op *u = p->u;
    p->child = NULL;
    if (r->err) {
        char sfx[64];
        snprintf(sfx, sizeof sfx, " (part %d of %zu)", p->number, u->n_parts);
        up_fail(u, r, sfx);
        return;
    }
    snprintf(p->info.etag, sizeof p->info.etag, "%.71s", r->etag);
    if (u->n_parts_done++ == 0 || r->write_check < u->check) u->check = r->write_check;
    if (u->n_parts_done < u->n_parts) return;
    s3_part_info *infos = malloc(u->n_parts * sizeof *infos);
    int rc = infos ? 0 : -ENOMEM;
    if (!rc) {
        for (size_t i = 0; i < u->n_parts; i++) infos[i] = u->parts[i].info;
        if (s3_multipart_etag(infos, u->n_parts, u->expect)) u->expect[0] = '\0';
        u->phase = U_COMPLETE;
        u->complete_sent = true;
        /* DURABILITY: the object exists only once CompleteMultipartUpload is acknowledged;
         * until then a crash leaves an incomplete upload (no object), which dstl gc aborts. */
        S3_CHILD(s3_complete_multipart_upload(u->op.c, u->bucket, u->key, u->upload_id, infos,
                                              u->n_parts, u->inm, &u->complete, up_complete_done,
                                              u), u->complete);
        free(infos); /* the Complete op built its body from them */
    }
    if (rc) up_fail_start(u, rc, "CompleteMultipartUpload");
}

static void up_create_done(void *ctx, const s3_result *r)
{
    up_op *u = ctx;
    u->create = NULL;
    /* a Create that took more than one attempt (or that failed after being sent) may have
     * made uploads we never heard of */
    u->strays_possible = r->attempts > 1 || (r->err && r->attempts > 0);
    if (r->err) {
        up_fail(u, r, NULL);
        return;
    }
    snprintf(u->upload_id, sizeof u->upload_id, "%s", r->upload_id);
    u->phase = U_PARTS;
    for (size_t i = 0; i < u->n_parts; i++) {
        part_slot *p = &u->parts[i];
        uint64_t off, n;
        s3_part_range(u->len, u->part_size, i, &off, &n);
        int rc;
        S3_CHILD(s3_upload_part(u->op.c, u->bucket, u->key, u->upload_id, p->number,
                                u->buf + off, (size_t)n, &p->child, up_part_done, p), p->child);
        if (rc) {
            up_fail_start(u, rc, "UploadPart");
            return;
        }
    }
}

static void up_single_done(void *ctx, const s3_result *r)
{
    up_op *u = ctx;
    u->single = NULL;
    u->outcome = *r; /* the PUT op reported (and cleans up after itself) */
    up_report(u);
}

static int up_start_create(up_op *u)
{
    int rc;
    u->phase = U_CREATE;
    S3_CHILD(s3_create_multipart_upload(u->op.c, u->bucket, u->key, &u->create, up_create_done,
                                        u), u->create);
    return rc;
}

/* Some servers (RGW 16) ignore If-None-Match on CompleteMultipartUpload: a HEAD before the
 * upload refuses an existing key there (a writer racing us between the HEAD and the Complete
 * is not caught; where the server honours the header, the Complete catches it). */
static void up_precheck_done(void *ctx, const s3_result *r)
{
    up_op *u = ctx;
    u->precheck = NULL;
    if (r->err == 0) {
        s3_result_fail(&u->outcome, -EEXIST,
                       "upload s3://%s/%s: the object exists (If-None-Match; checked by HEAD)",
                       u->bucket, u->key);
        u->outcome.http_status = 412;
    } else if (r->err != -ENOENT) {
        u->outcome = *r;
    } else {
        int rc = up_start_create(u);
        if (!rc) return;
        s3_result_fail(&u->outcome, rc, "CreateMultipartUpload s3://%s/%s: could not start",
                       u->bucket, u->key);
    }
    up_report(u);
}

static void up_cancel(s3_op *op)
{
    up_op *u = (up_op *)op;
    if (u->phase == U_SINGLE) {
        s3_op_cancel(u->single); /* the PUT reports -ECANCELED through up_single_done (this
                                  * turn) and cleans up after itself */
        return;
    }
    if (u->create) u->strays_possible = true; /* the Create may have been carried out */
    s3_result e;
    memset(&e, 0, sizeof e);
    s3_result_fail(&e, -ECANCELED, "upload s3://%s/%s: cancelled", u->bucket, u->key);
    up_fail(u, &e, NULL);
}

int s3_upload(s3_client *c, const char *bucket, const char *key, const void *buf, size_t len,
              const s3_upload_opts *opts, s3_op **op_out, s3_done_fn cb, void *ctx)
{
    s3_upload_opts o = opts ? *opts : (s3_upload_opts){0};
    if (!o.part_size) o.part_size = DEFAULT_PART_SIZE;
    if (!o.multipart_threshold) o.multipart_threshold = DEFAULT_MULTIPART_THRESHOLD;
    if (!c || !bucket || !*bucket || !key || !*key || strlen(key) > 1024 || (len && !buf) || !cb)
        return -EINVAL;
    bool multipart = len >= o.multipart_threshold && len > 0;
    if (multipart && s3_part_count(len, o.part_size) > 10000) return -EINVAL;
    up_op *u = (up_op *)s3_op_new(c, sizeof *u, cb, ctx);
    if (!u) return -ENOMEM;
    u->op.cancel = up_cancel;
    u->op.destroy = up_destroy;
    u->bucket = strdup(bucket);
    u->key = strdup(key);
    u->buf = buf;
    u->len = len;
    u->part_size = o.part_size;
    u->inm = o.if_none_match;
    int rc = u->bucket && u->key ? 0 : -ENOMEM;
    if (!rc && !multipart) {
        u->phase = U_SINGLE;
        S3_CHILD(s3_put_object(c, bucket, key, buf, len, o.if_none_match, &u->single,
                               up_single_done, u), u->single);
    } else if (!rc) {
        u->n_parts = s3_part_count(len, o.part_size);
        u->parts = calloc(u->n_parts, sizeof *u->parts);
        if (!u->parts) rc = -ENOMEM;
        for (size_t i = 0; !rc && i < u->n_parts; i++) {
            u->parts[i].u = u;
            u->parts[i].number = (int)i + 1;
            u->parts[i].info.part_number = (int)i + 1;
        }
        if (!rc && o.if_none_match) {
            u->phase = U_PRECHECK;
            S3_CHILD(s3_head_object(c, bucket, key, &u->precheck, up_precheck_done, u),
                     u->precheck);
        } else if (!rc) {
            rc = up_start_create(u);
        }
    }
    if (rc) {
        s3_op_discard(&u->op);
        return rc;
    }
    if (op_out) *op_out = &u->op;
    return 0;
}
