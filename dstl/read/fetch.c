/*
 * dstl/read/fetch.c — the restore plan's fetch layer (see fetch.h): extents of remote objects,
 * fetched once by the set's own thread, held in memory while some reader needs them.
 *
 * Structure (fetch_int.h): objects in an array (id = index), each with its pending ranges and
 * its extents (disjoint, sorted by offset), made from the plan's needs in fetch_needs.c.
 * Extents are allocated one by one (a GET's callback holds its extent's address). `held` is
 * the bytes of extents in memory (ready, or in flight).
 *
 * Streaming: an extent's GET hands its bytes over as they arrive (s3_get_object_stream):
 * `got` says how many from its start are final, so a read of bytes below it is served while
 * the rest still streams. A reader waits on the first extent that lacks its bytes, with its
 * own condition variable in that extent's waiter list and the offset it needs: the hand-over
 * wakes exactly the readers whose bytes are in (64 readers waiting on one object are not all
 * woken for every 16 KiB), and a change of the extent's state wakes all of its waiters.
 *
 * Threads: `mu` guards everything here but `got` and `min_need` (atomics); the set's thread
 * starts GETs under it (s3_get_object_stream only queues) and runs the client's loop without
 * it. The hand-over stores `got` and then reads `min_need` (the smallest offset a waiter
 * needs); a reader stores its need into `min_need` and then reads `got`, under mu: one of the
 * two sees the other's store, so the hand-over takes mu and wakes it, or it does not wait.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "dstl/read/fetch.h"
#include "dstl/err.h"

/* Default GETs in flight: the client's default connection count (dstl.upload.connections). */
#define FETCH_DEFAULT_GETS 8u
/* The budget is full, nothing is in flight, readers wait for extents that do not fit, and no
 * reader released anything for this long: the set gives those extents up (the readers GET
 * them themselves) instead of waiting for releases that may never come. Long enough for a
 * reader busy with held bytes to finish a piece (a few ms), short beside a restore. */
#define FETCH_STUCK_MS 50u
/* The thread's longest sleep: it is woken for work (s3_client_wakeup); this only paces the
 * stuck check above. */
#define FETCH_TICK_MS 20
/* Extents this large get buffers of transparent huge pages (mapped, 2 MiB aligned): the fetch
 * thread writes every byte of a restore into fresh memory, and faulting it in 4 KiB pages
 * (a fault, a zeroed page and a cgroup charge each) cost it more than the sockets' copy. */
#define FETCH_HUGE_BYTES (2ull << 20)
/* How long extents marked first may hold back the others before they are complete: longer
 * than a small GET takes (a few ms), short beside a restore. */
#define FETCH_FIRST_HOLD_MS 50u
/* How long a closed gate (fetch_gate) holds the other extents back once the first ones are
 * complete: longer than a reader takes to parse the footer of a 1,024-writer segment
 * (~250 KB, 2 ms on an idle core) and check its first section, short beside a restore. */
#define FETCH_GATE_MS 20u
#include "dstl/read/fetch_int.h"


static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int fetch_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap * 2 : 8;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

/* ---- buffers ---- */

static size_t huge_round(uint64_t len) { return (size_t)((len + FETCH_HUGE_BYTES - 1) & ~(FETCH_HUGE_BYTES - 1)); }

/* An extent's buffer: from the set's arena (arena.h: memory the restore touched already, reused),
 * else, when no run of its blocks is free, a fresh one: huge pages for a large extent. */
static uint8_t *buf_alloc(fetch_set *f, uint64_t len)
{
    uint8_t *a = arena_take(f->arena, len);
    if (a) return a;
    f->fresh_bytes += len;
    if (len < FETCH_HUGE_BYTES) return malloc(len ? (size_t)len : 1);
    size_t size = huge_round(len), map = size + FETCH_HUGE_BYTES;
    uint8_t *p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    a = (uint8_t *)(((uintptr_t)p + FETCH_HUGE_BYTES - 1) & ~(uintptr_t)(FETCH_HUGE_BYTES - 1));
    if (a > p) munmap(p, (size_t)(a - p));
    if (p + map > a + size) munmap(a + size, (size_t)(p + map - (a + size)));
    (void)madvise(a, size, MADV_HUGEPAGE);      /* a hint: without it, 4 KiB pages */
    return a;
}

static void buf_free(fetch_set *f, uint8_t *p, uint64_t len)
{
    if (!p) return;
    if (arena_owns(f->arena, p)) arena_give(f->arena, p, len);
    else if (len < FETCH_HUGE_BYTES) free(p);
    else munmap(p, huge_round(len));
}

/* ---- waiting (under mu) ---- */

static void need_update(extent *x)
{
    uint64_t m = UINT64_MAX;
    for (const waiter *w = x->wl; w; w = w->next)
        if (w->need < m) m = w->need;
    atomic_store(&x->min_need, m);
}

static void waiter_remove(extent *x, waiter *w)
{
    for (waiter **p = &x->wl; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            need_update(x);
            return;
        }
}

/* Wakes (and unlinks) x's waiters whose bytes are in; all of them when `all` (a change of
 * state: they look again at what it is now). */
static void wake(extent *x, int all)
{
    uint64_t have = x->off + atomic_load(&x->got);
    for (waiter **p = &x->wl; *p;) {
        waiter *w = *p;
        if (all || w->need <= have) {
            *p = w->next;
            pthread_cond_signal(&w->cv);
        } else {
            p = &w->next;
        }
    }
    need_update(x);
}

/* Tells x's pollers whose bytes are in (all of them when `all`: its state changed), and
 * forgets them. Under mu. */
static void tell_pollers(extent *x, int all)
{
    uint64_t have = x->off + atomic_load(&x->got), m = UINT64_MAX;
    size_t keep = 0;
    for (size_t i = 0; i < x->npl; i++) {
        poll_interest *pi = &x->pl[i];
        if (all || pi->need <= have) {
            pi->t->count++;
            pthread_cond_signal(&pi->t->cv);
            continue;
        }
        if (pi->need < m) m = pi->need;
        x->pl[keep++] = *pi;
    }
    x->npl = keep;
    atomic_store(&x->poll_need, m);
}

static void set_state(extent *x, int st)
{
    x->state = st;
    wake(x, 1);
    tell_pollers(x, 1);
}

/* ---- holding (under mu) ---- */

static void drop_bytes(fetch_set *f, extent *x)
{
    buf_free(f, x->buf, x->len);
    x->buf = NULL;
    f->held -= x->len;
    if (x->reserved && f->o.unreserve) f->o.unreserve(f->o.reserve_ctx, x->len);
    x->reserved = 0;
}

/* An extent nobody needs any more gives its bytes back (one in flight when its GET ends; a
 * failed one kept what it had streamed while readers held uses of it). */
void fetch_unused(fetch_set *f, extent *x)
{
    if ((x->state == X_READY || x->state == X_FAILED) && x->buf) drop_bytes(f, x);
    if (x->state == X_READY || x->state == X_QUEUED) x->state = X_RELEASED;
}

/* Counts x's object as fetched, once (objects_fetched). Under mu, on the set's thread. */
static void count_fetched(fetch_set *f, extent *x)
{
    x->counted = 1;
    if (f->objs[x->obj].fetched) return;
    f->objs[x->obj].fetched = 1;
    f->st.objects_fetched++;
}

/* ---- the thread ---- */

static void on_get(void *ctx, const s3_result *res)
{
    extent *x = ctx;
    fetch_set *f = x->f;
    const object *ob = &f->objs[x->obj];
    pthread_mutex_lock(&f->mu);
    x->op = NULL;
    f->inflight--;
    x->state = X_FAILED;
    if (res->err < 0) {
        x->err = res->err;
        snprintf(x->msg, sizeof x->msg, "segment s3://%s/%s: GET of %llu bytes at offset %llu: %.400s", ob->bucket,
                 ob->key, (unsigned long long)x->len, (unsigned long long)x->off, res->error);
        if (res->err == -ENOENT)
            snprintf(x->msg, sizeof x->msg, "segment s3://%s/%s: not found in the remote store (%.400s)", ob->bucket,
                     ob->key, res->error);
        f->st.failures += res->err != -ECANCELED;
    } else if (res->object_size != ob->len) {
        x->err = DSTL_ECORRUPT;
        snprintf(x->msg, sizeof x->msg, "segment s3://%s/%s: the object is %llu bytes, the handle names %llu",
                 ob->bucket, ob->key, (unsigned long long)res->object_size, (unsigned long long)ob->len);
    } else if (res->bytes != x->len) {
        x->err = DSTL_ECORRUPT;
        snprintf(x->msg, sizeof x->msg, "segment s3://%s/%s: GET of %llu bytes at offset %llu gave %llu", ob->bucket,
                 ob->key, (unsigned long long)x->len, (unsigned long long)x->off, (unsigned long long)res->bytes);
    } else {
        x->state = X_READY;
        atomic_store(&x->got, x->len);
        count_fetched(f, x);
        f->st.gets_completed++;
    }
    /* a failed extent's streamed bytes stay while readers hold uses (they may point there) */
    if (x->uses == 0) fetch_unused(f, x);
    set_state(x, x->state);
    pthread_mutex_unlock(&f->mu);
}

/* Runs x's arrival hook (fetch_on_arrival) once the bytes up to have include its range:
 * before those bytes are published. The set's thread, no lock held. */
static void arrival(extent *x, uint64_t have)
{
    if (!x->arrive_cb || x->arrived || have < x->arrive_end) return;
    x->arrived = 1;
    x->arrive_cb(x->arrive_ctx, x->obj, x->buf + x->arrive_at);
}

/* The GET handed over [0, n) of the extent (the set's thread, inside the client's loop):
 * readers waiting for bytes below that are woken. An answer naming another object length
 * hands nothing over (on_get reports it). Its object counts as fetched from its first bytes
 * on, before any reader can have them: readers served as the bytes stream in may be done
 * before the GET's completion (on_get) runs. */
static void on_progress(void *ctx, size_t n, uint64_t object_size)
{
    extent *x = ctx;
    if (object_size != x->obj_len || n > x->len) return;
    arrival(x, x->off + n);
    if (n && !x->counted) {
        pthread_mutex_lock(&x->f->mu);
        count_fetched(x->f, x);
        pthread_mutex_unlock(&x->f->mu);
    }
    s3_stats cs;
    s3_client_stats(x->f->o.cli, &cs);
    atomic_store(&x->f->bytes_in, cs.bytes_received);
    atomic_store(&x->got, (uint64_t)n);
    uint64_t have = x->off + n, wn = atomic_load(&x->min_need), pn = atomic_load(&x->poll_need);
    if (have < wn && have < pn) return;
    pthread_mutex_lock(&x->f->mu);
    wake(x, 0);
    if (atomic_load(&x->poll_need) <= have) tell_pollers(x, 0);
    pthread_mutex_unlock(&x->f->mu);
}

/* The order of queued extents: those marked first (fetch_first: small, and the readers of
 * their objects wait for them to start at all), then the rest of such objects (those readers
 * start on their sections as the bytes stream in), then extents a reader already waits for
 * (its reader is idle until they come; the prio order guessed wrong for it), then by the
 * object's prio, then offset. */
static int64_t extent_rank(const object *ob, const extent *x)
{
    if (x->first) return ob->prio - 2 * (INT64_MAX / 4);
    if (ob->nfirst) return ob->prio - INT64_MAX / 4;
    return x->waiters ? ob->prio - INT64_MAX / 8 : ob->prio;
}

/* Whether a reader needs x now: one waits for it, or polled for it (fetch_poll) and has not
 * been told of it since. (Not "polled lately": a thread that polled and then slept in
 * fetch_wait_progress without a timeout, while GETs in flight took longer than "lately", was
 * never told: its extent stayed behind the read-ahead window, or was never given up.) */
static int needed_now(const extent *x)
{
    return x->waiters || x->npl;
}

/* Whether x goes beyond the read-ahead window: a reader waits for it (its thread is idle
 * until it comes), or one polled for it and nothing is in flight (every reader that tries is
 * past the bytes in: the window would hold them all back). A polled extent otherwise waits
 * its turn: its reader's thread has other readers to serve, and polls spread over most of
 * the queue (at w256, a window of 64 MB held 110-150 MB while polls went beyond it). */
static int urgent(const fetch_set *f, const extent *x)
{
    return x->waiters || (f->inflight == 0 && needed_now(x));
}

/* The first queued extent in rank order, or NULL; with urgent_only, the first urgent one.
 * Under mu. */
static extent *next_queued(fetch_set *f, int urgent_only)
{
    extent *best = NULL;
    int64_t br = 0;
    for (size_t i = 0; i < f->nobj; i++) {
        object *ob = &f->objs[i];
        for (size_t k = 0; k < ob->next; k++) {
            extent *x = ob->ext[k];
            if (x->state != X_QUEUED || (urgent_only && !urgent(f, x))) continue;
            int64_t r = extent_rank(ob, x);
            if (!best || r < br) {
                best = x;
                br = r;
            }
            if (!ob->nfirst && !urgent_only) break;     /* no first extent: this is the object's pick */
        }
    }
    return best;
}

/* Nothing fits and nothing is in flight: after FETCH_STUCK_MS without a release, the extents
 * readers wait for (or poll for) are left to them. */
static void unstick(fetch_set *f)
{
    uint64_t now = now_ms();
    if (!f->blocked_since_ms) {
        f->blocked_since_ms = now;
        return;
    }
    if (now - f->blocked_since_ms < FETCH_STUCK_MS) return;
    for (size_t i = 0; i < f->nobj; i++)
        for (size_t k = 0; k < f->objs[i].next; k++) {
            extent *x = f->objs[i].ext[k];
            if (x->state == X_QUEUED && needed_now(x)) set_state(x, X_DIRECT);
        }
    f->blocked_since_ms = 0;
}

/* Whether extents marked first still get the link to themselves: one of them is queued, or
 * in flight, not complete, for less than FETCH_FIRST_HOLD_MS. A server (RGW) may read a GET's
 * whole range before it sends its first byte, and serves a burst of requests in about the
 * order they came: the small first GETs are answered a round trip after they were sent, not
 * after the bodies of GETs sent with them. Then, while the gate is closed (fetch_gate), for
 * FETCH_GATE_MS more. Under mu. */
static uint64_t gate_ms(const fetch_set *f) { return f->o.gate_ms ? f->o.gate_ms : FETCH_GATE_MS; }

static int first_pending(fetch_set *f, uint64_t now)
{
    for (size_t i = 0; i < f->nobj; i++)
        for (size_t k = 0; f->objs[i].nfirst && k < f->objs[i].next; k++) {
            const extent *x = f->objs[i].ext[k];
            if (x->first && (x->state == X_QUEUED ||
                             (x->state == X_FETCHING && now - x->started_ms < FETCH_FIRST_HOLD_MS)))
                return 1;
        }
    if (!f->gate) return 0;
    if (!f->gate_since_ms) f->gate_since_ms = now;
    if (now - f->gate_since_ms < gate_ms(f)) return 1;
    f->gate = 0;
    return 0;
}

/* Starts GETs while slots and budget allow (others wait while first_pending). Under mu. */
static void admit(fetch_set *f)
{
    unsigned max = f->o.max_gets ? f->o.max_gets : FETCH_DEFAULT_GETS;
    extent *x;
    uint64_t now = now_ms();
    while (f->inflight < max && (x = next_queued(f, 0))) {
        if (!x->first && first_pending(f, now)) return;
        if (x->len > f->o.budget_bytes) {           /* can never be held */
            set_state(x, X_DIRECT);
            continue;
        }
        if (!x->first && !urgent(f, x) && f->o.ahead_bytes && f->held + x->len > f->o.ahead_bytes &&
            f->held > 0 && !(x = next_queued(f, 1)))
            break;                                  /* far enough ahead: wait for releases */
        if (f->held + x->len > f->o.budget_bytes ||
            (f->o.reserve && !(x->reserved = f->o.reserve(f->o.reserve_ctx, x->len)))) {
            if (f->inflight == 0) unstick(f);
            return;
        }
        f->blocked_since_ms = 0;
        /* the bulk begins: the arena's pages are faulted in ahead from now on, not while the
         * first GETs and the server answering them need the cores (the first record) */
        if (!x->first) arena_prefault(f->arena);
        const object *ob = &f->objs[x->obj];
        x->buf = buf_alloc(f, x->len);
        f->held += x->len;
        if (f->held > f->st.held_peak_bytes) f->st.held_peak_bytes = f->held;
        atomic_store(&x->got, 0);
        int rc = x->buf ? s3_get_object_stream(f->o.cli, ob->bucket, ob->key, x->off, x->buf, x->len, on_progress, x,
                                               &x->op, on_get, x)
                        : -ENOMEM;
        if (rc < 0) {
            drop_bytes(f, x);
            x->err = rc;
            snprintf(x->msg, sizeof x->msg, "segment s3://%s/%s: GET of %llu bytes at offset %llu could not start: %s",
                     ob->bucket, ob->key, (unsigned long long)x->len, (unsigned long long)x->off, dstl_strerror(rc));
            set_state(x, X_FAILED);
            continue;
        }
        x->state = X_FETCHING;
        x->started_ms = now;
        f->inflight++;
    }
    f->blocked_since_ms = 0;
}

static void *fetch_thread(void *arg)
{
    fetch_set *f = arg;
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        admit(f);
        int tick = FETCH_TICK_MS;
        if (f->gate && f->gate_since_ms) {     /* a closed gate opens on time, not at the next tick */
            uint64_t now = now_ms(), due = f->gate_since_ms + gate_ms(f);
            tick = due > now ? (int)(due - now < FETCH_TICK_MS ? due - now : FETCH_TICK_MS) : 0;
        }
        pthread_mutex_unlock(&f->mu);
        int n = s3_client_run(f->o.cli, NULL, 0, tick);
        s3_stats cs;
        s3_client_stats(f->o.cli, &cs);
        pthread_mutex_lock(&f->mu);
        f->st.requests = cs.requests;
        f->st.retries = cs.retries;
        f->st.bytes_fetched = cs.bytes_received;
        if (n < 0) {            /* the client's loop failed: what is queued is left to readers */
            for (size_t i = 0; i < f->nobj; i++)
                for (size_t k = 0; k < f->objs[i].next; k++)
                    if (f->objs[i].ext[k]->state == X_QUEUED) set_state(f->objs[i].ext[k], X_DIRECT);
        }
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* Numbers the sets (fetch_set.gen, my_token). */
static _Atomic uint64_t fetch_gens;

int fetch_new(const fetch_opts *o, fetch_set **out)
{
    fetch_set *f = calloc(1, sizeof *f);
    if (!f) {
        s3_client_free(o->cli);
        return err_fail(-ENOMEM, "restore: out of memory");
    }
    f->o = *o;
    f->gen = atomic_fetch_add(&fetch_gens, 1) + 1;
    /* twice the budget: first fit then rarely finds the held bytes' holes too small, and the
     * address space costs nothing until touched. NULL: each extent maps its own. */
    f->arena = arena_new(o->budget_bytes > ARENA_MAX_BYTES ? ARENA_MAX_BYTES : 2 * o->budget_bytes);
    pthread_mutex_init(&f->mu, NULL);
    int rc = pthread_create(&f->thread, NULL, fetch_thread, f);
    if (rc) {
        s3_client_free(o->cli);
        pthread_mutex_destroy(&f->mu);
        arena_free(f->arena);
        free(f);
        return err_fail(-rc, "restore: cannot start the fetch thread: %s", strerror(rc));
    }
    (void)pthread_setname_np(f->thread, "dstl-fetch");      /* top -H, perf, gdb */
    *out = f;
    return 0;
}

void fetch_free(fetch_set *f)
{
    if (!f) return;
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_mutex_unlock(&f->mu);
    s3_client_wakeup(f->o.cli);
    pthread_join(f->thread, NULL);
    s3_client_free(f->o.cli);       /* cancels what is in flight: on_get frees those bytes */
    for (size_t i = 0; i < f->nobj; i++) {
        object *ob = &f->objs[i];
        for (size_t k = 0; k < ob->next; k++) {
            if (ob->ext[k]->buf) drop_bytes(f, ob->ext[k]);
            free(ob->ext[k]->pl);
            free(ob->ext[k]);
        }
        free(ob->ext);
        free(ob->pend);
        free(ob->bucket);
        free(ob->key);
    }
    free(f->objs);
    arena_free(f->arena);
    for (poll_token *t = f->tokens, *n; t; t = n) {
        n = t->next;
        pthread_cond_destroy(&t->cv);
        free(t);
    }
    pthread_mutex_destroy(&f->mu);
    free(f);
}

/* ---- reading ---- */

/* What [off, end) of ob is now: X_READY when every byte is in (ready extents, or the part of
 * a fetching one already handed over), X_FAILED (*x the failed extent), X_DIRECT when some
 * byte is not held and will not be, else X_QUEUED (wait: *x the first extent that lacks some,
 * *need the offset up to which it must hand over). Under mu. */
static int range_state(const object *ob, uint64_t off, uint64_t end, extent **x_out, uint64_t *need)
{
    int st = X_READY;
    uint64_t at = off;
    for (size_t k = 0; k < ob->next && at < end; k++) {
        extent *x = ob->ext[k];
        if (x->off + x->len <= at) continue;
        if (x->off > at) return X_DIRECT;            /* a hole: never planned */
        if (x->state == X_FAILED) {
            *x_out = x;
            return X_FAILED;
        }
        if (x->state == X_DIRECT || x->state == X_RELEASED) return X_DIRECT;
        uint64_t upto = end < x->off + x->len ? end : x->off + x->len;
        int in = x->state == X_READY || (x->state == X_FETCHING && x->off + atomic_load(&x->got) >= upto);
        if (!in && st == X_READY) {
            st = X_QUEUED;
            *x_out = x;
            *need = upto;
        }
        at = x->off + x->len;
    }
    return at < end ? X_DIRECT : st;
}

static void range_waiters(object *ob, uint64_t off, uint64_t end, int d)
{
    for (size_t k = 0; k < ob->next; k++) {
        extent *x = ob->ext[k];
        if (x->off < end && x->off + x->len > off) x->waiters += d;
    }
}

/* Waits while [off, end) of object id is queued or in flight; returns its state then
 * (range_state), with *failed set for X_FAILED and *waited whether it waited. Under mu. */
static int wait_range(fetch_set *f, object *ob, uint64_t off, uint64_t end, extent **failed, int *waited)
{
    int st;
    extent *x = NULL;
    uint64_t need = 0;
    while ((st = range_state(ob, off, end, &x, &need)) == X_QUEUED) {
        waiter w = {.need = need, .next = x->wl};
        pthread_cond_init(&w.cv, NULL);
        x->wl = &w;
        if (need < atomic_load(&x->min_need)) atomic_store(&x->min_need, need);
        range_waiters(ob, off, end, 1);
        /* our need is published: a hand-over from now on sees it; one before, we see here */
        extent *y = NULL;
        uint64_t n2 = 0;
        if (range_state(ob, off, end, &y, &n2) == X_QUEUED && y == x && n2 == need) {
            if (x->state == X_QUEUED) s3_client_wakeup(f->o.cli);     /* the budget may decide */
            pthread_cond_wait(&w.cv, &f->mu);
        }
        waiter_remove(x, &w);           /* a no-op when a wake unlinked it */
        range_waiters(ob, off, end, -1);
        pthread_cond_destroy(&w.cv);
        *waited = 1;
    }
    if (st == X_FAILED) *failed = x;
    return st;
}

/* Takes mu and waits for [off, end) of object id (wait_range); returns the object, mu held. */
static object *lock_range(fetch_set *f, uint32_t id, uint64_t off, uint64_t end, int *st, extent **bad, int *waited)
{
    pthread_mutex_lock(&f->mu);
    object *ob = &f->objs[id];
    *st = wait_range(f, ob, off, end, bad, waited);
    return ob;
}

/* The outcome of a read in state st: counted; the error's detail into msg. Under mu. */
static int read_outcome(fetch_set *f, int st, const extent *bad, int waited, size_t len, char *msg, size_t cap)
{
    if (st == X_FAILED) {
        snprintf(msg, cap, "%s", bad->msg);
        return bad->err;
    }
    if (st != X_READY) {
        f->st.declined++;
        return 0;
    }
    f->st.bytes_delivered += len;
    if (waited) f->st.waits++;
    else f->st.hits++;
    return 1;
}

int fetch_read(fetch_set *f, uint32_t id, uint64_t off, size_t len, void *dst, char *msg, size_t cap)
{
    uint64_t end = off + len;
    int waited = 0, st;
    extent *bad = NULL;
    object *ob = lock_range(f, id, off, end, &st, &bad, &waited);
    int rc = read_outcome(f, st, bad, waited, len, msg, cap);
    /* the pieces to copy; their bytes stay while the caller holds a use of the range, so
     * the copy runs outside the lock (readers copy in parallel) */
    enum { MAX_PIECES = 16 };
    const uint8_t *src[MAX_PIECES];
    uint64_t at[MAX_PIECES], n[MAX_PIECES];
    size_t np = 0;
    for (size_t k = 0; rc == 1 && k < ob->next; k++) {
        const extent *x = ob->ext[k];
        if (x->off >= end || x->off + x->len <= off) continue;
        uint64_t a = x->off > off ? x->off : off, b = x->off + x->len < end ? x->off + x->len : end;
        if (np == MAX_PIECES) {             /* a range over very many extents: copy under the lock */
            memcpy((uint8_t *)dst + (a - off), x->buf + (a - x->off), (size_t)(b - a));
            continue;
        }
        src[np] = x->buf + (a - x->off);
        at[np] = a - off;
        n[np++] = b - a;
    }
    pthread_mutex_unlock(&f->mu);
    for (size_t i = 0; i < np; i++) memcpy((uint8_t *)dst + at[i], src[i], (size_t)n[i]);
    return rc;
}

int fetch_borrow(fetch_set *f, uint32_t id, uint64_t off, size_t len, const uint8_t **out, char *msg, size_t cap)
{
    uint64_t end = off + len;
    int waited = 0, st;
    extent *bad = NULL;
    object *ob = lock_range(f, id, off, end, &st, &bad, &waited);
    const extent *one = NULL;
    for (size_t k = 0; st == X_READY && k < ob->next && !one; k++)
        if (ob->ext[k]->off <= off && ob->ext[k]->off + ob->ext[k]->len >= end) one = ob->ext[k];
    int rc = st == X_READY && !one ? 0 : read_outcome(f, st, bad, waited, len, msg, cap);
    if (rc == 1) *out = one->buf + (off - one->off);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

/* The calling thread's token (made on its first poll; count starts at 1, so a first wait
 * with *seen 0 returns at once). NULL when out of memory. Under mu.
 * Each thread keeps the last set's token: with 64 reader threads, looking through the list
 * under mu was ~2 % of a w1024 restore's CPU, and every reader waits for mu. The set's gen
 * (never reused, unlike its address) tells a stale entry; tokens live as long as their set. */
static _Thread_local struct {
    uint64_t gen;
    poll_token *t;
} my_last;

static poll_token *my_token(fetch_set *f)
{
    if (my_last.gen == f->gen && my_last.t) return my_last.t;
    pthread_t me = pthread_self();
    poll_token *t = f->tokens;
    while (t && !pthread_equal(t->thread, me)) t = t->next;
    if (!t) {
        if (!(t = calloc(1, sizeof *t))) return NULL;
        t->thread = me;
        t->count = 1;
        pthread_cond_init(&t->cv, NULL);
        t->next = f->tokens;
        f->tokens = t;
    }
    my_last.gen = f->gen;
    my_last.t = t;
    return t;
}

/* Notes that the calling thread needs x's bytes up to need. 1 when that is news to the fetch
 * thread (a new poller, or a nearer need), 0 when it knew, or -ENOMEM (then it is not told,
 * and finds out at its wait's timeout or its next poll). Under mu. */
static int note_poller(fetch_set *f, extent *x, uint64_t need)
{
    poll_token *t = my_token(f);
    if (!t) return -ENOMEM;
    size_t i = 0;
    while (i < x->npl && x->pl[i].t != t) i++;
    int news = 1;
    if (i == x->npl) {
        if (fetch_grow((void **)&x->pl, &x->cap_pl, x->npl + 1, sizeof *x->pl) < 0) return -ENOMEM;
        x->pl[x->npl++] = (poll_interest){t, need};
    } else if (need < x->pl[i].need) {
        x->pl[i].need = need;
    } else {
        news = 0;
    }
    if (need < atomic_load(&x->poll_need)) atomic_store(&x->poll_need, need);
    return news;
}

int fetch_poll(fetch_set *f, uint32_t id, uint64_t off, size_t len)
{
    uint64_t end = off + len, need = 0;
    extent *x = NULL;
    pthread_mutex_lock(&f->mu);
    object *ob = &f->objs[id];
    int st = range_state(ob, off, end, &x, &need);
    if (st == X_QUEUED) {
        /* noted before looking again: a hand-over from now on sees it (on_progress), one
         * before, the second look sees (as wait_range does) */
        int news = note_poller(f, x, need);
        st = range_state(ob, off, end, &x, &need);
        /* the budget may decide (a queued extent a reader tried for): told once, not at every
         * poll. A thread polling 16 readers in turns woke the fetch thread ~15 times per 32
         * records one of them took (a send() each, and the fetch thread's poll loop). */
        if (news && st == X_QUEUED && x->state == X_QUEUED) {
            f->st.poll_wakeups++;
            s3_client_wakeup(f->o.cli);
        }
    }
    pthread_mutex_unlock(&f->mu);
    return st != X_QUEUED;
}

int fetch_wait_progress(fetch_set *f, uint64_t *seen, int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_ms > 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&f->mu);
    poll_token *t = my_token(f);
    int rc = 0;
    while (t && t->count == *seen && timeout_ms != 0 && rc == 0)
        rc = timeout_ms < 0 ? pthread_cond_wait(&t->cv, &f->mu) : pthread_cond_timedwait(&t->cv, &f->mu, &until);
    int moved = !t || t->count != *seen;
    if (t) *seen = t->count;
    pthread_mutex_unlock(&f->mu);
    return moved;
}

void fetch_get_stats(fetch_set *f, fetch_stats *out)
{
    pthread_mutex_lock(&f->mu);
    *out = f->st;
    out->held_bytes = f->held;
    arena_stats as;
    arena_get_stats(f->arena, &as);
    out->memory_touched_bytes = (as.populated > as.high_water ? as.populated : as.high_water) + f->fresh_bytes;
    pthread_mutex_unlock(&f->mu);
    /* a reader may have taken bytes the fetch thread's turn has not counted yet (it copies the
     * client's totals once a turn) */
    uint64_t in = atomic_load(&f->bytes_in);
    if (in > out->bytes_fetched) out->bytes_fetched = in;
}
