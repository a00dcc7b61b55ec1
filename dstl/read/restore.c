/*
 * dstl/read/restore.c — restore plans: from (handles, key-group range) entries to the objects
 * and byte ranges the fetch layer (fetch.c) fetches once for all readers.
 *
 * The plan's references to the handles and the objects their segments name are restore_map.c's
 * (restore_int.h). Planning, per piece of every handle of every entry, whose segment is
 * remote (the handle has a remote_uri, and no local copy of the handle's length exists — a
 * local copy is read first, as every reader does):
 *   - the entry's key groups cover the piece's: the piece needs its whole section and the
 *     segment's footer + trailer, known from the handle alone;
 *   - they cut it (a rescaled reader): the segment's footer is fetched first, before any
 *     other extent (all such footers in parallel, before dstl_restore_plan returns), its
 *     index parsed and checked (segread_index), and the piece needs the footer and
 *     segread_ranges of its section: the same ranges its reader will ask for.
 * Every such need is one use of the extents it overlaps (fetch.h); the reader drops its
 * pieces' needs as it passes them (restore_pieces_done) and all the rest when it closes. The
 * fetch order is by the first entry and handle naming an object, then its name (run id, then
 * number: the order they were written, the order each reader consumes a handle's pieces in).
 *
 * Threads: the plan is shared by its readers' threads; `mu` guards the per-handle bookkeeping
 * (open, pieces done) and the readers' counters; the tables made at planning are read-only
 * afterwards. An object's index is parsed once, by whoever claims it first (ix_state): the
 * fetch thread the moment the footer is in (footer_arrived, which never waits), else a reader
 * or the planner for cut sections; and shared.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dstl/read/restore.h"
#include "dstl/read/restore_int.h"
#include "dstl/read/cache.h"
#include "dstl/read/fetch.h"
#include "dstl/read/segread.h"
#include "dstl/err.h"
#include "dstl/handle.h"
#include "dstl/storage.h"
#include "dstl/remote/remote.h"
#include "dstl/u64map.h"

/* ---- needs ---- */

/* Whether the piece's section is read whole by entry pe (else the entry cuts it). */
static int reads_whole(const plan_entry *pe, const wire_piece *pc)
{
    return pc->kg_first > pc->kg_last || (pe->kg_first <= pc->kg_first && pc->kg_last <= pe->kg_last);
}

static int need_add(dstl_restore *p, piece_need *nd, uint64_t off, uint64_t len)
{
    if (len == 0) return 0;
    nd->off[nd->nr] = off;
    nd->len[nd->nr] = len;
    nd->nr++;
    return fetch_need(p->fs, p->objs[nd->obj].fid, off, len);
}

/* Needs of every piece whose section the entry reads whole; the others wait for the index.
 * Each such piece needs its section and its segment's footer; they go to the fetch set per
 * object, under one lock (the fetch thread starts the first GETs meanwhile): the sections as
 * p->sp holds them, the footer as one range with a use per piece (a job's 1,024 handles name
 * each footer 1,024 times). */
static int plan_whole_pieces(dstl_restore *p)
{
    uint32_t *footer_uses = calloc(p->nobj + 1, sizeof *footer_uses);
    if (!footer_uses) return err_fail(-ENOMEM, "dstl_restore_plan: out of memory");
    int rc = 0;
    for (size_t j = 0; j < p->nhall && rc == 0; j++) {
        plan_handle_prefetch(p, j);
        plan_handle *ph = &p->hall[j];
        const plan_entry *pe = &p->e[ph->entry];
        for (size_t q = 0; q < ph->wh->npieces; q++) {
            const wire_piece *pc = &ph->wh->pieces[q];
            piece_need *nd = &ph->need[q];
            nd->obj = ph->seg_obj[pc->seg];
            if (nd->obj < 0) continue;
            if (!reads_whole(pe, pc)) {
                nd->nr = NEED_DEFERRED;
                p->objs[nd->obj].need_index = 1;
                continue;
            }
            const wire_seg_ref *g = &ph->wh->segs[pc->seg], *og = p->objs[nd->obj].g;
            if (g->footer_offset == og->footer_offset && g->object_len == og->object_len) {
                nd->off[0] = g->footer_offset;      /* the footer's use, added below */
                nd->len[0] = g->object_len - g->footer_offset;
                nd->nr = 1;
                footer_uses[nd->obj]++;
            } else {                                /* a handle at odds with the first: its own */
                rc = need_add(p, nd, g->footer_offset, g->object_len - g->footer_offset);
            }
            if (rc < 0) break;
            if (pc->stored_len) {                   /* its section: in p->sp, added below */
                nd->off[nd->nr] = pc->offset;
                nd->len[nd->nr++] = pc->stored_len;
            }
        }
    }
    /* the sections (sorted) before the footer, which follows them in the object: fetch_commit
     * finds the object's ranges in order and has nothing to sort (with the footer first, it
     * sorted every object's 1,024 ranges at w1024: a fifth of the plan's time) */
    for (size_t o = 0; o < p->nobj && rc == 0; o++) {
        const wire_seg_ref *g = p->objs[o].g;
        if (p->sp.at[o] < p->sp.at[o + 1])
            rc = fetch_need_spans(p->fs, p->objs[o].fid, p->sp.v + p->sp.at[o], p->sp.at[o + 1] - p->sp.at[o]);
        if (rc == 0 && footer_uses[o])
            rc = fetch_need_uses(p->fs, p->objs[o].fid, g->footer_offset, g->object_len - g->footer_offset,
                                 footer_uses[o]);
    }
    free(footer_uses);
    return rc;
}

/* The deferred pieces of object o, from its index ix (NULL: the index could not be had; those
 * pieces are left to their readers, which report what is wrong). */
static int plan_cut_pieces(dstl_restore *p, int64_t o, const wire_index *ix)
{
    const wire_seg_ref *g = p->objs[o].g;
    for (size_t j = 0; j < p->nhall; j++) {
        plan_handle *ph = &p->hall[j];
        const plan_entry *pe = &p->e[ph->entry];
        for (size_t q = 0; q < ph->wh->npieces; q++) {
            piece_need *nd = &ph->need[q];
            if (nd->obj != o || nd->nr != NEED_DEFERRED) continue;
            nd->nr = 0;
            char msg[1200];
            const wire_section_info *sec =
                ix ? segread_piece_section(ix, &ph->wh->pieces[q], ph->wh->writer_id, p->objs[o].uri, msg, sizeof msg)
                   : NULL;
            if (!sec) continue;
            uint64_t off[2], len[2];
            int n = segread_ranges(sec, pe->kg_first, pe->kg_last, off, len);
            int rc = need_add(p, nd, g->footer_offset, g->object_len - g->footer_offset);
            for (int r = 0; r < n && rc == 0; r++) rc = need_add(p, nd, off[r], len[r]);
            if (rc < 0) return rc;
        }
    }
    return 0;
}

/* The objects that hold the first pieces of the first entries have their footers fetched
 * first (fetch_first), before any other bytes: a reader can start on a section only with its
 * segment's index, which a whole-object GET brings last, and readers open in about entry order
 * (tasks restoring at once). One more GET per such object: at most one object in
 * RESTORE_FOOTER_FIRST_SHARE (GETs stay within 1.1 x the objects), and only objects of at least
 * RESTORE_FOOTER_FIRST_MIN_BYTES (a smaller one arrives whole about as soon as its footer alone
 * would). */
#define RESTORE_FOOTER_FIRST_SHARE 10u
#define RESTORE_FOOTER_FIRST_MIN_BYTES (1u << 20)

/* The first record, as soon as a round trip and a section's transfer allow: before anything
 * else is planned, one piece gets extents of its own, fetched before all others (fetch_first;
 * the others start once these are complete and a reader has taken a record, or 20 ms later:
 * fetch_gate, restore_first_record): its segment's footer and its section, widened
 * to the object's start when within RESTORE_FIRST_EDGE_BYTES of it (no GET of a sliver) and
 * to the footer when within RESTORE_FIRST_PAIR_BYTES (one GET with it); or one GET from the section
 * to the object's end, when the budget allows one extra GET only; or, in a small object
 * (fetch.c fetches those whole), the object. A server may read a GET's whole range before it
 * sends a byte, so a first GET of a section to the footer of a large object held the record
 * back for all of it. The piece is the first of some handle of the first
 * RESTORE_FIRST_ENTRIES entries (the readers that open first) whose section the entry reads
 * whole and whose first GETs cost least: their bytes, and RESTORE_FIRST_PAIR_BYTES more for
 * two GETs at once (here one 150 KB ranged GET took 3.35 ms at p50, the slower of a 16 KB and
 * a 100 KB one sent together 4.1 ms: the server serves a pair slower than one), and
 * RESTORE_FIRST_ENTRY_BYTES more for each entry before it: readers open in about entry order,
 * and a job's threads start one after another (the 64th of a bench's readers started 5-15 ms
 * after the first, and a first record picked from its entry, one GET instead of two, waited for
 * it: w256, traced 2026-12-06); the GETs this adds beyond the object's one (0-3) stay within
 * the plan's extra GETs (extra_gets). The fetch thread parses that segment's footer as soon as
 * it is in (footer_arrived), while this thread still plans: the first reader finds the index
 * ready. */
#define RESTORE_FIRST_ENTRIES 64u
#define RESTORE_FIRST_EDGE_BYTES (64u << 10)
#define RESTORE_FIRST_PAIR_BYTES (256u << 10)
#define RESTORE_FIRST_ENTRY_BYTES (32u << 10)
#define RESTORE_SMALL_OBJECT_BYTES (512u << 10)

static size_t fetched_objects(const dstl_restore *p)
{
    size_t n = 0;
    for (size_t o = 0; o < p->nobj; o++) n += !p->objs[o].local;
    return n;
}

/* The sections entries read whole, grouped by object (v[at[o] .. at[o + 1]), each group sorted
 * by offset: what plan_whole_pieces hands the fetch set and extra_gets weighs, made once per
 * plan. cut[o] is set when some entry cuts one of o's sections. Two passes (count, then place)
 * and a sort of each object's few, if they are out of order: one sort of a job's 15,000
 * pieces, and another of each object's needs in fetch_commit, were a fifth of the plan's time. */
static int object_spans(dstl_restore *p)
{
    plan_spans *sp = &p->sp;
    if (!(sp->at = calloc(p->nobj + 2, sizeof *sp->at)) || !(sp->cut = calloc(p->nobj + 1, 1)))
        return err_fail(-ENOMEM, "dstl_restore_plan: out of memory");
    for (int pass = 0; pass < 2; pass++) {
        for (size_t j = 0; j < p->nhall; j++) {
            plan_handle_prefetch(p, j);
            const plan_handle *ph = &p->hall[j];
            const plan_entry *pe = &p->e[ph->entry];
            for (size_t q = 0; q < ph->wh->npieces; q++) {
                const wire_piece *pc = &ph->wh->pieces[q];
                int64_t o = ph->seg_obj[pc->seg];
                if (o < 0) continue;
                if (!reads_whole(pe, pc)) sp->cut[o] = 1;
                else if (pc->stored_len && pass)
                    sp->v[sp->at[o + 1]++] = (fetch_span){pc->offset, pc->offset + pc->stored_len};
                else if (pc->stored_len) sp->at[o + 2]++;
            }
        }
        if (pass) break;
        for (size_t o = 0; o < p->nobj; o++) sp->at[o + 2] += sp->at[o + 1];     /* at[o + 1]: o's start */
        if (!(sp->v = malloc((sp->at[p->nobj + 1] + 1) * sizeof *sp->v)))
            return err_fail(-ENOMEM, "dstl_restore_plan: out of memory");
    }
    for (size_t o = 0; o < p->nobj; o++) {     /* after placing, at[o + 1] is where o's end */
        size_t a = sp->at[o], b = sp->at[o + 1], k = a + 1;
        while (k < b && sp->v[k - 1].off <= sp->v[k].off) k++;
        if (k < b) fetch_sort_by_off(sp->v + a, b - a, sizeof *sp->v);
    }
    return 0;
}

static void spans_free(plan_spans *sp)
{
    free(sp->v);
    free(sp->at);
    free(sp->cut);
    *sp = (plan_spans){0};
}

/* The GETs the plan may add beyond one per object, to fetch footers and the first record
 * first: one in RESTORE_FOOTER_FIRST_SHARE objects, less the GETs beyond one that objects
 * needed only in part take (fetch.c: an object needed at FETCH_WHOLE_NUM / FETCH_WHOLE_DEN is
 * one GET, else one per run of needed sections FETCH_SECTION_GAP_BYTES or more apart). Objects
 * whose needs are all whole sections (and the footer) are told so (fetch_sections). */
static size_t extra_gets(dstl_restore *p)
{
    const plan_spans *sp = &p->sp;
    size_t budget = fetched_objects(p) / RESTORE_FOOTER_FIRST_SHARE, more = 0;
    for (size_t o = 0; o < p->nobj; o++) {
        if (p->objs[o].local || sp->cut[o]) continue;
        const wire_seg_ref *g = p->objs[o].g;
        size_t gaps = 0;
        uint64_t need = 0, end = sp->at[o] < sp->at[o + 1] ? sp->v[sp->at[o]].off : g->footer_offset;
        for (size_t j = sp->at[o]; j <= sp->at[o + 1]; j++) {      /* its sections, then the footer */
            fetch_span x = j < sp->at[o + 1] ? sp->v[j] : (fetch_span){g->footer_offset, g->object_len};
            if (x.off > end && j > sp->at[o]) gaps += x.off - end >= FETCH_SECTION_GAP_BYTES;
            uint64_t from = x.off > end ? x.off : end;
            need += x.end > from ? x.end - from : 0;
            if (x.end > end) end = x.end;
        }
        fetch_sections(p->fs, p->objs[o].fid);
        more += need * FETCH_WHOLE_DEN >= g->object_len * FETCH_WHOLE_NUM ? 0 : gaps;
    }
    return budget > more ? budget - more : 0;
}

typedef struct {
    int64_t o;
    const wire_handle *wh;
    const wire_seg_ref *g;
    const wire_piece *pc;
    uint64_t a, b;              /* the section's extent (widened) */
    size_t extra;               /* GETs beyond the object's one */
    uint64_t bytes;             /* in the first GETs */
    size_t entry;
} first_pick;

/* Whether the first piece of handle k of entry i can be the plan's first, its extra GETs
 * within budget: *c says how, the cheaper of two shapes — the section (widened) and the
 * footer, or one GET from the section to the object's end (one extra GET at most), which it
 * is when the section ends within RESTORE_FIRST_PAIR_BYTES of the footer. */
static int first_candidate(const dstl_restore *p, size_t i, size_t k, size_t budget, first_pick *c)
{
    const plan_handle *ph = &p->e[i].h[k];
    if (!ph->wh->npieces) return 0;
    const wire_piece *pc = &ph->wh->pieces[0];
    int64_t o = ph->seg_obj[pc->seg];
    const wire_seg_ref *g = &ph->wh->segs[pc->seg];
    if (o < 0 || !reads_whole(&p->e[i], pc) || !pc->stored_len || pc->offset + pc->stored_len > g->footer_offset)
        return 0;
    *c = (first_pick){.o = o, .wh = ph->wh, .g = g, .pc = pc, .a = 0, .b = g->object_len, .bytes = g->object_len,
                      .entry = i};
    if (g->object_len <= RESTORE_SMALL_OBJECT_BYTES) return 1;
    uint64_t a = pc->offset < RESTORE_FIRST_EDGE_BYTES ? 0 : pc->offset, end = pc->offset + pc->stored_len;
    uint64_t b = g->footer_offset - end < RESTORE_FIRST_PAIR_BYTES ? g->footer_offset : end;
    first_pick tail = *c;                   /* [a, the end): the section and the footer in one GET */
    tail.a = a;
    tail.extra = a > 0;
    tail.bytes = g->object_len - a;
    if (b < g->footer_offset) {             /* [a, b) and the footer; the rest around them */
        c->a = a;
        c->b = b;
        c->extra = (a > 0) + 2;
        c->bytes = b - a + g->object_len - g->footer_offset;
    }
    if (b == g->footer_offset || c->extra > budget || tail.bytes < c->bytes) *c = tail;
    return c->extra <= budget;
}

/* What c's first GETs cost, in bytes: a pair (the section and the footer apart) costs more,
 * and so does a later entry. */
static uint64_t first_cost(const first_pick *c)
{
    return c->bytes + (c->b < c->g->footer_offset ? RESTORE_FIRST_PAIR_BYTES : 0) +
           (uint64_t)c->entry * RESTORE_FIRST_ENTRY_BYTES;
}

static void footer_arrived(void *ctx, uint32_t fid, const uint8_t *bytes);

static int plan_first_record(dstl_restore *p)
{
    p->early_obj = -1;
    size_t budget = p->extra_budget = extra_gets(p);
    first_pick best = {.o = -1}, c;
    for (size_t i = 0; i < p->n && i < RESTORE_FIRST_ENTRIES; i++)
        for (size_t k = 0; k < p->e[i].nh; k++)
            if (first_candidate(p, i, k, budget, &c) && (best.o < 0 || first_cost(&c) < first_cost(&best))) best = c;
    if (best.o < 0) return 0;
    const wire_seg_ref *g = best.g;
    plan_obj *po = &p->objs[best.o];
    p->early_obj = best.o;
    p->early_extra = best.extra;
    po->early = po->footer_first = 1;
    p->early_off[0] = g->footer_offset;
    p->early_len[0] = g->object_len - g->footer_offset;
    p->early_off[1] = best.pc->offset;
    p->early_len[1] = best.pc->stored_len;
    fetch_gate(p->fs);          /* opened by the first record a reader takes (restore_first_record) */
    int rc = fetch_first(p->fs, po->fid, best.a, best.b - best.a);
    if (rc == 0 && best.b < g->object_len)
        rc = fetch_first(p->fs, po->fid, g->footer_offset, g->object_len - g->footer_offset);
    for (int r = 0; r < 2 && rc == 0; r++) rc = fetch_need(p->fs, po->fid, p->early_off[r], p->early_len[r]);
    if (rc == 0) rc = fetch_commit(p->fs, po->fid);
    /* its footer is parsed on the fetch thread the moment it is in (footer_arrived), while this
     * thread plans on: ready when the first reader opens */
    return rc == -EINVAL ? err_fail(DSTL_ECORRUPT, "dstl_restore_plan: handle of writer %s: piece 0 lies outside %s",
                                    best.wh->writer_id, po->uri) : rc;
}

static void mark_footers_first(dstl_restore *p)
{
    size_t budget = p->extra_budget, marked = p->early_obj >= 0 ? p->early_extra : 0;
    for (size_t i = 0; i < p->n && marked < budget; i++)
        for (size_t k = 0; k < p->e[i].nh && marked < budget; k++) {
            const plan_handle *ph = &p->e[i].h[k];
            int64_t o = ph->wh->npieces ? ph->need[0].obj : -1;
            if (o < 0 || p->objs[o].need_index || p->objs[o].footer_first ||
                p->objs[o].g->object_len < RESTORE_FOOTER_FIRST_MIN_BYTES)
                continue;
            p->objs[o].footer_first = 1;
            marked++;
        }
}

/* Fetches the footers of the objects some entry cuts (in parallel), then plans their pieces.
 * Those footers are fetched first, each a GET of its own beyond the extra-GET budget: the plan
 * waits for them before it returns, and queued behind the other objects' extents (a footer
 * is an object's last bytes) they held a rescaled task's plan for most of its fetch (256
 * handles cut at both ends: 220-300 ms, the readers idle). */
static int plan_indexed(dstl_restore *p)
{
    int rc = 0;
    mark_footers_first(p);
    for (size_t o = 0; o < p->nobj; o++)
        if (p->objs[o].need_index && !p->objs[o].local) p->objs[o].footer_first = 1;
    /* the objects whose footers go first are committed first: the fetch thread starts GETs
     * as commits come, and 8 whole objects committed before them would hold every slot */
    for (int pass = 0; pass < 2; pass++)
        for (size_t o = 0; o < p->nobj && rc == 0; o++) {
            const wire_seg_ref *g = p->objs[o].g;
            if (p->objs[o].local || p->objs[o].footer_first != (pass == 0)) continue;
            if (p->objs[o].need_index)
                rc = fetch_need(p->fs, p->objs[o].fid, g->footer_offset, g->object_len - g->footer_offset);
            if (p->objs[o].footer_first && !p->objs[o].early)
                rc = fetch_first(p->fs, p->objs[o].fid, g->footer_offset, g->object_len - g->footer_offset);
            if (rc == 0) rc = fetch_commit(p->fs, p->objs[o].fid);
        }
    for (size_t o = 0; o < p->nobj && rc == 0; o++) {
        if (!p->objs[o].need_index) continue;
        const wire_seg_ref *g = p->objs[o].g;
        size_t len = (size_t)(g->object_len - g->footer_offset);
        /* the readers' index too; the fetch thread may be parsing it already (footer_arrived) */
        const wire_index *ix = restore_index(p, (int64_t)o);
        rc = plan_cut_pieces(p, (int64_t)o, ix);
        if (rc == 0) rc = fetch_commit(p->fs, p->objs[o].fid);
        fetch_release(p->fs, p->objs[o].fid, g->footer_offset, len);     /* the planner's own use */
    }
    return rc;
}

/* ---- the plan ---- */

static int cache_reserve_hook(void *ctx, uint64_t bytes) { return cache_reserve(ctx, bytes); }
static void cache_unreserve_hook(void *ctx, uint64_t bytes) { cache_unreserve(ctx, bytes); }

/* A restore GET may be a whole object of many MB sharing the link with the plan's other GETs:
 * its attempt gets dstl.upload.timeout plus the largest object's transfer at this rate per
 * connection before a hedged twin starts (a hedge of a large GET that is merely sharing
 * bandwidth only doubles the bytes). 20 MB/s is a slow share of a 1 Gbit/s link among 8. */
#define FETCH_MIN_RATE_BYTES_PER_MS 20000u

static int start_fetching(dstl_restore *p)
{
    config_values cv = p->s->conf;
    cv.upload_connections = p->s->conf.recovery_connections;
    uint64_t largest = 0;
    for (size_t o = 0; o < p->nobj; o++)
        if (!p->objs[o].local && p->objs[o].g->object_len > largest) largest = p->objs[o].g->object_len;
    uint64_t t = cv.upload_timeout_ms + largest / FETCH_MIN_RATE_BYTES_PER_MS;
    cv.upload_timeout_ms = t > UINT32_MAX ? UINT32_MAX : t;
    s3_client *cli;
    int rc = remote_client_new(&cv, &cli);
    if (rc < 0) return rc;
    read_cache *c = cache_get(p->s);
    fetch_opts fo = {.cli = cli, .budget_bytes = p->s->conf.cache_max_size_bytes,
                     .ahead_bytes = p->s->conf.recovery_read_ahead_bytes,
                     .max_gets = p->s->conf.recovery_connections, .merge_gap_bytes = SEGREAD_MERGE_GAP_BYTES,
                     .gate_ms = p->s->seams.restore_gate_ms,
                     .reserve = c ? cache_reserve_hook : NULL, .unreserve = c ? cache_unreserve_hook : NULL,
                     .reserve_ctx = c};
    return fetch_new(&fo, &p->fs);
}

static void plan_free(dstl_restore *p)
{
    fetch_free(p->fs);
    for (size_t j = 0; j < p->nhall; j++) {
        dstl_handle_free(p->hall[j].ref);       /* the plan's reference (restore_map.c) */
        free(p->hall[j].seg_obj);
    }
    free(p->hall);
    for (size_t o = 0; o < p->nobj; o++) {
        free(p->objs[o].uri);
        free(p->objs[o].name);
        wire_index_free(p->objs[o].ix);
    }
    free(p->objs);
    free(p->e);
    free(p->needs);
    keyring_unref(p->keys);
    u64map_destroy(&p->byhash);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int dstl_restore_plan(dstl_storage *s, const dstl_restore_entry *entries, size_t n, dstl_restore **out)
{
    if (!s || !entries || !out || n == 0) return err_fail(-EINVAL, "dstl_restore_plan: NULL argument or no entry");
    dstl_restore *p = calloc(1, sizeof *p);
    if (!p) return err_fail(-ENOMEM, "dstl_restore_plan: out of memory");
    p->s = s;
    p->n = n;
    p->keys = key_source_get(&s->keys);
    pthread_mutex_init(&p->mu, NULL);
    u64map_init(&p->byhash);
    int rc = (p->e = calloc(n, sizeof *p->e)) ? restore_map_entries(p, entries)
                                              : err_fail(-ENOMEM, "dstl_restore_plan: out of memory");
    size_t fetched = 0;
    for (size_t o = 0; o < p->nobj; o++) fetched += !p->objs[o].local;
    if (rc == 0 && fetched) rc = start_fetching(p);
    p->early_obj = -1;
    if (rc == 0 && fetched) rc = restore_name_objects(p);
    for (size_t o = 0; rc == 0 && fetched && o < p->nobj; o++) {    /* parsed as they come */
        const wire_seg_ref *g = p->objs[o].g;
        if (!p->objs[o].local)
            rc = fetch_on_arrival(p->fs, p->objs[o].fid, g->footer_offset, g->object_len - g->footer_offset,
                                  footer_arrived, p);
    }
    if (rc == 0 && fetched) rc = object_spans(p);
    if (rc == 0 && fetched) rc = plan_first_record(p);
    /* the first record's GETs are on their way: the needs' memory is taken meanwhile */
    if (rc == 0) rc = restore_need_alloc(p);
    if (rc == 0 && fetched) rc = plan_whole_pieces(p);
    spans_free(&p->sp);
    if (rc == 0 && fetched) rc = plan_indexed(p);
    for (int r = 0; p->early_obj >= 0 && r < 2; r++)       /* the planner's own uses */
        fetch_release(p->fs, p->objs[p->early_obj].fid, p->early_off[r], p->early_len[r]);
    p->early_obj = -1;
    if (rc < 0) {
        plan_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

int dstl_restore_get_stats(dstl_restore *p, dstl_restore_stats *out)
{
    if (!p || !out) return err_fail(-EINVAL, "dstl_restore_get_stats: NULL argument");
    fetch_stats fs = {0};
    if (p->fs) fetch_get_stats(p->fs, &fs);
    pthread_mutex_lock(&p->mu);
    *out = (dstl_restore_stats){
        .objects = p->nobj, .object_bytes = p->object_bytes, .local_segments = p->local_segments,
        .objects_fetched = fs.objects_fetched, .get_requests = fs.requests + p->own_requests,
        .bytes_fetched = fs.bytes_fetched + p->own_bytes, .bytes_delivered = fs.bytes_delivered,
        .cache_hits = fs.hits, .direct_reads = p->direct, .held_bytes = fs.held_bytes,
        .held_peak_bytes = fs.held_peak_bytes, .memory_touched_bytes = fs.memory_touched_bytes,
        .footers_parsed = atomic_load_explicit(&p->footers_parsed, memory_order_relaxed)};
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int dstl_restore_close(dstl_restore *p)
{
    if (!p) return 0;
    pthread_mutex_lock(&p->mu);
    int busy = p->readers;
    pthread_mutex_unlock(&p->mu);
    if (busy) return err_fail(-EBUSY, "dstl_restore_close: %d reader(s) of the plan still open", busy);
    dstl_restore_stats st;
    dstl_restore_get_stats(p, &st);
    fetch_stats fs = {0};
    if (p->fs) fetch_get_stats(p->fs, &fs);
    reader_counters *rd = &p->s->rd;
    /* the readers' own GETs were counted by their accounting already; the plan's are added here */
    atomic_fetch_add_explicit(&rd->requests, fs.requests, memory_order_relaxed);
    atomic_fetch_add_explicit(&rd->retries, fs.retries, memory_order_relaxed);
    atomic_fetch_add_explicit(&rd->failures, fs.failures, memory_order_relaxed);
    atomic_fetch_add_explicit(&rd->bytes, fs.bytes_fetched, memory_order_relaxed);
    atomic_fetch_add_explicit(&rd->restores, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&rd->restore_objects_fetched, st.objects_fetched, memory_order_relaxed);
    atomic_fetch_add_explicit(&rd->restore_requests, st.get_requests, memory_order_relaxed);
    atomic_fetch_add_explicit(&rd->restore_bytes_fetched, st.bytes_fetched, memory_order_relaxed);
    atomic_fetch_add_explicit(&rd->restore_bytes_delivered, st.bytes_delivered, memory_order_relaxed);
    atomic_fetch_add_explicit(&rd->restore_cache_hits, st.cache_hits, memory_order_relaxed);
    plan_free(p);
    return 0;
}

/* ---- what readers ask ---- */

int restore_claim(dstl_restore *p, size_t entry, size_t handle, const wire_handle **wh, uint32_t *kg_first,
                  uint32_t *kg_last)
{
    if (entry >= p->n || handle >= p->e[entry].nh)
        return err_fail(-EINVAL, "dstl_restore_reader_open: no handle %zu in entry %zu of %zu", handle, entry, p->n);
    plan_handle *ph = &p->e[entry].h[handle];
    pthread_mutex_lock(&p->mu);
    int was = ph->open;
    if (!was) {
        ph->open = 1;
        p->readers++;
    }
    pthread_mutex_unlock(&p->mu);
    if (was) return err_fail(-EBUSY, "dstl_restore_reader_open: entry %zu handle %zu is open already", entry, handle);
    *wh = ph->wh;
    *kg_first = p->e[entry].kg_first;
    *kg_last = p->e[entry].kg_last;
    return 0;
}

dstl_storage *restore_storage(const dstl_restore *p) { return p->s; }

int64_t restore_object(const dstl_restore *p, size_t entry, size_t handle, uint32_t seg)
{
    return p->e[entry].h[handle].seg_obj[seg];
}

int restore_no_local_copy(const dstl_restore *p, size_t entry, size_t handle, uint32_t seg)
{
    int64_t o = p->e[entry].h[handle].seg_obj[seg];
    return o >= 0 && p->objs[o].no_local;
}

int restore_read(dstl_restore *p, int64_t obj, uint64_t off, size_t len, void *dst, char *msg, size_t cap)
{
    return fetch_read(p->fs, p->objs[obj].fid, off, len, dst, msg, cap);
}

int restore_borrow(dstl_restore *p, int64_t obj, uint64_t off, size_t len, const uint8_t **out, char *msg,
                   size_t cap)
{
    return fetch_borrow(p->fs, p->objs[obj].fid, off, len, out, msg, cap);
}

int restore_piece_ready(dstl_restore *p, size_t entry, size_t handle, size_t piece)
{
    const piece_need *nd = &p->e[entry].h[handle].need[piece];
    if (nd->obj < 0) return 1;
    const plan_obj *o = &p->objs[nd->obj];
    const wire_seg_ref *g = o->g;
    int ix = atomic_load_explicit(&o->ix_state, memory_order_acquire);
    /* the index: parsed (or failed) already, or its footer in (a parse, not a fetch, away) */
    if (ix != IX_PARSED && ix != IX_FAILED &&
        !fetch_poll(p->fs, o->fid, g->footer_offset, (size_t)(g->object_len - g->footer_offset)))
        return 0;
    for (int r = 0; r < nd->nr; r++)
        if (!fetch_poll(p->fs, o->fid, nd->off[r], (size_t)nd->len[r])) return 0;
    return 1;
}

int dstl_restore_wait(dstl_restore *p, uint64_t *seen, int timeout_ms)
{
    if (!p || !seen) return err_fail(-EINVAL, "dstl_restore_wait: NULL argument");
    return p->fs ? fetch_wait_progress(p->fs, seen, timeout_ms) : 0;
}

/* Waits while *st is val / wakes every waiter of st: a futex on the state itself, so the
 * readers waiting for an index (64 of them on the plan's first object) all become runnable
 * when it is published and need no lock to see it. A mutex held during the fetch made them
 * queue on it and wake one after another (a convoy of context switches on cores the S3 server
 * shares), and the first record waited at the end of that queue. */
static void ix_wait(_Atomic int *st, int val)
{
    (void)syscall(SYS_futex, (int *)st, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void ix_wake(_Atomic int *st)
{
    (void)syscall(SYS_futex, (int *)st, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Parses object o's footer and trailer (the bytes at its footer offset) into o->ix: IX_PARSED
 * or IX_FAILED. The claimer of the parse (ix_state IX_BUSY) only. */
static int index_parse(dstl_restore *p, plan_obj *o, const uint8_t *buf)
{
    const wire_seg_ref *g = o->g;
    char msg[1200];
    if (segread_index(g, p->keys ? keyring_wire(p->keys) : NULL, buf, g->footer_offset,
                      (size_t)(g->object_len - g->footer_offset), o->uri, &o->ix, msg, sizeof msg) < 0)
        return IX_FAILED;
    atomic_fetch_add_explicit(&p->footers_parsed, 1, memory_order_relaxed);
    return IX_PARSED;
}

/* Fetches (from the plan's bytes) and parses object o's index: IX_PARSED with o->ix set,
 * IX_FAILED, or IX_NONE when the plan does not hold the footer. */
static int index_load(dstl_restore *p, plan_obj *o)
{
    const wire_seg_ref *g = o->g;
    size_t len = (size_t)(g->object_len - g->footer_offset);
    uint8_t *buf = malloc(len ? len : 1);
    char msg[1200];
    int rc = buf ? fetch_read(p->fs, o->fid, g->footer_offset, len, buf, msg, sizeof msg) : 0;
    int st = rc == 1 ? index_parse(p, o, buf) : rc < 0 ? IX_FAILED : IX_NONE;
    free(buf);
    return st;
}

/* On the fetch thread, the moment object fid's footer is in and before any reader can see it
 * (fetch_on_arrival): its index, parsed once for all its readers, who find it ready instead of
 * sleeping on the parse of the first of them to get there. Never waits: a parse claimed
 * already is its claimer's. For the first record's object, with the bulk GETs held back by the
 * gate, the fetch thread has nothing else to do meanwhile; a 734 KB footer (1,024 writers)
 * takes 7 ms to parse in a cold process, which the first reader used to spend after the plan
 * returned. */
static void footer_arrived(void *ctx, uint32_t fid, const uint8_t *bytes)
{
    dstl_restore *p = ctx;
    size_t i = 0;
    while (i < p->nobj && (p->objs[i].local || p->objs[i].fid != fid)) i++;
    if (i == p->nobj) return;
    plan_obj *o = &p->objs[i];
    int st = IX_NONE;
    if (!atomic_compare_exchange_strong(&o->ix_state, &st, IX_BUSY)) return;
    atomic_store_explicit(&o->ix_state, index_parse(p, o, bytes), memory_order_release);
    ix_wake(&o->ix_state);
}

void restore_first_record(dstl_restore *p)
{
    if (!atomic_exchange_explicit(&p->first_out, 1, memory_order_relaxed) && p->fs) fetch_gate_open(p->fs);
}

const wire_index *restore_index(dstl_restore *p, int64_t obj)
{
    plan_obj *o = &p->objs[obj];
    for (;;) {
        int st = atomic_load_explicit(&o->ix_state, memory_order_acquire);
        if (st == IX_PARSED) return o->ix;
        if (st == IX_FAILED) return NULL;
        if (st == IX_BUSY) {
            ix_wait(&o->ix_state, IX_BUSY);
            continue;
        }
        if (!atomic_compare_exchange_strong(&o->ix_state, &st, IX_BUSY)) continue;
        int now = index_load(p, o);
        atomic_store_explicit(&o->ix_state, now, memory_order_release);
        ix_wake(&o->ix_state);
        if (now != IX_PARSED) return NULL;  /* IX_NONE: this reader reads the footer itself */
        return o->ix;
    }
}

/* Drops the needs of pieces [done, end) of ph. Under mu. */
static void release_upto(dstl_restore *p, plan_handle *ph, size_t end)
{
    for (; ph->done < end && ph->done < ph->wh->npieces; ph->done++) {
        const piece_need *nd = &ph->need[ph->done];
        for (int r = 0; nd->obj >= 0 && r < nd->nr; r++) fetch_release(p->fs, p->objs[nd->obj].fid, nd->off[r], nd->len[r]);
    }
}

void restore_pieces_done(dstl_restore *p, size_t entry, size_t handle, size_t piece_end)
{
    pthread_mutex_lock(&p->mu);
    release_upto(p, &p->e[entry].h[handle], piece_end);
    pthread_mutex_unlock(&p->mu);
}

void restore_reader_closed(dstl_restore *p, size_t entry, size_t handle, uint64_t requests, uint64_t bytes,
                           uint64_t direct_reads)
{
    pthread_mutex_lock(&p->mu);
    plan_handle *ph = &p->e[entry].h[handle];
    release_upto(p, ph, ph->wh->npieces);
    p->own_requests += requests;
    p->own_bytes += bytes;
    p->direct += direct_reads;
    p->readers--;
    pthread_mutex_unlock(&p->mu);
}
