/*
 * dstl/read/fetch.h — the restore plan's fetch layer: byte ranges of remote objects, fetched
 * once for every reader that needs them, in parallel, into memory bounded by a budget.
 *
 * It knows objects (bucket, key, length) and byte ranges only — nothing of segments, sections
 * or records (restore.c decides which ranges a plan needs; segread.c verifies the bytes).
 *
 *   needs    fetch_need adds a range of an object with one *use*; fetch_commit turns the
 *            object's pending ranges into *extents* (what one GET fetches): overlapping and
 *            adjacent ranges are one; gaps below the merge gap are read through, smallest
 *            first, while they add at most 1/FETCH_GAP_SHARE_DEN of the needed bytes; and when
 *            most of the object (FETCH_WHOLE_NUM / FETCH_WHOLE_DEN) is needed the whole object
 *            is one extent; an object of at most 512 KiB is always one extent, whole (one GET:
 *            its round trip costs more than its unneeded bytes). Each pending range adds
 *            a use to every extent it overlaps; fetch_release of the same range drops it.
 *   fetching one thread per set drives its own S3 client: queued extents start in priority
 *            order (an extent a reader waits for, then an object's prio, then offset), at most
 *            max_gets at once, and only while the bytes held plus in flight stay within
 *            budget_bytes (and the reserve hook agrees), and within ahead_bytes unless a reader
 *            needs the extent now; their bytes live in the set's arena
 *            (arena.h), reused as readers release them.
 *            fetch_first marks a range of an object (at most two per object) to be an extent of
 *            its own, fetched before every other extent (the restore plan's first objects: their
 *            footers, and the first section a reader needs, arrive before the rest); the
 *            other extents start once those are complete, or 50 ms (FETCH_FIRST_HOLD_MS) after they
 *            started (a server may read a GET's whole range before its first byte), and, when
 *            the plan closed the gate (fetch_gate), once it opens it or 20 ms later. A small
 *            object's marks make the whole object that extent.
 *   holding  an extent's bytes stay in memory while it has uses; the last release frees them
 *            (a failed GET's too: what it had handed over stays valid for those holding uses).
 *   reading  fetch_read copies a range out of the extents, waiting while they are queued or
 *            being fetched. GETs stream: bytes are served as soon as they have arrived, while
 *            the rest of their extent still streams. It answers 0 — "fetch it yourself" — for bytes no extent covers,
 *            bytes already released, and extents the set gave up holding: one larger than the
 *            budget, or, when the budget is full of bytes whose readers wait for others and
 *            nothing is in flight, the extents readers wait for (so a plan never deadlocks;
 *            those readers GET what they need themselves).
 *
 * Threads: everything is thread-safe (one mutex per set); fetch_read blocks. GET callbacks
 * (completions and hand-overs) run on the set's thread. The set's client is used by that thread
 * only.
 */
#ifndef DSTL_FETCH_H
#define DSTL_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include "s3/s3.h"

/* Most of an object is needed: 4/5 of it. Fetching the rest too costs at most a quarter more
 * bytes, and saves a request per gap (a round trip, 1-50 ms) and the per-request overhead
 * that makes many small ranged GETs slow. */
#define FETCH_WHOLE_NUM 4u
#define FETCH_WHOLE_DEN 5u
/* Gaps read through (each below the merge gap) add at most this share of an object's needed
 * bytes: the smallest gaps first. A reader of a few key groups of small sections (many gaps
 * below the merge gap) then fetches at most an eighth more than it needs, in fewer requests. */
#define FETCH_GAP_SHARE_DEN 8u

/* Gaps between whole sections read through (fetch_sections): a GET's round trip and per-request
 * cost at the server (1-8 ms on a loaded RGW) fetch about this much on a connection. An object
 * written while its writers' checkpoints were spread over it holds needed and unneeded
 * sections interleaved; one GET per needed run made 2 GETs per object at 1,024 writers. */
#define FETCH_SECTION_GAP_BYTES (256u << 10)

typedef struct fetch_set fetch_set;

typedef struct {
    s3_client *cli;             /* the set's from now on (freed by fetch_free, also on failure) */
    uint64_t budget_bytes;      /* bytes held plus in flight at most; 0: nothing is fetched ahead */
    /* Bytes held plus in flight beyond which only extents a reader needs now start (one
     * marked first, one a reader waits for, or one polled for, not yet told of, while nothing
     * is in flight); 0: none (the budget only).
     * Readers that move together need the fetch a few objects ahead, not the whole budget:
     * every byte held is memory touched, which a VM's host may back only at first touch. */
    uint64_t ahead_bytes;
    unsigned max_gets;          /* GETs in flight at most; 0: 8 */
    uint32_t merge_gap_bytes;   /* ranges closer than this are fetched as one */
    uint32_t gate_ms;           /* fetch_gate's bound; 0: FETCH_GATE_MS */
    /* Optional: asked before an extent's bytes are admitted (1 yes, 0 no), told when they are
     * freed; lets another user of the same bound (the reader cache) share it. */
    int (*reserve)(void *ctx, uint64_t bytes);
    void (*unreserve)(void *ctx, uint64_t bytes);
    void *reserve_ctx;
} fetch_opts;

typedef struct {
    uint64_t objects, objects_fetched;   /* objects named / of which some GET handed bytes over */
    uint64_t requests, retries, bytes_fetched;  /* the set's client: attempts, response bytes */
    uint64_t failures;                   /* GETs that failed after every attempt */
    uint64_t gets_completed;             /* GETs that ended with every byte of their extent */
    uint64_t bytes_delivered;            /* bytes fetch_read copied out */
    uint64_t hits, waits, declined;      /* reads: served at once / after waiting / answered 0 */
    uint64_t held_bytes, held_peak_bytes;
    uint64_t memory_touched_bytes;       /* the arena's high-water mark + buffers allocated outside it */
    uint64_t poll_wakeups;               /* fetch_polls that woke the fetch thread: news of a queued extent */
} fetch_stats;

/* Starts the set's thread. Returns 0, -ENOMEM or the thread's error (detail set). */
int fetch_new(const fetch_opts *o, fetch_set **out);
/* Stops the thread (GETs in flight are cancelled), frees everything. NULL is fine. */
void fetch_free(fetch_set *f);

/* Names an object; *id identifies it from now on. Lower prio is fetched first (after the
 * extents marked first and those a reader already waits for). */
int fetch_object(fetch_set *f, const char *bucket, const char *key, uint64_t object_len, int64_t prio,
                 uint32_t *id);
/* A pending range [off, off + len) of object id, with one use. -EINVAL outside the object. */
int fetch_need(fetch_set *f, uint32_t id, uint64_t off, uint64_t len);
/* A range [off, end) of an object. */
typedef struct {
    uint64_t off, end;
} fetch_span;
/* Sorts n elements of `size` bytes (at most 64) whose first member is a uint64_t offset by it,
 * stably: a radix sort, since a 1,024-writer plan sorts ~1,000 sections per object and
 * qsort's comparisons were a fifth of the plan's time. Falls back to qsort without memory. */
void fetch_sort_by_off(void *v, size_t n, size_t size);
/* fetch_need of each of s[0..n) (sorted by off, the cheaper commit), under one lock: -EINVAL
 * when one lies outside the object or is empty (none is added then). */
int fetch_need_spans(fetch_set *f, uint32_t id, const fetch_span *s, size_t n);
/* The same range needed `uses` times at once (a segment's footer, by each of its pieces):
 * fetch_release drops one of them. -EINVAL also for no use or more than INT_MAX. */
int fetch_need_uses(fetch_set *f, uint32_t id, uint64_t off, uint64_t len, uint32_t uses);
/* Makes extents of id's pending ranges and queues them. Returns 0 or -ENOMEM. */
int fetch_commit(fetch_set *f, uint32_t id);
/* [off, off + len) of object id becomes an extent of its own at the next fetch_commit, fetched
 * before every extent not so marked (it costs one more GET when the object is fetched whole).
 * Before fetch_commit; at most two per object. 0, or -EINVAL (outside the object, empty, a
 * third range). */
int fetch_first(fetch_set *f, uint32_t id, uint64_t off, uint64_t len);
/* Closes the set's gate: once the extents marked first are complete, the others still wait,
 * until fetch_gate_open or FETCH_GATE_MS (20 ms; fetch_opts.gate_ms) later: the reader of the first bytes parses
 * and checks them with the cores to itself (a restore's bulk GETs and the server answering
 * them took both cores of the machine here, and a 210 KB footer took 26 ms to parse instead
 * of 2). */
void fetch_gate(fetch_set *f);
/* Opens the gate (any thread; again is fine). */
void fetch_gate_open(fetch_set *f);
/* cb(ctx, id, bytes) runs once, on the set's thread and without its lock, when [off, off + len)
 * of object id has arrived whole inside one extent, before any reader can see those bytes
 * (fetch_poll, fetch_read, the wake-ups all come after it): the restore plan parses a
 * segment's footer there, so that the readers waiting for it find its index instead of a
 * parse in progress (at w1024, 64 threads' readers reach an object when its footer, its last
 * bytes, comes in: 843-1,611 sleeps a round on another reader's parse). Not when the range
 * is split over extents, or its GET fails first. Before the object's first fetch_commit; one
 * per object. cb must not call into the set, nor wait. 0, or -EINVAL. */
int fetch_on_arrival(fetch_set *f, uint32_t id, uint64_t off, uint64_t len,
                     void (*cb)(void *ctx, uint32_t id, const uint8_t *bytes), void *ctx);
/* Object id's ranges are whole sections (and its footer) of readers of all their key groups:
 * its gaps are other writers' sections, and any below FETCH_SECTION_GAP_BYTES is read through,
 * whatever its share (not only below the merge gap, within 1/FETCH_GAP_SHARE_DEN). Before
 * fetch_commit. */
void fetch_sections(fetch_set *f, uint32_t id);
/* Drops one use of every extent [off, off + len) overlaps (the range of an earlier fetch_need). */
void fetch_release(fetch_set *f, uint32_t id, uint64_t off, uint64_t len);

/* Copies [off, off + len) of object id into dst. Returns 1 (copied), 0 (not held: the caller
 * fetches it itself), or the GET's error with its detail in msg ("s3://bucket/key: ...").
 * Blocks until those bytes have arrived (not the whole extent: GETs stream), or the extents
 * fail or are given up. The caller holds a use of the range
 * (the copy runs outside the set's lock). */
int fetch_read(fetch_set *f, uint32_t id, uint64_t off, size_t len, void *dst, char *msg, size_t cap);

/* As fetch_read, without the copy: when [off, off + len) lies in one extent, *out points at
 * its bytes, valid while the caller holds a use of the range (fetch_need .. fetch_release).
 * 0 also when the range spans extents (the caller copies with fetch_read). Blocking. */
int fetch_borrow(fetch_set *f, uint32_t id, uint64_t off, size_t len, const uint8_t **out, char *msg, size_t cap);

/* Whether a fetch_read of [off, off + len) of object id would return without waiting: 1 (its
 * bytes are in, or it would answer 0 or an error at once), 0 (some are queued or still
 * streaming). A 0 notes the calling thread's interest without making the range jump the
 * queue (a waiting fetch_read does): the thread's fetch_wait_progress wakes when those bytes
 * arrive or their extent's state changes, and a set stuck with nothing in flight gives the
 * range up to its reader as for a waiting one. */
int fetch_poll(fetch_set *f, uint32_t id, uint64_t off, size_t len);
/* Waits until the calling thread's progress count differs from *seen — bytes its polls found
 * missing arrived, or their extents' state changed — or timeout_ms passes (< 0: no limit; 0:
 * does not wait); sets *seen to the count (which starts at 1). 1 when it had moved, 0 on the
 * timeout. Only the threads that polled are woken, and only for their own bytes. */
int fetch_wait_progress(fetch_set *f, uint64_t *seen, int timeout_ms);

void fetch_get_stats(fetch_set *f, fetch_stats *out);

#endif
