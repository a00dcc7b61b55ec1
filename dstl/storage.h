/*
 * dstl/storage.h — the storage object: what every component of one dstl_storage_open shares,
 * grouped by who may touch it (as aws-c-s3 splits synced_data from threaded_data).
 *
 *   fixed      set by dstl_storage_open, unchanged until dstl_storage_close: any thread reads
 *              them without a lock (the objects they point to have their own rules);
 *   s->locked  under the storage mutex s->mu: shared by writer threads, the pipeline thread,
 *              futures and readers. Critical sections are list and counter updates, never I/O;
 *              lock order is s->mu, then a future's own mutex;
 *   s->loop    the pipeline thread's while it runs (dstl/pipeline/), the opening and closing
 *              thread's before it starts and after it stopped;
 *   s->rd      readers' counters: relaxed atomics, no lock;
 *   s->chunks  the writers' chunk pool, under its own mutex.
 *
 * A file includes this header only when it works on the storage as a whole (storage.c,
 * writer.c, the pipeline, metrics.c, gc.c and the readers); the future, registry and handle
 * code see only their own parts.
 */
#ifndef DSTL_STORAGE_H
#define DSTL_STORAGE_H

#include <pthread.h>
#include <stdint.h>

#include "dstl.h"
#include "dstl/config.h"
#include "dstl/future.h"
#include "dstl/keys.h"
#include "dstl/metrics.h"
#include "dstl/pipeline.h"
#include "dstl/registry.h"
#include "dstl/remote/remote.h"
#include "dstl/seams.h"
#include "dstl/writer.h"

struct segstore;
struct read_cache;
struct s3_client;

struct dstl_storage {
    /* ---- fixed ---- */
    dstl_config *cfg;           /* a private copy: conf's strings point into it */
    config_values conf;         /* the resolved configuration (config.h) */
    char run_id[24];
    char *local_dir;
    remote_loc remote;          /* bucket and prefix ("" bucket when local only) */
    struct segstore *store;     /* the local store (local/segstore.h has its thread rules) */
    int wake_fd;                /* eventfd: the pipeline has work */
    future_ctx fctx;            /* what futures see of the storage */
    storage_seams seams;        /* test seams (seams.h); all zero in production */
    key_source keys;            /* dstl.encryption.key-file (keys.h; own mutex); inert when unset */

    pthread_mutex_t mu;
    pthread_cond_t room_cv;     /* in-flight bytes went down, or the storage is closing */
    pthread_cond_t range_cv;    /* some range left the in-flight state */

    /* ---- under mu ---- */
    struct {
        pipeline_shared pipe;           /* the queue and the in-flight bound */
        struct dstl_writer *writers;    /* open writers */
        size_t nwriters;
        uint64_t writer_incarnations;   /* dstl_writer_open calls so far */
        registry reg;                   /* segments of this run, live handles */
        storage_counters stats;
        int store_err;                  /* sticky local store failure (fail-stop) */
        char store_err_msg[512];        /* its detail: "local store DIR failed since ..." */
        struct read_cache *cache;       /* made at open, or by the first remote reader */
    } locked;

    /* ---- the pipeline thread's ---- */
    struct {
        struct s3_client *s3;           /* NULL when local only */
        pthread_t thread;
        int thread_started;
        /* the run's lease object: written by the pipeline thread while it runs, read by
         * dstl_storage_close after it stopped */
        char lease_key[640];            /* "" until the first write */
        int lease_tried;                /* a write was sent: the object may exist */
        int lease_deleted;              /* dstl_storage_close: 1 removed, -1 failed, 0 under way */
        uint64_t metrics_due_ns;        /* next dstl.metrics.file write */
    } loop;

    /* ---- no lock ---- */
    reader_counters rd;
    chunk_pool chunks;
};

#endif
