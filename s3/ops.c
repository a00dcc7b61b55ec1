/*
 * s3/ops.c — the one-request operations (GET, HEAD, DELETE, lists, CreateMultipartUpload,
 * UploadPart, AbortMultipartUpload, buckets) and DeleteObjects (one request per 1,000 keys).
 *
 * Each op is a thin layer over one engine request: it builds the spec (query, signed
 * headers), checks a 2xx answer before it wins (a malformed XML answer is retried like a
 * network error), and turns the reply into the s3_result. The engine checks what is common
 * to requests: a GET's 206 against the range asked for (a 200 has the range taken out of the
 * whole object), an UploadPart's stored copy against the body (verify_write). PUT and
 * Complete, which need to resolve ambiguous outcomes and clean up, are in s3/put.c; s3_upload
 * is in s3/upload.c.
 *
 * Threads: the client's thread only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "s3/s3_int.h"

typedef enum {
    K_GET,
    K_HEAD,
    K_DELETE,
    K_LIST_OBJECTS,
    K_LIST_UPLOADS,
    K_LIST_PARTS,
    K_CREATE_MPU,
    K_UPLOAD_PART,
    K_ABORT_MPU,
    K_CREATE_BUCKET,
    K_DELETE_BUCKET,
} kind;

typedef struct simple_op {
    s3_op op;
    kind kind;
    const char *what;
    char *bucket, *key;
    s3_req *req;
    uint64_t offset;
    s3_list list;
    char *body; /* owned request body (CreateBucket configuration) */
} simple_op;

static void simple_destroy(s3_op *op)
{
    simple_op *s = (simple_op *)op;
    if (s->req) s3_req_cancel(s->req);
    s3_list_clear(&s->list);
    free(s->bucket);
    free(s->key);
    free(s->body);
}

static void simple_cancel(s3_op *op)
{
    simple_op *s = (simple_op *)op;
    if (s->req) {
        op->res.attempts = s3_req_launched(s->req);
        s3_req_cancel(s->req);
        s->req = NULL;
    }
    s3_result_fail(&op->res, -ECANCELED, "%s s3://%s/%s: cancelled", s->what, s->bucket,
                   s->key ? s->key : "");
    s3_op_finish(op);
}

static int check_list(void *ctx, s3_reply *rep)
{
    simple_op *s = ctx;
    s3_list_clear(&s->list);
    int rc = s->kind == K_LIST_OBJECTS   ? s3_xml_parse_list_objects(rep->body, rep->body_len, &s->list)
             : s->kind == K_LIST_UPLOADS ? s3_xml_parse_list_uploads(rep->body, rep->body_len, &s->list)
                                         : s3_xml_parse_list_parts(rep->body, rep->body_len, &s->list);
    s->list.server_date_ms = rep->server_date_ms;
    return rc == 0 ? 0 : -EPROTO;
}

static int check_create_mpu(void *ctx, s3_reply *rep)
{
    simple_op *s = ctx;
    return s3_xml_parse_initiate(rep->body, rep->body_len, s->op.res.upload_id,
                                 sizeof s->op.res.upload_id) == 0 ? 0 : -EPROTO;
}

static int check_upload_part(void *ctx, s3_reply *rep)
{
    (void)ctx;
    return rep->etag[0] ? 0 : -EPROTO; /* Complete needs the part's ETag */
}

static void simple_done(void *ctx, s3_req *req, const s3_reply *rep)
{
    (void)req;
    simple_op *s = ctx;
    s->req = NULL;
    s3_result *res = &s->op.res;
    s3_result_set(res, s->what, s->bucket, s->key, rep);
    bool gone_ok = (s->kind == K_DELETE || s->kind == K_ABORT_MPU) && rep->err == -ENOENT;
    bool owned_ok = s->kind == K_CREATE_BUCKET && strcmp(rep->s3_code, "BucketAlreadyOwnedByYou") == 0;
    if (gone_ok || owned_ok) {
        res->err = 0;
        res->error[0] = '\0';
    }
    if (!res->err) {
        switch (s->kind) {
        case K_GET:
            res->bytes = rep->got;
            res->object_size = rep->object_size;
            if (rep->status == 200 && s->offset >= rep->object_size) {
                /* the whole object came (Range ignored) and the offset is past its end: what a
                 * server honouring Range answers with 416 */
                s3_result_fail(res, -ERANGE,
                               "GET s3://%s/%s: offset %" PRIu64 " is at or past the end of the "
                               "object (%" PRIu64 " bytes; the server ignored Range)",
                               s->bucket, s->key, s->offset, rep->object_size);
                res->bytes = 0;
            }
            break;
        case K_HEAD:
            res->bytes = res->object_size = rep->object_size;
            break;
        case K_LIST_OBJECTS:
        case K_LIST_UPLOADS:
        case K_LIST_PARTS:
            res->list = &s->list;
            break;
        default:
            break;
        }
    }
    if (s->kind == K_CREATE_MPU && res->err) res->upload_id[0] = '\0';
    s3_op_finish(&s->op);
}

/* label names the object in messages (the prefix of a listing); NULL: the key. */
static int simple_start(s3_client *c, kind k, const char *what, const char *bucket,
                        const char *key, const char *label, s3_req_spec *spec, s3_op **op_out,
                        s3_done_fn cb, void *ctx, simple_op **out)
{
    if (!c || !bucket || !*bucket || !cb) return -EINVAL;
    simple_op *s = (simple_op *)s3_op_new(c, sizeof *s, cb, ctx);
    if (!s) return -ENOMEM;
    s->op.cancel = simple_cancel;
    s->op.destroy = simple_destroy;
    s->kind = k;
    s->what = what;
    s->bucket = strdup(bucket);
    s->key = strdup(label ? label : key ? key : "");
    if (!s->bucket || !s->key) {
        s3_op_discard(&s->op);
        return -ENOMEM;
    }
    spec->bucket = bucket;
    spec->key = key;
    if (out) *out = s;
    int rc = s3_req_start(c, spec, simple_done, s, &s->req);
    if (rc) {
        s3_op_discard(&s->op);
        return rc;
    }
    if (op_out) *op_out = &s->op;
    return 0;
}

static bool key_ok(const char *key)
{
    return key && *key && strlen(key) <= 1024;
}

int s3_get_object(s3_client *c, const char *bucket, const char *key, uint64_t offset,
                  void *buf, size_t len, s3_op **op_out, s3_done_fn cb, void *ctx)
{
    return s3_get_object_stream(c, bucket, key, offset, buf, len, NULL, NULL, op_out, cb, ctx);
}

int s3_get_object_stream(s3_client *c, const char *bucket, const char *key, uint64_t offset,
                         void *buf, size_t len, s3_progress_fn progress, void *pctx,
                         s3_op **op_out, s3_done_fn cb, void *ctx)
{
    if (!key_ok(key) || (len && !buf)) return -EINVAL;
    if (len == 0) {
        /* nothing to read: a HEAD says whether the object exists */
        s3_req_spec spec = {.method = "HEAD"};
        return simple_start(c, K_HEAD, "GET", bucket, key, NULL, &spec, op_out, cb, ctx, NULL);
    }
    char range[64];
    snprintf(range, sizeof range, "bytes=%" PRIu64 "-%" PRIu64, offset, offset + len - 1);
    s3_kv h[] = {{"range", range}};
    s3_req_spec spec = {.method = "GET", .headers = h, .n_headers = 1, .get_buf = buf,
                        .get_len = len, .get_offset = offset, .progress = progress,
                        .progress_ctx = pctx};
    simple_op *s = NULL;
    /* the op's offset is set before the first attempt can answer (in the loop) */
    int rc = simple_start(c, K_GET, "GET", bucket, key, NULL, &spec, op_out, cb, ctx, &s);
    if (!rc) s->offset = offset;
    return rc;
}

int s3_head_object(s3_client *c, const char *bucket, const char *key, s3_op **op_out,
                   s3_done_fn cb, void *ctx)
{
    if (!key_ok(key)) return -EINVAL;
    s3_req_spec spec = {.method = "HEAD"};
    return simple_start(c, K_HEAD, "HEAD", bucket, key, NULL, &spec, op_out, cb, ctx, NULL);
}

int s3_delete_object(s3_client *c, const char *bucket, const char *key, s3_op **op_out,
                     s3_done_fn cb, void *ctx)
{
    if (!key_ok(key)) return -EINVAL;
    s3_req_spec spec = {.method = "DELETE"};
    return simple_start(c, K_DELETE, "DELETE", bucket, key, NULL, &spec, op_out, cb, ctx, NULL);
}

int s3_list_objects(s3_client *c, const char *bucket, const char *prefix, const char *delimiter,
                    const char *continuation, int max_keys, s3_op **op_out, s3_done_fn cb,
                    void *ctx)
{
    s3_kv q[5];
    size_t n = 0;
    char mk[16];
    q[n++] = (s3_kv){"list-type", "2"};
    if (prefix && *prefix) q[n++] = (s3_kv){"prefix", prefix};
    if (delimiter && *delimiter) q[n++] = (s3_kv){"delimiter", delimiter};
    if (continuation && *continuation) q[n++] = (s3_kv){"continuation-token", continuation};
    if (max_keys > 0) {
        snprintf(mk, sizeof mk, "%d", max_keys);
        q[n++] = (s3_kv){"max-keys", mk};
    }
    s3_req_spec spec = {.method = "GET", .query = q, .n_query = n, .check = check_list};
    return simple_start(c, K_LIST_OBJECTS, "ListObjectsV2", bucket, NULL, prefix, &spec, op_out, cb,
                        ctx, NULL);
}

int s3_list_multipart_uploads(s3_client *c, const char *bucket, const char *prefix,
                              const char *key_marker, const char *upload_id_marker,
                              s3_op **op_out, s3_done_fn cb, void *ctx)
{
    s3_kv q[4];
    size_t n = 0;
    q[n++] = (s3_kv){"uploads", ""};
    if (prefix && *prefix) q[n++] = (s3_kv){"prefix", prefix};
    if (key_marker && *key_marker) q[n++] = (s3_kv){"key-marker", key_marker};
    if (upload_id_marker && *upload_id_marker) q[n++] = (s3_kv){"upload-id-marker", upload_id_marker};
    s3_req_spec spec = {.method = "GET", .query = q, .n_query = n, .check = check_list};
    return simple_start(c, K_LIST_UPLOADS, "ListMultipartUploads", bucket, NULL, prefix, &spec, op_out,
                        cb, ctx, NULL);
}

int s3_create_multipart_upload(s3_client *c, const char *bucket, const char *key,
                               s3_op **op_out, s3_done_fn cb, void *ctx)
{
    if (!key_ok(key)) return -EINVAL;
    s3_kv q[] = {{"uploads", ""}};
    s3_req_spec spec = {.method = "POST", .query = q, .n_query = 1, .no_hedge = true,
                        .check = check_create_mpu};
    return simple_start(c, K_CREATE_MPU, "CreateMultipartUpload", bucket, key, NULL, &spec, op_out,
                        cb, ctx, NULL);
}

int s3_upload_part(s3_client *c, const char *bucket, const char *key, const char *upload_id,
                   int part_number, const void *body, size_t len, s3_op **op_out,
                   s3_done_fn cb, void *ctx)
{
    if (!key_ok(key) || !upload_id || !*upload_id || part_number < 1 || part_number > 10000 ||
        (len && !body))
        return -EINVAL;
    char num[16];
    snprintf(num, sizeof num, "%d", part_number);
    s3_kv q[] = {{"partNumber", num}, {"uploadId", upload_id}};
    s3_req_spec spec = {.method = "PUT", .query = q, .n_query = 2, .body = body, .body_len = len,
                        .check = check_upload_part, .verify_write = true};
    return simple_start(c, K_UPLOAD_PART, "UploadPart", bucket, key, NULL, &spec, op_out, cb, ctx,
                        NULL);
}

int s3_abort_multipart_upload(s3_client *c, const char *bucket, const char *key,
                              const char *upload_id, s3_op **op_out, s3_done_fn cb, void *ctx)
{
    if (!key_ok(key) || !upload_id || !*upload_id) return -EINVAL;
    s3_kv q[] = {{"uploadId", upload_id}};
    s3_req_spec spec = {.method = "DELETE", .query = q, .n_query = 1};
    return simple_start(c, K_ABORT_MPU, "AbortMultipartUpload", bucket, key, NULL, &spec, op_out, cb,
                        ctx, NULL);
}

int s3_list_parts(s3_client *c, const char *bucket, const char *key, const char *upload_id,
                  int part_marker, s3_op **op_out, s3_done_fn cb, void *ctx)
{
    if (!key_ok(key) || !upload_id || !*upload_id) return -EINVAL;
    char pm[16];
    snprintf(pm, sizeof pm, "%d", part_marker);
    s3_kv q[] = {{"uploadId", upload_id}, {"part-number-marker", pm}};
    s3_req_spec spec = {.method = "GET", .query = q, .n_query = part_marker > 0 ? 2 : 1,
                        .check = check_list};
    return simple_start(c, K_LIST_PARTS, "ListParts", bucket, key, NULL, &spec, op_out, cb, ctx, NULL);
}

int s3_create_bucket(s3_client *c, const char *bucket, s3_op **op_out, s3_done_fn cb,
                     void *ctx)
{
    if (!c) return -EINVAL;
    const char *region = s3_client_opts(c)->region;
    char *body = NULL;
    size_t len = 0;
    if (strcmp(region, "us-east-1") != 0) {
        /* every other region must be named in the body */
        if (asprintf(&body,
                     "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                     "<LocationConstraint>%s</LocationConstraint></CreateBucketConfiguration>",
                     region) < 0)
            return -ENOMEM;
        len = strlen(body);
    }
    s3_req_spec spec = {.method = "PUT", .body = body, .body_len = len,
                        .content_type = body ? "application/xml" : NULL};
    simple_op *s = NULL;
    int rc = simple_start(c, K_CREATE_BUCKET, "CreateBucket", bucket, NULL, NULL, &spec, op_out, cb,
                          ctx, &s);
    if (rc) free(body);
    else s->body = body;
    return rc;
}

int s3_delete_bucket(s3_client *c, const char *bucket, s3_op **op_out, s3_done_fn cb,
                     void *ctx)
{
    s3_req_spec spec = {.method = "DELETE"};
    return simple_start(c, K_DELETE_BUCKET, "DeleteBucket", bucket, NULL, NULL, &spec, op_out, cb,
                        ctx, NULL);
}

/* ---- DeleteObjects ---- */

/* S3 takes at most 1,000 keys per DeleteObjects request. */
#define DELETE_BATCH_KEYS 1000

typedef struct del_batch {
    struct del_op *d;
    s3_req *req;
    char *body;
    size_t n_keys;
    size_t n_errors;
    char first_key[256], first_code[64];
} del_batch;

typedef struct del_op {
    s3_op op;
    char *bucket;
    del_batch *batches;
    size_t n_batches, n_live;
    bool failed;
} del_op;

static void del_destroy(s3_op *op)
{
    del_op *d = (del_op *)op;
    for (size_t i = 0; i < d->n_batches; i++) {
        if (d->batches[i].req) s3_req_cancel(d->batches[i].req);
        free(d->batches[i].body);
    }
    free(d->batches);
    free(d->bucket);
}

static void del_cancel(s3_op *op)
{
    del_op *d = (del_op *)op;
    for (size_t i = 0; i < d->n_batches; i++)
        if (d->batches[i].req) {
            s3_req_cancel(d->batches[i].req);
            d->batches[i].req = NULL;
        }
    s3_result_fail(&op->res, -ECANCELED, "DeleteObjects s3://%s: cancelled", d->bucket);
    s3_op_finish(op);
}

static int check_delete(void *ctx, s3_reply *rep)
{
    del_batch *b = ctx;
    return s3_xml_parse_delete_result(rep->body, rep->body_len, &b->n_errors, b->first_key,
                                      sizeof b->first_key, b->first_code, sizeof b->first_code)
               ? -EPROTO
               : 0;
}

static void del_done(void *ctx, s3_req *req, const s3_reply *rep)
{
    (void)req;
    del_batch *b = ctx;
    del_op *d = b->d;
    b->req = NULL;
    d->n_live--;
    s3_result *res = &d->op.res;
    if (rep->err) {
        if (!d->failed) s3_result_set(res, "DeleteObjects", d->bucket, "", rep);
        d->failed = true;
        res->delete_errors += b->n_keys;
    } else {
        res->deleted += b->n_keys - b->n_errors;
        res->delete_errors += b->n_errors;
        if (b->n_errors && !d->failed) {
            d->failed = true;
            s3_result_set(res, "DeleteObjects", d->bucket, "", rep);
            snprintf(res->s3_code, sizeof res->s3_code, "%s", b->first_code);
            s3_result_fail(res, DSTL_EREMOTE, "DeleteObjects s3://%s: %zu of %zu keys refused, first s3://%s/%.200s: %s",
                           d->bucket, b->n_errors, b->n_keys, d->bucket, b->first_key, b->first_code);
        }
    }
    if (d->n_live == 0) s3_op_finish(&d->op);
}

int s3_delete_objects(s3_client *c, const char *bucket, const char *const *keys, size_t n,
                      s3_op **op_out, s3_done_fn cb, void *ctx)
{
    if (!c || !bucket || !*bucket || (n && !keys) || !cb) return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!key_ok(keys[i])) return -EINVAL;
    del_op *d = (del_op *)s3_op_new(c, sizeof *d, cb, ctx);
    if (!d) return -ENOMEM;
    d->op.cancel = del_cancel;
    d->op.destroy = del_destroy;
    d->bucket = strdup(bucket);
    d->n_batches = (n + DELETE_BATCH_KEYS - 1) / DELETE_BATCH_KEYS;
    d->batches = calloc(d->n_batches ? d->n_batches : 1, sizeof *d->batches);
    int rc = d->bucket && d->batches ? 0 : -ENOMEM;
    for (size_t i = 0; i < d->n_batches && !rc; i++) {
        del_batch *b = &d->batches[i];
        b->d = d;
        size_t first = i * DELETE_BATCH_KEYS;
        b->n_keys = n - first < DELETE_BATCH_KEYS ? n - first : DELETE_BATCH_KEYS;
        size_t blen = 0;
        b->body = s3_xml_build_delete(keys + first, b->n_keys, &blen);
        if (!b->body) {
            rc = -EINVAL;
            break;
        }
        /* DeleteObjects requires an integrity header: Content-MD5 (base64 of the MD5) */
        uint8_t md[16];
        unsigned int mdn = 16;
        EVP_Digest(b->body, blen, md, &mdn, EVP_md5(), NULL);
        char md5b64[32];
        EVP_EncodeBlock((unsigned char *)md5b64, md, 16);
        s3_kv h[] = {{"content-md5", md5b64}};
        s3_kv q[] = {{"delete", ""}};
        s3_req_spec spec = {.method = "POST", .bucket = bucket, .query = q, .n_query = 1,
                            .headers = h, .n_headers = 1, .body = b->body, .body_len = blen,
                            .content_type = "application/xml", .check = check_delete};
        rc = s3_req_start(c, &spec, del_done, b, &b->req);
        if (!rc) d->n_live++;
    }
    if (rc) {
        s3_op_discard(&d->op);
        return rc;
    }
    if (d->n_batches == 0) s3_op_finish(&d->op); /* nothing to delete: completes in the loop */
    if (op_out) *op_out = &d->op;
    return 0;
}
