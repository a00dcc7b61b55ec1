/*
 * dstl/reader.c — recovery readers: a handle's records, in seq order, verified, filtered.
 *
 * For each piece of the handle the reader opens the piece's segment from its trailer and
 * footer (checked against what the handle recorded: offsets, lengths, CRCs), reads only
 * the part of the section that holds the asked key groups (the whole section when it is
 * compressed) and iterates it with wire's iterator, which checks every CRC before a record
 * leaves it. A reader is used by one thread at a time; it reads with blocking preads from
 * the local copy (dstl.local.dir).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstl/err.h"
#include "dstl/internal.h"
#include "dstl/segstore.h"

struct dstl_reader {
    dstl_storage *s;
    wire_handle *wh;
    uint32_t kg_first, kg_last;
    size_t piece;                   /* next piece to open */
    wire_iter *it;
    uint8_t *buf;
    size_t buf_cap;
    wire_index *ix;                 /* footer of segment ix_seg */
    uint32_t ix_seg;
    int err;                        /* sticky */
    char errmsg[512];
};

static int fail(dstl_reader *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(dstl_reader *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errmsg, sizeof r->errmsg, fmt, ap);
    va_end(ap);
    r->err = code;
    return err_fail(code, "%s", r->errmsg);
}

static int read_exact(dstl_reader *r, const char *name, uint64_t off, void *buf, size_t len)
{
    ssize_t n = segstore_read_at(r->s->local_dir, name, off, buf, len);
    if (n < 0) return fail(r, (int)n, "%s", dstl_last_error());
    if ((size_t)n < len)
        return fail(r, DSTL_ECORRUPT, "segment %s/%s: %zu bytes at offset %llu, file ends after %zd",
                    r->s->local_dir, name, len, (unsigned long long)off, n);
    return 0;
}

static int grow(dstl_reader *r, size_t len)
{
    if (len <= r->buf_cap) return 0;
    uint8_t *b = realloc(r->buf, len);
    if (!b) return fail(r, -ENOMEM, "reader: out of memory for %zu bytes", len);
    r->buf = b;
    r->buf_cap = len;
    return 0;
}

/* Loads (and checks) the footer of segment i of the handle. */
static int load_index(dstl_reader *r, uint32_t i)
{
    if (r->ix && r->ix_seg == i) return 0;
    wire_index_free(r->ix);
    r->ix = NULL;
    const wire_seg_ref *g = &r->wh->segs[i];
    uint8_t tr[WIRE_SEG_TRAILER_LEN];
    if (g->object_len < WIRE_SEG_TRAILER_LEN)
        return fail(r, DSTL_ECORRUPT, "handle: segment %s length %llu is too small", g->name,
                    (unsigned long long)g->object_len);
    int rc = read_exact(r, g->name, g->object_len - WIRE_SEG_TRAILER_LEN, tr, sizeof tr);
    if (rc < 0) return rc;
    wire_err e = {{0}};
    uint64_t foff;
    uint32_t flen, fcrc;
    if ((rc = wire_trailer_parse(tr, sizeof tr, g->object_len, &foff, &flen, &fcrc, &e)) < 0)
        return fail(r, rc, "segment %s/%s: %s", r->s->local_dir, g->name, e.msg);
    if (foff != g->footer_offset || flen != g->footer_len || fcrc != g->footer_crc)
        return fail(r, DSTL_ECORRUPT, "segment %s/%s: footer at %llu (%u bytes, crc %08x) is not the one the "
                    "handle names (%llu, %u bytes, crc %08x)", r->s->local_dir, g->name,
                    (unsigned long long)foff, flen, fcrc, (unsigned long long)g->footer_offset, g->footer_len,
                    g->footer_crc);
    if ((rc = grow(r, flen)) < 0) return rc;
    if ((rc = read_exact(r, g->name, foff, r->buf, flen)) < 0) return rc;
    if ((rc = wire_index_parse(r->buf, flen, fcrc, foff, g->object_len, &r->ix, &e)) < 0)
        return fail(r, rc, "segment %s/%s: %s", r->s->local_dir, g->name, e.msg);
    r->ix_seg = i;
    return 0;
}

static int open_piece(dstl_reader *r)
{
    const wire_piece *p = &r->wh->pieces[r->piece];
    const wire_seg_ref *g = &r->wh->segs[p->seg];
    int rc = load_index(r, p->seg);
    if (rc < 0) return rc;
    if (p->section >= wire_index_nsections(r->ix))
        return fail(r, DSTL_ECORRUPT, "segment %s: handle names section %u of %zu", g->name, p->section,
                    wire_index_nsections(r->ix));
    const wire_section_info *sec = wire_index_section(r->ix, p->section);
    if (sec->offset != p->offset || sec->stored_len != p->stored_len || sec->crc != p->crc ||
        p->seq_first < sec->seq_first || p->seq_end > sec->seq_end || strcmp(sec->writer_id, r->wh->writer_id) != 0)
        return fail(r, DSTL_ECORRUPT, "segment %s section %u (offset %llu): does not match the handle's piece "
                    "(writer %s, seqs %llu-%llu)", g->name, p->section, (unsigned long long)sec->offset,
                    r->wh->writer_id, (unsigned long long)p->seq_first, (unsigned long long)p->seq_end);
    uint64_t off, len;
    wire_section_range(sec, r->kg_first, r->kg_last, &off, &len);
    if ((rc = grow(r, len ? len : 1)) < 0) return rc;
    if (len && (rc = read_exact(r, g->name, sec->offset + off, r->buf, len)) < 0) return rc;
    wire_err e = {{0}};
    rc = wire_iter_open(sec, r->buf, off, len, p->seq_first, p->seq_end, r->kg_first, r->kg_last, &r->it, &e);
    if (rc < 0)
        return fail(r, rc, "segment %s/%s section %u (offset %llu): %s", r->s->local_dir, g->name, p->section,
                    (unsigned long long)sec->offset, e.msg);
    return 0;
}

int dstl_reader_open(dstl_storage *s, const dstl_handle *h, uint32_t key_group_first,
                     uint32_t key_group_last, dstl_reader **out)
{
    if (!s || !h || !out) return err_fail(-EINVAL, "dstl_reader_open: NULL argument");
    if (key_group_first > key_group_last)
        return err_fail(-EINVAL, "dstl_reader_open: key group range %u-%u is empty", key_group_first,
                        key_group_last);
    dstl_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->wh = wire_handle_dup(h->wh))) {
        free(r);
        return err_fail(-ENOMEM, "dstl_reader_open: out of memory");
    }
    r->s = s;
    r->kg_first = key_group_first;
    r->kg_last = key_group_last;
    *out = r;
    return 0;
}

int dstl_reader_next(dstl_reader *r, dstl_record *rec)
{
    if (!r || !rec) return err_fail(-EINVAL, "dstl_reader_next: NULL argument");
    if (r->err) return err_fail(r->err, "%s", r->errmsg);
    for (;;) {
        if (!r->it) {
            if (r->piece >= r->wh->npieces) return 0;
            int rc = open_piece(r);
            if (rc < 0) return rc;
        }
        wire_record wr;
        wire_err e = {{0}};
        int rc = wire_iter_next(r->it, &wr, &e);
        if (rc == 1) {
            *rec = (dstl_record){wr.seq, wr.key_group, wr.is_meta, wr.data, wr.len};
            return 1;
        }
        const wire_piece *p = &r->wh->pieces[r->piece];
        if (rc < 0)
            return fail(r, rc, "segment %s/%s section %u: %s", r->s->local_dir, r->wh->segs[p->seg].name,
                        p->section, e.msg);
        wire_iter_free(r->it);
        r->it = NULL;
        r->piece++;
    }
}

void dstl_reader_close(dstl_reader *r)
{
    if (!r) return;
    wire_iter_free(r->it);
    wire_index_free(r->ix);
    wire_handle_free(r->wh);
    free(r->buf);
    free(r);
}
