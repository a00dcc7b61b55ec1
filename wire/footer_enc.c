/*
 * wire/footer_enc.c — a segment footer's protobuf (wire/dstl.proto: SegmentFooter, Section,
 * KeyGroupRun) written by hand, from the structs footer_dec.c reads it into.
 *
 * Why not protobuf-c's pack: its get_packed_size and pack walk every field of every message
 * through the schema's descriptors, and the encoder sized the footer twice and packed it once,
 * from a Dstl__KeyGroupRun it first filled per run. A 1,024-writer segment has ~30,000 runs:
 * protobuf-c was ~6.5 % of a 1,024-writer load run's samples (perf, bench_local load,
 * 2026-12-06), a cost per persist that 16 writers with 1 MiB sections do not pay. Here a run
 * is a few varints, sized and written straight from its struct (a 1,024-section encode:
 * 46 -> 38 ms).
 *
 * The bytes are the ones protobuf's proto3 encoding gives (and protobuf-c's pack gave, byte
 * for byte: the golden segments in tests/ did not change): fields in field-number order, a
 * scalar, string or bytes field left out when zero or empty, each run and section a
 * length-delimited field of its parent. The fields a writer never sets (Section.key_id, .nonce)
 * are never written.
 *
 * Pure; any thread.
 */
#include "wire/wire_int.h"

enum { WT_VARINT = 0, WT_LEN = 2, WT_I32 = 5 };

#define KEY(field, wt) (((field) << 3) | (wt))   /* every key here fits one byte (field < 16) */

static inline size_t varint_field_size(uint64_t v) { return v ? 1 + wire_varint_len(v) : 0; }
static inline size_t fixed32_field_size(uint32_t v) { return v ? 5 : 0; }
/* A length-delimited field of n bytes; key 1 byte below field 16, else 2. */
static inline size_t len_field_size(unsigned field, size_t n) { return (field < 16 ? 1 : 2) + wire_varint_len(n) + n; }
static inline size_t bytes_field_size(unsigned field, size_t n) { return n ? len_field_size(field, n) : 0; }

static inline uint8_t *put_key(uint8_t *p, unsigned field, unsigned wt)
{
    return wire_varint_put(p, ((uint64_t)field << 3) | wt);
}

static inline uint8_t *put_varint_field(uint8_t *p, unsigned field, uint64_t v)
{
    if (!v) return p;
    *p++ = (uint8_t)KEY(field, WT_VARINT);
    return wire_varint_put(p, v);
}

static inline uint8_t *put_fixed32_field(uint8_t *p, unsigned field, uint32_t v)
{
    if (!v) return p;
    *p++ = (uint8_t)KEY(field, WT_I32);
    wire_put32(p, v);
    return p + 4;
}

static inline uint8_t *put_bytes_field(uint8_t *p, unsigned field, const void *b, size_t n)
{
    if (!n) return p;
    p = wire_varint_put(put_key(p, field, WT_LEN), n);
    memcpy(p, b, n);
    return p + n;
}

/* A KeyGroupRun message's bytes (without its key and length). */
static inline size_t run_msg_size(const fpb_run *r)
{
    return varint_field_size(r->key_group) + (r->is_meta ? 2 : 0) + varint_field_size(r->offset) +
           varint_field_size(r->len) + varint_field_size(r->count) + fixed32_field_size(r->crc) +
           bytes_field_size(7, r->tag_len);
}

static size_t section_msg_size(const fpb_section *s, const fpb_run *runs, size_t nruns)
{
    size_t n = bytes_field_size(1, s->writer_id_len) + varint_field_size(s->seq_first) +
               varint_field_size(s->seq_end) + varint_field_size(s->record_count) +
               varint_field_size(s->data_bytes) + varint_field_size(s->kg_first) + varint_field_size(s->kg_last) +
               varint_field_size(s->offset) + varint_field_size(s->stored_len) + varint_field_size(s->raw_len) +
               varint_field_size(s->compression) + fixed32_field_size(s->crc) + varint_field_size(s->encryption) +
               bytes_field_size(17, s->tag_len);
    for (size_t i = 0; i < nruns; i++) n += len_field_size(8, run_msg_size(&runs[i]));
    return n;
}

size_t footer_section_size(const fpb_section *s, const fpb_run *runs, size_t nruns)
{
    return len_field_size(5, section_msg_size(s, runs, nruns));
}

/* A run's fields (no key, no length) at p; returns the end. */
static inline uint8_t *put_run_fields(uint8_t *p, const fpb_run *r)
{
    p = put_varint_field(p, 1, r->key_group);
    p = put_varint_field(p, 2, r->is_meta ? 1 : 0);
    p = put_varint_field(p, 3, r->offset);
    p = put_varint_field(p, 4, r->len);
    p = put_varint_field(p, 5, r->count);
    p = put_fixed32_field(p, 6, r->crc);
    return put_bytes_field(p, 7, r->tag, r->tag_len);
}

/* The Section message's fields (no key, no length) at p; returns the end. A run's message is
 * below 128 bytes when its tag is at most RUN_TAG_MAX (at most 64: five varints, a flag, a
 * CRC, a tag), so its length is one byte, filled in after its fields; a longer tag sizes it
 * first. */
enum { RUN_TAG_MAX = 16 };
static uint8_t *put_section_fields(uint8_t *p, const fpb_section *s, const fpb_run *runs, size_t nruns)
{
    p = put_bytes_field(p, 1, s->writer_id, s->writer_id_len);
    p = put_varint_field(p, 2, s->seq_first);
    p = put_varint_field(p, 3, s->seq_end);
    p = put_varint_field(p, 4, s->record_count);
    p = put_varint_field(p, 5, s->data_bytes);
    p = put_varint_field(p, 6, s->kg_first);
    p = put_varint_field(p, 7, s->kg_last);
    for (size_t i = 0; i < nruns; i++) {
        const fpb_run *r = &runs[i];
        *p++ = (uint8_t)KEY(8, WT_LEN);
        if (r->tag_len <= RUN_TAG_MAX) {
            uint8_t *len = p++;
            p = put_run_fields(p, r);
            *len = (uint8_t)(p - len - 1);
        } else {
            p = put_run_fields(wire_varint_put(p, run_msg_size(r)), r);
        }
    }
    p = put_varint_field(p, 9, s->offset);
    p = put_varint_field(p, 10, s->stored_len);
    p = put_varint_field(p, 11, s->raw_len);
    p = put_varint_field(p, 12, s->compression);
    p = put_fixed32_field(p, 13, s->crc);
    p = put_varint_field(p, 14, s->encryption);
    return put_bytes_field(p, 17, s->tag, s->tag_len);
}

/* At most the Section message's bytes: every varint at 10 bytes, every run at its bound. */
static size_t section_msg_bound(const fpb_section *s, const fpb_run *runs, size_t nruns)
{
    size_t n = 12 + s->writer_id_len + 11 * 11 + 5 + 13 + s->tag_len;
    for (size_t i = 0; i < nruns; i++) n += runs[i].tag_len <= RUN_TAG_MAX ? 2 + 64 : 1 + 10 + run_msg_size(&runs[i]);
    return n;
}

uint8_t *footer_put_section(uint8_t *p, const uint8_t *end, const fpb_section *s, const fpb_run *runs,
                            size_t nruns)
{
    /* Written once, not sized first (a 1,024-writer segment has ~30,000 runs, and the sizing
     * walk was ~2 % of a load run's samples): when the bound fits, the fields go after room
     * for the bound's length, and move back over what the real length's varint leaves (the
     * bytes are the canonical encoding either way); near the end, sized first. */
    size_t bound = section_msg_bound(s, runs, nruns);
    if (1 + wire_varint_len(bound) + bound <= (size_t)(end - p)) {
        uint8_t *body = p + 1 + wire_varint_len(bound);
        size_t n = (size_t)(put_section_fields(body, s, runs, nruns) - body);
        uint8_t *at = wire_varint_put(put_key(p, 5, WT_LEN), n);
        if (at != body) memmove(at, body, n);
        return at + n;
    }
    size_t n = section_msg_size(s, runs, nruns);
    if (len_field_size(5, n) > (size_t)(end - p)) return NULL;
    return put_section_fields(wire_varint_put(put_key(p, 5, WT_LEN), n), s, runs, nruns);
}

size_t footer_head_size(const fpb_head *h)
{
    return varint_field_size(h->format_version) + bytes_field_size(2, h->run_id_len) +
           varint_field_size(h->segment_no) + varint_field_size(h->created_ms);
}

uint8_t *footer_put_head(uint8_t *p, const fpb_head *h)
{
    p = put_varint_field(p, 1, h->format_version);
    p = put_bytes_field(p, 2, h->run_id, h->run_id_len);
    p = put_varint_field(p, 3, h->segment_no);
    return put_varint_field(p, 4, h->created_ms);
}

size_t footer_padding_size(size_t n) { return bytes_field_size(6, n); }

uint8_t *footer_put_padding(uint8_t *p, size_t n)
{
    if (!n) return p;
    p = wire_varint_put(put_key(p, 6, WT_LEN), n);
    memset(p, 0, n);
    return p + n;
}
