/*
 * dstl/metrics.c — the storage's metrics in Prometheus text format.
 *
 * Names follow Flink's ChangelogStorage metrics where it has one (numberOfUploadRequests ->
 * dstl_upload_requests_total, uploadLatenciesNanos -> dstl_upload_latency_seconds,
 * uploadBatchSizes -> dstl_upload_batch_writers, uploadSizes -> dstl_upload_size_bytes,
 * uploadQueueSize -> dstl_queue_size), plus what Flink lacks: remote requests, retries,
 * hedges and bytes per storage — the inputs of the object-store bill.
 *
 * dstl_storage_stats() and dstl_storage_metrics() may be called from any thread (they
 * snapshot under s->mu; the readers' counters are atomics). With
 * dstl.metrics.file set, the pipeline thread rewrites that file every second (write to a
 * temporary file, rename), the layout node_exporter's textfile collector reads.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dstl/err.h"
#include "dstl/local/segstore.h"
#include "dstl/metrics.h"
#include "dstl/storage.h"
#include "dstl/writer.h"

typedef struct {
    char *buf;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->buf ? b->buf + b->len : NULL, b->buf ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (b->buf && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 8192;
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *nb = realloc(b->buf, cap);
        if (!nb) {
            b->oom = 1;
            return;
        }
        b->buf = nb;
        b->cap = cap;
    }
}

static void counter(sbuf *b, const char *name, const char *help, uint64_t v)
{
    put(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

static void gauge(sbuf *b, const char *name, const char *help, uint64_t v)
{
    put(b, "# HELP %s %s\n# TYPE %s gauge\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

/* v / 10^decimals as an exact decimal: "0.001", "4.187", "1048576" — never %g's rounding
 * (1.04858e+06) or exponent, so le labels and sums are the values themselves. */
static void put_scaled(sbuf *b, uint64_t v, unsigned decimals)
{
    uint64_t div = 1;
    for (unsigned i = 0; i < decimals; i++) div *= 10;
    uint64_t whole = v / div, frac = v % div;
    if (!frac) {
        put(b, "%llu", (unsigned long long)whole);
        return;
    }
    char digits[24];
    snprintf(digits, sizeof digits, "%0*llu", (int)decimals, (unsigned long long)frac);
    size_t n = strlen(digits);
    while (n > 1 && digits[n - 1] == '0') digits[--n] = '\0';
    put(b, "%llu.%s", (unsigned long long)whole, digits);
}

/* A Prometheus histogram from a histo: cumulative counts at the `le` bounds given (in the
 * histo's unit), printed as the bound / 10^decimals (6 for microseconds -> seconds). A value
 * counts under the first bound its bucket's upper end fits, so counts are exact at bounds
 * that are bucket edges and within the histo's 1/16 elsewhere; _sum and _count are exact. */
static void histogram(sbuf *b, const char *name, const char *help, const histo *h, const uint64_t *le, size_t nle,
                      unsigned decimals)
{
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    size_t nb = sizeof h->count / sizeof h->count[0];
    for (size_t i = 0; i < nle; i++) {
        uint64_t c = 0;
        for (size_t k = 0; k < nb; k++)
            if (h->count[k] && histo_bucket_upper((unsigned)k) <= le[i]) c += h->count[k];
        put(b, "%s_bucket{le=\"", name);
        put_scaled(b, le[i], decimals);
        put(b, "\"} %llu\n", (unsigned long long)c);
    }
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum ", name, (unsigned long long)h->n, name);
    put_scaled(b, h->sum, decimals);
    put(b, "\n%s_count %llu\n", name, (unsigned long long)h->n);
}

int dstl_storage_stats(dstl_storage *s, dstl_stats *out)
{
    if (!s || !out) return err_fail(-EINVAL, "dstl_storage_stats: NULL argument");
    dstl_stats st = {0};
    pthread_mutex_lock(&s->mu);
    st.appends = s->locked.stats.appends_closed;
    st.append_bytes = s->locked.stats.append_bytes_closed;
    for (dstl_writer *w = s->locked.writers; w; w = w->next_open) {
        st.appends += atomic_load_explicit(&w->st_appends, memory_order_relaxed);
        st.append_bytes += atomic_load_explicit(&w->st_append_bytes, memory_order_relaxed);
    }
    st.persists = s->locked.stats.persists;
    st.persist_failures = s->locked.stats.persist_failures;
    st.segments_written = s->locked.stats.segments;
    st.segment_bytes = s->locked.stats.segment_bytes;
    st.segments_deleted = s->locked.stats.segments_deleted;
    st.in_flight_bytes = s->locked.pipe.in_flight_bytes;
    st.queued_persists = s->locked.pipe.q_waiting;
    st.persist_p50_us = histo_quantile(&s->locked.stats.persist_lat_us, 0.50);
    st.persist_p99_us = histo_quantile(&s->locked.stats.persist_lat_us, 0.99);
    st.persist_max_us = s->locked.stats.persist_lat_us.max;
    st.remote_requests = s->locked.stats.remote_requests;
    st.remote_retries = s->locked.stats.remote_retries;
    st.remote_failures = s->locked.stats.remote_failures;
    st.hedged_attempts = s->locked.stats.hedged;
    st.remote_bytes_written = s->locked.stats.remote_bytes_written;
    pthread_mutex_unlock(&s->mu);
    /* the readers' counters: atomics, no lock */
    const reader_counters *rd = &s->rd;
    st.remote_requests += atomic_load_explicit(&rd->requests, memory_order_relaxed);
    st.remote_retries += atomic_load_explicit(&rd->retries, memory_order_relaxed);
    st.hedged_attempts += atomic_load_explicit(&rd->hedges, memory_order_relaxed);
    st.remote_failures += atomic_load_explicit(&rd->failures, memory_order_relaxed);
    st.remote_bytes_read += atomic_load_explicit(&rd->bytes, memory_order_relaxed);
    st.cache_hits = atomic_load_explicit(&rd->cache_hits, memory_order_relaxed);
    st.cache_misses = atomic_load_explicit(&rd->cache_misses, memory_order_relaxed);
    st.local_read_fallbacks = atomic_load_explicit(&rd->local_fallbacks, memory_order_relaxed);
    pthread_mutex_lock(&s->keys.mu);
    st.key_reloads = s->keys.reloads;
    st.key_reload_failures = s->keys.reload_failures;
    pthread_mutex_unlock(&s->keys.mu);
    st.restores = atomic_load_explicit(&rd->restores, memory_order_relaxed);
    st.restore_objects_fetched = atomic_load_explicit(&rd->restore_objects_fetched, memory_order_relaxed);
    st.restore_requests = atomic_load_explicit(&rd->restore_requests, memory_order_relaxed);
    st.restore_bytes_fetched = atomic_load_explicit(&rd->restore_bytes_fetched, memory_order_relaxed);
    st.restore_bytes_delivered = atomic_load_explicit(&rd->restore_bytes_delivered, memory_order_relaxed);
    st.restore_cache_hits = atomic_load_explicit(&rd->restore_cache_hits, memory_order_relaxed);
    st.segments_direct = s->store ? segstore_direct_writes(s->store) : 0;
    st.segments_in_place = s->store ? segstore_in_place_writes(s->store) : 0;
    st.pooled_bytes = chunk_pool_bytes(&s->chunks) + atomic_load_explicit(&rd->seg_buffers_idle, memory_order_relaxed);
    *out = st;
    return 0;
}


static int metrics_format(dstl_storage *s, char **text)
{
    /* 1-1.5-2-3-5-7 steps per decade: fine enough to draw a latency distribution from (the
     * perf report does), few enough series to scrape */
    static const uint64_t lat_us[] = {500, 700, 1000, 1500, 2000, 3000, 5000, 7000, 10000, 15000, 20000, 30000,
                                      50000, 70000, 100000, 150000, 200000, 300000, 500000, 700000, 1000000,
                                      2000000, 5000000, 10000000};
    static const uint64_t writers[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
    static const uint64_t bytes[] = {4096, 65536, 262144, 1048576, 4194304, 16777216, 67108864, 268435456};
    dstl_stats st;
    int rc = dstl_storage_stats(s, &st);
    if (rc < 0) return rc;
    histo *copy = malloc(4 * sizeof *copy);
    if (!copy) return err_fail(-ENOMEM, "metrics: out of memory");
    pthread_mutex_lock(&s->mu);
    copy[0] = s->locked.stats.persist_lat_us;
    copy[1] = s->locked.stats.upload_lat_us;
    copy[2] = s->locked.stats.batch_writers;
    copy[3] = s->locked.stats.segment_size;
    pthread_mutex_unlock(&s->mu);

    sbuf b = {0};
    counter(&b, "dstl_appends_total", "Records appended.", st.appends);
    counter(&b, "dstl_append_bytes_total", "Payload bytes appended.", st.append_bytes);
    counter(&b, "dstl_persists_total", "Persist calls.", st.persists);
    counter(&b, "dstl_persist_failures_total", "Persists that failed.", st.persist_failures);
    counter(&b, "dstl_segments_written_total", "Segments made durable (one per flushed batch).", st.segments_written);
    counter(&b, "dstl_segment_bytes_total", "Bytes of segments made durable.", st.segment_bytes);
    counter(&b, "dstl_segments_deleted_total", "Segments deleted after truncation and discard.", st.segments_deleted);
    counter(&b, "dstl_upload_requests_total", "HTTP requests to the object store (attempts, hedges included).",
            st.remote_requests);
    counter(&b, "dstl_upload_retries_total", "Requests retried after a failed attempt.", st.remote_retries);
    counter(&b, "dstl_upload_failures_total", "Uploads and deletes that failed after every attempt.",
            st.remote_failures);
    counter(&b, "dstl_upload_hedged_attempts_total", "Attempts started because another was slow.", st.hedged_attempts);
    counter(&b, "dstl_remote_bytes_written_total", "Request body bytes sent to the object store.",
            st.remote_bytes_written);
    counter(&b, "dstl_remote_bytes_read_total", "Response body bytes read from the object store.", st.remote_bytes_read);
    counter(&b, "dstl_cache_hits_total", "Reader cache hits.", st.cache_hits);
    counter(&b, "dstl_cache_misses_total", "Reader cache misses.", st.cache_misses);
    counter(&b, "dstl_local_read_fallbacks_total", "Segments read from the object store because their local copy "
            "was unusable.", st.local_read_fallbacks);
    counter(&b, "dstl_key_reloads_total", "Changed key files re-read and taken.", st.key_reloads);
    counter(&b, "dstl_segments_direct_total", "Segments written with O_DIRECT (dstl.io.direct).", st.segments_direct);
    counter(&b, "dstl_segments_in_place_total", "Segments written over a recycled file of exactly their length.",
            st.segments_in_place);
    counter(&b, "dstl_key_reload_failures_total", "Key file re-reads that failed (previous keys kept).",
            st.key_reload_failures);
    /* restore plans (closed ones), from one table */
    const struct {
        const char *name, *help;
        uint64_t v;
    } restore[] = {
        {"dstl_restores_total", "Restore plans closed.", st.restores},
        {"dstl_restore_objects_fetched_total", "Objects restore plans fetched from.", st.restore_objects_fetched},
        {"dstl_restore_requests_total", "GET attempts of restore plans and their readers.", st.restore_requests},
        {"dstl_restore_bytes_fetched_total", "Response bytes of those GETs.", st.restore_bytes_fetched},
        {"dstl_restore_bytes_delivered_total", "Bytes restore readers took from what their plan fetched.",
         st.restore_bytes_delivered},
        {"dstl_restore_cache_hits_total", "Restore reads served from bytes the plan already held.",
         st.restore_cache_hits},
    };
    for (size_t i = 0; i < sizeof restore / sizeof restore[0]; i++)
        counter(&b, restore[i].name, restore[i].help, restore[i].v);
    gauge(&b, "dstl_inflight_bytes", "Bytes handed to the pipeline and not yet durable.", st.in_flight_bytes);
    gauge(&b, "dstl_queue_size", "Writer ranges queued for the next batch.", st.queued_persists);
    gauge(&b, "dstl_pooled_bytes", "Free chunks and segment buffers kept for reuse (not in dstl_inflight_bytes).",
          st.pooled_bytes);
    histogram(&b, "dstl_persist_latency_seconds", "Persist call to future completion.", &copy[0], lat_us,
              sizeof lat_us / sizeof lat_us[0], 6);
    histogram(&b, "dstl_upload_latency_seconds", "Segment upload, flush to acknowledgement.", &copy[1], lat_us,
              sizeof lat_us / sizeof lat_us[0], 6);
    histogram(&b, "dstl_upload_batch_writers", "Writer sections per segment.", &copy[2], writers,
              sizeof writers / sizeof writers[0], 0);
    histogram(&b, "dstl_upload_size_bytes", "Segment sizes.", &copy[3], bytes, sizeof bytes / sizeof bytes[0], 0);
    free(copy);
    if (b.oom) {
        free(b.buf);
        return err_fail(-ENOMEM, "metrics: out of memory");
    }
    *text = b.buf;
    return 0;
}

int dstl_storage_metrics(dstl_storage *s, char **text)
{
    if (!s || !text) return err_fail(-EINVAL, "dstl_storage_metrics: NULL argument");
    return metrics_format(s, text);
}

void metrics_write_file(dstl_storage *s)
{
    const char *path = s->conf.metrics_file;
    if (!*path) return;
    char *text = NULL;
    if (metrics_format(s, &text) < 0) return;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    /* Metrics are a view, not data: no fsync; a crash leaves the last complete file. */
    if (f) {
        int ok = fputs(text, f) >= 0;
        ok &= fclose(f) == 0;
        if (ok) rename(tmp, path);
        else unlink(tmp);
    }
    free(text);
}
