/*
 * A segment is deleted only when nothing needs it — also when, inside one batch, a range that
 * was truncated while in flight comes before ranges that others still need.
 *
 * The regression (found by `make perf`'s remote benchmark, where materialization truncates
 * constantly): when a batch ended, its sections took their reference on the segment one after
 * the other, and a truncated section dropped its reference at once. If it came first and
 * nothing else held the segment yet, the count reached zero and the segment was queued for
 * deletion — then the later sections (and the futures waiting on them) referenced a segment
 * being deleted: the handle of an acknowledged persist named a file that was gone, and the
 * registry entry was freed under the ranges still pointing at it (heap corruption).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstl.h"
#include "tests/helpers.h"
#include "tests/helpers_dstl.h"

#define NKG 8

/* Writer a's range is handed off and truncated while in flight (its future freed, so nothing
 * of a holds the segment), writer b's range rides in the same batch behind it. */
static void truncated_first_then_needed(const char *engine)
{
    char *dir = t_mkdtemp("retain");
    /* one batch for both: persist-delay long enough that both hand-offs join the open batch */
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "300ms", "dstl.io.engine", engine, NULL);
    dstl_writer *a, *b;
    cr_assert_eq(dstl_writer_open(s, "a", 0, NKG - 1, &a), 0);
    cr_assert_eq(dstl_writer_open(s, "b", 0, NKG - 1, &b), 0);
    uint64_t a_end = t_append_n(a, 1, 50, 0, NKG, 100);
    uint64_t b_end = t_append_n(b, 2, 50, 0, NKG, 100);
    dstl_future *fa, *fb;
    cr_assert_eq(dstl_persist(a, 0, 1, &fa), 0, "%s", dstl_last_error());   /* a's section first */
    dstl_future_free(fa);                                                       /* nobody waits for a */
    cr_assert_eq(dstl_truncate(a, a_end), 0, "%s", dstl_last_error());       /* materialized meanwhile */
    cr_assert_eq(dstl_persist(b, 0, 1, &fb), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_future_wait(fb, 30000), 0, "%s", dstl_last_error());
    dstl_handle *hb = NULL;
    cr_assert_eq(dstl_future_result(fb, &hb), 0, "%s", dstl_last_error());
    dstl_future_free(fb);
    /* A later persist makes the pipeline run its deletes (the wrong one would go now). */
    t_append_n(b, 2, 1, 0, NKG, 100);
    dstl_handle *hb2 = t_persist(b, b_end, 2);
    long n = t_verify(s, hb, 2, 0, NKG, 0, NKG - 1, 100);
    cr_assert_eq(n, 50, "%s engine: b's acknowledged persist reads back %ld records (%s)", engine, n,
                 n < 0 ? dstl_last_error() : "");
    dstl_handle_free(hb2);
    dstl_handle_free(hb);
    cr_assert_eq(dstl_writer_close(a), 0);
    cr_assert_eq(dstl_writer_close(b), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    t_rm_rf(dir);
    free(dir);
}

Test(dstl_retain, a_truncated_section_ahead_of_a_needed_one_keeps_the_segment_io_uring)
{
    truncated_first_then_needed("io_uring");
}

Test(dstl_retain, a_truncated_section_ahead_of_a_needed_one_keeps_the_segment_psync)
{
    truncated_first_then_needed("psync");
}
