/*
 * wire/segment_plan.h — a section's plan for the encoder (segment_enc.c): one slot per
 * key-group run (its records, framed bytes, and later its place and CRC), from the writer's
 * tally or from a scan of the records (segment_plan.c). Private to wire/segment_*.c.
 */
#ifndef DSTL_WIRE_SEGMENT_PLAN_H
#define DSTL_WIRE_SEGMENT_PLAN_H

#include "wire/wire_int.h"

typedef struct {
    uint64_t count;     /* records */
    uint64_t bytes;     /* framed bytes */
    uint64_t expect;    /* seq (relative to the section) the next record's delta counts from */
    uint64_t off;       /* run start in the raw body */
    uint64_t cursor;    /* next write position in the raw body */
    uint64_t seen;      /* records copied (checked against count when the counts were given) */
    uint32_t crc;
    uint32_t kg;        /* its key group (0 for the meta slot) */
} kg_slot;

typedef struct {
    uint64_t ndata, nmeta, data_bytes, raw_len;
    uint32_t kg_min, kg_max;
    uint32_t *uniq;     /* sparse key groups: sorted distinct values, else NULL */
    size_t nuniq;
    kg_slot *slots;     /* data slots (key groups with records, ascending), then the meta slot */
    size_t nslots;
    uint32_t *map;      /* dense: the slot of key group kg_min + j, SLOT_NONE when it has no
                         * records (range entries, in the slots' block); NULL while counting,
                         * and when sparse */
    size_t range;       /* dense: kg_max - kg_min + 1 (0 without data records) */
    size_t nruns;
    int checked;        /* the counts came from a tally: the copy checks the records against them */
    int slots_slab;     /* slots came from a plan_slab: freed with it, not by plan_free */
} sec_plan;

/* Memory for one segment's plans, given back all at once (plan_slab_free): an encoder holds
 * every section's plan until the footer is written, and at 1,024 writers a segment has ~340
 * sections, each a calloc of ~2 KB (past glibc's per-thread cache) and a free. */
typedef struct plan_slab_block plan_slab_block;
typedef struct {
    plan_slab_block *head;
} plan_slab;
void plan_slab_free(plan_slab *sl);

#define SLOT_NONE UINT32_MAX

/* The slot of a record: dense plans index by key group - kg_min while counting (before
 * compact_slots), through the map after; sparse ones search the distinct key groups. */
static inline size_t slot_of(const sec_plan *pl, uint32_t lf, uint32_t kg)
{
    if (lf & WIRE_REC_META) return pl->nslots - 1;
    if (!pl->uniq) return pl->map ? pl->map[kg - pl->kg_min] : kg - pl->kg_min;
    size_t lo = 0, hi = pl->nuniq;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (pl->uniq[mid] <= kg) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* Plans section si (index for errors): from its tally when it has one (then pl->checked: the
 * copy checks each record against it; its slots then come from sl when not NULL), else by
 * scanning its records, which it validates.
 * Slots exist only for the key groups with records, data runs ascending, then the meta slot;
 * each run is placed (off, cursor) and pl->nruns, pl->raw_len set. 0, or -EINVAL naming what
 * is wrong, or -ENOMEM. plan_free releases what it allocated, also after a failure. */
int plan_section(const wire_section_in *s, size_t si, sec_plan *pl, plan_slab *sl, wire_err *err);
void plan_free(sec_plan *pl);

#endif
