/*
 * dstl/arena.h — reused memory: a restore plan's fetched bytes (read/fetch.c) and the
 * pipeline's segment buffers (pipeline/bufpool.c), each in an arena of its own.
 *
 * On a virtual machine whose host backs guest pages lazily the first touch of a page costs the
 * host's fault and zeroing: 0.35-0.45 GB/s against 6-10 GB/s for pages already backed
 * (perf/first_touch.c); and even pages the guest has costs the kernel's zeroing at each fresh
 * mapping. With each extent in a fresh mapping, unmapped when its readers were done, a restore
 * paid that rate for every byte (its fetch thread spent half its time in clear_page, and
 * fetched at 0.4-0.5 x what curl GETs of the same objects reached); with each segment in a
 * fresh mapping, the pipeline thread spent a third of its encode zeroing huge pages. The arena
 * is one reservation of address space, as large as its user's bound, cut into blocks; a buffer
 * takes a run of contiguous blocks, the lowest that fits, and gives them back when done,
 * without giving the pages back. Its user then touches fresh memory only up to the most it
 * holds at once (the arena's high-water mark), not for every byte it writes. arena_trim gives
 * the pages of free blocks back when they are no longer wanted (the pipeline keeps a bound).
 *
 * Not thread-safe: the fetch set calls it under its mutex, the pipeline from its thread only.
 */
#ifndef DSTL_ARENA_H
#define DSTL_ARENA_H

#include <stddef.h>
#include <stdint.h>

typedef struct mem_arena mem_arena;

/* Reserves address space for max_bytes (rounded up to whole blocks; capped at ARENA_MAX_BYTES:
 * a larger budget is served by the arena up to that, by fresh mappings beyond). The pages are
 * touched only as allocations use them (and arena_prefault's thread, ahead of them). NULL when max_bytes is 0 or the reservation fails
 * (the caller then maps each buffer itself, as before). */
mem_arena *arena_new(uint64_t max_bytes);
/* Starts a thread that faults the pages in ahead of the high-water mark (ARENA_PREFAULT_AHEAD),
 * on the other core, so that whoever writes into a new run finds them backed (the fetch
 * thread's receive then does not stop at each page the host backs). Only for an arena of at
 * least ARENA_PREFAULT_MIN (a small bound's few MB cost little to fault in, and even the 8 MB
 * ahead would be much of what it holds). Once; NULL is fine. */
void arena_prefault(mem_arena *a);
/* Stops that thread and unmaps the whole reservation. NULL is fine. */
void arena_free(mem_arena *a);

/* len bytes (len > 0) at the lowest run of free blocks that holds them, or NULL when no run is
 * long enough (the caller falls back to a mapping of its own). */
uint8_t *arena_take(mem_arena *a, uint64_t len);
/* At least min_len bytes (0 < min_len <= max_len) at the lowest run of free blocks that holds
 * them, and as many more of the free blocks after it as max_len asks for: a buffer that may
 * grow (the pipeline's segment built as its sections join) takes a hole the others left
 * rather than new memory above them. *len is what it got (whole blocks). NULL as arena_take. */
uint8_t *arena_take_upto(mem_arena *a, uint64_t min_len, uint64_t max_len, uint64_t *len);
/* Whether p came from arena_take of a (an address inside the reservation). */
int arena_owns(const mem_arena *a, const uint8_t *p);
/* The bytes of the blocks arena_take gave p (len rounded up to whole blocks). */
uint64_t arena_len(const mem_arena *a, const uint8_t *p);
/* p (arena_take's) keeps only the blocks its first len bytes (len > 0) lie in; the blocks past
 * them are free again (their pages stay). Returns the bytes of the blocks it keeps. */
uint64_t arena_shrink(mem_arena *a, uint8_t *p, uint64_t len);
/* Gives back what arena_take(len) returned as p; the pages stay (the next take reuses them). */
void arena_give(mem_arena *a, uint8_t *p, uint64_t len);
/* Gives the pages of free blocks back to the kernel, whole huge pages from the highest down,
 * until at most keep_idle bytes of free blocks still have theirs (or no whole free huge page
 * with pages is left). Returns the bytes given back. NULL is fine. Not for an arena whose
 * prefault thread runs (it would fault the pages in again; the pipeline never starts one). */
uint64_t arena_trim(mem_arena *a, uint64_t keep_idle);

typedef struct {
    uint64_t reserved;    /* address space reserved */
    uint64_t in_use;      /* bytes of the blocks taken now */
    uint64_t high_water;  /* the end of the highest block ever taken: the most of it touched */
    uint64_t takes, reuses;  /* runs taken / of which lay wholly below the high-water mark then */
    uint64_t misses;      /* takes that found no run long enough */
    uint64_t resident;    /* bytes of the blocks whose pages are there: taken once, not trimmed
                           * since (in_use of them are taken now) */
    uint64_t trimmed;     /* bytes arena_trim gave back, in all */
    uint64_t populated;   /* bytes from the start the prefault thread has faulted in (the
                             * memory touched is the larger of this and high_water) */
} arena_stats;
void arena_get_stats(const mem_arena *a, arena_stats *out);

/* The arena's block: fine enough that the small extents of a rescaled task's ranges waste
 * little, coarse enough that its bitmap of a 1 GiB budget is 2 KiB. */
#define ARENA_BLOCK_BYTES (64u << 10)
/* The most address space one arena reserves (the default budget, dstl.cache.max-size 1gb,
 * fits four times). */
#define ARENA_MAX_BYTES (4ull << 30)
/* How far past the high-water mark the prefault thread goes, and the smallest arena it runs
 * for (the default bound, 1gb, reserves 2 GiB). Each page it touches is zeroed on a core the
 * S3 server may need: 32 MB ahead touched 115-134 MB a restore where 8 MB touched 86-121, and
 * vs_raw did not drop (perf/README.md, "The prefault's lead"). */
#define ARENA_PREFAULT_AHEAD (8ull << 20)
#define ARENA_PREFAULT_MIN (256ull << 20)

#endif
