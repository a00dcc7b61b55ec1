/*
 * tests/test_backend_task.c — one task of the reference backend, driven by hand: a checkpoint
 * while the task holds state no changelog has (loaded), a materialization that fails, and the
 * yields inside a materialization's copy (bk_task_set_yield), where barriers are answered.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "tests/backend_fixture.h"

static atomic_int parts_done;

static void part_fired(bk_part *p, void *arg)
{
    (void)p;
    (void)arg;
    atomic_fetch_add(&parts_done, 1);
}

static void wait_parts(int n)
{
    for (int i = 0; i < 60000 && atomic_load(&parts_done) < n; i++) usleep(1000);
    cr_assert_eq(atomic_load(&parts_done), n, "parts completed");
}

static void put_values(bk_task *t, int n, int loaded)
{
    char key[32], val[100];
    memset(val, 'v', sizeof val);
    for (int k = 0; k < n; k++) {
        int len = snprintf(key, sizeof key, "key-%d", k);
        int rc = loaded ? bk_load_value(t, key, (size_t)len, val, sizeof val)
                        : bk_value_put(t, key, (size_t)len, val, sizeof val);
        cr_assert_eq(rc, 0, "%s", dstl_last_error());
    }
}

/* Polls until the task's materialization in flight is taken over (its error, or 0). */
static int settle(bk_task *t, uint64_t before)
{
    for (int i = 0; i < 60000; i++) {
        int rc = bk_poll(t);
        if (rc < 0 || bk_materializations(t) > before) return rc;
        usleep(1000);
    }
    cr_assert_fail("the materialization never completed");
    return -ETIMEDOUT;
}

/* Loaded state is in no changelog: until a materialization holding it completes, checkpoints
 * must refuse (-EAGAIN). A materialization whose copy failed holds nothing, so they must still
 * refuse after it; before the fix the task had already forgotten the loaded state when the
 * copy began, and the next checkpoint "succeeded" with a changelog that restores none of it. */
Test(backend_task, loaded_state_still_refuses_checkpoints_after_a_failed_materialization, .timeout = 120)
{
    fixture f;
    up(&f);
    bk_faults faults = {.fail_snapshot_record = 3};
    bk_task *t;
    cr_assert_eq(bk_task_open(f.env, "ld", 128, 1, 0, BK_CHANGELOG, &faults, &t), 0, "%s", dstl_last_error());
    put_values(t, 50, 1);
    bk_part *p = NULL;
    cr_assert_eq(bk_checkpoint(t, 1, part_fired, NULL, &p), -EAGAIN);
    cr_assert_eq(bk_materialize(t), -EIO, "the copy fails at record 3 (the seam)");
    cr_assert_eq(bk_checkpoint(t, 2, part_fired, NULL, &p), -EAGAIN,
                 "a checkpoint after the failed materialization must not pass without the loaded state");
    cr_assert_eq(bk_task_close(t), 0);
    down(&f);
}

typedef struct {
    bk_task *t;
    int yields, rc;
    bk_part *part;
} yield_probe;

static void checkpoint_in_yield(void *arg)
{
    yield_probe *y = arg;
    if (y->yields++ == 0) y->rc = bk_checkpoint(y->t, 7, part_fired, NULL, &y->part);
}

/* The copy yields every BK_YIELD_RECORDS records; a checkpoint taken in a yield is a normal
 * part: it completes, with the previous complete snapshot (not the one being copied), and
 * after the copy the materialization completes as well. While the task still holds loaded
 * state, the checkpoint in the yield refuses (-EAGAIN), as any other. */
Test(backend_task, a_checkpoint_in_a_materializations_yield_completes_on_the_last_snapshot, .timeout = 120)
{
    fixture f;
    up(&f);
    bk_task *t;
    cr_assert_eq(bk_task_open(f.env, "yl", 128, 1, 0, BK_CHANGELOG, NULL, &t), 0, "%s", dstl_last_error());
    int n = 10 * BK_YIELD_RECORDS;
    put_values(t, n, 1);
    yield_probe y = {.t = t};
    bk_task_set_yield(t, checkpoint_in_yield, &y);
    cr_assert_eq(bk_materialize(t), 1);
    cr_assert_eq(y.rc, -EAGAIN, "the state loaded is in no complete snapshot yet");
    cr_assert_geq(y.yields, n / BK_YIELD_RECORDS, "yields: %d", y.yields);
    cr_assert_eq(settle(t, 0), 0);
    const dstl_handle *first = NULL;
    {                                          /* the first snapshot, as a checkpoint sees it */
        bk_part *p0;
        int done0 = atomic_load(&parts_done);
        cr_assert_eq(bk_checkpoint(t, 6, part_fired, NULL, &p0), 0, "%s", dstl_last_error());
        wait_parts(done0 + 1);
        cr_assert_eq(bk_part_result(p0), 0);
        first = bk_part_snapshot(p0);
        cr_assert_not_null(first);
        bk_part_discard(p0);
    }
    put_values(t, n, 0);                       /* changes: in the changelog */
    y = (yield_probe){.t = t};
    int done = atomic_load(&parts_done);
    cr_assert_eq(bk_materialize(t), 1);
    cr_assert_eq(y.rc, 0, "the checkpoint in the yield: %s", dstl_last_error());
    cr_assert_not_null(y.part);
    wait_parts(done + 1);
    cr_assert_eq(bk_part_result(y.part), 0);
    cr_assert_eq(bk_part_snapshot(y.part), first, "the part holds the last complete snapshot");
    cr_assert_not_null(bk_part_changelog(y.part));
    cr_assert_gt(dstl_handle_size(bk_part_changelog(y.part)), 0);
    cr_assert_eq(settle(t, 1), 0);
    cr_assert_eq(bk_materializations(t), 2);
    bk_task_set_yield(t, NULL, NULL);
    bk_part_discard(y.part);
    cr_assert_eq(bk_task_close(t), 0);
    down(&f);
}
