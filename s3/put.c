/*
 * s3/put.c — the two writes that settle ambiguous answers: PutObject and
 * CompleteMultipartUpload (s3_upload, in s3/upload.c, is built on them).
 *
 * Integrity. The engine checks every PUT it sends against what the server stored
 * (verify_write: the answer's CRC32C, else the signed SHA-256, else an MD5 ETag); a copy that
 * differs is never acknowledged. A PUT's request ends at a differing copy (end_on_corrupt) and
 * the op replaces it within what is left of max_attempts: with If-None-Match the corrupt
 * object — recognised by the ETag it came back with — is deleted first, or the retry would
 * meet 412. Under S3_VERIFY_READ_BACK an unchecked PUT is read back before success.
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
 * every attempt, or cancel (the next loop turn). A PUT that may have landed is then removed by
 * a detached cleanup (s3/cleanup.c) that owns copies of what it needs: HEAD, DELETE when the
 * ETag is ours (or a corrupt copy's). A Complete cleans up nothing itself (s3_upload does).
 * Rule: an outcome reported as success is never cleaned up; a cancel or failure is reported
 * before any cleanup request goes out.
 *
 * Threads: the client's thread only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
                        .max_attempts = left, .verify_write = true, .end_on_corrupt = true,
                        .body_md5_etag = p->md5[0] ? p->md5 : NULL};
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
    return s3_put_object_md5(c, bucket, key, body, len, if_none_match, NULL, op_out, cb, ctx);
}

int s3_put_object_md5(s3_client *c, const char *bucket, const char *key, const void *body, size_t len,
                      bool if_none_match, const char *body_md5_etag, s3_op **op_out, s3_done_fn cb, void *ctx)
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
    if (body_md5_etag) snprintf(p->md5, sizeof p->md5, "%s", body_md5_etag);
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
