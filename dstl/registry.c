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
#include "dstl/objcache.h"
#include "dstl/registry.h"

/* A live (not discarded) handle of this run: what keeps its segments. */
typedef struct live_handle {
    struct live_handle *next;   /* same identity hash */
    uint64_t ident;             /* the hash */
    uint64_t nums[4];           /* incarnation, checkpoint, from, to */
    const char *writer_id;      /* in names, after the storage id */
    run_segment **segs;         /* &seg1, or malloc'd when more than one */
    size_t nsegs;
    run_segment *seg1;
    char names[];               /* storage id \0 writer id \0 */
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

/* A handle's identity is (storage, writer, incarnation, checkpoint, from, to), compared field
 * by field; its hash keys the map. Built for every persist and discard: the numbers go in as
 * words and the names 8 bytes at a time (it was decimal text hashed a byte at a time, ~2 % of
 * a 1,024-writer load run). */
static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v;
    h *= 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

static uint64_t mix_str(uint64_t h, const char *s, size_t n)
{
    for (; n >= 8; s += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = mix(h, w);
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    return mix(h, w ^ (uint64_t)n << 56);   /* the length tells "ab" + "c" from "a" + "bc" */
}

static uint64_t ident_of(const char *storage_id, size_t ns, const char *writer_id, size_t nw,
                         const uint64_t nums[4])
{
    uint64_t h = mix_str(mix_str(0x243f6a8885a308d3ull, storage_id, ns), writer_id, nw);
    for (int i = 0; i < 4; i++) h = mix(h, nums[i]);
    return h;
}

live_handle *reg_live_new(const char *storage_id, const char *writer_id, uint64_t incarnation, uint64_t cp,
                          uint64_t from, uint64_t to)
{
    size_t ns = strlen(storage_id), nw = strlen(writer_id);
    live_handle *l = oc_alloc(sizeof *l + ns + nw + 2);
    if (!l) return NULL;
    *l = (live_handle){.nums = {incarnation, cp, from, to}};
    l->ident = ident_of(storage_id, ns, writer_id, nw, l->nums);
    memcpy(l->names, storage_id, ns + 1);
    memcpy(l->names + ns + 1, writer_id, nw + 1);
    l->writer_id = l->names + ns + 1;
    return l;
}

run_segment **reg_live_segs(live_handle *l, size_t n)
{
    if (l->segs && l->segs != &l->seg1) free(l->segs);
    l->segs = n <= 1 ? &l->seg1 : malloc(n * sizeof *l->segs);
    l->nsegs = l->segs ? n : 0;
    return l->segs;
}

static live_handle *live_find(registry *reg, uint64_t ident, const char *storage_id, const char *writer_id,
                              const uint64_t nums[4])
{
    for (live_handle *l = u64map_get(&reg->live, ident); l; l = l->next)
        if (memcmp(l->nums, nums, sizeof l->nums) == 0 && strcmp(l->writer_id, writer_id) == 0 &&
            strcmp(l->names, storage_id) == 0)
            return l;
    return NULL;
}

int reg_live_insert(registry *reg, live_handle *l)
{
    if (live_find(reg, l->ident, l->names, l->writer_id, l->nums)) {
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
    oc_free(l);
}

uint64_t reg_live_ident(const wire_handle *wh)
{
    const uint64_t nums[4] = {wh->writer_incarnation, wh->checkpoint_id, wh->from_seq, wh->to_seq};
    return ident_of(wh->storage_id, strlen(wh->storage_id), wh->writer_id, strlen(wh->writer_id), nums);
}

live_handle *reg_live_take(registry *reg, const wire_handle *wh, uint64_t ident)
{
    const uint64_t nums[4] = {wh->writer_incarnation, wh->checkpoint_id, wh->from_seq, wh->to_seq};
    live_handle *l = live_find(reg, ident, wh->storage_id, wh->writer_id, nums);
    if (!l) return NULL;
    live_handle *head = u64map_get(&reg->live, ident), **pp = &head;
    while (*pp != l) pp = &(*pp)->next;
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
