/*
 * wire/segment_plan.c — a section's plan (segment_plan.h): how many records and framed bytes
 * each key group's run holds, where each run starts in the raw body.
 *
 * With a tally (the writer counted each record at dstl_append), planning is a walk over the
 * tally's key groups. Without one (a retry's section, decoded back from a failed segment) it
 * is the encoder's pass 1 (scan): it walks the record headers, validates them, finds the
 * key-group range, and counts each key group's records and framed bytes (the framing's
 * varints depend on the seq gaps) into a table grown as key groups appear; key groups too far
 * apart for it get a count pass of their own (plan_slots). The scan prefetches the records
 * ahead of it: it is bound by memory, not instructions.
 *
 * Key groups index the per-run counters directly when their range is small next to the
 * record count (the usual case: a task owns a contiguous range of key groups), then only
 * those with records keep a slot, found through a map over the range; otherwise the distinct
 * key groups are sorted and looked up by binary search, so the counters' memory is always
 * proportional to the records, never to the key-group values.
 *
 * Pure; any thread; the inputs are only read.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "wire/segment_plan.h"

/* Walks one section's records: `hdr` points at each record header in turn and `i` counts them
 * (the seq relative to the section). A macro, so that each pass compiles to one tight loop
 * (the passes are the encoder's whole cost). Only after scan_section has validated the spans. */
#define FOR_EACH_RECORD(s, hdr, i, ...)                                                      \
    do {                                                                                     \
        uint64_t i = 0;                                                                      \
        for (size_t sp_ = 0; sp_ < (s)->nspans; sp_++) {                                     \
            const uint8_t *hdr = (s)->spans[sp_].p;                                          \
            const uint8_t *end_ = hdr + (s)->spans[sp_].len;                                 \
            while (hdr < end_) {                                                             \
                __VA_ARGS__;                                                                 \
                hdr += wire_rec_size(wire_le32(hdr) & WIRE_REC_MAX_LEN);                     \
                i++;                                                                         \
            }                                                                                \
        }                                                                                    \
    } while (0)

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Adds record i (relative seq; payload len) to slot k: its framed size and the seq it follows. */
static inline void slot_count(kg_slot *k, uint64_t i, size_t len)
{
    k->bytes += wire_varint_len(i - k->expect) + wire_varint_len(len) + len;
    k->expect = i + 1;
    k->count++;
}

/* The scan counts into a table indexed by key group - lo, grown as key groups appear, while it
 * spans at most DENSE_SPAN_MIN slots or the dense rule's 4 x records + 64; past that (key
 * groups far apart) it stops counting and plan_slots counts in a pass of its own. */
#define DENSE_SPAN_MIN 4096u

typedef struct {
    kg_slot *tab;
    uint64_t lo, cap;
    kg_slot meta;
    int off;            /* 1: gave up counting */
} scan_count;

/* Makes c's table cover kg (nseen data records so far). 0, 1 when it gave up, -ENOMEM. */
static int cover(scan_count *c, uint32_t kg, uint64_t nseen)
{
    uint64_t nlo = c->cap && c->lo < kg ? c->lo : kg;
    uint64_t nhi = c->cap && c->lo + c->cap > (uint64_t)kg + 1 ? c->lo + c->cap : (uint64_t)kg + 1;
    uint64_t limit = 4 * nseen + 64 > DENSE_SPAN_MIN ? 4 * nseen + 64 : DENSE_SPAN_MIN;
    if (nhi - nlo > limit) {
        c->off = 1;
        return 1;
    }
    uint64_t cap = 2 * c->cap > nhi - nlo ? 2 * c->cap : nhi - nlo;
    if (cap < 8) cap = 8;   /* small: a commit-sized section holds one or two records */
    if (cap > limit) cap = limit;
    /* growing down leaves the headroom below, growing up above */
    uint64_t lo = kg < c->lo && c->cap ? (nhi > cap ? nhi - cap : 0) : nlo;
    if (lo > nlo) lo = nlo;
    kg_slot *t = calloc((size_t)cap, sizeof *t);
    if (!t) return -ENOMEM;
    if (c->cap) memcpy(t + (c->lo - lo), c->tab, (size_t)c->cap * sizeof *t);
    free(c->tab);
    c->tab = t;
    c->lo = lo;
    c->cap = cap;
    return 0;
}

/* Pass 1 (scan): validates the spans (whole records, count == nrec), finds the key-group
 * range, and counts each key group's records and framed bytes on the way (scan_count). */
static int check_section_in(const wire_section_in *s, size_t si, wire_err *err)
{
    if (!s->writer_id || !s->writer_id[0])
        return wire_fail(err, -EINVAL, "section %zu: empty writer id", si);
    if (s->nrec == 0 || s->seq_first + s->nrec < s->seq_first)
        return wire_fail(err, -EINVAL, "section %zu (%s): bad record count %llu at seq %llu", si,
                         s->writer_id, (unsigned long long)s->nrec,
                         (unsigned long long)s->seq_first);
    return 0;
}

static int scan_section(const wire_section_in *s, size_t si, sec_plan *pl, scan_count *c, wire_err *err)
{
    int rc = check_section_in(s, si, err);
    if (rc < 0) return rc;
    uint64_t n = 0;
    pl->kg_min = UINT32_MAX;
    pl->kg_max = 0;
    for (size_t sp = 0; sp < s->nspans; sp++) {
        const uint8_t *p = s->spans[sp].p, *end = p + s->spans[sp].len;
        while (p < end) {
            uint32_t lf = (size_t)(end - p) >= WIRE_REC_HDR ? wire_le32(p) : 0;
            size_t len = lf & WIRE_REC_MAX_LEN;
            __builtin_prefetch(p + 1024);
            if ((size_t)(end - p) < WIRE_REC_HDR || wire_rec_size(len) > (size_t)(end - p))
                return wire_fail(err, -EINVAL, "section %zu (%s) span %zu offset %zu: torn record",
                                 si, s->writer_id, sp, (size_t)(p - s->spans[sp].p));
            if (lf & WIRE_REC_META) {
                pl->nmeta++;
                slot_count(&c->meta, n, len);
            } else {
                uint32_t kg = wire_le32(p + 4);
                if (kg < pl->kg_min) pl->kg_min = kg;
                if (kg > pl->kg_max) pl->kg_max = kg;
                pl->ndata++;
                if (!c->off && (kg < c->lo || kg - c->lo >= c->cap || !c->cap) &&
                    (rc = cover(c, kg, pl->ndata)) < 0)
                    return rc;
                if (!c->off) slot_count(&c->tab[kg - c->lo], n, len);
            }
            pl->data_bytes += len;
            p += wire_rec_size(len);
            n++;
        }
    }
    if (n != s->nrec)
        return wire_fail(err, -EINVAL, "section %zu (%s): %llu records in spans, nrec %llu", si,
                         s->writer_id, (unsigned long long)n, (unsigned long long)s->nrec);
    return 0;
}

/* The fallback count pass, for key groups too far apart for the scan's table: framed size of
 * every run. */
static void count_section(const wire_section_in *s, sec_plan *pl)
{
    kg_slot *slots = pl->slots;
    FOR_EACH_RECORD(s, p, i, {
        uint32_t lf = wire_le32(p);
        slot_count(&slots[slot_of(pl, lf, wire_le32(p + 4))], i, lf & WIRE_REC_MAX_LEN);
    });
}

/* Assigns each run its offset in the raw body (data runs by key group, meta last). */
static void place_runs(sec_plan *pl)
{
    uint64_t off = 0;
    for (size_t j = 0; j < pl->nslots; j++) {
        kg_slot *k = &pl->slots[j];
        k->off = k->cursor = off;
        k->expect = 0;
        k->crc = UINT32_MAX;   /* until copied: sizes the footer (proto3 omits a 0) */
        off += k->bytes;
        pl->nruns += k->count != 0;
    }
    pl->raw_len = off;
}

/* Bytes of a block of n slots and a map of range entries after them (one allocation a section). */
static size_t slots_block(size_t n, size_t range) { return n * sizeof(kg_slot) + range * sizeof(uint32_t); }

/* Drops a dense table's empty data slots (keeping the meta slot last) and maps each key
 * group of the range to its slot: a section's slots are then as many as its runs (a writer's
 * persist at 1,024 writers has ~30-60 of 128 key groups), and they are walked at each step. */
static int compact_slots(sec_plan *pl)
{
    pl->range = pl->ndata ? (size_t)(pl->kg_max - pl->kg_min) + 1 : 0;
    pl->map = (uint32_t *)(pl->slots + pl->nslots);   /* plan_slots left it room: past every slot */
    size_t n = 0;
    for (size_t j = 0; j < pl->range; j++) {
        if (!pl->slots[j].count) {
            pl->map[j] = SLOT_NONE;
            continue;
        }
        pl->slots[n] = pl->slots[j];
        pl->slots[n].kg = pl->kg_min + (uint32_t)j;
        pl->map[j] = (uint32_t)n++;
    }
    pl->slots[n] = pl->slots[pl->nslots - 1];
    pl->slots[n].kg = 0;
    pl->nslots = n + 1;
    return 0;
}

/* Builds the slot table (data slots by key group — dense over [kg_min, kg_max] when that
 * range is small next to the record count, else the sorted distinct key groups — then the
 * meta slot) with each run's size, from the scan's counts or a count pass, and assigns run
 * offsets (data runs by key group, meta last). Frees c's table. */
static int plan_slots(const wire_section_in *s, sec_plan *pl, scan_count *c)
{
    uint64_t range = pl->ndata ? (uint64_t)pl->kg_max - pl->kg_min + 1 : 0;
    int sparse = range > 4 * pl->ndata + 64;
    if (sparse) {
        pl->uniq = malloc(pl->ndata * sizeof *pl->uniq);
        if (!pl->uniq) return -ENOMEM;
        size_t k = 0;
        FOR_EACH_RECORD(s, p, i, {
            (void)i;
            if (!(wire_le32(p) & WIRE_REC_META)) pl->uniq[k++] = wire_le32(p + 4);
        });
        qsort(pl->uniq, k, sizeof *pl->uniq, cmp_u32);
        size_t u = 0;
        for (size_t j = 0; j < k; j++)
            if (u == 0 || pl->uniq[u - 1] != pl->uniq[j]) pl->uniq[u++] = pl->uniq[j];
        pl->nuniq = u;
        range = u;
    }
    pl->nslots = (size_t)range + 1;
    pl->slots = calloc(1, slots_block(pl->nslots, sparse ? 0 : (size_t)range));
    if (!pl->slots) return -ENOMEM;
    kg_slot *slots = pl->slots;
    if (sparse || c->off) {
        count_section(s, pl);
    } else {
        if (range) memcpy(slots, c->tab + (pl->kg_min - c->lo), (size_t)range * sizeof *slots);
        slots[pl->nslots - 1] = c->meta;
    }
    free(c->tab);
    c->tab = NULL;
    if (sparse) {
        for (size_t j = 0; j < pl->nuniq; j++) slots[j].kg = pl->uniq[j];
    } else if (compact_slots(pl) < 0) {
        return -ENOMEM;
    }
    place_runs(pl);
    return 0;
}

/* A slab's block: its bytes follow the header. */
struct plan_slab_block {
    plan_slab_block *next;
    size_t used, cap;
    _Alignas(16) uint8_t data[];
};

enum { PLAN_SLAB_BLOCK = 64 << 10, PLAN_SLAB_KEEP = 32 };

/* Blocks of the standard size a segment's plans gave back, kept by the thread for its next
 * segment (at most PLAN_SLAB_KEEP: 2 MiB, what a 1,024-section segment's plans take). A
 * 1,024-writer segment takes ~30 of them; freed and taken again from malloc, each came back
 * as fresh pages (glibc trims its arena's top), their faults ~1.4 % of a w1024 load run's
 * samples. Freed at the thread's exit. */
static _Thread_local plan_slab_block *kept;
static _Thread_local unsigned nkept;
static _Thread_local int kept_marked;
static pthread_key_t kept_key;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;

/* The key's destructor, at the thread's exit (its value only marks that the thread keeps
 * blocks; the list is the thread's own variable, still there while destructors run). */
static void kept_free(void *unused)
{
    (void)unused;
    while (kept) {
        plan_slab_block *b = kept;
        kept = b->next;
        free(b);
    }
    nkept = 0;
}

static void kept_init(void) { (void)pthread_key_create(&kept_key, kept_free); }

/* n bytes from sl (16-byte aligned, not zeroed), or NULL when memory runs out. */
static void *slab_alloc(plan_slab *sl, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    plan_slab_block *b = sl->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > PLAN_SLAB_BLOCK ? n : PLAN_SLAB_BLOCK;
        if (cap == PLAN_SLAB_BLOCK && kept) {
            b = kept;
            kept = b->next;
            nkept--;
        } else if (!(b = malloc(sizeof *b + cap))) {
            return NULL;
        }
        b->used = 0;
        b->cap = cap;
        b->next = sl->head;
        sl->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

void plan_slab_free(plan_slab *sl)
{
    while (sl->head) {
        plan_slab_block *b = sl->head;
        sl->head = b->next;
        if (b->cap != PLAN_SLAB_BLOCK || nkept >= PLAN_SLAB_KEEP) {
            free(b);
            continue;
        }
        if (!kept_marked) {        /* the thread's first: its exit frees what it keeps */
            (void)pthread_once(&kept_once, kept_init);
            if (pthread_setspecific(kept_key, &kept) != 0) {
                free(b);
                continue;
            }
            kept_marked = 1;
        }
        b->next = kept;
        kept = b;
        nkept++;
    }
}

/* The plan from the writer's tally instead of a scan: a slot for each of the tally's non-empty
 * key groups, the map over their range, then the meta slot. What it cannot know yet (that the
 * records are whole and match it) the copy checks. */
static int plan_from_tally(const wire_section_in *s, size_t si, sec_plan *pl, plan_slab *sl, wire_err *err)
{
    int rc = check_section_in(s, si, err);
    if (rc < 0) return rc;
    const wire_section_tally *t = s->tally;
    if (t->nkg && (!t->kg || (uint64_t)t->kg_lo + t->nkg - 1 > UINT32_MAX))
        return wire_fail(err, -EINVAL, "section %zu (%s): bad tally of %u key groups from %u", si,
                         s->writer_id, t->nkg, t->kg_lo);
    uint32_t lo = 0, hi = 0;
    size_t nkg = 0;
    for (const char *p = (const char *)t->kg, *e = (const char *)(t->kg + t->nkg); p < e; p += 64)
        __builtin_prefetch(p);
    for (uint32_t j = 0; j < t->nkg; j++)
        if (t->kg[j].count) {
            if (!pl->ndata) lo = j;
            hi = j;
            pl->ndata += t->kg[j].count;
            nkg++;
        }
    pl->nmeta = t->meta.count;
    if (pl->ndata + pl->nmeta != s->nrec)
        return wire_fail(err, -EINVAL, "section %zu (%s): its tally counts %llu records, nrec %llu", si,
                         s->writer_id, (unsigned long long)(pl->ndata + pl->nmeta),
                         (unsigned long long)s->nrec);
    pl->kg_min = pl->ndata ? t->kg_lo + lo : UINT32_MAX;
    pl->kg_max = pl->ndata ? t->kg_lo + hi : 0;
    pl->data_bytes = t->payload_bytes;
    pl->range = pl->ndata ? (size_t)(hi - lo) + 1 : 0;
    pl->nslots = nkg + 1;
    size_t block = slots_block(pl->nslots, pl->range);
    pl->slots_slab = sl != NULL;
    /* every slot and map entry is written below: no zeroing first (this runs for every
     * section, ~370 a segment at 1,024 writers) */
    if (!(pl->slots = sl ? slab_alloc(sl, block) : malloc(block ? block : 1))) return -ENOMEM;
    pl->map = (uint32_t *)(pl->slots + pl->nslots);
    for (const char *p = (const char *)pl->slots, *e = p + block; p < e; p += 64) __builtin_prefetch(p, 1);
    uint64_t off = 0;
    for (size_t j = 0, n = 0; j < pl->range; j++) {
        const wire_kg_tally *kt = &t->kg[lo + j];
        pl->map[j] = kt->count ? (uint32_t)n : SLOT_NONE;
        if (!kt->count) continue;
        /* placed as place_runs does: runs in key-group order, CRC unknown until copied */
        pl->slots[n] = (kg_slot){.count = kt->count, .bytes = kt->bytes, .off = off, .cursor = off,
                                 .crc = UINT32_MAX, .kg = pl->kg_min + (uint32_t)j};
        off += kt->bytes;
        n++;
    }
    pl->slots[nkg] = (kg_slot){.count = t->meta.count, .bytes = t->meta.bytes, .off = off, .cursor = off,
                               .crc = UINT32_MAX};
    pl->nruns = nkg + (t->meta.count != 0);
    pl->raw_len = off + t->meta.bytes;
    pl->checked = 1;
    return 0;
}

int plan_section(const wire_section_in *s, size_t si, sec_plan *pl, plan_slab *sl, wire_err *err)
{
    if (s->tally) return plan_from_tally(s, si, pl, sl, err);
    scan_count c = {0};
    int rc = scan_section(s, si, pl, &c, err);
    if (rc == 0) rc = plan_slots(s, pl, &c);
    free(c.tab);
    return rc;
}

void plan_free(sec_plan *pl)
{
    free(pl->uniq);
    if (!pl->slots_slab) free(pl->slots);   /* and the map in its block */
}
