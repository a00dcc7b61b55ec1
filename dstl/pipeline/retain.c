/*
 * dstl/pipeline/retain.c — what a failed batch keeps for the retry.
 *
 * Records are held once. A writer's records stay in its chunks from the hand-off until their
 * batch is encoded; then the segment buffer is their only copy (batch_release_records frees
 * the chunks), so at 1,024 writers the pipeline does not hold every in-flight record twice.
 * When that batch fails, each of its ranges is rebuilt from its section of the segment buffer —
 * opened like any segment: CRCs checked, decompressed, and for an encrypted segment decrypted
 * with the key ring it was sealed under (held by the batch) — back into the writer's
 * pending-record format, in a buffer of the range's own (retry_buf). The writer's next persist
 * sends it again; its new segment encodes (compresses, seals under a fresh data key) it anew.
 *
 * Every failed range keeps its records charged to dstl.upload.max-in-flight (retained) until
 * a persist sends it again or a truncate or close drops it: an outage fills the bound with what
 * waits for the store and applies backpressure, as Flink's in-flight limit does. With nothing
 * in flight but retained records a hand-off is still admitted (writer.c, room_for), so the
 * retries that free them can always go.
 *
 * A range whose rebuild fails (out of memory, or the segment does not open) is lost: its next
 * persist fails with the reason (writer.c, send_ranges) rather than silently skip records.
 * All under s->mu, pipeline thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstl/err.h"
#include "dstl/keys.h"
#include "dstl/pipeline/pipeline_int.h"
#include "dstl/storage.h"

void batch_release_section(dstl_storage *s, batch *b, pipeline_section *x)
{
    range *r = x->r;
    x->encoded = 1;
    b->released += r->rec_bytes;
    s->locked.pipe.in_flight_bytes -= r->rec_bytes;     /* only the encoded copy counts now */
    r->in_chunks = 0;
    free(r->retry_buf);
    r->retry_buf = NULL;
    range_spans_free(r);
    writer_tally_return(x->w, r);   /* it counted the chunks' records; a retry decodes its own */
    writer_release_sent_chunks(x->w);
}

void batch_release_records(dstl_storage *s, batch *b)
{
    for (pipeline_section *x = b->head; x; x = x->next)
        if (!x->encoded) batch_release_section(s, b, x);
    pthread_cond_broadcast(&s->room_cv);
}

/* Decodes section x of b's segment into a new pending-record buffer for its range. */
static int rebuild(batch *b, const pipeline_section *x, range *r)
{
    wire_err e = {{0}};
    if (!b->ix) {
        int rc = wire_segment_open_keyed(b->out.buf, b->out.len, b->keys ? keyring_wire(b->keys) : NULL, &b->ix, &e);
        if (rc < 0) return err_fail(rc, "segment %s: %s", b->name, e.msg);
    }
    const wire_section_info *sec = wire_index_section(b->ix, x->index);
    uint8_t *buf = malloc(r->rec_bytes ? r->rec_bytes : 1);
    wire_span *span = malloc(sizeof *span);
    wire_iter *it = NULL;
    int rc = buf && span ? 0 : -ENOMEM;
    if (rc == 0)
        rc = wire_iter_open(sec, b->out.buf + sec->offset, 0, sec->stored_len, r->seq_first, r->seq_end, 0, UINT32_MAX,
                            &it, &e);
    size_t used = 0;
    uint64_t next = r->seq_first;
    wire_record rec;
    while (rc == 0 && (rc = wire_iter_next(it, &rec, &e)) == 1) {
        size_t need = wire_rec_size(rec.len);
        if (rec.seq != next || used + need > r->rec_bytes) {
            rc = DSTL_ECORRUPT;
            snprintf(e.msg, sizeof e.msg, "section %u does not hold records [%llu, %llu) as handed off", x->index,
                     (unsigned long long)r->seq_first, (unsigned long long)r->seq_end);
            break;
        }
        used += wire_rec_put(buf + used, rec.is_meta, rec.key_group, rec.data, rec.len);
        next++;
        rc = 0;
    }
    wire_iter_free(it);
    if (rc == 0 && (next != r->seq_end || used != r->rec_bytes)) {
        rc = DSTL_ECORRUPT;
        snprintf(e.msg, sizeof e.msg, "section %u rebuilt %llu records, %zu bytes, not [%llu, %llu), %llu bytes",
                 x->index, (unsigned long long)(next - r->seq_first), used, (unsigned long long)r->seq_first,
                 (unsigned long long)r->seq_end, (unsigned long long)r->rec_bytes);
    }
    if (rc < 0) {
        free(buf);
        free(span);
        return rc == -ENOMEM ? err_fail(rc, "out of memory") : err_fail(rc, "segment %s: %s", b->name, e.msg);
    }
    *span = (wire_span){buf, used};
    r->retry_buf = buf;
    r->spans = span;
    r->nspans = 1;
    return 0;
}

void batch_retain(dstl_storage *s, batch *b, pipeline_section *x)
{
    range *r = x->r;
    if (x->encoded) {
        int rc = rebuild(b, x, r);
        if (rc < 0) {
            r->lost = rc;
            return;
        }
    }
    r->retained = r->rec_bytes;
    s->locked.pipe.in_flight_bytes += r->retained;
    s->locked.pipe.retained_bytes += r->retained;
}
