/*
 * dstl/objcache.h — per-thread caches of the small blocks every persist allocates: its future,
 * its handle's memory, the registry's record of the handle, the hand-off's range.
 *
 * A thread that persists for many writers (128 a thread in bench_local at 1,024 writers) makes
 * a hundred of each at once and frees them a round later; glibc's per-thread cache keeps 7
 * blocks of a size, so the rest went through its bins: 27 us of CPU per MB more than at 16
 * writers (perf, 2026-12-07), a fifth of the gap local.cost_flatness measures. A block freed
 * here goes to the freeing thread's cache (up to OC_KEEP_BYTES a thread, freed when the thread
 * exits) and is taken again by that thread's next oc_alloc of its size class.
 *
 * Every block from oc_alloc must be freed with oc_free (any thread), never with free(): the
 * block has a header. Under AddressSanitizer nothing is cached (each oc_free frees), so a
 * use after free still shows, and a free() of an oc_alloc'd block is reported as a bad free.
 */
#ifndef DSTL_OBJCACHE_H
#define DSTL_OBJCACHE_H

#include <stddef.h>

/* n bytes, 16-byte aligned, not zeroed; NULL when memory runs out. */
void *oc_alloc(size_t n);
/* n bytes zeroed. */
void *oc_calloc(size_t n);
/* Frees (or keeps for this thread) a block from oc_alloc; accepts NULL. */
void oc_free(void *p);
/* The bytes of blocks the calling thread keeps (at most OC_KEEP_BYTES), and that bound. */
size_t oc_kept_bytes(void);
#define OC_KEEP_BYTES (512u << 10)

#endif
