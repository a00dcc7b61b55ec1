/*
 * dstl/pipeline/pipeline_int.h — the pipeline's own types, shared by its files only
 * (dstl/pipeline.h is what the rest of the library sees). Everything here belongs to the
 * pipeline thread, except where a field says it is under s->mu.
 *
 *   loop.c     the event loop: queue to open batch, flush decisions, deletes, deadlines
 *   batch.c    a batch's life: encode, its two copies, the durability point, reaping
 *   lease.c    the run's lease object
 *   bufpool.c  reused segment buffers (an arena, dstl/arena.h, and mappings beside it)
 *   retain.c   records held once: released at encoding, rebuilt for a failed batch's retry
 * Calls go loop -> batch -> lease -> (callback) and every file -> bufpool; none go back.
 */
#ifndef DSTL_PIPELINE_INT_H
#define DSTL_PIPELINE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "dstl.h"
#include "dstl/keys.h"
#include "dstl/pipeline.h"
#include "dstl/registry.h"
#include "s3/s3.h"
#include "wire/wire.h"

/* The future's bound (include/dstl.h): persist-delay + max-attempts x upload.timeout + this,
 * from the hand-off. A batch whose upload still runs then is cancelled and fails (its records
 * stay in the writers); one not yet written then fails unwritten. One second covers a slow
 * last response and the loop's turns. */
#define REMOTE_SLACK_MS 1000u
/* The pipeline acts that much before the bound (cancels the upload, fails the batch), so the
 * failure reaches the futures inside it: the cancel's callback comes on the next turn of the
 * loop, and the loop wakes at the deadline itself (not on a coarser tick). */
#define REMOTE_ACT_EARLY_MS 300u

/* A batch lives from its first range until both of its copies are done: the local write
 * (always: it is the local-recovery copy and the read cache) and the upload (when a remote is
 * configured). It *ends* — its ranges become durable or failed, its futures take their
 * pieces — at the configured durability point, which may come before the other copy is done. */
typedef struct batch {
    dstl_storage *s;
    struct batch *next_inflight;
    pipeline_section *head, **tail;
    size_t n;
    uint64_t bytes;
    uint64_t opened_ns;
    run_segment *g;
    wire_segment_out out;
    int pending_io;             /* copies still being written */
    int local_done, remote_done;
    int local_res, remote_res;
    int ended, end_res;
    uint64_t remote_deadline_ns;  /* the bound of its earliest range's futures (a remote) */
    uint64_t flushed_ns;
    struct s3_op *op;           /* the upload, while it runs */
    char name[64];              /* the segment's name (the seg may be gone when it failed) */
    uint64_t reserve;           /* its ranges' encoding reserves, still charged (until encoded) */
    size_t counted_buf;         /* bytes of the encoded buffer counted in s->locked.pipe.in_flight_bytes */
    struct pipeline_loop *loop; /* the pipeline's (the segment buffer comes from its pool) */
    int deferred;               /* the last flush waited for room (flush_need is its need) */
    int all_in;                 /* every open writer persisted into it: it closes now
                                 * (dstl.batch.close-when-all-in) */
    int await_lease;            /* its upload waits for the run's first lease */
    uint64_t released;          /* the bytes of its ranges' records encoded and released
                                 * (batch_release_section): no longer counted */
    /* Encoded as its sections join (batch_encode_open): the segment so far, and the link to
     * the first section not in it yet (*enc_link NULL: all are; sections join at the tail).
     * Its buffer is b->bld_buf (pool_get's). */
    wire_seg_builder *bld;
    pipeline_section **enc_link;
    uint8_t *bld_buf;
    /* Its body's MD5 ETag, hashed as the sections go in, when the server checks writes by it
     * (s3_client_md5_checks): md5_at bytes of bld_buf taken; md5_etag once finished. */
    struct s3_md5 *md5;
    uint64_t md5_at;
    char md5_etag[72];
    int no_bld;                 /* not built (no builder could start, or its first section did
                                 * not fit one): encoded in one pass at the flush */
    keyring *keys;              /* the key ring it was sealed under (NULL: plain) */
    wire_index *ix;             /* out, opened to rebuild failed ranges (retain.c) */
    char key[640];
    char local_err[512], remote_err[1024];
} batch;

/* Segment buffers are reused: a fresh page costs a fault (microseconds on a VM), which for a
 * 10 MiB segment costs more than encoding it. They come from the arena below first; the pool's
 * own mappings serve what the arena cannot hold. Each such buffer keeps its capacity in a header; new
 * ones are sized to the page, and a pooled one is reused only when it is at most a quarter
 * larger than asked: every byte of a buffer counts against dstl.upload.max-in-flight while it
 * holds a segment, so a large buffer must not carry a small one. The pool keeps at most
 * POOL_MAX_BYTES idle (about one segment at the default persist-size-threshold; outside the
 * bound, inside the 64 MiB of RSS the design allows beyond it). Pipeline thread only. */
#define POOL_PAGE 4096u
#define POOL_MAX_BYTES (16u << 20)

typedef struct pooled_buf {
    struct pooled_buf *next;
    size_t cap;
    void *map;                  /* the mapping (munmap) and its length */
    size_t map_len;
    max_align_t align_[2];      /* keeps the data after the header aligned */
} pooled_buf;

/* Segment buffers come from an arena first (dstl/arena.h): one reservation of twice
 * dstl.upload.max-in-flight, taken lowest first, whose pages stay when a segment is done, so
 * the next one is encoded into memory already backed. Under load most segments missed the
 * pool's fit rule (their sizes spread wider than a quarter) and were encoded into fresh
 * mappings: the zeroing of their huge pages was a quarter of a w16 load run's samples, on the
 * pipeline thread, while the disk waited for the segment (perf, bench_local load w16). The
 * pages of free blocks beyond POOL_ARENA_IDLE are given back at once, and all of them when the
 * pipeline is idle (pool_trim). A buffer the arena cannot hold (larger than its free runs)
 * comes from the pool's own mappings, as before. At 32 MiB a w1024 load run (16 MB segments,
 * two or three in flight) gave back and faulted in again ~200 MB a second: 401 huge pages
 * in 4 s (strace), their zeroing 6 % of the run's samples. At 64 MiB: 41, and 494 -> 479
 * us/MB (five alternating pairs), peak RSS unchanged (134 / 132 MB); w16 unchanged. */
#define POOL_ARENA_IDLE (64u << 20)

typedef struct {
    pooled_buf *free_list;
    size_t idle_bytes;
    struct mem_arena *arena;    /* NULL until the first buffer, or when none could be reserved */
    uint64_t arena_bytes;       /* what to reserve (0: no arena) */
    int arena_tried;
} buf_pool;

/* The run's lease object (dstl/README.md), pipeline thread only. Times are monotonic: the
 * holder judges its own lease by how long ago its last successful write was *sent*. */
struct pipeline_loop;
typedef void lease_written_fn(struct pipeline_loop *loop, const s3_result *r);

typedef struct {
    struct s3_op *op;           /* a write in flight */
    uint64_t sent_ns;           /* when it was sent */
    uint64_t ok_ns;             /* when the last successful one was sent (0: never) */
    uint64_t next_ns;           /* the next refresh */
    int lapsed;                 /* older than lease-timeout once: fenced for good */
    int cancelled;              /* op was cancelled: its callback is still to come */
    char body[256];
    size_t len;
    char err[512];              /* the last failure */
    lease_written_fn *written;  /* called after every write (the loop's batches wait on it) */
} lease_state;

/* Deleted segments' local files kept for the next reservations (loop.c, "spares"). */
#define SPARE_MAX 64u

typedef struct pipeline_spare {
    char name[64];
    uint64_t size;
} pipeline_spare;

typedef struct pipeline_loop {
    dstl_storage *s;
    buf_pool pool;
    lease_state lease;
    batch *open;
    batch *inflight_list;       /* flushed, some copy still being written */
    uint64_t reserved_upto;     /* segment numbers below this are reserved or used */
    pipeline_spare spare[SPARE_MAX]; /* deleted, their files waiting to be recycled */
    unsigned n_spare;
    uint64_t spare_bytes;
    uint64_t idle_since_ns;     /* nothing open or in flight since (0: busy); chunk pool trim */
    uint32_t build_adds;        /* sections added to built segments (seams.fail_build_add) */
} pipeline_loop;

/* ---- bufpool.c ---- */
/* A new buffer of cap bytes (a multiple of POOL_PAGE) whose data is page-aligned; NULL when
 * out of memory. pool_put keeps or unmaps it. */
pooled_buf *pool_new(size_t cap);
/* The smallest pooled buffer of len bytes or more, when it is at most a quarter larger; NULL. */
pooled_buf *pool_take(buf_pool *p, size_t len);
/* A page-aligned buffer of at least len bytes, *cap of them: from the arena, else the pool's
 * mappings (pooled or new); NULL when out of memory. */
void *pool_get(buf_pool *p, size_t len, size_t *cap);
/* A page-aligned buffer of at least min bytes and up to max (min <= max), *cap of them: the
 * lowest arena run that holds min, grown through the free blocks after it (a hole other
 * segments left, not new memory above them); else a mapping of max. NULL when out of memory. */
void *pool_get_upto(buf_pool *p, size_t min, size_t max, size_t *cap);
/* The buffer at ptr (pool_get's) holds len bytes from now on: an arena buffer gives its
 * blocks past them back (a mapping keeps its size). */
void pool_shrink(buf_pool *p, void *ptr, size_t len);
/* Gives back the buffer whose data starts at ptr (pool_get's): into the arena, or kept in the
 * pool, or unmapped beyond POOL_MAX_BYTES. NULL is fine. */
void pool_put(buf_pool *p, void *ptr);
/* The pipeline is idle: the arena's free pages and the pooled mappings go back to the kernel. */
void pool_trim(buf_pool *p);
/* Bytes of the arena's free blocks whose pages are still there (what pool_trim gives back). */
uint64_t pool_idle_bytes(const buf_pool *p);
/* Every free buffer's bytes kept: the arena's (pool_idle_bytes) and the pooled mappings'. */
uint64_t pool_kept_bytes(const buf_pool *p);
void pool_free(buf_pool *p);

/* ---- lease.c ---- */
/* Whether uploads of this run may be acknowledged at now: 0; -EAGAIN when the lease was never
 * written yet; DSTL_EREMOTE with why when the run is fenced (see lease.c). */
int lease_check(pipeline_loop *loop, uint64_t now, char *why, size_t cap);
/* Writes (or rewrites) the run's lease object, unless a write is under way. */
void lease_start(pipeline_loop *loop);
/* The lease's part of a loop turn: cancels a write past its bound, starts a due refresh. */
void lease_tick(pipeline_loop *loop, uint64_t now, int closing);
/* When the loop must next act for the lease (monotonic ns), or UINT64_MAX. */
uint64_t lease_next_deadline(const pipeline_loop *loop);

/* ---- retain.c (s->mu held) ---- */
/* x is encoded: its range's records are in b's segment only; their chunks and charge go. */
void batch_release_section(dstl_storage *s, batch *b, pipeline_section *x);
/* b is encoded: batch_release_section of each section not released yet. */
void batch_release_records(dstl_storage *s, batch *b);
/* x failed with b: its range keeps its records (rebuilt from b->out when encoded) charged as
 * retained for the writer's next persist; or is marked lost when they cannot be rebuilt. */
void batch_retain(dstl_storage *s, batch *b, pipeline_section *x);

/* ---- batch.c ---- */
/* Encodes the open batch into a segment and starts its copies; or, when its buffer must wait
 * for in-flight room, leaves it open to try again on a later turn. A batch encoded as its
 * sections joined (batch_encode_open) only has its footer written here; every section of it
 * must be in its segment (batch_encode_open ran since the last joined). */
void batch_flush(pipeline_loop *loop);
/* Encodes the open batch's sections that joined since the last call into its segment, once
 * its records reach BUILD_MIN_BYTES (the buffer taken then), and releases their chunks. A
 * section that does not fit closes the batch: it is flushed, and the sections from that one
 * on open the next (loop->open). A section that cannot be encoded fails the batch. */
void batch_encode_open(pipeline_loop *loop);
/* The open batch fails unwritten with code and why (its futures' bound passed, or a section
 * could not be encoded): its ranges keep their records for the next persist. */
void batch_fail_open(pipeline_loop *loop, int code, const char *why);
/* When section x's futures' bound comes (monotonic ns), less the loop's margin. */
uint64_t section_due_ns(const dstl_storage *s, const pipeline_section *x);
/* Ends a batch (s->mu held): res 0 = its segment is durable; else its ranges fail with detail. */
void batch_end(dstl_storage *s, batch *b, int res, const char *detail);
/* Ends the batch once its durability point is reached (takes s->mu). */
void batch_progress(dstl_storage *s, batch *b);
/* The remote copy of b will not be made: the batch sees it as failed with code and why. */
void batch_remote_fail(batch *b, int code, const char *why);
/* Starts b's upload (the run's lease is valid). */
void batch_upload_start(pipeline_loop *loop, batch *b);
/* Frees batches whose copies are all done; a failed batch's copies are removed. */
void batch_reap(pipeline_loop *loop);
void batch_free(batch *b);
/* Whether the open batch's last flush waited for room and still has none (s->mu held). */
int batch_flush_waits(const pipeline_loop *loop);

#endif
