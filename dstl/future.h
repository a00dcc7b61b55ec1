/*
 * dstl/future.h — persist futures and their protocol.
 *
 * Owns: the dstl_future object (its fields are this file's alone: dstl/future.c), its pieces
 * and pins, and the waiter lists that tie a future to the pipeline sections it waits for.
 *
 * The protocol, every step with the storage mutex (s->mu) held:
 *   1. dstl_persist builds a future: future_new, then for each writer range over [from, to):
 *      future_add_piece for a durable one (its segment is pinned at once), future_wait_on
 *      for one in flight (a waiter on that section's list: one piece outstanding, one
 *      reference); then future_build_end.
 *   2. When a section's batch ends, the pipeline calls future_section_ended on its waiter
 *      list: each waiting future takes its piece (or the failure) and drops the waiter's
 *      reference.
 *   3. The future completes — once — when the build has ended and no piece is outstanding:
 *      it builds its handle, makes it live in the registry (the pins become the handle's
 *      references) or drops the pins on failure; once the completing thread has let go of
 *      s->mu, future_signal_completed makes it done and wakes dstl_future_wait.
 * Waiting, dstl_future_done/result/free: any thread (the future's own mutex; lock order is
 * s->mu, then the future's).
 *   4. A completion with a callback (dstl_future_on_done) is queued on the completing thread,
 *      which runs future_run_callbacks once it holds no lock.
 */
#ifndef DSTL_FUTURE_H
#define DSTL_FUTURE_H

#include <stdint.h>

#include "dstl.h"
#include "dstl/metrics.h"
#include "dstl/registry.h"
#include "wire/wire.h"

/* What a future needs of its storage (fixed at open; the pointers' objects are under s->mu). */
typedef struct future_ctx {
    registry *reg;
    storage_counters *counters;
    const char *run_id;
    const char *remote_uri;     /* written into handles ("" when local only) */
} future_ctx;

/* One future waiting on a section of a batch (records [lo, hi) of it). */
typedef struct future_waiter future_waiter;
typedef struct future_waitlist {
    future_waiter *head;
} future_waitlist;

/* A future under construction for the writer's records [from, to), checkpoint cp. NULL when
 * out of memory. */
dstl_future *future_new(const future_ctx *ctx, const char *writer_id, uint64_t writer_incarnation, uint64_t cp,
                        uint64_t from, uint64_t to);
/* Frees a future from future_new that was never built on (dstl_persist failed before it
 * was used: no waiter, no piece, nobody else holds it). */
void future_abandon(dstl_future *f);
/* Records [lo, hi) are durable in section sec_index of g, at loc: a piece, g pinned. 0 or
 * -ENOMEM. */
int future_add_piece(dstl_future *f, run_segment *g, uint32_t sec_index, const wire_section_loc *loc, uint64_t lo,
                     uint64_t hi);
/* Asks for the lines future_section_ended will touch of wl's futures (s->mu held): the
 * pipeline ends a segment's few hundred sections in one go, under the lock every writer
 * waits for, and each future was last written by its writer's core. */
void future_prefetch(const future_waitlist *wl);
/* Records [lo, hi) are in flight in the section whose waiter list is wl. 0 or -ENOMEM. */
int future_wait_on(dstl_future *f, future_waitlist *wl, uint64_t lo, uint64_t hi);
/* The build is over: err < 0 when it failed part way (the detail is dstl_last_error's);
 * size is the payload bytes of [from, to), or UINT64_MAX when not known exactly. Completes
 * the future when nothing is outstanding. */
void future_build_end(dstl_future *f, int err, uint64_t size);
/* The batch holding the section of wl ended: res 0 = durable in section sec_index of g at loc;
 * else failed with detail. Every waiter takes its piece or the failure; wl is emptied. */
void future_section_ended(future_waitlist *wl, int res, const char *detail, run_segment *g, uint32_t sec_index,
                          const wire_section_loc *loc);

/* Makes the futures this thread completed done and wakes their waiters (future.c's
 * thread-local list): call with no lock held, as soon as possible after the lock under which
 * they completed is released — the pipeline after every step that ends batches, dstl_persist
 * after it unlocks. Until then they are not done (dstl_future_done says 0). */
void future_signal_completed(void);
/* future_signal_completed, then the callbacks of the futures this thread signalled. Call with
 * no lock held: the pipeline after each loop turn. */
void future_run_callbacks(void);

/* Nonzero while the calling thread runs a future callback: DSTL calls that would block
 * (backpressure, a writer close waiting for its records, a wait) return instead. */
int future_in_callback(void);

#endif
