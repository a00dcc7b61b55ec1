/*
 * dstl/registry.c — which segments this storage run still needs, and when they go.
 *
 * Every segment written by this run has two counts (under s->mu):
 *   section_refs — writer ranges in it that are not truncated and whose writer is open;
 *   handle_refs  — live (not discarded) handles that reference it, plus pins held by
 *                  futures still being built.
 * A segment is deleted (locally; remotely too once remote durability exists) exactly when
 * both reach zero. Pins make FLINK-28440 impossible by construction: a piece joins a future
 * only with its pin taken, and the pin turns into the live handle's reference before the
 * future completes, so no truncate or discard in between can drop the last count.
 * Segments that earlier runs wrote are never in the registry: only dstl_gc removes them.
 *
 * Deletion itself happens on the pipeline thread (pipeline.c drains s->delete_head).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstl/err.h"
#include "dstl/internal.h"

seg *reg_new_segment(dstl_storage *s)
{
    seg *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->no = s->next_seg_no++;
    snprintf(g->name, sizeof g->name, "%s-%012llu.seg", s->run_id, (unsigned long long)g->no);
    if (u64map_put(&s->segs, g->no, g) < 0) {
        free(g);
        return NULL;
    }
    return g;
}

static void maybe_delete(dstl_storage *s, seg *g)
{
    if (g->section_refs > 0 || g->handle_refs > 0 || g->deleting) return;
    g->deleting = 1;
    g->next_delete = s->delete_head;
    s->delete_head = g;
}

void reg_section_release(dstl_storage *s, seg *g)
{
    g->section_refs--;
    maybe_delete(s, g);
}

void reg_pin(seg *g) { g->handle_refs++; }

void reg_unpin(dstl_storage *s, seg *g)
{
    g->handle_refs--;
    maybe_delete(s, g);
}

static livehandle *live_find(dstl_storage *s, uint64_t ident, const char *key)
{
    for (livehandle *l = u64map_get(&s->live, ident); l; l = l->next)
        if (strcmp(l->key, key) == 0) return l;
    return NULL;
}

int reg_live_add(dstl_storage *s, dstl_handle *h, fpiece *pieces, size_t n)
{
    char *key = NULL;
    uint64_t ident = handle_ident(h->wh, &key);
    if (!key) return err_fail(-ENOMEM, "out of memory");
    if (live_find(s, ident, key)) {
        /* An equal handle is live already (a repeated persist): it holds the segments. */
        for (size_t i = 0; i < n; i++) reg_unpin(s, pieces[i].sg);
        free(key);
        return 0;
    }
    livehandle *l = calloc(1, sizeof *l);
    if (!l || !(l->segs = malloc((n ? n : 1) * sizeof *l->segs))) {
        free(l);
        free(key);
        return err_fail(-ENOMEM, "out of memory");
    }
    l->key = key;
    for (size_t i = 0; i < n; i++) l->segs[l->nsegs++] = pieces[i].sg;   /* the pins move here */
    l->next = u64map_get(&s->live, ident);
    if (u64map_put(&s->live, ident, l) < 0) {
        free(l->segs);
        free(l);
        free(key);
        return err_fail(-ENOMEM, "out of memory");
    }
    return 0;
}

int reg_live_discard(dstl_storage *s, const dstl_handle *h)
{
    char *key = NULL;
    uint64_t ident = handle_ident(h->wh, &key);
    if (!key) return err_fail(-ENOMEM, "out of memory");
    livehandle *head = u64map_get(&s->live, ident), **pp = &head;
    while (*pp && strcmp((*pp)->key, key) != 0) pp = &(*pp)->next;
    free(key);
    livehandle *l = *pp;
    if (!l) return 0;              /* discarded before, or not this run's: a no-op */
    *pp = l->next;
    if (head) u64map_put(&s->live, ident, head);
    else u64map_del(&s->live, ident);
    for (size_t i = 0; i < l->nsegs; i++) reg_unpin(s, l->segs[i]);
    free(l->segs);
    free(l->key);
    free(l);
    return 0;
}

void reg_free_all(dstl_storage *s)
{
    for (size_t i = u64map_next(&s->live, 0); i < s->live.cap; i = u64map_next(&s->live, i + 1)) {
        for (livehandle *l = s->live.vals[i], *next; l; l = next) {
            next = l->next;
            free(l->segs);
            free(l->key);
            free(l);
        }
    }
    u64map_destroy(&s->live);
    for (size_t i = u64map_next(&s->segs, 0); i < s->segs.cap; i = u64map_next(&s->segs, i + 1))
        free(s->segs.vals[i]);
    u64map_destroy(&s->segs);
}
