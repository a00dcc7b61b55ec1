/*
 * dstl/arena.c — reused memory (arena.h): one reservation, a bitmap of its blocks, first fit
 * from the lowest address so that reuse keeps to the pages already touched; a second bitmap of
 * the blocks whose pages are there (taken once, not trimmed since).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "dstl/arena.h"

#define HUGE_BYTES (2ull << 20)   /* the reservation is aligned to a huge page, and asks for them */

struct mem_arena {
    uint8_t *base;
    uint64_t reserved;
    size_t nblocks;
    uint64_t *bits;     /* a set bit: the block is taken */
    uint64_t *res;      /* a set bit: the block's pages are there (taken once, not trimmed) */
    uint32_t *run;      /* at a taken run's first block: its length in blocks */
    arena_stats st;
    /* the prefault thread (arena_prefault) */
    pthread_t th;
    int tried, running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    _Atomic uint64_t high;      /* st.high_water, for the thread */
    _Atomic uint64_t populated; /* bytes from base the thread has faulted in */
};

static size_t blocks_of(uint64_t len) { return (size_t)((len + ARENA_BLOCK_BYTES - 1) / ARENA_BLOCK_BYTES); }
static int bit(const uint64_t *map, size_t b) { return (int)(map[b / 64] >> (b % 64) & 1); }
static int taken(const mem_arena *a, size_t b) { return bit(a->bits, b); }

/* Sets (on) or clears blocks b..b+n-1 in map; returns how many changed. */
static size_t mark_map(uint64_t *map, size_t b, size_t n, int on)
{
    size_t changed = 0;
    for (size_t i = b; i < b + n; i++) {
        uint64_t m = 1ull << (i % 64), was = map[i / 64];
        map[i / 64] = on ? was | m : was & ~m;
        changed += (was != map[i / 64]);
    }
    return changed;
}

static void mark(mem_arena *a, size_t b, size_t n, int on) { (void)mark_map(a->bits, b, n, on); }

mem_arena *arena_new(uint64_t max_bytes)
{
    if (max_bytes == 0) return NULL;
    if (max_bytes > ARENA_MAX_BYTES) max_bytes = ARENA_MAX_BYTES;
    uint64_t size = (max_bytes + HUGE_BYTES - 1) & ~(HUGE_BYTES - 1);
    mem_arena *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->nblocks = (size_t)(size / ARENA_BLOCK_BYTES);
    a->bits = calloc((a->nblocks + 63) / 64, sizeof *a->bits);
    a->res = calloc((a->nblocks + 63) / 64, sizeof *a->res);
    a->run = calloc(a->nblocks, sizeof *a->run);
    size_t map = (size_t)(size + HUGE_BYTES);
    int ok = a->bits && a->res && a->run;
    uint8_t *p = ok ? mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                    : MAP_FAILED;
    if (p == MAP_FAILED) {
        free(a->bits);
        free(a->res);
        free(a->run);
        free(a);
        return NULL;
    }
    uint8_t *b = (uint8_t *)(((uintptr_t)p + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1));
    if (b > p) munmap(p, (size_t)(b - p));
    if (p + map > b + size) munmap(b + size, (size_t)(p + map - (b + size)));
    (void)madvise(b, (size_t)size, MADV_HUGEPAGE);     /* a hint: without it, 4 KiB pages */
    a->base = b;
    a->reserved = a->st.reserved = size;
    return a;
}

/* Faults the arena's pages in ahead of its high-water mark, on a thread of its own, so the
 * fetch thread's receive finds them backed: MADV_POPULATE_WRITE maps them writable without
 * writing them, so it may run over pages an extent is being written into. */
static void *prefault_thread(void *arg)
{
    mem_arena *a = arg;
    uint64_t done = 0;
    pthread_mutex_lock(&a->mu);
    while (!a->stop) {
        uint64_t want = atomic_load(&a->high) + ARENA_PREFAULT_AHEAD;
        if (want > a->reserved) want = a->reserved;
        if (done >= want) {
            pthread_cond_wait(&a->cv, &a->mu);
            continue;
        }
        pthread_mutex_unlock(&a->mu);
        int rc = madvise(a->base + done, (size_t)HUGE_BYTES, MADV_POPULATE_WRITE);
        pthread_mutex_lock(&a->mu);
        if (rc != 0) break;     /* an older kernel: the fetch thread faults them in itself */
        done += HUGE_BYTES;
        atomic_store(&a->populated, done);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

void arena_prefault(mem_arena *a)
{
    if (!a || a->tried || a->reserved < ARENA_PREFAULT_MIN) return;
    a->tried = 1;               /* once, also when the thread cannot start */
    atomic_store(&a->high, a->st.high_water);   /* ahead of what is taken already */
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    a->running = pthread_create(&a->th, NULL, prefault_thread, a) == 0;
    if (a->running) (void)pthread_setname_np(a->th, "dstl-prefault");
}

void arena_free(mem_arena *a)
{
    if (!a) return;
    if (a->running) {
        pthread_mutex_lock(&a->mu);
        a->stop = 1;
        pthread_cond_signal(&a->cv);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->th, NULL);
    }
    if (a->tried) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
    }
    munmap(a->base, (size_t)a->reserved);
    free(a->bits);
    free(a->res);
    free(a->run);
    free(a);
}

/* The first block of the lowest run of n free blocks, or nblocks when there is none. Whole
 * words are skipped while taken. */
static size_t find_run(const mem_arena *a, size_t n)
{
    size_t run = 0;
    for (size_t b = 0; b < a->nblocks;) {
        if (b % 64 == 0 && a->bits[b / 64] == UINT64_MAX) {
            run = 0;
            b += 64;
            continue;
        }
        run = taken(a, b) ? 0 : run + 1;
        b++;
        if (run == n) return b - n;
    }
    return a->nblocks;
}

/* Takes blocks b..b+n-1 (free) as one run. */
static uint8_t *take_run(mem_arena *a, size_t b, size_t n)
{
    mark(a, b, n, 1);
    a->run[b] = (uint32_t)n;
    a->st.resident += (uint64_t)mark_map(a->res, b, n, 1) * ARENA_BLOCK_BYTES;
    uint64_t end = (uint64_t)(b + n) * ARENA_BLOCK_BYTES;
    a->st.takes++;
    if (end <= a->st.high_water) {
        a->st.reuses++;
    } else {
        a->st.high_water = end;
        if (a->running) {
            atomic_store(&a->high, end);
            pthread_mutex_lock(&a->mu);
            pthread_cond_signal(&a->cv);
            pthread_mutex_unlock(&a->mu);
        }
    }
    a->st.in_use += (uint64_t)n * ARENA_BLOCK_BYTES;
    return a->base + (uint64_t)b * ARENA_BLOCK_BYTES;
}

uint8_t *arena_take(mem_arena *a, uint64_t len)
{
    if (!a || len == 0 || len > a->reserved) return NULL;
    size_t n = blocks_of(len), b = find_run(a, n);
    if (b == a->nblocks) {
        a->st.misses++;
        return NULL;
    }
    return take_run(a, b, n);
}

uint8_t *arena_take_upto(mem_arena *a, uint64_t min_len, uint64_t max_len, uint64_t *len)
{
    if (!a || min_len == 0 || min_len > a->reserved || max_len < min_len) return NULL;
    size_t n = blocks_of(min_len), b = find_run(a, n);
    if (b == a->nblocks) {
        a->st.misses++;
        return NULL;
    }
    size_t most = blocks_of(max_len < a->reserved ? max_len : a->reserved);
    while (n < most && b + n < a->nblocks && !taken(a, b + n)) n++;
    *len = (uint64_t)n * ARENA_BLOCK_BYTES;
    return take_run(a, b, n);
}

uint64_t arena_len(const mem_arena *a, const uint8_t *p)
{
    return (uint64_t)a->run[(uint64_t)(p - a->base) / ARENA_BLOCK_BYTES] * ARENA_BLOCK_BYTES;
}

int arena_owns(const mem_arena *a, const uint8_t *p)
{
    return a && p >= a->base && p < a->base + a->reserved;
}

uint64_t arena_shrink(mem_arena *a, uint8_t *p, uint64_t len)
{
    size_t b = (size_t)((uint64_t)(p - a->base) / ARENA_BLOCK_BYTES), n = blocks_of(len ? len : 1);
    if (n < a->run[b]) {
        mark(a, b + n, a->run[b] - n, 0);
        a->st.in_use -= (uint64_t)(a->run[b] - n) * ARENA_BLOCK_BYTES;
        a->run[b] = (uint32_t)n;
    }
    return (uint64_t)a->run[b] * ARENA_BLOCK_BYTES;
}

void arena_give(mem_arena *a, uint8_t *p, uint64_t len)
{
    size_t b = (size_t)((uint64_t)(p - a->base) / ARENA_BLOCK_BYTES), n = blocks_of(len);
    mark(a, b, n, 0);
    a->run[b] = 0;
    a->st.in_use -= (uint64_t)n * ARENA_BLOCK_BYTES;
}

uint64_t arena_trim(mem_arena *a, uint64_t keep_idle)
{
    if (!a) return 0;
    const size_t per_huge = (size_t)(HUGE_BYTES / ARENA_BLOCK_BYTES);
    uint64_t freed = 0;
    /* from the top down: the lowest blocks are the ones first fit takes next */
    for (size_t h = a->nblocks / per_huge; h-- > 0 && a->st.resident - a->st.in_use > keep_idle;) {
        size_t b0 = h * per_huge, n_res = 0, busy = 0;
        for (size_t b = b0; b < b0 + per_huge && !busy; b++) {
            busy = taken(a, b);
            n_res += bit(a->res, b);
        }
        if (busy || n_res == 0) continue;
        /* whole huge pages only: a part of one would split it */
        if (madvise(a->base + (uint64_t)b0 * ARENA_BLOCK_BYTES, (size_t)HUGE_BYTES, MADV_DONTNEED) != 0) break;
        uint64_t bytes = (uint64_t)mark_map(a->res, b0, per_huge, 0) * ARENA_BLOCK_BYTES;
        a->st.resident -= bytes;
        a->st.trimmed += bytes;
        freed += bytes;
    }
    return freed;
}

void arena_get_stats(const mem_arena *a, arena_stats *out)
{
    *out = a ? a->st : (arena_stats){0};
    if (a) out->populated = atomic_load(&((mem_arena *)a)->populated);
}
