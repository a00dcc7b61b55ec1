/*
 * s3/cleanup.c — detached cleanups: removing what a failed or cancelled write may have left on
 * the server, after its caller has been told the outcome.
 *
 * Why detached: a cancel (the pipeline's deadline) or a failure must complete the caller's
 * operation at once; the aborts, HEADs and DELETEs that tidy up after it have their own
 * attempts and timeouts and may hang just as the write did. So they run as an internal op of
 * their own (s3_op_detach): not counted by s3_client_pending, counted by s3_client_cleanups,
 * with one deadline for all of its steps (cleanup_timeout_ms), past which the engine drops it
 * and its requests. What it could not remove is left for `dstl gc`.
 *
 * Steps, one at a time (each only when asked for): abort the multipart upload; HEAD the key
 * and DELETE it when its ETag is one of ours (never anything else: the key may hold another
 * writer's object); list the key's multipart uploads and abort every one but the kept id.
 * A failed step is remembered (res.err: counted as incomplete) and the next one still runs.
 *
 * Invariants: a cleanup owns copies of everything it uses (the caller's buffers may be gone);
 * it never runs a user callback; it is never started for an outcome reported as success
 * except to abort stray uploads, which hold no object.
 *
 * Threads: the client's thread only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3/s3_int.h"

/* ListMultipartUploads pages looked at for strays: the key is unique per writer run, so its
 * uploads fit in a page of 1,000; a second page would mean something else is wrong (gc). */
#define STRAY_PAGES 1

typedef enum { S_ABORT, S_HEAD, S_DELETE, S_LIST, S_STRAYS, S_DONE } step;

typedef struct cleanup_op {
    s3_op op;
    char *bucket, *key, *abort_id, *keep_id;
    char (*etags)[72];
    size_t n_etags;
    bool strays;
    step step;
    s3_op *child;
    char **stray_ids;
    size_t n_strays, next_stray;
} cleanup_op;

static void cleanup_destroy(s3_op *op)
{
    cleanup_op *k = (cleanup_op *)op;
    s3_op_drop(k->child);
    free(k->bucket);
    free(k->key);
    free(k->abort_id);
    free(k->keep_id);
    free(k->etags);
    for (size_t i = 0; i < k->n_strays; i++) free(k->stray_ids[i]);
    free(k->stray_ids);
}

/* Remembers the first failure (the cleanup is then incomplete). */
static void cleanup_failed(cleanup_op *k, int err, const char *what, const char *detail)
{
    if (k->op.res.err) return;
    s3_result_fail(&k->op.res, err, "cleanup of s3://%s/%s: %s: %s", k->bucket, k->key, what,
                   detail);
}

static bool is_ours(const cleanup_op *k, const char *etag)
{
    for (size_t i = 0; i < k->n_etags; i++)
        if (s3_etag_eq(etag, k->etags[i])) return true;
    return false;
}

static void cleanup_child_done(void *ctx, const s3_result *r);

/* Starts the next step that applies, or finishes. */
static void cleanup_next(cleanup_op *k)
{
    s3_client *c = k->op.c;
    for (;;) {
        int rc = 0;
        switch (k->step) {
        case S_ABORT:
            if (!k->abort_id) break;
            S3_CHILD(s3_abort_multipart_upload(c, k->bucket, k->key, k->abort_id, &k->child,
                                               cleanup_child_done, k), k->child);
            if (!rc) return;
            break;
        case S_HEAD:
            if (!k->n_etags) break;
            S3_CHILD(s3_head_object(c, k->bucket, k->key, &k->child, cleanup_child_done, k),
                     k->child);
            if (!rc) return;
            break;
        case S_DELETE:
            break; /* started by the HEAD step, when the object is ours */
        case S_LIST:
            if (!k->strays) break;
            S3_CHILD(s3_list_multipart_uploads(c, k->bucket, k->key, NULL, NULL, &k->child,
                                               cleanup_child_done, k), k->child);
            if (!rc) return;
            break;
        case S_STRAYS:
            if (k->next_stray < k->n_strays) {
                const char *id = k->stray_ids[k->next_stray++];
                S3_CHILD(s3_abort_multipart_upload(c, k->bucket, k->key, id, &k->child,
                                                   cleanup_child_done, k), k->child);
                if (!rc) return;
                cleanup_failed(k, rc, "could not start aborting a stray upload", "");
                continue; /* the next stray */
            }
            break;
        case S_DONE:
            s3_op_finish(&k->op);
            return;
        }
        if (rc) cleanup_failed(k, rc, "could not start a step", strerrordesc_np(-rc));
        k->step++;
    }
}

static void keep_strays(cleanup_op *k, const s3_list *l)
{
    for (size_t i = 0; l && i < l->n_uploads; i++) {
        const s3_upload_info *u = &l->uploads[i];
        if (strcmp(u->key, k->key) != 0 || (k->keep_id && strcmp(u->upload_id, k->keep_id) == 0))
            continue;
        char **na = realloc(k->stray_ids, (k->n_strays + 1) * sizeof *na);
        char *id = na ? strdup(u->upload_id) : NULL;
        if (na) k->stray_ids = na;
        if (!id) {
            cleanup_failed(k, -ENOMEM, "listing stray uploads", "out of memory");
            return;
        }
        k->stray_ids[k->n_strays++] = id;
    }
    if (l && l->truncated) /* bounded: STRAY_PAGES */
        cleanup_failed(k, -E2BIG, "listing stray uploads", "more than one page (left for gc)");
}

static void cleanup_child_done(void *ctx, const s3_result *r)
{
    cleanup_op *k = ctx;
    k->child = NULL;
    switch (k->step) {
    case S_ABORT:
        if (r->err) cleanup_failed(k, r->err, "abort failed (upload left for gc)", r->error);
        k->step = S_HEAD;
        break;
    case S_HEAD:
        k->step = S_LIST;
        if (!r->err && is_ours(k, r->etag)) {
            int rc;
            k->step = S_DELETE;
            S3_CHILD(s3_delete_object(k->op.c, k->bucket, k->key, &k->child, cleanup_child_done, k),
                     k->child);
            if (!rc) return;
            cleanup_failed(k, rc, "could not start deleting our object", "");
            k->step = S_LIST;
        } else if (r->err && r->err != -ENOENT) {
            cleanup_failed(k, r->err, "could not check for an object of ours", r->error);
        }
        break;
    case S_DELETE:
        if (r->err) cleanup_failed(k, r->err, "could not delete our object (left for gc)", r->error);
        k->step = S_LIST;
        break;
    case S_LIST:
        if (r->err) cleanup_failed(k, r->err, "could not list stray uploads", r->error);
        else keep_strays(k, r->list);
        k->step = S_STRAYS;
        break;
    case S_STRAYS:
        if (r->err) cleanup_failed(k, r->err, "could not abort a stray upload", r->error);
        break; /* stays at this step until every stray is tried */
    default:
        break;
    }
    cleanup_next(k);
}

int s3_cleanup_start(s3_client *c, const s3_cleanup_spec *spec)
{
    bool abort = spec->abort_upload_id && spec->abort_upload_id[0];
    if (!abort && !spec->n_etags && !spec->abort_strays) return 0;
    cleanup_op *k = (cleanup_op *)s3_op_new(c, sizeof *k, NULL, NULL);
    if (!k) return -ENOMEM;
    k->op.destroy = cleanup_destroy;
    k->bucket = strdup(spec->bucket);
    k->key = strdup(spec->key);
    k->abort_id = abort ? strdup(spec->abort_upload_id) : NULL;
    k->keep_id = spec->keep_upload_id && spec->keep_upload_id[0] ? strdup(spec->keep_upload_id)
                                                                 : NULL;
    k->strays = spec->abort_strays;
    k->etags = spec->n_etags ? calloc(spec->n_etags, sizeof *k->etags) : NULL;
    bool ok = k->bucket && k->key && (!abort || k->abort_id) && (!spec->n_etags || k->etags) &&
              (!spec->keep_upload_id || !spec->keep_upload_id[0] || k->keep_id);
    for (size_t i = 0; ok && i < spec->n_etags; i++)
        if (spec->etags[i] && spec->etags[i][0])
            snprintf(k->etags[k->n_etags++], sizeof k->etags[0], "%s", spec->etags[i]);
    if (!ok) {
        s3_op_discard(&k->op);
        return -ENOMEM;
    }
    s3_op_detach(&k->op);
    cleanup_next(k); /* only queues requests: they start from the loop */
    return 0;
}
