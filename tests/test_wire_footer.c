/*
 * tests/test_wire_footer.c — footer_put_section (wire/footer_enc.c) writes a Section in one
 * pass when its bound fits and sizes it first near the end of the buffer: both give the bytes
 * footer_section_size counts, protobuf-c reads them back as the same fields (runs with tags of
 * 0, 16 and more bytes, values at every varint width), and a buffer one byte short gets
 * nothing written.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "wire/dstl.pb-c.h"
#include "wire/wire_int.h"

static uint64_t rng = 0xf00;

/* A value of a random varint width (0 .. 64 bits), so every length of every field shows up. */
static uint64_t any_width(void)
{
    unsigned bits = (unsigned)(t_rand(&rng) % 65);
    return bits == 0 ? 0 : t_rand(&rng) >> (64 - bits);
}

static const uint8_t tag_bytes[64] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};

static void random_section(fpb_section *s, fpb_run *runs, size_t nruns, const char *wid)
{
    *s = (fpb_section){.writer_id = (const uint8_t *)wid, .writer_id_len = strlen(wid),
                       .seq_first = any_width(), .seq_end = any_width(), .record_count = any_width(),
                       .data_bytes = any_width(), .kg_first = (uint32_t)any_width(),
                       .kg_last = (uint32_t)any_width(), .offset = any_width(), .stored_len = any_width(),
                       .raw_len = any_width(), .compression = (uint32_t)(t_rand(&rng) % 3),
                       .crc = (uint32_t)any_width(), .encryption = (uint32_t)(t_rand(&rng) % 2),
                       .nruns = nruns};
    if (t_rand(&rng) % 2) {
        s->tag = tag_bytes;
        s->tag_len = 16;
    }
    static const size_t tag_lens[] = {0, 16, 17, 40};
    for (size_t i = 0; i < nruns; i++) {
        size_t tl = tag_lens[t_rand(&rng) % 4];
        runs[i] = (fpb_run){.key_group = (uint32_t)any_width(), .crc = (uint32_t)any_width(),
                            .is_meta = (int)(t_rand(&rng) % 2), .offset = any_width(), .len = any_width(),
                            .count = any_width(), .tag = tl ? tag_bytes : NULL, .tag_len = tl};
    }
}

static void same_fields(const Dstl__Section *m, const fpb_section *s, const fpb_run *runs, size_t nruns, int c)
{
    cr_assert_eq(strlen(m->writer_id), s->writer_id_len, "case %d", c);
    cr_assert_eq(memcmp(m->writer_id, s->writer_id, s->writer_id_len), 0, "case %d", c);
    cr_assert(m->seq_first == s->seq_first && m->seq_end == s->seq_end && m->record_count == s->record_count &&
                  m->data_bytes == s->data_bytes && m->kg_first == s->kg_first && m->kg_last == s->kg_last &&
                  m->offset == s->offset && m->stored_len == s->stored_len && m->raw_len == s->raw_len &&
                  (uint32_t)m->compression == s->compression && m->crc32c == s->crc &&
                  (uint32_t)m->encryption == s->encryption && m->tag.len == s->tag_len,
              "case %d: a section field differs", c);
    cr_assert_eq(m->n_runs, nruns, "case %d", c);
    for (size_t i = 0; i < nruns; i++) {
        const Dstl__KeyGroupRun *r = m->runs[i];
        cr_assert(r->key_group == runs[i].key_group && r->is_meta == runs[i].is_meta &&
                      r->offset == runs[i].offset && r->len == runs[i].len && r->count == runs[i].count &&
                      r->crc32c == runs[i].crc && r->tag.len == runs[i].tag_len,
                  "case %d: run %zu differs", c, i);
        if (r->tag.len) cr_assert_eq(memcmp(r->tag.data, runs[i].tag, r->tag.len), 0, "case %d run %zu", c, i);
    }
}

Test(wire_footer, a_section_is_written_in_one_pass_or_sized_first_with_the_same_bytes)
{
    enum { MAXR = 70 };
    fpb_run runs[MAXR];
    for (int c = 0; c < 400; c++) {
        size_t nruns = (size_t)(t_rand(&rng) % MAXR);
        fpb_section s;
        random_section(&s, runs, nruns, c % 2 ? "w" : "a-writer-with-a-longer-id-0123456789");
        size_t n = footer_section_size(&s, runs, nruns);
        size_t big = n + 16384;
        uint8_t *one = malloc(big), *exact = malloc(n), *shy = malloc(n);
        /* room for the bound: one pass */
        uint8_t *e1 = footer_put_section(one, one + big, &s, runs, nruns);
        cr_assert_eq((size_t)(e1 - one), n, "case %d: one pass wrote %zu bytes, sized %zu", c, (size_t)(e1 - one), n);
        /* exactly its size: sized first */
        cr_assert_eq(footer_put_section(exact, exact + n, &s, runs, nruns), exact + n, "case %d", c);
        cr_assert_eq(memcmp(one, exact, n), 0, "case %d: the two ways wrote different bytes", c);
        /* a byte short: refused, nothing written */
        memset(shy, 0xa5, n);
        cr_assert_null(footer_put_section(shy, shy + n - 1, &s, runs, nruns), "case %d", c);
        for (size_t i = 0; i < n; i++) cr_assert_eq(shy[i], 0xa5, "case %d: byte %zu written", c, i);
        /* a footer of just this section, as protobuf reads it */
        Dstl__SegmentFooter *f = dstl__segment_footer__unpack(NULL, n, one);
        cr_assert_not_null(f, "case %d: does not unpack", c);
        cr_assert_eq(f->n_sections, 1, "case %d", c);
        same_fields(f->sections[0], &s, runs, nruns, c);
        cr_assert_eq(dstl__segment_footer__get_packed_size(f), n, "case %d: not protobuf's length", c);
        dstl__segment_footer__free_unpacked(f, NULL);
        free(one);
        free(exact);
        free(shy);
    }
}
