/*
 * dstl/read/restore_int.h — a restore plan's own types, shared by its files only (restore.h
 * is what the readers see):
 *
 *   restore_map.c  the objects the entries' handles name, the plan's references to the handles
 *                  and their needs
 *   restore.c      what each reader needs of those objects, the fetches, the readers' side
 * Calls go restore.c -> restore_map.c only.
 */
#ifndef DSTL_RESTORE_INT_H
#define DSTL_RESTORE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dstl.h"
#include "dstl/keys.h"
#include "dstl/read/fetch.h"
#include "dstl/u64map.h"
#include "wire/wire.h"

enum { NEED_NONE = 0, NEED_DEFERRED = -1 };
/* A plan object's index (restore_index): not tried yet (or the plan did not hold the footer:
 * the next reader tries again), one reader fetching and parsing it, parsed, failed. */
enum { IX_NONE = 0, IX_BUSY = 2, IX_PARSED = 1, IX_FAILED = -1 };

typedef struct {
    int64_t obj;                /* the plan object (index into p->objs), -1 none */
    int nr;                     /* ranges held in off/len; NEED_DEFERRED until the index is in */
    uint64_t off[3], len[3];
} piece_need;

typedef struct {
    dstl_handle *ref;           /* the caller's handle, with a reference of the plan's own */
    const wire_handle *wh;      /* ref's (immutable, as every handle) */
    int64_t *seg_obj;           /* per segment: plan object, -1 when not fetched (until
                                 * restore_need_alloc, a negative value other than -1 is a
                                 * local copy) */
    piece_need *need;           /* per piece (from restore_need_alloc; in p->needs) */
    size_t done;                /* pieces below this are released */
    size_t entry;               /* the entry it belongs to */
    int open;
} plan_handle;

typedef struct {
    uint32_t kg_first, kg_last;
    size_t nh;
    plan_handle *h;             /* in p->hall */
} plan_entry;

typedef struct {
    char *uri;                  /* s3://bucket/key */
    const char *key;            /* inside uri */
    char bucket[64];
    char *name;                 /* the segment's name (its own copy) */
    const wire_seg_ref *g;      /* of the first handle naming it */
    uint32_t uri_id;            /* its number among the plan's remote URIs (restore_map_entries) */
    int64_t succ;               /* the object after it in the last handle naming it (-1: none) */
    int64_t next;               /* same hash */
    int local;                  /* a local copy of the right length: not fetched */
    int no_local;               /* the plan found no local copy (none, or a 0-byte name): its
                                 * readers take that look as theirs (restore_no_local_copy) */
    int need_index;
    uint32_t fid;               /* the fetch set's id */
    int footer_first;           /* its footer is fetched first (mark_footers_first) */
    int early;                  /* the first record's object (plan_first_record) */
    size_t first_entry, first_handle;   /* the first (entry, handle) naming it */
    size_t chain;               /* the most segments an entry naming it reads from it on, itself
                                 * included: its fetch order (restore_name_objects) */
    _Atomic int ix_state;       /* IX_*: ix is read only after IX_PARSED is seen (acquire) */
    wire_index *ix;             /* shared by the readers: read-only once parsed */
} plan_obj;

/* The sections the plan's entries read whole, per object (restore.c: object_spans). */
typedef struct {
    fetch_span *v;
    size_t *at;                 /* object o's: v[at[o] .. at[o + 1]) */
    unsigned char *cut;         /* some entry cuts one of o's sections */
} plan_spans;

struct dstl_restore {
    dstl_storage *s;
    pthread_mutex_t mu;
    fetch_set *fs;
    plan_entry *e;
    size_t n;
    plan_handle *hall;          /* every entry's handles, entry after entry: the plan's passes
                                 * over all of them walk one array (plan_handle_prefetch) */
    size_t nhall;
    plan_obj *objs;
    size_t nobj, cap_obj;
    u64map byhash;              /* hash of (remote_uri, name) -> first object index + 1 */
    int readers;
    keyring *keys;              /* the storage's key file at plan time (NULL: none) */
    uint64_t local_segments, object_bytes;
    uint64_t own_requests, own_bytes, direct;   /* readers' own GETs, added at their close */
    int64_t early_obj;          /* plan_first_record's object (-1: none) and the planner's */
    uint64_t early_off[2], early_len[2];        /* own uses of it, dropped when planning ends */
    size_t early_extra;         /* the GETs its first extents add */
    size_t extra_budget;        /* extra_gets */
    _Atomic int first_out;      /* a reader took its first record (restore_first_record) */
    _Atomic uint64_t footers_parsed;   /* indexes parsed for the plan (dstl_restore_stats) */
    plan_spans sp;              /* while planning */
    piece_need *needs;          /* every handle's need, one block (restore_need_alloc) */
};

/* Asks for the lines the plan's passes read of handle j + 1 (its pieces, segment references
 * and objects), and for handle j + 2's wire handle, whose fields lead there: a job's 1,024
 * handles are 1,024 allocations of the callers', each a few cache lines, and a pass over them
 * waited on each in turn. */
static inline void plan_handle_prefetch(const dstl_restore *p, size_t j)
{
    if (j + 4 < p->nhall) __builtin_prefetch(p->hall[j + 4].wh);
    if (j + 2 >= p->nhall) return;
    const plan_handle *n = &p->hall[j + 2];
    const char *pc = (const char *)n->wh->pieces, *sg = (const char *)n->wh->segs;
    size_t lp = n->wh->npieces * sizeof *n->wh->pieces, ls = n->wh->nsegs * sizeof *n->wh->segs;
    for (size_t at = 0; at < lp && at < 16 * 64; at += 64) __builtin_prefetch(pc + at);
    for (size_t at = 0; at < ls && at < 8 * 64; at += 64) __builtin_prefetch(sg + at);
    __builtin_prefetch(n->seg_obj);
}

/* Fills p->e from the entries (checking them), taking a reference to each handle (handles are
 * immutable: the plan reads the caller's, which may free its own reference), and makes the
 * plan object of each remote segment they name (p->objs, its local copy probed), filling
 * seg_obj. 0, or -EINVAL / -ENOMEM with the detail set. */
int restore_map_entries(dstl_restore *p, const dstl_restore_entry *entries);
/* Gives every handle its per-piece needs (one block for the plan, each need with no object
 * yet) and leaves only the fetched objects in seg_obj: what dstl_restore_plan does after the
 * first record's GETs are sent, since the block is fresh memory. 0 or -ENOMEM. */
int restore_need_alloc(dstl_restore *p);
/* Names the fetched objects to the fetch set, in the order readers consume them. */
int restore_name_objects(dstl_restore *p);

#endif
