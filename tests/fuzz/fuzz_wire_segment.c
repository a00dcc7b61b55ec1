/*
 * tests/fuzz/fuzz_wire_segment.c — libFuzzer target for the segment decoder.
 *
 * Each input is read twice: as it is (header, trailer, footer CRCs must reject damage), and
 * with its CRCs recomputed (header, footer, trailer, and each section's and run's CRC handed to
 * the iterator), so that mutations reach the footer validation and the record parser behind
 * the checksums. Either way the decoder may refuse, but must never crash, over-read, loop or
 * allocate beyond the input's size (ASan/UBSan watch). Segments are opened with a keyring
 * holding the key of the encrypted seeds (tests/test_wire_seal.c: key-A.2026 = 00..1f), so
 * sealed inputs reach the key block, the unwrap, the commitment and each unit's tag.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void iterate(const uint8_t *seg, const wire_section_info *si, int fix_crcs)
{
    wire_section_info s = *si;
    wire_kg_run *runs = NULL;
    if (fix_crcs) {
        s.crc = wire_crc32c(0, seg + si->offset, si->stored_len);
        if (si->compression == WIRE_COMP_NONE && si->nruns) {
            runs = malloc(si->nruns * sizeof *runs);
            if (!runs) return;
            for (size_t r = 0; r < si->nruns; r++) {
                runs[r] = si->runs[r];
                runs[r].crc = wire_crc32c(0, seg + si->offset + runs[r].offset, runs[r].len);
            }
            s.runs = runs;
        }
    }
    /* whole section, all records */
    wire_iter *it;
    wire_err err;
    wire_record rec;
    if (wire_iter_open(&s, seg + s.offset, 0, s.stored_len, 0, UINT64_MAX, 0, UINT32_MAX, &it, &err) == 0) {
        while (wire_iter_next(it, &rec, &err) == 1) {}
        wire_iter_free(it);
    }
    /* a key-group range and seq sub-range from a partial byte range */
    if (s.nruns) {
        uint32_t kg = s.runs[s.nruns / 2].key_group;
        uint64_t off, len;
        wire_section_range(&s, kg, kg, &off, &len);
        uint64_t mid = s.seq_first + (s.seq_end - s.seq_first) / 2;
        if (wire_iter_open(&s, seg + s.offset + off, off, (size_t)len, mid, UINT64_MAX, kg, kg, &it, &err) == 0) {
            while (wire_iter_next(it, &rec, &err) == 1) {}
            wire_iter_free(it);
        }
    }
    free(runs);
}

static void read_segment(const uint8_t *b, size_t n, int fix_crcs)
{
    static wire_key key = {.id = "key-A.2026"};
    for (int i = 0; i < 32; i++) key.key[i] = (uint8_t)i;
    wire_keyring ring = {&key, 1};
    wire_index *ix;
    wire_err err;
    if (wire_segment_open_keyed(b, n, &ring, &ix, &err) != 0) return;
    for (size_t i = 0; i < wire_index_nsections(ix); i++) iterate(b, wire_index_section(ix, i), fix_crcs);
    wire_index_free(ix);
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    read_segment(data, size, 0);
    if (size < 64) return 0;
    uint8_t *b = malloc(size);   /* exact size: ASan catches any read past the end */
    if (!b) return 0;
    memcpy(b, data, size);
    put32(b + 28, wire_crc32c(0, b, 28));
    uint8_t *t = b + size - 32;
    uint64_t foff;
    uint32_t flen;
    memcpy(&foff, t + 8, 8);
    memcpy(&flen, t + 16, 4);
    if (foff >= 32 && foff <= size - 32 && flen <= size - 32 - foff)
        put32(t + 20, wire_crc32c(0, b + foff, flen));
    put32(t, wire_crc32c(0, t + 4, 28));
    read_segment(b, size, 1);
    free(b);
    return 0;
}
