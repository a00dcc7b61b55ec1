/*
 * dstl/future.c — persist futures (the protocol: dstl/future.h): built under s->mu from
 * pieces as ranges become durable, completed once (from the pipeline thread, or inside
 * dstl_persist when nothing was pending), waited on from any thread.
 *
 * A piece pins its segment (handle_refs) the moment it joins the future, so a truncate
 * that runs while the future waits for other ranges cannot delete it (FLINK-28440). On
 * success the pins become the live handle's references; on failure they are dropped.
 *
 * References: the user holds one until dstl_future_free; every waiter registered on a
 * section holds one until its section ends; a completion waiting for its callback holds one
 * until the callback returned. The last one frees the future.
 *
 * Completion in two steps. A future completes with s->mu held (its handle is built and made
 * live there), but it becomes done — its waiters woken, its callback queued — only in
 * future_signal_completed, which the completing thread calls once it holds no lock: the
 * pipeline right after the steps of a turn that end batches and at the end of every turn,
 * dstl_persist after it unlocks.
 *
 * Callbacks (dstl_future_on_done). No callback may run under s->mu (it may call
 * dstl_persist, which takes it). So signalling only queues a future whose callback is
 * registered on the signalling thread's `deferred` list (a reference held), and that thread
 * runs the list (future_run_callbacks) at the end of the pipeline's turn. A future completes
 * on the pipeline thread, or inside its own dstl_persist (nothing to wait for), before anyone
 * could register a callback on it. A callback registered on a future already done runs at
 * once, in dstl_future_on_done. Either way exactly once: the check of `done` and of the
 * callback happen under the future's mutex.
 * While a callback runs, the thread-local `in_callback` makes every DSTL call that would block
 * return instead (future_in_callback).
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dstl/clock.h"
#include "dstl/err.h"
#include "dstl/future.h"
#include "dstl/handle.h"
#include "dstl/objcache.h"

typedef struct {
    run_segment *sg;            /* pinned */
    uint32_t sec_index;
    wire_section_loc loc;
    uint64_t seq_first, seq_end;
} future_piece;

struct future_waiter {
    future_waiter *next;
    dstl_future *f;
    uint64_t lo, hi;
};

struct dstl_future {
    /* under mu: what waiters on any thread see */
    pthread_mutex_t mu;
    pthread_cond_t done_cv;
    int refs;                   /* user + one per waiter + one while a callback is queued */
    int done, err, user_gone;
    dstl_future_fn cb;          /* dstl_future_on_done's; NULL when none or cancelled */
    void *cb_arg;
    int cb_set;                 /* a callback was registered (only one may be) */
    dstl_future *deferred_next; /* on the completing thread's list, waiting for cb */
    dstl_future *signal_next;   /* on the completing thread's list, to be signalled */
    int nblocked;               /* threads asleep in dstl_future_wait on done_cv */
    dstl_future *wake_next[2];  /* futures whose sleepers this one's waiter wakes (refs held) */
    dstl_handle *handle;

    /* fixed at creation */
    const future_ctx *ctx;
    char *writer_id;
    uint64_t writer_incarnation;
    uint64_t checkpoint_id, from, to;
    uint64_t t_start_ns;

    /* under construction: guarded by s->mu */
    uint64_t size;
    int building;               /* future_build_end not called yet */
    int outstanding;            /* waiters whose section has not ended */
    int failed;                 /* the first failure; errmsg holds its detail */
    future_piece *pieces;       /* &piece0 until a second piece comes */
    size_t npieces, cap;
    future_piece piece0;
    /* the first waiter lives here (one per in-flight range: most persists have one), so it
     * costs no allocation; waiter0_used while it is on a list */
    future_waiter waiter0;
    int waiter0_used;
    /* the registry's record of the handle, made with the future (outside s->mu): the registry
     * takes it when the future completes */
    struct live_handle *live;
    /* memory for the handle, from the writer's thread (outside s->mu), used when the handle
     * fits (one piece: most persists); else the completion allocates. The writer's thread
     * frees either way, so no block crosses threads. */
    void *hbuf;
    size_t hbuf_cap;
    /* under mu, last: a persist's fields above fit in a few lines (the pipeline completes
     * ~48 K futures a second at 1,024 writers, each cold on its core), and future_new clears
     * only those, not these 512 bytes */
    char errmsg[512];
    char id_buf[];              /* writer_id points here */
};

/* A packed wire handle's bytes: np pieces, their segments' names names bytes with NULs. */
static size_t handle_bytes(const future_ctx *ctx, size_t nwid, size_t np, size_t names)
{
    return sizeof(wire_handle) + np * (sizeof(wire_seg_ref) + sizeof(wire_piece)) + strlen(ctx->run_id) + nwid +
           strlen(ctx->remote_uri) + 3 + names;
}

dstl_future *future_new(const future_ctx *ctx, const char *writer_id, uint64_t writer_incarnation, uint64_t cp,
                        uint64_t from, uint64_t to)
{
    /* one allocation, the id inline: dstl_persist makes this before it takes s->mu */
    size_t nid = strlen(writer_id) + 1;
    dstl_future *f = oc_alloc(sizeof *f + nid);   /* dstl/objcache.h: this thread's next persists reuse it */
    if (!f) return NULL;
    memset(f, 0, offsetof(struct dstl_future, errmsg));
    f->errmsg[0] = 0;
    f->writer_id = memcpy(f->id_buf, writer_id, nid);
    if (!(f->live = reg_live_new(ctx->run_id, writer_id, writer_incarnation, cp, from, to))) {
        oc_free(f);
        return NULL;
    }
    f->hbuf_cap = HANDLE_HDR_BYTES + handle_bytes(ctx, nid - 1, 1, sizeof ((run_segment *)0)->name);
    f->hbuf = oc_alloc(f->hbuf_cap);   /* NULL: the completion allocates */
    f->pieces = &f->piece0;
    f->cap = 1;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->done_cv, NULL);
    f->refs = 1;
    f->ctx = ctx;
    f->building = 1;
    f->writer_incarnation = writer_incarnation;
    f->checkpoint_id = cp;
    f->from = from;
    f->to = to;
    f->t_start_ns = now_ns();
    return f;
}

static void future_destroy(dstl_future *f)
{
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->done_cv);
    dstl_handle_free(f->handle);
    if (f->pieces != &f->piece0) free(f->pieces);
    reg_live_free(f->live);
    oc_free(f->hbuf);
    oc_free(f);
}

void future_abandon(dstl_future *f) { future_destroy(f); }

static void future_unref(dstl_future *f)
{
    pthread_mutex_lock(&f->mu);
    int last = --f->refs == 0;
    pthread_mutex_unlock(&f->mu);
    if (last) future_destroy(f);
}

int future_add_piece(dstl_future *f, run_segment *g, uint32_t sec_index, const wire_section_loc *loc, uint64_t lo,
                     uint64_t hi)
{
    if (f->npieces == f->cap) {
        size_t cap = f->cap * 2 < 4 ? 4 : f->cap * 2;
        future_piece *p = realloc(f->pieces == &f->piece0 ? NULL : f->pieces, cap * sizeof *p);
        if (!p) return err_fail(-ENOMEM, "persist of writer %s: out of memory", f->writer_id);
        if (f->pieces == &f->piece0) p[0] = f->piece0;
        f->pieces = p;
        f->cap = cap;
    }
    reg_pin(g);
    f->pieces[f->npieces++] = (future_piece){g, sec_index, *loc, lo, hi};
    return 0;
}

int future_wait_on(dstl_future *f, future_waitlist *wl, uint64_t lo, uint64_t hi)
{
    future_waiter *fw = f->waiter0_used ? malloc(sizeof *fw) : &f->waiter0;
    if (fw == &f->waiter0) f->waiter0_used = 1;
    if (!fw) return err_fail(-ENOMEM, "persist of writer %s: out of memory", f->writer_id);
    *fw = (future_waiter){wl->head, f, lo, hi};
    wl->head = fw;
    f->outstanding++;
    /* the waiter's reference, without f->mu: f is still being built under s->mu and no other
     * thread has it yet (the pipeline reaches it through wl only after taking s->mu) */
    f->refs++;
    return 0;
}

static int piece_cmp(const void *a, const void *b)
{
    const future_piece *x = a, *y = b;
    return x->seq_first < y->seq_first ? -1 : x->seq_first > y->seq_first;
}

/* Copies s (n bytes and its NUL) to *at and advances it. */
static char *put_str(char **at, const char *s, size_t n)
{
    char *d = memcpy(*at, s, n + 1);
    *at += n + 1;
    return d;
}

/* Builds the wire handle from the pieces (sorted, contiguous over [from, to)), in one
 * allocation (wire_handle.packed): at 1,024 writers a handle is built for every persist on
 * the pipeline thread and freed by the writer's thread, and seven small mallocs and frees
 * each way (the struct, its arrays and strings) were most of what building one cost. It goes
 * into f->hbuf when it fits (*in_hbuf set): no allocation under s->mu, none freed across
 * threads. */
static int build_handle(dstl_future *f, wire_handle **out, int *in_hbuf)
{
    const future_ctx *ctx = f->ctx;
    if (f->npieces > 1) qsort(f->pieces, f->npieces, sizeof *f->pieces, piece_cmp);
    size_t nrun = strlen(ctx->run_id), nwid = strlen(f->writer_id), nuri = strlen(ctx->remote_uri);
    size_t np = f->npieces ? f->npieces : 1, names = 0;
    for (size_t i = 0; i < f->npieces; i++) names += strlen(f->pieces[i].sg->name) + 1;
    size_t bytes = handle_bytes(ctx, nwid, np, names);
    *in_hbuf = f->hbuf && HANDLE_HDR_BYTES + bytes <= f->hbuf_cap;
    wire_handle *h = *in_hbuf ? memset((char *)f->hbuf + HANDLE_HDR_BYTES, 0, bytes) : calloc(1, bytes);
    if (!h) return -ENOMEM;
    h->packed = 1;
    h->segs = (wire_seg_ref *)(h + 1);
    h->pieces = (wire_piece *)(h->segs + np);
    char *at = (char *)(h->pieces + np);
    h->storage_id = put_str(&at, ctx->run_id, nrun);
    h->writer_id = put_str(&at, f->writer_id, nwid);
    h->remote_uri = put_str(&at, ctx->remote_uri, nuri);
    h->writer_incarnation = f->writer_incarnation;
    h->checkpoint_id = f->checkpoint_id;
    h->from_seq = f->from;
    h->to_seq = f->to;
    uint64_t expect = f->from, whole = 0;
    for (size_t i = 0; i < f->npieces; i++) {
        future_piece *p = &f->pieces[i];
        if (p->seq_first != expect) {
            if (!*in_hbuf) wire_handle_free(h);
            return err_fail(-EIO, "persist of writer %s: internal gap at seq %llu (piece starts at %llu)",
                            f->writer_id, (unsigned long long)expect, (unsigned long long)p->seq_first);
        }
        expect = p->seq_end;
        uint32_t si = 0;
        while (si < h->nsegs && strcmp(h->segs[si].name, p->sg->name) != 0) si++;
        if (si == h->nsegs) {
            wire_seg_ref *g = &h->segs[h->nsegs++];
            g->name = put_str(&at, p->sg->name, strlen(p->sg->name));
            g->object_len = p->sg->size;
            g->footer_offset = p->sg->footer_offset;
            g->footer_len = p->sg->footer_len;
            g->footer_crc = p->sg->footer_crc;
            g->encrypted = p->sg->sealed;
        }
        whole += p->loc.data_bytes;
        h->pieces[h->npieces++] = (wire_piece){
            .seg = si, .section = p->sec_index, .offset = p->loc.offset, .stored_len = p->loc.stored_len,
            .crc = p->loc.crc, .seq_first = p->seq_first, .seq_end = p->seq_end,
            .data_bytes = p->loc.data_bytes, .kg_first = p->loc.kg_first, .kg_last = p->loc.kg_last};
    }
    if (expect != f->to) {
        if (!*in_hbuf) wire_handle_free(h);
        return err_fail(-EIO, "persist of writer %s: internal gap at seq %llu (to %llu)", f->writer_id,
                        (unsigned long long)expect, (unsigned long long)f->to);
    }
    /* Exact unless `from` fell inside records that were already durable at a point the
     * writer never reported through dstl_writer_next_seq; then whole sections count. */
    h->size = f->size != UINT64_MAX ? f->size : whole;
    *out = h;
    return 0;
}

/* Futures completed on this thread and not yet signalled (each holds a reference). */
static _Thread_local dstl_future *to_signal;
/* Futures signalled on this thread whose callback is still to run (each holds a reference). */
static _Thread_local dstl_future *deferred;
/* Nonzero while this thread runs a callback. */
static _Thread_local int in_callback;

int future_in_callback(void) { return in_callback; }

/* The result is set now (s->mu held); `done` and the wake-up wait for future_signal_completed,
 * which the completing thread calls once it holds no lock. A waiter woken under s->mu would
 * block at once on it (its next DSTL call takes it) while the pipeline ends the rest of the
 * batch: with 64 committers that convoy was most of the futex traffic of a group commit. */
static void complete(dstl_future *f, int err, dstl_handle *h)
{
    pthread_mutex_lock(&f->mu);
    f->err = err;
    f->handle = h;
    f->refs++;                  /* to_signal's */
    f->signal_next = to_signal;
    to_signal = f;
    pthread_mutex_unlock(&f->mu);
}

/* Wakes f's sleepers and drops a reference (the one that kept f valid for the wake). */
static void wake_and_unref(dstl_future *f)
{
    /* after the signaller's unlock, so the woken waiter finds the mutex free; the reference
     * keeps f valid though the waiter may free it as soon as it sees done */
    pthread_cond_broadcast(&f->done_cv);
    future_unref(f);
}

/* A waiter leaving a done future hands on the wake-ups its future was given. */
static void pass_wakes(dstl_future *f)
{
    pthread_mutex_lock(&f->mu);
    dstl_future *a = f->wake_next[0], *b = f->wake_next[1];
    f->wake_next[0] = f->wake_next[1] = NULL;
    pthread_mutex_unlock(&f->mu);
    if (a) wake_and_unref(a);
    if (b) wake_and_unref(b);
}

/* Futures signalled in one tree at most: a longer list is signalled in several. */
enum { WAKE_TREE_MAX = 64 };
/* Fewer sleepers than this are woken by this thread, one by one: each hop of the tree is a
 * woken thread's scheduling latency (tens of us on a VM whose other core is idle), and at
 * light load (bench_local light: 16 writers on 8 threads, ~8 sleepers a batch) the three hops
 * of eight cost more than eight wakes from here. Eleven alternating 4 s pairs: persist p99
 * 11.0-12.1 ms (median 11.6) against 11.6-15.8 (median 12.0); commits (~32 sleepers a
 * segment, still a tree) and the w1024 load unchanged within their noise. */
enum { WAKE_TREE_MIN = 16 };

/* Marks up to WAKE_TREE_MAX futures of to_signal done and wakes their sleepers, the wake-ups
 * spread over the woken threads: the futures with a sleeper form a binary tree (node i's
 * children are 2i+1 and 2i+2) and a sleeper leaving dstl_future_wait wakes its node's
 * children (pass_wakes), so this thread wakes one and the tree is awake after log2(n) rounds.
 * Measured (bench_local commits, 64 committers, persist-delay 0): the pipeline thread spent a
 * third of its cycles in try_to_wake_up, waking the ~40 committers of every segment one by
 * one, while it is the one thread every commit goes through. Below WAKE_TREE_MIN sleepers
 * this thread wakes them all itself.
 *
 * No sleeper is ever left asleep on a done future: a node's `done` and its children are set
 * together under its mutex, before anyone is woken, so the waiter that sees done also sees
 * whom to wake; a node that lost its sleeper between the two looks (a timed wait that ended)
 * hands no wake-ups on, and this thread wakes its children itself. */
static void signal_some(void)
{
    dstl_future *n[WAKE_TREE_MAX], *rest[WAKE_TREE_MAX];
    int nn = 0, nrest = 0;
    while (to_signal && nn + nrest < WAKE_TREE_MAX) {
        dstl_future *f = to_signal;
        to_signal = f->signal_next;
        pthread_mutex_lock(&f->mu);
        int asleep = f->nblocked > 0;
        pthread_mutex_unlock(&f->mu);
        if (asleep) n[nn++] = f;
        else rest[nrest++] = f;
    }
    unsigned char hands_on[WAKE_TREE_MAX];
    for (int i = 0; i < nn + nrest; i++) {
        int in_tree = i < nn;
        dstl_future *f = in_tree ? n[i] : rest[i - nn];
        pthread_mutex_lock(&f->mu);
        f->done = 1;
        if (f->cb) {
            f->refs++;          /* the queued callback's */
            f->deferred_next = deferred;
            deferred = f;
        }
        hands_on[i] = in_tree && nn >= WAKE_TREE_MIN && f->nblocked > 0;
        if (hands_on[i]) {
            /* the children's references (to_signal's) go with them */
            f->wake_next[0] = 2 * i + 1 < nn ? n[2 * i + 1] : NULL;
            f->wake_next[1] = 2 * i + 2 < nn ? n[2 * i + 2] : NULL;
        }
        pthread_mutex_unlock(&f->mu);
    }
    /* every node done: now the wakes, each node once, by its parent's waiter or by us */
    for (int i = 0; i < nn; i++)
        if (i == 0 || !hands_on[(i - 1) / 2]) wake_and_unref(n[i]);
    for (int i = 0; i < nrest; i++) wake_and_unref(rest[i]);
}

void future_signal_completed(void)
{
    while (to_signal) signal_some();
}

static void run_callback(dstl_future *f, dstl_future_fn fn, void *arg)
{
    int outer = in_callback;
    in_callback = 1;
    fn(f, arg);
    in_callback = outer;
}

void future_run_callbacks(void)
{
    future_signal_completed();
    /* Each list is taken whole, so futures that complete while callbacks run (none do on
     * this thread: the pipeline completes futures in its turn, not in a callback) wait for
     * the next round. */
    while (deferred) {
        dstl_future *list = deferred;
        deferred = NULL;
        while (list) {
            dstl_future *f = list;
            list = f->deferred_next;
            pthread_mutex_lock(&f->mu);
            dstl_future_fn fn = f->cb;
            void *arg = f->cb_arg;
            f->cb = NULL;
            pthread_mutex_unlock(&f->mu);
            /* the queued reference keeps f valid even when the callback frees it */
            if (fn) run_callback(f, fn, arg);
            future_unref(f);
        }
    }
}

/* Ends the future with err (s->mu held). Pins become the live handle's, or are dropped. */
static void finish(dstl_future *f, int err, const char *detail)
{
    const future_ctx *ctx = f->ctx;
    /* a copy: detail may be f->errmsg itself; formatted only for a failure (this runs for
     * every persist, under s->mu) */
    char why[sizeof f->errmsg];
    why[0] = 0;
    if (err) snprintf(why, sizeof why, "%s", detail ? detail : dstl_last_error());
    dstl_handle *h = NULL;
    wire_handle *wh = NULL;
    int in_hbuf = 0;
    if (err == 0 && (err = build_handle(f, &wh, &in_hbuf)) == 0) {
        if (in_hbuf) {
            h = handle_wrap_in(f->hbuf, wh);
            f->hbuf = NULL;
        } else if (!(h = handle_wrap(wh))) {
            wire_handle_free(wh);
            err = -ENOMEM;
        }
    }
    pthread_mutex_lock(&f->mu);
    int user_gone = f->user_gone;
    pthread_mutex_unlock(&f->mu);
    int pins_moved = 0;
    if (err == 0 && !user_gone) {
        run_segment **segs = reg_live_segs(f->live, f->npieces);
        if (!segs) {
            err = err_fail(-ENOMEM, "out of memory");
        } else {
            for (size_t i = 0; i < f->npieces; i++) segs[i] = f->pieces[i].sg;
            if ((err = reg_live_insert(ctx->reg, f->live)) == 0) {
                f->live = NULL;     /* the registry's now (or freed: an equal one was live) */
                pins_moved = 1;
            } else {
                reg_live_segs(f->live, 0);   /* the pins stay the pieces' and are dropped below */
            }
        }
        if (err < 0) {
            dstl_handle_free(h);
            h = NULL;
        }
    }
    /* A future freed while pending: nobody can ever see or discard its handle, so it keeps
     * nothing (Flink leaked such uploads: FLINK-25511). On failure the pins go too. */
    if (!pins_moved)
        for (size_t i = 0; i < f->npieces; i++) reg_unpin(ctx->reg, f->pieces[i].sg);
    f->npieces = 0;
    if (err < 0 && !why[0]) snprintf(why, sizeof why, "%s", dstl_last_error());
    if (err < 0)
        snprintf(f->errmsg, sizeof f->errmsg, "persist of writer %s [%llu, %llu) checkpoint %llu: %.400s",
                 f->writer_id, (unsigned long long)f->from, (unsigned long long)f->to,
                 (unsigned long long)f->checkpoint_id, why);
    metrics_persist_done(ctx->counters, err, (now_ns() - f->t_start_ns) / 1000);
    /* DURABILITY: the future completes here, after every piece's segment was acknowledged
     * durable at the configured level (the pipeline ends a section only from the store's or
     * the upload's acknowledgement: future_section_ended). A crash before this point loses
     * nothing acknowledged. */
    complete(f, err, h);
}

static void complete_if_ready(dstl_future *f)
{
    if (f->building || f->outstanding > 0) return;
    if (f->failed) finish(f, f->failed, f->errmsg[0] ? f->errmsg : NULL);
    else finish(f, 0, NULL);
}

static void note_failure(dstl_future *f, int err, const char *detail)
{
    if (f->failed) return;
    f->failed = err;
    snprintf(f->errmsg, sizeof f->errmsg, "%s", detail);
}

void future_build_end(dstl_future *f, int err, uint64_t size)
{
    f->size = size;
    if (err < 0 && !f->failed) f->failed = err;   /* its detail is dstl_last_error's now */
    f->building = 0;
    complete_if_ready(f);
}

void future_prefetch(const future_waitlist *wl)
{
    for (const future_waiter *fw = wl->head; fw; fw = fw->next) {
        const dstl_future *f = fw->f;
        __builtin_prefetch(f, 1);
        __builtin_prefetch(&f->pieces, 1);
        __builtin_prefetch(f->hbuf, 1);
        __builtin_prefetch(f->live, 1);
    }
}

void future_section_ended(future_waitlist *wl, int res, const char *detail, run_segment *g, uint32_t sec_index,
                          const wire_section_loc *loc)
{
    for (future_waiter *fw = wl->head, *next; fw; fw = next) {
        next = fw->next;
        dstl_future *f = fw->f;
        if (res == 0) {
            if (future_add_piece(f, g, sec_index, loc, fw->lo, fw->hi) < 0) note_failure(f, -ENOMEM, dstl_last_error());
        } else {
            note_failure(f, res, detail);
        }
        f->outstanding--;
        if (fw == &f->waiter0) f->waiter0_used = 0;
        else free(fw);
        complete_if_ready(f);
        future_unref(f);        /* the waiter's reference */
    }
    wl->head = NULL;
}

/* ---- public ---- */

int dstl_future_wait(dstl_future *f, int64_t timeout_ms)
{
    if (!f) return err_fail(-EINVAL, "dstl_future_wait: future is NULL");
    /* inside a callback nothing blocks: a pending future is reported at once */
    if (in_callback) timeout_ms = 0;
    pthread_mutex_lock(&f->mu);
    f->nblocked++;
    if (timeout_ms < 0) {
        while (!f->done) pthread_cond_wait(&f->done_cv, &f->mu);
    } else if (!f->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (timeout_ms % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        while (!f->done && pthread_cond_timedwait(&f->done_cv, &f->mu, &ts) == 0) {
        }
    }
    f->nblocked--;
    int done = f->done;
    pthread_mutex_unlock(&f->mu);
    if (done) pass_wakes(f);
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
        *out = handle_ref(f->handle);   /* immutable: shared, not copied */
        rc = 0;
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

int dstl_future_on_done(dstl_future *f, dstl_future_fn fn, void *arg)
{
    if (!f || !fn) return err_fail(-EINVAL, "dstl_future_on_done: NULL argument");
    pthread_mutex_lock(&f->mu);
    if (f->cb_set) {
        pthread_mutex_unlock(&f->mu);
        return err_fail(-EBUSY, "dstl_future_on_done: persist of writer %s checkpoint %llu has a callback already",
                        f->writer_id, (unsigned long long)f->checkpoint_id);
    }
    f->cb_set = 1;
    int done = f->done;
    if (!done) {
        f->cb = fn;
        f->cb_arg = arg;
    }
    pthread_mutex_unlock(&f->mu);
    /* done already: at once, on this thread; the caller's reference keeps f valid until fn
     * returns, and f is not touched after (fn may free it) */
    if (done) run_callback(f, fn, arg);
    return 0;
}

void dstl_future_free(dstl_future *f)
{
    if (!f) return;
    pthread_mutex_lock(&f->mu);
    f->user_gone = 1;
    f->cb = NULL;               /* a callback not yet started never runs now */
    pthread_mutex_unlock(&f->mu);
    pass_wakes(f);              /* none are left unless a waiter is still inside (misuse) */
    future_unref(f);
}
