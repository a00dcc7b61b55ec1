/*
 * dstl/storage.c — the storage: one per process; owns the configuration copy, the local
 * store, the pipeline thread and the registry. Thread-safe.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include "dstl/read/cache.h"
#include "dstl/err.h"
#include "dstl/internal.h"
#include "dstl/remote/remote.h"
#include "dstl/local/segstore.h"
#include "dstl/storage_test.h"

static const char *const engine_names[] = {"io_uring", "libaio", "psync"};

static int new_run_id(char *buf, size_t cap)
{
    uint8_t r[8];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        return err_fail(-EIO, "storage: getrandom failed: %s", strerror(errno));
    for (size_t i = 0; i < sizeof r && 2 * i + 2 < cap; i++) snprintf(buf + 2 * i, 3, "%02x", r[i]);
    return 0;
}

int storage_open_test(const dstl_config *c, const storage_test_opts *t, dstl_storage **out)
{
    if (!c || !out) return err_fail(-EINVAL, "dstl_storage_open: NULL argument");
    dstl_storage *s = calloc(1, sizeof *s);
    if (!s) return err_fail(-ENOMEM, "dstl_storage_open: out of memory");
    s->wake_fd = -1;
    s->test_upload_err = t ? t->fail_upload_start : 0;
    s->test_wall_skew_ms = t ? t->wall_clock_skew_ms : 0;
    int rc = config_clone(c, &s->cfg);
    if (rc == 0) rc = config_resolve(s->cfg, &s->cv);
    if (rc < 0) goto fail;
    if (s->cv.durability == CFG_DURABILITY_REMOTE && !*s->cv.remote_uri) {
        rc = err_fail(DSTL_ECONFIG, "key 'dstl.durability': remote needs dstl.remote.uri (s3://bucket/prefix)");
        goto fail;
    }
    if (*s->cv.remote_uri && (rc = remote_parse_uri(s->cv.remote_uri, "key 'dstl.remote.uri'", &s->remote)) < 0)
        goto fail;
    if (s->cv.lease_timeout_ms < 4 * s->cv.lease_refresh_ms) {
        /* The run fences itself at timeout - 2 x refresh: that must leave it a few refreshes. */
        rc = err_fail(DSTL_ECONFIG, "key 'dstl.remote.lease-timeout' (%llu ms) must be at least 4 x "
                      "'dstl.remote.lease-refresh' (%llu ms)", (unsigned long long)s->cv.lease_timeout_ms,
                      (unsigned long long)s->cv.lease_refresh_ms);
        goto fail;
    }
    if (*s->cv.encryption_key_file) {
        rc = err_fail(-ENOTSUP, "dstl.encryption.key-file: encryption at rest is not available in this "
                                "build yet (the format reserves it)");
        goto fail;
    }
    if (!(s->local_dir = strdup(s->cv.local_dir))) {
        rc = err_fail(-ENOMEM, "dstl_storage_open: out of memory");
        goto fail;
    }
    if ((rc = new_run_id(s->run_id, sizeof s->run_id)) < 0) goto fail;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->pool_mu, NULL);
    pthread_cond_init(&s->room_cv, NULL);
    pthread_cond_init(&s->range_cv, NULL);
    s->q_tail = &s->q_head;
    u64map_init(&s->segs);
    u64map_init(&s->live);
    if ((s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        rc = err_fail(-errno, "storage: eventfd: %s", strerror(errno));
        goto fail_sync;
    }
    struct segstore_opts so = {.dir = s->local_dir, .owner = s->run_id, .engine = engine_names[s->cv.io_engine],
                               .fault = t ? t->fault : NULL};
    if ((rc = segstore_open(&so, &s->store)) < 0) {
        rc = err_fail(rc, "dstl.local.dir %s: %s", s->local_dir, dstl_last_error());
        goto fail_sync;
    }
    if (*s->cv.remote_uri && (rc = remote_client_new(&s->cv, &s->s3)) < 0) goto fail_store;
    if ((rc = pipeline_start(s)) < 0) goto fail_store;
    if ((rc = cache_open(s)) < 0) {
        pipeline_stop(s);
        goto fail_store;
    }
    *out = s;
    return 0;

fail_store:
    s3_client_free(s->s3);
    segstore_close(s->store);
fail_sync:
    if (s->wake_fd >= 0) close(s->wake_fd);
    pthread_mutex_destroy(&s->pool_mu);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->room_cv);
    pthread_cond_destroy(&s->range_cv);
    u64map_destroy(&s->segs);
    u64map_destroy(&s->live);
fail:
    free(s->local_dir);
    dstl_config_free(s->cfg);
    free(s);
    return rc;
}

int dstl_storage_open(const dstl_config *c, dstl_storage **out)
{
    return storage_open_test(c, NULL, out);
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
    uint64_t bound_ns = (s->cv.persist_delay_us / 1000 + s->cv.upload_max_attempts * s->cv.upload_timeout_ms + 1000) *
                        1000000ull;
    uint64_t deadline = now_ns() + bound_ns;
    /* the flag lives in s: s3_client_free may still run the callback (cancelled) */
    s->lease_deleted = s->lease_tried ? 0 : 1;
    if (s->lease_tried &&
        s3_delete_object(s->s3, s->remote.bucket, s->lease_key, NULL, on_lease_deleted, &s->lease_deleted) < 0)
        s->lease_deleted = -1;
    while ((s3_client_cleanups(s->s3) > 0 || s->lease_deleted == 0) && now_ns() < deadline)
        if (s3_client_run(s->s3, NULL, 0, 50) < 0) break;
}

int dstl_storage_close(dstl_storage *s)
{
    if (!s) return 0;
    pthread_mutex_lock(&s->mu);
    size_t open = s->nwriters;
    pthread_mutex_unlock(&s->mu);
    if (open > 0)
        return err_fail(-EBUSY, "dstl_storage_close: %zu writer(s) still open; close them first", open);
    pipeline_stop(s);
    if (s->s3) remote_close(s);
    s3_client_free(s->s3);
    segstore_close(s->store);
    close(s->wake_fd);
    cache_close(s);
    reg_free_all(s);
    chunk_pool_free(s);
    pthread_mutex_destroy(&s->pool_mu);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->room_cv);
    pthread_cond_destroy(&s->range_cv);
    free(s->local_dir);
    dstl_config_free(s->cfg);
    free(s);
    return 0;
}

int dstl_storage_stats(dstl_storage *s, dstl_stats *out)
{
    if (!s || !out) return err_fail(-EINVAL, "dstl_storage_stats: NULL argument");
    dstl_stats st = {0};
    pthread_mutex_lock(&s->mu);
    st.appends = s->st_appends_closed;
    st.append_bytes = s->st_append_bytes_closed;
    for (dstl_writer *w = s->writers; w; w = w->next_open) {
        st.appends += atomic_load_explicit(&w->st_appends, memory_order_relaxed);
        st.append_bytes += atomic_load_explicit(&w->st_append_bytes, memory_order_relaxed);
    }
    st.persists = s->st_persists;
    st.persist_failures = s->st_persist_failures;
    st.segments_written = s->st_segments;
    st.segment_bytes = s->st_segment_bytes;
    st.segments_deleted = s->st_segments_deleted;
    st.in_flight_bytes = s->in_flight_bytes;
    st.queued_persists = s->q_waiting;
    st.persist_p50_us = histo_quantile(&s->persist_lat_us, 0.50);
    st.persist_p99_us = histo_quantile(&s->persist_lat_us, 0.99);
    st.persist_max_us = s->persist_lat_us.max;
    st.remote_requests = s->st_remote_requests;
    st.remote_retries = s->st_remote_retries;
    st.remote_failures = s->st_remote_failures;
    st.hedged_attempts = s->st_hedged;
    st.remote_bytes_written = s->st_remote_bytes_written;
    st.remote_bytes_read = s->st_remote_bytes_read;
    pthread_mutex_unlock(&s->mu);
    cache_stats_add(s, &st);
    *out = st;
    return 0;
}

const char *storage_run_id(const dstl_storage *s) { return s->run_id; }
