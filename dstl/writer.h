/*
 * dstl/writer.h — writers: their records (chunks), the ranges they hand to the pipeline,
 * and the pool chunks are recycled through.
 *
 * Owns: struct dstl_writer, `chunk`, `range`, `chunk_pool`.
 * Threads: a writer's append state belongs to the thread using the writer (appends take no
 * lock and make no syscall); its range list and truncation point are under the storage mutex
 * s->mu, which the pipeline takes to mark ranges durable or failed; the chunk pool has its own
 * mutex (writers allocate without s->mu).
 */
#ifndef DSTL_WRITER_H
#define DSTL_WRITER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "dstl.h"
#include "dstl/registry.h"
#include "wire/wire.h"

struct pipeline_section;

/* A block of pending records in wire's pending-record format. Chunks grow from
 * CHUNK_MIN to CHUNK_MAX so an idle writer costs little and a busy one few mallocs. */
typedef struct chunk {
    struct chunk *next;
    uint64_t seq_first;         /* seq of the first record in data */
    uint64_t nrec;
    uint64_t payload_first;     /* the writer's cumulative payload bytes before this chunk */
    size_t used, cap;
    size_t touched;             /* the most of data[] ever used (memory faulted in), the pool's measure */
    uint8_t data[];
} chunk;

#define CHUNK_MIN (4u << 10)    /* 4 KiB: 1,000 idle writers hold 4 MiB */
#define CHUNK_MAX (1u << 20)    /* 1 MiB: a busy writer mallocs once per ~10,000 small records */
/* The most a chunk is sized by the last hand-off (chunk_grow): larger ones would come from
 * mmap (glibc's threshold starts at 128 KiB) and be faulted in afresh after every hand-off. */
#define CHUNK_HINT_MAX (64u << 10)
#define WRITER_TALLY_MAX_KG 4096u   /* a writer owning more key groups keeps no tally (24 B each) */
#define CHUNK_CLASSES 9         /* 4 KiB .. 1 MiB, powers of two */
/* Freed chunks are kept for reuse, their touched pages counted (chunk_resident), up to the
 * headroom under dstl.upload.max-in-flight (chunk_pool_room), and at least this much: a fresh
 * page costs a fault on first touch, and on a VM whose host takes freed pages back a first
 * touch runs at 0.3-0.6 GB/s (machine.first_touch_mb_s); with a fixed 16 MiB pool, 1,024
 * writers' rounds of ~36 KiB chunks (36 MiB a round) went back to glibc, which trimmed them,
 * and faults in appends' memcpy were 3/4 of the load run's CPU. */
#define CHUNK_POOL_MIN (16u << 20)
/* A pipeline idle this long (nothing open or in flight) trims the pool to CHUNK_POOL_MIN: a
 * storage does not keep a burst's memory while it has nothing to do. */
#define CHUNK_POOL_IDLE_NS (1000000000ull)

/* Freed chunks by size class. */
typedef struct chunk_pool {
    pthread_mutex_t mu;
    chunk *free_list[CHUNK_CLASSES];
    size_t bytes;
} chunk_pool;

void chunk_pool_init(chunk_pool *p);
/* A chunk of cap bytes whose first record will be seq (payload bytes before it: payload), from
 * the pool when one of that size class is free; NULL when out of memory. */
chunk *chunk_new(chunk_pool *p, size_t cap, uint64_t seq, uint64_t payload);
/* Keeps c for reuse while the pool holds at most room bytes with it (chunk_pool_room), or
 * frees it. */
void chunk_put(chunk_pool *p, chunk *c, size_t room);
struct dstl_storage;
/* What the pool may hold now: the headroom under max-in-flight (records held in flight and
 * freed chunks kept together stay within it), at least CHUNK_POOL_MIN. s->mu held. */
size_t chunk_pool_room(const struct dstl_storage *s);
struct dstl_writer;
/* The first seq whose record the writer's chunks must keep: unsent records, and those of a
 * range whose only copy is in the chunks (handed off, not encoded yet). s->mu held. */
uint64_t chunk_floor(const struct dstl_writer *w);
/* Frees the writer's leading chunks whose records are durable, truncated or encoded into a
 * segment buffer, up to (not including) the chunk of its first unsent record. s->mu held; any
 * thread (the pipeline calls it once a batch is encoded, so records are not held twice). */
void writer_release_sent_chunks(struct dstl_writer *w);
void chunk_pool_destroy(chunk_pool *p);
/* The bytes the pool holds (chunk_resident of its chunks), any thread. */
size_t chunk_pool_bytes(chunk_pool *p);
/* Frees pooled chunks until the pool holds at most keep bytes; any thread. */
void chunk_pool_trim(chunk_pool *p, size_t keep);

enum { RANGE_INFLIGHT = 0, RANGE_DURABLE = 1, RANGE_FAILED = 2 };

/* A range of one writer's records handed to the pipeline, in seq order in w->ranges.
 * Guarded by s->mu; while INFLIGHT the pipeline reads its spans and the writer only reads
 * its fields. */
typedef struct range {
    struct range *next;
    uint64_t seq_first, seq_end;
    uint64_t payload_first;     /* cumulative payload bytes before seq_first */
    uint64_t payload_bytes;     /* payload bytes of its records */
    uint64_t rec_bytes;         /* bytes in pending-record format */
    uint64_t enc_reserve;       /* in-flight room reserved for its encoded copy (admission) */
    int state;
    int truncated;              /* truncated while in flight: drop when the batch ends */
    /* The records, while they are needed and not in a segment buffer: in the writer's chunks
     * (in_chunks, from the hand-off until its batch is encoded), or in retry_buf (a failed
     * batch's sections decoded back, until they are encoded again). Once encoded, the
     * segment buffer holds them and spans is NULL. */
    wire_span *spans;           /* span_buf when two or fewer (range_spans_free) */
    size_t nspans;
    wire_span span_buf[2];
    wire_section_tally *tally;  /* with spans from the chunks: the writer's count of them, or NULL */
    uint32_t tally_cap;         /* the key groups tally has room for (its nkg may be fewer) */
    int in_chunks;
    uint8_t *retry_buf;
    uint64_t retained;          /* FAILED: its records' bytes, still charged to max-in-flight */
    int lost;                   /* FAILED and its records could not be rebuilt: the error */
    struct pipeline_section *sec; /* INFLIGHT: its section in the pipeline */
    run_segment *seg;           /* DURABLE: where it is */
    uint32_t sec_index;
    wire_section_loc loc;
} range;

struct dstl_writer {
    dstl_storage *s;
    char *id;
    uint32_t kg_first, kg_last;
    uint64_t incarnation;                   /* this opening of id in the run (handle identity) */
    uint64_t persist_epoch;                 /* s->locked.pipe.persist_epoch of its last persist */
    struct dstl_writer *next_open;          /* the storage's open writers, under s->mu */

    /* owned by the writer thread */
    chunk *head, *tail;
    uint64_t next_seq;
    uint64_t payload_total;                 /* cumulative payload bytes of all appends */
    chunk *sent_chunk;                      /* first unsent record: chunk and offset */
    size_t sent_off;
    uint64_t sent_seq, sent_payload;
    uint64_t unsent_bytes;                  /* pending-record bytes not yet handed off */
    uint64_t last_handoff_bytes;            /* unsent_bytes at the last hand-off (chunk_grow) */
    uint64_t preempt_bytes;                 /* = dstl.preemptive-persist-threshold */
    /* The unsent records' tally (what the encoder's counting sort needs), kept at append:
     * tally[kg - kg_first] for the writer's key groups (NULL when it owns more than
     * WRITER_TALLY_MAX_KG), entries [tally_lo, tally_hi] touched; tally_bad once truncation
     * skipped unsent records (until the next hand-off: the encoder then counts). */
    wire_kg_tally *tally, tally_meta;
    uint32_t tally_lo, tally_hi;
    int tally_bad;
    /* Cumulative payload at recent dstl_writer_next_seq() answers, so a persist from a
     * point the backend read (its materialization point) knows its size exactly. */
    uint64_t mark_seq[8], mark_payload[8];
    unsigned mark_i;
    /* memory for the next hand-off, allocated by dstl_persist before it takes s->mu (every
     * writer thread and the pipeline contend for it): its range, pipeline section, and tally
     * (room for spare_tally_n key groups) */
    range *spare_range;
    struct pipeline_section *spare_sec;
    wire_section_tally *spare_tally;
    uint32_t spare_tally_n;

    /* guarded by s->mu */
    /* a tally the pipeline is done with (writer_tally_return), for a later hand-off: the
     * writer's steady rounds allocate none and nothing is freed across threads */
    wire_section_tally *returned_tally;
    uint32_t returned_tally_n;              /* its room, from its range: dstl_persist reads this
                                             * under s->mu, not the tally (a line cold there) */
    range *ranges, *ranges_tail;
    uint64_t trunc_seq;                     /* records below are no longer needed */
    unsigned inflight_ranges;

    /* stats, written by the writer thread only, read by dstl_storage_stats */
    _Atomic uint64_t st_appends, st_append_bytes;
};

/* The pipeline is done with range r's tally (encoded, or durable): w keeps one for a later
 * hand-off (dstl_persist takes it), the rest are freed. s->mu held. */
static inline void writer_tally_return(struct dstl_writer *w, range *r)
{
    if (r->tally && !w->returned_tally) {
        w->returned_tally = r->tally;
        w->returned_tally_n = r->tally_cap;
    } else {
        free(r->tally);
    }
    r->tally = NULL;
}

#endif
