/*
 * dstl/chunks.c — writers' record chunks: the pool they are recycled through, and freeing the
 * ones no record needs any more (also from the pipeline thread, once a batch is encoded: the
 * threads' rules are in writer_release_sent_chunks). Calls nothing else of the library.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dstl/storage.h"
#include "dstl/writer.h"


/* The size class of a pooled chunk capacity, or -1 (a big record's odd-sized chunk). */
static int chunk_class(size_t cap)
{
    int k = 0;
    for (size_t c = CHUNK_MIN; c <= CHUNK_MAX; c *= 2, k++)
        if (c == cap) return k;
    return -1;
}

/* Chunks of CHUNK_MAP_MIN bytes or more are mapped, not malloc'd, so that one the pool does not
 * keep goes back to the kernel at once. From glibc's arenas, the chunks the pool refused stayed
 * there fragmented, neither reused nor trimmed, while fresh ones were faulted in beside them:
 * at 1,024 writers (2026-12-06, 4 s runs) peak RSS 158-176 MB with malloc'd chunks, 161.3-161.9
 * mapped, for the same CPU per MB (984-1,243 and 1,076-1,221 us); with the pool capped at half
 * its room, 206-216 malloc'd and 147-150 mapped (but 1,483-2,606 us/MB: the faults are back).
 * Below this size a writer's chunks are a few pages, malloc's. */
#define CHUNK_MAP_MIN (32u << 10)

static size_t page_round(size_t n) { return (n + 4095) & ~(size_t)4095; }
static size_t chunk_bytes(size_t cap) { return sizeof(chunk) + cap; }
static int chunk_mapped(size_t cap) { return chunk_bytes(cap) >= CHUNK_MAP_MIN; }
static size_t chunk_map_len(size_t cap) { return page_round(chunk_bytes(cap)); }

static chunk *chunk_alloc(size_t cap)
{
    if (!chunk_mapped(cap)) return malloc(chunk_bytes(cap));
    void *m = mmap(NULL, chunk_map_len(cap), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? NULL : m;
}

static void chunk_free(chunk *c)
{
    if (c && chunk_mapped(c->cap)) munmap(c, chunk_map_len(c->cap));
    else free(c);
}

/* What a pooled chunk holds of the process's memory: its header and the pages its records
 * have touched (a chunk's untouched tail is address space only; chunk_put sets touched). */
static size_t chunk_resident(const chunk *c) { return page_round(chunk_bytes(c->touched)); }

size_t chunk_pool_room(const dstl_storage *s)
{
    uint64_t max = s->conf.max_in_flight_bytes, used = s->locked.pipe.in_flight_bytes;
    uint64_t room = used < max ? max - used : 0;
    return room > CHUNK_POOL_MIN ? (size_t)room : CHUNK_POOL_MIN;
}

void chunk_put(chunk_pool *p, chunk *c, size_t room)
{
    int k = chunk_class(c->cap);
    if (c->used > c->touched) c->touched = c->used;
    size_t res = chunk_resident(c);
    pthread_mutex_lock(&p->mu);
    if (k >= 0 && p->bytes + res <= room) {
        c->next = p->free_list[k];
        p->free_list[k] = c;
        p->bytes += res;
        c = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    chunk_free(c);
}

void chunk_pool_init(chunk_pool *p)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
}

size_t chunk_pool_bytes(chunk_pool *p)
{
    pthread_mutex_lock(&p->mu);
    size_t n = p->bytes;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void chunk_pool_trim(chunk_pool *p, size_t keep)
{
    chunk *drop = NULL;
    pthread_mutex_lock(&p->mu);
    for (int k = CHUNK_CLASSES - 1; k >= 0 && p->bytes > keep; k--)   /* the largest first */
        while (p->free_list[k] && p->bytes > keep) {
            chunk *c = p->free_list[k];
            p->free_list[k] = c->next;
            p->bytes -= chunk_resident(c);
            c->next = drop;
            drop = c;
        }
    pthread_mutex_unlock(&p->mu);
    for (chunk *c = drop, *next; c; c = next) {   /* unmapped and freed outside the lock */
        next = c->next;
        chunk_free(c);
    }
}

void chunk_pool_destroy(chunk_pool *p)
{
    for (int k = 0; k < CHUNK_CLASSES; k++)
        for (chunk *c = p->free_list[k], *next; c; c = next) {
            next = c->next;
            chunk_free(c);
        }
    pthread_mutex_destroy(&p->mu);
}

chunk *chunk_new(chunk_pool *p, size_t cap, uint64_t seq, uint64_t payload)
{
    chunk *c = NULL;
    int k = chunk_class(cap);
    if (k >= 0) {
        pthread_mutex_lock(&p->mu);
        if ((c = p->free_list[k])) {
            p->free_list[k] = c->next;
            p->bytes -= chunk_resident(c);
            /* the next pop reads its header under this lock: fetched now, not then */
            if (c->next) __builtin_prefetch(c->next);
        }
        pthread_mutex_unlock(&p->mu);
    }
    if (!c) {
        if (!(c = chunk_alloc(cap))) return NULL;
        c->touched = 0;
    }
    c->next = NULL;
    c->seq_first = seq;
    c->nrec = 0;
    c->payload_first = payload;
    c->used = 0;
    c->cap = cap;
    return c;
}

/* The first seq whose record the chunks must keep: unsent records, and those of a range
 * whose only copy is in the chunks (handed off, not encoded yet). s->mu held. */
uint64_t chunk_floor(const dstl_writer *w)
{
    uint64_t floor = w->sent_seq;
    for (const range *r = w->ranges; r; r = r->next)
        if (r->state != RANGE_DURABLE && r->in_chunks && r->seq_first < floor) {
            floor = r->seq_first;
            break;
        }
    return floor;
}

void writer_release_sent_chunks(dstl_writer *w)
{
    /* Only chunks before sent_chunk: the writer thread appends to the tail (at or after
     * sent_chunk) without the lock, and every chunk before sent_chunk was complete when the
     * hand-off that moved sent_chunk past it took s->mu. head and sent_chunk change only
     * under s->mu (chunk_grow takes it when it starts the list). */
    uint64_t floor = chunk_floor(w);
    size_t room = chunk_pool_room(w->s);
    while (w->head && w->head != w->sent_chunk && w->head->seq_first + w->head->nrec <= floor) {
        chunk *c = w->head;
        w->head = c->next;
        chunk_put(&w->s->chunks, c, room);
    }
}
