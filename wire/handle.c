/*
 * wire/handle.c — the handle's bytes (FORMAT.md, "Handle"): what a persist returns and a
 * checkpoint stores, naming the segments and section pieces that hold one writer's
 * [from_seq, to_seq).
 *
 * Bytes: "DSTH", u16 version, u16 flags, a protobuf Handle, CRC32C of all that. Handles come
 * back from checkpoint metadata that DSTL does not control, so decoding trusts nothing: the
 * CRC rejects random and damaged bytes, and then every field is checked (pieces contiguous
 * over [from, to), indices in range, pieces inside their segment's sections area, the size
 * equal to the pieces' data bytes, object names that cannot leave the data directory).
 * Encoding runs the same checks, so a handle that encodes also decodes.
 *
 * Pure; any thread; a decoded handle is owned by the caller (wire_handle_free).
 */
#include <errno.h>
#include <stdlib.h>

#include "wire/dstl.pb-c.h"
#include "wire/wire_int.h"

#define ULL(x) ((unsigned long long)(x))
#define NAME_MAX_LEN 1024u

/* A segment name is a relative path of printable ASCII without "." or ".." components, so a
 * reader can join it to its directory or prefix without escaping it. */
static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > NAME_MAX_LEN || s[0] == '/') return 0;
    const char *comp = s;
    for (const char *p = s;; p++) {
        if (*p == '/' || *p == '\0') {
            size_t cl = (size_t)(p - comp);
            if (cl == 0 || (cl == 1 && comp[0] == '.') || (cl == 2 && comp[0] == '.' && comp[1] == '.'))
                return 0;
            if (*p == '\0') return 1;
            comp = p + 1;
        } else if (*p < 0x21 || *p > 0x7e || *p == '\\') {
            return 0;
        }
    }
}

/* Checks a handle's invariants; code is -EINVAL (encoding) or DSTL_ECORRUPT (decoding). */
static int handle_check(const wire_handle *h, int code, wire_err *err)
{
    if (!h->storage_id || !h->storage_id[0] || !h->writer_id || !h->writer_id[0])
        return wire_fail(err, code, "handle: empty storage or writer id");
    if (h->from_seq > h->to_seq || (h->from_seq == h->to_seq) != (h->npieces == 0))
        return wire_fail(err, code, "handle of %s: seq range [%llu, %llu) with %zu pieces", h->writer_id,
                         ULL(h->from_seq), ULL(h->to_seq), h->npieces);
    for (size_t i = 0; i < h->nsegs; i++) {
        const wire_seg_ref *s = &h->segs[i];
        if (!s->name || !name_ok(s->name))
            return wire_fail(err, code, "handle of %s: segment %zu has a bad name", h->writer_id, i);
        if (s->footer_offset < WIRE_SEG_HEADER_LEN || s->footer_len == 0 ||
            s->object_len < s->footer_offset ||
            s->object_len - s->footer_offset != (uint64_t)s->footer_len + WIRE_SEG_TRAILER_LEN)
            return wire_fail(err, code, "handle of %s: segment %s: footer [%llu, +%u) does not fit %llu bytes",
                             h->writer_id, s->name, ULL(s->footer_offset), s->footer_len, ULL(s->object_len));
    }
    uint64_t seq = h->from_seq, size = 0;
    for (size_t i = 0; i < h->npieces; i++) {
        const wire_piece *p = &h->pieces[i];
        const char *bad = NULL;
        if (p->seg >= h->nsegs) bad = "names no segment of the handle";
        else if (p->seq_first != seq || p->seq_end <= p->seq_first || p->seq_end > h->to_seq)
            bad = "does not continue the seq range";
        else if (p->offset < WIRE_SEG_HEADER_LEN || p->stored_len == 0 ||
                 p->offset > h->segs[p->seg].footer_offset ||
                 p->stored_len > h->segs[p->seg].footer_offset - p->offset)
            bad = "lies outside its segment's sections";
        else if (p->data_bytes > UINT64_MAX - size) bad = "overflows the size";
        if (bad)
            return wire_fail(err, code, "handle of %s: piece %zu (seq [%llu, %llu), offset %llu) %s",
                             h->writer_id, i, ULL(p->seq_first), ULL(p->seq_end), ULL(p->offset), bad);
        seq = p->seq_end;
        size += p->data_bytes;
    }
    if (seq != h->to_seq || size != h->size)
        return wire_fail(err, code, "handle of %s: pieces end at seq %llu (want %llu), hold %llu bytes (size %llu)",
                         h->writer_id, ULL(seq), ULL(h->to_seq), ULL(size), ULL(h->size));
    return 0;
}

int wire_handle_encode(const wire_handle *h, void **buf, size_t *len, wire_err *err)
{
    if (!h || !buf || !len) return wire_fail(err, -EINVAL, "handle encode: NULL argument");
    int rc = handle_check(h, -EINVAL, err);
    if (rc < 0) return rc;
    Dstl__Handle m;
    dstl__handle__init(&m);
    m.format_version = WIRE_VERSION;
    m.storage_id = h->storage_id;
    m.writer_id = h->writer_id;
    m.remote_uri = h->remote_uri ? h->remote_uri : (char *)"";
    m.checkpoint_id = h->checkpoint_id;
    m.from_seq = h->from_seq;
    m.to_seq = h->to_seq;
    m.size = h->size;
    m.writer_incarnation = h->writer_incarnation;   /* 0 is omitted: v1 bytes stay as they were */
    Dstl__SegmentRef *segs = calloc(h->nsegs + 1, sizeof *segs);
    Dstl__SegmentRef **segp = calloc(h->nsegs + 1, sizeof *segp);
    Dstl__Piece *pcs = calloc(h->npieces + 1, sizeof *pcs);
    Dstl__Piece **pcp = calloc(h->npieces + 1, sizeof *pcp);
    uint8_t *out = NULL;
    rc = -ENOMEM;
    if (!segs || !segp || !pcs || !pcp) goto done;
    for (size_t i = 0; i < h->nsegs; i++) {
        const wire_seg_ref *s = &h->segs[i];
        dstl__segment_ref__init(&segs[i]);
        segs[i].name = s->name;
        segs[i].object_len = s->object_len;
        segs[i].footer_offset = s->footer_offset;
        segs[i].footer_len = s->footer_len;
        segs[i].footer_crc = s->footer_crc;
        segs[i].encrypted = s->encrypted != 0;
        segp[i] = &segs[i];
    }
    for (size_t i = 0; i < h->npieces; i++) {
        const wire_piece *p = &h->pieces[i];
        dstl__piece__init(&pcs[i]);
        pcs[i].segment = p->seg;
        pcs[i].section = p->section;
        pcs[i].offset = p->offset;
        pcs[i].stored_len = p->stored_len;
        pcs[i].crc32c = p->crc;
        pcs[i].seq_first = p->seq_first;
        pcs[i].seq_end = p->seq_end;
        pcs[i].data_bytes = p->data_bytes;
        pcs[i].kg_first = p->kg_first;
        pcs[i].kg_last = p->kg_last;
        pcp[i] = &pcs[i];
    }
    m.n_segments = h->nsegs;
    m.segments = segp;
    m.n_pieces = h->npieces;
    m.pieces = pcp;
    size_t plen = dstl__handle__get_packed_size(&m);
    size_t n = WIRE_HANDLE_HDR_LEN + plen + WIRE_HANDLE_CRC_LEN;
    out = malloc(n);
    if (!out) goto done;
    memcpy(out, WIRE_HANDLE_MAGIC, 4);
    wire_put16(out + 4, WIRE_VERSION);
    wire_put16(out + 6, 0);
    dstl__handle__pack(&m, out + WIRE_HANDLE_HDR_LEN);
    wire_put32(out + n - 4, wire_crc32c(0, out, n - 4));
    *buf = out;
    *len = n;
    rc = 0;
done:
    free(segs);
    free(segp);
    free(pcs);
    free(pcp);
    if (rc == -ENOMEM) wire_fail(err, rc, "handle encode: out of memory");
    return rc;
}

/* A wire_handle whose strings point into the unpacked message; arrays malloc'd. */
static int handle_view(const Dstl__Handle *m, wire_handle *v)
{
    *v = (wire_handle){.storage_id = m->storage_id, .writer_id = m->writer_id,
                       .remote_uri = m->remote_uri, .checkpoint_id = m->checkpoint_id,
                       .from_seq = m->from_seq, .to_seq = m->to_seq, .size = m->size,
                       .writer_incarnation = m->writer_incarnation,
                       .nsegs = m->n_segments, .npieces = m->n_pieces};
    v->segs = calloc(m->n_segments + 1, sizeof *v->segs);
    v->pieces = calloc(m->n_pieces + 1, sizeof *v->pieces);
    if (!v->segs || !v->pieces) return -ENOMEM;
    for (size_t i = 0; i < m->n_segments; i++) {
        const Dstl__SegmentRef *s = m->segments[i];
        v->segs[i] = (wire_seg_ref){.name = s->name, .object_len = s->object_len,
                                    .footer_offset = s->footer_offset, .footer_len = s->footer_len,
                                    .footer_crc = s->footer_crc, .encrypted = s->encrypted};
    }
    for (size_t i = 0; i < m->n_pieces; i++) {
        const Dstl__Piece *p = m->pieces[i];
        v->pieces[i] = (wire_piece){.seg = p->segment, .section = p->section, .offset = p->offset,
                                    .stored_len = p->stored_len, .crc = p->crc32c,
                                    .seq_first = p->seq_first, .seq_end = p->seq_end,
                                    .data_bytes = p->data_bytes, .kg_first = p->kg_first,
                                    .kg_last = p->kg_last};
    }
    return 0;
}

int wire_handle_decode(const void *buf, size_t len, wire_handle **out, wire_err *err)
{
    if (!buf || !out) return wire_fail(err, -EINVAL, "handle decode: NULL argument");
    const uint8_t *b = buf;
    if (len < WIRE_HANDLE_HDR_LEN + WIRE_HANDLE_CRC_LEN || memcmp(b, WIRE_HANDLE_MAGIC, 4) != 0)
        return wire_fail(err, DSTL_ECORRUPT, "handle offset 0: no handle magic (%zu bytes)", len);
    uint32_t crc = wire_crc32c(0, b, len - 4);
    if (crc != wire_le32(b + len - 4))
        return wire_fail(err, DSTL_ECORRUPT, "handle offset %zu: CRC32C %08x, computed %08x", len - 4,
                         wire_le32(b + len - 4), crc);
    if (wire_le16(b + 4) != WIRE_VERSION || wire_le16(b + 6) != 0)
        return wire_fail(err, DSTL_ECORRUPT, "handle offset 4: format version %u flags %#x, this reader knows %u",
                         wire_le16(b + 4), wire_le16(b + 6), WIRE_VERSION);
    Dstl__Handle *m = dstl__handle__unpack(NULL, len - WIRE_HANDLE_HDR_LEN - WIRE_HANDLE_CRC_LEN,
                                           b + WIRE_HANDLE_HDR_LEN);
    if (!m)
        return wire_fail(err, DSTL_ECORRUPT, "handle offset %u: does not parse as protobuf", WIRE_HANDLE_HDR_LEN);
    wire_handle v;
    int rc = handle_view(m, &v);
    if (rc < 0) {
        wire_fail(err, rc, "handle decode: out of memory");
    } else if (m->format_version != WIRE_VERSION) {
        rc = wire_fail(err, DSTL_ECORRUPT, "handle offset %u: protobuf format version %u",
                       WIRE_HANDLE_HDR_LEN, m->format_version);
    } else if ((rc = handle_check(&v, DSTL_ECORRUPT, err)) == 0) {
        *out = wire_handle_dup(&v);
        if (!*out) rc = wire_fail(err, -ENOMEM, "handle decode: out of memory");
    }
    free(v.segs);
    free(v.pieces);
    dstl__handle__free_unpacked(m, NULL);
    return rc;
}

static char *dup_str(const char *s, int *ok)
{
    char *d = strdup(s ? s : "");
    if (!d) *ok = 0;
    return d;
}

wire_handle *wire_handle_dup(const wire_handle *h)
{
    if (!h) return NULL;
    wire_handle *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    int ok = 1;
    *d = *h;
    d->packed = 0;              /* its parts are allocated one by one below */
    d->storage_id = dup_str(h->storage_id, &ok);
    d->writer_id = dup_str(h->writer_id, &ok);
    d->remote_uri = dup_str(h->remote_uri, &ok);
    d->segs = calloc(h->nsegs + 1, sizeof *d->segs);
    d->pieces = malloc((h->npieces + 1) * sizeof *d->pieces);
    if (!d->segs || !d->pieces) {
        ok = 0;
        d->nsegs = 0;
    }
    for (size_t i = 0; ok && i < h->nsegs; i++) {
        d->segs[i] = h->segs[i];
        d->segs[i].name = dup_str(h->segs[i].name, &ok);
    }
    if (ok && h->npieces) memcpy(d->pieces, h->pieces, h->npieces * sizeof *d->pieces);
    if (!ok) {
        wire_handle_free(d);
        return NULL;
    }
    return d;
}

void wire_handle_free(wire_handle *h)
{
    if (!h) return;
    if (h->packed) {
        free(h);
        return;
    }
    free(h->storage_id);
    free(h->writer_id);
    free(h->remote_uri);
    for (size_t i = 0; h->segs && i < h->nsegs; i++) free(h->segs[i].name);
    free(h->segs);
    free(h->pieces);
    free(h);
}
