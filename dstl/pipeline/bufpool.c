/*
 * dstl/pipeline/bufpool.c — segment buffers kept for reuse (the sizing rule: pipeline_int.h).
 * Pipeline thread only.
 */
#include <stdlib.h>

#include "dstl/pipeline/pipeline_int.h"

/* A buffer's data starts on a page, so the local store can write it with O_DIRECT
 * (dstl.io.direct); its header sits at the end of the page before. */
pooled_buf *pool_new(size_t cap)
{
    void *base;
    if (posix_memalign(&base, POOL_PAGE, POOL_PAGE + cap) != 0) return NULL;
    pooled_buf *b = (pooled_buf *)((char *)base + POOL_PAGE) - 1;
    b->cap = cap;
    return b;
}

static void pool_drop(pooled_buf *b)
{
    free((char *)(b + 1) - POOL_PAGE);
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

void pool_put(buf_pool *p, void *ptr)
{
    if (!ptr) return;
    pooled_buf *b = (pooled_buf *)ptr - 1;
    if (p->idle_bytes + b->cap > POOL_MAX_BYTES) {
        pool_drop(b);
        return;
    }
    b->next = p->free_list;
    p->free_list = b;
    p->idle_bytes += b->cap;
}

void pool_free(buf_pool *p)
{
    for (pooled_buf *b = p->free_list, *next; b; b = next) {
        next = b->next;
        pool_drop(b);
    }
    p->free_list = NULL;
    p->idle_bytes = 0;
}
