/*
 * tests/test_wire_seal.c — encryption at rest in the segment format (wire/FORMAT.md,
 * "Encryption").
 *
 * The primitives against published vectors (RFC 5869 HKDF-SHA256, RFC 3394 AES-256 key wrap,
 * the GCM specification's AES-256 test case 16); golden bytes of a small encrypted segment;
 * round trips with and without compression, whole and by key-group range; wrong, unknown and
 * missing keys; every bit flip; runs moved between segments and swapped inside one; no
 * plaintext (payloads, writer ids, keys) in the bytes.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "wire_golden.h"
#include "wire/seal.h"
#include "wire/wire.h"

static void unhex(const char *h, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        cr_assert_eq(sscanf(h + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

/* ---- primitives: published known answers ---------------------------------------------------- */

Test(wire_seal, hkdf_sha256_matches_rfc5869_case_1)
{
    uint8_t ikm[22], salt[13], info[10], want[42], got[42];
    memset(ikm, 0x0b, sizeof ikm);
    for (int i = 0; i < 13; i++) salt[i] = (uint8_t)i;
    for (int i = 0; i < 10; i++) info[i] = (uint8_t)(0xf0 + i);
    unhex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865", want, 42);
    cr_assert_eq(wire_hkdf_sha256(salt, 13, ikm, 22, info, 10, got, 42), 0);
    cr_assert_arr_eq(got, want, 42);
}

Test(wire_seal, aes256_key_wrap_matches_rfc3394_4_6)
{
    uint8_t kek[32], key[32], want[40], got[40], back[32];
    for (int i = 0; i < 32; i++) kek[i] = (uint8_t)i;
    unhex("00112233445566778899aabbccddeeff000102030405060708090a0b0c0d0e0f", key, 32);
    unhex("28c9f404c4b810f4cbccb35cfb87f8263f5786e2d80ed326cbc7f0e71a99f43bfb988b9b7a02dd21", want, 40);
    cr_assert_eq(wire_kw_wrap(kek, key, got), 0);
    cr_assert_arr_eq(got, want, 40);
    cr_assert_eq(wire_kw_unwrap(kek, got, back), 0);
    cr_assert_arr_eq(back, key, 32);
    kek[7] ^= 1;   /* another key-encryption key: the integrity check fails */
    cr_assert_eq(wire_kw_unwrap(kek, got, back), DSTL_ECRYPTO);
}

Test(wire_seal, aes256_gcm_matches_the_gcm_spec_test_case_16)
{
    uint8_t key[32], iv[12], p[60], a[20], c[60], t[16], got[60], tag[16];
    unhex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308", key, 32);
    unhex("cafebabefacedbaddecaf888", iv, 12);
    unhex("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e24"
          "49a6b525b16aedf5aa0de657ba637b39", p, 60);
    unhex("feedfacedeadbeeffeedfacedeadbeefabaddad2", a, 20);
    unhex("522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b10"
          "56828838c5f61e6393ba7a0abcc9f662", c, 60);
    unhex("76fc6ece0f4e1768cddf8853bb2d551b", t, 16);
    wire_gcm *g;
    cr_assert_eq(wire_gcm_new(key, &g), 0);
    cr_assert_eq(wire_gcm_seal(g, iv, a, 20, p, 60, got, tag), 0);
    cr_assert_arr_eq(got, c, 60);
    cr_assert_arr_eq(tag, t, 16);
    cr_assert_eq(wire_gcm_open(g, iv, a, 20, c, 60, got, t), 0);
    cr_assert_arr_eq(got, p, 60);
    /* a changed byte of ciphertext, tag or associated data: DSTL_ECRYPTO, no plaintext left */
    c[5] ^= 0x40;
    memset(got, 0x55, sizeof got);
    cr_assert_eq(wire_gcm_open(g, iv, a, 20, c, 60, got, t), DSTL_ECRYPTO);
    for (int i = 0; i < 60; i++) cr_assert_eq(got[i], 0, "plaintext byte %d left after a failed tag", i);
    c[5] ^= 0x40;
    a[0] ^= 1;
    cr_assert_eq(wire_gcm_open(g, iv, a, 20, c, 60, got, t), DSTL_ECRYPTO);
    a[0] ^= 1;
    t[15] ^= 0x80;
    cr_assert_eq(wire_gcm_open(g, iv, a, 20, c, 60, got, t), DSTL_ECRYPTO);
    wire_gcm_free(g);
}

/* ---- segments ---------------------------------------------------------------------------------- */

#define MARK "SECRET-PAYLOAD-"

typedef struct {
    uint8_t *pending;
    size_t len;
    wire_span span;
    wire_section_in in;
    size_t n;
    uint32_t kg[64];
    int meta[64];
} tsec;

/* n records of writer `id`: key groups i % nkg (every 7th a meta record), payload MARK + i. */
static void tsec_build(tsec *s, const char *id, uint64_t seq_first, size_t n, uint32_t nkg, int pad)
{
    cr_assert(n <= 64);
    s->pending = calloc(n, wire_rec_size(96));
    s->n = n;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        char buf[96];
        int len = snprintf(buf, sizeof buf, MARK "%s-%02zu", id, i);   /* fixed width: equal runs */
        if (pad) {   /* compressible: a long repeated tail */
            memset(buf + len, 'x', 60);
            len += 60;
        }
        s->meta[i] = i % 7 == 6;
        s->kg[i] = s->meta[i] ? 0 : (uint32_t)(i % nkg);
        off += wire_rec_put(s->pending + off, s->meta[i], s->kg[i], buf, (size_t)len);
    }
    s->len = off;
    s->span = (wire_span){s->pending, off};
    s->in = (wire_section_in){.writer_id = id, .seq_first = seq_first, .nrec = n, .spans = &s->span, .nspans = 1};
}

static wire_key key_a, key_b;

static void keys_init(void)
{
    snprintf(key_a.id, sizeof key_a.id, "key-A.2026");
    snprintf(key_b.id, sizeof key_b.id, "key_B");
    for (int i = 0; i < 32; i++) {
        key_a.key[i] = (uint8_t)i;
        key_b.key[i] = (uint8_t)(0xa0 + i);
    }
}

/* Two writers' sections, sealed with `k` (NULL: plain) under the data key dk_seed * 32... */
static void encode2(const wire_key *k, uint8_t dk_seed, int comp, int pad, wire_segment_out *out)
{
    static tsec a, b;
    tsec_build(&a, "writer-alpha", 100, 20, 4, pad);
    tsec_build(&b, "writer-beta", 0, 9, 3, pad);
    wire_section_in in[2] = {a.in, b.in};
    uint8_t dk[32];
    for (int i = 0; i < 32; i++) dk[i] = (uint8_t)(dk_seed + i);
    wire_seg_opts o = {.run_id = "run-0001", .segment_no = 7, .created_ms = 1700000000000ull,
                       .compression = comp, .seal_key = k, .seal_data_key = k ? dk : NULL};
    wire_err e = {{0}};
    cr_assert_eq(wire_segment_encode(&o, in, 2, out, &e), 0, "%s", e.msg);
    free(a.pending);
    free(b.pending);
}

/* Every record of every section, whole sections: "w:seq:kg:payload;" lines into acc. */
static int read_all(const uint8_t *buf, size_t len, const wire_keyring *ring, char *acc, size_t cap,
                    wire_err *e)
{
    wire_index *ix;
    int rc = wire_segment_open_keyed(buf, len, ring, &ix, e);
    if (rc < 0) return rc;
    size_t used = 0;
    for (size_t i = 0; i < wire_index_nsections(ix) && rc >= 0; i++) {
        const wire_section_info *s = wire_index_section(ix, i);
        wire_iter *it;
        rc = wire_iter_open(s, buf + s->offset, 0, s->stored_len, 0, UINT64_MAX, 0, UINT32_MAX, &it, e);
        if (rc < 0) break;
        wire_record r;
        while ((rc = wire_iter_next(it, &r, e)) == 1)
            used += (size_t)snprintf(acc + used, cap - used, "%s:%llu:%u:%.*s;", s->writer_id,
                                     (unsigned long long)r.seq, r.key_group, (int)r.len, (const char *)r.data);
        wire_iter_free(it);
    }
    wire_index_free(ix);
    return rc;
}

Test(wire_seal, round_trips_equal_the_plain_segment_with_and_without_compression)
{
    keys_init();
    wire_keyring ring = {&key_a, 1};
    for (int comp = WIRE_COMP_NONE; comp <= WIRE_COMP_ZSTD; comp++) {
        wire_segment_out p, s;
        encode2(NULL, 0, comp, 1, &p);
        encode2(&key_a, 9, comp, 1, &s);
        static char want[65536], got[65536];
        wire_err e = {{0}};
        cr_assert_eq(read_all(p.buf, p.len, NULL, want, sizeof want, &e), 0, "%s", e.msg);
        cr_assert_eq(read_all(s.buf, s.len, &ring, got, sizeof got, &e), 0, "comp %d: %s", comp, e.msg);
        cr_assert_str_eq(got, want, "comp %d", comp);
        wire_index *ix;
        cr_assert_eq(wire_segment_open_keyed(s.buf, s.len, &ring, &ix, &e), 0);
        cr_assert_str_eq(wire_index_key_id(ix), "key-A.2026");
        if (comp != WIRE_COMP_NONE)   /* compress, then encrypt: the padded records shrink */
            cr_assert_eq(wire_index_section(ix, 0)->compression, comp);
        wire_index_free(ix);
        char id[WIRE_KEY_ID_MAX + 1];
        cr_assert_eq(wire_footer_key_id(s.buf + s.footer_offset, s.footer_len, id), 1);
        cr_assert_str_eq(id, "key-A.2026");
        cr_assert_eq(wire_footer_key_id(p.buf + p.footer_offset, p.footer_len, id), 0);
        wire_segment_out_free(&p);
        wire_segment_out_free(&s);
    }
}

/* A key-group-filtered read of one section from just the ranges it needs (gaps unfilled). */
static int read_kg(const wire_segment_out *s, const wire_keyring *ring, size_t sec, uint32_t kg, char *acc,
                   size_t cap, wire_err *e)
{
    wire_index *ix;
    int rc = wire_index_parse_keyed(s->buf + s->footer_offset, s->footer_len, s->footer_crc, s->footer_offset,
                                    s->len, ring, &ix, e);
    if (rc < 0) return rc;
    const wire_section_info *si = wire_index_section(ix, sec);
    uint64_t off[2], len[2];
    int n = wire_section_ranges(si, kg, kg, off, len);
    uint64_t base = off[0], span = off[n - 1] + len[n - 1] - off[0];
    uint8_t *buf = malloc(span);
    memset(buf, 0xEE, span);   /* what was never fetched */
    for (int i = 0; i < n; i++) memcpy(buf + (off[i] - base), s->buf + si->offset + off[i], len[i]);
    wire_iter *it;
    rc = wire_iter_open(si, buf, base, span, 0, UINT64_MAX, kg, kg, &it, e);
    size_t used = 0;
    if (rc == 0) {
        wire_record r;
        while ((rc = wire_iter_next(it, &r, e)) == 1)
            used += (size_t)snprintf(acc + used, cap - used, "%llu:%u:%.*s;", (unsigned long long)r.seq,
                                     r.key_group, (int)r.len, (const char *)r.data);
        wire_iter_free(it);
    }
    free(buf);
    wire_index_free(ix);
    return rc;
}

Test(wire_seal, key_group_ranges_read_only_their_runs_of_an_encrypted_section)
{
    keys_init();
    wire_keyring ring = {&key_a, 1};
    wire_segment_out p, s;
    encode2(NULL, 0, WIRE_COMP_NONE, 0, &p);
    encode2(&key_a, 3, WIRE_COMP_NONE, 0, &s);
    for (uint32_t kg = 0; kg < 4; kg++) {
        char want[8192], got[8192];
        wire_err e = {{0}};
        cr_assert_eq(read_kg(&p, NULL, 0, kg, want, sizeof want, &e), 0, "%s", e.msg);
        cr_assert_eq(read_kg(&s, &ring, 0, kg, got, sizeof got, &e), 0, "kg %u: %s", kg, e.msg);
        cr_assert_str_eq(got, want, "kg %u", kg);
    }
    wire_segment_out_free(&p);
    wire_segment_out_free(&s);
}

Test(wire_seal, wrong_unknown_and_missing_keys_are_named_errors_before_any_plaintext)
{
    keys_init();
    wire_segment_out s;
    encode2(&key_a, 1, WIRE_COMP_NONE, 0, &s);
    wire_index *ix;
    wire_err e = {{0}};
    /* the same id with other key bytes */
    wire_key wrong = key_a;
    wrong.key[0] ^= 1;
    wire_keyring ring = {&wrong, 1};
    cr_assert_eq(wire_segment_open_keyed(s.buf, s.len, &ring, &ix, &e), DSTL_ECRYPTO);
    cr_assert(strstr(e.msg, "key id 'key-A.2026' does not unwrap"), "%s", e.msg);
    /* a key file without the id */
    ring = (wire_keyring){&key_b, 1};
    cr_assert_eq(wire_segment_open_keyed(s.buf, s.len, &ring, &ix, &e), DSTL_ECRYPTO);
    cr_assert(strstr(e.msg, "key id 'key-A.2026', which the key file does not list"), "%s", e.msg);
    /* no key file */
    cr_assert_eq(wire_segment_open(s.buf, s.len, &ix, &e), DSTL_ECRYPTO);
    cr_assert(strstr(e.msg, "no key file is configured"), "%s", e.msg);
    /* both keys listed (rotation): found by id */
    wire_key both[2] = {key_b, key_a};
    ring = (wire_keyring){both, 2};
    cr_assert_eq(wire_segment_open_keyed(s.buf, s.len, &ring, &ix, &e), 0, "%s", e.msg);
    wire_index_free(ix);
    wire_segment_out_free(&s);
}

Test(wire_seal, no_plaintext_payload_writer_id_or_key_in_the_bytes)
{
    keys_init();
    for (int comp = WIRE_COMP_NONE; comp <= WIRE_COMP_ZSTD; comp++) {
        wire_segment_out s;
        encode2(&key_a, 5, comp, 1, &s);
        cr_assert_null(memmem(s.buf, s.len, MARK, strlen(MARK)), "payload in clear (comp %d)", comp);
        cr_assert_null(memmem(s.buf, s.len, "writer-alpha", 12), "writer id in clear (comp %d)", comp);
        cr_assert_null(memmem(s.buf, s.len, key_a.key, 32), "key bytes in the segment");
        uint8_t dk[32];
        for (int i = 0; i < 32; i++) dk[i] = (uint8_t)(5 + i);
        cr_assert_null(memmem(s.buf, s.len, dk, 32), "data key in clear");
        cr_assert_null(memmem(s.buf, s.len, dk, 8), "data key prefix in clear");
        wire_segment_out_free(&s);
    }
}

/* Opens and reads everything; 0 when all of it verified. */
static int verify_all(const uint8_t *b, size_t n, const wire_keyring *ring)
{
    static char acc[65536];
    wire_err e = {{0}};
    return read_all(b, n, ring, acc, sizeof acc, &e);
}

Test(wire_seal, every_bit_flip_of_an_encrypted_segment_is_detected)
{
    keys_init();
    wire_keyring ring = {&key_a, 1};
    for (int comp = WIRE_COMP_NONE; comp <= WIRE_COMP_LZ4; comp++) {
        wire_segment_out s;
        encode2(&key_a, 2, comp, comp != WIRE_COMP_NONE, &s);
        cr_assert_eq(verify_all(s.buf, s.len, &ring), 0);
        for (size_t bit = 0; bit < s.len * 8; bit++) {
            s.buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            int rc = verify_all(s.buf, s.len, &ring);
            cr_assert(rc == DSTL_ECORRUPT || rc == DSTL_ECRYPTO, "comp %d: flip of bit %zu (byte %zu) -> %d",
                      comp, bit, bit / 8, rc);
            s.buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
        wire_segment_out_free(&s);
    }
}

/* The run of key group kg in section 0 of s: its offset in the segment and length. */
static void run_of(const wire_segment_out *s, const wire_keyring *ring, uint32_t kg, uint64_t *off, uint64_t *len)
{
    wire_index *ix;
    wire_err e = {{0}};
    cr_assert_eq(wire_index_parse_keyed(s->buf + s->footer_offset, s->footer_len, s->footer_crc, s->footer_offset,
                                        s->len, ring, &ix, &e), 0, "%s", e.msg);
    const wire_section_info *si = wire_index_section(ix, 0);
    *len = 0;
    for (size_t r = 0; r < si->nruns; r++)
        if (!si->runs[r].is_meta && si->runs[r].key_group == kg) {
            *off = si->offset + si->runs[r].offset;
            *len = si->runs[r].len;
        }
    cr_assert(*len);
    wire_index_free(ix);
}

Test(wire_seal, a_run_copied_from_another_segment_or_swapped_is_detected)
{
    keys_init();
    wire_keyring ring = {&key_a, 1};
    wire_segment_out x, y;
    encode2(&key_a, 11, WIRE_COMP_NONE, 0, &x);   /* same records, same layout, other data key */
    encode2(&key_a, 12, WIRE_COMP_NONE, 0, &y);
    cr_assert_eq(x.len, y.len);
    uint64_t off, len;
    run_of(&x, &ring, 2, &off, &len);
    memcpy(x.buf + off, y.buf + off, len);   /* y's run of kg 2 into x: a CRC-free ranged read must refuse it */
    char acc[4096];
    wire_err e = {{0}};
    cr_assert_eq(read_kg(&x, &ring, 0, 2, acc, sizeof acc, &e), DSTL_ECRYPTO);
    char where[64];
    snprintf(where, sizeof where, "key-group run at segment offset %llu", (unsigned long long)off);
    cr_assert(strstr(e.msg, "section 0 (writer-alpha)") && strstr(e.msg, where), "%s", e.msg);
    cr_assert_neq(verify_all(x.buf, x.len, &ring), 0);
    wire_segment_out_free(&x);

    /* kg 1 and kg 2 runs of one segment have the same length (4 records of one size each): swap them */
    encode2(&key_a, 13, WIRE_COMP_NONE, 0, &x);
    uint64_t o1, l1, o2, l2;
    run_of(&x, &ring, 1, &o1, &l1);
    run_of(&x, &ring, 2, &o2, &l2);
    cr_assert_eq(l1, l2);
    uint8_t *tmp = malloc(l1);
    memcpy(tmp, x.buf + o1, l1);
    memcpy(x.buf + o1, x.buf + o2, l1);
    memcpy(x.buf + o2, tmp, l1);
    free(tmp);
    cr_assert_eq(read_kg(&x, &ring, 0, 1, acc, sizeof acc, &e), DSTL_ECRYPTO, "%s", e.msg);
    cr_assert_eq(read_kg(&x, &ring, 0, 2, acc, sizeof acc, &e), DSTL_ECRYPTO, "%s", e.msg);
    wire_segment_out_free(&x);
    wire_segment_out_free(&y);
}

Test(wire_seal, matches_golden_bytes)
{
    keys_init();
    wire_segment_out s;
    encode2(&key_a, 0x40, WIRE_COMP_NONE, 0, &s);
    if (wg_update()) {
        wg_write_hex("wire_segment_enc_v1.hex",
                     "wire_segment_enc_v1: tests/test_wire_seal.c encode2(key-A.2026 = 00..1f, data key 40..5f)",
                     s.buf, s.len);
        char path[512];
        snprintf(path, sizeof path, "tests/fuzz/corpus/fuzz_wire_segment/golden_sealed");
        cr_assert_eq(t_write_file(path, s.buf, s.len), 0);
        cr_assert_fail("golden file rewritten; rerun without DSTL_GOLDEN_UPDATE");
    }
    wg_assert_golden("wire_segment_enc_v1.hex", s.buf, s.len);
    /* the documented layout: header flag 1, trailer flag 1, the key block at the footer */
    cr_assert_eq(s.buf[10], 1);
    cr_assert_eq(s.buf[s.len - 32 + 6], 1);
    cr_assert_arr_eq(s.buf + s.footer_offset, "DSTK", 4);
    cr_assert_eq(s.buf[s.footer_offset + 5], strlen("key-A.2026"));
    cr_assert_arr_eq(s.buf + s.footer_offset + 16, "key-A.2026", 10);
    cr_assert_arr_eq(s.buf + s.footer_offset + 26, "run-0001", 8);
    wire_segment_out_free(&s);
}

Test(wire_seal, encoder_refuses_half_given_or_bad_sealing_options)
{
    keys_init();
    tsec a;
    tsec_build(&a, "w", 0, 3, 2, 0);
    uint8_t dk[32] = {0};
    wire_seg_opts o = {.run_id = "r", .segment_no = 1, .seal_key = &key_a};
    wire_segment_out out;
    wire_err e = {{0}};
    cr_assert_eq(wire_segment_encode(&o, &a.in, 1, &out, &e), -EINVAL);
    wire_key bad = key_a;
    snprintf(bad.id, sizeof bad.id, "no spaces");
    o.seal_key = &bad;
    o.seal_data_key = dk;
    cr_assert_eq(wire_segment_encode(&o, &a.in, 1, &out, &e), -EINVAL);
    free(a.pending);
}

/* A padded segment (wire_seg_opts.pad_*) is sealed with its padding inside the encrypted
 * footer: it opens under the key and reads as the unpadded one, with and without compression;
 * without the key it is refused as before. */
Test(wire_seal, padded_segments_seal_and_read_as_unpadded_ones)
{
    keys_init();
    wire_keyring ring = {&key_a, 1};
    for (int comp = WIRE_COMP_NONE; comp <= WIRE_COMP_ZSTD; comp++) {
        tsec a;
        tsec_build(&a, "writer-alpha", 100, 20, 4, 1);
        uint8_t dk[32] = {5};
        wire_seg_opts o = {.run_id = "run-0001", .segment_no = 7, .created_ms = 1700000000000ull,
                           .compression = comp, .seal_key = &key_a, .seal_data_key = dk};
        wire_seg_opts po = o;
        po.pad_align = 4096;
        po.pad_limit = 65536;
        wire_segment_out s, p;
        wire_err e = {{0}};
        cr_assert_eq(wire_segment_encode(&o, &a.in, 1, &s, &e), 0, "%s", e.msg);
        cr_assert_eq(wire_segment_encode(&po, &a.in, 1, &p, &e), 0, "%s", e.msg);
        cr_assert_lt(s.len, 4096u);
        cr_assert_eq(p.len, 4096u, "comp %d: %zu bytes", comp, p.len);
        static char want[65536], got[65536];
        cr_assert_eq(read_all(s.buf, s.len, &ring, want, sizeof want, &e), 0, "%s", e.msg);
        cr_assert_eq(read_all(p.buf, p.len, &ring, got, sizeof got, &e), 0, "comp %d: %s", comp, e.msg);
        cr_assert_str_eq(got, want, "comp %d", comp);
        wire_index *ix;
        cr_assert_eq(wire_segment_open(p.buf, p.len, &ix, &e), DSTL_ECRYPTO);
        wire_segment_out_free(&s);
        wire_segment_out_free(&p);
        free(a.pending);
    }
}

/* The pipeline seals each section as it joins the open batch (wire_seg_add): the same bytes
 * as the one encode under the same data key, with and without compression. */
Test(wire_seal, a_sealed_segment_built_section_by_section_is_the_one_encode_makes)
{
    keys_init();
    for (int comp = WIRE_COMP_NONE; comp <= WIRE_COMP_ZSTD; comp++) {
        wire_segment_out one, inc;
        encode2(&key_a, 5, comp, 1, &one);
        tsec a, b;
        tsec_build(&a, "writer-alpha", 100, 20, 4, 1);
        tsec_build(&b, "writer-beta", 0, 9, 3, 1);
        uint8_t dk[32];
        for (int i = 0; i < 32; i++) dk[i] = (uint8_t)(5 + i);
        wire_seg_opts o = {.run_id = "run-0001", .segment_no = 7, .created_ms = 1700000000000ull,
                           .compression = comp, .seal_key = &key_a, .seal_data_key = dk};
        size_t cap = one.len + 65536;
        uint8_t *buf = malloc(cap);
        wire_seg_builder *bl;
        wire_err e = {{0}};
        cr_assert_eq(wire_seg_begin(&o, buf, cap, &bl, &e), 0, "%s", e.msg);
        memset(dk, 0, sizeof dk);            /* read at begin only */
        cr_assert_eq(wire_seg_add(bl, &a.in, &e), 0, "%s", e.msg);
        cr_assert_eq(wire_seg_add(bl, &b.in, &e), 0, "%s", e.msg);
        cr_assert_eq(wire_seg_finish(bl, &inc, &e), 0, "%s", e.msg);
        cr_assert_eq(inc.len, one.len);
        cr_assert(memcmp(inc.buf, one.buf, one.len) == 0, "compression %d: the bytes differ", comp);
        wire_keyring ring = {&key_a, 1};
        cr_assert_eq(verify_all(inc.buf, inc.len, &ring), 0);
        free(a.pending);
        free(b.pending);
        wire_segment_out_free(&one);
        wire_segment_out_free(&inc);
    }
}
