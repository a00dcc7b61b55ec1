/*
 * dstl/handle.c — the public handle API over wire_handle, and segment names.
 *
 * Handles are immutable after creation and safe to share between threads. Their bytes are
 * wire's handle format (wire/FORMAT.md); parse validates fully. A handle's identity —
 * (storage run, writer, writer incarnation, checkpoint, from, to) — is what
 * dstl_handle_discard matches (the registry compares it: reg_live_take), so a handle parsed
 * back from bytes discards the same references as the one persist returned. The incarnation
 * (which dstl_writer_open of the writer id in the run) keeps a reopened writer, whose seqs
 * restart at 0, from producing a handle equal to one of its earlier opening: the registry
 * would take it for a repeat and drop its pins. Handles from before the field have
 * incarnation 0, which no writer of a run gets (they count from 1).
 *
 * Segment names: "<run id>-<segment no, 12 decimal digits>.seg", unique per storage run;
 * the run id is 16 random hex digits chosen at dstl_storage_open.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstl/err.h"
#include "dstl/handle.h"
#include "dstl/objcache.h"

dstl_handle *handle_wrap(wire_handle *wh)
{
    dstl_handle *h = malloc(sizeof *h);
    if (!h) return NULL;
    h->wh = wh;
    h->wh_inline = 0;
    atomic_init(&h->refs, 1);
    return h;
}

dstl_handle *handle_wrap_in(void *mem, wire_handle *wh)
{
    dstl_handle *h = mem;
    h->wh = wh;
    h->wh_inline = 1;
    atomic_init(&h->refs, 1);
    return h;
}

dstl_handle *handle_ref(dstl_handle *h)
{
    atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
    return h;
}

int dstl_handle_serialize(const dstl_handle *h, void **buf, size_t *len)
{
    if (!h || !buf || !len) return err_fail(-EINVAL, "dstl_handle_serialize: NULL argument");
    wire_err e = {{0}};
    int rc = wire_handle_encode(h->wh, buf, len, &e);
    return rc < 0 ? err_fail(rc, "serialize handle of writer %s: %s", h->wh->writer_id, e.msg) : 0;
}

int dstl_handle_parse(const void *buf, size_t len, dstl_handle **out)
{
    if (!buf || !out) return err_fail(-EINVAL, "dstl_handle_parse: NULL argument");
    wire_err e = {{0}};
    wire_handle *wh = NULL;
    int rc = wire_handle_decode(buf, len, &wh, &e);
    if (rc < 0) return err_fail(rc, "handle bytes (%zu): %s", len, e.msg);
    for (size_t i = 0; i < wh->nsegs; i++) {
        char run[32];
        uint64_t no;
        if (segment_name_parse(wh->segs[i].name, run, sizeof run, &no) < 0) {
            rc = err_fail(DSTL_ECORRUPT, "handle bytes: segment %zu has a malformed name '%.80s'", i,
                          wh->segs[i].name);
            wire_handle_free(wh);
            return rc;
        }
    }
    dstl_handle *h = handle_wrap(wh);
    if (!h) {
        wire_handle_free(wh);
        return err_fail(-ENOMEM, "dstl_handle_parse: out of memory");
    }
    *out = h;
    return 0;
}

void dstl_handle_free(dstl_handle *h)
{
    if (!h) return;
    if (atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) != 1) return;
    if (!h->wh_inline) wire_handle_free(h->wh);
    if (h->wh_inline) oc_free(h);       /* a future's handle block (handle_wrap_in) */
    else free(h);
}

const char *dstl_handle_writer_id(const dstl_handle *h) { return h->wh->writer_id; }
uint64_t dstl_handle_checkpoint_id(const dstl_handle *h) { return h->wh->checkpoint_id; }
uint64_t dstl_handle_from_seq(const dstl_handle *h) { return h->wh->from_seq; }
uint64_t dstl_handle_to_seq(const dstl_handle *h) { return h->wh->to_seq; }
uint64_t dstl_handle_size(const dstl_handle *h) { return h->wh->size; }

/* ---- segment names ---- */

void segment_name_format(const char *run_id, uint64_t no, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s-%012llu.seg", run_id, (unsigned long long)no);
}

int segment_name_parse(const char *name, char *run_id, size_t cap, uint64_t *no)
{
    const char *dash = strrchr(name, '-');
    if (!dash || dash == name || (size_t)(dash - name) >= cap) return -EINVAL;
    const char *p = dash + 1;
    uint64_t n = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (n > (UINT64_MAX - 9) / 10) return -EINVAL;
        n = n * 10 + (uint64_t)(*p - '0');
    }
    if (digits == 0 || strcmp(p, ".seg") != 0) return -EINVAL;
    for (const char *q = name; q < dash; q++)
        if (!((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f'))) return -EINVAL;
    memcpy(run_id, name, (size_t)(dash - name));
    run_id[dash - name] = '\0';
    *no = n;
    return 0;
}
