/*
 * wire/segment_enc.c — builds a segment (FORMAT.md) from the writers' pending records.
 *
 * This runs for every persisted byte, so each section is built with a counting sort by key
 * group straight into the output buffer. The counts come from the writer (the section's
 * wire_section_tally, kept at dstl_append while each record is at hand, 2-3 ns a record),
 * so the pipeline's encode is one pass over the records; a section without one (a retry's,
 * decoded back from a failed segment) gets a count pass first (segment_plan.c):
 *   pass 1 (scan)  only without a tally: counts each key group's records and framed bytes;
 *   pass 2 (copy)  writes each record's framing at its run's cursor and copies its payload
 *                  (a plain memcpy: scattered over one cursor per key group), checking each
 *                  record against the tally when there is one, then checksums each run where
 *                  it now lies contiguous (wire_crc32c: the section's body, 1 MiB or so, is
 *                  still in L2). Checksumming each payload while copying it (once done here)
 *                  made a serial crc32 chain of ~13 words per 100-byte record and measured
 *                  15-20 % slower (bench_wire, interleaved). The section's CRC is joined from
 *                  the runs' CRCs (wire_crc32c_combine) instead of another pass.
 * Both passes are bound by memory, not instructions: the scan prefetches the records ahead
 * of it, and the copy the lines each run writes next (one cursor per key group is too many
 * streams for the hardware prefetcher). Compression (when asked) works from a scratch copy of
 * the raw body (one section's, the encoder's own). The footer is sized before the sections are
 * written, so the output is allocated once, at its final size (or the codec bound, plus room
 * for padding when asked: footer_pad), and written last, by footer_enc.c (not protobuf-c).
 * The same code builds a segment one section at a time (wire_seg_begin .. finish, the builder
 * below): each section's footer entry is sized as it is added, and a section that would not
 * leave room for the footer so far is refused whole.
 *
 * Pure; any thread; the inputs are only read.
 */
#include <errno.h>
#include <stdlib.h>

#include "wire/segment_plan.h"

/* A value below 2^14 as a varint, in the low bytes of a register: one byte below 0x80, else
 * two. Without branches (a run's records are often one key-group-count apart, which straddles
 * the 1-/2-byte boundary unpredictably). */
static inline uint32_t varint14(uint32_t v, unsigned *n)
{
    unsigned two = v >= 0x80;
    *n = 1 + two;
    return two ? (v & 0x7f) | 0x80 | (v >> 7) << 8 : v;
}

/* Pass 2 (copy): writes the raw body (pl->raw_len bytes): each record's framing at its run's
 * cursor, then its payload. The runs' cursors are scattered over the body (one per key
 * group), too many streams for the hardware prefetcher: each record asks for the lines its
 * run writes next, so the next record of that run finds them in cache. When the counts came
 * from a tally (checked), nothing has read the records yet: each is checked to be whole, in
 * the tally's key groups and within its run before it is written, and the runs are checked
 * full at the end; -1 when they are not. Inlined twice, so the scan's path has no checks. */
static inline __attribute__((always_inline)) int copy_records(const wire_section_in *s, sec_plan *pl,
                                                              uint8_t *body, const int checked)
{
    kg_slot *slots = pl->slots;
    const size_t meta = pl->nslots - 1, range = pl->range;
    uint64_t i = 0;
    for (size_t sp = 0; sp < s->nspans; sp++) {
        const uint8_t *p = s->spans[sp].p, *end = p + s->spans[sp].len;
        while (p < end) {
            if (checked && (size_t)(end - p) < WIRE_REC_HDR) return -1;
            uint32_t lf = wire_le32(p);
            size_t len = lf & WIRE_REC_MAX_LEN, rs = wire_rec_size(len);
            if (checked && rs > (size_t)(end - p)) return -1;
            kg_slot *k;
            if (checked) {
                size_t j = meta;
                if (!(lf & WIRE_REC_META)) {
                    size_t d = (size_t)(uint32_t)(wire_le32(p + 4) - pl->kg_min);
                    if (d >= range || (j = pl->map[d]) == SLOT_NONE) return -1;   /* not in the tally */
                }
                k = &slots[j];
            } else {
                k = &slots[slot_of(pl, lf, wire_le32(p + 4))];
            }
            uint8_t *h = body + k->cursor;
            __builtin_prefetch(p + 1024);
            __builtin_prefetch(h + 128, 1, 2);   /* into L2: the next record of this run is far off */
            __builtin_prefetch(h + 192, 1, 2);
            uint64_t gap = i - k->expect;
            size_t hn;
            uint32_t fr = 0;
            const int small = gap < 1u << 14 && len < 1u << 14;
            if (small) {
                /* The framing is built in a register and stored with one 4-byte move: built in
                 * memory byte by byte and moved as a word, it stalled on store forwarding
                 * (80 % of this loop's samples on Zen 4). */
                unsigned n1, n2;
                fr = varint14((uint32_t)gap, &n1);
                fr |= varint14((uint32_t)len, &n2) << (8 * n1);
                hn = n1 + n2;
            } else {
                hn = wire_varint_len(gap) + wire_varint_len(len);
            }
            if (checked && k->cursor + hn + len > k->off + k->bytes) return -1;
            if (!small) wire_varint_put(wire_varint_put(h, gap), len);
            else if (hn + len >= 4) memcpy(h, &fr, 4);   /* the payload overwrites what lies past it */
            else for (size_t b = 0; b < hn; b++) h[b] = (uint8_t)(fr >> (8 * b));
            memcpy(h + hn, p + WIRE_REC_HDR, len);
            k->expect = i + 1;
            k->cursor += hn + len;
            if (checked) k->seen++;
            p += rs;
            i++;
        }
    }
    if (checked) {
        if (i != s->nrec) return -1;
        for (size_t j = 0; j < pl->nslots; j++)
            if (slots[j].seen != slots[j].count || slots[j].cursor != slots[j].off + slots[j].bytes) return -1;
    }
    return 0;
}

/* Copies the section's records into body (copy_records), then checksums each run where it now
 * lies contiguous, in three-lane CRC32C (the body, 1 MiB or so, is still in L2); *crc is the
 * whole body's, joined from the runs'. -EINVAL when the records do not match their tally. */
static int copy_section(const wire_section_in *s, sec_plan *pl, uint8_t *body, uint32_t *crc)
{
    if (pl->checked ? copy_records(s, pl, body, 1) : copy_records(s, pl, body, 0)) return -EINVAL;
    kg_slot *slots = pl->slots;
    uint32_t c = 0;
    for (size_t j = 0; j < pl->nslots; j++) {
        slots[j].crc = wire_crc32c(0, body + slots[j].off, slots[j].bytes);
        if (slots[j].count) c = wire_crc32c_combine(c, slots[j].crc, slots[j].bytes);
    }
    *crc = c;
    return 0;
}

static void put_trailer(uint8_t *t, uint64_t footer_offset, uint32_t footer_len, uint32_t footer_crc,
                        uint16_t flags)
{
    wire_put16(t + 4, WIRE_VERSION);
    wire_put16(t + 6, flags);
    wire_put64(t + 8, footer_offset);
    wire_put32(t + 16, footer_len);
    wire_put32(t + 20, footer_crc);
    memcpy(t + 24, WIRE_TRL_MAGIC, 8);
    wire_put32(t, wire_crc32c(0, t + 4, WIRE_SEG_TRAILER_LEN - 4));
}

/* Everything the encoder allocates besides the output, freed in one place. */
typedef struct {
    sec_plan *plans;
    size_t nplans;
    plan_slab slab;            /* the plans' slots */
    fpb_section *fsecs;        /* the footer's sections (footer_enc.c) ... */
    fpb_run *fruns;            /* ... and one section's runs at a time (the most any has) */
    int sizing;                /* the footer is being sized: every tag, stored lengths at caps */
    int sealed;                /* the segment is sealed (t->seal is set only after sizing) */
    wire_kg_run *kruns;        /* sealing: each run's index entry and tag */
    uint8_t (*sec_tags)[16];   /* sealing: each compressed section's tag */
    wire_seal *seal;
} enc_tmp;

static void enc_tmp_free(enc_tmp *t)
{
    for (size_t i = 0; i < t->nplans; i++) {
        plan_free(&t->plans[i]);
    }
    free(t->plans);
    plan_slab_free(&t->slab);
    free(t->fsecs);
    free(t->fruns);
    free(t->kruns);
    free(t->sec_tags);
    seal_free(t->seal);
}

/* Fills the footer's entry for section si (fs), but for its runs (footer_runs). With sealing,
 * the section's tag is sec_tag, written when the section is compressed, or when sizing. */
static void footer_section(const wire_section_in *s, const sec_plan *pl, const wire_section_loc *loc,
                           int comp, int sizing, int sealed, fpb_section *fs, const uint8_t *sec_tag)
{
    *fs = (fpb_section){.writer_id = (const uint8_t *)s->writer_id,
                        .writer_id_len = s->writer_id ? strlen(s->writer_id) : 0,
                        .seq_first = loc->seq_first, .seq_end = loc->seq_end, .record_count = s->nrec,
                        .data_bytes = loc->data_bytes, .kg_first = loc->kg_first, .kg_last = loc->kg_last,
                        .offset = loc->offset, .stored_len = loc->stored_len, .raw_len = pl->raw_len,
                        .compression = (uint32_t)comp, .crc = loc->crc, .nruns = pl->nruns};
    if (sealed) {
        fs->encryption = FOOTER_ENC_AES_256_GCM;
        if (sizing || comp != WIRE_COMP_NONE) {
            fs->tag = sec_tag;
            fs->tag_len = 16;
        }
    }
}

/* Fills runs with the footer entries of section i's runs, from its plan: made when the footer
 * is sized and again when it is written, one section at a time, so they stay in cache (all of
 * a 1,024-writer segment's ~30,000 at once were 1.7 MB of fresh memory per segment). With
 * sealing, a run's tag is written when its section is stored uncompressed, or when sizing. */
static const fpb_run *footer_runs(const enc_tmp *t, size_t i, size_t run0)
{
    const sec_plan *pl = &t->plans[i];
    const int tags = t->sealed && (t->sizing || t->fsecs[i].compression == WIRE_COMP_NONE);
    const wire_kg_run *kr = tags ? t->kruns + run0 : NULL;
    size_t r = 0;
    for (size_t j = 0; j < pl->nslots; j++) {
        const kg_slot *k = &pl->slots[j];
        if (!k->count) continue;
        const int meta = j == pl->nslots - 1;
        t->fruns[r] = (fpb_run){.key_group = k->kg,
                                .is_meta = meta, .offset = k->off, .len = k->bytes, .count = k->count,
                                .crc = k->crc, .tag = tags ? kr[r].tag : NULL, .tag_len = tags ? 16 : 0};
        r++;
    }
    return t->fruns;
}

/* The footer's protobuf length: its head, then each section (t->fsecs, t->fruns). */
static size_t footer_len(const fpb_head *h, const enc_tmp *t, size_t nsecs)
{
    size_t n = footer_head_size(h);
    for (size_t i = 0, run0 = 0; i < nsecs; run0 += t->fsecs[i].nruns, i++)
        n += footer_section_size(&t->fsecs[i], footer_runs(t, i, run0), t->fsecs[i].nruns);
    return n;
}

/* Writes the footer's protobuf at p, with a padding field of pad zeros; returns its end, or
 * NULL when it would pass end (the sizing pass undercounted: a bug, refused, not overrun). */
static uint8_t *footer_put(uint8_t *p, const uint8_t *end, const fpb_head *h, const enc_tmp *t, size_t nsecs,
                           size_t pad)
{
    if (footer_head_size(h) > (size_t)(end - p)) return NULL;
    p = footer_put_head(p, h);
    for (size_t i = 0, run0 = 0; p && i < nsecs; run0 += t->fsecs[i].nruns, i++)
        p = footer_put_section(p, end, &t->fsecs[i], footer_runs(t, i, run0), t->fsecs[i].nruns);
    return p && footer_padding_size(pad) <= (size_t)(end - p) ? footer_put_padding(p, pad) : NULL;
}

/* Writes section si at dst (cap bytes); returns its stored length and sets *comp to the codec
 * used. scratch (raw_len bytes) holds the raw body when compressing. */
static uint64_t emit_section(const wire_seg_opts *o, const wire_section_in *s, sec_plan *pl,
                             uint8_t *scratch, uint8_t *dst, size_t cap, int *comp, uint32_t *crc, int *rc)
{
    *comp = WIRE_COMP_NONE;
    if (o->compression == WIRE_COMP_NONE) {
        *rc = copy_section(s, pl, dst, crc);
        return pl->raw_len;
    }
    uint32_t raw_crc;
    if ((*rc = copy_section(s, pl, scratch, &raw_crc)) < 0) return 0;
    size_t c = wire_codec_compress(o->compression, o->compression_level, scratch, pl->raw_len,
                                   dst, cap);
    /* Keep the compressed form only when it is smaller and a reader will accept its ratio. */
    if (c && c < pl->raw_len && wire_codec_ratio_ok(o->compression, c, pl->raw_len)) {
        *comp = o->compression;
        *crc = wire_crc32c(0, dst, c);
        return c;
    }
    memcpy(dst, scratch, pl->raw_len);
    *crc = raw_crc;
    return pl->raw_len;
}

/* Seals section idx in place (its stored bytes at `bytes`): each run when uncompressed, the
 * whole when compressed; kr receives the runs' index entries and tags. Returns the CRC32C of
 * the stored (sealed) bytes, the runs' joined without a second pass; 0 or -ENOMEM in *rc. */
static uint32_t seal_section(wire_seal *sl, const wire_section_in *s, const sec_plan *pl, uint32_t idx,
                             const wire_section_loc *loc, int comp, uint8_t *bytes, wire_kg_run *kr,
                             uint8_t sec_tag[16], int *rc)
{
    size_t r = 0;
    for (size_t j = 0; j < pl->nslots; j++) {
        const kg_slot *k = &pl->slots[j];
        if (!k->count) continue;
        int meta = j == pl->nslots - 1;
        kr[r++] = (wire_kg_run){.key_group = k->kg,
                                .is_meta = meta, .offset = k->off, .len = k->bytes, .count = k->count,
                                .crc = k->crc};
    }
    wire_section_info si = {.writer_id = s->writer_id, .seq_first = loc->seq_first, .seq_end = loc->seq_end,
                            .nrec = s->nrec, .data_bytes = loc->data_bytes, .kg_first = loc->kg_first,
                            .kg_last = loc->kg_last, .offset = loc->offset, .stored_len = loc->stored_len,
                            .raw_len = pl->raw_len, .compression = comp, .runs = kr, .nruns = pl->nruns,
                            .index = idx};
    if (comp != WIRE_COMP_NONE) {
        *rc = seal_unit(sl, 0, &si, SEAL_WHOLE, bytes, loc->stored_len, bytes, sec_tag);
        return wire_crc32c(0, bytes, loc->stored_len);
    }
    uint32_t crc = 0;
    *rc = 0;
    for (size_t i = 0; i < pl->nruns && *rc == 0; i++) {
        *rc = seal_unit(sl, 0, &si, (uint32_t)i, bytes + kr[i].offset, kr[i].len, bytes + kr[i].offset, kr[i].tag);
        crc = wire_crc32c_combine(crc, wire_crc32c(0, bytes + kr[i].offset, kr[i].len), kr[i].len);
    }
    return crc;
}

/* Where section i goes and how large it may get: exact when uncompressed, the codec's bound
 * (at least the raw length, for the fallback) when compressing. */
static uint64_t section_cap(const wire_seg_opts *o, const sec_plan *pl)
{
    if (o->compression == WIRE_COMP_NONE) return pl->raw_len;
    uint64_t b = wire_codec_bound(o->compression, pl->raw_len);
    return b > pl->raw_len ? b : pl->raw_len;
}

static wire_section_loc section_loc(const wire_section_in *s, const sec_plan *pl, uint64_t offset,
                                    uint64_t stored_len, uint32_t crc)
{
    return (wire_section_loc){.offset = offset, .stored_len = stored_len, .crc = crc,
                              .seq_first = s->seq_first, .seq_end = s->seq_first + s->nrec,
                              .data_bytes = pl->data_bytes,
                              .kg_first = pl->ndata ? pl->kg_min : UINT32_MAX,
                              .kg_last = pl->ndata ? pl->kg_max : 0};
}

/* The padding field's payload length that adds exactly e bytes to the footer (a tag byte, a
 * varint length, then the zeros; proto3 leaves out an empty field, so at least one zero):
 * 0 when no length does (e of 1, 2 or 130). */
static size_t pad_field_len(uint64_t e)
{
    if (e >= 3 && e <= 129) return (size_t)e - 2;
    if (e >= 131 && e <= 16386) return (size_t)e - 3;
    return 0;
}

/* The padding field's zeros (*n) for the length o asks for (wire_seg_opts.pad_*), given the
 * segment's length without it, len, and the most the buffer holds; returns the segment's
 * length with it. It never needs more than 2 x WIRE_PAD_ALIGN_MAX zeros. */
static uint64_t footer_pad(const wire_seg_opts *o, uint64_t len, uint64_t max, size_t *n)
{
    *n = 0;
    if (!o->pad_align || len > o->pad_limit) return len;
    uint64_t up = (len + o->pad_align - 1) & ~(uint64_t)(o->pad_align - 1);
    if (up == len) return len;
    uint64_t want[3] = {o->pad_to >= len && o->pad_to - len <= 2 * (uint64_t)o->pad_align ? o->pad_to : 0, up,
                        up + o->pad_align};
    for (size_t i = 0; i < 3; i++) {
        if (want[i] == len) return len;
        *n = want[i] && want[i] <= max ? pad_field_len(want[i] - len) : 0;
        if (*n) return want[i];
    }
    return len;
}

/* The option checks; sealing needs a valid key, a data key, and a run id the key block and
 * the associated data can hold. */
static int check_opts(const wire_seg_opts *o, int alloc_pair, wire_err *err)
{
    if (!o || !o->run_id || (alloc_pair && !o->alloc != !o->release))
        return wire_fail(err, -EINVAL, "segment encode: missing options, run id or allocator");
    if (o->compression < WIRE_COMP_NONE || o->compression > WIRE_COMP_ZSTD)
        return wire_fail(err, -EINVAL, "segment encode: unknown compression %d", o->compression);
    if (o->pad_align > WIRE_PAD_ALIGN_MAX || (o->pad_align & (o->pad_align - 1)))
        return wire_fail(err, -EINVAL, "segment encode: padding alignment %u is not a power of two up to %u",
                         o->pad_align, WIRE_PAD_ALIGN_MAX);
    if (!o->seal_key != !o->seal_data_key)
        return wire_fail(err, -EINVAL, "segment encode: sealing needs both a key and a data key");
    if (!o->seal_key) return 0;
    if (!wire_key_id_valid(o->seal_key->id, strlen(o->seal_key->id)) || !o->run_id[0] ||
        strlen(o->run_id) > SEAL_RUN_ID_MAX)
        return wire_fail(err, -EINVAL, "segment encode: bad key id or run id for sealing");
    return 0;
}

/* ---- the builder: a segment written one section at a time ----
 *
 * wire_segment_encode sizes the whole segment first and allocates it once; the builder writes
 * each section as it comes into a buffer its caller gave, checking that the section, the
 * footer entries so far and the trailer still fit, and writes the footer at the end. Both are
 * this one path: the encode is the builder over a buffer sized for exactly its sections. */
struct wire_seg_builder {
    wire_seg_opts o;            /* its strings and keys are the caller's, valid until the end */
    enc_tmp t;                  /* t.nplans: the sections added */
    size_t cap_secs, cap_fruns, cap_kruns;
    size_t nruns;               /* the runs of the sections added (the next one's first) */
    wire_segment_out r;         /* buf and cap (the caller's), secs */
    uint64_t pos;               /* where the next section goes */
    uint64_t fsize;             /* the footer's protobuf at most: its head, each section sized */
    uint8_t *scratch;           /* compression: one section's raw body */
    uint64_t scratch_cap;
    char *ids;                  /* the sections' writer ids, copied (a writer may go before the end) */
    size_t ids_len, ids_cap;
    size_t *id_at;              /* each section's id in ids */
    fpb_head head;
    size_t blen;                /* the seal block's length (0: plain) */
    uint8_t block[SEAL_FIXED_LEN + WIRE_KEY_ID_MAX + SEAL_RUN_ID_MAX];
};

static void builder_free(wire_seg_builder *b)
{
    if (!b) return;
    enc_tmp_free(&b->t);
    free(b->r.secs);
    free(b->scratch);
    free(b->ids);
    free(b->id_at);
    free(b);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

/* Room for n sections' entries. The footer entries point at their tags: moved with them. */
static int ensure_secs(wire_seg_builder *b, size_t n)
{
    if (n <= b->cap_secs) return 0;
    size_t c = b->cap_secs ? b->cap_secs : 16;
    while (c < n) c *= 2;
    sec_plan *pl = realloc(b->t.plans, c * sizeof *pl);
    if (pl) b->t.plans = pl;
    fpb_section *fs = realloc(b->t.fsecs, c * sizeof *fs);
    if (fs) b->t.fsecs = fs;
    wire_section_loc *loc = realloc(b->r.secs, c * sizeof *loc);
    if (loc) b->r.secs = loc;
    size_t *at = realloc(b->id_at, c * sizeof *at);
    if (at) b->id_at = at;
    int ok = pl && fs && loc && at;
    if (ok && b->t.sealed) {
        uint8_t(*tags)[16] = realloc(b->t.sec_tags, c * sizeof *tags);
        if (tags) {
            b->t.sec_tags = tags;
            for (size_t i = 0; i < b->t.nplans; i++)
                if (fs[i].tag) fs[i].tag = tags[i];
        }
        ok = tags != NULL;
    }
    if (!ok) return -ENOMEM;
    b->cap_secs = c;
    return 0;
}

/* Room for a section of nruns runs after run0 runs, and its writer id. */
static int ensure_runs(wire_seg_builder *b, size_t run0, size_t nruns, size_t id_len)
{
    if (grow((void **)&b->t.fruns, &b->cap_fruns, nruns ? nruns : 1, sizeof *b->t.fruns) < 0) return -ENOMEM;
    if (b->t.sealed && grow((void **)&b->t.kruns, &b->cap_kruns, run0 + nruns + 1, sizeof *b->t.kruns) < 0)
        return -ENOMEM;
    return grow((void **)&b->ids, &b->ids_cap, b->ids_len + id_len + 1, 1);
}

/* What a section must meet before it is sized or added (section i, planned as pl): a writer id
 * the seal can bind, a body the codec can bound. 0 or -EINVAL naming it. */
static int check_section(const wire_seg_builder *b, const wire_section_in *s, const sec_plan *pl, size_t i,
                         wire_err *err)
{
    size_t idl = s->writer_id ? strlen(s->writer_id) : 0;
    if (b->t.sealed && idl > SEAL_WRITER_ID_MAX)
        return wire_fail(err, -EINVAL, "section %zu: writer id longer than %u bytes", i, SEAL_WRITER_ID_MAX);
    if (b->o.compression != WIRE_COMP_NONE && wire_codec_bound(b->o.compression, pl->raw_len) == 0)
        return wire_fail(err, -EINVAL, "section %zu: %llu bytes too large for the codec", i,
                         (unsigned long long)pl->raw_len);
    return 0;
}

/* Section i's footer entry sized at offset with its stored length at its cap (the most its
 * varints take), its runs from run0; fills t.fsecs[i] for sizing (rewritten once written). */
static size_t size_section(wire_seg_builder *b, size_t i, const wire_section_in *s, const sec_plan *pl,
                           uint64_t offset, size_t run0)
{
    enc_tmp *t = &b->t;
    sec_plan saved = t->plans[i];
    t->plans[i] = *pl;          /* footer_runs reads the plan there */
    wire_section_loc loc = section_loc(s, pl, offset, section_cap(&b->o, pl), UINT32_MAX);
    footer_section(s, pl, &loc, b->o.compression, 1, t->sealed, &t->fsecs[i], t->sealed ? t->sec_tags[i] : NULL);
    t->sizing = 1;
    size_t n = footer_section_size(&t->fsecs[i], footer_runs(t, i, run0), pl->nruns);
    t->sizing = 0;
    t->plans[i] = saved;
    return n;
}

static wire_seg_builder *builder_new(const wire_seg_opts *o, size_t nsecs_hint)
{
    wire_seg_builder *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->o = *o;
    b->t.sealed = o->seal_key != NULL;
    b->r.release = o->release;
    b->r.release_ctx = o->alloc_ctx;
    b->head = (fpb_head){.format_version = WIRE_VERSION, .run_id = (const uint8_t *)o->run_id,
                         .run_id_len = strlen(o->run_id), .segment_no = o->segment_no, .created_ms = o->created_ms};
    b->blen = b->t.sealed ? seal_block_len(strlen(o->seal_key->id), strlen(o->run_id)) : 0;
    b->fsize = footer_head_size(&b->head);
    if (ensure_secs(b, nsecs_hint ? nsecs_hint : 1) < 0) {
        builder_free(b);
        return NULL;
    }
    return b;
}

/* Takes buf (cap bytes) for the segment: its header, and the seal's start. */
static int builder_attach(wire_seg_builder *b, uint8_t *buf, size_t cap, wire_err *err)
{
    if (cap < WIRE_SEG_HEADER_LEN + b->blen + b->fsize + WIRE_SEG_TRAILER_LEN)
        return wire_fail(err, -ENOSPC, "segment encode: a buffer of %zu bytes holds no section", cap);
    b->r.buf = buf;
    b->r.cap = cap;
    b->pos = WIRE_SEG_HEADER_LEN;
    wire_header_put(buf, b->o.segment_no, b->t.sealed ? WIRE_SEG_FLAG_SEALED : 0);
    if (b->t.sealed &&
        seal_start(b->o.seal_key, b->o.seal_data_key, buf, b->o.segment_no, b->o.run_id, b->block, &b->t.seal) < 0)
        return wire_fail(err, -EINVAL, "segment encode: sealing failed");
    return 0;
}

/* Adds section s, planned as pl (taken: freed when it is not added), whose footer entry takes
 * at most fs bytes (0: sized here, at the section's place). Writes it at the next place, then
 * seals it. 0; -ENOSPC when it does not fit beside the footer and trailer (nothing changed);
 * -EINVAL or -ENOMEM (the section is not added; those before it stay as they were). */
static int add_planned(wire_seg_builder *b, const wire_section_in *s, sec_plan *pl, size_t fs, wire_err *err)
{
    const wire_seg_opts *o = &b->o;
    size_t i = b->t.nplans, idl = s->writer_id ? strlen(s->writer_id) : 0;
    int rc = check_section(b, s, pl, i, err);
    if (rc == 0 && (ensure_secs(b, i + 1) < 0 || ensure_runs(b, b->nruns, pl->nruns, idl) < 0 ||
             (o->compression != WIRE_COMP_NONE &&
              grow((void **)&b->scratch, &b->scratch_cap, pl->raw_len ? pl->raw_len : 1, 1) < 0)))
        rc = wire_fail(err, -ENOMEM, "segment encode: out of memory");
    if (rc < 0) {
        plan_free(pl);
        return rc;
    }
    uint64_t c = section_cap(o, pl);
    if (!fs) fs = size_section(b, i, s, pl, b->pos, b->nruns);
    if (c > b->r.cap || b->pos + c + b->fsize + fs + b->blen + WIRE_SEG_TRAILER_LEN > b->r.cap) {
        plan_free(pl);
        return -ENOSPC;
    }
    int comp;
    uint32_t crc;
    uint64_t stored = emit_section(o, s, pl, b->scratch, b->r.buf + b->pos, c, &comp, &crc, &rc);
    if (rc < 0) {
        plan_free(pl);
        return wire_fail(err, rc, "section %zu (%s): its records do not match its tally (torn, outside its "
                         "key groups, or other counts)", i, s->writer_id);
    }
    b->t.plans[i] = *pl;
    wire_section_loc *loc = &b->r.secs[i];
    *loc = section_loc(s, pl, b->pos, stored, crc);
    wire_kg_run *kr = b->t.seal ? b->t.kruns + b->nruns : NULL;
    if (kr) {
        loc->crc = seal_section(b->t.seal, s, pl, (uint32_t)i, loc, comp, b->r.buf + b->pos, kr, b->t.sec_tags[i], &rc);
        if (rc < 0) {
            plan_free(&b->t.plans[i]);
            return wire_fail(err, rc, "segment encode: sealing section %zu failed", i);
        }
    }
    b->id_at[i] = b->ids_len;
    if (idl) memcpy(b->ids + b->ids_len, s->writer_id, idl);
    b->ids[b->ids_len + idl] = 0;
    b->ids_len += idl + 1;
    footer_section(s, pl, loc, comp, 0, kr != NULL, &b->t.fsecs[i], kr ? b->t.sec_tags[i] : NULL);
    b->pos += stored;
    b->fsize += fs;
    b->nruns += pl->nruns;
    b->t.nplans = i + 1;
    b->r.nsecs = i + 1;
    return 0;
}

/* Writes the footer (sealed, padded as asked) and the trailer after the sections; *out then
 * holds the segment in the builder's buffer. The builder is freed either way; on failure the
 * buffer is still the caller's. */
static int builder_finish(wire_seg_builder *b, wire_segment_out *out, wire_err *err)
{
    int rc = 0;
    enc_tmp *t = &b->t;
    size_t n = t->nplans;
    uint8_t *buf = b->r.buf;
    uint64_t pos = b->pos;
    for (size_t i = 0; i < n; i++)
        t->fsecs[i].writer_id = (const uint8_t *)b->ids + b->id_at[i];   /* the copies, not the callers' */
    size_t pad = 0;
    if (b->o.pad_align && pos <= b->o.pad_limit)
        footer_pad(&b->o, pos + b->blen + footer_len(&b->head, t, n) + WIRE_SEG_TRAILER_LEN, b->r.cap, &pad);
    uint8_t *fend = n ? footer_put(buf + pos + b->blen, buf + b->r.cap - WIRE_SEG_TRAILER_LEN, &b->head, t, n, pad)
                      : NULL;
    if (!n) rc = wire_fail(err, -EINVAL, "segment encode: no sections");
    else if (!fend)
        rc = wire_fail(err, -EINVAL, "segment encode: the footer outgrew the %llu bytes it was sized at (a bug)",
                       (unsigned long long)b->fsize);
    size_t pblen = fend ? (size_t)(fend - (buf + pos + b->blen)) : 0;
    if (rc == 0 && t->sealed) {
        if ((rc = seal_footer(t->seal, 0, b->block, b->blen, buf + pos + b->blen, pblen)) < 0)
            wire_fail(err, rc, "segment encode: sealing the footer failed");
        else memcpy(buf + pos, b->block, b->blen);
    }
    if (rc == 0) {
        wire_segment_out r = b->r;
        size_t flen = b->blen + pblen;
        r.footer_offset = pos;
        r.footer_len = (uint32_t)flen;
        r.footer_crc = wire_crc32c(0, buf + pos, flen);
        put_trailer(buf + pos + flen, pos, r.footer_len, r.footer_crc, t->sealed ? WIRE_SEG_FLAG_SEALED : 0);
        r.len = pos + flen + WIRE_SEG_TRAILER_LEN;
        *out = r;
        b->r.secs = NULL;       /* out's now */
    }
    builder_free(b);
    return rc;
}

int wire_seg_begin(const wire_seg_opts *o, uint8_t *buf, size_t cap, wire_seg_builder **out, wire_err *err)
{
    int rc = out && buf ? check_opts(o, 0, err) : wire_fail(err, -EINVAL, "segment builder: NULL buffer or output");
    if (rc < 0) return rc;
    wire_seg_builder *b = builder_new(o, 0);
    if (!b) return wire_fail(err, -ENOMEM, "segment encode: out of memory");
    if ((rc = builder_attach(b, buf, cap, err)) < 0) {
        builder_free(b);
        return rc;
    }
    *out = b;
    return 0;
}

int wire_seg_add(wire_seg_builder *b, const wire_section_in *s, wire_err *err)
{
    if (!b || !s) return wire_fail(err, -EINVAL, "segment builder: NULL argument");
    sec_plan pl = {0};
    int rc = plan_section(s, b->t.nplans, &pl, &b->t.slab, err);
    if (rc < 0) {
        plan_free(&pl);
        return rc;
    }
    return add_planned(b, s, &pl, 0, err);
}

size_t wire_seg_sections(const wire_seg_builder *b) { return b ? b->t.nplans : 0; }

uint64_t wire_seg_written(const wire_seg_builder *b) { return b ? b->pos : 0; }

uint64_t wire_seg_bound(const wire_seg_builder *b)
{
    return b ? b->pos + b->blen + b->fsize + WIRE_SEG_TRAILER_LEN : 0;
}

int wire_seg_finish(wire_seg_builder *b, wire_segment_out *out, wire_err *err)
{
    if (!b || !out) {
        builder_free(b);
        return wire_fail(err, -EINVAL, "segment builder: NULL argument");
    }
    return builder_finish(b, out, err);
}

void wire_seg_abort(wire_seg_builder *b) { builder_free(b); }

int wire_segment_encode(const wire_seg_opts *o, const wire_section_in *secs, size_t nsecs,
                        wire_segment_out *out, wire_err *err)
{
    int rc = !out ? wire_fail(err, -EINVAL, "segment encode: NULL output")
             : !secs || nsecs == 0 ? wire_fail(err, -EINVAL, "segment encode: missing options, sections, run id or allocator")
                                   : check_opts(o, 1, err);
    if (rc < 0) return rc;
    /* Plan every section, then size the footer with each section at its cap, so that the
     * output is allocated once and written in place. */
    sec_plan *plans = calloc(nsecs, sizeof *plans);
    size_t *fs = calloc(nsecs, sizeof *fs);
    wire_seg_builder *b = plans && fs ? builder_new(o, nsecs) : NULL;
    size_t owned = 0;           /* plans[owned..nsecs) are still this function's to free */
    uint8_t *buf = NULL;
    rc = b ? 0 : wire_fail(err, -ENOMEM, "segment encode: out of memory");
    uint64_t pos = WIRE_SEG_HEADER_LEN, runs = 0;
    for (size_t i = 0; rc == 0 && i < nsecs; i++) {
        if ((rc = plan_section(&secs[i], i, &plans[i], &b->t.slab, err)) < 0 ||
            (rc = check_section(b, &secs[i], &plans[i], i, err)) < 0)
            break;
        if (ensure_runs(b, runs, plans[i].nruns, 0) < 0) {
            rc = wire_fail(err, -ENOMEM, "segment encode: out of memory");
            break;
        }
        fs[i] = size_section(b, i, &secs[i], &plans[i], pos, runs);
        pos += section_cap(o, &plans[i]);
        b->fsize += fs[i];
        runs += plans[i].nruns;
    }
    if (rc == 0 && b->fsize + b->blen > UINT32_MAX)
        rc = wire_fail(err, -EINVAL, "segment footer of %llu bytes is too large",
                       (unsigned long long)(b->fsize + b->blen));
    /* room for padding only where it may apply (a large segment's buffer stays its size) */
    uint64_t cap = 0;
    if (rc == 0) {
        uint64_t pad_room = o->pad_align && pos <= o->pad_limit ? 2 * (uint64_t)o->pad_align : 0;
        cap = pos + b->fsize + b->blen + WIRE_SEG_TRAILER_LEN + pad_room;
        if (cap > SIZE_MAX / 2 || !(buf = o->alloc ? o->alloc(o->alloc_ctx, (size_t)cap) : malloc((size_t)cap)))
            rc = wire_fail(err, -ENOMEM, "segment encode: out of memory");
    }
    if (rc == 0) {
        b->fsize = footer_head_size(&b->head);    /* counted again as the sections go in */
        rc = builder_attach(b, buf, (size_t)cap, err);
    }
    /* add_planned takes each plan, also the one it fails on */
    while (rc == 0 && owned < nsecs) {
        size_t i = owned++;
        if ((rc = add_planned(b, &secs[i], &plans[i], fs[i], err)) == -ENOSPC)
            rc = wire_fail(err, -EINVAL, "segment encode: section %zu outgrew the size it was planned at (a bug)", i);
    }
    if (rc == 0) {
        rc = builder_finish(b, out, err);
        b = NULL;
    }
    for (size_t i = owned; i < nsecs && plans; i++) plan_free(&plans[i]);
    builder_free(b);
    if (rc < 0 && buf) {
        if (o->release) o->release(o->alloc_ctx, buf);
        else free(buf);
    }
    free(plans);
    free(fs);
    return rc;
}

void wire_segment_out_free(wire_segment_out *out)
{
    if (!out) return;
    if (out->buf) {
        if (out->release) out->release(out->release_ctx, out->buf);
        else free(out->buf);
    }
    free(out->secs);
    out->buf = NULL;
    out->secs = NULL;
    out->len = out->cap = out->nsecs = 0;
}
