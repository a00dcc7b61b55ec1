/*
 * tests/test_backend_local.c — the reference state backend (backend/) with local durability:
 * a job runs, checkpoints and materializes, then its final checkpoint is restored into new
 * tasks (the same parallelism and another one) and compared key by key with the live state.
 * The check must catch a lost record: a changelog that misses a key's changes, a snapshot that
 * misses one entry. (The 4-task, 20 s run against the RGW is test_backend_remote.c.)
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "backend/job.h"
#include "tests/backend_fixture.h"

static job_opts opts(int mode, double seconds)
{
    return (job_opts){.name = mode == BK_CHANGELOG ? "cl" : "full", .mode = mode, .parallelism = 4,
                      .max_parallelism = 128, .workers = 2, .keys = 4000, .value_len = 100,
                      .updates_per_s = 2000, .interval_s = 0.2, .materialize_s = 1.0,
                      .min_checkpoints = 5, .min_s = seconds, .max_s = seconds + 30};
}

/* Runs the job and restores its final checkpoint at parallelism np; returns job_check's code. */
static int run_and_check(fixture *f, const job_opts *o, uint32_t np, job_result *r, char *why, size_t n)
{
    job *j;
    cr_assert_eq(job_open(f->env, o, &j), 0, "%s", dstl_last_error());
    cr_assert_eq(job_run(j, r), 0, "%s", dstl_last_error());
    int rc = job_check(j, f->snap, f->cl, np, NULL, why, n);
    job_close(j);
    return rc;
}

Test(backend_local, changelog_mode_restores_every_key_also_rescaled, .timeout = 120)
{
    fixture f = {0};
    up(&f);
    job_opts o = opts(BK_CHANGELOG, 4);
    job *j;
    job_result r;
    char why[512];
    cr_assert_eq(job_open(f.env, &o, &j), 0);
    cr_assert_eq(job_run(j, &r), 0);
    cr_assert_geq(r.completed, 5);
    cr_assert_gt(r.materializations, 4, "each task materialized again during the run: %llu",
                 (unsigned long long)r.materializations);
    cr_assert_gt(r.changelog_bytes_persisted, 0);
    for (uint32_t np = 4; np >= 1; np--) {     /* the same parallelism, then rescaled down */
        int rc = job_check(j, f.snap, f.cl, np, NULL, why, sizeof why);
        cr_assert_eq(rc, 0, "parallelism %u: %s", np, why);
    }
    cr_assert_eq(job_check(j, f.snap, f.cl, 7, NULL, why, sizeof why), 0, "rescaled up: %s", why);
    job_close(j);
    job_result_free(&r);
    down(&f);
}

Test(backend_local, full_mode_restores_every_key, .timeout = 120)
{
    fixture f = {0};
    up(&f);
    job_opts o = opts(BK_FULL, 3);
    job_result r;
    char why[512];
    cr_assert_eq(run_and_check(&f, &o, 4, &r, why, sizeof why), 0, "%s", why);
    cr_assert_geq(r.completed, 5);
    cr_assert_eq(r.changelog_bytes_persisted, 0, "full mode writes no changelog");
    job_result_free(&r);
    down(&f);
}

Test(backend_local, check_catches_a_changelog_that_misses_a_key, .timeout = 120)
{
    fixture f = {0};
    up(&f);
    job_opts o = opts(BK_CHANGELOG, 2);
    o.keys = 64;                     /* every key changes many times */
    o.materialize_s = 1000;          /* only the first materialization: nothing heals the loss */
    char key[32];
    snprintf(key, sizeof key, "key-%d", 0);
    job_result r;
    char why[512];
    /* key-0 must belong to task 0, where the fault applies */
    uint32_t kf, kl;
    cr_assert_eq(dstl_key_group_range(128, 4, 0, &kf, &kl), 0);
    for (int k = 0; dstl_key_group(key, strlen(key), 128) > kl; k++) snprintf(key, sizeof key, "key-%d", k);
    o.faults.drop_changelog_key = key;
    int rc = run_and_check(&f, &o, 4, &r, why, sizeof why);
    cr_assert_eq(rc, -EILSEQ, "the check must fail: %d %s", rc, why);
    char want[64];
    snprintf(want, sizeof want, "key \"%s\"", key);
    cr_assert(strstr(why, want), "names the key: %s", why);
    job_result_free(&r);
    down(&f);
}

Test(backend_local, check_catches_a_snapshot_that_misses_an_entry, .timeout = 120)
{
    fixture f = {0};
    up(&f);
    job_opts o = opts(BK_CHANGELOG, 1);
    o.updates_per_s = 0;             /* the snapshot alone holds the state: nothing heals it */
    o.materialize_s = 1000;          /* and no later materialization writes the entry again */
    o.faults.drop_snapshot_record = 10;
    job_result r;
    char why[512];
    int rc = run_and_check(&f, &o, 3, &r, why, sizeof why);
    cr_assert_eq(rc, -EILSEQ, "the check must fail: %d %s", rc, why);
    cr_assert(strstr(why, "missing after restore"), "%s", why);
    job_result_free(&r);
    o = opts(BK_FULL, 1);
    o.updates_per_s = 0;
    o.faults.drop_snapshot_record = 10;
    rc = run_and_check(&f, &o, 4, &r, why, sizeof why);
    cr_assert_eq(rc, -EILSEQ, "full mode: the check must fail: %d %s", rc, why);
    job_result_free(&r);
    down(&f);
}

/* A failed checkpoint is counted and freed at once, and the job goes on: the workers must not
 * touch it after (this read freed memory before the barrier kept its id apart: ASan's
 * heap-use-after-free, heap corruption in the benchmark). */
Test(backend_local, failed_checkpoints_are_counted_and_the_job_goes_on, .timeout = 120)
{
    fixture f = {0};
    up(&f);
    for (int mode = BK_CHANGELOG; mode <= BK_FULL; mode++) {
        job_opts o = opts(mode, 3);
        o.faults.fail_checkpoints_upto = 4;
        job_result r;
        char why[512];
        cr_assert_eq(run_and_check(&f, &o, 4, &r, why, sizeof why), 0, "%s", why);
        cr_assert_eq(r.failed, 4, "mode %d: %llu failed", mode, (unsigned long long)r.failed);
        cr_assert_geq(r.completed, 5);
        job_result_free(&r);
    }
    down(&f);
}

static atomic_int part_fired;

static void done_part(bk_part *p, void *arg)
{
    (void)p;
    (void)arg;
    atomic_store(&part_fired, 1);
}

static void wait_part_done(void)
{
    while (!atomic_load(&part_fired)) usleep(1000);
}

/* bk_snapshot_config: a task's snapshot of 12 MB goes up as one segment (one object, one GET
 * on restore). With the storage defaults (5 MB preemptive hand-offs, 10 MB batches) it was
 * three. */
Test(backend_local, snapshot_config_writes_a_task_snapshot_as_one_segment, .timeout = 120)
{
    char *dir = t_mkdtemp("backend-snapcfg");
    char d[512];
    snprintf(d, sizeof d, "%s/snapshots", dir);
    dstl_config *c = t_config(d, "dstl.upload.max-in-flight", "128mb", NULL);
    cr_assert_eq(bk_snapshot_config(c), 0, "%s", dstl_last_error());
    dstl_storage *snap;
    cr_assert_eq(dstl_storage_open(c, &snap), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    bk_env *env;
    cr_assert_eq(bk_env_open(NULL, snap, &env), 0);
    bk_task *t;
    cr_assert_eq(bk_task_open(env, "snapcfg", 128, 1, 0, BK_FULL, NULL, &t), 0, "%s", dstl_last_error());
    static char val[1000];
    memset(val, 'v', sizeof val);
    char key[32];
    for (int k = 0; k < 12000; k++) {        /* 12 MB of state */
        int n = snprintf(key, sizeof key, "key-%d", k);
        cr_assert_eq(bk_value_put(t, key, (size_t)n, val, sizeof val), 0);
    }
    dstl_stats s0, s1;
    cr_assert_eq(dstl_storage_stats(snap, &s0), 0);
    bk_part *p;
    cr_assert_eq(bk_checkpoint(t, 1, done_part, NULL, &p), 0, "%s", dstl_last_error());
    wait_part_done();
    cr_assert_eq(bk_part_result(p), 0);
    cr_assert_eq(dstl_storage_stats(snap, &s1), 0);
    cr_assert_geq(s1.segment_bytes - s0.segment_bytes, 12000000, "the snapshot: %llu bytes",
                  (unsigned long long)(s1.segment_bytes - s0.segment_bytes));
    cr_assert_eq(s1.segments_written - s0.segments_written, 1, "one segment, not %llu",
                 (unsigned long long)(s1.segments_written - s0.segments_written));
    bk_part_discard(p);
    cr_assert_eq(bk_task_close(t), 0);
    bk_env_close(env);
    cr_assert_eq(dstl_storage_close(snap), 0, "%s", dstl_last_error());
    t_rm_rf(dir);
}
