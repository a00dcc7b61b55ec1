/*
 * s3/upload.c — s3_upload, a write that must not leave garbage or lie about its outcome: a
 * single PUT (s3/put.c) below the threshold, else a parallel multipart upload (Create, parts,
 * Complete); and the part math it cuts the buffer with.
 *
 * Integrity. The engine checks every part like a PUT (verify_write); a part whose stored copy
 * differs is simply re-sent (the same part number replaces it). Under S3_VERIFY_READ_BACK,
 * when no part was checked on its way, the object is read back after its Complete, one
 * part-sized range at a time; a copy that differs is deleted and the upload fails. An
 * ambiguous answer to the Complete is settled in s3/put.c.
 *
 * Outcomes and cleanup. An outcome is reported as soon as it is known — success, failure of
 * the first part or Complete that fails after every attempt, or cancel (the next loop turn) —
 * and what may be left on the server is then removed by a detached cleanup (s3/cleanup.c)
 * that owns copies of what it needs: the multipart upload is aborted; HEAD/DELETE if a
 * Complete was sent; stray uploads of a retried Create are aborted (after a success, only the
 * strays). A single PUT cleans up after itself (s3/put.c).
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

#include "s3/s3_int.h"

size_t s3_part_count(uint64_t len, uint64_t part_size)
{
    return (size_t)((len + part_size - 1) / part_size);
}

void s3_part_range(uint64_t len, uint64_t part_size, size_t i, uint64_t *off, uint64_t *n)
{
    *off = (uint64_t)i * part_size;
    *n = *off >= len ? 0 : (len - *off < part_size ? len - *off : part_size);
}

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
        S3_CHILD(s3_put_object_md5(c, bucket, key, buf, len, o.if_none_match, o.body_md5_etag, &u->single,
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
