/*
 * dstl/pipeline/bufpool.c — segment buffers kept for reuse (the sizing rule: pipeline_int.h).
 * Pipeline thread only.
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "dstl/arena.h"
#include "dstl/pipeline/pipeline_int.h"

/* Segment buffers are mapped, not malloc'd: glibc raises its mmap threshold to the size of
 * the last mapped block freed, after which 10 MiB buffers come from the heap arenas of
 * whichever thread asked, and a freed one stays in that arena's RSS (measured: 185 MB peak RSS
 * at 1,024 writers with malloc, 141 MB with one arena). A mapping goes back to the kernel at
 * once when the pool does not keep it. The data starts on a page (O_DIRECT writes need that);
 * the header sits at the end of the page before it.
 *
 * A buffer of POOL_HUGE bytes or more has its data on a 2 MiB boundary and is advised to
 * transparent huge pages: under load most segments miss the pool (their sizes spread wider
 * than its fit rule, and it keeps one), and the encoder then faulted in every 4 KiB of a fresh
 * 13 MB buffer — 80 % of the process's page faults, a third of its CPU in the kernel's fault
 * path (perf, bench_local load w16). A huge page costs one fault and one zeroing per 2 MiB.
 * The hint is only a hint: where THP is off, the same buffer has 4 KiB pages. */
#define POOL_HUGE (2u << 20)

pooled_buf *pool_new(size_t cap)
{
    size_t align = cap >= POOL_HUGE ? POOL_HUGE : POOL_PAGE;
    size_t map_len = POOL_PAGE + cap + (align - POOL_PAGE);
    void *base = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    uintptr_t data = ((uintptr_t)base + POOL_PAGE + align - 1) & ~(uintptr_t)(align - 1);
    if (align == POOL_HUGE) {
        /* the huge pages the data spans, within the mapping (a last partial one stays small) */
        size_t span = (cap + POOL_HUGE - 1) & ~(size_t)(POOL_HUGE - 1), room = (uintptr_t)base + map_len - data;
        (void)madvise((void *)data, span < room ? span : room, MADV_HUGEPAGE);
    }
    pooled_buf *b = (pooled_buf *)data - 1;
    b->cap = cap;
    b->map = base;
    b->map_len = map_len;
    return b;
}

static void pool_drop(pooled_buf *b)
{
    munmap(b->map, b->map_len);
}

pooled_buf *pool_take(buf_pool *p, size_t len)
{
    pooled_buf **best = NULL;
    for (pooled_buf **pp = &p->free_list; *pp; pp = &(*pp)->next)
        if ((*pp)->cap >= len && (*pp)->cap - len <= len / 4 + POOL_PAGE && (!best || (*pp)->cap < (*best)->cap))
            best = pp;
    if (!best) return NULL;
    pooled_buf *b = *best;
    *best = b->next;
    p->idle_bytes -= b->cap;
    return b;
}

static mem_arena *pool_arena(buf_pool *p)
{
    if (!p->arena_tried && p->arena_bytes) {
        p->arena_tried = 1;
        p->arena = arena_new(p->arena_bytes);
    }
    return p->arena;
}

void *pool_get_upto(buf_pool *p, size_t min, size_t max, size_t *cap)
{
    uint64_t got = 0;
    uint8_t *a = arena_take_upto(pool_arena(p), min, max, &got);
    if (a) {
        *cap = (size_t)got;
        return a;
    }
    return pool_get(p, max, cap);
}

void *pool_get(buf_pool *p, size_t len, size_t *cap)
{
    uint8_t *a = arena_take(pool_arena(p), len);
    if (a) {
        *cap = (size_t)arena_len(p->arena, a);
        return a;
    }
    pooled_buf *b = pool_take(p, len);
    if (!b) b = pool_new((len + POOL_PAGE - 1) / POOL_PAGE * POOL_PAGE);
    if (!b) return NULL;
    *cap = b->cap;
    return b + 1;
}


void pool_shrink(buf_pool *p, void *ptr, size_t len)
{
    if (arena_owns(p->arena, ptr)) (void)arena_shrink(p->arena, ptr, len);
}

uint64_t pool_idle_bytes(const buf_pool *p)
{
    arena_stats st;
    arena_get_stats(p->arena, &st);
    return st.resident - st.in_use;
}

uint64_t pool_kept_bytes(const buf_pool *p) { return pool_idle_bytes(p) + p->idle_bytes; }

void pool_put(buf_pool *p, void *ptr)
{
    if (!ptr) return;
    if (arena_owns(p->arena, ptr)) {
        arena_give(p->arena, ptr, arena_len(p->arena, ptr));
        (void)arena_trim(p->arena, POOL_ARENA_IDLE);
        return;
    }
    pooled_buf *b = (pooled_buf *)ptr - 1;
    if (p->idle_bytes + b->cap > POOL_MAX_BYTES) {
        pool_drop(b);
        return;
    }
    b->next = p->free_list;
    p->free_list = b;
    p->idle_bytes += b->cap;
}

/* Idle: the arena's free pages and every pooled mapping go back (pool_free but the arena's
 * reservation and the buffers in use). */
void pool_trim(buf_pool *p)
{
    for (pooled_buf *b = p->free_list, *next; b; b = next) {
        next = b->next;
        pool_drop(b);
    }
    p->free_list = NULL;
    p->idle_bytes = 0;
    (void)arena_trim(p->arena, 0);
}

void pool_free(buf_pool *p)
{
    pool_trim(p);
    arena_free(p->arena);
    p->arena = NULL;
}
