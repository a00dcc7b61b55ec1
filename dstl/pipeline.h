/*
 * dstl/pipeline.h — the shared pipeline: one thread and one event loop that groups every
 * writer's ranges into segments, writes them (local store, and the object store when
 * configured) and ends them at the durability point.
 *
 * Owns: the queue of hand-offs and the in-flight accounting (`pipeline_shared`, under s->mu),
 * and everything of a batch being built or written (dstl/pipeline/, pipeline thread only).
 * Writer threads call pipeline_enqueue and pipeline_wake; the storage starts and stops it.
 */
#ifndef DSTL_PIPELINE_H
#define DSTL_PIPELINE_H

#include <stdint.h>
#include <stdlib.h>

#include "dstl.h"
#include "dstl/future.h"
#include "dstl/writer.h"

/* One writer range in the queue, then in a batch. Guarded by s->mu until the pipeline takes
 * it out of the queue; then the pipeline thread's (its waiter list stays under s->mu). */
typedef struct pipeline_section {
    struct pipeline_section *next;
    dstl_writer *w;
    range *r;
    future_waitlist waiters;
    uint32_t index;             /* section index in its segment */
    int encoded;                /* its records are in the batch's segment buffer only (their
                                 * chunks went: batch_release_section) */
    uint64_t t_enq_ns;          /* when it was handed off: its futures' bound runs from here */
} pipeline_section;

struct admit_waiter;

/* What writers and the pipeline share, under s->mu. */
typedef struct pipeline_shared {
    pipeline_section *q_head, **q_tail;
    uint64_t q_len;
    uint64_t q_waiting;         /* hand-offs queued or in the open batch, not yet flushed */
    int closing;
    /* dstl.upload.max-in-flight: every byte the pipeline keeps for handed-off records — the
     * records until durable (they stay in the writers' chunks for a retry), the room reserved
     * for their encoded copy, then the encoded segment buffer until both copies are written.
     * Hand-offs are admitted in arrival order (adm_head); a flush that needs more room than
     * its ranges reserved waits with flush_need, ahead of them. */
    uint64_t in_flight_bytes;
    uint64_t flush_need;
    /* Part of in_flight_bytes: the records of failed batches (rebuilt from their segment, or
     * still in the writers' chunks when the batch failed before encoding), kept for the
     * writers' next persists. They count, so an outage applies backpressure. */
    uint64_t retained_bytes;
    struct admit_waiter *adm_head;
    /* The loop was kicked and has not taken the queue since: a further kick needs no eventfd
     * write (pipeline_kick). Cleared by the loop when it takes the queue. */
    int kicked;
    /* dstl.batch.close-when-all-in: the writers that persisted since the open batch's window
     * began (each writer's persist_epoch says whether it counted in this epoch). The loop
     * starts a new epoch when it finds them all in. */
    uint64_t persist_epoch;
    size_t epoch_writers;
} pipeline_shared;

/* Starts / stops (after flushing everything queued) the pipeline thread. */
int pipeline_start(dstl_storage *s);
void pipeline_stop(dstl_storage *s);
/* Makes the loop run a turn (any thread, no lock needed). */
void pipeline_wake(dstl_storage *s);
/* Asks for a loop turn (s->mu held): 1 when the caller must pipeline_wake after unlocking,
 * 0 when an earlier kick is still pending (the loop has not taken the queue since, so it
 * will see whatever the caller queued). Under group commit every persist kicks; only the
 * first after each turn costs a syscall and a wakeup. */
int pipeline_kick(dstl_storage *s);
/* pipeline_kick when segments wait to be deleted, else 0 (s->mu held). */
int pipeline_kick_deletes(dstl_storage *s);
/* Queues a range for writing (s->mu held); the caller wakes the pipeline after unlocking.
 * The range's rec_bytes + enc_reserve were charged to in_flight_bytes at admission. */
int pipeline_enqueue(dstl_storage *s, dstl_writer *w, range *r);
/* The in-flight room a hand-off of rec_bytes reserves for its encoded copy: its share of a
 * segment (the records re-framed, its index entry, the segment's fixed parts), twice the
 * records when compressing (the codec's bound plus the encoder's scratch copy). */
uint64_t pipeline_enc_reserve(const dstl_storage *s, uint64_t rec_bytes);
/* Frees a range the pipeline no longer holds (s->mu held), with its retained charge. */
void range_drop(dstl_storage *s, range *r);
/* range_drop in two steps, so the frees can wait until s->mu is let go: the retained charge
 * (s->mu held), then the memory (no lock: the range is nobody's any more). */
void range_unaccount(dstl_storage *s, range *r);
void range_free(range *r);
/* Frees a range's spans (its own span_buf stays) and forgets them. */
static inline void range_spans_free(range *r)
{
    if (r->spans != r->span_buf) free(r->spans);
    r->spans = NULL;
    r->nspans = 0;
}

#endif
