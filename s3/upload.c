/*
 * s3/upload.c — writes that must not leave garbage or lie about their outcome: PutObject,
 * CompleteMultipartUpload, and s3_upload (single PUT or parallel multipart upload).
 *
 * Ambiguity. With hedges and retries, a failed or refused attempt may come after an earlier
 * attempt of ours that the server carried out although we never saw its answer:
 *  - PUT with If-None-Match: a 412 after more than one attempt may be our own object;
 *  - Complete: NoSuchUpload (or 412) after more than one attempt may be our own completion.
 * Both are settled by a HEAD comparing the ETag with ours (the MD5 of the body, or the
 * multipart ETag computed from the parts' ETags): equal means success.
 *
 * Cleanup. Nothing is left behind when an upload fails or is cancelled:
 *  - a PUT that may have landed (an attempt got past connecting without a 4xx) is HEADed and
 *    deleted when its ETag is ours;
 *  - a multipart upload is aborted; if a Complete was attempted, the object is HEADed and
 *    deleted when its ETag is ours;
 *  - CreateMultipartUpload is never hedged, but a retried one may have created an upload we
 *    never heard of: uploads of the same key with another id are listed and aborted.
 * Cleanup requests have their own bounded attempts; a cleanup failure is named in r->error
 * (gc finds what is left).
 *
 * DURABILITY: s3_upload's callback with err 0 means the object is complete in the store: the
 * single PUT or the CompleteMultipartUpload was acknowledged (or, after an ambiguous answer,
 * a HEAD found our ETag). A crash before that leaves at most an incomplete multipart upload
 * (removed by gc through ListMultipartUploads) or a complete orphan object.
 *
 * Threads: the client's thread only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "s3/s3.h"

/* Compares ETags, ignoring quotes (servers differ). */
static bool etag_eq(const char *a, const char *b)
{
    if (*a == '"') a++;
    if (*b == '"') b++;
    size_t la = strlen(a), lb = strlen(b);
    if (la && a[la - 1] == '"') la--;
    if (lb && b[lb - 1] == '"') lb--;
    return la && la == lb && strncasecmp(a, b, la) == 0;
}

/* Starts a child op (internal: its callback is the parent's handler). */
#define CHILD(call, slot)                                                                         \
    do {                                                                                          \
        int crc_ = (call);                                                                        \
        if (crc_ == 0) (slot)->internal = true;                                                   \
        else (slot) = NULL;                                                                       \
        rc = crc_;                                                                                \
    } while (0)

/* ==== PutObject ==== */

typedef enum { P_PUT, P_RESOLVE, P_CLEAN_HEAD, P_CLEAN_DELETE } put_phase;

typedef struct put_op {
    s3_op op;
    char *bucket, *key;
    const void *body;
    size_t len;
    bool inm;
    put_phase phase;
    s3_req *req;
    s3_op *child;
    s3_result outcome; /* what to report once the cleanup is over */
    char md5[72];
} put_op;

static void put_destroy(s3_op *op)
{
    put_op *p = (put_op *)op;
    if (p->req) s3_req_cancel(p->req);
    free(p->bucket);
    free(p->key);
}

static void put_report(put_op *p)
{
    p->op.res = p->outcome;
    s3_op_finish(&p->op);
}

static void put_child_done(void *ctx, const s3_result *r);

static void put_head(put_op *p, put_phase phase)
{
    int rc;
    p->phase = phase;
    if (!p->md5[0]) s3_md5_etag(p->body, p->len, p->md5);
    CHILD(s3_head_object(p->op.c, p->bucket, p->key, &p->child, put_child_done, p), p->child);
    if (rc) {
        if (phase == P_CLEAN_HEAD)
            snprintf(p->outcome.error + strlen(p->outcome.error),
                     sizeof p->outcome.error - strlen(p->outcome.error),
                     "; could not check for a partial write");
        put_report(p);
    }
}

static void put_child_done(void *ctx, const s3_result *r)
{
    put_op *p = ctx;
    p->child = NULL;
    size_t el = strlen(p->outcome.error);
    switch (p->phase) {
    case P_RESOLVE:
        if (!r->err && etag_eq(r->etag, p->md5)) {
            /* the 412 was our own earlier attempt: success */
            int attempts = p->outcome.attempts;
            memset(&p->outcome, 0, sizeof p->outcome);
            p->outcome.attempts = attempts;
            snprintf(p->outcome.etag, sizeof p->outcome.etag, "%s", r->etag);
            if (p->op.cancelled) {
                put_head(p, P_CLEAN_HEAD); /* cancelled meanwhile: remove what is ours */
                return;
            }
        }
        put_report(p);
        return;
    case P_CLEAN_HEAD:
        if (!r->err && etag_eq(r->etag, p->md5)) {
            int rc;
            p->phase = P_CLEAN_DELETE;
            CHILD(s3_delete_object(p->op.c, p->bucket, p->key, &p->child, put_child_done, p),
                  p->child);
            if (!rc) return;
        } else if (r->err && r->err != -ENOENT) {
            snprintf(p->outcome.error + el, sizeof p->outcome.error - el,
                     "; could not check for a partial write: %s", r->error);
        }
        put_report(p);
        return;
    case P_CLEAN_DELETE:
        if (r->err)
            snprintf(p->outcome.error + el, sizeof p->outcome.error - el,
                     "; could not delete what an attempt wrote: %s", r->error);
        put_report(p);
        return;
    default:
        put_report(p);
    }
}

static void put_done(void *ctx, s3_req *req, const s3_reply *rep)
{
    (void)req;
    put_op *p = ctx;
    p->req = NULL;
    s3_result_set(&p->outcome, "PUT", p->bucket, p->key, rep);
    if (!rep->err) {
        put_report(p);
    } else if (rep->err == -EEXIST && p->inm && rep->attempts > 1) {
        put_head(p, P_RESOLVE);
    } else if (rep->maybe_applied) {
        put_head(p, P_CLEAN_HEAD);
    } else {
        put_report(p);
    }
}

static void put_cancel(s3_op *op)
{
    put_op *p = (put_op *)op;
    if (p->phase != P_PUT) return; /* resolving or cleaning up: finishes by itself */
    int launched = p->req ? s3_req_launched(p->req) : 0;
    if (p->req) s3_req_cancel(p->req);
    p->req = NULL;
    s3_result_fail(&p->outcome, -ECANCELED, "PUT s3://%s/%s: cancelled", p->bucket, p->key);
    p->outcome.attempts = launched;
    if (launched) put_head(p, P_CLEAN_HEAD);
    else put_report(p);
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
    int rc = p->bucket && p->key ? 0 : -ENOMEM;
    if (!rc) {
        s3_kv h[] = {{"if-none-match", "*"}};
        s3_req_spec spec = {.method = "PUT", .bucket = bucket, .key = key, .headers = h,
                            .n_headers = if_none_match ? 1 : 0, .body = body, .body_len = len};
        rc = s3_req_start(c, &spec, put_done, p, &p->req);
    }
    if (rc) {
        s3_op_discard(&p->op);
        return rc;
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
    free(m->bucket);
    free(m->key);
    free(m->upload_id);
    free(m->body);
}

static int check_complete(void *ctx, s3_reply *rep)
{
    complete_op *m = ctx;
    char etag[128] = "";
    int rc = s3_xml_parse_complete(rep->body, rep->body_len, etag, sizeof etag, rep->s3_code,
                                   sizeof rep->s3_code, rep->message, sizeof rep->message);
    /* some servers give the ETag without its quotes: quote it like every other ETag */
    if (rc == 0 && etag[0])
        snprintf(rep->etag, sizeof rep->etag, etag[0] == '"' ? "%.120s" : "\"%.120s\"", etag);
    (void)m;
    return rc; /* 1: an error inside a 200 (classified by its code) */
}

static void complete_child_done(void *ctx, const s3_result *r)
{
    complete_op *m = ctx;
    m->child = NULL;
    if (!r->err && m->expect[0] && etag_eq(r->etag, m->expect)) {
        int attempts = m->outcome.attempts;
        memset(&m->outcome, 0, sizeof m->outcome);
        m->outcome.attempts = attempts;
        snprintf(m->outcome.etag, sizeof m->outcome.etag, "%s", r->etag);
    }
    m->op.res = m->outcome;
    s3_op_finish(&m->op);
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
    if ((rep->err == -ENOENT || rep->err == -EEXIST) && rep->attempts > 1 && m->expect[0]) {
        int rc;
        CHILD(s3_head_object(m->op.c, m->bucket, m->key, &m->child, complete_child_done, m),
              m->child);
        if (!rc) return;
    }
    m->op.res = m->outcome;
    s3_op_finish(&m->op);
}

static void complete_cancel(s3_op *op)
{
    complete_op *m = (complete_op *)op;
    if (m->child) return; /* resolving: finishes by itself */
    if (m->req) {
        m->op.res.attempts = s3_req_launched(m->req);
        s3_req_cancel(m->req);
        m->req = NULL;
    }
    s3_result_fail(&m->op.res, -ECANCELED, "CompleteMultipartUpload s3://%s/%s: cancelled",
                   m->bucket, m->key);
    s3_op_finish(op);
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
    U_SINGLE,   /* a PutObject child */
    U_PRECHECK, /* If-None-Match multipart: HEAD first */
    U_CREATE,
    U_PARTS,
    U_COMPLETE,
    U_CLEANUP,  /* abort, check, abort strays: one step at a time */
} up_phase;

typedef enum { C_ABORT, C_HEAD, C_DELETE, C_LIST, C_ABORT_STRAYS, C_DONE } cleanup_step;

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
    s3_op *single, *precheck, *create, *complete, *step_child;
    char upload_id[512];
    part_slot *parts;
    size_t n_parts, n_parts_done;
    int n_live; /* children in flight */
    bool create_launched, create_retried, complete_tried, failed;
    s3_result outcome;
    cleanup_step step;
    char expect[72];
    s3_list strays;
    size_t stray_next;
} up_op;

static void up_destroy(s3_op *op)
{
    up_op *u = (up_op *)op;
    free(u->bucket);
    free(u->key);
    free(u->parts);
    s3_list_clear(&u->strays);
}

static void up_append(up_op *u, const char *fmt, const char *detail)
{
    size_t el = strlen(u->outcome.error);
    snprintf(u->outcome.error + el, sizeof u->outcome.error - el, fmt, detail);
}

static void up_fail(up_op *u, const s3_result *r)
{
    if (u->failed) return;
    u->failed = true;
    u->outcome = *r;
    u->outcome.list = NULL;
}

static void up_report(up_op *u)
{
    u->op.res = u->outcome;
    u->op.res.parts = (int)u->n_parts;
    s3_op_finish(&u->op);
}

static void up_cleanup_next(up_op *u);
static void up_step_done(void *ctx, const s3_result *r);

/* Starts the next cleanup step that applies; reports when none is left. */
static void up_cleanup_next(up_op *u)
{
    s3_client *c = u->op.c;
    int rc = 0;
    u->phase = U_CLEANUP;
    for (;;) {
        switch (u->step) {
        case C_ABORT:
            if (!u->failed || !u->upload_id[0]) break;
            CHILD(s3_abort_multipart_upload(c, u->bucket, u->key, u->upload_id, &u->step_child,
                                            up_step_done, u), u->step_child);
            if (!rc) return;
            break;
        case C_HEAD:
            if (!u->failed || !u->complete_tried || !u->expect[0]) break;
            CHILD(s3_head_object(c, u->bucket, u->key, &u->step_child, up_step_done, u),
                  u->step_child);
            if (!rc) return;
            break;
        case C_DELETE:
            break; /* started by the HEAD step when the object is ours */
        case C_LIST:
            if (!u->create_retried) break;
            CHILD(s3_list_multipart_uploads(c, u->bucket, u->key, NULL, NULL, &u->step_child,
                                            up_step_done, u), u->step_child);
            if (!rc) return;
            break;
        case C_ABORT_STRAYS:
            while (u->stray_next < u->strays.n_uploads) {
                const s3_upload_info *s = &u->strays.uploads[u->stray_next++];
                if (strcmp(s->key, u->key) != 0 || strcmp(s->upload_id, u->upload_id) == 0)
                    continue;
                CHILD(s3_abort_multipart_upload(c, u->bucket, u->key, s->upload_id,
                                                &u->step_child, up_step_done, u), u->step_child);
                if (!rc) return;
            }
            break;
        case C_DONE:
            up_report(u);
            return;
        }
        if (rc) up_append(u, "; cleanup step %s could not start", "");
        rc = 0;
        u->step++;
    }
}

static void up_step_done(void *ctx, const s3_result *r)
{
    up_op *u = ctx;
    u->step_child = NULL;
    int rc = 0;
    switch (u->step) {
    case C_ABORT:
        if (r->err) up_append(u, "; abort failed, upload left for gc: %s", r->error);
        u->step = C_HEAD;
        break;
    case C_HEAD:
        u->step = C_LIST;
        if (!r->err && etag_eq(r->etag, u->expect)) {
            /* our Complete landed although we saw it fail: remove the object */
            u->step = C_DELETE;
            CHILD(s3_delete_object(u->op.c, u->bucket, u->key, &u->step_child, up_step_done, u),
                  u->step_child);
            if (!rc) return;
            up_append(u, "; could not delete the completed object%s", "");
            u->step = C_LIST;
        }
        break;
    case C_DELETE:
        if (r->err) up_append(u, "; could not delete the completed object: %s", r->error);
        u->step = C_LIST;
        break;
    case C_LIST:
        if (r->err) up_append(u, "; could not list uploads to remove strays: %s", r->error);
        else if (r->list) {
            /* keep the uploads of our key (a copy: r->list dies with the child) */
            for (size_t i = 0; i < r->list->n_uploads; i++) {
                const s3_upload_info *s = &r->list->uploads[i];
                if (strcmp(s->key, u->key) != 0 || strcmp(s->upload_id, u->upload_id) == 0)
                    continue;
                s3_upload_info *na = realloc(u->strays.uploads,
                                             (u->strays.n_uploads + 1) * sizeof *na);
                if (!na) break;
                u->strays.uploads = na;
                na[u->strays.n_uploads] = *s;
                na[u->strays.n_uploads].key = strdup(s->key);
                na[u->strays.n_uploads].upload_id = strdup(s->upload_id);
                if (!na[u->strays.n_uploads].key || !na[u->strays.n_uploads].upload_id) {
                    free(na[u->strays.n_uploads].key);
                    free(na[u->strays.n_uploads].upload_id);
                    break;
                }
                u->strays.n_uploads++;
            }
        }
        u->step = C_ABORT_STRAYS;
        break;
    case C_ABORT_STRAYS:
        if (r->err) up_append(u, "; could not abort a stray upload: %s", r->error);
        break; /* stays at this step until every stray is tried */
    default:
        break;
    }
    up_cleanup_next(u);
}

/* Called whenever a child of the create/parts/complete phases ended. */
static void up_settle(up_op *u)
{
    if (u->n_live > 0) return;
    if (u->failed || u->op.cancelled) {
        if (u->op.cancelled && !u->failed) {
            u->failed = true;
            s3_result_fail(&u->outcome, -ECANCELED, "upload s3://%s/%s: cancelled", u->bucket,
                           u->key);
        }
        u->step = C_ABORT;
        up_cleanup_next(u);
    }
}

static void up_complete_done(void *ctx, const s3_result *r)
{
    up_op *u = ctx;
    u->complete = NULL;
    u->n_live--;
    if (r->err) {
        up_fail(u, r);
        up_settle(u);
        return;
    }
    u->outcome = *r;
    u->outcome.list = NULL;
    /* success: only stray uploads from a retried Create may need removing */
    u->step = C_LIST;
    up_cleanup_next(u);
}

static void up_part_done(void *ctx, const s3_result *r)
{
    part_slot *p = ctx;
    up_op *u = p->u;
    p->child = NULL;
    u->n_live--;
    if (r->err) {
        if (!u->failed && r->err != -ECANCELED) {
            up_fail(u, r);
            char what[64];
            snprintf(what, sizeof what, " (part %d of %zu)", p->number, u->n_parts);
            up_append(u, "%s", what);
        }
        for (size_t i = 0; i < u->n_parts; i++)
            if (u->parts[i].child) s3_op_cancel(u->parts[i].child);
        up_settle(u);
        return;
    }
    snprintf(p->info.etag, sizeof p->info.etag, "%.71s", r->etag);
    u->n_parts_done++;
    if (u->failed || u->op.cancelled) {
        up_settle(u);
        return;
    }
    if (u->n_parts_done < u->n_parts) return;
    s3_part_info *infos = malloc(u->n_parts * sizeof *infos);
    int rc = infos ? 0 : -ENOMEM;
    if (!rc) {
        for (size_t i = 0; i < u->n_parts; i++) infos[i] = u->parts[i].info;
        if (s3_multipart_etag(infos, u->n_parts, u->expect)) u->expect[0] = '\0';
        u->phase = U_COMPLETE;
        u->complete_tried = true;
        /* DURABILITY: the object exists only once CompleteMultipartUpload is acknowledged;
         * until then a crash leaves an incomplete upload (no object), which dstl gc aborts. */
        CHILD(s3_complete_multipart_upload(u->op.c, u->bucket, u->key, u->upload_id, infos,
                                           u->n_parts, u->inm, &u->complete, up_complete_done, u),
              u->complete);
        free(infos); /* the Complete op built its body from them */
    }
    if (rc) {
        s3_result e = {0};
        s3_result_fail(&e, rc, "CompleteMultipartUpload s3://%s/%s: could not start", u->bucket,
                       u->key);
        up_fail(u, &e);
        up_settle(u);
        return;
    }
    u->n_live++;
}

static void up_create_done(void *ctx, const s3_result *r)
{
    up_op *u = ctx;
    u->create = NULL;
    u->n_live--;
    /* a Create that took more than one attempt (or that failed after being sent) may have
     * made uploads we never heard of */
    u->create_retried = r->attempts > 1 || (r->err && r->attempts > 0);
    if (r->err) {
        up_fail(u, r);
        up_settle(u);
        return;
    }
    snprintf(u->upload_id, sizeof u->upload_id, "%s", r->upload_id);
    if (u->op.cancelled) {
        up_settle(u);
        return;
    }
    u->phase = U_PARTS;
    for (size_t i = 0; i < u->n_parts; i++) {
        part_slot *p = &u->parts[i];
        uint64_t off, n;
        s3_part_range(u->len, u->part_size, i, &off, &n);
        int rc;
        CHILD(s3_upload_part(u->op.c, u->bucket, u->key, u->upload_id, p->number, u->buf + off,
                             (size_t)n, &p->child, up_part_done, p), p->child);
        if (rc) {
            s3_result e = {0};
            s3_result_fail(&e, rc, "UploadPart s3://%s/%s: could not start part %d", u->bucket,
                           u->key, p->number);
            up_fail(u, &e);
            for (size_t k = 0; k < i; k++)
                if (u->parts[k].child) s3_op_cancel(u->parts[k].child);
            up_settle(u);
            return;
        }
        u->n_live++;
    }
}

static void up_single_done(void *ctx, const s3_result *r)
{
    up_op *u = ctx;
    u->single = NULL;
    u->outcome = *r;
    up_report(u);
}

static int up_start_create(up_op *u)
{
    int rc;
    u->phase = U_CREATE;
    CHILD(s3_create_multipart_upload(u->op.c, u->bucket, u->key, &u->create, up_create_done, u),
          u->create);
    if (!rc) u->n_live = 1;
    return rc;
}

/* Some servers (RGW 16) ignore If-None-Match on CompleteMultipartUpload: a HEAD before the
 * upload refuses an existing key there (a writer racing us between the HEAD and the Complete
 * is not caught; where the server honours the header, the Complete catches it). */
static void up_precheck_done(void *ctx, const s3_result *r)
{
    up_op *u = ctx;
    u->precheck = NULL;
    if (u->op.cancelled) {
        s3_result_fail(&u->outcome, -ECANCELED, "upload s3://%s/%s: cancelled", u->bucket, u->key);
    } else if (r->err == 0) {
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
    switch (u->phase) {
    case U_PRECHECK:
        if (u->precheck) s3_op_cancel(u->precheck);
        break;
    case U_SINGLE:
        if (u->single) s3_op_cancel(u->single); /* reports through up_single_done */
        break;
    case U_CREATE:
        if (u->create) s3_op_cancel(u->create);
        break;
    case U_PARTS:
        for (size_t i = 0; i < u->n_parts; i++)
            if (u->parts[i].child) s3_op_cancel(u->parts[i].child);
        break;
    case U_COMPLETE:
        if (u->complete) s3_op_cancel(u->complete);
        break;
    case U_CLEANUP:
        break; /* already on its way out */
    }
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
        CHILD(s3_put_object(c, bucket, key, buf, len, o.if_none_match, &u->single,
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
            CHILD(s3_head_object(c, bucket, key, &u->precheck, up_precheck_done, u), u->precheck);
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
