/*
 * dstl/read/segread.c — a segment's footer/index and a section's records from fetched bytes
 * (see segread.h): the one place where readers and the restore planner verify what they got.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "dstl/read/segread.h"

int segread_index(const wire_seg_ref *g, const wire_keyring *keys, const uint8_t *buf, uint64_t buf_off,
                  size_t len, const char *where, wire_index **out, char *msg, size_t cap)
{
    if (buf_off > g->footer_offset || buf_off + len != g->object_len || len < WIRE_SEG_TRAILER_LEN) {
        snprintf(msg, cap, "segment %s: %zu bytes at %llu do not hold its footer and trailer", where, len,
                 (unsigned long long)buf_off);
        return DSTL_ECORRUPT;
    }
    wire_err e = {{0}};
    uint64_t foff;
    uint32_t flen, fcrc;
    int rc = wire_trailer_parse(buf + len - WIRE_SEG_TRAILER_LEN, WIRE_SEG_TRAILER_LEN, g->object_len, &foff, &flen,
                                &fcrc, &e);
    if (rc < 0) {
        snprintf(msg, cap, "segment %s: %s", where, e.msg);
        return rc;
    }
    if (foff != g->footer_offset || flen != g->footer_len || fcrc != g->footer_crc) {
        snprintf(msg, cap, "segment %s: footer at %llu (%u bytes, crc %08x) is not the one the handle names "
                 "(%llu, %u bytes, crc %08x)", where, (unsigned long long)foff, flen, fcrc,
                 (unsigned long long)g->footer_offset, g->footer_len, g->footer_crc);
        return DSTL_ECORRUPT;
    }
    if ((rc = wire_index_parse_keyed(buf + (foff - buf_off), flen, fcrc, foff, g->object_len, keys, out, &e)) < 0) {
        snprintf(msg, cap, "segment %s: %s", where, e.msg);
        return rc;
    }
    if (g->encrypted && !wire_index_key_id(*out)) {
        /* the handle was made for an encrypted segment: a plain one in its place is a
         * substitute (someone who may write the bucket or dir but holds no key) */
        wire_index_free(*out);
        *out = NULL;
        snprintf(msg, cap, "segment %s: the handle names an encrypted segment, but this one is plain (replaced?)",
                 where);
        return DSTL_ECRYPTO;
    }
    return 0;
}

const wire_section_info *segread_piece_section(const wire_index *ix, const wire_piece *p, const char *writer_id,
                                               const char *where, char *msg, size_t cap)
{
    if (p->section >= wire_index_nsections(ix)) {
        snprintf(msg, cap, "segment %s: the handle names section %u of %zu", where, p->section,
                 wire_index_nsections(ix));
        return NULL;
    }
    const wire_section_info *sec = wire_index_section(ix, p->section);
    if (sec->offset != p->offset || sec->stored_len != p->stored_len || sec->crc != p->crc ||
        p->seq_first < sec->seq_first || p->seq_end > sec->seq_end || strcmp(sec->writer_id, writer_id) != 0) {
        snprintf(msg, cap, "segment %s section %u (offset %llu): does not match the handle's piece (writer %s, "
                 "seqs %llu-%llu)", where, p->section, (unsigned long long)sec->offset, writer_id,
                 (unsigned long long)p->seq_first, (unsigned long long)p->seq_end);
        return NULL;
    }
    return sec;
}

int segread_ranges(const wire_section_info *sec, uint32_t kg_first, uint32_t kg_last, uint64_t off[2],
                   uint64_t len[2])
{
    int n = wire_section_ranges(sec, kg_first, kg_last, off, len);
    if (n == 2 && off[1] - (off[0] + len[0]) < SEGREAD_MERGE_GAP_BYTES) {
        len[0] = off[1] + len[1] - off[0];
        n = 1;
    }
    for (int i = 0; i < n; i++) off[i] += sec->offset;
    return n;
}

int segread_section(const wire_section_info *sec, uint32_t section_no, const uint8_t *buf, uint64_t buf_off,
                    size_t len, uint64_t seq_from, uint64_t seq_to, uint32_t kg_first, uint32_t kg_last,
                    const char *where, wire_iter **out, char *msg, size_t cap)
{
    /* The buffer may span the section with a gap never fetched (two ranges: the key groups
     * from the first run, and the meta run): wire checks uncompressed sections run by run,
     * so the gap is never read. */
    wire_err e = {{0}};
    int rc = wire_iter_open(sec, buf, buf_off - sec->offset, len, seq_from, seq_to, kg_first, kg_last, out, &e);
    if (rc < 0)
        snprintf(msg, cap, "segment %s section %u (offset %llu): %s", where, section_no,
                 (unsigned long long)sec->offset, e.msg);
    return rc;
}
