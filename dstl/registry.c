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
    uint64_t ident;
    run_segment **segs;         /* &seg1, or malloc'd when more than one */
    size_t nsegs;
    run_segment *seg1;
    char key[];                 /* the identity's text */
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

/* The identity's text at buf (cap 1024): storage \x1f writer \x1f incarnation \x1f checkpoint
 * \x1f from \x1f to, built by hand (it runs for every persist and discard; snprintf was a
 * visible share of it); its length in *n, its hash returned. */
static uint64_t ident_text(const char *storage_id, const char *writer_id, const uint64_t nums[4], char *buf,
                           size_t *n)
{
    char *p = buf, *end = buf + 1023;
    key_put_str(&p, end, storage_id);
    key_put_str(&p, end, "\x1f");
    key_put_str(&p, end, writer_id);
    for (int i = 0; i < 4; i++) {
        key_put_str(&p, end, "\x1f");
        key_put_u64(&p, end, nums[i]);
    }
    *p = 0;
    *n = (size_t)(p - buf);
    return fnv1a(0xcbf29ce484222325ull, buf, *n);
}

uint64_t reg_handle_ident(const wire_handle *wh, char **key)
{
    char buf[1024];
    size_t n;
    const uint64_t nums[4] = {wh->writer_incarnation, wh->checkpoint_id, wh->from_seq, wh->to_seq};
    uint64_t h = ident_text(wh->storage_id, wh->writer_id, nums, buf, &n);
    if (key) *key = strdup(buf);
    return h;
}

live_handle *reg_live_new(const char *storage_id, const char *writer_id, uint64_t incarnation, uint64_t cp,
                          uint64_t from, uint64_t to)
{
    char buf[1024];
    size_t n;
    const uint64_t nums[4] = {incarnation, cp, from, to};
    uint64_t h = ident_text(storage_id, writer_id, nums, buf, &n);
    live_handle *l = malloc(sizeof *l + n + 1);
    if (!l) return NULL;
    *l = (live_handle){.ident = h};
    memcpy(l->key, buf, n + 1);
    return l;
}

const char *reg_live_key(const live_handle *l, uint64_t *ident)
{
    *ident = l->ident;
    return l->key;
}

run_segment **reg_live_segs(live_handle *l, size_t n)
{
    if (l->segs && l->segs != &l->seg1) free(l->segs);
    l->segs = n <= 1 ? &l->seg1 : malloc(n * sizeof *l->segs);
    l->nsegs = l->segs ? n : 0;
    return l->segs;
}

static live_handle *live_find(registry *reg, uint64_t ident, const char *key)
{
    for (live_handle *l = u64map_get(&reg->live, ident); l; l = l->next)
        if (strcmp(l->key, key) == 0) return l;
    return NULL;
}

int reg_live_insert(registry *reg, live_handle *l)
{
    if (live_find(reg, l->ident, l->key)) {
        /* An equal handle is live already (a repeated persist): it holds the segments. */
        for (size_t i = 0; i < l->nsegs; i++) reg_unpin(reg, l->segs[i]);
        reg_live_free(l);
        return 0;
    }
    l->next = u64map_get(&reg->live, l->ident);
    if (u64map_put(&reg->live, l->ident, l) < 0) return err_fail(-ENOMEM, "out of memory");
    return 0;
}

void reg_live_free(live_handle *l)
{
    if (!l) return;
    if (l->segs != &l->seg1) free(l->segs);
    free(l);
}

live_handle *reg_live_take(registry *reg, uint64_t ident, const char *key)
{
    live_handle *head = u64map_get(&reg->live, ident), **pp = &head;
    while (*pp && strcmp((*pp)->key, key) != 0) pp = &(*pp)->next;
    live_handle *l = *pp;
    if (!l) return NULL;
    *pp = l->next;
    if (head) u64map_put(&reg->live, ident, head);
    else u64map_del(&reg->live, ident);
    for (size_t i = 0; i < l->nsegs; i++) reg_unpin(reg, l->segs[i]);
    return l;
}

void reg_destroy(registry *reg)
{
    for (size_t i = u64map_next(&reg->live, 0); i < reg->live.cap; i = u64map_next(&reg->live, i + 1))
        for (live_handle *l = u64map_at(&reg->live, i), *next; l; l = next) {
            next = l->next;
            reg_live_free(l);
        }
    u64map_destroy(&reg->live);
    for (size_t i = u64map_next(&reg->segs, 0); i < reg->segs.cap; i = u64map_next(&reg->segs, i + 1))
        free(u64map_at(&reg->segs, i));
    u64map_destroy(&reg->segs);
}
