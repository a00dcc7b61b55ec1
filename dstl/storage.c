/*
 * dstl/storage.c — the storage: opens and closes everything one run owns (the configuration
 * copy, the local store, the S3 client, the pipeline thread, the registry, the reader cache)
 * and discards handles. Several storages may share a local dir and a remote prefix (locks and
 * leases: dstl/README.md). Thread-safe.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include "dstl/clock.h"
#include "dstl/err.h"
#include "dstl/handle.h"
#include "dstl/local/segstore.h"
#include "dstl/pipeline.h"
#include "dstl/read/cache.h"
#include "dstl/registry.h"
#include "dstl/remote/remote.h"
#include "dstl/seams.h"
#include "dstl/storage.h"
#include "dstl/writer.h"

static const char *const engine_names[] = {"io_uring", "libaio", "psync"};

static int new_run_id(char *buf, size_t cap)
{
    uint8_t r[8];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        return err_fail(-EIO, "storage: getrandom failed: %s", strerror(errno));
    for (size_t i = 0; i < sizeof r && 2 * i + 2 < cap; i++) snprintf(buf + 2 * i, 3, "%02x", r[i]);
    return 0;
}

/* The open-time bucket check is bounded like one request of an upload: every attempt within
 * dstl.upload.timeout (3 s at the defaults), so an endpoint that does not answer delays the
 * open by that much and no more. */
static uint64_t open_check_bound_ms(const dstl_storage *s)
{
    return s->conf.upload_max_attempts * s->conf.upload_timeout_ms;
}

int storage_open_with_seams(const dstl_config *c, const storage_seams *t, dstl_storage **out)
{
    if (!c || !out) return err_fail(-EINVAL, "dstl_storage_open: NULL argument");
    dstl_storage *s = calloc(1, sizeof *s);
    if (!s) return err_fail(-ENOMEM, "dstl_storage_open: out of memory");
    s->wake_fd = -1;
    if (t) s->seams = *t;
    int rc = config_clone(c, &s->cfg);
    if (rc == 0) rc = config_resolve(s->cfg, &s->conf);
    if (rc < 0) goto fail;
    if (s->conf.durability == CFG_DURABILITY_REMOTE && !*s->conf.remote_uri) {
        rc = err_fail(DSTL_ECONFIG, "key 'dstl.durability': remote needs dstl.remote.uri (s3://bucket/prefix)");
        goto fail;
    }
    if (*s->conf.remote_uri && (rc = remote_parse_uri(s->conf.remote_uri, "key 'dstl.remote.uri'", &s->remote)) < 0)
        goto fail;
    if (s->conf.lease_timeout_ms < 4 * s->conf.lease_refresh_ms) {
        /* The run fences itself at timeout - 2 x refresh: that must leave it a few refreshes. */
        rc = err_fail(DSTL_ECONFIG, "key 'dstl.remote.lease-timeout' (%llu ms) must be at least 4 x "
                      "'dstl.remote.lease-refresh' (%llu ms)", (unsigned long long)s->conf.lease_timeout_ms,
                      (unsigned long long)s->conf.lease_refresh_ms);
        goto fail;
    }
    if ((rc = key_source_open(&s->keys, s->conf.encryption_key_file)) < 0) goto fail;
    if (!(s->local_dir = strdup(s->conf.local_dir))) {
        rc = err_fail(-ENOMEM, "dstl_storage_open: out of memory");
        goto fail;
    }
    if ((rc = new_run_id(s->run_id, sizeof s->run_id)) < 0) goto fail;
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&s->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    chunk_pool_init(&s->chunks);
    pthread_cond_init(&s->room_cv, NULL);
    pthread_cond_init(&s->range_cv, NULL);
    s->locked.pipe.q_tail = &s->locked.pipe.q_head;
    reg_init(&s->locked.reg, s->run_id);
    s->fctx = (future_ctx){.reg = &s->locked.reg, .counters = &s->locked.stats, .run_id = s->run_id,
                           .remote_uri = s->conf.remote_uri};
    if ((s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        rc = err_fail(-errno, "storage: eventfd: %s", strerror(errno));
        goto fail_sync;
    }
    struct segstore_opts so = {.dir = s->local_dir, .owner = s->run_id, .engine = engine_names[s->conf.io_engine],
                               .fault = t ? t->fault : NULL, .direct = s->conf.io_direct != 0,
                               .direct_auto = s->conf.io_direct == CFG_BOOL_AUTO};
    if ((rc = segstore_open(&so, &s->store)) < 0) {
        rc = err_fail(rc, "dstl.local.dir %s: %s", s->local_dir, dstl_last_error());
        goto fail_sync;
    }
    char warn[1024] = "";
    if (*s->conf.remote_uri && (rc = remote_client_new(&s->conf, &s->loop.s3)) < 0) goto fail_store;
    if (*s->conf.remote_uri && (rc = remote_check(&s->conf, &s->remote, open_check_bound_ms(s), warn, sizeof warn)) < 0)
        goto fail_store;
    if ((rc = pipeline_start(s)) < 0) goto fail_store;
    if ((rc = cache_open(s)) < 0) {
        pipeline_stop(s);
        goto fail_store;
    }
    /* After a success the detail is "" or the open check's warning (include/dstl.h). */
    if (*warn) err_fail(0, "%s", warn);
    else err_clear();
    *out = s;
    return 0;

fail_store:
    s3_client_free(s->loop.s3);
    segstore_close(s->store);
fail_sync:
    if (s->wake_fd >= 0) close(s->wake_fd);
    chunk_pool_destroy(&s->chunks);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->room_cv);
    pthread_cond_destroy(&s->range_cv);
    reg_destroy(&s->locked.reg);
fail:
    key_source_close(&s->keys);
    free(s->local_dir);
    dstl_config_free(s->cfg);
    free(s);
    return rc;
}

int dstl_storage_open(const dstl_config *c, dstl_storage **out)
{
    return storage_open_with_seams(c, NULL, out);
}

static void on_lease_deleted(void *ctx, const s3_result *r)
{
    int *done = ctx;
    *done = r->err == 0 ? 1 : -1;
}

/* After the pipeline stopped: gives the detached cleanups of cancelled uploads at most one
 * more future bound (include/dstl.h), and meanwhile removes the run's lease, so that other
 * machines' gc may finish what a cleanup leaves (a lease that cannot be removed goes stale
 * after dstl.remote.lease-timeout). s3_client_free then drops what is still running. */
static void remote_close(dstl_storage *s)
{
    uint64_t bound_ns = (s->conf.persist_delay_us / 1000 + s->conf.upload_max_attempts * s->conf.upload_timeout_ms + 1000) *
                        1000000ull;
    uint64_t deadline = now_ns() + bound_ns;
    /* the flag lives in s: s3_client_free may still run the callback (cancelled) */
    s->loop.lease_deleted = s->loop.lease_tried ? 0 : 1;
    if (s->loop.lease_tried &&
        s3_delete_object(s->loop.s3, s->remote.bucket, s->loop.lease_key, NULL, on_lease_deleted, &s->loop.lease_deleted) < 0)
        s->loop.lease_deleted = -1;
    while ((s3_client_cleanups(s->loop.s3) > 0 || s->loop.lease_deleted == 0) && now_ns() < deadline)
        if (s3_client_run(s->loop.s3, NULL, 0, 50) < 0) break;
}

int dstl_storage_close(dstl_storage *s)
{
    if (!s) return 0;
    /* A future callback running on the pipeline thread cannot wait for that thread. */
    if (s->loop.thread_started && pthread_equal(pthread_self(), s->loop.thread))
        return err_fail(-EDEADLK, "dstl_storage_close: called from a future callback on the storage's pipeline "
                                  "thread, which close waits for: close it from another thread");
    pthread_mutex_lock(&s->mu);
    size_t open = s->locked.nwriters;
    pthread_mutex_unlock(&s->mu);
    if (open > 0)
        return err_fail(-EBUSY, "dstl_storage_close: %zu writer(s) still open; close them first", open);
    pipeline_stop(s);
    if (s->loop.s3) remote_close(s);
    s3_client_free(s->loop.s3);
    segstore_close(s->store);
    close(s->wake_fd);
    cache_close(s);
    reg_destroy(&s->locked.reg);
    chunk_pool_destroy(&s->chunks);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->room_cv);
    pthread_cond_destroy(&s->range_cv);
    key_source_close(&s->keys);
    free(s->local_dir);
    dstl_config_free(s->cfg);
    free(s);
    return 0;
}

int dstl_storage_reload_keys(dstl_storage *s)
{
    if (!s) return err_fail(-EINVAL, "dstl_storage_reload_keys: NULL argument");
    return key_source_reload(&s->keys);
}

int dstl_handle_discard(dstl_storage *s, const dstl_handle *h)
{
    if (!s || !h) return err_fail(-EINVAL, "dstl_handle_discard: NULL argument");
    uint64_t ident = reg_live_ident(h->wh);   /* before the lock: its reads miss the cache */
    pthread_mutex_lock(&s->mu);
    struct live_handle *l = reg_live_take(&s->locked.reg, h->wh, ident);
    int wake = pipeline_kick_deletes(s);
    pthread_mutex_unlock(&s->mu);
    if (wake) pipeline_wake(s);
    reg_live_free(l);          /* outside s->mu: every writer thread and the pipeline contend for it */
    return 0;
}

const char *storage_run_id(const dstl_storage *s) { return s->run_id; }
