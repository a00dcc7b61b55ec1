/*
 * s3/sync.c — blocking wrappers: start the asynchronous operation, then run the client's
 * loop on the calling thread until its callback has run. Used by tests, the `dstl` command
 * and gc. The listings follow continuation tokens to the end and copy the entries out; the
 * Date of their first page is the listing's server_date_ms (the conservative "now" for ages).
 *
 * Threads: the client's thread; must not be called from inside an s3 callback (the loop is
 * not reentrant: s3_client_run returns -EDEADLK there, and so does the wrapper).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3/s3_int.h"

typedef struct waiter {
    bool done;
    s3_result res;
    s3_list *acc;     /* listings: entries are appended here */
    size_t max_items; /* 0: no limit */
    bool first_page;  /* its Date is the listing's (the earliest answer) */
    int copy_err;
} waiter;

static int append_list(s3_list *acc, const s3_list *l, size_t max_items)
{
    size_t room = max_items ? max_items : SIZE_MAX;
    size_t have = acc->n_objects + acc->n_uploads + acc->n_parts;
    if (l->n_objects) {
        size_t n = l->n_objects;
        if (have + n > room) n = room - have;
        s3_object_info *a = realloc(acc->objects, (acc->n_objects + n + 1) * sizeof *a);
        if (!a) return -ENOMEM;
        acc->objects = a;
        for (size_t i = 0; i < n; i++) {
            a[acc->n_objects] = l->objects[i];
            a[acc->n_objects].key = strdup(l->objects[i].key);
            if (!a[acc->n_objects].key) return -ENOMEM;
            acc->n_objects++;
        }
    }
    if (l->n_uploads) {
        size_t n = l->n_uploads;
        if (have + n > room) n = room - have;
        s3_upload_info *a = realloc(acc->uploads, (acc->n_uploads + n + 1) * sizeof *a);
        if (!a) return -ENOMEM;
        acc->uploads = a;
        for (size_t i = 0; i < n; i++) {
            char *k = strdup(l->uploads[i].key), *id = strdup(l->uploads[i].upload_id);
            if (!k || !id) {
                free(k);
                free(id);
                return -ENOMEM;
            }
            a[acc->n_uploads] = l->uploads[i];
            a[acc->n_uploads].key = k;
            a[acc->n_uploads].upload_id = id;
            acc->n_uploads++;
        }
    }
    if (l->n_parts) {
        size_t n = l->n_parts;
        if (have + n > room) n = room - have;
        s3_part_info *a = realloc(acc->parts, (acc->n_parts + n + 1) * sizeof *a);
        if (!a) return -ENOMEM;
        acc->parts = a;
        memcpy(a + acc->n_parts, l->parts, n * sizeof *a);
        acc->n_parts += n;
    }
    return 0;
}

static void waiter_cb(void *ctx, const s3_result *r)
{
    waiter *w = ctx;
    w->res = *r;
    w->res.list = NULL;
    if (!r->err && r->list && w->acc) {
        const s3_list *l = r->list;
        w->copy_err = append_list(w->acc, l, w->max_items);
        free(w->acc->next_token);
        free(w->acc->next_key_marker);
        free(w->acc->next_upload_id_marker);
        w->acc->next_token = l->next_token ? strdup(l->next_token) : NULL;
        w->acc->next_key_marker = l->next_key_marker ? strdup(l->next_key_marker) : NULL;
        w->acc->next_upload_id_marker =
            l->next_upload_id_marker ? strdup(l->next_upload_id_marker) : NULL;
        w->acc->truncated = l->truncated;
        if (w->first_page) w->acc->server_date_ms = l->server_date_ms;
    }
    w->done = true;
}

/* Runs the loop until w is done; returns the op's code. */
static int wait_for(s3_client *c, waiter *w, int start_rc, const char *what, s3_result *res)
{
    if (start_rc) {
        memset(&w->res, 0, sizeof w->res);
        s3_result_fail(&w->res, start_rc, "%s: not started: %s", what, strerrordesc_np(-start_rc));
    } else {
        while (!w->done) {
            int rc = s3_client_run(c, NULL, 0, 1000);
            if (rc < 0) {
                /* cannot run the loop here (a callback): the op stays in flight */
                memset(&w->res, 0, sizeof w->res);
                s3_result_fail(&w->res, rc, "%s: cannot wait: the client's loop is busy", what);
                break;
            }
        }
    }
    if (!w->res.err && w->copy_err)
        s3_result_fail(&w->res, w->copy_err, "%s: out of memory copying the listing", what);
    if (res) *res = w->res;
    return w->res.err;
}

#define SYNC(c, what, res, call)                                                                  \
    do {                                                                                          \
        waiter w_ = {0};                                                                          \
        waiter *w = &w_;                                                                          \
        return wait_for(c, w, (call), what, res);                                                 \
    } while (0)

int s3_put_object_sync(s3_client *c, const char *bucket, const char *key, const void *body,
                       size_t len, bool if_none_match, s3_result *res)
{
    SYNC(c, "PUT", res, s3_put_object(c, bucket, key, body, len, if_none_match, NULL, waiter_cb, w));
}

int s3_get_object_sync(s3_client *c, const char *bucket, const char *key, uint64_t offset,
                       void *buf, size_t len, s3_result *res)
{
    SYNC(c, "GET", res, s3_get_object(c, bucket, key, offset, buf, len, NULL, waiter_cb, w));
}

int s3_head_object_sync(s3_client *c, const char *bucket, const char *key, s3_result *res)
{
    SYNC(c, "HEAD", res, s3_head_object(c, bucket, key, NULL, waiter_cb, w));
}

int s3_delete_object_sync(s3_client *c, const char *bucket, const char *key, s3_result *res)
{
    SYNC(c, "DELETE", res, s3_delete_object(c, bucket, key, NULL, waiter_cb, w));
}

int s3_delete_objects_sync(s3_client *c, const char *bucket, const char *const *keys, size_t n,
                           s3_result *res)
{
    SYNC(c, "DeleteObjects", res, s3_delete_objects(c, bucket, keys, n, NULL, waiter_cb, w));
}

int s3_create_multipart_upload_sync(s3_client *c, const char *bucket, const char *key,
                                    s3_result *res)
{
    SYNC(c, "CreateMultipartUpload", res,
         s3_create_multipart_upload(c, bucket, key, NULL, waiter_cb, w));
}

int s3_upload_part_sync(s3_client *c, const char *bucket, const char *key,
                        const char *upload_id, int part_number, const void *body, size_t len,
                        s3_result *res)
{
    SYNC(c, "UploadPart", res,
         s3_upload_part(c, bucket, key, upload_id, part_number, body, len, NULL, waiter_cb, w));
}

int s3_complete_multipart_upload_sync(s3_client *c, const char *bucket, const char *key,
                                      const char *upload_id, const s3_part_info *parts,
                                      size_t n, bool if_none_match, s3_result *res)
{
    SYNC(c, "CompleteMultipartUpload", res,
         s3_complete_multipart_upload(c, bucket, key, upload_id, parts, n, if_none_match, NULL,
                                      waiter_cb, w));
}

int s3_abort_multipart_upload_sync(s3_client *c, const char *bucket, const char *key,
                                   const char *upload_id, s3_result *res)
{
    SYNC(c, "AbortMultipartUpload", res,
         s3_abort_multipart_upload(c, bucket, key, upload_id, NULL, waiter_cb, w));
}

int s3_create_bucket_sync(s3_client *c, const char *bucket, s3_result *res)
{
    SYNC(c, "CreateBucket", res, s3_create_bucket(c, bucket, NULL, waiter_cb, w));
}

int s3_delete_bucket_sync(s3_client *c, const char *bucket, s3_result *res)
{
    SYNC(c, "DeleteBucket", res, s3_delete_bucket(c, bucket, NULL, waiter_cb, w));
}

int s3_upload_sync(s3_client *c, const char *bucket, const char *key, const void *buf,
                   size_t len, const s3_upload_opts *opts, s3_result *res)
{
    SYNC(c, "upload", res, s3_upload(c, bucket, key, buf, len, opts, NULL, waiter_cb, w));
}

/* ---- listings to the end ---- */

typedef enum { L_OBJECTS, L_UPLOADS, L_PARTS } list_kind;

static int list_all(s3_client *c, list_kind k, const char *bucket, const char *prefix,
                    const char *key, const char *upload_id, size_t max_items, s3_list *out,
                    s3_result *res)
{
    memset(out, 0, sizeof *out);
    s3_result scratch;
    if (!res) res = &scratch;
    /* bounded: 100,000 pages of 1,000 entries is far beyond any DSTL bucket */
    for (int page = 0; page < 100000; page++) {
        waiter w = {.acc = out, .max_items = max_items, .first_page = page == 0};
        int rc;
        if (k == L_OBJECTS)
            rc = s3_list_objects(c, bucket, prefix, NULL, out->next_token, 0, NULL, waiter_cb, &w);
        else if (k == L_UPLOADS)
            rc = s3_list_multipart_uploads(c, bucket, prefix, out->next_key_marker,
                                           out->next_upload_id_marker, NULL, waiter_cb, &w);
        else
            rc = s3_list_parts(c, bucket, key, upload_id, out->next_token ? atoi(out->next_token) : 0,
                               NULL, waiter_cb, &w);
        rc = wait_for(c, &w, rc, "list", res);
        if (rc) {
            s3_list_clear(out);
            return rc;
        }
        size_t have = out->n_objects + out->n_uploads + out->n_parts;
        if (!out->truncated || (max_items && have >= max_items)) return 0;
    }
    s3_list_clear(out);
    s3_result_fail(res, -E2BIG, "listing s3://%s/%s: more than 100,000 pages", bucket,
                   prefix ? prefix : "");
    return -E2BIG;
}

int s3_list_objects_all_sync(s3_client *c, const char *bucket, const char *prefix,
                             size_t max_items, s3_list *out, s3_result *res)
{
    return list_all(c, L_OBJECTS, bucket, prefix, NULL, NULL, max_items, out, res);
}

int s3_list_multipart_uploads_all_sync(s3_client *c, const char *bucket, const char *prefix,
                                       size_t max_items, s3_list *out, s3_result *res)
{
    return list_all(c, L_UPLOADS, bucket, prefix, NULL, NULL, max_items, out, res);
}

int s3_list_parts_all_sync(s3_client *c, const char *bucket, const char *key,
                           const char *upload_id, s3_list *out, s3_result *res)
{
    return list_all(c, L_PARTS, bucket, NULL, key, upload_id, 0, out, res);
}
