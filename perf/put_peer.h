/*
 * perf/put_peer.h — a PUT peer measured in the same run as the storage it follows (bench_ckpt's
 * checkpoint budget, bench_remote's remote.p99_vs_put).
 *
 * A thread of its own, with its own S3 client (its own connection), PUTs once per interval a
 * body of the followed storage's mean segment size so far (segment_bytes / segments_written
 * since the peer started), then deletes it: the work of one persist's upload, done next to the
 * storage's own, under the same load, CPU and server. A peer measured after the run, against
 * an idle server, measured other conditions. Header-only (each perf program is one object).
 */
#ifndef DSTL_PERF_PUT_PEER_H
#define DSTL_PERF_PUT_PEER_H

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dstl.h"
#include "dstl/config.h"
#include "dstl/remote/remote.h"
#include "s3/s3.h"

typedef struct {
    dstl_storage *follow;              /* whose segment size it follows */
    dstl_stats base;
    const char *bucket;
    char key_prefix[64];
    double interval_s;
    atomic_int stop;
    double *ms, *at;                   /* each PUT's latency, and when it ended (since t0) */
    double t0;
    size_t n, cap;
    uint64_t bytes, errors;
    s3_client *cli;
} put_peer;

static inline double put_peer_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void *put_peer_main(void *arg)
{
    put_peer *pp = arg;
    uint8_t *buf = NULL;
    size_t bcap = 0;
    double next = put_peer_now_s() + pp->interval_s;
    for (uint64_t i = 0; !atomic_load(&pp->stop); i++) {
        while (!atomic_load(&pp->stop) && put_peer_now_s() < next) usleep(2000);
        next += pp->interval_s;
        if (put_peer_now_s() > next) next = put_peer_now_s() + pp->interval_s;   /* a slow PUT: no catching up */
        dstl_stats st;
        if (atomic_load(&pp->stop) || dstl_storage_stats(pp->follow, &st) < 0) continue;
        uint64_t segs = st.segments_written - pp->base.segments_written;
        size_t size = segs ? (size_t)((st.segment_bytes - pp->base.segment_bytes) / segs) : 0;
        if (!size) continue;
        if (size > bcap) {
            uint8_t *nb = realloc(buf, size);
            if (!nb) break;
            for (size_t k = bcap; k < size; k++) nb[k] = (uint8_t)(k * 2654435761u >> 24);
            buf = nb;
            bcap = size;
        }
        if (pp->n == pp->cap) {
            size_t nc = pp->cap ? pp->cap * 2 : 512;
            double *m = realloc(pp->ms, nc * sizeof *m), *a = m ? realloc(pp->at, nc * sizeof *a) : NULL;
            if (m) pp->ms = m;
            if (!a) break;
            pp->at = a;
            pp->cap = nc;
        }
        char key[160];
        snprintf(key, sizeof key, "%s/%d-%" PRIu64, pp->key_prefix, (int)getpid(), i);
        s3_result r;
        double t0 = put_peer_now_s();
        if (s3_put_object_sync(pp->cli, pp->bucket, key, buf, size, false, &r) < 0) {
            pp->errors++;
            continue;
        }
        pp->at[pp->n] = put_peer_now_s() - pp->t0;
        pp->ms[pp->n++] = (put_peer_now_s() - t0) * 1e3;
        pp->bytes += size;
        s3_delete_object_sync(pp->cli, pp->bucket, key, &r);
    }
    free(buf);
    return NULL;
}

/* Starts the peer on the S3 settings of c (its own client), following `follow`: 0, or -1 with
 * the reason on stderr (the figure is then missing, the run goes on). */
static inline int put_peer_start(put_peer *pp, pthread_t *th, dstl_storage *follow, const dstl_config *c,
                                 const char *bucket, const char *key_prefix, double interval_s)
{
    config_values cv;
    int rc = config_resolve(c, &cv) < 0 || remote_client_new(&cv, &pp->cli) < 0 ? -1 : 0;
    pp->follow = follow;
    pp->bucket = bucket;
    pp->interval_s = interval_s;
    snprintf(pp->key_prefix, sizeof pp->key_prefix, "%s", key_prefix);
    if (rc == 0 && dstl_storage_stats(follow, &pp->base) < 0) rc = -1;
    pp->t0 = put_peer_now_s();
    if (rc == 0 && pthread_create(th, NULL, put_peer_main, pp)) rc = -1;
    if (rc < 0) {
        fprintf(stderr, "PUT peer not started: %s\n", dstl_last_error());
        s3_client_free(pp->cli);
        pp->cli = NULL;
    }
    return rc;
}

static inline int put_peer_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile (nearest rank) of the peer's latencies in ms; NaN when it made none. */
static inline double put_peer_quantile(const put_peer *pp, double q)
{
    if (!pp->n) return 0.0 / 0.0;
    double *c = malloc(pp->n * sizeof *c);
    if (!c) return 0.0 / 0.0;
    memcpy(c, pp->ms, pp->n * sizeof *c);
    qsort(c, pp->n, sizeof *c, put_peer_cmp);
    size_t i = (size_t)(q * (double)pp->n + 0.999999);   /* ceil(q n), 1-based */
    double x = c[i ? (i > pp->n ? pp->n : i) - 1 : 0];
    free(c);
    return x;
}

/* Stops the peer and frees its client; pp->ms[0..n) stay for the caller (free them). */
static inline void put_peer_stop(put_peer *pp, pthread_t th)
{
    atomic_store(&pp->stop, 1);
    pthread_join(th, NULL);
    s3_client_free(pp->cli);
    pp->cli = NULL;
}

#endif
