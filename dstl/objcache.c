/*
 * dstl/objcache.c — per-thread caches of small blocks (dstl/objcache.h). Calls nothing else
 * of the library.
 *
 * Size classes of 64 << k bytes (k < OC_CLASSES); a block has a 16-byte header naming its
 * class (OC_BIG: larger, never cached). A cached block's first bytes link the class's list.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dstl/objcache.h"

#if defined(__SANITIZE_ADDRESS__)
#define OC_CACHING 0
#else
#define OC_CACHING 1
#endif

enum { OC_CLASSES = 7, OC_BIG = 0xff, OC_MAGIC = 0x6f63626bu };
/* OC_KEEP_BYTES (objcache.h), the most a thread keeps: 1,024 writers on 8 threads keep ~250
 * KiB each (128 of each kind a round); a task thread with one writer keeps a few KiB. */

typedef struct {
    uint32_t cls;
    uint32_t magic;
    uint64_t pad;               /* the payload stays 16-byte aligned */
} oc_hdr;

typedef struct oc_free_block {
    struct oc_free_block *next;
} oc_free_block;

static _Thread_local oc_free_block *kept[OC_CLASSES];
static _Thread_local size_t kept_bytes;
static _Thread_local int kept_marked;
static pthread_key_t kept_key;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;

static size_t class_bytes(unsigned c) { return (size_t)64 << c; }

static unsigned class_of(size_t n)
{
    for (unsigned c = 0; c < OC_CLASSES; c++)
        if (n <= class_bytes(c)) return c;
    return OC_BIG;
}

/* The key's destructor, at the thread's exit (its value only marks that the thread keeps
 * blocks; the lists are the thread's own variables, still there while destructors run). */
static void kept_free(void *unused)
{
    (void)unused;
    for (unsigned c = 0; c < OC_CLASSES; c++)
        while (kept[c]) {
            oc_free_block *b = kept[c];
            kept[c] = b->next;
            free((oc_hdr *)b - 1);
        }
    kept_bytes = 0;
}

static void kept_init(void) { (void)pthread_key_create(&kept_key, kept_free); }

void *oc_alloc(size_t n)
{
    unsigned c = class_of(n);
    if (OC_CACHING && c != OC_BIG && kept[c]) {
        oc_free_block *b = kept[c];
        kept[c] = b->next;
        kept_bytes -= class_bytes(c);
        /* the next one's link is read by this class's next alloc, a persist later: a block
         * kept since the last round is out of this core's cache by then */
        if (b->next) __builtin_prefetch(b->next);
        return b;
    }
    oc_hdr *h = malloc(sizeof *h + (c == OC_BIG ? n : class_bytes(c)));
    if (!h) return NULL;
    *h = (oc_hdr){.cls = c, .magic = OC_MAGIC};
    return h + 1;
}

void *oc_calloc(size_t n)
{
    void *p = oc_alloc(n);
    return p ? memset(p, 0, n) : NULL;
}

void oc_free(void *p)
{
    if (!p) return;
    oc_hdr *h = (oc_hdr *)p - 1;
    if (h->magic != OC_MAGIC) abort();      /* not an oc_alloc block: a heap bug, stop here */
    unsigned c = h->cls;
    if (!OC_CACHING || c == OC_BIG || kept_bytes + class_bytes(c) > OC_KEEP_BYTES) {
        free(h);
        return;
    }
    if (!kept_marked) {
        /* a thread keeps blocks only with the key set: its exit frees them */
        (void)pthread_once(&kept_once, kept_init);
        if (pthread_setspecific(kept_key, (void *)1) != 0) {
            free(h);
            return;
        }
        kept_marked = 1;
    }
    oc_free_block *b = p;
    b->next = kept[c];
    kept[c] = b;
    kept_bytes += class_bytes(c);
}

size_t oc_kept_bytes(void) { return kept_bytes; }
