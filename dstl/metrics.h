/*
 * dstl/metrics.h — the storage's counters, dstl_storage_stats, and the Prometheus text.
 *
 * Owns: `storage_counters`, the counters and histograms of the write path (under s->mu:
 * updated by writers, futures and the pipeline, each with the mutex held), and
 * `reader_counters`, the readers' remote and cache counters (relaxed atomics, no lock: readers
 * run on their own threads). dstl_storage_stats and dstl_storage_metrics live here; so does
 * the periodic dstl.metrics.file write the pipeline thread makes.
 */
#ifndef DSTL_METRICS_H
#define DSTL_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "dstl.h"
#include "dstl/histo.h"

typedef struct storage_counters {
    uint64_t persists, persist_failures;
    uint64_t segments, segment_bytes, segments_deleted;
    uint64_t appends_closed, append_bytes_closed;   /* of writers already closed */
    uint64_t remote_requests, remote_retries, remote_failures, hedged, remote_bytes_written;
    histo persist_lat_us;       /* persist call to future completion */
    histo upload_lat_us;        /* per segment upload, flush to acknowledgement */
    histo segment_size;         /* bytes per segment written */
    histo batch_writers;        /* sections (writer ranges) per segment */
} storage_counters;

typedef struct reader_counters {
    _Atomic uint64_t requests, retries, hedges, failures, bytes;  /* remote GETs */
    _Atomic uint64_t cache_hits, cache_misses;
    _Atomic uint64_t local_fallbacks;   /* segments read from S3 after their local copy failed */
    _Atomic uint64_t seg_buffers_idle;  /* the pipeline's free segment buffers kept, bytes (it
                                         * stores this after each turn; not a reader counter) */
    _Atomic uint64_t restores, restore_objects_fetched, restore_requests;   /* closed restore plans */
    _Atomic uint64_t restore_bytes_fetched, restore_bytes_delivered, restore_cache_hits;
} reader_counters;

/* A persist ended (s->mu held): a failure, or its latency. */
static inline void metrics_persist_done(storage_counters *c, int err, uint64_t lat_us)
{
    if (err) c->persist_failures++;
    else histo_add(&c->persist_lat_us, lat_us);
}

/* Rewrites dstl.metrics.file (temporary file, rename) when it is set. Pipeline thread. */
void metrics_write_file(dstl_storage *s);

#endif
