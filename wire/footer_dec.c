/*
 * wire/footer_dec.c — a segment footer's protobuf (wire/dstl.proto: SegmentFooter, Section,
 * KeyGroupRun) read in place, for segment_dec.c to check and copy into an index.
 *
 * Why not protobuf-c's unpack: it allocates every message, so a 1,024-writer segment's footer
 * (1,024 sections, ~30,000 runs) cost 30,000 mallocs and 3 MB of fresh memory before
 * index_build copied the runs once more: 3 ms per footer warm, 17 ms in a cold process
 * (traced 2026-12-06), paid by the first reader of every object of a restore. Here the
 * footer is walked twice (the sections' shape, then their fields) and the index is the only
 * allocation.
 *
 * The wire format as protobuf defines it: fields in any order, a scalar's last occurrence
 * wins, unknown fields (of wire types varint, 64-bit, length-delimited and 32-bit) are
 * skipped, so a newer writer's additions read fine. Anything else is malformed: a truncated
 * or overlong varint, a length past the message, field number 0, a group, or a known field
 * with another wire type than the schema's. uint32 and enum fields keep a varint's low 32
 * bits, as protobuf does.
 *
 * Pure; any thread.
 */
#include <string.h>

#include "wire/wire_int.h"

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

typedef struct {
    uint32_t field;
    unsigned wt;
    uint64_t v;                 /* varint, I64 and I32 values */
    const uint8_t *data;        /* WT_LEN */
    size_t len;
} pb_field;

static inline int pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    if (*p < end && !(**p & 0x80)) {           /* most keys and small values: one byte */
        *v = *(*p)++;
        return 0;
    }
    uint64_t x = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (*p == end) return -1;
        uint8_t b = *(*p)++;
        if (shift == 63 && b > 1) return -1;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* The next field of [*p, end): 1, 0 at the end, -1 when malformed. */
static inline int pb_next(const uint8_t **p, const uint8_t *end, pb_field *f)
{
    if (*p == end) return 0;
    uint64_t key;
    if (pb_varint(p, end, &key) < 0 || key >> 3 == 0 || key >> 3 > 0x1fffffff) return -1;
    f->field = (uint32_t)(key >> 3);
    f->wt = (unsigned)(key & 7);
    switch (f->wt) {
    case WT_VARINT:
        return pb_varint(p, end, &f->v) < 0 ? -1 : 1;
    case WT_I64:
        if (end - *p < 8) return -1;
        f->v = wire_le64(*p);
        *p += 8;
        return 1;
    case WT_I32:
        if (end - *p < 4) return -1;
        f->v = wire_le32(*p);
        *p += 4;
        return 1;
    case WT_LEN:
        if (pb_varint(p, end, &f->v) < 0 || f->v > (uint64_t)(end - *p)) return -1;
        f->data = *p;
        f->len = (size_t)f->v;
        *p += f->len;
        return 1;
    default:
        return -1;              /* groups (3, 4) and the undefined 6, 7 */
    }
}

/* Whether a field of a known number has the schema's wire type (want) or is unknown (any). */
static int pb_type_ok(const pb_field *f, int known, unsigned want) { return !known || f->wt == want; }

int footer_next_run(const uint8_t **p, const uint8_t *end, fpb_run *r)
{
    pb_field f, m;
    int rc;
    while ((rc = pb_next(p, end, &f)) == 1) {
        if (f.field != 8) continue;                         /* the section's own fields */
        if (f.wt != WT_LEN) return -1;
        *r = (fpb_run){0};
        const uint8_t *q = f.data, *qe = f.data + f.len;
        while ((rc = pb_next(&q, qe, &m)) == 1) {
            static const unsigned want[8] = {0, WT_VARINT, WT_VARINT, WT_VARINT, WT_VARINT, WT_VARINT, WT_I32, WT_LEN};
            if (!pb_type_ok(&m, m.field < 8, m.field < 8 ? want[m.field] : 0)) return -1;
            switch (m.field) {
            case 1: r->key_group = (uint32_t)m.v; break;
            case 2: r->is_meta = m.v != 0; break;
            case 3: r->offset = m.v; break;
            case 4: r->len = m.v; break;
            case 5: r->count = m.v; break;
            case 6: r->crc = (uint32_t)m.v; break;
            case 7: r->tag = m.data; r->tag_len = m.len; break;
            default: break;
            }
        }
        return rc < 0 ? -1 : 1;
    }
    return rc;
}

/* The fields of a Section message (not its runs: their count). */
static int read_section(const uint8_t *m, size_t n, fpb_section *s)
{
    static const unsigned want[18] = {0,         WT_LEN,    WT_VARINT, WT_VARINT, WT_VARINT, WT_VARINT,
                                      WT_VARINT, WT_VARINT, WT_LEN,    WT_VARINT, WT_VARINT, WT_VARINT,
                                      WT_VARINT, WT_I32,    WT_VARINT, WT_LEN,    WT_LEN,    WT_LEN};
    *s = (fpb_section){.writer_id = (const uint8_t *)"", .msg = m, .msg_len = n};
    const uint8_t *p = m, *end = m + n;
    pb_field f;
    int rc;
    while ((rc = pb_next(&p, end, &f)) == 1) {
        if (!pb_type_ok(&f, f.field < 18, f.field < 18 ? want[f.field] : 0)) return -1;
        switch (f.field) {
        case 1: s->writer_id = f.data; s->writer_id_len = f.len; break;
        case 2: s->seq_first = f.v; break;
        case 3: s->seq_end = f.v; break;
        case 4: s->record_count = f.v; break;
        case 5: s->data_bytes = f.v; break;
        case 6: s->kg_first = (uint32_t)f.v; break;
        case 7: s->kg_last = (uint32_t)f.v; break;
        case 8: s->nruns++; break;
        case 9: s->offset = f.v; break;
        case 10: s->stored_len = f.v; break;
        case 11: s->raw_len = f.v; break;
        case 12: s->compression = (uint32_t)f.v; break;
        case 13: s->crc = (uint32_t)f.v; break;
        case 14: s->encryption = (uint32_t)f.v; break;
        case 15: s->key_id_len = f.len; break;
        case 16: s->nonce_len = f.len; break;
        case 17: s->tag = f.data; s->tag_len = f.len; break;
        default: break;
        }
    }
    /* a writer id is a C string for everyone after this: no NUL inside */
    return rc < 0 || memchr(s->writer_id, 0, s->writer_id_len) ? -1 : 0;
}

int footer_next_section(const uint8_t **p, const uint8_t *end, fpb_section *s)
{
    pb_field f;
    int rc;
    while ((rc = pb_next(p, end, &f)) == 1) {
        if (f.field != 5) continue;
        if (f.wt != WT_LEN) return -1;
        return read_section(f.data, f.len, s) < 0 ? -1 : 1;
    }
    return rc;
}

int footer_read_head(const uint8_t *m, size_t n, fpb_head *h)
{
    static const unsigned want[7] = {0, WT_VARINT, WT_LEN, WT_VARINT, WT_VARINT, WT_LEN, WT_LEN};
    *h = (fpb_head){.run_id = (const uint8_t *)""};
    const uint8_t *p = m, *end = m + n;
    pb_field f;
    fpb_section s;
    int rc;
    while ((rc = pb_next(&p, end, &f)) == 1) {
        if (!pb_type_ok(&f, f.field < 7, f.field < 7 ? want[f.field] : 0)) return -1;
        switch (f.field) {
        case 1: h->format_version = (uint32_t)f.v; break;
        case 2: h->run_id = f.data; h->run_id_len = f.len; break;
        case 3: h->segment_no = f.v; break;
        case 4: h->created_ms = f.v; break;
        case 5:
            if (read_section(f.data, f.len, &s) < 0) return -1;
            h->nsections++;
            h->nruns += s.nruns;
            h->name_bytes += s.writer_id_len + 1;
            break;
        default: break;             /* 6: padding, and fields this reader does not know */
        }
    }
    if (rc < 0 || memchr(h->run_id, 0, h->run_id_len)) return -1;
    h->name_bytes += h->run_id_len + 1;
    return 0;
}
