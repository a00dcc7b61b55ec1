/*
 * tests/api_cases.c — the API contract cases (suite dstl_api), linked into two binaries that
 * each supply the storage the cases run on (tests/api_cases.h): test_dstl_api (local
 * durability) and test_remote_api (remote durability). Not a test binary of its own.
 *
 * The API contract of API.md: sequence numbers, persist ranges,
 * re-persist without I/O, grouping of many writers into few segments, backpressure,
 * truncate/discard deleting exactly the unreferenced segments, handles across storages,
 * errors, key-group filtering, and the FLINK-28440 race made impossible.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dstl.h"
#include "tests/api_cases.h"
#include "tests/helpers.h"
#include "tests/helpers_dstl.h"
#include "wire/wire.h"

static char *dir;

static void setup(void)
{
    dir = t_mkdtemp("api");
    cr_assert_not_null(dir);
    api_storage_begin();
}

static void teardown(void)
{
    api_storage_end();
    t_rm_rf(dir);
    free(dir);
}

TestSuite(dstl_api, .init = setup, .fini = teardown, .timeout = 120);

Test(dstl_api, seq_numbers_start_at_zero_and_count_every_record)
{
    dstl_storage *s = t_storage_open(dir, NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "op-1", 0, 127, &w), 0, "%s", dstl_last_error());
    cr_expect_eq(dstl_writer_next_seq(w), 0);
    cr_assert_eq(dstl_append(w, 5, "a", 1), 0);
    cr_assert_eq(dstl_append_meta(w, "meta", 4), 0);
    cr_assert_eq(dstl_append(w, 7, "", 0), 0);
    cr_expect_eq(dstl_writer_next_seq(w), 3);
    cr_expect_eq(dstl_append(w, 128, "x", 1), -EINVAL, "key group outside the range accepted");
    cr_expect_eq(dstl_writer_next_seq(w), 3);
    dstl_writer *dup = NULL;
    cr_expect_eq(dstl_writer_open(s, "op-1", 0, 1, &dup), -EBUSY);
    cr_expect_eq(dstl_storage_close(s), -EBUSY, "closed with a writer open");
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
}

Test(dstl_api, persist_covers_exactly_from_to_next)
{
    dstl_storage *s = t_storage_open(dir, NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 9, &w), 0);
    t_append_n(w, 1, 100, 0, 10, 300);
    dstl_handle *h1 = t_persist(w, 0, 1);
    cr_expect_eq(dstl_handle_from_seq(h1), 0);
    cr_expect_eq(dstl_handle_to_seq(h1), 100);
    cr_expect_eq(dstl_handle_checkpoint_id(h1), 1);
    cr_expect_str_eq(dstl_handle_writer_id(h1), "w");
    cr_expect_eq(t_verify(s, h1, 1, 0, 10, 0, 9, 300), 100);
    t_append_n(w, 1, 50, 0, 10, 300);
    /* from inside the first persisted range: the handle starts exactly there */
    dstl_handle *h2 = t_persist(w, 40, 2);
    cr_expect_eq(dstl_handle_from_seq(h2), 40);
    cr_expect_eq(dstl_handle_to_seq(h2), 150);
    cr_expect_eq(t_verify(s, h2, 1, 0, 10, 0, 9, 300), 110);
    /* an empty range */
    dstl_handle *h3 = t_persist(w, 150, 3);
    cr_expect_eq(dstl_handle_from_seq(h3), 150);
    cr_expect_eq(dstl_handle_to_seq(h3), 150);
    cr_expect_eq(dstl_handle_size(h3), 0);
    cr_expect_eq(t_verify(s, h3, 1, 0, 10, 0, 9, 300), 0);
    dstl_handle_free(h1);
    dstl_handle_free(h2);
    dstl_handle_free(h3);
    dstl_writer_close(w);
    cr_assert_eq(dstl_storage_close(s), 0);
}

Test(dstl_api, handle_size_counts_payload_bytes)
{
    dstl_storage *s = t_storage_open(dir, NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 0, &w), 0);
    char buf[100] = {0};
    for (int i = 0; i < 10; i++) dstl_append(w, 0, buf, 10);
    dstl_handle *h = t_persist(w, 0, 1);
    cr_expect_eq(dstl_handle_size(h), 100);
    uint64_t mark = dstl_writer_next_seq(w);                /* a materialization point */
    for (int i = 0; i < 5; i++) dstl_append(w, 0, buf, 7);
    dstl_handle *h2 = t_persist(w, mark, 2);
    cr_expect_eq(dstl_handle_size(h2), 35);
    dstl_handle *h3 = t_persist(w, 10, 3);                  /* a persist boundary */
    cr_expect_eq(dstl_handle_size(h3), 35);
    /* A point inside durable records that next_seq never reported: documented to count
     * whole sections, so between the exact 7 x 10 + 5 x 7 and all 135 bytes. */
    dstl_handle *h4 = t_persist(w, 3, 4);
    cr_expect(dstl_handle_size(h4) >= 105 && dstl_handle_size(h4) <= 135, "size %lu",
              (unsigned long)dstl_handle_size(h4));
    dstl_handle_free(h4);
    dstl_handle_free(h);
    dstl_handle_free(h2);
    dstl_handle_free(h3);
    dstl_writer_close(w);
    dstl_storage_close(s);
}

Test(dstl_api, repersist_with_nothing_new_writes_nothing)
{
    dstl_storage *s = t_storage_open(dir, NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 3, &w), 0);
    t_append_n(w, 2, 1000, 0, 4, 64);
    dstl_handle *h1 = t_persist(w, 0, 7);
    dstl_stats st1, st2;
    dstl_storage_stats(s, &st1);
    dstl_future *f = NULL;
    cr_assert_eq(dstl_persist(w, 0, 7, &f), 0);
    cr_expect_eq(dstl_future_done(f), 1, "a persist with nothing new must be complete at once");
    dstl_handle *h2 = NULL;
    cr_assert_eq(dstl_future_result(f, &h2), 0);
    dstl_future_free(f);
    dstl_storage_stats(s, &st2);
    cr_expect_eq(st2.segments_written, st1.segments_written);
    cr_expect_eq(st2.segment_bytes, st1.segment_bytes);
    void *b1, *b2;
    size_t l1, l2;
    cr_assert_eq(dstl_handle_serialize(h1, &b1, &l1), 0);
    cr_assert_eq(dstl_handle_serialize(h2, &b2, &l2), 0);
    cr_expect(l1 == l2 && memcmp(b1, b2, l1) == 0, "the handles differ");
    free(b1);
    free(b2);
    dstl_handle_free(h1);
    dstl_handle_free(h2);
    dstl_writer_close(w);
    dstl_storage_close(s);
}

Test(dstl_api, persist_errors_from_above_next_and_below_truncation)
{
    dstl_storage *s = t_storage_open(dir, NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 3, &w), 0);
    t_append_n(w, 3, 20, 0, 4, 16);
    dstl_future *f = NULL;
    cr_expect_eq(dstl_persist(w, 21, 1, &f), -EINVAL);
    cr_expect_null(f);
    cr_assert_eq(dstl_truncate(w, 10), 0);
    cr_expect_eq(dstl_persist(w, 9, 1, &f), DSTL_ETRUNCATED);
    cr_expect(strstr(dstl_last_error(), "truncation") != NULL, "%s", dstl_last_error());
    cr_expect_eq(dstl_truncate(w, 21), -EINVAL);
    dstl_handle *h = t_persist(w, 10, 2);
    cr_expect_eq(t_verify(s, h, 3, 0, 4, 0, 3, 16), 10);
    dstl_handle_free(h);
    dstl_writer_close(w);
    dstl_storage_close(s);
}

Test(dstl_api, key_group_filter_keeps_meta_records)
{
    dstl_storage *s = t_storage_open(dir, NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 100, 163, &w), 0);
    cr_assert_eq(dstl_append_meta(w, "schema-v1", 9), 0);
    for (uint32_t i = 0; i < 640; i++) {
        char v[16];
        int n = snprintf(v, sizeof v, "v%u", i);
        cr_assert_eq(dstl_append(w, 100 + i % 64, v, (size_t)n), 0);
    }
    cr_assert_eq(dstl_append_meta(w, "schema-v2", 9), 0);
    dstl_handle *h = t_persist(w, 0, 1);
    dstl_reader *r = NULL;
    cr_assert_eq(dstl_reader_open(s, h, 110, 119, &r), 0);
    dstl_record rec;
    uint64_t last = 0;
    int meta = 0, data = 0, first = 1;
    while (dstl_reader_next(r, &rec) == 1) {
        cr_expect(first || rec.seq > last, "seq order broken: %lu after %lu", (unsigned long)rec.seq,
                  (unsigned long)last);
        first = 0;
        last = rec.seq;
        if (rec.is_meta) {
            meta++;
            continue;
        }
        data++;
        cr_expect(rec.key_group >= 110 && rec.key_group <= 119, "key group %u leaked", rec.key_group);
        char v[16];
        int n = snprintf(v, sizeof v, "v%u", (unsigned)(rec.seq - 1));
        cr_expect(rec.len == (size_t)n && memcmp(rec.data, v, rec.len) == 0);
    }
    cr_expect_eq(meta, 2);
    cr_expect_eq(data, 100);
    dstl_reader_close(r);
    dstl_handle_free(h);
    dstl_writer_close(w);
    dstl_storage_close(s);
}

/* ---- many writers, few segments ---- */

typedef struct {
    dstl_storage *s;
    int first, count;
    int rounds;
} many_arg;

static void *many_writers(void *p)
{
    many_arg *a = p;
    dstl_writer **ws = calloc((size_t)a->count, sizeof *ws);
    for (int i = 0; i < a->count; i++) {
        char id[32];
        snprintf(id, sizeof id, "task-%d", a->first + i);
        cr_assert_eq(dstl_writer_open(a->s, id, 0, 127, &ws[i]), 0);
    }
    for (int round = 0; round < a->rounds; round++) {
        dstl_future **fs = calloc((size_t)a->count, sizeof *fs);
        for (int i = 0; i < a->count; i++) {
            t_append_n(ws[i], (uint32_t)(a->first + i), 20, 0, 128, 200);
            cr_assert_eq(dstl_persist(ws[i], 0, (uint64_t)round, &fs[i]), 0, "%s", dstl_last_error());
        }
        for (int i = 0; i < a->count; i++) {
            cr_assert_eq(dstl_future_wait(fs[i], 30000), 0);
            dstl_handle *h = NULL;
            cr_assert_eq(dstl_future_result(fs[i], &h), 0, "%s", dstl_last_error());
            if (round == a->rounds - 1)
                cr_expect_eq(t_verify(a->s, h, (uint32_t)(a->first + i), 0, 128, 0, 127, 200), 20 * a->rounds);
            dstl_handle_free(h);
            dstl_future_free(fs[i]);
        }
        free(fs);
    }
    for (int i = 0; i < a->count; i++) dstl_writer_close(ws[i]);
    free(ws);
    return NULL;
}

Test(dstl_api, many_writers_share_few_segments)
{
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "20ms", NULL);
    enum { THREADS = 8, PER = 32, ROUNDS = 3 };
    pthread_t th[THREADS];
    many_arg a[THREADS];
    for (int t = 0; t < THREADS; t++) {
        a[t] = (many_arg){s, t * PER, PER, ROUNDS};
        pthread_create(&th[t], NULL, many_writers, &a[t]);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    dstl_stats st;
    dstl_storage_stats(s, &st);
    cr_expect_eq(st.persists, THREADS * PER * ROUNDS);
    /* 768 persists; grouping must make it at least ten times fewer segments */
    cr_expect(st.segments_written * 10 <= st.persists, "%lu segments for %lu persists",
              (unsigned long)st.segments_written, (unsigned long)st.persists);
    cr_expect_eq(st.appends, THREADS * PER * ROUNDS * 20);
    cr_assert_eq(dstl_storage_close(s), 0);
}

/* ---- truncate and discard delete exactly the unreferenced segments ---- */

Test(dstl_api, truncate_and_discard_delete_exactly_unreferenced_segments)
{
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "0", NULL);
    dstl_writer *a = NULL, *b = NULL;
    cr_assert_eq(dstl_writer_open(s, "a", 0, 7, &a), 0);
    cr_assert_eq(dstl_writer_open(s, "b", 0, 7, &b), 0);
    /* segment 1: a[0,10) alone; segment 2: b[0,10) alone */
    t_append_n(a, 10, 10, 0, 8, 50);
    dstl_handle *ha1 = t_persist(a, 0, 1);
    t_append_n(b, 11, 10, 0, 8, 50);
    dstl_handle *hb1 = t_persist(b, 0, 1);
    /* segment 3: a[10,20) alone */
    t_append_n(a, 10, 10, 0, 8, 50);
    dstl_handle *ha2 = t_persist(a, 0, 2);
    cr_expect_eq(t_count_segments(dir), 3);

    /* a materializes at 10: its first segment is still held by the live handle ha1 and ha2 */
    cr_assert_eq(dstl_truncate(a, 10), 0);
    cr_assert_eq(dstl_handle_discard(s, ha1), 0);
    cr_expect_eq(t_count_segments(dir), 3, "ha2 still covers a[0,20)");
    cr_assert_eq(dstl_handle_discard(s, ha2), 0);
    cr_assert_eq(dstl_handle_discard(s, ha2), 0, "discarding twice is a no-op");
    /* deletion runs on the pipeline thread: wait for it through stats */
    dstl_stats st = {0};
    for (int i = 0; i < 2000 && st.segments_deleted < 1; i++) {
        dstl_storage_stats(s, &st);
        if (st.segments_deleted < 1) usleep(1000);
    }
    cr_expect_eq(st.segments_deleted, 1);
    cr_expect_eq(t_count_segments(dir), 2, "only a's first segment is unreferenced");
    cr_expect_eq(t_verify(s, hb1, 11, 0, 8, 0, 7, 50), 10);

    /* b's segment stays while hb1 is live, even after b truncates everything */
    cr_assert_eq(dstl_truncate(b, 10), 0);
    usleep(20000);
    cr_expect_eq(t_count_segments(dir), 2);
    cr_expect_eq(t_verify(s, hb1, 11, 0, 8, 0, 7, 50), 10);
    cr_assert_eq(dstl_handle_discard(s, hb1), 0);
    for (int i = 0; i < 2000 && st.segments_deleted < 2; i++) {
        dstl_storage_stats(s, &st);
        if (st.segments_deleted < 2) usleep(1000);
    }
    cr_expect_eq(t_count_segments(dir), 1, "a's second segment is still untruncated");
    dstl_handle_free(ha1);
    dstl_handle_free(ha2);
    dstl_handle_free(hb1);
    dstl_writer_close(a);   /* closing releases a's sections: the last segment goes */
    dstl_writer_close(b);
    cr_assert_eq(dstl_storage_close(s), 0);
    cr_expect_eq(t_count_segments(dir), 0);
}

Test(dstl_api, handles_read_back_in_another_storage)
{
    dstl_storage *s = t_storage_open(dir, NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 31, &w), 0);
    t_append_n(w, 4, 3000, 0, 32, 2000);
    dstl_handle *h = t_persist(w, 0, 9);
    void *buf;
    size_t len;
    cr_assert_eq(dstl_handle_serialize(h, &buf, &len), 0);
    dstl_handle_free(h);
    dstl_writer_close(w);
    cr_assert_eq(dstl_storage_close(s), 0);   /* the segment stays: the handle is live */

    dstl_storage *s2 = t_storage_open(dir, NULL);
    dstl_handle *p = NULL;
    cr_assert_eq(dstl_handle_parse(buf, len, &p), 0, "%s", dstl_last_error());
    cr_expect_eq(t_verify(s2, p, 4, 0, 32, 0, 31, 2000), 3000);
    cr_expect_eq(t_verify(s2, p, 4, 0, 32, 8, 15, 2000), 93 * 8 + 8);   /* seq % 32 in 8..15 */
    /* a handle of another run is never deleted by discard */
    cr_assert_eq(dstl_handle_discard(s2, p), 0);
    cr_expect_eq(t_count_segments(dir), 1);
    dstl_handle_free(p);
    free(buf);
    cr_assert_eq(dstl_storage_close(s2), 0);
}

/* A reader keeps what it reads of its handle: the caller may free the handle once the reader
 * is open (the reader holds a reference; under ASan a read of the freed handle fails). */
Test(dstl_api, a_reader_reads_on_after_its_handle_is_freed)
{
    dstl_storage *s = t_storage_open(dir, NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 31, &w), 0);
    t_append_n(w, 5, 400, 0, 32, 300);
    dstl_handle *h = t_persist(w, 0, 1);
    dstl_reader *r = NULL;
    cr_assert_eq(dstl_reader_open(s, h, 0, 31, &r), 0, "%s", dstl_last_error());
    dstl_handle_free(h);
    dstl_record rec;
    uint64_t n = 0;
    int rc;
    while ((rc = dstl_reader_next(r, &rec)) == 1) {
        cr_expect_eq(rec.seq, n, "record %lu has seq %lu", (unsigned long)n, (unsigned long)rec.seq);
        n++;
    }
    cr_expect_eq(rc, 0, "%s", dstl_last_error());
    cr_expect_eq(n, 400);
    dstl_reader_close(r);
    dstl_writer_close(w);
    cr_assert_eq(dstl_storage_close(s), 0);
}

/* ---- backpressure ---- */

Test(dstl_api, backpressure_fail_returns_eagain)
{
    /* A long persist-delay keeps the first hand-off in flight while the second comes. */
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "2s", "dstl.upload.max-in-flight", "64kb",
                                     "dstl.backpressure", "fail", "dstl.batch.persist-size-threshold", "10mb", NULL);
    dstl_writer *a = NULL, *b = NULL;
    cr_assert_eq(dstl_writer_open(s, "a", 0, 0, &a), 0);
    cr_assert_eq(dstl_writer_open(s, "b", 0, 0, &b), 0);
    t_append_n(a, 1, 100, 0, 1, 1000);          /* ~50 KiB */
    dstl_future *fa = NULL, *fb = NULL;
    cr_assert_eq(dstl_persist(a, 0, 1, &fa), 0);
    t_append_n(b, 2, 100, 0, 1, 1000);
    cr_expect_eq(dstl_persist(b, 0, 1, &fb), -EAGAIN);
    cr_expect(strstr(dstl_last_error(), "max-in-flight") != NULL, "%s", dstl_last_error());
    cr_assert_eq(dstl_future_wait(fa, 10000), 0);
    /* room again: the same persist goes through, with the same records */
    dstl_handle *h = t_persist(b, 0, 1);
    cr_expect_eq(t_verify(s, h, 2, 0, 1, 0, 0, 1000), 100);
    dstl_handle_free(h);
    dstl_future_free(fa);
    dstl_writer_close(a);
    dstl_writer_close(b);
    dstl_storage_close(s);
}

typedef struct {
    dstl_writer *w;
    int done;
    int rc;
} bp_arg;

static void *bp_persist(void *p)
{
    bp_arg *a = p;
    dstl_future *f = NULL;
    a->rc = dstl_persist(a->w, 0, 1, &f);
    __atomic_store_n(&a->done, 1, __ATOMIC_SEQ_CST);
    if (a->rc == 0) {
        dstl_future_wait(f, -1);
        dstl_future_free(f);
    }
    return NULL;
}

Test(dstl_api, backpressure_block_waits_then_proceeds)
{
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "500ms", "dstl.upload.max-in-flight", "64kb",
                                     NULL);
    dstl_writer *a = NULL, *b = NULL;
    cr_assert_eq(dstl_writer_open(s, "a", 0, 0, &a), 0);
    cr_assert_eq(dstl_writer_open(s, "b", 0, 0, &b), 0);
    t_append_n(a, 1, 100, 0, 1, 1000);
    dstl_future *fa = NULL;
    cr_assert_eq(dstl_persist(a, 0, 1, &fa), 0);
    t_append_n(b, 2, 100, 0, 1, 1000);
    bp_arg arg = {b, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, bp_persist, &arg);
    /* While a's batch waits out its delay, b's persist must be blocked, not refused. */
    usleep(100000);
    int blocked = !__atomic_load_n(&arg.done, __ATOMIC_SEQ_CST);
    int a_done = dstl_future_done(fa);
    cr_expect(blocked || a_done, "b's persist returned while a's bytes were in flight");
    pthread_join(th, NULL);
    cr_expect_eq(arg.rc, 0, "%s", dstl_last_error());
    cr_expect_eq(dstl_future_done(fa), 1);
    dstl_future_free(fa);
    dstl_writer_close(a);
    dstl_writer_close(b);
    dstl_storage_close(s);
}

/* ---- FLINK-28440: persist, truncate and discard at once never lose a completed handle ---- */

typedef struct {
    dstl_storage *s;
    int id;
    int rounds;
} race_arg;

static void *race_writer(void *p)
{
    race_arg *a = p;
    char name[16];
    snprintf(name, sizeof name, "race-%d", a->id);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(a->s, name, 0, 15, &w), 0);
    dstl_handle *prev = NULL;
    uint64_t mat = 0;
    for (int i = 0; i < a->rounds; i++) {
        t_append_n(w, (uint32_t)a->id, 5 + (uint64_t)(i % 7), 0, 16, 120);
        dstl_future *f = NULL;
        cr_assert_eq(dstl_persist(w, mat, (uint64_t)i, &f), 0, "%s", dstl_last_error());
        if (i % 3 == 2) {
            /* materialize while the persist may still be in flight: truncate what the
             * pending persist covers, and discard the previous checkpoint */
            mat = dstl_writer_next_seq(w) - 2;
            cr_assert_eq(dstl_truncate(w, mat), 0);
        }
        if (prev) {
            dstl_handle_discard(a->s, prev);
            dstl_handle_free(prev);
            prev = NULL;
        }
        cr_assert_eq(dstl_future_wait(f, 30000), 0);
        dstl_handle *h = NULL;
        cr_assert_eq(dstl_future_result(f, &h), 0, "%s", dstl_last_error());
        dstl_future_free(f);
        /* every completed handle reads back whole, whatever was truncated meanwhile */
        long n = t_verify(a->s, h, (uint32_t)a->id, 0, 16, 0, 15, 120);
        cr_assert_eq(n, (long)(dstl_handle_to_seq(h) - dstl_handle_from_seq(h)), "round %d: %s", i,
                     dstl_last_error());
        prev = h;
    }
    if (prev) {
        dstl_handle_discard(a->s, prev);
        dstl_handle_free(prev);
    }
    dstl_writer_close(w);
    return NULL;
}

Test(dstl_api, concurrent_persist_truncate_discard_never_lose_a_handle)
{
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "1ms", NULL);
    enum { N = 8 };
    pthread_t th[N];
    race_arg a[N];
    for (int i = 0; i < N; i++) {
        a[i] = (race_arg){s, i, 60};
        pthread_create(&th[i], NULL, race_writer, &a[i]);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    cr_assert_eq(dstl_storage_close(s), 0);
    /* every handle was discarded and every writer closed: nothing is left */
    cr_expect_eq(t_count_segments(dir), 0);
}

Test(dstl_api, future_freed_while_pending_keeps_nothing)
{
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "50ms", NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 0, &w), 0);
    t_append_n(w, 1, 10, 0, 1, 10);
    dstl_future *f = NULL;
    cr_assert_eq(dstl_persist(w, 0, 1, &f), 0);
    dstl_future_free(f);
    cr_assert_eq(dstl_truncate(w, 10), 0);
    dstl_writer_close(w);                       /* waits for the batch */
    cr_assert_eq(dstl_storage_close(s), 0);
    cr_expect_eq(t_count_segments(dir), 0, "a segment only an unseen handle needed was kept");
}

Test(dstl_api, strerror_covers_every_code)
{
    int codes[] = {DSTL_ECORRUPT, DSTL_ECLOSED, DSTL_ETRUNCATED, DSTL_EREMOTE, DSTL_ECONFIG, DSTL_ECRYPTO,
                   DSTL_EFENCED, -EINVAL, -EIO, -ENOSPC, -EAGAIN, -ETIMEDOUT, -ENOMEM, 12345, -99999};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *m = dstl_strerror(codes[i]);
        cr_assert_not_null(m);
        cr_expect(strlen(m) > 0);
    }
    cr_expect_str_neq(dstl_strerror(DSTL_ECORRUPT), dstl_strerror(DSTL_ECLOSED));
    cr_expect_not_null(dstl_version());
}

Test(dstl_api, compressed_segments_read_back_filtered)
{
    static const char *codecs[] = {"lz4", "zstd"};
    for (int c = 0; c < 2; c++) {
        dstl_storage *s = t_storage_open(dir, "dstl.compression", codecs[c], NULL);
        dstl_writer *w = NULL;
        cr_assert_eq(dstl_writer_open(s, codecs[c], 0, 15, &w), 0);
        char rec[300];
        for (int i = 0; i < 2000; i++) {            /* state changes compress well */
            int n = snprintf(rec, sizeof rec, "{\"op\":\"PUT\",\"state\":\"counts\",\"key\":\"user-%d\",\"value\":%d}",
                             i % 97, i);
            cr_assert_eq(dstl_append(w, (uint32_t)(i % 16), rec, (size_t)n), 0);
        }
        dstl_handle *h = t_persist(w, 0, 1);
        dstl_stats st;
        dstl_storage_stats(s, &st);
        cr_expect_lt(st.segment_bytes * 2, st.append_bytes, "%s: %lu segment bytes for %lu appended", codecs[c],
                     (unsigned long)st.segment_bytes, (unsigned long)st.append_bytes);
        for (uint32_t lo = 0; lo < 16; lo += 8) {
            dstl_reader *r = NULL;
            cr_assert_eq(dstl_reader_open(s, h, lo, lo + 7, &r), 0);
            dstl_record got;
            int n = 0;
            while (dstl_reader_next(r, &got) == 1) {
                int len = snprintf(rec, sizeof rec, "{\"op\":\"PUT\",\"state\":\"counts\",\"key\":\"user-%d\",\"value\":%d}",
                                   (int)(got.seq % 97), (int)got.seq);
                cr_assert(got.key_group >= lo && got.key_group <= lo + 7);
                cr_assert(got.len == (size_t)len && memcmp(got.data, rec, got.len) == 0, "%s seq %lu", codecs[c],
                          (unsigned long)got.seq);
                n++;
            }
            cr_expect_eq(n, 1000);
            dstl_reader_close(r);
        }
        dstl_handle_free(h);
        dstl_writer_close(w);
        cr_assert_eq(dstl_storage_close(s), 0);
    }
}

/* h's bytes as a build before writer incarnations wrote them (no field 11), parsed. */
static dstl_handle *without_incarnation(const dstl_handle *h)
{
    void *buf;
    size_t len;
    cr_assert_eq(dstl_handle_serialize(h, &buf, &len), 0);
    wire_handle *wh = NULL;
    wire_err e = {{0}};
    cr_assert_eq(wire_handle_decode(buf, len, &wh, &e), 0, "%s", e.msg);
    free(buf);
    cr_assert_neq(wh->writer_incarnation, 0, "a new handle records its writer's incarnation");
    wh->writer_incarnation = 0;
    cr_assert_eq(wire_handle_encode(wh, &buf, &len, &e), 0, "%s", e.msg);
    wire_handle_free(wh);
    dstl_handle *out = NULL;
    cr_assert_eq(dstl_handle_parse(buf, len, &out), 0, "%s", dstl_last_error());
    free(buf);
    return out;
}

/* Issue 9, item 12: a writer id closed and reopened in one storage restarts its seqs at 0, so a
 * persist of the same checkpoint id over the same range gives a handle with the same writer,
 * checkpoint and range as the old one. It is still a different handle (another incarnation of
 * the writer, other segments): discarding the old one and truncating the new writer must leave
 * the new handle's segments in place. */
Test(dstl_api, reopened_writer_handle_survives_discard_of_the_old_one)
{
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "0", NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "a", 0, 7, &w), 0, "%s", dstl_last_error());
    t_append_n(w, 21, 40, 0, 8, 100);
    dstl_handle *h1 = t_persist(w, 0, 1);
    cr_assert_eq(dstl_writer_close(w), 0);

    cr_assert_eq(dstl_writer_open(s, "a", 0, 7, &w), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_writer_next_seq(w), 0, "a reopened writer starts at seq 0");
    t_append_n(w, 22, 40, 0, 8, 100);           /* other payloads: h2 must read these */
    dstl_handle *h2 = t_persist(w, 0, 1);
    cr_expect_eq(dstl_handle_from_seq(h2), dstl_handle_from_seq(h1));
    cr_expect_eq(dstl_handle_to_seq(h2), dstl_handle_to_seq(h1));
    cr_expect_eq(dstl_handle_checkpoint_id(h2), dstl_handle_checkpoint_id(h1));
    cr_expect_eq(t_count_segments(dir), 2);
    /* h2 in the bytes of a build before incarnations: it parses, and its discard is a no-op
     * (never an error) that leaves h2's references alone */
    dstl_handle *old = without_incarnation(h2);
    cr_expect_eq(dstl_handle_discard(s, old), 0, "%s", dstl_last_error());
    dstl_handle_free(old);

    cr_assert_eq(dstl_handle_discard(s, h1), 0);
    cr_assert_eq(dstl_truncate(w, dstl_writer_next_seq(w)), 0);
    /* h1's segment goes (deletion runs on the pipeline thread: wait for it through stats); h2's
     * must stay, so give a wrong second deletion the time to happen too. */
    dstl_stats st = {0};
    for (int i = 0; i < 2000 && st.segments_deleted < 1; i++) {
        dstl_storage_stats(s, &st);
        if (st.segments_deleted < 1) usleep(1000);
    }
    usleep(50000);
    dstl_storage_stats(s, &st);
    cr_expect_eq(st.segments_deleted, 1, "%lu segments deleted, only h1's is unreferenced",
                 (unsigned long)st.segments_deleted);
    cr_expect_eq(t_count_segments(dir), 1);
    cr_expect_eq(t_verify(s, h2, 22, 0, 8, 0, 7, 100), 40, "h2: %s", dstl_last_error());
    /* and h2 parsed back from its bytes discards the same references */
    void *buf;
    size_t len;
    dstl_handle *p = NULL;
    cr_assert_eq(dstl_handle_serialize(h2, &buf, &len), 0);
    cr_assert_eq(dstl_handle_parse(buf, len, &p), 0, "%s", dstl_last_error());
    free(buf);
    cr_assert_eq(dstl_handle_discard(s, p), 0);
    for (int i = 0; i < 2000 && st.segments_deleted < 2; i++) {
        dstl_storage_stats(s, &st);
        if (st.segments_deleted < 2) usleep(1000);
    }
    cr_expect_eq(st.segments_deleted, 2, "the parsed-back h2 did not discard h2's references");
    cr_expect_eq(t_count_segments(dir), 0);
    dstl_handle_free(p);
    dstl_handle_free(h1);
    dstl_handle_free(h2);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
}
