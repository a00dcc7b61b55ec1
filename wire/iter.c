/*
 * wire/iter.c — iterates one section's records in seq order (FORMAT.md, "Records").
 *
 * A section's raw body holds one run per key group (and one meta run), each sorted by seq.
 * The iterator opens a cursor on each run the caller's key-group range needs and merges them
 * through a window indexed by seq: a section's seqs are consecutive, so each cursor drops its
 * records with seq in [lo, lo + W) straight into their slots, and the window is then read in
 * order. Every record is parsed once and placed in O(1) (a heap of 128 runs cost 7 unpredictable
 * compares a record); a slot hit twice is a seq in two runs, which is corrupt. The window has
 * at most WINDOW_MAX slots whatever the section's size; a run ends at its record count or at
 * the first seq >= seq_to.
 *
 * Before any record is returned, every byte it comes from is CRC-checked at open: the whole
 * section's CRC for a compressed section, else each needed run's CRC (for an uncompressed
 * section, whatever range was passed); a compressed section is checked, decompressed
 * into an owned buffer and its needed runs checked again. Parsing still bounds-checks every
 * varint and length, so bytes whose CRCs were forged cannot make it read outside the runs.
 *
 * Pure; one thread at a time per iterator; the caller's bytes must outlive the iterator.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "wire/wire_int.h"

#define ULL(x) ((unsigned long long)(x))

/* Slots in the seq window: 4096 slots of 16 bytes (64 KiB) stay in L2 and below glibc's mmap
 * threshold; refilling costs a pass over the open cursors, ~1 per 30 records with 128 runs. */
#define WINDOW_MAX (1u << 12)

typedef struct {
    const uint8_t *p, *end;   /* unparsed bytes of the run */
    const uint8_t *start;     /* run start, for error offsets */
    uint64_t raw_off;         /* run offset in the raw body */
    uint64_t left;            /* records not yet parsed */
    uint64_t expect;          /* seq the next delta counts from */
    uint64_t seq;             /* the parsed record not yet placed in the window */
    const uint8_t *data;
    size_t len;
    uint32_t key_group;
    int is_meta;
} run_cur;

typedef struct {
    const uint8_t *data;      /* NULL: no record of the asked range has this seq */
    uint32_t len_meta;        /* length | WIRE_REC_META */
    uint32_t key_group;
} slot;

struct wire_iter {
    uint64_t seq_end, seq_from, seq_to, offset;
    char writer[64];          /* for error details */
    uint8_t *raw_owned;       /* decompressed body */
    run_cur *curs;            /* runs with a parsed record not yet placed */
    size_t ncurs;
    slot *win;
    uint64_t win_cap, win_lo, win_hi, pos;
    int failed;               /* a failed iterator stays failed: it returns the end */
};

static int corrupt_at(const wire_iter *it, const run_cur *c, const uint8_t *at, wire_err *err,
                      const char *what)
{
    return wire_fail(err, DSTL_ECORRUPT,
                     "section %s at segment offset %llu: run kg %u%s, raw offset %llu: %s",
                     it->writer, ULL(it->offset), c->key_group, c->is_meta ? " (meta)" : "",
                     ULL(c->raw_off + (uint64_t)(at - c->start)), what);
}

/* Parses the cursor's next record within [seq_from, seq_to): 1 when there is one, 0 when the
 * run has none left, DSTL_ECORRUPT. */
static int cur_next(const wire_iter *it, run_cur *c, wire_err *err)
{
    for (;;) {
        if (c->left == 0) {
            if (c->p != c->end) return corrupt_at(it, c, c->p, err, "bytes after the last record");
            return 0;
        }
        const uint8_t *q = c->p;
        uint64_t delta, len;
        if (wire_varint_get(&q, c->end, &delta) < 0)
            return corrupt_at(it, c, c->p, err, "bad seq varint");
        if (delta >= it->seq_end - c->expect)
            return corrupt_at(it, c, c->p, err, "seq past the section end");
        if (wire_varint_get(&q, c->end, &len) < 0 || len > (uint64_t)(c->end - q) ||
            len > WIRE_REC_MAX_LEN)
            return corrupt_at(it, c, c->p, err, "record length runs past the run");
        c->seq = c->expect + delta;
        c->expect = c->seq + 1;
        c->data = q;
        c->len = (size_t)len;
        c->p = q + len;
        c->left--;
        if (c->seq < it->seq_from) continue;
        return c->seq < it->seq_to;
    }
}

/* Places every cursor's records with seq below the next window end into the window. */
static int fill_window(wire_iter *it, wire_err *err)
{
    it->win_lo = it->pos = it->win_hi;
    it->win_hi = it->seq_to - it->win_lo > it->win_cap ? it->win_lo + it->win_cap : it->seq_to;
    memset(it->win, 0, (size_t)(it->win_hi - it->win_lo) * sizeof *it->win);
    for (size_t i = 0; i < it->ncurs;) {
        run_cur *c = &it->curs[i];
        int rc = 1;
        while (rc == 1 && c->seq < it->win_hi) {
            slot *s = &it->win[c->seq - it->win_lo];
            if (s->data) return corrupt_at(it, c, c->data, err, "seq appears in two runs");
            *s = (slot){.data = c->data, .len_meta = (uint32_t)c->len | (c->is_meta ? WIRE_REC_META : 0),
                        .key_group = c->key_group};
            rc = cur_next(it, c, err);
        }
        if (rc < 0) return rc;
        if (rc == 0) it->curs[i] = it->curs[--it->ncurs];   /* run done */
        else i++;
    }
    return 0;
}

/* Checks the CRC of [p, p + n) against want. */
static int check_crc(const wire_iter *it, const uint8_t *p, uint64_t n, uint32_t want,
                     const char *what, uint64_t raw_off, wire_err *err)
{
    uint32_t got = wire_crc32c(0, p, n);
    if (got == want) return 0;
    return wire_fail(err, DSTL_ECORRUPT,
                     "section %s at segment offset %llu: %s at raw offset %llu: CRC32C %08x, computed %08x",
                     it->writer, ULL(it->offset), what, ULL(raw_off), want, got);
}

/* A sealed unit that did not open: DSTL_ECRYPTO naming the section, the unit and offset. */
static int sealed_fail(const wire_iter *it, const wire_section_info *sec, int rc, const char *what,
                       uint64_t raw_off, wire_err *err)
{
    if (rc != DSTL_ECRYPTO) return wire_fail(err, rc, "section %s: decryption failed", it->writer);
    return wire_fail(err, rc, "section %u (%s) at segment offset %llu: %s at segment offset %llu: authentication failed "
                     "(damaged or altered bytes)", sec->index, it->writer, ULL(it->offset), what, ULL(raw_off));
}

/* Authenticates and decrypts run r of a sealed uncompressed section from the caller's bytes
 * into the iterator's copy (laid out as the caller's range [base, base + len)). */
static int open_run(wire_iter *it, const wire_section_info *sec, size_t r, const uint8_t *bytes, uint64_t base,
                    size_t len, const uint8_t **start, wire_err *err)
{
    const wire_kg_run *k = &sec->runs[r];
    if (!it->raw_owned && !(it->raw_owned = malloc(len ? len : 1)))
        return wire_fail(err, -ENOMEM, "section %s: out of memory", it->writer);
    uint8_t *dst = it->raw_owned + (k->offset - base), tag[16];
    memcpy(tag, k->tag, 16);
    int rc = seal_unit((wire_seal *)sec->seal, 1, sec, (uint32_t)r, bytes + (k->offset - base), k->len, dst, tag);
    if (rc < 0) return sealed_fail(it, sec, rc, "key-group run", sec->offset + k->offset, err);
    *start = dst;
    return 0;
}

static int run_needed(const wire_kg_run *k, uint32_t kg_first, uint32_t kg_last)
{
    return k->is_meta || (k->key_group >= kg_first && k->key_group <= kg_last);
}

/* Makes the raw body available after checking the section CRC: *raw points at raw offset 0
 * (the caller's bytes, or the decompressed copy); for a partial range *raw is NULL (the
 * caller checks each run it uses). */
static int open_body(wire_iter *it, const wire_section_info *sec, const uint8_t *bytes, size_t len,
                     int whole, const uint8_t **raw, wire_err *err)
{
    if (!whole) {
        *raw = NULL;
        return 0;
    }
    int rc = check_crc(it, bytes, len, sec->crc, "stored bytes", 0, err);
    if (rc < 0 || sec->compression == WIRE_COMP_NONE) {
        *raw = bytes;
        return rc;
    }
    uint8_t *plain = NULL;
    if (sec->seal) {   /* compress-then-encrypt: authenticate and decrypt, then inflate */
        if (!(plain = malloc(len ? len : 1))) return wire_fail(err, -ENOMEM, "section %s: out of memory", it->writer);
        uint8_t tag[16];
        memcpy(tag, sec->tag, 16);
        rc = seal_unit((wire_seal *)sec->seal, 1, sec, SEAL_WHOLE, bytes, len, plain, tag);
        if (rc < 0) {
            free(plain);
            return sealed_fail(it, sec, rc, "stored bytes", it->offset, err);
        }
        bytes = plain;
    }
    it->raw_owned = malloc(sec->raw_len ? sec->raw_len : 1);
    if (!it->raw_owned) {
        free(plain);
        return wire_fail(err, -ENOMEM, "section %s: out of memory", it->writer);
    }
    rc = wire_codec_decompress(sec->compression, bytes, len, it->raw_owned, sec->raw_len, err);
    free(plain);
    if (rc < 0) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err ? err->msg : "");
        return wire_fail(err, rc, "section %s at segment offset %llu: %s", it->writer,
                         ULL(it->offset), why);
    }
    *raw = it->raw_owned;
    return 0;
}

int wire_iter_open(const wire_section_info *sec, const void *bytes, uint64_t base, size_t len,
                   uint64_t seq_from, uint64_t seq_to, uint32_t kg_first, uint32_t kg_last,
                   wire_iter **out, wire_err *err)
{
    if (!sec || !out || (!bytes && len))
        return wire_fail(err, -EINVAL, "iterator: NULL argument");
    int covers = base == 0 && len == sec->stored_len;
    if (!covers && (sec->compression != WIRE_COMP_NONE || base > sec->stored_len ||
                    len > sec->stored_len - base))
        return wire_fail(err, -EINVAL,
                         "iterator: bytes [%llu, +%zu) of section %s are not the whole section (%llu bytes%s)",
                         ULL(base), len, sec->writer_id, ULL(sec->stored_len),
                         sec->compression != WIRE_COMP_NONE ? ", compressed" : "");
    /* An uncompressed section is checked run by run even when the buffer spans all of it: a
     * reader may pass the covering range of the runs it fetched, with gaps it never filled
     * (wire_section_ranges). Every byte a record comes from is in a run, so every returned
     * byte is still checked; a compressed section is checked whole before it is inflated. */
    int whole = covers && sec->compression != WIRE_COMP_NONE;
    uint64_t from = seq_from > sec->seq_first ? seq_from : sec->seq_first;
    uint64_t to = seq_to < sec->seq_end ? seq_to : sec->seq_end;
    uint64_t cap = to > from ? to - from : 0;
    if (cap > WINDOW_MAX) cap = WINDOW_MAX;
    /* One allocation: the iterator, a cursor per run, the window (a restore of 1,024 tasks
     * opens ~65,000 iterators a round, one per reader and segment) */
    size_t ncur = sec->nruns ? sec->nruns : 1, nwin = cap ? (size_t)cap : 1;
    wire_iter *it = malloc(sizeof *it + ncur * sizeof(run_cur) + nwin * sizeof(slot));
    if (!it) return wire_fail(err, -ENOMEM, "iterator: out of memory");
    *it = (wire_iter){.seq_end = sec->seq_end, .seq_from = from, .seq_to = to, .offset = sec->offset,
                      .curs = (run_cur *)(it + 1), .win_cap = cap, .win_lo = from, .win_hi = from, .pos = from};
    it->win = (slot *)(it->curs + ncur);
    size_t wl = strnlen(sec->writer_id, sizeof it->writer - 1);
    memcpy(it->writer, sec->writer_id, wl);
    it->writer[wl] = 0;
    int rc;
    const uint8_t *raw;
    if ((rc = open_body(it, sec, bytes, len, whole, &raw, err)) < 0) goto fail;
    if (it->seq_from >= it->seq_to) goto done;

    for (size_t r = 0; r < sec->nruns; r++) {
        const wire_kg_run *k = &sec->runs[r];
        if (!run_needed(k, kg_first, kg_last)) continue;
        const uint8_t *start;
        if (raw) {
            start = raw + k->offset;
        } else {
            if (k->offset < base || k->len > len || k->offset - base > len - k->len) {
                rc = wire_fail(err, -EINVAL, "iterator: bytes [%llu, +%zu) of section %s miss run kg %u [%llu, +%llu)",
                               ULL(base), len, it->writer, k->key_group, ULL(k->offset), ULL(k->len));
                goto fail;
            }
            start = (const uint8_t *)bytes + (k->offset - base);
            if (sec->seal && (rc = open_run(it, sec, r, bytes, base, len, &start, err)) < 0) goto fail;
        }
        if ((!raw || sec->compression != WIRE_COMP_NONE) &&
            (rc = check_crc(it, start, k->len, k->crc, "key-group run", k->offset, err)) < 0)
            goto fail;
        run_cur *c = &it->curs[it->ncurs];
        *c = (run_cur){.p = start, .end = start + k->len, .start = start, .raw_off = k->offset,
                       .left = k->count, .expect = sec->seq_first, .key_group = k->key_group,
                       .is_meta = k->is_meta};
        if ((rc = cur_next(it, c, err)) < 0) goto fail;
        it->ncurs += rc == 1;
    }
    if ((rc = fill_window(it, err)) < 0) goto fail;
done:
    *out = it;
    return 0;
fail:
    wire_iter_free(it);
    return rc;
}

int wire_iter_next(wire_iter *it, wire_record *rec, wire_err *err)
{
    while (!it->failed) {
        while (it->pos < it->win_hi) {
            const slot *s = &it->win[it->pos++ - it->win_lo];
            if (!s->data) continue;
            *rec = (wire_record){.seq = it->pos - 1, .key_group = s->key_group,
                                 .is_meta = (s->len_meta & WIRE_REC_META) != 0, .data = s->data,
                                 .len = s->len_meta & WIRE_REC_MAX_LEN};
            return 1;
        }
        if (it->win_hi >= it->seq_to) return 0;
        int rc = fill_window(it, err);
        if (rc < 0) {
            it->failed = 1;
            return rc;
        }
    }
    return 0;
}

void wire_iter_free(wire_iter *it)
{
    if (!it) return;
    free(it->raw_owned);
    free(it);
}
