/*
 * dstl/internal.h — the objects behind include/dstl.h and who owns which field.
 *
 * Threads and locks (see dstl/README.md for the data flow):
 *  - A writer's append state (chunks, next_seq, unsent position) belongs to the writer's
 *    thread: appends take no lock and make no syscall.
 *  - Everything shared between writer threads and the pipeline thread is guarded by the
 *    one storage mutex `s->mu`: the pipeline queue, every writer's range list, the segment
 *    registry and the live-handle table, futures under construction, the in-flight count.
 *    Critical sections are short: list and counter updates, no I/O.
 *  - The pipeline thread alone owns batches being encoded and written (pipeline.c).
 *  - A future has its own mutex for waiters; lock order is s->mu, then f->mu.
 */
#ifndef DSTL_INTERNAL_H
#define DSTL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "dstl.h"
#include "dstl/config.h"
#include "dstl/histo.h"
#include "dstl/remote/remote.h"
#include "dstl/u64map.h"
#include "wire/wire.h"

struct segstore;
struct bsec;
struct seg;

/* ---- writer-side records ---- */

/* A block of pending records in wire's pending-record format. Chunks grow from
 * CHUNK_MIN to CHUNK_MAX so an idle writer costs little and a busy one few mallocs. */
typedef struct chunk {
    struct chunk *next;
    uint64_t seq_first;         /* seq of the first record in data */
    uint64_t nrec;
    uint64_t payload_first;     /* the writer's cumulative payload bytes before this chunk */
    size_t used, cap;
    uint8_t data[];
} chunk;

#define CHUNK_MIN (4u << 10)    /* 4 KiB: 1,000 idle writers hold 4 MiB */
#define CHUNK_MAX (1u << 20)    /* 1 MiB: a busy writer mallocs once per ~10,000 small records */
#define CHUNK_CLASSES 9         /* 4 KiB .. 1 MiB, powers of two */
/* Freed chunks are kept for reuse up to this many bytes per storage: a fresh page costs a
 * fault on first touch (microseconds on a VM), which made faults the largest cost of
 * appending; 16 MiB is tens of milliseconds of appends at hundreds of MB/s, and with the
 * segment buffer pool stays inside the 64 MiB of RSS the design allows beyond max-in-flight. */
#define CHUNK_POOL_BYTES (16u << 20)

enum { RANGE_INFLIGHT = 0, RANGE_DURABLE = 1, RANGE_FAILED = 2 };

/* A range of one writer's records handed to the pipeline, in seq order in w->ranges.
 * Guarded by s->mu. */
typedef struct range {
    struct range *next;
    uint64_t seq_first, seq_end;
    uint64_t payload_first;     /* cumulative payload bytes before seq_first */
    uint64_t payload_bytes;     /* payload bytes of its records */
    uint64_t rec_bytes;         /* bytes in pending-record format */
    uint64_t enc_reserve;       /* in-flight room reserved for its encoded copy (admission) */
    int state;
    int truncated;              /* truncated while in flight: drop when the batch ends */
    wire_span *spans;           /* the records, while not durable (chunks outlive them) */
    size_t nspans;
    struct bsec *sec;           /* INFLIGHT: its section in the pipeline */
    struct seg *seg;            /* DURABLE: where it is */
    uint32_t sec_index;
    wire_section_loc loc;
} range;

struct dstl_writer {
    dstl_storage *s;
    char *id;
    uint32_t kg_first, kg_last;
    uint64_t incarnation;                   /* this opening of id in the run (handle identity) */
    struct dstl_writer *next_open;          /* s->writers, under s->mu */

    /* owned by the writer thread */
    chunk *head, *tail;
    uint64_t next_seq;
    uint64_t payload_total;                 /* cumulative payload bytes of all appends */
    chunk *sent_chunk;                      /* first unsent record: chunk and offset */
    size_t sent_off;
    uint64_t sent_seq, sent_payload;
    uint64_t unsent_bytes;                  /* pending-record bytes not yet handed off */
    uint64_t preempt_bytes;                 /* = dstl.preemptive-persist-threshold */
    /* Cumulative payload at recent dstl_writer_next_seq() answers, so a persist from a
     * point the backend read (its materialization point) knows its size exactly. */
    uint64_t mark_seq[8], mark_payload[8];
    unsigned mark_i;

    /* guarded by s->mu */
    range *ranges, *ranges_tail;
    uint64_t trunc_seq;                     /* records below are no longer needed */
    unsigned inflight_ranges;

    /* stats, written by the writer thread only, read by dstl_storage_stats */
    _Atomic uint64_t st_appends, st_append_bytes;
};

/* ---- the pipeline's view ---- */

/* A future waiting on a section: it takes the records [lo, hi) of it. */
typedef struct fwait {
    struct fwait *next;
    dstl_future *f;
    uint64_t lo, hi;
} fwait;

/* One writer range in the queue, then in a batch. Guarded by s->mu until the pipeline
 * takes it out of the queue; then the pipeline's (waiters stay under s->mu). */
typedef struct bsec {
    struct bsec *next;
    dstl_writer *w;
    range *r;
    fwait *waiters;
    uint32_t index;             /* section index in its segment */
    uint64_t t_enq_ns;          /* when it was handed off: its futures' bound runs from here */
} bsec;

/* A segment known to this storage run. Guarded by s->mu. */
typedef struct seg {
    uint64_t no;
    char name[64];
    uint64_t size, footer_offset;
    uint32_t footer_len, footer_crc;
    int durable;
    int has_local, has_remote;  /* where its copies are (set when it became durable) */
    int uploading;              /* its upload still runs: deletion waits */
    int section_refs;           /* untruncated writer ranges in it */
    int handle_refs;            /* live handles and pins of futures under construction */
    int deleting;
    struct seg *next_delete;
} seg;

/* ---- futures and handles ---- */

typedef struct {
    seg *sg;                    /* pinned */
    uint32_t sec_index;
    wire_section_loc loc;
    uint64_t seq_first, seq_end;
    uint64_t payload_bytes;     /* of [seq_first, seq_end) */
} fpiece;

struct dstl_future {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                   /* user + pipeline; under mu */
    int done, err, user_gone;
    char errmsg[512];
    dstl_handle *handle;

    /* under construction: guarded by s->mu */
    dstl_storage *s;
    char *writer_id;
    uint64_t writer_incarnation;
    uint64_t checkpoint_id, from, to, size;
    int outstanding, failed;
    fpiece *pieces;
    size_t npieces, cap;
    uint64_t t_start_ns;
};

struct dstl_handle {
    wire_handle *wh;
    uint64_t ident;             /* hash of (storage, writer, incarnation, checkpoint, from, to) */
};

/* A live (not discarded) handle of this storage: what keeps its segments. */
typedef struct livehandle {
    struct livehandle *next;          /* same identity hash */
    char *key;
    seg **segs;
    size_t nsegs;
} livehandle;

/* ---- the storage ---- */

struct dstl_storage {
    dstl_config *cfg;           /* a private copy: cv's strings point into it */
    config_values cv;
    char run_id[24];
    char *local_dir;

    pthread_mutex_t mu;
    pthread_cond_t room_cv;     /* in-flight bytes went down */
    pthread_cond_t range_cv;    /* some range left the in-flight state */

    /* queue to the pipeline (under mu) */
    bsec *q_head, **q_tail;
    uint64_t q_len;
    uint64_t q_waiting;         /* hand-offs queued or in the open batch, not yet flushed */
    int wake_fd;                /* eventfd: the pipeline has work */
    int closing;
    /* dstl.upload.max-in-flight (under mu): every byte the pipeline keeps for handed-off
     * records — the records until durable (they stay in the writers' chunks for a retry),
     * the room reserved for their encoded copy, then the encoded segment buffer until both
     * copies are written. Hand-offs are admitted in arrival order (adm_head); a flush that
     * needs more room than its ranges reserved waits with flush_need, ahead of them. */
    uint64_t in_flight_bytes;
    uint64_t flush_need;
    struct admit_waiter *adm_head;

    struct dstl_writer *writers;
    size_t nwriters;
    uint64_t writer_incarnations;   /* dstl_writer_open calls so far (under mu) */

    /* freed writer chunks, by size class (under pool_mu: writers allocate without s->mu) */
    pthread_mutex_t pool_mu;
    chunk *chunk_pool[CHUNK_CLASSES];
    size_t chunk_pool_bytes;

    /* registry (under mu) */
    uint64_t next_seg_no;
    u64map segs;                /* no -> seg */
    u64map live;                /* identity hash -> live chain */
    seg *delete_head;

    struct segstore *store;
    /* the remote store: NULL when local only; the client is the pipeline thread's */
    struct s3_client *s3;
    remote_loc remote;
    pthread_t thread;
    int thread_started;
    int test_upload_err;        /* storage_test_opts.fail_upload_start (tests only) */
    int64_t test_wall_skew_ms;  /* storage_test_opts.wall_clock_skew_ms (tests only) */
    /* the run's lease object (pipeline.c; written by the pipeline thread while it runs, read
     * by dstl_storage_close after it stopped) */
    char lease_key[640];        /* "" until the first write */
    int lease_tried;            /* a write was sent: the object may exist */
    int lease_deleted;          /* dstl_storage_close: 1 removed, -1 failed, 0 under way */
    int store_err;              /* sticky local store failure (fail-stop) */
    char store_err_msg[512];    /* its detail: "local store DIR failed since ..." (under mu) */

    /* stats (under mu) */
    uint64_t st_persists, st_persist_failures, st_segments, st_segment_bytes;
    uint64_t st_segments_deleted, st_appends_closed, st_append_bytes_closed;
    uint64_t st_remote_requests, st_remote_retries, st_remote_failures, st_hedged;
    uint64_t st_remote_bytes_written, st_remote_bytes_read;
    histo persist_lat_us;
    histo upload_lat_us;        /* per segment upload, flush to acknowledgement */
    histo segment_bytes;        /* per segment written */
    histo batch_writers;        /* sections (writer ranges) per segment */
    uint64_t metrics_due_ns;    /* next dstl.metrics.file write (pipeline thread) */

    /* reader cache (cache.c) */
    struct rcache *rcache;      /* cache_open, or the first remote reader (under mu) */
    /* readers' remote counters (reader.c adds, cache_stats_add reports; atomics, no lock) */
    _Atomic uint64_t st_rd_requests, st_rd_retries, st_rd_hedges, st_rd_failures, st_rd_bytes;
    _Atomic uint64_t st_cache_hits, st_cache_misses;
    _Atomic uint64_t st_rd_local_fallbacks;   /* segments read from S3 after their local copy failed */
    /* end reader cache */
};

/* ---- internal functions ---- */

/* clock */
uint64_t now_ns(void);

/* registry.c (all under s->mu) */
seg *reg_new_segment(dstl_storage *s);
void reg_section_release(dstl_storage *s, seg *g);
void reg_pin(seg *g);
void reg_unpin(dstl_storage *s, seg *g);
/* Makes a handle live (its segments stay until discarded); pins of the future become the
 * handle's references, or are dropped when an equal handle is live already. */
int reg_live_add(dstl_storage *s, dstl_handle *h, fpiece *pieces, size_t n);
int reg_live_discard(dstl_storage *s, const dstl_handle *h);
void reg_free_all(dstl_storage *s);
uint64_t handle_ident(const wire_handle *wh, char **key);

/* writer.c / future.c (under s->mu) */
dstl_future *future_new(dstl_storage *s, const dstl_writer *w, uint64_t cp, uint64_t from, uint64_t to);
int future_add_piece(dstl_future *f, range *r, uint64_t lo, uint64_t hi);
void future_finish(dstl_future *f, int err, const char *detail);   /* under s->mu; ends the build */
void future_complete_if_ready(dstl_future *f);
void future_unref(dstl_future *f);
void range_free(range *r);
void chunk_pool_free(dstl_storage *s);

/* metrics.c */
int metrics_format(dstl_storage *s, char **text);
void metrics_write_file(dstl_storage *s);

/* pipeline.c */
int pipeline_start(dstl_storage *s);
void pipeline_stop(dstl_storage *s);
void pipeline_wake(dstl_storage *s);
/* Queue a range for writing (under s->mu); the caller wakes the pipeline after unlocking.
 * The range's rec_bytes + enc_reserve were charged to s->in_flight_bytes at admission. */
int pipeline_enqueue(dstl_storage *s, dstl_writer *w, range *r);
/* The in-flight room a hand-off of rec_bytes reserves for its encoded copy: its share of a
 * segment (the records re-framed, its index entry, the segment's fixed parts), twice the
 * records when compressing (the codec's bound plus the encoder's scratch copy). */
uint64_t pipeline_enc_reserve(const dstl_storage *s, uint64_t rec_bytes);

/* handle.c */
dstl_handle *handle_wrap(wire_handle *wh);
int segment_name_parse(const char *name, char *run_id, size_t cap, uint64_t *no);

#endif
