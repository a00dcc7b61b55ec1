/*
 * tests/test_wire_segment.c — segment encode/decode (wire/FORMAT.md).
 *
 * Golden bytes (format changes are deliberate: DSTL_GOLDEN_UPDATE=1 rewrites the file and the
 * fuzz seeds, then fails so the run is never mistaken for a pass); random round trips against
 * a model; key-group and seq filtering; partial byte ranges; lz4/zstd; every bit flip and
 * every truncation of samples; forged footers and record bytes with valid CRCs; bad encoder
 * input; the allocator hook.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "payload.h"
#include "wire_golden.h"
#include "wire/dstl.pb-c.h"
#include "wire/wire.h"

/* ---- a model of what was written ---------------------------------------------------------- */

typedef struct {
    uint32_t kg;
    int meta;
    uint32_t len;
    const uint8_t *data;      /* into the pending buffer */
} mrec;

typedef struct {
    char id[32];
    uint64_t seq_first;
    size_t n;
    mrec *recs;
    uint8_t *pending;
    size_t pending_len;
    wire_span spans[3];
    size_t nspans;
} msec;

typedef struct {
    msec *secs;
    size_t nsecs;
    wire_section_in *in;
} mseg;

static uint64_t rng_state = 0x5eed;
static uint64_t rnd(uint64_t n) { return n ? t_rand(&rng_state) % n : 0; }

/* Adds a section from parallel arrays; payload bytes come from t_fill(seed), not payload.h:
 * sample_model's bytes are pinned by the golden file tests/data/wire_segment_v1.hex. */
static void msec_build(msec *s, const char *id, uint64_t seq_first, size_t n, const uint32_t *kg,
                       const int *meta, const uint32_t *len, uint64_t seed)
{
    snprintf(s->id, sizeof s->id, "%s", id);
    s->seq_first = seq_first;
    s->n = n;
    s->recs = calloc(n ? n : 1, sizeof *s->recs);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += wire_rec_size(len[i]);
    s->pending = malloc(total ? total : 1);
    s->pending_len = total;
    uint8_t *tmp = malloc(65536);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        t_fill(tmp, len[i], seed * 1000003u + i);
        s->recs[i] = (mrec){.kg = meta[i] ? 0 : kg[i], .meta = meta[i], .len = len[i],
                            .data = s->pending + off + WIRE_REC_HDR};
        off += wire_rec_put(s->pending + off, meta[i], kg[i], tmp, len[i]);
    }
    free(tmp);
    /* cut into up to three spans at record boundaries */
    size_t cut1 = n / 3, cut2 = 2 * n / 3, o1 = 0, o2 = 0;
    off = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == cut1) o1 = off;
        if (i == cut2) o2 = off;
        off += wire_rec_size(len[i]);
    }
    if (n < 3) o1 = o2 = 0;
    s->spans[0] = (wire_span){s->pending, o1};
    s->spans[1] = (wire_span){s->pending + o1, o2 - o1};
    s->spans[2] = (wire_span){s->pending + o2, total - o2};
    s->nspans = 3;
}

static void mseg_finish(mseg *m)
{
    m->in = calloc(m->nsecs, sizeof *m->in);
    for (size_t i = 0; i < m->nsecs; i++)
        m->in[i] = (wire_section_in){.writer_id = m->secs[i].id, .seq_first = m->secs[i].seq_first,
                                     .nrec = m->secs[i].n, .spans = m->secs[i].spans,
                                     .nspans = m->secs[i].nspans};
}

static void mseg_free(mseg *m)
{
    for (size_t i = 0; i < m->nsecs; i++) {
        free(m->secs[i].recs);
        free(m->secs[i].pending);
    }
    free(m->secs);
    free(m->in);
}

/* A one-section model of n records of len bytes each, all in key group 0 (data). */
static void uniform_model(mseg *m, const char *id, uint64_t seq_first, size_t n, uint32_t len)
{
    m->nsecs = 1;
    m->secs = calloc(1, sizeof *m->secs);
    uint32_t *kg = calloc(n, sizeof *kg), *lens = malloc(n * sizeof *lens);
    int *meta = calloc(n, sizeof *meta);
    for (size_t i = 0; i < n; i++) lens[i] = len;
    msec_build(&m->secs[0], id, seq_first, n, kg, meta, lens, 0);
    free(kg);
    free(lens);
    free(meta);
}

/* The small fixed segment of the golden file: two writers, data and meta records. */
static void sample_model(mseg *m)
{
    m->nsecs = 2;
    m->secs = calloc(2, sizeof *m->secs);
    uint32_t kg_a[] = {3, 1, 3, 0, 2}, len_a[] = {5, 0, 12, 4, 9};
    int meta_a[] = {0, 0, 0, 1, 0};
    msec_build(&m->secs[0], "writer-a", 10, 5, kg_a, meta_a, len_a, 1);
    uint32_t kg_b[] = {7, 0, 7}, len_b[] = {3, 6, 2};
    int meta_b[] = {0, 1, 0};
    msec_build(&m->secs[1], "writer-b", 0, 3, kg_b, meta_b, len_b, 2);
    mseg_finish(m);
}

/* A small segment whose sections compress (repetitive payloads), for the codec samples. */
static void compressible_model(mseg *m)
{
    m->nsecs = 2;
    m->secs = calloc(2, sizeof *m->secs);
    uint32_t kg[] = {4, 4, 9, 0, 4, 9}, len[] = {60, 60, 60, 30, 60, 60};
    int meta[] = {0, 0, 0, 1, 0, 0};
    msec_build(&m->secs[0], "writer-z", 1, 6, kg, meta, len, 1);
    msec_build(&m->secs[1], "writer-y", 0, 6, kg, meta, len, 2);
    for (size_t s = 0; s < 2; s++)
        for (size_t i = 0; i < 6; i++) memset((uint8_t *)m->secs[s].recs[i].data, 'a' + (int)i % 2, len[i]);
    mseg_finish(m);
}

static wire_seg_opts sample_opts(int compression)
{
    return (wire_seg_opts){.run_id = "run-1", .segment_no = 42, .created_ms = 1700000000000ull,
                           .compression = compression};
}

static void encode_ok(const mseg *m, const wire_seg_opts *o, wire_segment_out *out)
{
    wire_err err = {{0}};
    int rc = wire_segment_encode(o, m->in, m->nsecs, out, &err);
    cr_assert_eq(rc, 0, "encode: %d %s", rc, err.msg);
}

/* Iterates one section of an open segment and checks it against the model, filtered. */
static void check_section(const uint8_t *seg, const wire_section_info *si, const msec *s,
                          uint64_t from, uint64_t to, uint32_t kg_a, uint32_t kg_b, int partial)
{
    uint64_t base = 0, len = si->stored_len;
    if (partial) wire_section_range(si, kg_a, kg_b, &base, &len);
    wire_iter *it;
    wire_err err = {{0}};
    int rc = wire_iter_open(si, seg + si->offset + base, base, (size_t)len, from, to, kg_a, kg_b,
                            &it, &err);
    cr_assert_eq(rc, 0, "iter open %s: %s", s->id, err.msg);
    wire_record r;
    for (size_t i = 0; i < s->n; i++) {
        uint64_t seq = s->seq_first + i;
        const mrec *e = &s->recs[i];
        if (seq < from || seq >= to || (!e->meta && (e->kg < kg_a || e->kg > kg_b))) continue;
        rc = wire_iter_next(it, &r, &err);
        cr_assert_eq(rc, 1, "%s seq %llu: %d %s", s->id, (unsigned long long)seq, rc, err.msg);
        cr_assert_eq(r.seq, seq, "%s: seq %llu, want %llu", s->id, (unsigned long long)r.seq,
                     (unsigned long long)seq);
        cr_assert_eq(r.is_meta, e->meta);
        cr_assert_eq(r.key_group, e->kg);
        cr_assert_eq(r.len, e->len, "%s seq %llu len", s->id, (unsigned long long)seq);
        cr_assert(e->len == 0 || memcmp(r.data, e->data, e->len) == 0, "%s seq %llu bytes", s->id,
                  (unsigned long long)seq);
    }
    rc = wire_iter_next(it, &r, &err);
    cr_assert_eq(rc, 0, "%s: extra record %llu (%d)", s->id, (unsigned long long)r.seq, rc);
    wire_iter_free(it);
}

/* Opens an encoded segment and checks every section against the model and the encoder's locs. */
static void check_segment(const mseg *m, const wire_segment_out *out, const wire_seg_opts *o)
{
    wire_index *ix;
    wire_err err = {{0}};
    int rc = wire_segment_open(out->buf, out->len, &ix, &err);
    cr_assert_eq(rc, 0, "open: %s", err.msg);
    cr_assert_str_eq(wire_index_run_id(ix), o->run_id);
    cr_assert_eq(wire_index_segment_no(ix), o->segment_no);
    cr_assert_eq(wire_index_created_ms(ix), o->created_ms);
    cr_assert_eq(wire_index_nsections(ix), m->nsecs);
    cr_assert_null(wire_index_section(ix, m->nsecs));
    for (size_t i = 0; i < m->nsecs; i++) {
        const wire_section_info *si = wire_index_section(ix, i);
        const wire_section_loc *loc = &out->secs[i];
        const msec *s = &m->secs[i];
        cr_assert_str_eq(si->writer_id, s->id);
        cr_assert_eq(si->seq_first, s->seq_first);
        cr_assert_eq(si->seq_end, s->seq_first + s->n);
        cr_assert_eq(loc->seq_first, si->seq_first);
        cr_assert_eq(loc->seq_end, si->seq_end);
        cr_assert_eq(si->nrec, s->n);
        cr_assert_eq(loc->offset, si->offset);
        cr_assert_eq(loc->stored_len, si->stored_len);
        cr_assert_eq(loc->crc, si->crc);
        cr_assert_eq(loc->crc, wire_crc32c(0, out->buf + si->offset, si->stored_len));
        uint64_t data = 0;
        uint32_t kmin = UINT32_MAX, kmax = 0;
        for (size_t r = 0; r < s->n; r++) {
            data += s->recs[r].len;
            if (!s->recs[r].meta) {
                if (s->recs[r].kg < kmin) kmin = s->recs[r].kg;
                if (s->recs[r].kg > kmax) kmax = s->recs[r].kg;
            }
        }
        cr_assert_eq(si->data_bytes, data);
        cr_assert_eq(loc->data_bytes, data);
        cr_assert_eq(si->kg_first, kmin);
        cr_assert_eq(si->kg_last, kmax);
        cr_assert_eq(loc->kg_first, kmin);
        cr_assert_eq(loc->kg_last, kmax);
        check_section(out->buf, si, s, 0, UINT64_MAX, 0, UINT32_MAX, 0);
    }
    uint64_t foff;
    uint32_t flen, fcrc;
    rc = wire_trailer_parse(out->buf + out->len - WIRE_SEG_TRAILER_LEN, WIRE_SEG_TRAILER_LEN,
                            out->len, &foff, &flen, &fcrc, &err);
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_assert_eq(foff, out->footer_offset);
    cr_assert_eq(flen, out->footer_len);
    cr_assert_eq(fcrc, out->footer_crc);
    wire_index_free(ix);
}

/* ---- golden bytes ------------------------------------------------------------------------- */

static void write_seed(const char *target, const char *name, const uint8_t *b, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "tests/fuzz/corpus/%s/%s", target, name);
    cr_assert_eq(t_write_file(path, b, n), 0, "cannot write %s", path);
}

Test(wire_segment, matches_golden_bytes)
{
    mseg m = {0};
    sample_model(&m);
    wire_seg_opts o = sample_opts(WIRE_COMP_NONE);
    wire_segment_out out;
    encode_ok(&m, &o, &out);
    if (wg_update()) {
        wg_write_hex("wire_segment_v1.hex", "wire_segment_v1: tests/test_wire_segment.c sample_model()",
                     out.buf, out.len);
        write_seed("fuzz_wire_segment", "golden_none", out.buf, out.len);
        mseg z = {0};
        compressible_model(&z);
        for (int c = WIRE_COMP_LZ4; c <= WIRE_COMP_ZSTD; c++) {
            wire_segment_out zo;
            o.compression = c;
            encode_ok(&z, &o, &zo);
            write_seed("fuzz_wire_segment", c == WIRE_COMP_LZ4 ? "sample_lz4" : "sample_zstd", zo.buf, zo.len);
            wire_segment_out_free(&zo);
        }
        mseg_free(&z);
        cr_assert_fail("golden file rewritten; rerun without DSTL_GOLDEN_UPDATE");
    }
    wg_assert_golden("wire_segment_v1.hex", out.buf, out.len);
    size_t glen;
    uint8_t *g = wg_read_hex("wire_segment_v1.hex", &glen);
    /* and the golden bytes decode to the model */
    wire_segment_out gout = out;
    gout.buf = g;
    check_segment(&m, &gout, &o);
    free(g);
    wire_segment_out_free(&out);
    mseg_free(&m);
}

Test(wire_segment, golden_layout_is_as_documented)
{
    size_t n;
    uint8_t *g = wg_read_hex("wire_segment_v1.hex", &n);
    cr_assert(n > 64);
    cr_assert_eq(memcmp(g, "DSTLSEG\n", 8), 0);
    cr_assert_eq(g[8] | g[9] << 8, 1, "version");
    cr_assert_eq(memcmp(g + n - 8, "DSTLEND\n", 8), 0);
    uint64_t foff;
    memcpy(&foff, g + n - 24, 8);
    uint32_t flen;
    memcpy(&flen, g + n - 16, 4);
    cr_assert_eq(foff + flen + 32, n);
    /* first section starts right after the header: writer-a's first run is kg 1 (seq 11, 0 B) */
    cr_assert_eq(g[32], 1, "seq delta of the first record of kg 1's run");
    cr_assert_eq(g[33], 0, "its length");
    free(g);
}

/* ---- round trips --------------------------------------------------------------------------- */

enum { KG_DENSE, KG_SPARSE, KG_META_ONLY, KG_ONE };

static uint32_t rand_len(uint64_t max_len)
{
    uint64_t p = rnd(100);
    uint64_t cap = p < 90 ? 200 : p < 99 ? 4096 : 65536;
    if (cap > max_len) cap = max_len;
    return (uint32_t)rnd(cap + 1);
}

/* A random segment: nsecs writers, up to max_rec records each, about max_bytes in total. */
static void random_model(mseg *m, size_t nsecs, size_t max_rec, size_t max_bytes, int kg_mode)
{
    m->nsecs = nsecs;
    m->secs = calloc(nsecs, sizeof *m->secs);
    size_t budget = max_bytes / nsecs;
    uint32_t *kg = malloc(max_rec * sizeof *kg), *len = malloc(max_rec * sizeof *len);
    int *meta = malloc(max_rec * sizeof *meta);
    for (size_t s = 0; s < nsecs; s++) {
        size_t n = 1 + rnd(max_rec), bytes = 0, i;
        uint32_t kg_base = (uint32_t)rnd(1000);
        for (i = 0; i < n && bytes <= budget; i++) {
            meta[i] = kg_mode == KG_META_ONLY || rnd(50) == 0;
            kg[i] = kg_mode == KG_SPARSE ? (uint32_t)t_rand(&rng_state)
                  : kg_mode == KG_ONE    ? 77
                                         : kg_base + (uint32_t)rnd(128);
            len[i] = rand_len(budget - bytes + 1);
            bytes += len[i];
        }
        char id[32];
        snprintf(id, sizeof id, "w%zu", s);
        msec_build(&m->secs[s], id, t_rand(&rng_state) >> 20, i, kg, meta, len, t_rand(&rng_state));
    }
    free(kg);
    free(len);
    free(meta);
    mseg_finish(m);
}

static void round_trip(size_t nsecs, size_t max_rec, size_t max_bytes, int kg_mode, int comp)
{
    mseg m = {0};
    random_model(&m, nsecs, max_rec, max_bytes, kg_mode);
    wire_seg_opts o = {.run_id = "rt", .segment_no = rnd(1000), .created_ms = rnd(1u << 30),
                       .compression = comp};
    wire_segment_out out;
    encode_ok(&m, &o, &out);
    check_segment(&m, &out, &o);
    wire_segment_out_free(&out);
    mseg_free(&m);
}

/* One section of n records (key groups, meta flags and lengths given) encoded with every
 * compression up to max_comp, each checked record by record. */
static void round_trip_section(const char *id, uint64_t seq_first, size_t n, const uint32_t *kg, const int *meta,
                               const uint32_t *len, uint64_t seed, int max_comp)
{
    mseg m = {0};
    m.nsecs = 1;
    m.secs = calloc(1, sizeof *m.secs);
    msec_build(&m.secs[0], id, seq_first, n, kg, meta, len, seed);
    mseg_finish(&m);
    for (int comp = 0; comp <= max_comp; comp++) {
        wire_seg_opts o = sample_opts(comp);
        wire_segment_out out;
        encode_ok(&m, &o, &out);
        check_segment(&m, &out, &o);
        wire_segment_out_free(&out);
    }
    mseg_free(&m);
}

Test(wire_segment, round_trips_random, .timeout = 60)
{
    rng_state = 1;
    int modes[] = {KG_DENSE, KG_SPARSE, KG_META_ONLY, KG_ONE};
    for (int c = 0; c < 24; c++)
        round_trip(1 + rnd(16), 1 + rnd(2000), 1u << 20, modes[c % 4], c % 3);
}

Test(wire_segment, round_trips_extremes, .timeout = 60)
{
    rng_state = 2;
    round_trip(256, 8, 1u << 20, KG_DENSE, WIRE_COMP_NONE);      /* 256 writers */
    round_trip(256, 4, 1u << 19, KG_SPARSE, WIRE_COMP_LZ4);
    size_t n = 10000;                                             /* 10,000 records in one section */
    uint32_t *kg = malloc(n * 4), *len = malloc(n * 4);
    int *meta = malloc(n * sizeof *meta);
    for (size_t i = 0; i < n; i++) {
        kg[i] = (uint32_t)rnd(300);
        meta[i] = i % 97 == 0;
        len[i] = (uint32_t)rnd(120);
    }
    len[17] = 65536;                                              /* the largest payload */
    len[18] = 0;
    round_trip_section("big", UINT64_MAX - 20000, n, kg, meta, len, 9, WIRE_COMP_ZSTD);
    free(kg);
    free(len);
    free(meta);
}

/* The scan counts into a table it grows as key groups appear (segment_enc.c): downwards,
 * upwards, from both ends, and past its span limit while few records are in (the count pass
 * then takes over, though the range ends dense) — each must give the layout the decoder
 * checks, run by run. */
Test(wire_segment, round_trips_every_way_the_scan_table_grows, .timeout = 60)
{
    rng_state = 3;
    enum { N = 6000 };
    uint32_t *kg = malloc(N * 4), *len = malloc(N * 4);
    int *meta = malloc(N * sizeof *meta);
    for (int pattern = 0; pattern < 5; pattern++) {
        for (size_t i = 0; i < N; i++) {
            kg[i] = pattern == 0 ? (uint32_t)(N - i)                       /* descending */
                  : pattern == 1 ? (uint32_t)(100000 + i)                  /* ascending */
                  : pattern == 2 ? (uint32_t)(i % 2 ? 3000 - i / 2 : 3000 + i / 2) /* both ends */
                  : pattern == 3 ? (uint32_t)(i == 0 ? 0 : i == 1 ? 20000 : rnd(20001)) /* far first */
                                 : (uint32_t)(i < 100 ? i * 90 : 9000 - i);  /* wide, then filled */
            meta[i] = rnd(40) == 0;
            len[i] = (uint32_t)rnd(150);
        }
        round_trip_section("grow", 1000, N, kg, meta, len, (uint64_t)pattern, WIRE_COMP_LZ4);
    }
    free(kg);
    free(len);
    free(meta);
}

Test(wire_segment, lz4_and_zstd_compress_and_round_trip)
{
    mseg m = {0};
    uniform_model(&m, "zeros", 5, 2000, 100);
    for (size_t i = 0; i < 2000; i++) memset((uint8_t *)m.secs[0].recs[i].data, 'z', 100);
    mseg_finish(&m);
    for (int comp = WIRE_COMP_LZ4; comp <= WIRE_COMP_ZSTD; comp++) {
        wire_seg_opts o = sample_opts(comp);
        wire_segment_out out;
        encode_ok(&m, &o, &out);
        wire_index *ix;
        cr_assert_eq(wire_segment_open(out.buf, out.len, &ix, NULL), 0);
        const wire_section_info *si = wire_index_section(ix, 0);
        cr_assert_eq(si->compression, comp, "compressible data is stored compressed");
        cr_assert_lt(si->stored_len * 10, si->raw_len, "and much smaller");
        uint64_t off, l;
        wire_section_range(si, 0, 0, &off, &l);
        cr_assert(off == 0 && l == si->stored_len, "a compressed section is read whole");
        check_section(out.buf, si, &m.secs[0], 100, 1500, 0, 0, 0);
        wire_index_free(ix);
        check_segment(&m, &out, &o);
        wire_segment_out_free(&out);
    }
    mseg_free(&m);
}

Test(wire_segment, incompressible_section_is_stored_raw)
{
    mseg m = {0};
    uniform_model(&m, "random", 9, 4, 4000);
    for (size_t i = 0; i < 4; i++)   /* full-entropy payloads */
        payload_fill(PAYLOAD_RANDOM, 3, i, (uint8_t *)m.secs[0].recs[i].data, 4000);
    mseg_finish(&m);
    wire_seg_opts o = sample_opts(WIRE_COMP_ZSTD);
    wire_segment_out out;
    encode_ok(&m, &o, &out);
    wire_index *ix;
    cr_assert_eq(wire_segment_open(out.buf, out.len, &ix, NULL), 0);
    const wire_section_info *si = wire_index_section(ix, 0);
    cr_assert_eq(si->compression, WIRE_COMP_NONE, "stored %llu raw %llu",
                 (unsigned long long)si->stored_len, (unsigned long long)si->raw_len);
    wire_index_free(ix);
    check_segment(&m, &out, &o);
    wire_segment_out_free(&out);
    mseg_free(&m);
}

/* ---- filtering and partial ranges ---------------------------------------------------------- */

Test(wire_segment, filters_key_groups_and_seq_ranges, .timeout = 60)
{
    rng_state = 4;
    for (int c = 0; c < 6; c++) {
        mseg m = {0};
        random_model(&m, 3, 3000, 1u << 19, c % 2 ? KG_SPARSE : KG_DENSE);
        wire_seg_opts o = sample_opts(c % 3);
        wire_segment_out out;
        encode_ok(&m, &o, &out);
        wire_index *ix;
        cr_assert_eq(wire_segment_open(out.buf, out.len, &ix, NULL), 0);
        for (size_t i = 0; i < m.nsecs; i++) {
            const wire_section_info *si = wire_index_section(ix, i);
            const msec *s = &m.secs[i];
            for (int q = 0; q < 12; q++) {
                uint64_t a = s->seq_first + rnd(s->n + 2), b = a + rnd(s->n + 2);
                uint32_t ka = si->kg_first + (uint32_t)rnd(64), kb = ka + (uint32_t)rnd(64);
                if (c % 2) {   /* sparse: pick from the actual key groups */
                    ka = s->recs[rnd(s->n)].kg;
                    kb = q % 2 ? ka : UINT32_MAX;
                }
                if (q == 0) ka = 1, kb = 0;   /* meta records only */
                check_section(out.buf, si, s, a, b, ka, kb, 0);
                if (si->compression == WIRE_COMP_NONE) check_section(out.buf, si, s, a, b, ka, kb, 1);
            }
        }
        wire_index_free(ix);
        wire_segment_out_free(&out);
        mseg_free(&m);
    }
}

/* Fetches only the two ranges of [ka, kb] into a buffer laid out as their covering range
 * (the gap poisoned, as never fetched), iterates it and checks every record against the model.
 * Returns the buffer (the caller frees it) and its covering range. */
static uint8_t *iterate_two_ranges(const mseg *m, const wire_segment_out *out, const wire_section_info *si,
                                   uint32_t ka, uint32_t kb, uint64_t *coff_out, uint64_t *clen_out,
                                   uint64_t off[2], uint64_t len[2])
{
    uint64_t coff, clen;
    cr_assert_eq(wire_section_ranges(si, ka, kb, off, len), 2, "selected data runs and the meta run");
    wire_section_range(si, ka, kb, &coff, &clen);
    cr_assert_eq(coff, off[0]);
    cr_assert_eq(coff + clen, off[1] + len[1]);
    uint8_t *buf = malloc(clen);
    memset(buf, 0xAA, clen);
    memcpy(buf, out->buf + si->offset + off[0], len[0]);
    memcpy(buf + (off[1] - coff), out->buf + si->offset + off[1], len[1]);
    wire_iter *it;
    wire_err err = {{0}};
    cr_assert_eq(wire_iter_open(si, buf, coff, clen, 0, UINT64_MAX, ka, kb, &it, &err), 0, "%s", err.msg);
    wire_record r;
    size_t count = 0, want = 0;
    const msec *s = &m->secs[0];
    while (wire_iter_next(it, &r, &err) == 1) {
        const mrec *e = &s->recs[r.seq - s->seq_first];
        cr_assert(e->meta || (e->kg >= ka && e->kg <= kb));
        cr_assert_eq(r.len, e->len);
        cr_assert(r.len == 0 || memcmp(r.data, e->data, r.len) == 0);
        count++;
    }
    for (size_t i = 0; i < s->n; i++) want += s->recs[i].meta || (s->recs[i].kg >= ka && s->recs[i].kg <= kb);
    cr_assert_eq(count, want);
    wire_iter_free(it);
    *coff_out = coff;
    *clen_out = clen;
    return buf;
}

Test(wire_segment, partial_range_reads_only_needed_runs)
{
    rng_state = 5;
    mseg m = {0};
    random_model(&m, 1, 4000, 1u << 19, KG_DENSE);
    wire_seg_opts o = sample_opts(WIRE_COMP_NONE);
    wire_segment_out out;
    encode_ok(&m, &o, &out);
    wire_index *ix;
    cr_assert_eq(wire_segment_open(out.buf, out.len, &ix, NULL), 0);
    const wire_section_info *si = wire_index_section(ix, 0);
    cr_assert_gt(si->nruns, 10);
    uint32_t ka = si->runs[3].key_group, kb = si->runs[5].key_group;
    uint64_t off[2], len[2], coff, clen;
    uint8_t *buf = iterate_two_ranges(&m, &out, si, ka, kb, &coff, &clen, off, len);
    cr_assert_eq(off[0], si->runs[3].offset);
    cr_assert_eq(off[0] + len[0], si->runs[6].offset);
    cr_assert(si->runs[si->nruns - 1].is_meta);
    cr_assert_eq(off[1], si->runs[si->nruns - 1].offset);
    wire_iter *it;
    wire_err err = {{0}};
    /* a range that misses a needed run is a caller error */
    cr_assert_eq(wire_iter_open(si, buf, coff, (size_t)len[0], 0, UINT64_MAX, ka, kb, &it, &err), -EINVAL);
    /* a flipped bit inside a needed run is caught by the run's CRC */
    buf[len[0] / 2] ^= 4;
    cr_assert_eq(wire_iter_open(si, buf, coff, clen, 0, UINT64_MAX, ka, kb, &it, &err), DSTL_ECORRUPT);
    cr_assert(strstr(err.msg, "offset"), "%s", err.msg);
    free(buf);
    wire_index_free(ix);
    wire_segment_out_free(&out);
    mseg_free(&m);
}

/* Key groups from the first run: the two ranges then span the whole section, and the gap
 * between them was never fetched. The iterator must still read only the runs it needs. */
Test(wire_segment, partial_ranges_spanning_the_section_leave_the_gap_unread)
{
    rng_state = 9;
    mseg m = {0};
    random_model(&m, 1, 3000, 1u << 18, KG_DENSE);
    wire_seg_opts o = sample_opts(WIRE_COMP_NONE);
    wire_segment_out out;
    encode_ok(&m, &o, &out);
    wire_index *ix;
    cr_assert_eq(wire_segment_open(out.buf, out.len, &ix, NULL), 0);
    const wire_section_info *si = wire_index_section(ix, 0);
    cr_assert_gt(si->nruns, 6);
    uint32_t ka = si->runs[0].key_group, kb = si->runs[1].key_group;
    uint64_t off[2], len[2], coff, clen;
    uint8_t *buf = iterate_two_ranges(&m, &out, si, ka, kb, &coff, &clen, off, len);
    cr_assert_eq(coff, 0);
    cr_assert_eq(clen, si->stored_len, "the covering range is the whole section");
    free(buf);
    wire_index_free(ix);
    wire_segment_out_free(&out);
    mseg_free(&m);
}

/* ---- damage ------------------------------------------------------------------------------ */

/* Opens and fully iterates; returns 0 when everything read back equals the model, else the
 * first error. A result of 0 after damage means the damage went undetected. */
static int read_all(const uint8_t *b, size_t n, const mseg *m)
{
    wire_index *ix;
    wire_err err = {{0}};
    int rc = wire_segment_open(b, n, &ix, &err);
    if (rc < 0) {
        cr_assert(strstr(err.msg, "offset") || strstr(err.msg, "bytes"), "detail: %s", err.msg);
        return rc;
    }
    for (size_t i = 0; rc == 0 && i < wire_index_nsections(ix); i++) {
        const wire_section_info *si = wire_index_section(ix, i);
        wire_iter *it;
        rc = wire_iter_open(si, b + si->offset, 0, si->stored_len, 0, UINT64_MAX, 0, UINT32_MAX, &it, &err);
        if (rc < 0) break;
        wire_record r;
        size_t k = 0;
        while ((rc = wire_iter_next(it, &r, &err)) == 1) {
            const msec *s = &m->secs[i];
            /* a record that comes back must be exactly the written one */
            cr_assert_lt(k, s->n);
            cr_assert_eq(r.seq, s->seq_first + k);
            cr_assert_eq(r.len, s->recs[k].len);
            cr_assert(r.len == 0 || memcmp(r.data, s->recs[k].data, r.len) == 0);
            k++;
        }
        wire_iter_free(it);
    }
    wire_index_free(ix);
    return rc;
}

static void flip_every_bit(int comp)
{
    mseg m = {0};
    if (comp == WIRE_COMP_NONE) sample_model(&m);
    else compressible_model(&m);
    wire_seg_opts o = sample_opts(comp);
    wire_segment_out out;
    encode_ok(&m, &o, &out);
    cr_assert_eq(read_all(out.buf, out.len, &m), 0);
    if (comp != WIRE_COMP_NONE) {
        wire_index *ix;
        cr_assert_eq(wire_segment_open(out.buf, out.len, &ix, NULL), 0);
        cr_assert_eq(wire_index_section(ix, 0)->compression, comp, "the sample is compressed");
        wire_index_free(ix);
    }
    for (size_t bit = 0; bit < out.len * 8; bit++) {
        out.buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        int rc = read_all(out.buf, out.len, &m);
        cr_assert_eq(rc, DSTL_ECORRUPT, "flip of bit %zu (byte %zu) gave %d", bit, bit / 8, rc);
        out.buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    wire_segment_out_free(&out);
    mseg_free(&m);
}

Test(wire_segment, detects_every_bit_flip) { flip_every_bit(WIRE_COMP_NONE); }
Test(wire_segment, detects_every_bit_flip_lz4) { flip_every_bit(WIRE_COMP_LZ4); }
Test(wire_segment, detects_every_bit_flip_zstd) { flip_every_bit(WIRE_COMP_ZSTD); }

Test(wire_segment, rejects_every_truncation_and_extension)
{
    mseg m = {0};
    sample_model(&m);
    wire_seg_opts o = sample_opts(WIRE_COMP_NONE);
    wire_segment_out out;
    encode_ok(&m, &o, &out);
    for (size_t n = 0; n < out.len; n++) {
        uint8_t *copy = malloc(n ? n : 1);   /* exact size, so ASan sees any over-read */
        memcpy(copy, out.buf, n);
        wire_index *ix;
        wire_err err;
        int rc = wire_segment_open(copy, n, &ix, &err);
        cr_assert_eq(rc, DSTL_ECORRUPT, "truncation to %zu bytes gave %d", n, rc);
        free(copy);
    }
    uint8_t *longer = malloc(out.len + 1);
    memcpy(longer, out.buf, out.len);
    longer[out.len] = 0;
    cr_assert_eq(read_all(longer, out.len + 1, &m), DSTL_ECORRUPT, "a byte after the trailer");
    free(longer);
    wire_segment_out_free(&out);
    mseg_free(&m);
}

Test(wire_segment, rejects_newer_version)
{
    mseg m = {0};
    sample_model(&m);
    wire_seg_opts o = sample_opts(WIRE_COMP_NONE);
    wire_segment_out out;
    encode_ok(&m, &o, &out);
    /* a version-2 trailer with a valid CRC */
    uint8_t *t = out.buf + out.len - 32;
    t[4] = 2;
    uint32_t crc = wire_crc32c(0, t + 4, 28);
    memcpy(t, &crc, 4);
    wire_index *ix;
    wire_err err;
    cr_assert_eq(wire_segment_open(out.buf, out.len, &ix, &err), DSTL_ECORRUPT);
    cr_assert(strstr(err.msg, "version 2"), "%s", err.msg);
    wire_segment_out_free(&out);
    mseg_free(&m);
}

/* Re-packs a segment with a modified footer and valid CRCs (footer, trailer). */
static uint8_t *reseal(const wire_segment_out *out, Dstl__SegmentFooter *f, size_t *len)
{
    size_t flen = dstl__segment_footer__get_packed_size(f);
    size_t n = out->footer_offset + flen + 32;
    uint8_t *b = malloc(n);
    memcpy(b, out->buf, out->footer_offset);
    dstl__segment_footer__pack(f, b + out->footer_offset);
    uint8_t *t = b + n - 32;
    memcpy(t, out->buf + out->len - 32, 32);
    uint64_t foff = out->footer_offset;
    uint32_t fl = (uint32_t)flen, fcrc = wire_crc32c(0, b + foff, flen);
    memcpy(t + 8, &foff, 8);
    memcpy(t + 16, &fl, 4);
    memcpy(t + 20, &fcrc, 4);
    uint32_t tcrc = wire_crc32c(0, t + 4, 28);
    memcpy(t, &tcrc, 4);
    *len = n;
    return b;
}

typedef void (*footer_edit)(Dstl__SegmentFooter *f);
static void e_run_len_huge(Dstl__SegmentFooter *f) { f->sections[0]->runs[0]->len = UINT64_MAX - 3; }
static void e_run_count_huge(Dstl__SegmentFooter *f) { f->sections[0]->runs[0]->count = UINT64_MAX; }
static void e_run_count_zero(Dstl__SegmentFooter *f) { f->sections[0]->runs[1]->count = 0; }
static void e_run_offset(Dstl__SegmentFooter *f) { f->sections[0]->runs[1]->offset += 1; }
static void e_sec_offset(Dstl__SegmentFooter *f) { f->sections[1]->offset = 1ull << 40; }
static void e_sec_stored(Dstl__SegmentFooter *f) { f->sections[1]->stored_len += 1; }
static void e_seq_order(Dstl__SegmentFooter *f) { f->sections[0]->seq_end = f->sections[0]->seq_first; }
static void e_nrec(Dstl__SegmentFooter *f) { f->sections[0]->record_count += 1; }
static void e_comp(Dstl__SegmentFooter *f) { f->sections[0]->compression = 7; }
static void e_raw_huge(Dstl__SegmentFooter *f)
{
    f->sections[0]->compression = DSTL__COMPRESSION__COMPRESSION_ZSTD;
    f->sections[0]->raw_len = 1ull << 50;
}
static void e_encrypted(Dstl__SegmentFooter *f) { f->sections[0]->encryption = DSTL__ENCRYPTION__ENCRYPTION_AES_256_GCM; }
static void e_kg_order(Dstl__SegmentFooter *f) { f->sections[0]->runs[1]->key_group = 0; }
static void e_meta_first(Dstl__SegmentFooter *f) { f->sections[0]->runs[0]->is_meta = 1; }
static void e_kg_range(Dstl__SegmentFooter *f) { f->sections[0]->kg_last = 99; }
static void e_version(Dstl__SegmentFooter *f) { f->format_version = 2; }
static void e_no_sections(Dstl__SegmentFooter *f) { f->n_sections = 0; }
static void e_empty_writer(Dstl__SegmentFooter *f) { f->sections[1]->writer_id = (char *)""; }
static void e_data_bytes(Dstl__SegmentFooter *f) { f->sections[0]->data_bytes = 1ull << 60; }
static void e_segment_no(Dstl__SegmentFooter *f) { f->segment_no = 43; }

Test(wire_segment, rejects_forged_footers)
{
    footer_edit edits[] = {e_run_len_huge, e_run_count_huge, e_run_count_zero, e_run_offset,
                           e_sec_offset, e_sec_stored, e_seq_order, e_nrec, e_comp, e_raw_huge,
                           e_encrypted, e_kg_order, e_meta_first, e_kg_range, e_version,
                           e_no_sections, e_empty_writer, e_data_bytes, e_segment_no};
    mseg m = {0};
    sample_model(&m);
    wire_seg_opts o = sample_opts(WIRE_COMP_NONE);
    wire_segment_out out;
    encode_ok(&m, &o, &out);
    for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
        Dstl__SegmentFooter *f = dstl__segment_footer__unpack(NULL, out.footer_len, out.buf + out.footer_offset);
        cr_assert_not_null(f);
        size_t n;
        uint8_t *unchanged = reseal(&out, f, &n);
        cr_assert_eq(read_all(unchanged, n, &m), 0, "resealing alone keeps it valid");
        free(unchanged);
        size_t saved = f->n_sections;
        char *saved_id = f->sections[1]->writer_id;
        edits[e](f);
        uint8_t *b = reseal(&out, f, &n);
        f->n_sections = saved;   /* so that free_unpacked frees what unpack allocated */
        f->sections[1]->writer_id = saved_id;
        dstl__segment_footer__free_unpacked(f, NULL);
        wire_index *ix;
        wire_err err = {{0}};
        int rc = wire_segment_open(b, n, &ix, &err);
        cr_assert_eq(rc, DSTL_ECORRUPT, "edit %zu accepted (%d)", e, rc);
        cr_assert(strstr(err.msg, "offset"), "edit %zu: detail without offset: %s", e, err.msg);
        free(b);
    }
    wire_segment_out_free(&out);
    mseg_free(&m);
}

/* A segment whose footer is raw[0, rn) (the original's bytes, edited), with valid CRCs. */
static uint8_t *reseal_raw(const wire_segment_out *out, const uint8_t *raw, size_t rn, size_t *len)
{
    Dstl__SegmentFooter *f = dstl__segment_footer__unpack(NULL, out->footer_len, out->buf + out->footer_offset);
    cr_assert_not_null(f);
    size_t n;
    uint8_t *b = reseal(out, f, &n);            /* the trailer's template */
    dstl__segment_footer__free_unpacked(f, NULL);
    uint8_t *r = malloc(out->footer_offset + rn + 32);
    memcpy(r, b, out->footer_offset);
    memcpy(r + out->footer_offset, raw, rn);
    uint8_t *t = r + out->footer_offset + rn;
    memcpy(t, b + n - 32, 32);
    free(b);
    uint32_t fl = (uint32_t)rn, fcrc = wire_crc32c(0, raw, rn);
    memcpy(t + 16, &fl, 4);
    memcpy(t + 20, &fcrc, 4);
    uint32_t tcrc = wire_crc32c(0, t + 4, 28);
    memcpy(t, &tcrc, 4);
    *len = out->footer_offset + rn + 32;
    return r;
}

/* The footer is protobuf, read as protobuf defines it (wire/footer_dec.c reads it in place):
 * fields a newer writer adds, of any wire type and at any level, are skipped; a scalar's last
 * occurrence wins; and what is not protobuf is refused: truncated varints and lengths, groups,
 * field number 0, and a known field of another wire type than the schema's. */
Test(wire_segment, footers_read_as_protobuf_defines_them)
{
    mseg m = {0};
    sample_model(&m);
    wire_seg_opts o = sample_opts(WIRE_COMP_NONE);
    wire_segment_out out;
    encode_ok(&m, &o, &out);
    const uint8_t *fb = out.buf + out.footer_offset;
    size_t fn = out.footer_len;
    /* a newer writer's fields in a section and a run (protobuf-c packs unknown fields) */
    Dstl__SegmentFooter *f = dstl__segment_footer__unpack(NULL, fn, fb);
    cr_assert_not_null(f);
    uint8_t lp[4] = {3, 'a', 'b', 'c'}, i32[4] = {1, 2, 3, 4};   /* what follows the key, as packed */
    ProtobufCMessageUnknownField uk[2] = {{.tag = 90, .wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, .len = 4, .data = lp},
                                          {.tag = 91, .wire_type = PROTOBUF_C_WIRE_TYPE_32BIT, .len = 4, .data = i32}};
    f->sections[0]->base.n_unknown_fields = 2;
    f->sections[0]->base.unknown_fields = uk;
    f->sections[1]->runs[0]->base.n_unknown_fields = 1;
    f->sections[1]->runs[0]->base.unknown_fields = uk;
    size_t n;
    uint8_t *b = reseal(&out, f, &n);
    f->sections[0]->base.n_unknown_fields = 0;
    f->sections[0]->base.unknown_fields = NULL;
    f->sections[1]->runs[0]->base.n_unknown_fields = 0;
    f->sections[1]->runs[0]->base.unknown_fields = NULL;
    dstl__segment_footer__free_unpacked(f, NULL);
    cr_assert_eq(read_all(b, n, &m), 0, "unknown fields in a section and a run");
    free(b);
    /* a run whose own bytes are not protobuf (a length past its end), inside a well-framed
     * section: the sections' first pass skips run bodies, the runs' pass refuses it */
    f = dstl__segment_footer__unpack(NULL, fn, fb);
    cr_assert_not_null(f);
    uint8_t past[1] = {0x7f};
    ProtobufCMessageUnknownField bad_len = {.tag = 92, .wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, .len = 1,
                                            .data = past};
    f->sections[1]->runs[0]->base.n_unknown_fields = 1;
    f->sections[1]->runs[0]->base.unknown_fields = &bad_len;
    b = reseal(&out, f, &n);
    f->sections[1]->runs[0]->base.n_unknown_fields = 0;
    f->sections[1]->runs[0]->base.unknown_fields = NULL;
    dstl__segment_footer__free_unpacked(f, NULL);
    {
        wire_index *ix;
        wire_err err = {{0}};
        cr_assert_eq(wire_segment_open(b, n, &ix, &err), DSTL_ECORRUPT, "a malformed run accepted");
        cr_assert(strstr(err.msg, "footer section 1") && strstr(err.msg, "run does not parse"), "%s", err.msg);
    }
    free(b);

    /* at the footer's level, appended to its bytes: each case is the original, then these */
    static const struct {
        const char *what;
        uint8_t bytes[16];
        size_t n;
        int ok;
    } cases[] = {
        {"an unknown varint field", {0xa0, 0x06, 0x05}, 3, 1},
        {"an unknown 64-bit field", {0xa9, 0x06, 1, 2, 3, 4, 5, 6, 7, 8}, 10, 1},
        {"an unknown length-delimited field", {0xb2, 0x06, 3, 'a', 'b', 'c'}, 6, 1},
        {"an unknown 32-bit field", {0xbd, 0x06, 1, 2, 3, 4}, 6, 1},
        {"the format version again (the last wins)", {0x08, 0x01}, 2, 1},
        {"another format version last", {0x08, 0x02}, 2, 0},
        {"a truncated varint", {0xa0, 0x06, 0x80}, 3, 0},
        {"a varint of eleven bytes", {0xa0, 0x06, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 13, 0},
        {"a length past the end", {0xb2, 0x06, 100, 'a'}, 4, 0},
        {"a group", {0xa3, 0x06}, 2, 0},
        {"field number 0", {0x00, 0x01}, 2, 0},
        {"the segment number as bytes", {0x1a, 0x01, 0x2a}, 3, 0},
        {"a section as a varint", {0x28, 0x01}, 2, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint8_t *raw = malloc(fn + cases[c].n);
        memcpy(raw, fb, fn);
        memcpy(raw + fn, cases[c].bytes, cases[c].n);
        b = reseal_raw(&out, raw, fn + cases[c].n, &n);
        free(raw);
        if (cases[c].ok) {
            cr_assert_eq(read_all(b, n, &m), 0, "%s: refused", cases[c].what);
        } else {
            wire_index *ix;
            wire_err err = {{0}};
            int rc = wire_segment_open(b, n, &ix, &err);
            cr_assert_eq(rc, DSTL_ECORRUPT, "%s: accepted (%d)", cases[c].what, rc);
            cr_assert(strstr(err.msg, "segment offset"), "%s: %s", cases[c].what, err.msg);
        }
        free(b);
    }
    /* the segment number first with another value: the footer's own, later, wins */
    uint8_t *raw = malloc(fn + 2);
    raw[0] = 0x18;
    raw[1] = 0x63;
    memcpy(raw + 2, fb, fn);
    b = reseal_raw(&out, raw, fn + 2, &n);
    free(raw);
    cr_assert_eq(read_all(b, n, &m), 0, "an earlier segment number is overridden by the later one");
    free(b);
    wire_segment_out_free(&out);
    mseg_free(&m);
}

/* A one-section segment around a hand-made raw body with valid CRCs everywhere. */
static uint8_t *forge(const uint8_t *body, size_t blen, uint64_t count, uint64_t nrec, size_t *len,
                      int two_runs, size_t split)
{
    Dstl__KeyGroupRun r[2];
    Dstl__KeyGroupRun *rp[2] = {&r[0], &r[1]};
    for (int i = 0; i < 2; i++) dstl__key_group_run__init(&r[i]);
    size_t l0 = two_runs ? split : blen;
    r[0].key_group = 5;
    r[0].offset = 0;
    r[0].len = l0;
    r[0].count = count;
    r[0].crc32c = wire_crc32c(0, body, l0);
    r[1].key_group = 6;
    r[1].offset = l0;
    r[1].len = blen - l0;
    r[1].count = nrec - count;
    r[1].crc32c = wire_crc32c(0, body + l0, blen - l0);
    Dstl__Section s;
    dstl__section__init(&s);
    Dstl__Section *sp = &s;
    s.writer_id = (char *)"forged";
    s.seq_first = 100;
    s.seq_end = 100 + nrec;
    s.record_count = nrec;
    s.kg_first = 5;
    s.kg_last = two_runs ? 6 : 5;
    s.n_runs = two_runs ? 2 : 1;
    s.runs = rp;
    s.offset = 32;
    s.stored_len = blen;
    s.raw_len = blen;
    s.crc32c = wire_crc32c(0, body, blen);
    Dstl__SegmentFooter f;
    dstl__segment_footer__init(&f);
    f.format_version = 1;
    f.run_id = (char *)"forge";
    f.segment_no = 1;
    f.n_sections = 1;
    f.sections = &sp;
    size_t flen = dstl__segment_footer__get_packed_size(&f);
    size_t n = 32 + blen + flen + 32;
    uint8_t *b = calloc(1, n);
    memcpy(b, "DSTLSEG\n", 8);
    b[8] = 1;
    b[16] = 1;
    uint32_t c = wire_crc32c(0, b, 28);
    memcpy(b + 28, &c, 4);
    memcpy(b + 32, body, blen);
    dstl__segment_footer__pack(&f, b + 32 + blen);
    uint8_t *t = b + n - 32;
    uint64_t foff = 32 + blen;
    uint32_t fl = (uint32_t)flen, fc = wire_crc32c(0, b + foff, flen);
    t[4] = 1;
    memcpy(t + 8, &foff, 8);
    memcpy(t + 16, &fl, 4);
    memcpy(t + 20, &fc, 4);
    memcpy(t + 24, "DSTLEND\n", 8);
    c = wire_crc32c(0, t + 4, 28);
    memcpy(t, &c, 4);
    *len = n;
    return b;
}

/* Opens a forged segment and iterates it: the first error (or 0). */
static int iterate_forged(const uint8_t *body, size_t blen, uint64_t count, uint64_t nrec, int two,
                          size_t split, wire_err *err)
{
    size_t n;
    uint8_t *b = forge(body, blen, count, nrec, &n, two, split);
    wire_index *ix;
    int rc = wire_segment_open(b, n, &ix, err);
    if (rc == 0) {
        const wire_section_info *si = wire_index_section(ix, 0);
        wire_iter *it;
        rc = wire_iter_open(si, b + si->offset, 0, si->stored_len, 0, UINT64_MAX, 0, UINT32_MAX, &it, err);
        if (rc == 0) {
            wire_record r;
            while ((rc = wire_iter_next(it, &r, err)) == 1) {}
            wire_iter_free(it);
        }
        wire_index_free(ix);
    }
    free(b);
    return rc;
}

/* The encoder writes the footer's protobuf itself (wire/footer_enc.c): its bytes must be
 * protobuf's own encoding of the same message, as protobuf-c packs it (fields in number order,
 * zeros and empty strings left out, runs and sections length-delimited), for every shape:
 * dense, sparse, meta-only and one-key-group sections, each codec, large and small values,
 * and the padding field at each of its lengths. */
Test(wire_segment, footers_are_the_bytes_protobuf_packs, .timeout = 60)
{
    rng_state = 11;
    int modes[] = {KG_DENSE, KG_SPARSE, KG_META_ONLY, KG_ONE};
    for (int c = 0; c < 32; c++) {
        mseg m = {0};
        random_model(&m, 1 + rnd(c < 28 ? 16 : 300), 1 + rnd(c < 28 ? 2000 : 6), 1u << 18, modes[c % 4]);
        wire_seg_opts o = {.run_id = c % 2 ? "rt" : "a-longer-run-id-0123456789",
                           .segment_no = c % 5 ? rnd(1000) : UINT64_MAX - rnd(10), .created_ms = rnd(1ull << 45),
                           .compression = c % 3};
        if (c % 4 == 1) {                 /* padded: the padding field at various lengths */
            o.pad_align = 1u << (8 + rnd(5));
            o.pad_limit = UINT32_MAX;
        }
        wire_segment_out out;
        encode_ok(&m, &o, &out);
        const uint8_t *fb = out.buf + out.footer_offset;
        Dstl__SegmentFooter *f = dstl__segment_footer__unpack(NULL, out.footer_len, fb);
        cr_assert_not_null(f, "case %d: the footer does not unpack", c);
        cr_assert_eq(f->n_sections, m.nsecs, "case %d", c);
        size_t n = dstl__segment_footer__get_packed_size(f);
        cr_assert_eq(n, out.footer_len, "case %d: protobuf-c packs %zu bytes, the encoder wrote %u", c, n,
                     out.footer_len);
        uint8_t *b = malloc(n);
        dstl__segment_footer__pack(f, b);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(b[i], fb[i], "case %d: footer byte %zu of %zu is %02x, protobuf-c packs %02x", c, i, n,
                         fb[i], b[i]);
        free(b);
        dstl__segment_footer__free_unpacked(f, NULL);
        check_segment(&m, &out, &o);
        wire_segment_out_free(&out);
        mseg_free(&m);
    }
}

Test(wire_segment, rejects_forged_records_with_valid_crcs)
{
    wire_err err = {{0}};
    /* sanity: a valid forged body: seq 100 "ab", seq 101 "c" */
    const uint8_t ok[] = {0, 2, 'a', 'b', 0, 1, 'c'};
    cr_assert_eq(iterate_forged(ok, sizeof ok, 2, 2, 0, 0, &err), 0, "%s", err.msg);
    struct {
        const char *name;
        uint8_t body[16];
        size_t len;
        uint64_t count, nrec;
    } cases[] = {
        {"varint overflow", {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0}, 12, 1, 1},
        {"length past run", {0, 9, 'a', 'b'}, 4, 2, 2},
        {"seq past section end", {5, 1, 'a', 0, 0}, 5, 2, 2},
        {"trailing bytes", {0, 1, 'a', 0, 0, 7}, 6, 2, 2},
        {"truncated varint", {0, 0x80}, 2, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = iterate_forged(cases[i].body, cases[i].len, cases[i].count, cases[i].nrec, 0, 0, &err);
        cr_assert_eq(rc, DSTL_ECORRUPT, "%s: %d", cases[i].name, rc);
        cr_assert(strstr(err.msg, "offset"), "%s: %s", cases[i].name, err.msg);
    }
    /* the same seq in two runs */
    const uint8_t dup[] = {0, 1, 'a', 0, 1, 'b'};
    int rc = iterate_forged(dup, sizeof dup, 1, 2, 1, 3, &err);
    cr_assert_eq(rc, DSTL_ECORRUPT, "duplicate seq: %d", rc);
}

/* ---- encoder input ------------------------------------------------------------------------- */

Test(wire_segment, encoder_rejects_bad_input)
{
    mseg m = {0};
    sample_model(&m);
    wire_seg_opts o = sample_opts(WIRE_COMP_NONE);
    wire_segment_out out;
    wire_err err;
    cr_assert_eq(wire_segment_encode(&o, m.in, 0, &out, &err), -EINVAL);
    m.in[0].nrec = 4;
    cr_assert_eq(wire_segment_encode(&o, m.in, 2, &out, &err), -EINVAL, "record count mismatch");
    cr_assert(strstr(err.msg, "writer-a"), "%s", err.msg);
    m.in[0].nrec = 5;
    wire_span torn = {m.secs[0].spans[2].p, m.secs[0].spans[2].len - 1};
    m.in[0].spans = &torn;
    m.in[0].nspans = 1;
    cr_assert_eq(wire_segment_encode(&o, m.in, 2, &out, &err), -EINVAL, "torn record");
    m.in[0].spans = m.secs[0].spans;
    m.in[0].nspans = m.secs[0].nspans;
    m.in[1].writer_id = "";
    cr_assert_eq(wire_segment_encode(&o, m.in, 2, &out, &err), -EINVAL, "empty writer id");
    m.in[1].writer_id = m.secs[1].id;
    o.compression = 9;
    cr_assert_eq(wire_segment_encode(&o, m.in, 2, &out, &err), -EINVAL, "unknown codec");
    o.compression = WIRE_COMP_NONE;
    o.run_id = NULL;
    cr_assert_eq(wire_segment_encode(&o, m.in, 2, &out, &err), -EINVAL, "no run id");
    mseg_free(&m);
}

static size_t pool_allocs, pool_releases;
static uint8_t pool_buf[1 << 16];
static void *pool_alloc(void *ctx, size_t len)
{
    cr_assert_eq(ctx, (void *)pool_buf);
    pool_allocs++;
    return len <= sizeof pool_buf ? pool_buf : NULL;
}
static void pool_release(void *ctx, void *p)
{
    cr_assert_eq(ctx, (void *)pool_buf);
    cr_assert_eq(p, (void *)pool_buf);
    pool_releases++;
}

Test(wire_segment, uses_the_allocator_hook)
{
    mseg m = {0};
    sample_model(&m);
    for (int comp = 0; comp <= 2; comp++) {
        wire_seg_opts o = sample_opts(comp);
        o.alloc = pool_alloc;
        o.release = pool_release;
        o.alloc_ctx = pool_buf;
        wire_segment_out out;
        encode_ok(&m, &o, &out);
        cr_assert_eq(out.buf, pool_buf);
        cr_assert_geq(out.cap, out.len);
        check_segment(&m, &out, &o);
        wire_segment_out_free(&out);
    }
    cr_assert_eq(pool_allocs, 3);
    cr_assert_eq(pool_releases, 3);
    mseg_free(&m);
}

/* ---- padding (wire_seg_opts.pad_*, FORMAT.md "Padding") ---------------------------------- */

/* Encodes m with the padding options given; checks the records read back as without padding,
 * that the bytes before the footer are the unpadded segment's, and that the footer's padding
 * field holds zeros only. Returns the padded length. */
static uint64_t encode_padded(const mseg *m, uint64_t pad_to, uint32_t align, uint32_t limit, int comp)
{
    wire_seg_opts o = sample_opts(comp), po = o;
    po.pad_to = pad_to;
    po.pad_align = align;
    po.pad_limit = limit;
    wire_segment_out plain, out;
    encode_ok(m, &o, &plain);
    encode_ok(m, &po, &out);
    check_segment(m, &out, &po);
    cr_assert_eq(out.footer_offset, plain.footer_offset);
    cr_assert_eq(memcmp(out.buf, plain.buf, plain.footer_offset), 0, "sections differ with padding");
    Dstl__SegmentFooter *f = dstl__segment_footer__unpack(NULL, out.footer_len, out.buf + out.footer_offset);
    cr_assert_not_null(f);
    for (size_t i = 0; i < f->padding.len; i++) cr_assert_eq(f->padding.data[i], 0, "padding byte %zu", i);
    cr_assert_eq(out.len - plain.len, f->padding.len ? f->padding.len + 1 + (f->padding.len < 128 ? 1 : 2) : 0,
                 "the padding field is all that was added");
    dstl__segment_footer__free_unpacked(f, NULL);
    uint64_t len = out.len;
    wire_segment_out_free(&plain);
    wire_segment_out_free(&out);
    return len;
}

Test(wire_segment, padding_gives_the_length_asked_and_the_same_records)
{
    mseg m = {0};
    sample_model(&m);
    wire_seg_opts o = sample_opts(WIRE_COMP_NONE);
    wire_segment_out plain;
    encode_ok(&m, &o, &plain);
    const uint64_t n = plain.len;   /* its natural length */
    wire_segment_out_free(&plain);
    cr_assert_lt(n + 200, 4096u, "the sample is small: %llu bytes", (unsigned long long)n);
    struct {
        uint64_t pad_to, want;
    } cases[] = {
        {0, 4096},                  /* no file to match: rounded up to the alignment */
        {n, n},                     /* the file is its size already: nothing added */
        {n + 3, n + 3},             /* the smallest field: tag, length 1, one zero */
        {n + 129, n + 129},         /* the longest with a 1-byte length */
        {n + 131, n + 131},         /* the shortest with a 2-byte length */
        {n + 8192, n + 8192},       /* as far as two alignments away */
        {n + 1, 4096},              /* no field adds 1, 2 or 130 bytes: rounded up instead */
        {n + 2, 4096},
        {n + 130, 4096},
        {n + 8193, 4096},           /* too far */
        {n - 1, 4096},              /* shorter than the segment */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t got = encode_padded(&m, cases[i].pad_to, 4096, 65536, WIRE_COMP_NONE);
        cr_assert_eq(got, cases[i].want, "pad_to natural%+lld: %llu bytes, want %llu",
                     (long long)(cases[i].pad_to - n), (unsigned long long)got, (unsigned long long)cases[i].want);
    }
    /* over the limit, or no alignment: the natural length, whatever pad_to says, and a buffer
     * no larger than without padding */
    cr_assert_eq(encode_padded(&m, n + 100, 4096, (uint32_t)n - 1, WIRE_COMP_NONE), n);
    wire_seg_opts po = o;
    po.pad_align = 4096;
    po.pad_limit = 16;
    wire_segment_out a1, a2;
    encode_ok(&m, &o, &a1);
    encode_ok(&m, &po, &a2);
    cr_assert_eq(a2.cap, a1.cap, "a segment too large to pad got a larger buffer: %zu > %zu", a2.cap, a1.cap);
    wire_segment_out_free(&a1);
    wire_segment_out_free(&a2);
    cr_assert_eq(encode_padded(&m, n + 100, 0, 65536, WIRE_COMP_NONE), n);
    /* compressed sections: the length is known only once they are; padded all the same */
    for (int comp = WIRE_COMP_LZ4; comp <= WIRE_COMP_ZSTD; comp++)
        cr_assert_eq(encode_padded(&m, 0, 4096, 65536, comp), 4096, "codec %d", comp);
    mseg_free(&m);
}

/* When rounding up falls 1, 2 or 130 bytes short of the next multiple, the segment goes one
 * alignment further: record lengths are varied until each of the three cases shows up. */
Test(wire_segment, padding_goes_one_alignment_further_when_no_field_fits)
{
    const uint32_t align = 256;
    int seen[3] = {0};
    for (uint32_t len = 0; len < 600 && !(seen[0] && seen[1] && seen[2]); len++) {
        mseg m = {0};
        uniform_model(&m, "writer-u", 5, 3, len);
        mseg_finish(&m);
        wire_seg_opts o = sample_opts(WIRE_COMP_NONE);
        wire_segment_out plain;
        encode_ok(&m, &o, &plain);
        uint64_t n = plain.len, up = (n + align - 1) / align * align;
        wire_segment_out_free(&plain);
        int k = up - n == 1 ? 0 : up - n == 2 ? 1 : up - n == 130 ? 2 : -1;
        if (k >= 0) {
            seen[k] = 1;
            cr_assert_eq(encode_padded(&m, 0, align, 65536, WIRE_COMP_NONE), up + align, "natural %llu",
                         (unsigned long long)n);
        } else if (up != n) {
            cr_assert_eq(encode_padded(&m, 0, align, 65536, WIRE_COMP_NONE), up, "natural %llu", (unsigned long long)n);
        }
        mseg_free(&m);
    }
    cr_assert(seen[0] && seen[1] && seen[2], "cases seen: %d %d %d", seen[0], seen[1], seen[2]);
}

Test(wire_segment, padding_alignment_must_be_a_power_of_two_up_to_the_maximum)
{
    mseg m = {0};
    sample_model(&m);
    wire_seg_opts o = sample_opts(WIRE_COMP_NONE);
    o.pad_limit = 65536;
    wire_segment_out out;
    wire_err err = {{0}};
    const uint32_t bad[] = {3, 4095, WIRE_PAD_ALIGN_MAX * 2};
    for (size_t i = 0; i < 3; i++) {
        o.pad_align = bad[i];
        cr_assert_eq(wire_segment_encode(&o, m.in, m.nsecs, &out, &err), -EINVAL, "alignment %u", bad[i]);
        cr_assert(strstr(err.msg, "padding alignment"), "%s", err.msg);
    }
    o.pad_align = WIRE_PAD_ALIGN_MAX;
    encode_ok(&m, &o, &out);
    cr_assert_eq(out.len % WIRE_PAD_ALIGN_MAX, 0);
    wire_segment_out_free(&out);
    mseg_free(&m);
}

/* ---- the builder (wire_seg_begin .. finish: the pipeline's section-at-a-time encode) ---- */

/* Builds m's sections [0, n) one at a time into a buffer of cap bytes; returns the last
 * add's code (0: all added) and finishes with what went in. The writer ids are overwritten
 * between each add and the finish: the builder must have kept copies. */
static int build(const mseg *m, size_t n, const wire_seg_opts *o, size_t cap, wire_segment_out *out, size_t *added)
{
    uint8_t *buf = malloc(cap);
    wire_seg_builder *b;
    wire_err e = {{0}};
    cr_assert_eq(wire_seg_begin(o, buf, cap, &b, &e), 0, "%s", e.msg);
    int rc = 0;
    char saved[64][32];
    cr_assert(n <= 64);
    *added = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint64_t before = wire_seg_bound(b);
        rc = wire_seg_add(b, &m->in[i], &e);
        if (rc == 0) {
            (*added)++;
            cr_assert_gt(wire_seg_bound(b), before);
            memcpy(saved[i], m->secs[i].id, sizeof saved[i]);
            memset(m->secs[i].id, 'X', sizeof m->secs[i].id - 1);
        } else {
            cr_assert_eq(wire_seg_bound(b), before, "a refused section changed the bound");
        }
        cr_assert_eq(wire_seg_sections(b), *added);
    }
    uint64_t bound = wire_seg_bound(b);
    cr_assert_eq(wire_seg_finish(b, out, &e), 0, "%s", e.msg);
    for (size_t i = 0; i < *added; i++) memcpy(m->secs[i].id, saved[i], sizeof saved[i]);
    cr_assert_leq(out->len, bound, "the segment (%zu) passed its bound (%llu)", out->len, (unsigned long long)bound);
    cr_assert_eq(out->buf, buf);
    return rc;
}

static void same_segment(const wire_segment_out *a, const wire_segment_out *b)
{
    cr_assert_eq(a->len, b->len, "%zu != %zu bytes", a->len, b->len);
    cr_assert(memcmp(a->buf, b->buf, a->len) == 0, "the bytes differ");
    cr_assert_eq(a->nsecs, b->nsecs);
    for (size_t i = 0; i < a->nsecs; i++) {
        const wire_section_loc *x = &a->secs[i], *y = &b->secs[i];
        cr_assert(x->offset == y->offset && x->stored_len == y->stored_len && x->seq_first == y->seq_first &&
                  x->seq_end == y->seq_end && x->data_bytes == y->data_bytes && x->crc == y->crc &&
                  x->kg_first == y->kg_first && x->kg_last == y->kg_last, "section %zu's place differs", i);
    }
    cr_assert_eq(a->footer_offset, b->footer_offset);
    cr_assert_eq(a->footer_crc, b->footer_crc);
}

Test(wire_segment, a_segment_built_section_by_section_is_the_one_encode_makes_of_them, .timeout = 60)
{
    const int comps[] = {WIRE_COMP_NONE, WIRE_COMP_LZ4, WIRE_COMP_ZSTD};
    for (int round = 0; round < 12; round++) {
        mseg m = {0};
        random_model(&m, 1 + rnd(40), 1 + rnd(3000), 1 + rnd(2u << 20), round % 3 == 0 ? KG_SPARSE : KG_DENSE);
        wire_seg_opts o = {.run_id = "inc", .segment_no = rnd(1000), .created_ms = rnd(1u << 30),
                           .compression = comps[round % 3]};
        wire_segment_out one, inc;
        encode_ok(&m, &o, &one);
        size_t added;
        cr_assert_eq(build(&m, m.nsecs, &o, one.len + (1u << 20), &inc, &added), 0);
        cr_assert_eq(added, m.nsecs);
        same_segment(&one, &inc);
        check_segment(&m, &inc, &o);
        wire_segment_out_free(&one);
        wire_segment_out_free(&inc);
        mseg_free(&m);
    }
}

Test(wire_segment, a_section_the_builder_cannot_fit_or_encode_is_left_out_and_the_rest_is_whole)
{
    mseg m = {0};
    random_model(&m, 3, 400, 200000, KG_DENSE);
    wire_seg_opts o = sample_opts(WIRE_COMP_NONE);
    /* the encode's buffer for section 0 alone holds section 0 and no more */
    wire_segment_out first, inc;
    wire_err e = {{0}};
    cr_assert_eq(wire_segment_encode(&o, m.in, 1, &first, &e), 0, "%s", e.msg);
    size_t added;
    cr_assert_eq(build(&m, 2, &o, first.cap, &inc, &added), -ENOSPC);
    cr_assert_eq(added, 1);
    same_segment(&first, &inc);
    wire_segment_out_free(&inc);

    /* a section whose record count does not match its records: refused, the others stay */
    m.in[1].nrec++;
    uint8_t *buf = malloc(1u << 20);
    wire_seg_builder *b;
    cr_assert_eq(wire_seg_begin(&o, buf, 1u << 20, &b, &e), 0, "%s", e.msg);
    cr_assert_eq(wire_seg_add(b, &m.in[0], &e), 0, "%s", e.msg);
    cr_assert_eq(wire_seg_add(b, &m.in[1], &e), -EINVAL);
    cr_assert(strstr(e.msg, "section 1"), "%s", e.msg);
    cr_assert_eq(wire_seg_sections(b), 1);
    cr_assert_eq(wire_seg_finish(b, &inc, &e), 0, "%s", e.msg);
    same_segment(&first, &inc);
    wire_segment_out_free(&inc);
    wire_segment_out_free(&first);

    /* finishing with no section is refused (the buffer stays the caller's) */
    buf = malloc(4096);
    cr_assert_eq(wire_seg_begin(&o, buf, 4096, &b, &e), 0, "%s", e.msg);
    cr_assert_eq(wire_seg_finish(b, &inc, &e), -EINVAL);
    free(buf);
    mseg_free(&m);
}
