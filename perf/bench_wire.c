/*
 * perf/bench_wire.c — segment encode/decode throughput against memcpy of the same bytes.
 *
 * Workload: 8 writers, each with 1 MiB of pending records (100-byte incompressible payloads
 * from tests/payload.h, key groups uniform over 128 — Flink's default max parallelism — and
 * 1% meta records), encoded into one segment of 8 sections. All rates count the pending-record bytes (8 MiB per round), so the
 * three numbers compare the same volume:
 *   memcpy_mb_s       copying the 8 x 1 MiB pending buffers into one 8 MiB buffer
 *   wire.encode_mb_s  wire_segment_encode (counting sort, framing, CRC32C per run and section)
 *   wire.decode_mb_s  wire_segment_open + iterating every record of every section (CRC-checked)
 * plus the lz4/zstd encode rates, the segment bytes per 100-byte record, and the same encode
 * and decode with encryption at rest (wire.encode_aes_mb_s, wire.decode_aes_mb_s; sealed run
 * by run with AES-256-GCM) against plain encoding measured in the same alternation. memcpy, encode and
 * decode run in alternating blocks so that a noisy machine slows them alike. The encoder builds
 * into a reused buffer (its allocator hook), as a pipeline's buffer pool would. The same 8 MiB
 * as 1,024 writers' sections of 8 KiB (~60 key-group runs each) gives wire.encode_w1024_mb_s,
 * and wire.encode_w1024_vs_w8 against the 8-section encode in the same alternation: what the
 * encoder costs per section and per run, apart from the bytes. Prints
 * `name value unit` lines; runs about 3 seconds.
 * Not a test: nothing here asserts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/payload.h"
#include "wire/wire.h"

#define NSEC          8           /* the main workload: 8 sections of 1 MiB */
#define SECTION_BYTES (1u << 20)
#define NSEC_MANY     1024        /* the same bytes as 1,024 writers' sections of 8 KiB */
#define PAYLOAD       100
#define KEY_GROUPS    128
#define ROUND_S       0.6   /* seconds measured per job */
#define BLOCK_S       0.05  /* ... in blocks this long, alternating between jobs */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

typedef struct {
    size_t nsec;
    uint8_t **buf;
    size_t *len;
    wire_span *span;
    wire_section_in *in;        /* with the tallies a writer keeps at append */
    wire_section_in *in_scan;   /* without: the encoder counts in a pass of its own */
    wire_kg_tally (*kg)[KEY_GROUPS];
    wire_section_tally *tally;
    uint32_t **rec_kg;          /* each record's key group (KEY_GROUPS: meta), for round_tally */
    char (*ids)[16];
    size_t total;
} workload;

/* nsec sections of section_bytes each; exits when out of memory. */
static void make_workload(workload *w, size_t nsec, size_t section_bytes)
{
    uint8_t payload[PAYLOAD];
    w->nsec = nsec;
    w->buf = calloc(nsec, sizeof *w->buf);
    w->len = calloc(nsec, sizeof *w->len);
    w->span = calloc(nsec, sizeof *w->span);
    w->in = calloc(nsec, sizeof *w->in);
    w->in_scan = calloc(nsec, sizeof *w->in_scan);
    w->kg = calloc(nsec, sizeof *w->kg);
    w->tally = calloc(nsec, sizeof *w->tally);
    w->rec_kg = calloc(nsec, sizeof *w->rec_kg);
    w->ids = calloc(nsec, sizeof *w->ids);
    if (!w->buf || !w->len || !w->span || !w->in || !w->in_scan || !w->kg || !w->tally || !w->rec_kg || !w->ids)
        exit(1);
    for (size_t s = 0; s < nsec; s++) {
        w->buf[s] = malloc(section_bytes);
        w->rec_kg[s] = malloc(section_bytes / wire_rec_size(PAYLOAD) * sizeof *w->rec_kg[s]);
        if (!w->buf[s] || !w->rec_kg[s]) exit(1);
        size_t off = 0, n = 0;
        while (off + wire_rec_size(PAYLOAD) <= section_bytes) {
            payload_fill(PAYLOAD_RANDOM, s, n, payload, PAYLOAD);      /* incompressible */
            int meta = next_rand() % 100 == 0;
            uint32_t kg = next_rand() % KEY_GROUPS;
            off += wire_rec_put(w->buf[s] + off, meta, kg, payload, PAYLOAD);
            w->rec_kg[s][n] = meta ? KEY_GROUPS : kg;
            wire_tally_add(meta ? &w->tally[s].meta : &w->kg[s][kg], n, PAYLOAD);   /* as dstl_append does */
            w->tally[s].payload_bytes += PAYLOAD;
            n++;
        }
        w->tally[s].nkg = KEY_GROUPS;
        w->tally[s].kg = w->kg[s];
        w->len[s] = off;
        w->span[s] = (wire_span){w->buf[s], off};
        snprintf(w->ids[s], sizeof w->ids[s], "writer-%zu", s);
        w->in[s] = (wire_section_in){.writer_id = w->ids[s], .seq_first = 1000 * s, .nrec = n,
                                     .spans = &w->span[s], .nspans = 1, .tally = &w->tally[s]};
        w->in_scan[s] = w->in[s];
        w->in_scan[s].tally = NULL;
        w->total += off;
    }
}

typedef int (*round_fn)(workload *w, void *ctx);

typedef struct {
    round_fn fn;
    void *ctx;
    double secs;
    long rounds;
} job;

/* Runs the jobs in alternating blocks of BLOCK_S until each has run ROUND_S, so that a
 * shared, noisy machine slows them alike and their ratios stay meaningful. Each block starts
 * with an untimed round, so each job is timed with its own data in cache (as a hot loop: the
 * fair case for memcpy). Returns -1 when a round failed. */
static int measure(workload *w, job *jobs, size_t n)
{
    for (;;) {
        int done = 1;
        for (size_t j = 0; j < n; j++) {
            if (jobs[j].secs >= ROUND_S) continue;
            done = 0;
            if (jobs[j].fn(w, jobs[j].ctx) < 0) return -1;
            double t0 = now_s(), t = t0;
            while (t - t0 < BLOCK_S) {
                if (jobs[j].fn(w, jobs[j].ctx) < 0) return -1;
                jobs[j].rounds++;
                t = now_s();
            }
            jobs[j].secs += t - t0;
        }
        if (done) return 0;
    }
}

/* MB/s of pending bytes. */
static double rate(const workload *w, const job *j)
{
    return j->secs > 0 ? (double)w->total * (double)j->rounds / j->secs / 1e6 : 0;
}

static void free_workload(workload *w)
{
    for (size_t s = 0; s < w->nsec; s++) {
        free(w->buf[s]);
        free(w->rec_kg[s]);
    }
    free(w->buf);
    free(w->len);
    free(w->span);
    free(w->in);
    free(w->in_scan);
    free(w->kg);
    free(w->tally);
    free(w->rec_kg);
    free(w->ids);
}

static int round_memcpy(workload *w, void *ctx)
{
    uint8_t *dst = ctx;
    size_t off = 0;
    for (size_t s = 0; s < w->nsec; s++) {
        memcpy(dst + off, w->buf[s], w->len[s]);
        off += w->len[s];
    }
    __asm__ volatile("" ::"r"(dst) : "memory");
    return 0;
}

/* The segment buffer is reused across rounds, as the pipeline's buffer pool does: a fresh
 * malloc of several MiB costs a page fault per 4 KiB, which would measure the kernel. */
static uint8_t *pool_buf;
static size_t pool_cap;

static void *pool_alloc(void *ctx, size_t len)
{
    (void)ctx;
    if (len > pool_cap) {
        free(pool_buf);
        pool_buf = malloc(len);
        pool_cap = pool_buf ? len : 0;
        if (pool_buf) memset(pool_buf, 0, len);
    }
    return pool_buf;
}

static void pool_release(void *ctx, void *p)
{
    (void)ctx;
    (void)p;
}

static wire_key bench_key = {.id = "bench-key"};
static wire_keyring bench_ring = {&bench_key, 1};
static int sealed_enc = -1;   /* round_encode's ctx for the encrypted encode */
static int scan_enc = -2;     /* ... for the encode without tallies (a retry's sections) */

/* ctx: the compression (an int), &sealed_enc for an uncompressed, encrypted segment with a
 * fresh data key each round, as the pipeline makes them, or &scan_enc. */
static int round_encode(workload *w, void *ctx)
{
    int sealed = ctx == &sealed_enc, scan = ctx == &scan_enc;
    uint8_t dk[WIRE_KEY_LEN];
    for (size_t i = 0; sealed && i < sizeof dk; i++) dk[i] = (uint8_t)next_rand();
    wire_seg_opts o = {.run_id = "bench", .segment_no = 1, .created_ms = 1,
                       .compression = sealed || scan ? WIRE_COMP_NONE : *(int *)ctx, .alloc = pool_alloc,
                       .release = pool_release, .seal_key = sealed ? &bench_key : NULL,
                       .seal_data_key = sealed ? dk : NULL};
    wire_segment_out out;
    wire_err err;
    int rc = wire_segment_encode(&o, scan ? w->in_scan : w->in, w->nsec, &out, &err);
    if (rc < 0) {
        fprintf(stderr, "encode: %s\n", err.msg);
        return rc;
    }
    wire_segment_out_free(&out);
    return 0;
}

/* The plain encode of another workload (ctx): the many small sections of NSEC_MANY writers. */
static int round_encode_many(workload *w, void *ctx)
{
    (void)w;
    static int none = WIRE_COMP_NONE;
    return round_encode(ctx, &none);
}

/* What the writer adds to each dstl_append for the tally (its key group and length at hand). */
static int round_tally(workload *w, void *ctx)
{
    wire_kg_tally *t = ctx;   /* KEY_GROUPS + 1 */
    for (size_t s = 0; s < w->nsec; s++) {
        memset(t, 0, (KEY_GROUPS + 1) * sizeof *t);
        for (uint64_t i = 0; i < w->in[s].nrec; i++) wire_tally_add(&t[w->rec_kg[s][i]], i, PAYLOAD);
    }
    __asm__ volatile("" ::"r"(t) : "memory");
    return 0;
}

static int round_decode(workload *w, void *ctx)
{
    (void)w;
    const wire_segment_out *seg = ctx;
    wire_index *ix;
    wire_err err;
    int rc = wire_segment_open_keyed(seg->buf, seg->len, &bench_ring, &ix, &err);
    size_t bytes = 0;
    for (size_t s = 0; rc == 0 && s < wire_index_nsections(ix); s++) {
        const wire_section_info *si = wire_index_section(ix, s);
        wire_iter *it;
        rc = wire_iter_open(si, seg->buf + si->offset, 0, si->stored_len, 0, UINT64_MAX, 0,
                            UINT32_MAX, &it, &err);
        wire_record r;
        while (rc == 0 && (rc = wire_iter_next(it, &r, &err)) == 1) {
            bytes += r.len;
            rc = 0;
        }
        if (rc == 0) wire_iter_free(it);
    }
    if (rc < 0) fprintf(stderr, "decode: %s\n", err.msg);
    else wire_index_free(ix);
    __asm__ volatile("" ::"r"(bytes));
    return rc;
}

int main(int argc, char **argv)
{
    /* `bench_wire encode|decode|encode-many`: only that part, for a profiler (encode-many's
     * rate counts the main workload's bytes, about the same) */
    const char *only = argc > 1 ? argv[1] : "";
    workload w = {0};
    make_workload(&w, NSEC, SECTION_BYTES);
    uint8_t *dst = malloc(w.total);
    memset(dst, 1, w.total);
    int none = WIRE_COMP_NONE, lz4 = WIRE_COMP_LZ4, zstd = WIRE_COMP_ZSTD;
    wire_seg_opts o = {.run_id = "bench", .segment_no = 1, .created_ms = 1};
    wire_segment_out seg;
    wire_err err;
    if (wire_segment_encode(&o, w.in, w.nsec, &seg, &err) < 0) {
        fprintf(stderr, "encode: %s\n", err.msg);
        return 1;
    }
    for (size_t i = 0; i < WIRE_KEY_LEN; i++) bench_key.key[i] = (uint8_t)(i * 7 + 1);
    uint8_t dk[WIRE_KEY_LEN] = {9};
    wire_seg_opts so = o;
    so.seal_key = &bench_key;
    so.seal_data_key = dk;
    wire_segment_out sealed;
    if (wire_segment_encode(&so, w.in, w.nsec, &sealed, &err) < 0) {
        fprintf(stderr, "encode (aes): %s\n", err.msg);
        return 1;
    }
    workload many = {0};
    make_workload(&many, NSEC_MANY, NSEC * SECTION_BYTES / NSEC_MANY);
    wire_kg_tally tally_tab[KEY_GROUPS + 1];
    job jobs[] = {{round_memcpy, dst, 0, 0}, {round_encode, &none, 0, 0}, {round_decode, &seg, 0, 0},
                  {round_encode, &lz4, 0, 0}, {round_encode, &zstd, 0, 0},
                  {round_encode, &none, 0, 0}, {round_encode, &sealed_enc, 0, 0}, {round_decode, &seg, 0, 0},
                  {round_decode, &sealed, 0, 0},
                  {round_memcpy, dst, 0, 0}, {round_encode, &none, 0, 0}, {round_encode, &scan_enc, 0, 0},
                  {round_tally, tally_tab, 0, 0},
                  {round_encode, &none, 0, 0}, {round_encode_many, &many, 0, 0}};
    if (!strcmp(only, "encode") || !strcmp(only, "decode") || !strcmp(only, "encode-many")) {
        job *j = &jobs[!strcmp(only, "encode-many") ? 14 : only[0] == 'e' ? 1 : 2];
        if (measure(&w, j, 1) < 0) return 1;
        printf("wire.%s_mb_s %.0f MB/s\n", only, rate(&w, j));
        return 0;
    }
    if (measure(&w, jobs, 3) < 0 || measure(&w, jobs + 3, 2) < 0 || measure(&w, jobs + 5, 4) < 0 ||
        measure(&w, jobs + 9, 4) < 0 || measure(&w, jobs + 13, 2) < 0)
        return 1;
    double mem = rate(&w, &jobs[0]), enc = rate(&w, &jobs[1]), dec = rate(&w, &jobs[2]);
    uint64_t nrec = 0;
    for (size_t s = 0; s < w.nsec; s++) nrec += w.in[s].nrec;

    printf("memcpy_mb_s %.0f MB/s\n", mem);
    printf("wire.encode_mb_s %.0f MB/s\n", enc);
    printf("wire.decode_mb_s %.0f MB/s\n", dec);
    printf("wire.encode_vs_memcpy %.3f x\n", mem > 0 ? enc / mem : 0);
    printf("wire.decode_vs_memcpy %.3f x\n", mem > 0 ? dec / mem : 0);
    printf("wire.encode_lz4_mb_s %.0f MB/s\n", rate(&w, &jobs[3]));
    printf("wire.encode_zstd_mb_s %.0f MB/s\n", rate(&w, &jobs[4]));
    printf("wire.segment_bytes_per_record %.2f B\n", (double)seg.len / (double)nrec);
    double pe = rate(&w, &jobs[5]), ae = rate(&w, &jobs[6]), pd = rate(&w, &jobs[7]), ad = rate(&w, &jobs[8]);
    printf("wire.encode_aes_mb_s %.0f MB/s\n", ae);
    printf("wire.decode_aes_mb_s %.0f MB/s\n", ad);
    printf("wire.encode_aes_vs_plain %.3f x\n", pe > 0 ? ae / pe : 0);
    printf("wire.decode_aes_vs_plain %.3f x\n", pd > 0 ? ad / pd : 0);
    double m2 = rate(&w, &jobs[9]), e2 = rate(&w, &jobs[10]), sc = rate(&w, &jobs[11]);
    printf("wire.encode_scan_mb_s %.0f MB/s\n", sc);
    printf("wire.encode_scan_vs_memcpy %.3f x\n", m2 > 0 ? sc / m2 : 0);
    printf("wire.encode_tally_vs_scan %.3f x\n", sc > 0 ? e2 / sc : 0);
    printf("wire.tally_ns_per_record %.2f ns\n",
           jobs[12].rounds ? jobs[12].secs * 1e9 / ((double)jobs[12].rounds * (double)nrec) : 0);
    /* rate() counts w's bytes: the many sections hold their own total */
    double e8 = rate(&w, &jobs[13]),
           em = jobs[14].secs > 0 ? (double)many.total * (double)jobs[14].rounds / jobs[14].secs / 1e6 : 0;
    printf("wire.encode_w%d_mb_s %.0f MB/s\n", NSEC_MANY, em);
    printf("wire.encode_w%d_vs_w%d %.3f x\n", NSEC_MANY, NSEC, e8 > 0 ? em / e8 : 0);
    wire_segment_out_free(&seg);
    wire_segment_out_free(&sealed);
    free_workload(&many);
    free_workload(&w);
    free(dst);
    free(pool_buf);
    return 0;
}
