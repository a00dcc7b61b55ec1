/*
 * tests/test_wire_handle.c — handle bytes (wire/FORMAT.md, "Handle"): golden bytes, round
 * trips, and rejection of random bytes, every bit flip, every truncation and forged handles
 * whose CRC is valid but whose fields are not.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "wire_golden.h"
#include "wire/dstl.pb-c.h"
#include "wire/wire.h"

static wire_seg_ref sample_segs[2] = {
    {.name = "run-1/00000042.seg", .object_len = 293, .footer_offset = 85, .footer_len = 176,
     .footer_crc = 0x11223344},
    {.name = "run-1/00000043.seg", .object_len = 5000, .footer_offset = 4000, .footer_len = 968,
     .footer_crc = 0x55667788},
};
static wire_piece sample_pieces[2] = {
    {.seg = 0, .section = 0, .offset = 32, .stored_len = 53, .crc = 0xa1b2c3d4, .seq_first = 10,
     .seq_end = 15, .data_bytes = 30, .kg_first = 1, .kg_last = 3},
    {.seg = 1, .section = 4, .offset = 1000, .stored_len = 3000, .crc = 0x01020304,
     .seq_first = 15, .seq_end = 400, .data_bytes = 2500, .kg_first = 0, .kg_last = 127},
};

static wire_handle sample(void)
{
    return (wire_handle){.storage_id = "run-1", .writer_id = "writer-a",
                         .remote_uri = "s3://bucket/prefix", .checkpoint_id = 7, .from_seq = 10,
                         .to_seq = 400, .size = 2530, .segs = sample_segs, .nsegs = 2,
                         .pieces = sample_pieces, .npieces = 2};
}

static void encode_ok(const wire_handle *h, uint8_t **buf, size_t *len)
{
    wire_err err = {{0}};
    void *b;
    int rc = wire_handle_encode(h, &b, len, &err);
    cr_assert_eq(rc, 0, "encode: %d %s", rc, err.msg);
    *buf = b;
}

static void assert_same(const wire_handle *a, const wire_handle *b)
{
    cr_assert_str_eq(a->storage_id, b->storage_id);
    cr_assert_str_eq(a->writer_id, b->writer_id);
    cr_assert_str_eq(a->remote_uri ? a->remote_uri : "", b->remote_uri ? b->remote_uri : "");
    cr_assert_eq(a->checkpoint_id, b->checkpoint_id);
    cr_assert_eq(a->from_seq, b->from_seq);
    cr_assert_eq(a->to_seq, b->to_seq);
    cr_assert_eq(a->size, b->size);
    cr_assert_eq(a->writer_incarnation, b->writer_incarnation);
    cr_assert_eq(a->nsegs, b->nsegs);
    cr_assert_eq(a->npieces, b->npieces);
    for (size_t i = 0; i < a->nsegs; i++) {
        cr_assert_str_eq(a->segs[i].name, b->segs[i].name);
        cr_assert_eq(a->segs[i].object_len, b->segs[i].object_len);
        cr_assert_eq(a->segs[i].footer_offset, b->segs[i].footer_offset);
        cr_assert_eq(a->segs[i].footer_len, b->segs[i].footer_len);
        cr_assert_eq(a->segs[i].footer_crc, b->segs[i].footer_crc);
    }
    for (size_t i = 0; i < a->npieces; i++)
        cr_assert_eq(memcmp(&a->pieces[i], &b->pieces[i], sizeof a->pieces[i]), 0, "piece %zu", i);
}

Test(wire_handle, matches_golden_bytes)
{
    wire_handle h = sample();
    uint8_t *b;
    size_t n;
    encode_ok(&h, &b, &n);
    if (wg_update()) {
        wg_write_hex("wire_handle_v1.hex", "wire_handle_v1: tests/test_wire_handle.c sample()", b, n);
        cr_assert_eq(t_write_file("tests/fuzz/corpus/fuzz_wire_handle/golden", b, n), 0);
        cr_assert_fail("golden file rewritten; rerun without DSTL_GOLDEN_UPDATE");
    }
    wg_assert_golden("wire_handle_v1.hex", b, n);
    size_t gn;
    uint8_t *g = wg_read_hex("wire_handle_v1.hex", &gn);
    cr_assert_eq(memcmp(g, "DSTH\x01\x00\x00\x00", 8), 0, "magic, version 1, flags 0");
    wire_handle *d;
    wire_err err = {{0}};
    cr_assert_eq(wire_handle_decode(g, gn, &d, &err), 0, "%s", err.msg);
    assert_same(&h, d);
    wire_handle_free(d);
    free(g);
    free(b);
}

Test(wire_handle, round_trips_and_dups)
{
    wire_handle h = sample();
    uint8_t *b;
    size_t n;
    encode_ok(&h, &b, &n);
    wire_handle *d;
    wire_err err = {{0}};
    cr_assert_eq(wire_handle_decode(b, n, &d, &err), 0, "%s", err.msg);
    assert_same(&h, d);
    wire_handle *c = wire_handle_dup(d);
    cr_assert_not_null(c);
    assert_same(d, c);
    cr_assert_neq(c->writer_id, d->writer_id, "a deep copy");
    wire_handle_free(d);
    /* the copy is independent: it re-encodes to the same bytes */
    uint8_t *b2;
    size_t n2;
    encode_ok(c, &b2, &n2);
    cr_assert_eq(n2, n);
    cr_assert_eq(memcmp(b, b2, n), 0);
    wire_handle_free(c);
    wire_handle_free(NULL);
    cr_assert_null(wire_handle_dup(NULL));
    free(b);
    free(b2);
}

Test(wire_handle, round_trips_empty_and_local_only)
{
    wire_handle h = {.storage_id = "s", .writer_id = "w", .remote_uri = NULL, .from_seq = 5, .to_seq = 5};
    uint8_t *b;
    size_t n;
    encode_ok(&h, &b, &n);
    wire_handle *d;
    cr_assert_eq(wire_handle_decode(b, n, &d, NULL), 0);
    cr_assert_str_eq(d->remote_uri, "", "local only: empty remote");
    cr_assert_eq(d->npieces, 0);
    cr_assert_eq(d->from_seq, 5);
    wire_handle_free(d);
    free(b);
}

Test(wire_handle, rejects_every_bit_flip_and_truncation)
{
    wire_handle h = sample();
    uint8_t *b;
    size_t n;
    encode_ok(&h, &b, &n);
    wire_handle *d;
    wire_err err;
    for (size_t bit = 0; bit < 8 * n; bit++) {
        b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        int rc = wire_handle_decode(b, n, &d, &err);
        cr_assert_eq(rc, DSTL_ECORRUPT, "bit %zu accepted (%d)", bit, rc);
        cr_assert(strstr(err.msg, "offset"), "%s", err.msg);
        b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    for (size_t k = 0; k < n; k++) {
        uint8_t *p = malloc(k ? k : 1);   /* exact size for ASan */
        memcpy(p, b, k);
        cr_assert_eq(wire_handle_decode(p, k, &d, &err), DSTL_ECORRUPT, "truncation to %zu", k);
        free(p);
    }
    free(b);
}

/* Magic + version header and CRC around arbitrary protobuf bytes. */
static uint8_t *seal(const uint8_t *pb, size_t pblen, uint16_t version, size_t *n)
{
    *n = 8 + pblen + 4;
    uint8_t *b = malloc(*n);
    memcpy(b, "DSTH", 4);
    b[4] = (uint8_t)version;
    b[5] = (uint8_t)(version >> 8);
    b[6] = b[7] = 0;
    if (pblen) memcpy(b + 8, pb, pblen);
    uint32_t crc = wire_crc32c(0, b, 8 + pblen);
    memcpy(b + 8 + pblen, &crc, 4);
    return b;
}

Test(wire_handle, rejects_random_bytes, .timeout = 30)
{
    uint64_t st = 77;
    uint8_t buf[512];
    wire_handle *d;
    for (int i = 0; i < 20000; i++) {
        size_t n = t_rand(&st) % sizeof buf;
        for (size_t k = 0; k < n; k++) buf[k] = (uint8_t)t_rand(&st);
        if (i % 4 == 0 && n >= 4) memcpy(buf, "DSTH", 4);   /* past the magic, caught by the CRC */
        cr_assert_eq(wire_handle_decode(buf, n, &d, NULL), DSTL_ECORRUPT, "random buffer %d", i);
        /* random protobuf bytes behind a valid header and CRC: parse or validation rejects */
        size_t sn;
        uint8_t *s = seal(buf, n, 1, &sn);
        cr_assert_eq(wire_handle_decode(s, sn, &d, NULL), DSTL_ECORRUPT, "sealed random %d", i);
        free(s);
    }
}

typedef void (*handle_edit)(wire_handle *h, wire_seg_ref *segs, wire_piece *pcs);
static void x_gap(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)h, (void)s, p[1].seq_first = 16; }
static void x_overlap(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)h, (void)s, p[1].seq_first = 14; }
static void x_from(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)s, (void)p, h->from_seq = 9; }
static void x_to(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)s, (void)p, h->to_seq = 401; }
static void x_empty_piece(wire_handle *h, wire_seg_ref *s, wire_piece *p)
{
    (void)s;
    p[0].seq_end = p[0].seq_first = 10;
    h->from_seq = 10;
    p[1].seq_first = 10;
}
static void x_seg_index(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)h, (void)s, p[1].seg = 2; }
static void x_piece_past(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)h, (void)s, p[1].stored_len = 3001; }
static void x_piece_header(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)h, (void)s, p[0].offset = 31; }
static void x_piece_zero(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)h, (void)s, p[0].stored_len = 0; }
static void x_size(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)s, (void)p, h->size++; }
static void x_storage(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)s, (void)p, h->storage_id = ""; }
static void x_writer(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)s, (void)p, h->writer_id = ""; }
static void x_footer(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)h, (void)p, s[0].object_len = 294; }
static void x_footer0(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)h, (void)p, s[0].footer_len = 0; }
static void x_name_dotdot(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)h, (void)p, s[0].name = "../etc/x"; }
static void x_name_abs(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)h, (void)p, s[0].name = "/etc/x"; }
static void x_name_empty(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)h, (void)p, s[1].name = ""; }
static void x_name_dslash(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)h, (void)p, s[1].name = "a//b"; }
static void x_name_dot(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)h, (void)p, s[1].name = "a/./b"; }
static void x_name_ctrl(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)h, (void)p, s[1].name = "a\nb"; }
static void x_name_bslash(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)h, (void)p, s[1].name = "a\\b"; }
static void x_empty_range(wire_handle *h, wire_seg_ref *s, wire_piece *p) { (void)s, (void)p, h->to_seq = h->from_seq; }

/* Each edit makes a handle that encode refuses (-EINVAL) and that, written anyway with a valid
 * CRC, decode refuses (DSTL_ECORRUPT). */
Test(wire_handle, rejects_invalid_fields)
{
    handle_edit edits[] = {x_gap, x_overlap, x_from, x_to, x_empty_piece, x_seg_index, x_piece_past,
                           x_piece_header, x_piece_zero, x_size, x_storage, x_writer, x_footer,
                           x_footer0, x_name_dotdot, x_name_abs, x_name_empty, x_name_dslash,
                           x_name_dot, x_name_ctrl, x_name_bslash, x_empty_range};
    for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
        wire_seg_ref segs[2];
        wire_piece pcs[2];
        memcpy(segs, sample_segs, sizeof segs);
        memcpy(pcs, sample_pieces, sizeof pcs);
        wire_handle h = sample();
        h.segs = segs;
        h.pieces = pcs;
        edits[e](&h, segs, pcs);
        void *b;
        size_t n;
        wire_err err = {{0}};
        cr_assert_eq(wire_handle_encode(&h, &b, &n, &err), -EINVAL, "edit %zu encoded", e);
        cr_assert_neq(err.msg[0], '\0');
        /* the same fields as protobuf, sealed with a valid CRC */
        Dstl__Handle m;
        dstl__handle__init(&m);
        Dstl__SegmentRef rs[2], *rsp[2] = {&rs[0], &rs[1]};
        Dstl__Piece rp[2], *rpp[2] = {&rp[0], &rp[1]};
        m.format_version = 1;
        m.storage_id = h.storage_id;
        m.writer_id = h.writer_id;
        m.remote_uri = h.remote_uri;
        m.checkpoint_id = h.checkpoint_id;
        m.from_seq = h.from_seq;
        m.to_seq = h.to_seq;
        m.size = h.size;
        for (int i = 0; i < 2; i++) {
            dstl__segment_ref__init(&rs[i]);
            rs[i].name = segs[i].name;
            rs[i].object_len = segs[i].object_len;
            rs[i].footer_offset = segs[i].footer_offset;
            rs[i].footer_len = segs[i].footer_len;
            rs[i].footer_crc = segs[i].footer_crc;
            dstl__piece__init(&rp[i]);
            rp[i].segment = pcs[i].seg;
            rp[i].section = pcs[i].section;
            rp[i].offset = pcs[i].offset;
            rp[i].stored_len = pcs[i].stored_len;
            rp[i].seq_first = pcs[i].seq_first;
            rp[i].seq_end = pcs[i].seq_end;
            rp[i].data_bytes = pcs[i].data_bytes;
        }
        m.n_segments = 2;
        m.segments = rsp;
        m.n_pieces = 2;
        m.pieces = rpp;
        uint8_t pb[1024];
        size_t pblen = dstl__handle__pack(&m, pb);
        size_t sn;
        uint8_t *s = seal(pb, pblen, 1, &sn);
        wire_handle *d;
        int rc = wire_handle_decode(s, sn, &d, &err);
        cr_assert_eq(rc, DSTL_ECORRUPT, "edit %zu decoded (%d)", e, rc);
        free(s);
        if (e == 0) {   /* and the unedited fields decode (the harness itself is right) */
            memcpy(pcs, sample_pieces, sizeof pcs);
            rp[1].seq_first = 15;
            pblen = dstl__handle__pack(&m, pb);
            s = seal(pb, pblen, 1, &sn);
            cr_assert_eq(wire_handle_decode(s, sn, &d, &err), 0, "%s", err.msg);
            wire_handle_free(d);
            s[4] = 2;   /* a newer version, CRC fixed: refused by version */
            uint32_t crc = wire_crc32c(0, s, sn - 4);
            memcpy(s + sn - 4, &crc, 4);
            cr_assert_eq(wire_handle_decode(s, sn, &d, &err), DSTL_ECORRUPT);
            cr_assert(strstr(err.msg, "version 2"), "%s", err.msg);
            free(s);
        }
    }
}

/* The writer incarnation (field 11) is optional: a handle that has one round-trips it, its bytes
 * are the v1 bytes plus that one field, and the v1 golden bytes, written before it existed,
 * still decode, with incarnation 0, and re-encode to themselves. */
Test(wire_handle, writer_incarnation_round_trips_and_v1_bytes_decode_as_zero)
{
    wire_handle h = sample();
    h.writer_incarnation = 300;              /* a two-byte varint */
    uint8_t *b;
    size_t n;
    encode_ok(&h, &b, &n);
    wire_handle *d;
    wire_err err = {{0}};
    cr_assert_eq(wire_handle_decode(b, n, &d, &err), 0, "%s", err.msg);
    cr_expect_eq(d->writer_incarnation, 300);
    assert_same(&h, d);
    wire_handle *c = wire_handle_dup(d);
    cr_assert_not_null(c);
    cr_expect_eq(c->writer_incarnation, 300, "dup keeps the incarnation");
    wire_handle_free(c);
    wire_handle_free(d);

    size_t gn;
    uint8_t *g = wg_read_hex("wire_handle_v1.hex", &gn);
    /* tag 11 varint (0x58), 300 = ac 02: three bytes more than v1, the same before them */
    cr_expect_eq(n, gn + 3, "%zu bytes, v1 %zu", n, gn);
    cr_expect_eq(memcmp(b, g, 8), 0, "same magic, version 1, flags 0");
    cr_expect_eq(memcmp(b + n - 7, "\x58\xac\x02", 3), 0, "field 11 is last, after the pieces");
    cr_expect_eq(memcmp(b + 8, g + 8, gn - 12), 0, "the v1 fields are unchanged");
    free(b);

    cr_assert_eq(wire_handle_decode(g, gn, &d, &err), 0, "v1 golden: %s", err.msg);
    cr_expect_eq(d->writer_incarnation, 0, "v1 bytes decode with incarnation 0");
    encode_ok(d, &b, &n);
    cr_expect_eq(n, gn);
    cr_expect_eq(memcmp(b, g, gn), 0, "a v1 handle re-encodes to its own bytes");
    wire_handle_free(d);
    free(b);
    free(g);
}
