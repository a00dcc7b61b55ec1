/*
 * dstl/read/restore_map.c — the plan objects a restore's handles name, and each handle's needs
 * (restore_int.h).
 *
 * A job's 1,024 handles name the same few dozen objects some 15,000 times. Mapping them to
 * objects is what a plan must do before its first GET can start, so it reads the caller's
 * handles in place, with mostly no hash per segment (a handle's next segment is tried as the
 * object that followed its previous one in an earlier handle). Handles are immutable, so the
 * plan keeps a reference to each instead of a copy. (It copied them once, one allocation per
 * handle: 2.6 MB of fresh memory for 1,024 handles, 8.3 ms in a cold process against 1.2 ms
 * to map them; traced 2026-12-06.) Only the needs are the plan's own: one block, allocated
 * after the first record's GETs are sent (restore_need_alloc).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstl/read/restore_int.h"
#include "dstl/err.h"
#include "dstl/handle.h"
#include "dstl/storage.h"
#include "dstl/local/segstore.h"
#include "dstl/remote/remote.h"

static uint64_t str_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The distinct remote URIs of a plan's handles (mostly one): a number and a hash each. */
typedef struct {
    const char **uri;
    uint64_t *hash;
    size_t n;
} uri_set;

static int64_t uri_number(uri_set *u, const char *uri)
{
    for (size_t i = u->n; i-- > 0;)
        if (strcmp(u->uri[i], uri) == 0) return (int64_t)i;
    const char **nu = realloc(u->uri, (u->n + 1) * sizeof *nu);
    if (nu) u->uri = nu;
    uint64_t *nh = nu ? realloc(u->hash, (u->n + 1) * sizeof *nh) : NULL;
    if (!nh) return -1;
    u->hash = nh;
    u->uri[u->n] = uri;
    u->hash[u->n] = str_hash(uri);
    return (int64_t)u->n++;
}

/* What mapping carries from one handle to the next. */
typedef struct {
    const char *parsed;         /* the remote_uri loc holds (handles mostly share one) */
    remote_loc loc;
    int has;                    /* it parsed */
    int64_t uid;                /* its number in us */
    int64_t first;              /* the object of the last handle's first segment */
    uri_set us;
} map_state;

/* Makes the plan object of segment g (in the handle the plan holds a reference to) of
 * (entry, handle), whose remote_uri is m's current one, and probes its local copy. -1 when
 * its key cannot be built, -2 out of memory. */
static int64_t object_new(dstl_restore *p, const map_state *m, uint64_t h, const wire_seg_ref *g, size_t entry,
                          size_t handle)
{
    char uri[1100];
    int k = snprintf(uri, sizeof uri, "s3://%s/", m->loc.bucket);
    if (remote_key(&m->loc, g->name, uri + k, sizeof uri - (size_t)k) < 0) return -1;
    if (p->nobj == p->cap_obj) {
        size_t cap = p->cap_obj ? 2 * p->cap_obj : 16;
        plan_obj *o = realloc(p->objs, cap * sizeof *o);
        if (!o) return -2;
        p->objs = o;
        p->cap_obj = cap;
    }
    plan_obj *o = &p->objs[p->nobj];
    *o = (plan_obj){.uri = strdup(uri), .name = strdup(g->name), .g = g, .uri_id = (uint32_t)m->uid,
                    .first_entry = entry, .first_handle = handle,
                    .next = (int64_t)(uintptr_t)u64map_get(&p->byhash, h) - 1, .succ = -1};
    if (!o->uri || !o->name || u64map_put(&p->byhash, h, (void *)(uintptr_t)(p->nobj + 1)) < 0) {
        free(o->uri);
        free(o->name);
        return -2;
    }
    o->key = o->uri + k;
    snprintf(o->bucket, sizeof o->bucket, "%s", m->loc.bucket);
    uint64_t size = 0;
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", dstl_last_error());
    int rc = segstore_size(p->s->local_dir, g->name, &size);
    o->local = rc == 0 && size == g->object_len;
    o->no_local = rc == -ENOENT || (rc == 0 && size == 0);     /* as a reader judges it (seg_source) */
    (void)err_fail(0, "%s", saved);         /* a missing local copy is no failure of the plan */
    p->local_segments += o->local;
    p->object_bytes += g->object_len;
    return (int64_t)p->nobj++;
}

/* The plan object of segment g: found by (remote_uri, segment name), which name one object,
 * guess (the object after the handle's previous segment's, last time) tried first; else made. */
static int64_t object_of(dstl_restore *p, const map_state *m, const wire_seg_ref *g, size_t entry, size_t handle,
                         int64_t guess)
{
    uint32_t uid = (uint32_t)m->uid;
    if (guess >= 0 && p->objs[guess].uri_id == uid && strcmp(p->objs[guess].name, g->name) == 0) return guess;
    uint64_t h = m->us.hash[uid] ^ (str_hash(g->name) * 0x9e3779b97f4a7c15ull);
    for (int64_t i = (int64_t)(uintptr_t)u64map_get(&p->byhash, h) - 1; i >= 0; i = p->objs[i].next)
        if (p->objs[i].uri_id == uid && strcmp(p->objs[i].name, g->name) == 0) return i;
    return object_new(p, m, h, g, entry, handle);
}

/* A segment's plan object while mapping (seg_obj before restore_need_alloc): o when fetched,
 * SEG_LOCAL(o) when its local copy is read instead (the object still orders the fetches:
 * entry_chains), -1 none. restore_need_alloc leaves o or -1. */
#define SEG_LOCAL(o) (-2 - (o))

/* Fills seg_obj of ph (the plan object of each segment, above) from the caller's handle src. */
static int map_handle(dstl_restore *p, map_state *m, plan_handle *ph, const wire_handle *src, size_t entry,
                      size_t handle)
{
    if (!m->parsed || strcmp(m->parsed, src->remote_uri) != 0) {
        m->parsed = src->remote_uri;
        m->has = *m->parsed && remote_parse_uri(m->parsed, "handle remote uri", &m->loc) == 0;
        if (m->has && (m->uid = uri_number(&m->us, m->parsed)) < 0) return -ENOMEM;
    }
    int64_t prev = -1;
    for (size_t g = 0; g < src->nsegs; g++) {
        int64_t o = m->has ? object_of(p, m, &src->segs[g], entry, handle, prev >= 0 ? p->objs[prev].succ : m->first)
                           : -1;
        if (o == -2) return -ENOMEM;
        if (prev >= 0 && o >= 0) p->objs[prev].succ = o;
        if (g == 0) m->first = o;
        prev = o;
        ph->seg_obj[g] = o >= 0 && p->objs[o].local ? SEG_LOCAL(o) : o;
    }
    return 0;
}

/* Raises each object's chain to the segments entry e reads from it on (a reader reads its
 * handles one after the other, each handle's segments in order). */
static void entry_chains(dstl_restore *p, const plan_entry *e)
{
    size_t left = 0;
    for (size_t k = 0; k < e->nh; k++) left += e->h[k].wh->nsegs;
    for (size_t k = 0; k < e->nh; k++)
        for (size_t g = 0; g < e->h[k].wh->nsegs; g++, left--) {
            int64_t o = e->h[k].seg_obj[g];
            if (o <= -2) o = SEG_LOCAL(o);
            if (o >= 0 && p->objs[o].chain < left) p->objs[o].chain = left;
        }
}

/* The caller's handle k of entry e, or NULL (one that is not there: the mapping reports it). */
static const dstl_handle *caller_handle(const dstl_restore_entry *e, size_t k)
{
    return k < e->nhandles && e->handles ? e->handles[k] : NULL;
}

/* Asks for the lines mapping reads of the caller's handles ahead of handle k of entry i, each a
 * step further along the pointers: the handle four ahead, its wire handle three ahead, the
 * segment references two ahead, their names one ahead (within the entry, or the next entries'
 * first handles: a job restoring task by task gives one handle an entry). The first look at
 * each of 1,024 handles, a few allocations of the caller's each, was most of the mapping. */
static void caller_prefetch(const dstl_restore *p, const dstl_restore_entry *entries, size_t i, size_t k)
{
    const dstl_handle *h[5] = {NULL};
    for (size_t d = 1; d <= 4; d++)
        h[d] = k + d < entries[i].nhandles ? caller_handle(&entries[i], k + d)
               : i + d < p->n              ? caller_handle(&entries[i + d], 0)
                                           : NULL;
    if (h[4]) __builtin_prefetch(h[4]);
    if (h[3]) __builtin_prefetch(h[3]->wh);
    if (h[2]) {
        const wire_handle *w = h[2]->wh;
        for (size_t at = 0; at < w->nsegs * sizeof *w->segs && at < 8 * 64; at += 64)
            __builtin_prefetch((const char *)w->segs + at);
    }
    if (h[1])
        for (size_t g = 0; g < h[1]->wh->nsegs && g < 16; g++) __builtin_prefetch(h[1]->wh->segs[g].name);
}

int restore_map_entries(dstl_restore *p, const dstl_restore_entry *entries)
{
    map_state m = {.uid = -1, .first = -1};
    int rc = 0;
    size_t total = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (entries[i].nhandles > SIZE_MAX / sizeof *p->hall - total - 1)
            return err_fail(-EINVAL, "dstl_restore_plan: entry %zu: %zu handles", i, entries[i].nhandles);
        total += entries[i].nhandles;
    }
    if (!(p->hall = calloc(total + 1, sizeof *p->hall))) return err_fail(-ENOMEM, "dstl_restore_plan: out of memory");
    for (size_t i = 0; i < p->n && rc == 0; i++) {
        const dstl_restore_entry *en = &entries[i];
        if (en->key_group_first > en->key_group_last || (en->nhandles && !en->handles)) {
            rc = err_fail(-EINVAL, "dstl_restore_plan: entry %zu: empty key group range %u-%u or NULL handles", i,
                          en->key_group_first, en->key_group_last);
            break;
        }
        p->e[i] = (plan_entry){en->key_group_first, en->key_group_last, en->nhandles, p->hall + p->nhall};
        for (size_t k = 0; rc == 0 && k < en->nhandles; k++) {
            if (!en->handles[k]) {
                rc = err_fail(-EINVAL, "dstl_restore_plan: entry %zu: handle %zu is NULL", i, k);
                break;
            }
            caller_prefetch(p, entries, i, k);
            plan_handle *ph = &p->hall[p->nhall++];
            ph->entry = i;
            ph->ref = handle_ref((dstl_handle *)en->handles[k]);   /* dropped by plan_free */
            const wire_handle *src = ph->wh = ph->ref->wh;
            if (!(ph->seg_obj = malloc((src->nsegs + 1) * sizeof *ph->seg_obj))) rc = -ENOMEM;
            else rc = map_handle(p, &m, ph, src, i, k);
        }
        if (rc == 0) entry_chains(p, &p->e[i]);
    }
    free(m.us.uri);
    free(m.us.hash);
    if (rc == -ENOMEM) return err_fail(rc, "dstl_restore_plan: out of memory");
    if (rc == 0) err_clear();
    return rc;
}

int restore_need_alloc(dstl_restore *p)
{
    size_t total = 0;
    for (size_t j = 0; j < p->nhall; j++) total += p->hall[j].wh->npieces;
    if (!(p->needs = malloc((total ? total : 1) * sizeof *p->needs)))
        return err_fail(-ENOMEM, "dstl_restore_plan: out of memory");
    piece_need *at = p->needs;
    for (size_t j = 0; j < p->nhall; j++) {
        plan_handle *ph = &p->hall[j];
        ph->need = at;
        for (size_t q = 0; q < ph->wh->npieces; q++) at[q] = (piece_need){.obj = -1};
        at += ph->wh->npieces;
        for (size_t g = 0; g < ph->wh->nsegs; g++)      /* a local copy is read, not fetched */
            if (ph->seg_obj[g] <= -2) ph->seg_obj[g] = -1;
    }
    return 0;
}

static int cmp_obj_order(const void *a, const void *b, void *ctx)
{
    const plan_obj *x = (const plan_obj *)ctx + *(const size_t *)a, *y = (const plan_obj *)ctx + *(const size_t *)b;
    if (x->chain != y->chain) return x->chain > y->chain ? -1 : 1;
    if (x->first_entry != y->first_entry) return x->first_entry < y->first_entry ? -1 : 1;
    if (x->first_handle != y->first_handle) return x->first_handle < y->first_handle ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The order: the objects that some entry's reader still has the longest way to go from
 * first (its chain: that entry's segments from the object on), then by the first entry and
 * handle naming them, then by name (= the order they were written, which is the order of a
 * handle's pieces). Readers read at once, each its pieces in order, so the longest chain is
 * the restore's critical path, as in any list schedule. Tasks whose handles share segments
 * (one segment holds every writer's sections) but start at staggered materializations then
 * get them in the order they were written: the task that starts earliest reads first, and an
 * object is fetched when the readers that need it are about to, not held for them. Name order
 * did that too; entry order instead held what entry 0 needed while the other tasks waited for
 * their first objects (w16: 270-290 MB held at most of a 354 MB restore, 150-170 MB in this
 * order). Tasks with objects of their own (a job's snapshots, each task's materialized at its
 * own time) have chains of about the same length, and are fetched in entry order: name order
 * fetched those rotated against the tasks', the first tasks' readers waited for objects
 * fetched last, and most of the replay ran after the fetch instead of beside it. */
int restore_name_objects(dstl_restore *p)
{
    size_t *ord = malloc((p->nobj ? p->nobj : 1) * sizeof *ord);
    if (!ord) return err_fail(-ENOMEM, "dstl_restore_plan: out of memory");
    for (size_t i = 0; i < p->nobj; i++) ord[i] = i;
    qsort_r(ord, p->nobj, sizeof *ord, cmp_obj_order, p->objs);
    int rc = 0;
    for (size_t i = 0; i < p->nobj && rc == 0; i++) {
        plan_obj *o = &p->objs[ord[i]];
        if (!o->local) rc = fetch_object(p->fs, o->bucket, o->key, o->g->object_len, (int64_t)i, &o->fid);
    }
    free(ord);
    return rc;
}
