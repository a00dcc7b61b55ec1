/*
 * Pipeline: batching and group commit through the public API.
 *
 * group_commit_acknowledges_every_checkpoint: with dstl.batch.persist-delay 0 (leader/follower
 * group commit) and a small dstl.preemptive-persist-threshold, writers hand records off ahead
 * of their checkpoint while segments are being written. A completion that arrived while the
 * pipeline still counted the segment as in flight used to leave the open batch unflushed with
 * nothing to wake the loop: about 1 run in 15 acknowledged nothing at all. The scenario runs
 * 100 times per engine (a 1-in-15 event then slips through with probability ~0.1 %), and every
 * wait is bounded by the future's contract (generous slack), so a hang is a failure.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/helpers.h"
#include "tests/helpers_dstl.h"
#include "tests/payload.h"
#include "dstl/seams.h"
#include "dstl/storage.h"
#include "dstl/writer.h"
#include "wire/wire.h"

#define GC_WRITERS 4
#define GC_RECORDS 400          /* ~240 KiB per writer: several preemptive hand-offs each */
#define GC_RECORD_MAX 1200
#define GC_RUNS 100
/* A future's bound under local durability is the disk's: a few ms here. 20 s is far beyond
 * any healthy fdatasync on a loaded CI machine and far below the harness timeout. */
#define GC_WAIT_MS 20000

typedef struct {
    dstl_storage *s;
    uint32_t wid;
    int rc;
    char err[512];
} gc_job;

static void *gc_writer(void *arg)
{
    gc_job *j = arg;
    char id[16];
    snprintf(id, sizeof id, "w%u", j->wid);
    dstl_writer *w = NULL;
    if ((j->rc = dstl_writer_open(j->s, id, 0, 15, &w)) < 0) return NULL;
    t_append_n(w, j->wid, GC_RECORDS, 0, 16, GC_RECORD_MAX);
    for (uint64_t cp = 1; cp <= 2 && j->rc == 0; cp++) {
        dstl_future *f = NULL;
        if ((j->rc = dstl_persist(w, 0, cp, &f)) < 0) break;
        j->rc = dstl_future_wait(f, GC_WAIT_MS);
        if (j->rc == 0) {
            dstl_handle *h = NULL;
            j->rc = dstl_future_result(f, &h);
            dstl_handle_free(h);
        }
        dstl_future_free(f);
        if (j->rc == 0) t_append_n(w, j->wid, GC_RECORDS / 4, 0, 16, GC_RECORD_MAX);
    }
    if (j->rc < 0) {
        /* A writer whose checkpoint never completed cannot be closed (close waits for its
         * ranges in flight): leave it, the test fails on rc. */
        snprintf(j->err, sizeof j->err, "%s", dstl_last_error());
        return NULL;
    }
    dstl_writer_close(w);
    return NULL;
}

static void group_commit_runs(const char *engine)
{
    t_engine_or_skip(engine);
    for (int run = 0; run < GC_RUNS; run++) {
        char *dir = t_mkdtemp("gcommit");
        dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "0", "dstl.preemptive-persist-threshold",
                                         "64kb", "dstl.io.engine", engine, NULL);
        pthread_t th[GC_WRITERS];
        gc_job jobs[GC_WRITERS];
        for (uint32_t i = 0; i < GC_WRITERS; i++) {
            jobs[i] = (gc_job){.s = s, .wid = i};
            cr_assert_eq(pthread_create(&th[i], NULL, gc_writer, &jobs[i]), 0);
        }
        for (uint32_t i = 0; i < GC_WRITERS; i++) pthread_join(th[i], NULL);
        for (uint32_t i = 0; i < GC_WRITERS; i++)
            cr_assert_eq(jobs[i].rc, 0, "engine %s, run %d, writer %u: %s (%s)", engine, run, i,
                         dstl_strerror(jobs[i].rc), jobs[i].err);
        cr_assert_eq(dstl_storage_close(s), 0);
        t_rm_rf(dir);
        free(dir);
    }
}

Test(dstl_pipeline, group_commit_acknowledges_every_checkpoint_io_uring, .timeout = 600)
{
    group_commit_runs("io_uring");
}

Test(dstl_pipeline, group_commit_acknowledges_every_checkpoint_libaio, .timeout = 600)
{
    group_commit_runs("libaio");
}

Test(dstl_pipeline, group_commit_acknowledges_every_checkpoint_psync, .timeout = 600)
{
    group_commit_runs("psync");
}

/* ---- dstl.io.direct: the pipeline's segment buffers go to disk with O_DIRECT ---- */

static void direct_segments(const char *engine)
{
    t_engine_or_skip(engine);
    static const char *const codecs[] = {"none", "lz4"};
    for (size_t c = 0; c < sizeof codecs / sizeof codecs[0]; c++) {
        char *dir = t_mkdtemp("direct");
        dstl_storage *s = t_storage_open(dir, "dstl.io.direct", "true", "dstl.io.engine", engine,
                                         "dstl.compression", codecs[c], NULL);
        dstl_writer *w;
        cr_assert_eq(dstl_writer_open(s, "d", 0, 63, &w), 0, "%s", dstl_last_error());
        for (uint64_t cp = 1; cp <= 3; cp++) {   /* segments of a few hundred KiB, odd lengths */
            uint64_t to = t_append_n(w, 0, 300 * cp, 0, 64, 3000);
            dstl_handle *h = t_persist(w, 0, cp);
            cr_assert_eq(t_verify(s, h, 0, 0, 64, 0, 63, 3000), (long)to, "%s/%s: checkpoint %" PRIu64, engine,
                         codecs[c], cp);
            dstl_handle_free(h);
        }
        dstl_stats st;
        cr_assert_eq(dstl_storage_stats(s, &st), 0);
        cr_assert_eq(st.segments_direct, st.segments_written, "%s/%s: %" PRIu64 " of %" PRIu64 " segments direct",
                     engine, codecs[c], st.segments_direct, st.segments_written);
        cr_assert_geq(st.segments_written, 3);
        dstl_writer_close(w);
        cr_assert_eq(dstl_storage_close(s), 0);
        /* and a storage with the option off reads them (they are plain segment files) */
        s = t_storage_open(dir, "dstl.io.direct", "false", "dstl.io.engine", engine, NULL);
        cr_assert_eq(dstl_storage_stats(s, &st), 0);
        cr_assert_eq(st.segments_direct, 0);
        cr_assert_eq(dstl_storage_close(s), 0);
        /* the default, auto, writes segments of 1 MiB and more with O_DIRECT here (this file
         * system takes it): ~2 MB of records */
        s = t_storage_open(dir, "dstl.io.engine", engine, "dstl.compression", codecs[c], NULL);
        cr_assert_eq(dstl_writer_open(s, "d2", 0, 63, &w), 0, "%s", dstl_last_error());
        uint64_t to = t_append_n(w, 0, 1500, 0, 64, 3000);
        dstl_handle *h = t_persist(w, 0, 1);
        cr_assert_eq(t_verify(s, h, 0, 0, 64, 0, 63, 3000), (long)to, "%s/%s: default", engine, codecs[c]);
        dstl_handle_free(h);
        cr_assert_eq(dstl_storage_stats(s, &st), 0);
        cr_assert_eq(st.segments_direct, st.segments_written, "%s/%s default: %" PRIu64 " of %" PRIu64
                     " segments direct", engine, codecs[c], st.segments_direct, st.segments_written);
        cr_assert_geq(st.segments_written, 1);
        dstl_writer_close(w);
        cr_assert_eq(dstl_storage_close(s), 0);
        t_rm_rf(dir);
        free(dir);
    }
}

Test(dstl_pipeline, direct_segments_read_back_io_uring) { direct_segments("io_uring"); }
Test(dstl_pipeline, direct_segments_read_back_libaio) { direct_segments("libaio"); }
Test(dstl_pipeline, direct_segments_read_back_psync) { direct_segments("psync"); }

/* ---- dstl.upload.max-in-flight is a hard bound, admission in arrival order ---- */

typedef struct {
    dstl_storage *s;
    uint32_t wid;
    int rounds;                 /* bounded: 16 records a round, a checkpoint every 8 rounds */
    size_t record_len;
    int rc;
} bp_job;

static void *bp_writer(void *arg)
{
    bp_job *j = arg;
    char id[16];
    snprintf(id, sizeof id, "w%u", j->wid);
    dstl_writer *w = NULL;
    if ((j->rc = dstl_writer_open(j->s, id, 0, 15, &w)) < 0) return NULL;
    uint8_t *buf = malloc(j->record_len);
    memset(buf, (int)j->wid, j->record_len);
    uint64_t mat = 0;
    for (int r = 0; r < j->rounds && j->rc == 0; r++) {
        for (int i = 0; i < 16 && j->rc == 0; i++) j->rc = dstl_append(w, (uint32_t)i, buf, j->record_len);
        if (j->rc == 0 && r % 8 == 7) {
            dstl_future *f = NULL;
            if ((j->rc = dstl_persist(w, mat, (uint64_t)r, &f)) == 0) {
                j->rc = dstl_future_wait(f, GC_WAIT_MS);
                dstl_future_free(f);
            }
            mat = dstl_writer_next_seq(w);
            if (j->rc == 0) j->rc = dstl_truncate(w, mat);
        }
    }
    free(buf);
    if (j->rc == 0) dstl_writer_close(w);
    return NULL;
}

typedef struct {
    dstl_storage *s;
    int stop;
    uint64_t max_seen, samples;
} sampler;

static void *sample_in_flight(void *arg)
{
    sampler *m = arg;
    while (!__atomic_load_n(&m->stop, __ATOMIC_SEQ_CST)) {
        dstl_stats st;
        if (dstl_storage_stats(m->s, &st) == 0 && st.in_flight_bytes > m->max_seen) m->max_seen = st.in_flight_bytes;
        m->samples++;
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* Eight writers hand off 16 KiB at a time (preemptive threshold) against a 1 MiB bound; a
 * sampler reads the in-flight gauge all along. It must never pass the bound: the encoded copy
 * of every segment counts as well as its records, and is charged before it is made. It used
 * to be added after encoding without waiting, reaching about twice the bound. */
Test(dstl_pipeline, in_flight_bytes_never_pass_the_bound, .timeout = 120)
{
    char *dir = t_mkdtemp("bound");
    dstl_storage *s = t_storage_open(dir, "dstl.upload.max-in-flight", "1mb", "dstl.batch.persist-delay", "5ms",
                                     "dstl.preemptive-persist-threshold", "16kb", NULL);
    sampler m = {.s = s};
    pthread_t mt, th[8];
    bp_job jobs[8];
    cr_assert_eq(pthread_create(&mt, NULL, sample_in_flight, &m), 0);
    for (uint32_t i = 0; i < 8; i++) {
        jobs[i] = (bp_job){.s = s, .wid = i, .rounds = 400, .record_len = 1000};
        cr_assert_eq(pthread_create(&th[i], NULL, bp_writer, &jobs[i]), 0);
    }
    for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
    __atomic_store_n(&m.stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(mt, NULL);
    for (int i = 0; i < 8; i++) cr_assert_eq(jobs[i].rc, 0, "writer %d: %s", i, dstl_strerror(jobs[i].rc));
    cr_log_info("in flight: at most %llu bytes in %llu samples (bound %u)", (unsigned long long)m.max_seen,
                (unsigned long long)m.samples, 1u << 20);
    cr_assert_gt(m.max_seen, 0);
    cr_assert_leq(m.max_seen, 1u << 20, "in flight reached %llu bytes, above dstl.upload.max-in-flight 1mb",
                  (unsigned long long)m.max_seen);
    cr_assert_eq(dstl_storage_close(s), 0);
    t_rm_rf(dir);
    free(dir);
}

typedef struct {
    dstl_writer *w;
    int rc;
    int returned;               /* order in which its dstl_persist returned (1, 2, ...) */
    int *order;
    dstl_future *f;
} adm_arg;

static void *adm_persist(void *p)
{
    adm_arg *a = p;
    a->rc = dstl_persist(a->w, 0, 1, &a->f);
    a->returned = __atomic_add_fetch(a->order, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Hand-offs are admitted in arrival order, so one larger than the bound is not starved by a
 * stream of small ones. A's 100 KiB sit in a batch for 500 ms (persist-delay) against a
 * 256 KiB bound; a 1 MiB hand-off (larger than the bound: admitted alone once nothing is in
 * flight) comes and waits; then a small one comes. It must wait behind the large one. It used
 * to be admitted at once (room for it), and so could every later small one: the large one
 * waited for in-flight bytes to reach exactly 0, which a steady stream never lets happen. */
Test(dstl_pipeline, hand_offs_are_admitted_in_arrival_order, .timeout = 60)
{
    char *dir = t_mkdtemp("order");
    dstl_storage *s = t_storage_open(dir, "dstl.upload.max-in-flight", "256kb", "dstl.batch.persist-delay", "500ms",
                                     NULL);
    dstl_writer *a = NULL, *big = NULL, *c = NULL;
    cr_assert_eq(dstl_writer_open(s, "a", 0, 15, &a), 0);
    cr_assert_eq(dstl_writer_open(s, "big", 0, 15, &big), 0);
    cr_assert_eq(dstl_writer_open(s, "c", 0, 15, &c), 0);
    t_append_n(a, 1, 100, 0, 16, 1000);      /* ~50-100 KiB */
    dstl_future *fa = NULL;
    cr_assert_eq(dstl_persist(a, 0, 1, &fa), 0);
    uint8_t *buf = calloc(1, 1u << 20);
    cr_assert_eq(dstl_append(big, 3, buf, 1u << 20), 0, "%s", dstl_last_error());
    free(buf);
    t_append_n(c, 2, 20, 0, 16, 1000);       /* ~10 KiB: fits beside a's */
    int order = 0;
    adm_arg ab = {.w = big, .order = &order}, ac = {.w = c, .order = &order};
    pthread_t tb, tc;
    cr_assert_eq(pthread_create(&tb, NULL, adm_persist, &ab), 0);
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
    cr_assert_eq(__atomic_load_n(&order, __ATOMIC_SEQ_CST), 0, "the 1 MiB hand-off must wait while a's is in flight");
    cr_assert_eq(pthread_create(&tc, NULL, adm_persist, &ac), 0);
    pthread_join(tb, NULL);
    pthread_join(tc, NULL);
    cr_assert_eq(ab.rc, 0, "%s", dstl_strerror(ab.rc));
    cr_assert_eq(ac.rc, 0, "%s", dstl_strerror(ac.rc));
    cr_assert_eq(ab.returned, 1, "the small hand-off that came later went first");
    cr_assert_eq(ac.returned, 2);
    dstl_future *fs[] = {fa, ab.f, ac.f};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(dstl_future_wait(fs[i], GC_WAIT_MS), 0);
        dstl_handle *h = NULL;
        cr_assert_eq(dstl_future_result(fs[i], &h), 0, "%s", dstl_last_error());
        dstl_handle_free(h);
        dstl_future_free(fs[i]);
    }
    cr_assert_eq(dstl_writer_close(a), 0);
    cr_assert_eq(dstl_writer_close(big), 0);
    cr_assert_eq(dstl_writer_close(c), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    t_rm_rf(dir);
    free(dir);
}

/* dstl_stats.queued_persists counts the hand-offs waiting for their batch to be written
 * (Flink's uploadQueueSize), also while they sit in the open batch during persist-delay. */
Test(dstl_pipeline, queued_persists_counts_what_waits_for_its_batch, .timeout = 60)
{
    char *dir = t_mkdtemp("queued");
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "3s", NULL);
    enum { N = 11 };
    dstl_writer *w[N];
    dstl_future *f[N];
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "q%d", i);
        cr_assert_eq(dstl_writer_open(s, id, 0, 15, &w[i]), 0);
        t_append_n(w[i], (uint32_t)i, 10, 0, 16, 100);
        cr_assert_eq(dstl_persist(w[i], 0, 1, &f[i]), 0);
    }
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);                    /* the loop has moved them into its open batch */
    dstl_stats st;
    cr_assert_eq(dstl_storage_stats(s, &st), 0);
    cr_assert_eq(st.queued_persists, N, "queued_persists %llu while %d persists wait for their batch",
                 (unsigned long long)st.queued_persists, N);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(dstl_future_wait(f[i], GC_WAIT_MS), 0);
        dstl_future_free(f[i]);
    }
    cr_assert_eq(dstl_storage_stats(s, &st), 0);
    cr_assert_eq(st.queued_persists, 0);
    for (int i = 0; i < N; i++) cr_assert_eq(dstl_writer_close(w[i]), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    t_rm_rf(dir);
    free(dir);
}

/* Three writers w0..w2 on key groups 0-31, 32-63, 64-95. */
static void open_three(dstl_storage *s, dstl_writer **w)
{
    char id[16];
    for (uint32_t i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "w%u", i);
        cr_assert_eq(dstl_writer_open(s, id, 32 * i, 32 * i + 31, &w[i]), 0, "%s", dstl_last_error());
    }
}

static void close_three(dstl_storage *s, dstl_writer **w, char *dir)
{
    for (int i = 0; i < 3; i++) cr_assert_eq(dstl_writer_close(w[i]), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    t_rm_rf(dir);
    free(dir);
}

/* dstl.batch.close-when-all-in: a batch closes once every open writer of the storage has
 * persisted into it, not only at persist-delay (60 s here). With two of three writers in it
 * stays open; the third's persist closes it, one segment holds all three, and the next round
 * counts again from none (a count carried over would close it on the first writer). */
Test(dstl_pipeline, a_batch_closes_once_every_open_writer_persisted_into_it, .timeout = 120)
{
    char *dir = t_mkdtemp("allin");
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "60s", "dstl.batch.close-when-all-in", "true",
                                     NULL);
    dstl_writer *w[3];
    open_three(s, w);
    uint64_t from[3] = {0};
    for (int round = 1; round <= 2; round++) {
        dstl_future *f[3];
        for (uint32_t i = 0; i < 3; i++) t_append_n(w[i], i, 20, 32 * i, 32, 200);
        for (uint32_t i = 0; i < 2; i++) cr_assert_eq(dstl_persist(w[i], from[i], (uint64_t)round, &f[i]), 0);
        cr_assert_eq(dstl_future_wait(f[0], 300), -ETIMEDOUT, "round %d: closed with two of three writers in", round);
        cr_assert_eq(dstl_persist(w[2], from[2], (uint64_t)round, &f[2]), 0);
        for (uint32_t i = 0; i < 3; i++) {
            /* the bound: far below the 60 s persist-delay */
            cr_assert_eq(dstl_future_wait(f[i], 30000), 0, "round %d: writer %u still pending", round, i);
            dstl_handle *h;
            cr_assert_eq(dstl_future_result(f[i], &h), 0, "%s", dstl_last_error());
            dstl_handle_free(h);
            dstl_future_free(f[i]);
            from[i] = dstl_writer_next_seq(w[i]);
        }
        dstl_stats st;
        cr_assert_eq(dstl_storage_stats(s, &st), 0);
        cr_assert_eq(st.segments_written, (uint64_t)round, "round %d: %llu segments", round,
                     (unsigned long long)st.segments_written);
    }
    close_three(s, w, dir);
}

/* After a batch closed at persist-delay with two of three writers in, the count starts over:
 * the third writer's persist alone must not close the next batch (it would, on the two
 * writers counted for the batch before), so it and the other two's next persists share one. */
Test(dstl_pipeline, a_batch_closed_by_the_delay_leaves_no_writers_counted, .timeout = 120)
{
    char *dir = t_mkdtemp("allin-delay");
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "2s", "dstl.batch.close-when-all-in", "true",
                                     NULL);
    dstl_writer *w[3];
    open_three(s, w);
    for (uint32_t i = 0; i < 3; i++) t_append_n(w[i], i, 20, 32 * i, 32, 200);
    dstl_handle *h = t_persist(w[0], 0, 1);      /* w0 and w1: closed by the delay */
    dstl_handle_free(h);
    dstl_future *f[3];
    cr_assert_eq(dstl_persist(w[1], 0, 1, &f[1]), 0);
    cr_assert_eq(dstl_future_wait(f[1], 30000), 0);
    dstl_future_free(f[1]);
    for (uint32_t i = 0; i < 3; i++) t_append_n(w[i], i, 20, 32 * i, 32, 200);
    cr_assert_eq(dstl_persist(w[2], 0, 2, &f[2]), 0);
    cr_assert_eq(dstl_future_wait(f[2], 300), -ETIMEDOUT, "w2's persist closed a batch of its own");
    for (uint32_t i = 0; i < 2; i++) cr_assert_eq(dstl_persist(w[i], 0, 2, &f[i]), 0);
    for (uint32_t i = 0; i < 3; i++) {
        cr_assert_eq(dstl_future_wait(f[i], 30000), 0);
        dstl_future_free(f[i]);
    }
    dstl_stats st;
    cr_assert_eq(dstl_storage_stats(s, &st), 0);
    cr_assert_eq(st.segments_written, 3, "%llu segments, not 3",
                 (unsigned long long)st.segments_written);
    close_three(s, w, dir);
}

/* ---- the pipeline's thread is named (top -H, perf, gdb tell it from the application's) ---- */

Test(dstl_pipeline, its_thread_is_named_dstl_pipeline)
{
    char *dir = t_mkdtemp("names");
    dstl_storage *s = t_storage_open(dir, NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(s, "n", 0, 0, &w), 0, "%s", dstl_last_error());
    t_append_n(w, 0, 10, 0, 1, 100);
    dstl_handle *h = t_persist(w, 0, 1);      /* the pipeline has run a turn */
    cr_assert(t_thread_named("dstl-pipeline"), "no thread of this process is named dstl-pipeline");
    dstl_handle_free(h);
    dstl_writer_close(w);
    cr_assert_eq(dstl_storage_close(s), 0);
}

/* ---- writer chunks: a steady writer's round lives in about one chunk ---- */

/* Chunks from the writer's first unsent record to its tail (the writer thread's own list). */
static int unsent_chunks(const dstl_writer *w)
{
    int n = 0;
    for (const chunk *c = w->sent_chunk; c; c = c->next) n++;
    return n;
}

Test(dstl_pipeline, a_steady_writers_round_fills_about_one_chunk)
{
    char *dir = t_mkdtemp("chunks");
    dstl_storage *s = t_storage_open(dir, NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(s, "c", 0, 63, &w), 0, "%s", dstl_last_error());
    uint8_t rec[1000];
    memset(rec, 7, sizeof rec);
    uint64_t from = 0;
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 60; i++)            /* ~60 KB a round, as between checkpoints */
            cr_assert_eq(dstl_append(w, (uint32_t)(i % 64), rec, sizeof rec), 0, "%s", dstl_last_error());
        if (round >= 2)
            /* before: chunks restarted at 4 KiB after every hand-off and doubled, so a round's
             * records spread over 5 chunks of 4 + 4 + 8 + 16 + 32 KiB (twice the records) */
            cr_assert_leq(unsent_chunks(w), 2, "round %d: its ~60 KB of records are in %d chunks", round,
                          unsent_chunks(w));
        dstl_handle *h = t_persist(w, from, (uint64_t)round + 1);
        from = dstl_handle_to_seq(h);
        dstl_handle_free(h);
        cr_assert_eq(dstl_truncate(w, from), 0);
    }
    dstl_writer_close(w);
    cr_assert_eq(dstl_storage_close(s), 0);
}

/* The chunk pool keeps freed chunks up to the headroom under max-in-flight while records flow
 * (dstl/chunks.c): four writers' 8 MiB rounds leave about 32 MiB in it; the pipeline keeps the
 * pages of its last segment buffers (pipeline/bufpool.c). A pipeline idle for
 * CHUNK_POOL_IDLE_NS trims the chunks to CHUNK_POOL_MIN and gives every free segment buffer
 * back: an idle storage does not keep a burst's memory. dstl_stats.pooled_bytes counts both.
 * Bounded wait: 20 x the idle time. */
Test(dstl_pipeline, an_idle_storage_trims_the_chunks_and_segment_buffers_a_burst_left)
{
    char *dir = t_mkdtemp("trim");
    dstl_storage *s = t_storage_open(dir, NULL);
    enum { NW = 4 };
    dstl_writer *w[NW];
    uint64_t from[NW] = {0};
    uint8_t rec[1000];
    memset(rec, 7, sizeof rec);
    for (int i = 0; i < NW; i++) {
        char id[16];
        snprintf(id, sizeof id, "t%d", i);
        cr_assert_eq(dstl_writer_open(s, id, 0, 63, &w[i]), 0, "%s", dstl_last_error());
    }
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < NW; i++)
            for (int k = 0; k < 8 * 1024; k++)
                cr_assert_eq(dstl_append(w[i], (uint32_t)(k % 64), rec, sizeof rec), 0, "%s", dstl_last_error());
        for (int i = 0; i < NW; i++) {
            dstl_handle *h = t_persist(w[i], from[i], (uint64_t)round + 1);
            from[i] = dstl_handle_to_seq(h);
            dstl_handle_free(h);
            cr_assert_eq(dstl_truncate(w[i], from[i]), 0);
        }
    }
    size_t after_burst = chunk_pool_bytes(&s->chunks);
    cr_assert_gt(after_burst, CHUNK_POOL_MIN, "the burst left %zu bytes in the pool", after_burst);
    dstl_stats st;
    cr_assert_eq(dstl_storage_stats(s, &st), 0);
    cr_assert_gt(st.pooled_bytes, chunk_pool_bytes(&s->chunks), "the burst's last segment buffers are kept too "
                 "(pooled %lu bytes)", (unsigned long)st.pooled_bytes);
    uint64_t pooled_after_burst = st.pooled_bytes;
    for (int i = 0; i < 200 && st.pooled_bytes > CHUNK_POOL_MIN; i++) {
        usleep(CHUNK_POOL_IDLE_NS / 10000);   /* a tenth of the idle time */
        cr_assert_eq(dstl_storage_stats(s, &st), 0);
    }
    size_t now = chunk_pool_bytes(&s->chunks);
    cr_assert_leq(now, CHUNK_POOL_MIN, "idle for 20 s, the pool still holds %zu bytes (%zu after the burst)", now,
                  after_burst);
    cr_assert_eq(st.pooled_bytes, now, "idle for 20 s, %lu bytes of segment buffers are still kept (%lu bytes "
                 "pooled after the burst)", (unsigned long)(st.pooled_bytes - now), (unsigned long)pooled_after_burst);
    /* and the writers go on with a trimmed pool */
    for (int i = 0; i < NW; i++) {
        cr_assert_eq(dstl_append(w[i], 1, rec, sizeof rec), 0);
        dstl_handle *h = t_persist(w[i], from[i], 9);
        dstl_handle_free(h);
        dstl_writer_close(w[i]);
    }
    cr_assert_eq(dstl_storage_close(s), 0);
    t_rm_rf(dir);
    free(dir);
}

/* ---- small segments: padded to the size of the recycled files they overwrite ---- */

/* The sizes of dir's non-empty segment files: each a multiple of 4 KiB, and how many. */
static int segment_files_are_whole_pages(const char *dir, int *n)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    struct dirent *e;
    int ok = 1;
    *n = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 4, ".seg") != 0) continue;
        char p[8400];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &st) != 0 || st.st_size == 0) continue;
        (*n)++;
        if (st.st_size % 4096) {
            cr_log_error("%s: %lld bytes", e->d_name, (long long)st.st_size);
            ok = 0;
        }
    }
    closedir(d);
    return ok;
}

/* A writer that commits a few records at a time and truncates after each (bench_local
 * commits): its segments, a few KB, are padded to whole 4 KiB pages (batch.c, the recycled
 * file reserved for them holds as many), and every checkpoint reads back exactly — plain,
 * compressed and encrypted. 80 rounds: past the first 32 reserved names, into recycled ones. */
Test(dstl_pipeline, small_segments_are_padded_to_whole_pages_and_read_back, .timeout = 120)
{
    static const char *const modes[] = {"none", "lz4", "encrypted"};
    for (size_t m = 0; m < 3; m++) {
        char *dir = t_mkdtemp("pad");
        char kf[4200];
        snprintf(kf, sizeof kf, "%s/keys", dir);
        const char *key = "a: 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n";
        cr_assert_eq(t_write_file(kf, key, strlen(key)), 0);
        chmod(kf, 0600);
        char data[4200];
        snprintf(data, sizeof data, "%s/data", dir);
        dstl_storage *s = m == 2 ? t_storage_open(data, "dstl.batch.persist-delay", "0", "dstl.encryption.key-file", kf,
                                                  NULL)
                                 : t_storage_open(data, "dstl.batch.persist-delay", "0", "dstl.compression", modes[m],
                                                  NULL);
        dstl_writer *w;
        cr_assert_eq(dstl_writer_open(s, "p", 0, 15, &w), 0, "%s", dstl_last_error());
        uint64_t from = 0;
        for (uint64_t cp = 1; cp <= 80; cp++) {
            uint64_t to = t_append_n(w, 0, 1 + cp % 7, 0, 16, 300);
            dstl_handle *h = t_persist(w, from, cp);
            cr_assert_eq(t_verify(s, h, 0, 0, 16, 0, 15, 300), (long)(to - from), "%s: checkpoint %" PRIu64,
                         modes[m], cp);
            int n;
            cr_assert(segment_files_are_whole_pages(data, &n), "%s: checkpoint %" PRIu64 ": a segment of odd length",
                      modes[m], cp);
            cr_assert_geq(n, 1);
            dstl_handle_discard(s, h);   /* its checkpoint is subsumed: the segment can go */
            dstl_handle_free(h);
            from = to;
            cr_assert_eq(dstl_truncate(w, from), 0);
        }
        /* past the 32 names created ahead, the segments land on recycled files of their size */
        dstl_stats st;
        cr_assert_eq(dstl_storage_stats(s, &st), 0);
        cr_log_info("%s: %" PRIu64 " of %" PRIu64 " in place", modes[m], st.segments_in_place, st.segments_written);
        cr_assert_geq(st.segments_in_place, 30, "%s: %" PRIu64 " of %" PRIu64 " segments written in place", modes[m],
                      st.segments_in_place, st.segments_written);
        dstl_writer_close(w);
        cr_assert_eq(dstl_storage_close(s), 0);
        t_rm_rf(dir);
        free(dir);
    }
}

/* ---- a large batch is encoded as its sections join (pipeline/batch.c, batch_encode_open) ---- */

/* The pending-record bytes of t_append_n's records [0, n) of stream wid (their charge). */
static uint64_t records_bytes(uint32_t wid, uint64_t n, size_t max_len)
{
    uint64_t b = 0;
    for (uint64_t seq = 0; seq < n; seq++) b += wire_rec_size(payload_len(wid, seq, max_len));
    return b;
}

static dstl_stats stats_of(dstl_storage *s)
{
    dstl_stats st;
    cr_assert_eq(dstl_storage_stats(s, &st), 0);
    return st;
}

static void wait_verify(dstl_storage *s, dstl_future *f, uint32_t wid, uint64_t n, size_t max_len)
{
    cr_assert_eq(dstl_future_wait(f, 30000), 0, "writer %u: %s", wid, dstl_last_error());
    dstl_handle *h = NULL;
    cr_assert_eq(dstl_future_result(f, &h), 0, "%s", dstl_last_error());
    long got = t_verify(s, h, wid, 0, 16, 0, 15, max_len);
    cr_assert_eq(got, (long)n, "writer %u reads back %ld of %llu records", wid, got, (unsigned long long)n);
    dstl_handle_free(h);
    dstl_future_free(f);
}

/* A batch that holds BUILD_MIN_BYTES is encoded while it waits for its persist-delay, not at its
 * flush: its records' chunks go at once and only the encoded copy stays charged. Before, the
 * records and the reserve for their encoded copy (twice their bytes) stayed charged until the
 * flush, and the encode ran between the segment before and this one's write. */
Test(dstl_pipeline, a_large_batch_is_encoded_while_it_waits_and_holds_its_records_once, .timeout = 120)
{
    char *dir = t_mkdtemp("build");
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "60s", "dstl.batch.persist-size-threshold", "4mb",
                                     NULL);
    dstl_writer *a, *b;
    cr_assert_eq(dstl_writer_open(s, "a", 0, 15, &a), 0);
    cr_assert_eq(dstl_writer_open(s, "b", 0, 15, &b), 0);
    enum { NA = 3000, NB = 10000, MAXLEN = 700 };
    uint64_t rec_a = records_bytes(1, NA, MAXLEN);
    t_append_n(a, 1, NA, 0, 16, MAXLEN);
    dstl_future *fa, *fb;
    cr_assert_eq(dstl_persist(a, 0, 1, &fa), 0, "%s", dstl_last_error());
    /* the charge falls to the encoded copy while the batch still waits (60 s, or 4 MB) */
    uint64_t in = 0;
    for (int i = 0; i < 2000 && (in = stats_of(s).in_flight_bytes) > rec_a + (64u << 10); i++) usleep(10000);
    cr_assert_leq(in, rec_a + (64u << 10), "%llu bytes charged for %llu bytes of records, still unencoded",
                  (unsigned long long)in, (unsigned long long)rec_a);
    cr_assert_eq(dstl_future_wait(fa, 0), -ETIMEDOUT, "the batch was flushed, not waiting");
    cr_assert_eq(stats_of(s).segments_written, 0);
    /* b's records pass the size threshold: the batch closes with both */
    t_append_n(b, 2, NB, 0, 16, MAXLEN);
    cr_assert_eq(dstl_persist(b, 0, 1, &fb), 0, "%s", dstl_last_error());
    wait_verify(s, fa, 1, NA, MAXLEN);
    wait_verify(s, fb, 2, NB, MAXLEN);
    dstl_stats st = stats_of(s);
    cr_expect_eq(st.segments_written, 1);
    cr_expect_eq(st.in_flight_bytes, 0, "durable: nothing charged, %llu", (unsigned long long)st.in_flight_bytes);
    cr_assert_eq(dstl_writer_close(a), 0);
    cr_assert_eq(dstl_writer_close(b), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    t_rm_rf(dir);
    free(dir);
}

/* A section that no longer fits the built segment's buffer closes the batch: it is written at
 * once, and that section and the ones after it open the next; every record reads back. */
Test(dstl_pipeline, a_built_segment_that_fills_is_written_and_the_rest_opens_the_next, .timeout = 120)
{
    char *dir = t_mkdtemp("split");
    dstl_config *c = t_config(dir, "dstl.batch.persist-delay", "1s", NULL);
    storage_seams seams = {.build_cap_bytes = 1u << 20};
    dstl_storage *s = NULL;
    cr_assert_eq(storage_open_with_seams(c, &seams, &s), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    enum { W = 4, N = 1000, MAXLEN = 800 };
    dstl_writer *w[W];
    dstl_future *f[W];
    for (uint32_t i = 0; i < W; i++) {
        char id[8];
        snprintf(id, sizeof id, "w%u", i);
        cr_assert_eq(dstl_writer_open(s, id, 0, 15, &w[i]), 0);
        t_append_n(w[i], i, N, 0, 16, MAXLEN);
    }
    uint64_t one = records_bytes(0, N, MAXLEN);
    cr_assert(2 * one < (1u << 20) && 3 * one > (1u << 20), "%llu bytes a writer: two must fit 1 MiB, three not",
              (unsigned long long)one);
    for (uint32_t i = 0; i < W; i++) cr_assert_eq(dstl_persist(w[i], 0, 1, &f[i]), 0, "%s", dstl_last_error());
    for (uint32_t i = 0; i < W; i++) wait_verify(s, f[i], i, N, MAXLEN);
    dstl_stats st = stats_of(s);
    cr_expect_eq(st.segments_written, 2, "%llu segments for four sections of which two fit a buffer",
                 (unsigned long long)st.segments_written);
    cr_expect_eq(st.in_flight_bytes, 0, "durable: nothing charged, %llu", (unsigned long long)st.in_flight_bytes);
    for (uint32_t i = 0; i < W; i++) cr_assert_eq(dstl_writer_close(w[i]), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    t_rm_rf(dir);
    free(dir);
}
