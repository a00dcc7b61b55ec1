/*
 * Spare files: a small deleted segment's local file, while segments are being written, stays
 * under its own name until the next group of reservations recycles it (dstl/pipeline/loop.c,
 * remove_local), so the directory changes once per group instead of once per segment. What a
 * user sees must stay bounded: the file goes once the storage has been idle about a second,
 * and always at close; a large segment's file never waits.
 *
 * Each case deletes writer A's segment while writer B's batch sits open (persist-delay 2 s):
 * the pipeline is busy, so the segment becomes a spare. The counts are of files that hold the
 * segment their name says (t_count_segments): a recycled reservation is not one.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <string.h>
#include <unistd.h>

#include "tests/helpers.h"
#include "tests/helpers_dstl.h"

/* A future's bound under local durability is the disk's plus persist-delay: generous here. */
#define WAIT_MS 20000

/* *.seg files in dir, reserved names included. */
static size_t seg_files(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert(d, "opendir %s", dir);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".seg") == 0) n++;
    }
    closedir(d);
    return n;
}

static void wait_deleted(dstl_storage *s, uint64_t n)
{
    dstl_stats st = {0};
    for (int i = 0; i < 5000 && st.segments_deleted < n; i++) {
        cr_assert_eq(dstl_storage_stats(s, &st), 0);
        if (st.segments_deleted < n) usleep(1000);
    }
    cr_assert_eq(st.segments_deleted, n, "%llu segments deleted, %llu expected",
                 (unsigned long long)st.segments_deleted, (unsigned long long)n);
}

/* Writer a's segment (records of max_len bytes, n of them) is deleted while b's persist waits
 * in the open batch; returns b's future. */
static dstl_future *delete_while_busy(const char *dir, dstl_storage *s, dstl_writer *a, dstl_writer *b,
                                      uint64_t n, size_t max_len)
{
    t_append_n(a, 0, n, 0, 8, max_len);
    dstl_handle *h = t_persist(a, 0, 1);
    cr_assert_eq(t_count_segments(dir), 1);
    t_append_n(b, 1, 10, 8, 8, 100);
    dstl_future *f = NULL;
    cr_assert_eq(dstl_persist(b, 0, 1, &f), 0, "%s", dstl_last_error());
    usleep(100000); /* the loop has opened b's batch (2 s to go) */
    cr_assert_eq(dstl_truncate(a, dstl_writer_next_seq(a)), 0);
    cr_assert_eq(dstl_handle_discard(s, h), 0);
    dstl_handle_free(h);
    wait_deleted(s, 1);
    return f;
}

static dstl_storage *open_two(const char *dir, dstl_writer **a, dstl_writer **b)
{
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "2s", NULL);
    cr_assert_eq(dstl_writer_open(s, "a", 0, 7, a), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_writer_open(s, "b", 8, 15, b), 0, "%s", dstl_last_error());
    return s;
}

static void wait_b(dstl_future *f)
{
    cr_assert_eq(dstl_future_wait(f, WAIT_MS), 0, "%s", dstl_last_error());
    dstl_handle *h = NULL;
    cr_assert_eq(dstl_future_result(f, &h), 0, "%s", dstl_last_error());
    dstl_handle_free(h);
    dstl_future_free(f);
}

/* Closes all; then only b's segment is left (its handle was not discarded): no spare. */
static void close_two(char *dir, dstl_storage *s, dstl_writer *a, dstl_writer *b)
{
    cr_assert_eq(dstl_writer_close(a), 0);
    cr_assert_eq(dstl_writer_close(b), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    cr_expect_eq(seg_files(dir), 1, "%zu files after close: b's segment only", seg_files(dir));
    t_rm_rf(dir);
    free(dir);
}

/* A storage whose small deleted segment (a's) waits as a spare; b's segment is written. */
static dstl_storage *spare_after_busy(const char *dir, dstl_writer **a, dstl_writer **b)
{
    dstl_storage *s = open_two(dir, a, b);
    dstl_future *f = delete_while_busy(dir, s, *a, *b, 20, 200);
    cr_expect_eq(t_count_segments(dir), 1, "the deleted segment waits as a spare while b's batch is open");
    wait_b(f);
    return s;
}

Test(dstl_spares, a_small_deleted_segment_stays_while_busy_and_goes_once_idle, .timeout = 120)
{
    char *dir = t_mkdtemp("spares");
    dstl_writer *a, *b;
    dstl_storage *s = spare_after_busy(dir, &a, &b);
    /* b's segment is written; then, idle about a second, the spare goes (bounded wait) */
    size_t n = 2;
    for (int i = 0; i < 1000 && (n = t_count_segments(dir)) != 1; i++) usleep(10000);
    cr_expect_eq(n, 1, "%zu segment files 10 s after the storage went idle: only b's should be left", n);
    close_two(dir, s, a, b);
}

Test(dstl_spares, spares_go_when_the_storage_closes, .timeout = 120)
{
    char *dir = t_mkdtemp("spares");
    dstl_writer *a, *b;
    dstl_storage *s = spare_after_busy(dir, &a, &b);
    close_two(dir, s, a, b); /* well within the idle second */
}

/* Past 1 MiB a file is not kept: its directory write is small beside its data. */
Test(dstl_spares, a_large_deleted_segment_goes_at_once, .timeout = 120)
{
    char *dir = t_mkdtemp("spares");
    dstl_writer *a, *b;
    dstl_storage *s = open_two(dir, &a, &b);
    dstl_future *f = delete_while_busy(dir, s, a, b, 400, 8000); /* ~1.6 MB */
    cr_expect_eq(t_count_segments(dir), 0, "a large deleted segment went at once, though b's batch is open");
    wait_b(f);
    close_two(dir, s, a, b);
}
