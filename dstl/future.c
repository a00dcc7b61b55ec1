/*
 * dstl/future.c — persist futures: built under s->mu from pieces as ranges become durable,
 * completed once (from the pipeline thread, or inside dstl_persist when nothing was
 * pending), waited on from any thread.
 *
 * A piece pins its segment (handle_refs) the moment it joins the future, so a truncate
 * that runs while the future waits for other ranges cannot delete it (FLINK-28440). On
 * success the pins become the live handle's references; on failure they are dropped.
 *
 * References: the user holds one until dstl_future_free; every waiter registered on a
 * section holds one until its section ends. The last one frees the future.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dstl/err.h"
#include "dstl/internal.h"

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

dstl_future *future_new(dstl_storage *s, const dstl_writer *w, uint64_t cp, uint64_t from, uint64_t to)
{
    dstl_future *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    if (!(f->writer_id = strdup(w->id))) {
        free(f);
        return NULL;
    }
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->refs = 1;
    f->s = s;
    f->writer_incarnation = w->incarnation;
    f->checkpoint_id = cp;
    f->from = from;
    f->to = to;
    f->t_start_ns = now_ns();
    return f;
}

static void future_destroy(dstl_future *f)
{
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    dstl_handle_free(f->handle);
    free(f->pieces);
    free(f->writer_id);
    free(f);
}

void future_unref(dstl_future *f)
{
    pthread_mutex_lock(&f->mu);
    int last = --f->refs == 0;
    pthread_mutex_unlock(&f->mu);
    if (last) future_destroy(f);
}

int future_add_piece(dstl_future *f, range *r, uint64_t lo, uint64_t hi)
{
    if (f->npieces == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 4;
        fpiece *p = realloc(f->pieces, cap * sizeof *p);
        if (!p) return err_fail(-ENOMEM, "persist of writer %s: out of memory", f->writer_id);
        f->pieces = p;
        f->cap = cap;
    }
    reg_pin(r->seg);
    f->pieces[f->npieces++] = (fpiece){r->seg, r->sec_index, r->loc, lo, hi, 0};
    return 0;
}

static int piece_cmp(const void *a, const void *b)
{
    const fpiece *x = a, *y = b;
    return x->seq_first < y->seq_first ? -1 : x->seq_first > y->seq_first;
}

/* Builds the wire handle from the pieces (sorted, contiguous over [from, to)). */
static int build_handle(dstl_future *f, wire_handle **out)
{
    dstl_storage *s = f->s;
    if (f->npieces > 1) qsort(f->pieces, f->npieces, sizeof *f->pieces, piece_cmp);
    wire_handle *h = calloc(1, sizeof *h);
    if (!h) return -ENOMEM;
    h->storage_id = strdup(s->run_id);
    h->writer_id = strdup(f->writer_id);
    h->remote_uri = strdup(s->cv.remote_uri);
    h->writer_incarnation = f->writer_incarnation;
    h->checkpoint_id = f->checkpoint_id;
    h->from_seq = f->from;
    h->to_seq = f->to;
    h->segs = calloc(f->npieces ? f->npieces : 1, sizeof *h->segs);
    h->pieces = calloc(f->npieces ? f->npieces : 1, sizeof *h->pieces);
    if (!h->storage_id || !h->writer_id || !h->remote_uri || !h->segs || !h->pieces) {
        wire_handle_free(h);
        return -ENOMEM;
    }
    uint64_t expect = f->from, whole = 0;
    for (size_t i = 0; i < f->npieces; i++) {
        fpiece *p = &f->pieces[i];
        if (p->seq_first != expect) {
            wire_handle_free(h);
            return err_fail(-EIO, "persist of writer %s: internal gap at seq %llu (piece starts at %llu)",
                            f->writer_id, (unsigned long long)expect, (unsigned long long)p->seq_first);
        }
        expect = p->seq_end;
        uint32_t si = 0;
        while (si < h->nsegs && strcmp(h->segs[si].name, p->sg->name) != 0) si++;
        if (si == h->nsegs) {
            wire_seg_ref *g = &h->segs[h->nsegs++];
            if (!(g->name = strdup(p->sg->name))) {
                wire_handle_free(h);
                return -ENOMEM;
            }
            g->object_len = p->sg->size;
            g->footer_offset = p->sg->footer_offset;
            g->footer_len = p->sg->footer_len;
            g->footer_crc = p->sg->footer_crc;
        }
        whole += p->loc.data_bytes;
        h->pieces[h->npieces++] = (wire_piece){
            .seg = si, .section = p->sec_index, .offset = p->loc.offset, .stored_len = p->loc.stored_len,
            .crc = p->loc.crc, .seq_first = p->seq_first, .seq_end = p->seq_end,
            .data_bytes = p->loc.data_bytes, .kg_first = p->loc.kg_first, .kg_last = p->loc.kg_last};
    }
    if (expect != f->to) {
        wire_handle_free(h);
        return err_fail(-EIO, "persist of writer %s: internal gap at seq %llu (to %llu)", f->writer_id,
                        (unsigned long long)expect, (unsigned long long)f->to);
    }
    /* Exact unless `from` fell inside records that were already durable at a point the
     * writer never reported through dstl_writer_next_seq; then whole sections count. */
    h->size = f->size != UINT64_MAX ? f->size : whole;
    *out = h;
    return 0;
}

static void complete(dstl_future *f, int err, dstl_handle *h)
{
    pthread_mutex_lock(&f->mu);
    f->err = err;
    f->handle = h;
    f->done = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* Ends the build with err (s->mu held). Pins are dropped on failure. */
void future_finish(dstl_future *f, int err, const char *detail)
{
    dstl_storage *s = f->s;
    char why[sizeof f->errmsg];
    snprintf(why, sizeof why, "%s", detail ? detail : dstl_last_error());
    dstl_handle *h = NULL;
    wire_handle *wh = NULL;
    if (err == 0 && (err = build_handle(f, &wh)) == 0) {
        if (!(h = handle_wrap(wh))) {
            wire_handle_free(wh);
            err = -ENOMEM;
        }
    }
    pthread_mutex_lock(&f->mu);
    int user_gone = f->user_gone;
    pthread_mutex_unlock(&f->mu);
    if (err == 0 && user_gone) {
        /* Nobody can ever see or discard this handle (the future was freed while pending):
         * keep nothing for it (Flink leaked such uploads: FLINK-25511). */
        for (size_t i = 0; i < f->npieces; i++) reg_unpin(s, f->pieces[i].sg);
        f->npieces = 0;
    } else if (err == 0 && (err = reg_live_add(s, h, f->pieces, f->npieces)) < 0) {
        dstl_handle_free(h);
        h = NULL;
    }
    if (err < 0) {
        for (size_t i = 0; i < f->npieces; i++) reg_unpin(s, f->pieces[i].sg);
        s->st_persist_failures++;
        snprintf(f->errmsg, sizeof f->errmsg, "persist of writer %s [%llu, %llu) checkpoint %llu: %.400s",
                 f->writer_id, (unsigned long long)f->from, (unsigned long long)f->to,
                 (unsigned long long)f->checkpoint_id, why);
    } else {
        histo_add(&s->persist_lat_us, (now_ns() - f->t_start_ns) / 1000);
    }
    f->npieces = 0;
    /* DURABILITY: the future completes here, after every piece's segment was acknowledged
     * durable at the configured level (pipeline.c marks ranges durable only from the store's
     * completion). A crash before this point loses nothing acknowledged. */
    complete(f, err, h);
}

void future_complete_if_ready(dstl_future *f)
{
    if (f->outstanding > 0) return;
    if (f->failed) future_finish(f, f->failed, f->errmsg[0] ? f->errmsg : NULL);
    else future_finish(f, 0, NULL);
}

/* ---- public ---- */

int dstl_future_wait(dstl_future *f, int64_t timeout_ms)
{
    if (!f) return err_fail(-EINVAL, "dstl_future_wait: future is NULL");
    pthread_mutex_lock(&f->mu);
    if (timeout_ms < 0) {
        while (!f->done) pthread_cond_wait(&f->cv, &f->mu);
    } else if (!f->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (timeout_ms % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        while (!f->done && pthread_cond_timedwait(&f->cv, &f->mu, &ts) == 0) {
        }
    }
    int done = f->done;
    pthread_mutex_unlock(&f->mu);
    return done ? 0 : err_fail(-ETIMEDOUT, "persist of writer %s checkpoint %llu: still pending after %lld ms",
                               f->writer_id, (unsigned long long)f->checkpoint_id, (long long)timeout_ms);
}

int dstl_future_done(const dstl_future *cf)
{
    dstl_future *f = (dstl_future *)cf;
    pthread_mutex_lock(&f->mu);
    int d = f->done;
    pthread_mutex_unlock(&f->mu);
    return d;
}

int dstl_future_result(dstl_future *f, dstl_handle **out)
{
    if (!f || !out) return err_fail(-EINVAL, "dstl_future_result: NULL argument");
    pthread_mutex_lock(&f->mu);
    int rc;
    if (!f->done) {
        rc = err_fail(-EAGAIN, "persist of writer %s checkpoint %llu: not done yet", f->writer_id,
                      (unsigned long long)f->checkpoint_id);
    } else if (f->err) {
        rc = err_fail(f->err, "%s", f->errmsg);
    } else {
        wire_handle *dup = wire_handle_dup(f->handle->wh);
        dstl_handle *h = dup ? handle_wrap(dup) : NULL;
        if (!h) {
            wire_handle_free(dup);
            rc = err_fail(-ENOMEM, "dstl_future_result: out of memory");
        } else {
            *out = h;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

void dstl_future_free(dstl_future *f)
{
    if (!f) return;
    pthread_mutex_lock(&f->mu);
    f->user_gone = 1;
    pthread_mutex_unlock(&f->mu);
    future_unref(f);
}
