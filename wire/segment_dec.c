/*
 * wire/segment_dec.c — opens a segment: header, trailer, footer index (FORMAT.md).
 *
 * A reader fetches the fixed-size trailer (last 32 bytes), learns where the footer is, fetches
 * and parses the footer into a wire_index, and then reads only the sections — or, for
 * uncompressed sections, only the key-group runs — it needs (wire_section_range). Everything
 * that a later step trusts is checked here: CRCs, version, and every offset, length and count
 * against the bytes that exist, so the iterator (wire/iter.c) can index without re-checking.
 *
 * Pure; any thread; a wire_index is immutable after parsing and may be shared read-only.
 */
#include <errno.h>
#include <stdlib.h>

#include "wire/wire_int.h"

struct wire_index {
    char *names;                 /* the run id, then the writer ids the infos point to */
    uint64_t segment_no, created_ms;
    wire_section_info *secs;
    wire_kg_run *runs;
    size_t nsecs;
    wire_seal *seal;             /* encrypted segments: the data key (wiped on free) */
};

#define ULL(x) ((unsigned long long)(x))

int wire_trailer_parse(const void *trailer, size_t len, uint64_t object_len,
                       uint64_t *footer_offset, uint32_t *footer_len, uint32_t *footer_crc,
                       wire_err *err)
{
    if (!trailer || len < WIRE_SEG_TRAILER_LEN || object_len < WIRE_SEG_TRAILER_LEN)
        return wire_fail(err, DSTL_ECORRUPT, "segment of %llu bytes: no room for a %u-byte trailer",
                         ULL(object_len), WIRE_SEG_TRAILER_LEN);
    const uint8_t *t = (const uint8_t *)trailer + len - WIRE_SEG_TRAILER_LEN;
    uint64_t at = object_len - WIRE_SEG_TRAILER_LEN;
    if (memcmp(t + 24, WIRE_TRL_MAGIC, 8) != 0)
        return wire_fail(err, DSTL_ECORRUPT, "segment offset %llu: no trailer magic (torn or not a segment)",
                         ULL(at + 24));
    uint32_t crc = wire_crc32c(0, t + 4, WIRE_SEG_TRAILER_LEN - 4);
    if (crc != wire_le32(t))
        return wire_fail(err, DSTL_ECORRUPT, "segment offset %llu: trailer CRC32C %08x, computed %08x",
                         ULL(at), wire_le32(t), crc);
    uint16_t version = wire_le16(t + 4), flags = wire_le16(t + 6);
    if (version != WIRE_VERSION)
        return wire_fail(err, DSTL_ECORRUPT, "segment offset %llu: format version %u, this reader knows %u",
                         ULL(at + 4), version, WIRE_VERSION);
    if (flags & ~WIRE_SEG_FLAG_SEALED)
        return wire_fail(err, DSTL_ECORRUPT, "segment offset %llu: unknown trailer flags %#x",
                         ULL(at + 6), flags);
    uint64_t foff = wire_le64(t + 8);
    uint32_t flen = wire_le32(t + 16);
    if (object_len < 2 * WIRE_SEG_HEADER_LEN || foff < WIRE_SEG_HEADER_LEN || flen == 0 ||
        foff > at || flen != at - foff)
        return wire_fail(err, DSTL_ECORRUPT,
                         "segment offset %llu: footer [%llu, +%u) does not end at the trailer (%llu)",
                         ULL(at + 8), ULL(foff), flen, ULL(at));
    *footer_offset = foff;
    *footer_len = flen;
    *footer_crc = wire_le32(t + 20);
    return 0;
}

/* Checks one section's key-group runs (read from its message) and fills their wire_kg_run
 * copies. */
static int check_runs(const fpb_section *s, size_t i, const char *wid, int sealed, wire_kg_run *runs,
                      wire_err *err)
{
    /* A sealed uncompressed section has a tag per run; nothing else has run tags. */
    size_t want_tag = sealed && s->compression == WIRE_COMP_NONE ? 16 : 0;
    uint64_t off = 0, count = 0;
    int have_data = 0, rc;
    uint32_t prev_kg = 0, first_kg = 0;
    const uint8_t *p = s->msg, *end = s->msg + s->msg_len;
    fpb_run k;
    for (size_t r = 0; (rc = footer_next_run(&p, end, &k)) == 1; r++) {
        const char *bad = NULL;
        if (k.offset != off) bad = "does not start where the previous run ends";
        else if (k.len > s->raw_len - off) bad = "runs past the raw length";
        else if (k.count == 0 || k.count > k.len / 2) bad = "has an implausible record count";
        else if (k.is_meta && (r != s->nruns - 1 || k.key_group != 0)) bad = "is a misplaced meta run";
        else if (!k.is_meta && have_data && k.key_group <= prev_kg) bad = "is out of key-group order";
        else if (k.tag_len != want_tag) bad = want_tag ? "has no authentication tag" : "has an unexpected tag";
        if (bad)
            return wire_fail(err, DSTL_ECORRUPT,
                             "footer section %zu (%s) at segment offset %llu: run %zu (kg %u, raw offset %llu) %s",
                             i, wid, ULL(s->offset), r, k.key_group, ULL(k.offset), bad);
        if (!k.is_meta) {
            if (!have_data) first_kg = k.key_group;
            have_data = 1;
            prev_kg = k.key_group;
        }
        off += k.len;
        count += k.count;
        runs[r] = (wire_kg_run){.key_group = k.key_group, .is_meta = k.is_meta, .offset = k.offset,
                                .len = k.len, .count = k.count, .crc = k.crc};
        if (want_tag) memcpy(runs[r].tag, k.tag, 16);
    }
    const char *bad = NULL;
    if (rc < 0) bad = "a run does not parse as protobuf";   /* the head pass skipped the runs' bodies */
    else if (off != s->raw_len) bad = "runs do not cover the raw length";
    else if (count != s->record_count) bad = "run counts do not add up to the record count";
    else if (s->data_bytes > s->raw_len - 2 * count) bad = "data bytes exceed the raw body";
    else if (have_data ? (first_kg != s->kg_first || prev_kg != s->kg_last) : s->kg_first <= s->kg_last)
        bad = "key-group range does not match its runs";
    if (bad)
        return wire_fail(err, DSTL_ECORRUPT, "footer section %zu (%s) at segment offset %llu: %s", i, wid,
                         ULL(s->offset), bad);
    return 0;
}

/* Checks one section's fields against the segment; *pos is where it must start. */
static int check_section(const fpb_section *s, size_t i, int sealed, uint64_t *pos, uint64_t footer_offset,
                         wire_err *err)
{
    const char *bad = NULL;
    int compressed = s->compression != WIRE_COMP_NONE;
    if (!s->writer_id_len) bad = "empty writer id";
    else if (s->offset != *pos) bad = "does not start where the previous section ends";
    else if (s->stored_len == 0 || s->stored_len > footer_offset - *pos) bad = "stored bytes run past the footer";
    else if (s->seq_end <= s->seq_first || s->record_count != s->seq_end - s->seq_first)
        bad = "seq range does not match the record count";
    else if (s->key_id_len || s->nonce_len)
        bad = "sets the unused key id or nonce fields";
    else if (!sealed && (s->encryption != FOOTER_ENC_NONE || s->tag_len))
        bad = "is encrypted in a plain segment (no key block)";
    else if (sealed && (s->encryption != FOOTER_ENC_AES_256_GCM || s->tag_len != (compressed ? 16u : 0u)))
        bad = "is not sealed as its encrypted segment requires";
    else if (sealed && s->writer_id_len > SEAL_WRITER_ID_MAX)
        bad = "has a writer id too long to be sealed";
    else if (s->compression == WIRE_COMP_NONE ? s->raw_len != s->stored_len
             : (s->compression != WIRE_COMP_LZ4 && s->compression != WIRE_COMP_ZSTD))
        bad = "has an unknown compression or a raw length != stored length";
    else if (compressed && !wire_codec_ratio_ok((int)s->compression, s->stored_len, s->raw_len))
        bad = "has an implausible raw length for its compressed size";
    else if (s->nruns == 0 || s->record_count > s->raw_len / 2) bad = "has no runs or too many records";
    if (bad)
        return wire_fail(err, DSTL_ECORRUPT, "footer section %zu at segment offset %llu: %s", i,
                         ULL(s->offset), bad);
    *pos += s->stored_len;
    return 0;
}

/* An encrypted footer: the key block, then the sealed protobuf. Opens the data key and checks
 * the footer's tag: *plain (malloc'd) is the protobuf, *n its length. */
static int open_sealed(const uint8_t *footer, size_t len, const seal_block *b, const wire_keyring *keys,
                       uint64_t footer_offset, wire_index *ix, uint8_t **plain, size_t *n, wire_err *err)
{
    int rc = seal_resume(footer, b, keys, &ix->seal, err, footer_offset);
    if (rc < 0) return rc;
    *n = len - b->len;
    uint8_t *pb = malloc(*n ? *n : 1), block[SEAL_FIXED_LEN + WIRE_KEY_ID_MAX + SEAL_RUN_ID_MAX];
    if (!pb) return -ENOMEM;
    memcpy(pb, footer + b->len, *n);
    memcpy(block, footer, b->len);
    rc = seal_footer(ix->seal, 1, block, b->len, pb, *n);
    if (rc == DSTL_ECRYPTO)
        rc = wire_fail(err, rc, "segment offset %llu: footer authentication failed (key id '%s'): damaged or "
                       "altered", ULL(footer_offset + b->len), b->key_id);
    if (rc < 0) {
        free(pb);
        return rc;
    }
    *plain = pb;
    return 0;
}

/* A run id from the footer in an error message: at most 64 bytes of it. */
#define RUN_ID_SHOWN(h) (int)((h)->run_id_len < 64 ? (h)->run_id_len : 64), (const char *)(h)->run_id

/* Reads the footer protobuf m[0, n) (the plaintext of a sealed one, at segment offset pb_at,
 * its key block b), checks its sections and builds the index's infos and names. */
static int index_build(wire_index *ix, const uint8_t *m, size_t n, uint64_t footer_offset, uint64_t pb_at,
                       const seal_block *b, wire_err *err)
{
    int sealed = ix->seal != NULL, rc;
    fpb_head h;
    if (footer_read_head(m, n, &h) < 0)
        return wire_fail(err, DSTL_ECORRUPT, "segment offset %llu: %sfooter does not parse as protobuf", ULL(pb_at),
                         sealed ? "sealed " : "");
    if (b && (h.segment_no != b->segment_no || h.run_id_len != strlen(b->run_id) ||
              memcmp(h.run_id, b->run_id, h.run_id_len) != 0))
        return wire_fail(err, DSTL_ECORRUPT, "segment offset %llu: key block names run %s segment %llu, the "
                         "footer run %.*s segment %llu", ULL(footer_offset), b->run_id, ULL(b->segment_no),
                         RUN_ID_SHOWN(&h), ULL(h.segment_no));
    if (h.format_version != WIRE_VERSION || !h.run_id_len || h.nsections == 0)
        return wire_fail(err, DSTL_ECORRUPT, "segment offset %llu: footer version %u, run id '%.*s', %zu sections",
                         ULL(footer_offset), h.format_version, RUN_ID_SHOWN(&h), h.nsections);
    uint64_t pos = WIRE_SEG_HEADER_LEN;
    const uint8_t *p = m, *end = m + n;
    fpb_section s;
    for (size_t i = 0; footer_next_section(&p, end, &s) == 1; i++)
        if ((rc = check_section(&s, i, sealed, &pos, footer_offset, err)) < 0) return rc;
    if (pos != footer_offset)
        return wire_fail(err, DSTL_ECORRUPT, "segment offset %llu: sections end at %llu, not at the footer",
                         ULL(footer_offset), ULL(pos));
    ix->secs = calloc(h.nsections, sizeof *ix->secs);
    /* not cleared: check_runs writes every entry (a 1,024-writer footer's ~30,000 runs are
     * 1.7 MB, and calloc clears heap memory it reuses before check_runs writes it again) */
    ix->runs = malloc(h.nruns * sizeof *ix->runs);
    ix->names = malloc(h.name_bytes);
    if (!ix->secs || !ix->runs || !ix->names) return -ENOMEM;
    ix->segment_no = h.segment_no;
    ix->created_ms = h.created_ms;
    char *at = ix->names;
    memcpy(at, h.run_id, h.run_id_len);
    at[h.run_id_len] = 0;
    at += h.run_id_len + 1;
    wire_kg_run *runs = ix->runs;
    p = m;
    for (size_t i = 0; footer_next_section(&p, end, &s) == 1; i++) {
        char *wid = memcpy(at, s.writer_id, s.writer_id_len);
        wid[s.writer_id_len] = 0;
        at += s.writer_id_len + 1;
        if ((rc = check_runs(&s, i, wid, sealed, runs, err)) < 0) return rc;
        ix->secs[i] = (wire_section_info){
            .writer_id = wid, .seq_first = s.seq_first, .seq_end = s.seq_end, .nrec = s.record_count,
            .data_bytes = s.data_bytes, .kg_first = s.kg_first, .kg_last = s.kg_last, .offset = s.offset,
            .stored_len = s.stored_len, .raw_len = s.raw_len, .crc = s.crc, .compression = (int)s.compression,
            .runs = runs, .nruns = s.nruns, .index = (uint32_t)i, .seal = ix->seal};
        if (s.tag_len == 16) memcpy(ix->secs[i].tag, s.tag, 16);
        runs += s.nruns;
        ix->nsecs = i + 1;
    }
    return 0;
}

int wire_index_parse_keyed(const void *footer, size_t len, uint32_t footer_crc, uint64_t footer_offset,
                           uint64_t object_len, const wire_keyring *keys, wire_index **out, wire_err *err)
{
    if (!footer || !out)
        return wire_fail(err, -EINVAL, "footer parse: NULL argument");
    if (footer_offset < WIRE_SEG_HEADER_LEN || object_len < WIRE_SEG_TRAILER_LEN ||
        footer_offset > object_len - WIRE_SEG_TRAILER_LEN ||
        len != object_len - WIRE_SEG_TRAILER_LEN - footer_offset)
        return wire_fail(err, DSTL_ECORRUPT, "segment offset %llu: footer of %zu bytes does not fit an object of %llu",
                         ULL(footer_offset), len, ULL(object_len));
    uint32_t crc = wire_crc32c(0, footer, len);
    if (crc != footer_crc)
        return wire_fail(err, DSTL_ECORRUPT, "segment offset %llu: footer CRC32C %08x, computed %08x",
                         ULL(footer_offset), footer_crc, crc);
    seal_block b;
    int sealed = seal_block_parse(footer, len, &b);
    if (sealed < 0)
        return wire_fail(err, DSTL_ECORRUPT, "segment offset %llu: malformed encryption key block",
                         ULL(footer_offset));
    wire_index *ix = calloc(1, sizeof *ix);
    if (!ix) return wire_fail(err, -ENOMEM, "footer parse: out of memory");
    uint8_t *plain = NULL;
    size_t n = len;
    int rc = sealed ? open_sealed(footer, len, &b, keys, footer_offset, ix, &plain, &n, err) : 0;
    if (rc == 0)
        rc = index_build(ix, sealed ? plain : footer, n, footer_offset, footer_offset + (sealed ? b.len : 0),
                         sealed ? &b : NULL, err);
    free(plain);
    if (rc < 0) {
        if (rc == -ENOMEM) wire_fail(err, -ENOMEM, "footer parse: out of memory");
        wire_index_free(ix);
        return rc;
    }
    *out = ix;
    return 0;
}

int wire_index_parse(const void *footer, size_t len, uint32_t footer_crc, uint64_t footer_offset,
                     uint64_t object_len, wire_index **out, wire_err *err)
{
    return wire_index_parse_keyed(footer, len, footer_crc, footer_offset, object_len, NULL, out, err);
}

void wire_index_free(wire_index *ix)
{
    if (!ix) return;
    free(ix->names);
    seal_free(ix->seal);
    free(ix->secs);
    free(ix->runs);
    free(ix);
}

const char *wire_index_key_id(const wire_index *ix) { return ix->seal ? seal_key_id(ix->seal) : NULL; }
const char *wire_index_run_id(const wire_index *ix) { return ix->names; }
uint64_t wire_index_segment_no(const wire_index *ix) { return ix->segment_no; }
uint64_t wire_index_created_ms(const wire_index *ix) { return ix->created_ms; }
size_t wire_index_nsections(const wire_index *ix) { return ix->nsecs; }
const wire_section_info *wire_index_section(const wire_index *ix, size_t i)
{
    return i < ix->nsecs ? &ix->secs[i] : NULL;
}

/* The fixed header: magic, version, flags, segment number, CRC. */
static int header_parse(const uint8_t *h, uint64_t *segment_no, unsigned *flags, wire_err *err)
{
    if (memcmp(h, WIRE_SEG_MAGIC, 8) != 0)
        return wire_fail(err, DSTL_ECORRUPT, "segment offset 0: no header magic (not a segment)");
    uint32_t crc = wire_crc32c(0, h, 28);
    if (crc != wire_le32(h + 28))
        return wire_fail(err, DSTL_ECORRUPT, "segment offset 28: header CRC32C %08x, computed %08x",
                         wire_le32(h + 28), crc);
    if (wire_le16(h + 8) != WIRE_VERSION)
        return wire_fail(err, DSTL_ECORRUPT, "segment offset 8: format version %u, this reader knows %u",
                         wire_le16(h + 8), WIRE_VERSION);
    if ((wire_le16(h + 10) & ~WIRE_SEG_FLAG_SEALED) || wire_le32(h + 12) != 0 || wire_le32(h + 24) != 0)
        return wire_fail(err, DSTL_ECORRUPT, "segment offset 10: unknown header flags or reserved bytes");
    *segment_no = wire_le64(h + 16);
    *flags = wire_le16(h + 10);
    return 0;
}

int wire_segment_open_keyed(const void *buf, size_t len, const wire_keyring *keys, wire_index **out,
                            wire_err *err)
{
    if (!buf || !out) return wire_fail(err, -EINVAL, "segment open: NULL argument");
    const uint8_t *b = buf;
    uint64_t foff = 0, segment_no = 0;
    uint32_t flen = 0, fcrc = 0;
    unsigned flags = 0;
    if (len < WIRE_SEG_HEADER_LEN + WIRE_SEG_TRAILER_LEN)
        return wire_fail(err, DSTL_ECORRUPT, "segment of %zu bytes is shorter than header + trailer", len);
    int rc = header_parse(b, &segment_no, &flags, err);
    if (rc == 0) rc = wire_trailer_parse(b, len, len, &foff, &flen, &fcrc, err);
    if (rc < 0) return rc;
    unsigned tflags = wire_le16(b + len - WIRE_SEG_TRAILER_LEN + 6);
    wire_index *ix;
    if ((rc = wire_index_parse_keyed(b + foff, flen, fcrc, foff, len, keys, &ix, err)) < 0) return rc;
    uint64_t footer_no = ix->segment_no;
    unsigned want = ix->seal ? WIRE_SEG_FLAG_SEALED : 0;
    if (footer_no != segment_no || flags != want || tflags != want) {
        wire_index_free(ix);
        return wire_fail(err, DSTL_ECORRUPT, "segment offset 16: header segment number %llu flags %u, trailer "
                         "flags %u, footer segment %llu (%s)", ULL(segment_no), flags, tflags, ULL(footer_no),
                         want ? "encrypted" : "plain");
    }
    *out = ix;
    return 0;
}

int wire_segment_open(const void *buf, size_t len, wire_index **out, wire_err *err)
{
    return wire_segment_open_keyed(buf, len, NULL, out, err);
}

/* ---- which bytes a key-group range needs ---- */

int wire_section_ranges(const wire_section_info *sec, uint32_t kg_first, uint32_t kg_last,
                        uint64_t off[2], uint64_t len[2])
{
    if (sec->compression != WIRE_COMP_NONE) {
        off[0] = 0;
        len[0] = sec->stored_len;
        return 1;
    }
    int n = 0;
    size_t first = sec->nruns, last = 0;
    for (size_t r = 0; r < sec->nruns; r++) {
        const wire_kg_run *k = &sec->runs[r];
        if (!k->is_meta && k->key_group >= kg_first && k->key_group <= kg_last) {
            if (first == sec->nruns) first = r;
            last = r;
        }
    }
    if (first < sec->nruns) {
        off[0] = sec->runs[first].offset;
        len[0] = sec->runs[last].offset + sec->runs[last].len - off[0];
        n = 1;
    }
    const wire_kg_run *m = sec->nruns ? &sec->runs[sec->nruns - 1] : NULL;
    if (m && m->is_meta) {
        if (n && off[0] + len[0] == m->offset) {
            len[0] += m->len;
        } else {
            off[n] = m->offset;
            len[n] = m->len;
            n++;
        }
    }
    return n;
}

void wire_section_range(const wire_section_info *sec, uint32_t kg_first, uint32_t kg_last,
                        uint64_t *off, uint64_t *len)
{
    uint64_t o[2], l[2];
    int n = wire_section_ranges(sec, kg_first, kg_last, o, l);
    if (n == 0) {
        *off = *len = 0;
    } else {
        *off = o[0];
        *len = o[n - 1] + l[n - 1] - o[0];
    }
}
