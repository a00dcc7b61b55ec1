/*
 * dstl/registry.c — segment counts, live handles, when a segment goes (dstl/registry.h).
 *
 * Every count is changed in pairs that assert: a decrement below zero is a bookkeeping bug
 * that would delete a segment someone still needs, so it stops the process instead.
 * Deletion itself happens on the pipeline thread, which drains reg->delete_head.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstl/err.h"
#include "dstl/handle.h"
#include "dstl/registry.h"

/* A live (not discarded) handle of this run: what keeps its segments. */
typedef struct live_handle {
    struct live_handle *next;   /* same identity hash */
    char *key;
    run_segment **segs;
    size_t nsegs;
} live_handle;

void reg_init(registry *reg, const char *run_id)
{
    memset(reg, 0, sizeof *reg);
    reg->run_id = run_id;
    u64map_init(&reg->segs);
    u64map_init(&reg->live);
}

run_segment *reg_new_segment(registry *reg)
{
    run_segment *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->no = reg->next_seg_no++;
    segment_name_format(reg->run_id, g->no, g->name, sizeof g->name);
    if (u64map_put(&reg->segs, g->no, g) < 0) {
        free(g);
        return NULL;
    }
    return g;
}

void reg_forget(registry *reg, run_segment *g)
{
    assert(g->section_refs == 0 && g->handle_refs == 0 && !g->durable);
    u64map_del(&reg->segs, g->no);
    free(g);
}

void reg_deleted(registry *reg, run_segment *g)
{
    assert(g->deleting && g->section_refs == 0 && g->handle_refs == 0);
    u64map_del(&reg->segs, g->no);
    free(g);
}

static void maybe_delete(registry *reg, run_segment *g)
{
    if (g->section_refs > 0 || g->handle_refs > 0 || g->deleting) return;
    g->deleting = 1;
    g->next_delete = reg->delete_head;
    reg->delete_head = g;
}

void reg_section_add(run_segment *g)
{
    assert(g->durable && !g->deleting);
    g->section_refs++;
}

void reg_section_release(registry *reg, run_segment *g)
{
    assert(g->section_refs > 0);
    g->section_refs--;
    maybe_delete(reg, g);
}

void reg_pin(run_segment *g)
{
    assert(!g->deleting);
    g->handle_refs++;
}

void reg_unpin(registry *reg, run_segment *g)
{
    assert(g->handle_refs > 0);
    g->handle_refs--;
    maybe_delete(reg, g);
}

/* ---- live handles ---- */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Appends s (up to the end of buf) at *p. */
static void key_put_str(char **p, char *end, const char *s)
{
    while (*s && *p < end) *(*p)++ = *s++;
}

static void key_put_u64(char **p, char *end, uint64_t v)
{
    char d[20];
    int n = 0;
    do d[n++] = (char)('0' + v % 10);
    while ((v /= 10) && n < 20);
    while (n && *p < end) *(*p)++ = d[--n];
}

uint64_t reg_handle_ident(const wire_handle *wh, char **key)
{
    /* storage \x1f writer \x1f incarnation \x1f checkpoint \x1f from \x1f to, by hand: this runs
     * for every persist and discard, under s->mu, and snprintf was a visible share of it */
    char buf[1024], *p = buf, *end = buf + sizeof buf - 1;
    const uint64_t nums[4] = {wh->writer_incarnation, wh->checkpoint_id, wh->from_seq, wh->to_seq};
    key_put_str(&p, end, wh->storage_id);
    key_put_str(&p, end, "\x1f");
    key_put_str(&p, end, wh->writer_id);
    for (int i = 0; i < 4; i++) {
        key_put_str(&p, end, "\x1f");
        key_put_u64(&p, end, nums[i]);
    }
    *p = 0;
    size_t n = (size_t)(p - buf);
    if (key) *key = strdup(buf);
    return fnv1a(0xcbf29ce484222325ull, buf, n);
}

static live_handle *live_find(registry *reg, uint64_t ident, const char *key)
{
    for (live_handle *l = u64map_get(&reg->live, ident); l; l = l->next)
        if (strcmp(l->key, key) == 0) return l;
    return NULL;
}

int reg_live_add(registry *reg, const wire_handle *wh, run_segment **segs, size_t n)
{
    char *key = NULL;
    uint64_t ident = reg_handle_ident(wh, &key);
    if (!key) return err_fail(-ENOMEM, "out of memory");
    if (live_find(reg, ident, key)) {
        /* An equal handle is live already (a repeated persist): it holds the segments. */
        for (size_t i = 0; i < n; i++) reg_unpin(reg, segs[i]);
        free(segs);
        free(key);
        return 0;
    }
    live_handle *l = calloc(1, sizeof *l);
    if (!l) {
        free(key);
        return err_fail(-ENOMEM, "out of memory");
    }
    l->key = key;
    l->segs = segs;             /* the pins move here */
    l->nsegs = n;
    l->next = u64map_get(&reg->live, ident);
    if (u64map_put(&reg->live, ident, l) < 0) {
        free(l);
        free(key);
        return err_fail(-ENOMEM, "out of memory");
    }
    return 0;
}

static void live_free(live_handle *l)
{
    free(l->segs);
    free(l->key);
    free(l);
}

int reg_live_discard(registry *reg, const wire_handle *wh)
{
    char *key = NULL;
    uint64_t ident = reg_handle_ident(wh, &key);
    if (!key) return err_fail(-ENOMEM, "out of memory");
    live_handle *head = u64map_get(&reg->live, ident), **pp = &head;
    while (*pp && strcmp((*pp)->key, key) != 0) pp = &(*pp)->next;
    free(key);
    live_handle *l = *pp;
    if (!l) return 0;              /* discarded before, or not this run's: a no-op */
    *pp = l->next;
    if (head) u64map_put(&reg->live, ident, head);
    else u64map_del(&reg->live, ident);
    for (size_t i = 0; i < l->nsegs; i++) reg_unpin(reg, l->segs[i]);
    live_free(l);
    return 0;
}

void reg_destroy(registry *reg)
{
    for (size_t i = u64map_next(&reg->live, 0); i < reg->live.cap; i = u64map_next(&reg->live, i + 1))
        for (live_handle *l = reg->live.vals[i], *next; l; l = next) {
            next = l->next;
            live_free(l);
        }
    u64map_destroy(&reg->live);
    for (size_t i = u64map_next(&reg->segs, 0); i < reg->segs.cap; i = u64map_next(&reg->segs, i + 1))
        free(reg->segs.vals[i]);
    u64map_destroy(&reg->segs);
}
