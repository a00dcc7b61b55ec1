/*
 * dstl/pipeline/bufpool.c — segment buffers kept for reuse (the sizing rule: pipeline_int.h).
 * Pipeline thread only.
 */
#include <stdlib.h>

#include "dstl/pipeline/pipeline_int.h"

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
        free(b);
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
        free(b);
    }
    p->free_list = NULL;
    p->idle_bytes = 0;
}
