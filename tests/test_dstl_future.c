/*
 * tests/test_dstl_future.c — completion callbacks (dstl_future_on_done): a callback runs once,
 * from the pipeline thread for a pending future and at once for a done one; a callback may
 * persist again (and chain callbacks); nothing blocks inside one (persist under backpressure
 * gives -EAGAIN, a wait on a pending future -ETIMEDOUT at once); the future may be freed
 * inside its callback; freeing it before it completes means the callback never runs; one
 * callback per future.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dstl.h"
#include "tests/helpers.h"
#include "tests/helpers_dstl.h"

static char *dir;

static void setup(void) { dir = t_mkdtemp("future"); }

static void teardown(void)
{
    t_rm_rf(dir);
    free(dir);
}

TestSuite(dstl_future, .init = setup, .fini = teardown, .timeout = 60);

typedef struct {
    atomic_int calls;
    pthread_t thread;
    int done_inside, result;
    int free_inside;
    dstl_handle *h;
} cb_state;

static void on_done(dstl_future *f, void *arg)
{
    cb_state *st = arg;
    st->thread = pthread_self();
    st->done_inside = dstl_future_done(f);
    st->result = dstl_future_result(f, &st->h);
    if (st->free_inside) dstl_future_free(f);
    atomic_fetch_add(&st->calls, 1);
}

static void wait_calls(cb_state *st, int n)
{
    for (int i = 0; i < 2000 && atomic_load(&st->calls) < n; i++) usleep(5000);
    cr_assert_eq(atomic_load(&st->calls), n, "callback ran %d times, %d expected", atomic_load(&st->calls), n);
}

/* A pending future: its callback runs once, on another thread (the pipeline's), with the
 * future done; the handle is the persist's. */
Test(dstl_future, callback_of_a_pending_future_runs_once_from_the_pipeline)
{
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "200ms", NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
    t_append_n(w, 1, 100, 0, 8, 200);
    dstl_future *f = NULL;
    cr_assert_eq(dstl_persist(w, 0, 1, &f), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_future_done(f), 0, "the persist completed before the 200 ms batch delay");
    cb_state st = {0};
    cr_assert_eq(dstl_future_on_done(f, on_done, &st), 0);
    cr_expect_eq(dstl_future_on_done(f, on_done, &st), -EBUSY, "a second callback was accepted");
    wait_calls(&st, 1);
    cr_expect(!pthread_equal(st.thread, pthread_self()), "the callback ran on the caller's thread");
    cr_expect_eq(st.done_inside, 1);
    cr_assert_eq(st.result, 0, "%s", dstl_last_error());
    cr_expect_eq(dstl_handle_to_seq(st.h), 100);
    cr_expect_eq(t_verify(s, st.h, 1, 0, 8, 0, 7, 200), 100);
    usleep(300000);
    cr_expect_eq(atomic_load(&st.calls), 1, "the callback ran again");
    dstl_handle_free(st.h);
    dstl_future_free(f);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
}

/* A future already done: the callback runs at once, inside dstl_future_on_done, on the
 * caller's thread — and may free the future there. */
Test(dstl_future, callback_of_a_done_future_runs_at_once_and_may_free_it)
{
    dstl_storage *s = t_storage_open(dir, NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
    t_append_n(w, 1, 10, 0, 8, 100);
    dstl_handle *h = t_persist(w, 0, 1);
    dstl_future *f = NULL;
    cr_assert_eq(dstl_persist(w, 0, 2, &f), 0);      /* nothing new: done inside persist */
    cr_assert_eq(dstl_future_done(f), 1);
    cb_state st = {.free_inside = 1};
    cr_assert_eq(dstl_future_on_done(f, on_done, &st), 0);
    cr_expect_eq(atomic_load(&st.calls), 1, "the callback did not run inside dstl_future_on_done");
    cr_expect(pthread_equal(st.thread, pthread_self()));
    cr_expect_eq(st.result, 0);
    dstl_handle_free(st.h);
    dstl_handle_free(h);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
}

/* Freeing the future inside a callback that runs on the pipeline thread is safe (ASan would
 * see a use after free). */
Test(dstl_future, a_future_freed_inside_its_pipeline_callback)
{
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "50ms", NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
    cb_state st[8];
    memset(st, 0, sizeof st);
    for (int i = 0; i < 8; i++) {
        t_append_n(w, 1, 10, 0, 8, 100);
        dstl_future *f = NULL;
        cr_assert_eq(dstl_persist(w, 0, (uint64_t)i + 1, &f), 0);
        st[i].free_inside = 1;
        cr_assert_eq(dstl_future_on_done(f, on_done, &st[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        wait_calls(&st[i], 1);
        cr_expect_eq(st[i].result, 0);
        dstl_handle_free(st[i].h);
    }
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
}

/* Freed while pending: the callback never runs. */
Test(dstl_future, a_future_freed_while_pending_never_calls_back)
{
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "200ms", NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
    t_append_n(w, 1, 10, 0, 8, 100);
    dstl_future *f = NULL;
    cr_assert_eq(dstl_persist(w, 0, 1, &f), 0);
    cb_state st = {0};
    cr_assert_eq(dstl_future_on_done(f, on_done, &st), 0);
    dstl_future_free(f);
    cr_assert_eq(dstl_writer_close(w), 0);            /* waits for the batch */
    cr_assert_eq(dstl_storage_close(s), 0);
    cr_expect_eq(atomic_load(&st.calls), 0, "the callback of a freed future ran");
}

/* A chain: each callback appends and persists again from the pipeline thread, registering a
 * callback on its new future, until the last checkpoint; the handles cover consecutive
 * ranges and read back. The writer is used by one thread at a time: the callbacks', while
 * the test thread only waits. */
typedef struct {
    dstl_storage *s;
    dstl_writer *w;
    int steps, left;
    atomic_int finished;
    int err;
    char why[512];
    dstl_handle *h[8];
    uint64_t from[8];
} chain;

static void chain_step(dstl_future *f, void *arg)
{
    chain *c = arg;
    int i = c->steps - c->left;
    if (dstl_future_result(f, &c->h[i]) < 0 && !c->err) {
        c->err = 1;
        snprintf(c->why, sizeof c->why, "step %d: %s", i, dstl_last_error());
    }
    dstl_future_free(f);
    if (--c->left == 0 || c->err) {
        atomic_store(&c->finished, 1);
        return;
    }
    c->from[i + 1] = dstl_writer_next_seq(c->w);
    t_append_n(c->w, 2, 20, 0, 8, 100);
    dstl_future *next = NULL;
    int rc = dstl_persist(c->w, c->from[i + 1], (uint64_t)i + 2, &next);
    if (rc == 0) rc = dstl_future_on_done(next, chain_step, c);
    if (rc < 0) {
        c->err = 1;
        snprintf(c->why, sizeof c->why, "persist from callback %d: %s", i, dstl_strerror(rc));
        atomic_store(&c->finished, 1);
    }
}

Test(dstl_future, a_callback_persists_again)
{
    chain c = {.steps = 6, .left = 6};
    c.s = t_storage_open(dir, "dstl.batch.persist-delay", "5ms", NULL);
    cr_assert_eq(dstl_writer_open(c.s, "w", 0, 7, &c.w), 0);
    t_append_n(c.w, 2, 20, 0, 8, 100);
    dstl_future *f = NULL;
    cr_assert_eq(dstl_persist(c.w, 0, 1, &f), 0);
    cr_assert_eq(dstl_future_on_done(f, chain_step, &c), 0);
    for (int i = 0; i < 2000 && !atomic_load(&c.finished); i++) usleep(5000);
    cr_assert(atomic_load(&c.finished), "the chain of persists from callbacks did not end");
    cr_assert_eq(c.err, 0, "%s", c.why);
    for (int i = 0; i < c.steps; i++) {
        cr_expect_eq(dstl_handle_from_seq(c.h[i]), c.from[i]);
        cr_expect_eq(dstl_handle_to_seq(c.h[i]), (uint64_t)(i + 1) * 20);
        cr_expect_eq(t_verify(c.s, c.h[i], 2, 0, 8, 0, 7, 100), 20, "handle %d", i);
        dstl_handle_free(c.h[i]);
    }
    cr_assert_eq(dstl_writer_close(c.w), 0);
    cr_assert_eq(dstl_storage_close(c.s), 0);
}

/* Inside a callback nothing waits: a persist that would wait for backpressure returns
 * -EAGAIN (with dstl.backpressure: block, where it would block outside), and a wait on a
 * pending future returns -ETIMEDOUT at once. */
typedef struct {
    dstl_writer *w;
    dstl_future *pending;
    int persist_rc, wait_rc;
    char why[512];
} no_block;

static void try_blocking(dstl_future *f, void *arg)
{
    (void)f;
    no_block *nb = arg;
    dstl_future *g = NULL;
    nb->persist_rc = dstl_persist(nb->w, 0, 9, &g);
    snprintf(nb->why, sizeof nb->why, "%s", dstl_last_error());
    if (nb->persist_rc == 0) dstl_future_free(g);
    nb->wait_rc = dstl_future_wait(nb->pending, -1);
}

Test(dstl_future, nothing_blocks_inside_a_callback)
{
    /* 64 KiB in flight at most; a 1 s batch delay keeps the first hand-off's bytes in flight */
    dstl_storage *s = t_storage_open(dir, "dstl.upload.max-in-flight", "64kb", "dstl.batch.persist-delay", "1s",
                                     "dstl.backpressure", "block", NULL);
    dstl_writer *a = NULL, *b = NULL, *c = NULL;
    cr_assert_eq(dstl_writer_open(s, "a", 0, 7, &a), 0);
    cr_assert_eq(dstl_writer_open(s, "b", 0, 7, &b), 0);
    cr_assert_eq(dstl_writer_open(s, "c", 0, 7, &c), 0);
    t_append_n(a, 1, 40, 0, 8, 1000);                 /* ~20 KiB: with its reserve, most of the bound */
    dstl_future *fa = NULL;
    cr_assert_eq(dstl_persist(a, 0, 1, &fa), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_future_done(fa), 0);
    t_append_n(b, 2, 40, 0, 8, 1000);                 /* does not fit beside a's */
    dstl_future *fc = NULL;
    cr_assert_eq(dstl_persist(c, 0, 1, &fc), 0);      /* nothing to write: done at once */
    no_block nb = {.w = b, .pending = fa, .persist_rc = 1, .wait_rc = 1};
    cr_assert_eq(dstl_future_on_done(fc, try_blocking, &nb), 0);
    cr_expect_eq(nb.persist_rc, -EAGAIN, "persist inside a callback under backpressure: %d (%s)", nb.persist_rc,
                 nb.why);
    cr_expect(strstr(nb.why, "callback") != NULL, "the detail does not say why: %s", nb.why);
    cr_expect_eq(nb.wait_rc, -ETIMEDOUT, "a wait inside a callback on a pending future: %d", nb.wait_rc);
    cr_expect_eq(dstl_future_done(fa), 0, "the test did not run while a's batch was pending");
    /* outside a callback the same persist waits for room, then goes through */
    dstl_future *fb = NULL;
    cr_assert_eq(dstl_persist(b, 0, 1, &fb), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_future_wait(fb, 10000), 0);
    cr_assert_eq(dstl_future_wait(fa, 10000), 0);
    dstl_handle *h = NULL;
    cr_expect_eq(dstl_future_result(fb, &h), 0, "%s", dstl_last_error());
    dstl_handle_free(h);
    dstl_future_free(fa);
    dstl_future_free(fb);
    dstl_future_free(fc);
    cr_assert_eq(dstl_writer_close(a), 0);
    cr_assert_eq(dstl_writer_close(b), 0);
    cr_assert_eq(dstl_writer_close(c), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
}

/* dstl_future_result hands out the future's own (immutable) handle, shared: each result, the
 * future and every copy are freed on their own, in any order, and each reads and serializes
 * the same. (ASan/UBSan builds catch a double free or a use after free here.) */
Test(dstl_future, results_are_independent_handles_freed_in_any_order)
{
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "0", NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
    uint64_t end = t_append_n(w, 1, 50, 0, 8, 100);
    dstl_future *f;
    cr_assert_eq(dstl_persist(w, 0, 1, &f), 0);
    cr_assert_eq(dstl_future_wait(f, 20000), 0);
    dstl_handle *a = NULL, *b = NULL;
    cr_assert_eq(dstl_future_result(f, &a), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_future_result(f, &b), 0, "%s", dstl_last_error());
    dstl_future_free(f);                     /* before the handles */
    void *ba, *bb;
    size_t la, lb;
    cr_assert_eq(dstl_handle_serialize(a, &ba, &la), 0);
    dstl_handle_free(a);                     /* b outlives a and the future */
    cr_assert_eq(dstl_handle_serialize(b, &bb, &lb), 0);
    cr_expect(la == lb && memcmp(ba, bb, la) == 0, "two results of one future differ");
    cr_expect_eq(t_verify(s, b, 1, 0, 8, 0, 7, 100), (long)end);
    cr_assert_eq(dstl_handle_discard(s, b), 0);
    dstl_handle_free(b);
    free(ba);
    free(bb);
    dstl_writer_close(w);
    cr_assert_eq(dstl_storage_close(s), 0);
}

/* The pipeline wakes one sleeper of a batch and each woken sleeper wakes two more
 * (future.c, signal_some), or, below WAKE_TREE_MIN sleepers, wakes them all itself: every
 * sleeper of every batch must still wake, either way. One batch per round holds 48 (or 6)
 * writers' persists; their futures are slept on by one thread each, by two threads, in timed
 * waits that keep expiring (a node whose sleeper leaves between the pipeline's two looks), or
 * by nobody (freed while pending, or never waited on). */
enum { WT_WRITERS = 48, WT_ROUNDS = 12 };

typedef struct {
    dstl_future *f;
    int timed;                  /* wait in 3 ms slices, as a poller would */
    atomic_int *woke;
    int err;
} sleeper;

static void *sleep_on(void *arg)
{
    sleeper *z = arg;
    if (z->timed) {
        int rc;
        for (int i = 0; i < 20000 && (rc = dstl_future_wait(z->f, 3)) == -ETIMEDOUT; i++) {
        }
        z->err = rc;
    } else {
        z->err = dstl_future_wait(z->f, -1);
    }
    atomic_fetch_add(z->woke, 1);
    return NULL;
}

static void every_sleeper_wakes(int nw)
{
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "30ms", NULL);
    dstl_writer *w[WT_WRITERS];
    for (int i = 0; i < nw; i++) {
        char id[16];
        snprintf(id, sizeof id, "w%d", i);
        cr_assert_eq(dstl_writer_open(s, id, 0, 7, &w[i]), 0);
    }
    for (int round = 0; round < WT_ROUNDS; round++) {
        dstl_future *f[WT_WRITERS];
        sleeper z[WT_WRITERS * 2];
        pthread_t th[WT_WRITERS * 2];
        int nz = 0;
        atomic_int woke = 0;
        for (int i = 0; i < nw; i++) {
            t_append_n(w[i], (uint32_t)i + 1, 3, 0, 8, 100);
            cr_assert_eq(dstl_persist(w[i], 0, (uint64_t)round + 1, &f[i]), 0, "%s", dstl_last_error());
            int kind = (i + round) % 6;          /* 0-1 one sleeper, 2 two, 3 timed, 4 freed, 5 none */
            if (kind == 4) {
                dstl_future_free(f[i]);
                f[i] = NULL;
                continue;
            }
            for (int k = 0; k < (kind == 2 ? 2 : kind == 5 ? 0 : 1); k++) {
                z[nz] = (sleeper){f[i], kind == 3, &woke, 0};
                cr_assert_eq(pthread_create(&th[nz], NULL, sleep_on, &z[nz]), 0);
                nz++;
            }
        }
        /* a sleeper left asleep shows here, named, rather than as the suite's timeout */
        for (int t = 0; t < 3000 && atomic_load(&woke) < nz; t++) usleep(5000);
        cr_assert_eq(atomic_load(&woke), nz, "round %d: %d of %d sleepers woke within 15 s", round,
                     atomic_load(&woke), nz);
        for (int k = 0; k < nz; k++) {
            pthread_join(th[k], NULL);
            cr_expect_eq(z[k].err, 0, "round %d: sleeper %d: %d", round, k, z[k].err);
        }
        /* A future nobody slept on need not be done when every sleeper is awake: a timed
         * sleeper sees its own future's done at its next timeout while the pipeline may still
         * be marking the rest of the list (those without sleepers last), or a later batch
         * (a slow build, TSan) holds only futures nobody waits on. It is waited for, within a
         * bound, not only looked at. */
        for (int i = 0; i < nw; i++) {
            if (!f[i]) continue;
            cr_expect_eq(dstl_future_wait(f[i], 15000), 0, "round %d: writer %d not done within 15 s", round, i);
            dstl_future_free(f[i]);
        }
    }
    for (int i = 0; i < nw; i++) dstl_writer_close(w[i]);
    cr_assert_eq(dstl_storage_close(s), 0);
}

Test(dstl_future, every_sleeper_of_a_batch_wakes_though_the_wakes_are_handed_on) { every_sleeper_wakes(WT_WRITERS); }

Test(dstl_future, every_sleeper_of_a_small_batch_wakes_from_the_pipeline) { every_sleeper_wakes(6); }
