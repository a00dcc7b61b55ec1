/*
 * tests/test_wire_tally.c — the encoder's one-pass path: a section handed in with the
 * writer's tally (wire_section_tally, counted at append with wire_tally_add) encodes to the
 * same bytes as the same section counted by the encoder's own scan, with and without
 * compression and encryption; and a tally that does not match its records (wrong key groups,
 * counts or sizes, a torn record) is refused with -EINVAL, naming the section, never encoded.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "wire/wire.h"

/* One section: pending records (cut into three spans), and their tally. */
typedef struct {
    uint8_t *buf;
    size_t len;
    wire_span spans[3];
    wire_kg_tally *kg;
    wire_section_tally tally;
    wire_section_in in;
} tsec;

static uint64_t rng = 0x7a11;

/* n records in key groups [kg_lo, kg_lo + nkg) (every 40th a METADATA record), lengths below
 * max_len with now and then one past 2^14 (the framing's long path), seq gaps past 2^14 too
 * when n is large. */
static void tsec_build(tsec *t, const char *id, size_t n, uint32_t kg_lo, uint32_t nkg, uint32_t max_len)
{
    memset(t, 0, sizeof *t);
    size_t cap = 0;
    uint32_t *len = malloc(n * sizeof *len), *kg = malloc(n * sizeof *kg);
    int *meta = malloc(n * sizeof *meta);
    for (size_t i = 0; i < n; i++) {
        len[i] = t_rand(&rng) % 97 == 0 ? 16384 + (uint32_t)(t_rand(&rng) % 2000)
                                        : (uint32_t)(t_rand(&rng) % (max_len + 1));
        meta[i] = i % 40 == 7;
        /* key group 0 of the range is rare: its records lie more than 2^14 apart */
        kg[i] = kg_lo + (nkg > 1 && t_rand(&rng) % 20000 ? 1 + (uint32_t)(t_rand(&rng) % (nkg - 1)) : 0);
        cap += wire_rec_size(len[i]);
    }
    t->buf = malloc(cap ? cap : 1);
    t->kg = calloc(nkg, sizeof *t->kg);
    uint8_t *payload = malloc(20000);
    for (size_t i = 0; i < n; i++) {
        t_fill(payload, len[i], t_rand(&rng));
        t->len += wire_rec_put(t->buf + t->len, meta[i], kg[i], payload, len[i]);
        wire_tally_add(meta[i] ? &t->tally.meta : &t->kg[kg[i] - kg_lo], i, len[i]);
        t->tally.payload_bytes += len[i];
    }
    free(payload);
    /* three spans, cut at record boundaries */
    size_t cut[2] = {0, 0}, off = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == n / 3) cut[0] = off;
        if (i == 2 * n / 3) cut[1] = off;
        off += wire_rec_size(len[i]);
    }
    t->spans[0] = (wire_span){t->buf, cut[0]};
    t->spans[1] = (wire_span){t->buf + cut[0], cut[1] - cut[0]};
    t->spans[2] = (wire_span){t->buf + cut[1], t->len - cut[1]};
    t->tally.kg_lo = kg_lo;
    t->tally.nkg = nkg;
    t->tally.kg = t->kg;
    t->in = (wire_section_in){.writer_id = id, .seq_first = 1000 + t_rand(&rng) % 1000, .nrec = n,
                              .spans = t->spans, .nspans = 3, .tally = &t->tally};
    free(len);
    free(kg);
    free(meta);
}

static void tsec_free(tsec *t)
{
    free(t->buf);
    free(t->kg);
}

static const uint8_t data_key[WIRE_KEY_LEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};

static wire_seg_opts opts(int comp, const wire_key *seal)
{
    return (wire_seg_opts){.run_id = "run-t", .segment_no = 7, .created_ms = 1700000000000ull,
                           .compression = comp, .seal_key = seal, .seal_data_key = seal ? data_key : NULL};
}

/* Encodes secs with their tallies and without: the two segments must be the same bytes. */
static void same_bytes(tsec *secs, size_t n, int comp, const wire_key *seal)
{
    wire_section_in with[4], without[4];
    for (size_t i = 0; i < n; i++) {
        with[i] = secs[i].in;
        without[i] = secs[i].in;
        without[i].tally = NULL;
    }
    wire_seg_opts o = opts(comp, seal);
    wire_segment_out a, b;
    wire_err err = {{0}};
    cr_assert_eq(wire_segment_encode(&o, with, n, &a, &err), 0, "with tallies: %s", err.msg);
    cr_assert_eq(wire_segment_encode(&o, without, n, &b, &err), 0, "scanned: %s", err.msg);
    cr_assert_eq(a.len, b.len, "comp %d sealed %d: %zu vs %zu bytes", comp, seal != NULL, a.len, b.len);
    cr_assert_eq(memcmp(a.buf, b.buf, a.len), 0, "comp %d sealed %d: the bytes differ", comp, seal != NULL);
    wire_index *ix;
    wire_keyring ring = {seal, seal ? 1 : 0};
    cr_assert_eq(wire_segment_open_keyed(a.buf, a.len, &ring, &ix, &err), 0, "%s", err.msg);
    wire_index_free(ix);
    wire_segment_out_free(&a);
    wire_segment_out_free(&b);
}

Test(wire_tally, a_tallied_section_encodes_to_the_scanned_bytes, .timeout = 60)
{
    wire_key key = {.id = "k1"};
    memset(key.key, 0x42, sizeof key.key);
    tsec s[4];
    tsec_build(&s[0], "dense", 30000, 64, 64, 300);        /* a task's 64 key groups */
    tsec_build(&s[1], "one-kg", 500, 9, 1, 120);            /* one key group */
    tsec_build(&s[2], "wide", 3000, 100, 4000, 200);        /* a wide range, sparsely used */
    tsec_build(&s[3], "small", 3, 5, 3, 10);                /* a commit-sized section */
    for (int comp = WIRE_COMP_NONE; comp <= WIRE_COMP_ZSTD; comp++) {
        same_bytes(s, 4, comp, NULL);
        same_bytes(s, 4, comp, &key);
    }
    same_bytes(&s[3], 1, WIRE_COMP_NONE, NULL);
    for (int i = 0; i < 4; i++) tsec_free(&s[i]);
}

Test(wire_tally, a_meta_only_section_has_an_empty_key_group_tally)
{
    tsec s;
    tsec_build(&s, "meta", 1, 0, 1, 50);   /* record 0 is data... */
    free(s.buf);
    s.buf = malloc(64);
    s.len = wire_rec_put(s.buf, 1, 0, "states", 6);
    s.spans[0] = (wire_span){s.buf, s.len};
    s.in.nspans = 1;
    s.in.nrec = 1;
    s.tally = (wire_section_tally){.meta = {0}, .payload_bytes = 6};
    wire_tally_add(&s.tally.meta, 0, 6);
    same_bytes(&s, 1, WIRE_COMP_NONE, NULL);
    tsec_free(&s);
}

/* Encodes one section whose tally or spans were spoiled: must be -EINVAL naming it. */
static void refused(tsec *t, const char *what)
{
    wire_seg_opts o = opts(WIRE_COMP_NONE, NULL);
    wire_segment_out out;
    wire_err err = {{0}};
    cr_assert_eq(wire_segment_encode(&o, &t->in, 1, &out, &err), -EINVAL, "%s: not refused", what);
    cr_assert(strstr(err.msg, "bad"), "%s: the error names the section: %s", what, err.msg);
}

Test(wire_tally, a_tally_that_does_not_match_its_records_is_refused)
{
    tsec t;
    tsec_build(&t, "bad", 2000, 10, 8, 100);
    /* a key group outside the tally (the records' range is 10..17) */
    t.tally.kg_lo = 11;
    t.tally.kg = t.kg + 1;
    t.tally.nkg = 7;
    t.tally.meta.count += t.kg[0].count;   /* same total, so only the copy can tell */
    refused(&t, "key group below the tally");
    t.tally.meta.count -= t.kg[0].count;
    t.tally = (wire_section_tally){.kg_lo = 10, .nkg = 8, .kg = t.kg, .meta = t.tally.meta,
                                   .payload_bytes = t.tally.payload_bytes};
    /* one record counted in the wrong key group: totals right, sizes wrong */
    t.kg[2].count++;
    t.kg[3].count--;
    refused(&t, "counts moved between key groups");
    t.kg[2].count--;
    t.kg[3].count++;
    /* a key group inside the tally's range that the tally has empty: its records moved to the
     * next one (the encoder keeps slots only for the key groups a tally has) */
    wire_kg_tally k3 = t.kg[3], k4 = t.kg[4];
    t.kg[4].count += k3.count;
    t.kg[4].bytes += k3.bytes;
    t.kg[3] = (wire_kg_tally){0};
    refused(&t, "records in a key group the tally has empty");
    t.kg[3] = k3;
    t.kg[4] = k4;
    /* framed bytes moved between key groups: counts right, runs overflow */
    t.kg[4].bytes += 5;
    t.kg[5].bytes -= 5;
    refused(&t, "bytes moved between key groups");
    t.kg[4].bytes -= 5;
    t.kg[5].bytes += 5;
    /* a record too many in the tally */
    t.kg[1].count++;
    refused(&t, "count above nrec");
    t.kg[1].count--;
    /* a torn last record */
    t.spans[2].len -= 1;
    refused(&t, "torn record");
    t.spans[2].len += 1;
    /* and unspoiled it encodes */
    wire_seg_opts o = opts(WIRE_COMP_NONE, NULL);
    wire_segment_out out;
    wire_err err = {{0}};
    cr_assert_eq(wire_segment_encode(&o, &t.in, 1, &out, &err), 0, "%s", err.msg);
    wire_segment_out_free(&out);
    tsec_free(&t);
}

/* ---- the plans' memory, kept by the encoding thread (segment_plan.c) ---- */

typedef struct {
    tsec *secs;
    size_t n;
    int same;           /* the second encode gave the first's bytes */
    int rc;
} reuse_job;

static void *encode_twice(void *arg)
{
    reuse_job *j = arg;
    wire_section_in *in = malloc(j->n * sizeof *in);
    for (size_t i = 0; i < j->n; i++) in[i] = j->secs[i].in;
    wire_seg_opts o = opts(WIRE_COMP_NONE, NULL);
    wire_segment_out a, b;
    wire_err err = {{0}};
    /* the first segment's plans leave their blocks with this thread, the second's reuse them */
    j->rc = wire_segment_encode(&o, in, j->n, &a, &err);
    if (j->rc == 0 && (j->rc = wire_segment_encode(&o, in, j->n, &b, &err)) == 0) {
        j->same = a.len == b.len && memcmp(a.buf, b.buf, a.len) == 0;
        wire_segment_out_free(&b);
    }
    if (a.buf && j->rc == 0) wire_segment_out_free(&a);
    free(in);
    return NULL;                /* its exit frees the blocks it kept (ASan's leak check) */
}

Test(wire_tally, a_thread_reusing_its_plans_memory_encodes_the_same_bytes, .timeout = 60)
{
    /* 300 sections of 64 key groups: plans over several of the kept blocks */
    enum { N = 300 };
    tsec *s = calloc(N, sizeof *s);
    char ids[N][16];
    for (size_t i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "w%zu", i);
        tsec_build(&s[i], ids[i], 40, 64, 64, 100);
    }
    for (int round = 0; round < 2; round++) {
        reuse_job j = {s, N, 0, -1};
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, encode_twice, &j), 0);
        pthread_join(th, NULL);
        cr_assert_eq(j.rc, 0, "round %d: encode failed", round);
        cr_assert(j.same, "round %d: the segment encoded with reused plan memory differs", round);
    }
    for (size_t i = 0; i < N; i++) tsec_free(&s[i]);
    free(s);
}
