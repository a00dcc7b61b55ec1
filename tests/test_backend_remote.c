/*
 * tests/test_backend_remote.c — the checkpoint benchmark's built-in check, small, against the
 * RGW `make test` starts: 4 tasks for 20 s in each mode (changelog with materialization every
 * 3 s, full snapshots), checkpoints every second, each mode's final checkpoint restored from S3
 * alone (storages with fresh, empty local dirs) onto 4 tasks and, in changelog mode, onto 3
 * (rescaled), compared key by key with the live state. Also: subsumed checkpoints are
 * discarded, so what stays in S3 is about the last checkpoint, not every one ever written.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <time.h>

#include "backend/job.h"
#include "tests/helpers.h"
#include "tests/helpers_remote.h"

static t_remote fx;

static void setup(void) { t_remote_init(&fx, "backend"); }
static void teardown(void) { t_remote_fini(&fx); }

TestSuite(backend_remote, .init = setup, .fini = teardown, .timeout = 240);

static dstl_storage *open_at(const char *dir, const char *sub, const char *in_flight)
{
    char path[1024], uri[256];
    snprintf(path, sizeof path, "%s/%s", fx.dir, dir);
    snprintf(uri, sizeof uri, "%s/%s", fx.uri, sub);
    return t_remote_open(&fx, path, "dstl.remote.uri", uri, "dstl.upload.max-in-flight", in_flight, NULL);
}

static void run_mode(int mode)
{
    const char *m = mode == BK_CHANGELOG ? "cl" : "full";
    char d[64], r[64];
    snprintf(d, sizeof d, "%s-changelog", m);
    dstl_storage *cl = mode == BK_CHANGELOG ? open_at(d, "changelog", "100mb") : NULL;
    snprintf(d, sizeof d, "%s-snapshots", m);
    dstl_storage *sn = open_at(d, "snapshots", "64mb");
    bk_env *env;
    cr_assert_eq(bk_env_open(cl, sn, &env), 0);
    job_opts o = {.name = m, .mode = mode, .parallelism = 4, .max_parallelism = 128, .workers = 2,
                  .keys = 20000, .value_len = 256, .updates_per_s = 2000, .interval_s = 1,
                  .materialize_s = 3, .min_checkpoints = 10, .min_s = 20, .max_s = 120};
    job *j;
    job_result res;
    cr_assert_eq(job_open(env, &o, &j), 0, "%s", dstl_last_error());
    cr_assert_eq(job_run(j, &res), 0, "%s", dstl_last_error());
    cr_assert_geq(res.completed, 10, "%llu checkpoints", (unsigned long long)res.completed);
    cr_assert_eq(res.failed, 0);
    if (mode == BK_CHANGELOG) cr_assert_geq(res.materializations, 4 * 5, "every task materialized again and again");

    /* restore from S3 alone: fresh local dirs */
    snprintf(r, sizeof r, "%s-restore-snapshots", m);
    dstl_storage *rsn = open_at(r, "snapshots", "64mb");
    snprintf(r, sizeof r, "%s-restore-changelog", m);
    dstl_storage *rcl = cl ? open_at(r, "changelog", "64mb") : NULL;
    char why[512];
    double secs;
    cr_assert_eq(job_check(j, rsn, rcl, 4, &secs, why, sizeof why), 0, "%s: %s", m, why);
    dstl_stats st;
    cr_assert_eq(dstl_storage_stats(rsn, &st), 0);
    cr_assert_gt(st.restore_bytes_fetched, 0, "the snapshots came from S3");
    if (mode == BK_CHANGELOG)
        cr_assert_eq(job_check(j, rsn, rcl, 3, NULL, why, sizeof why), 0, "rescaled to 3: %s", why);

    /* discards: subsumed checkpoints' segments are gone (deletes run in the background) */
    dstl_stats a = {0}, b;
    if (cl) cr_assert_eq(dstl_storage_stats(cl, &a), 0);
    cr_assert_eq(dstl_storage_stats(sn, &b), 0);
    uint64_t written = a.segments_written + b.segments_written;
    size_t objects = 0, uploads;
    for (int i = 0; i < 100; i++) {
        t_remote_count(&fx, &objects, &uploads);
        if (objects * 2 <= written) break;
        nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    cr_assert_leq(objects * 2, written, "%zu objects stay of %llu segments written: subsumed "
                  "checkpoints were not discarded", objects, (unsigned long long)written);

    job_close(j);
    job_result_free(&res);
    bk_env_close(env);
    cr_assert_eq(dstl_storage_close(rcl), 0);
    cr_assert_eq(dstl_storage_close(rsn), 0);
    cr_assert_eq(dstl_storage_close(cl), 0);
    cr_assert_eq(dstl_storage_close(sn), 0);
}

Test(backend_remote, changelog_mode_restores_from_s3_also_rescaled) { run_mode(BK_CHANGELOG); }
Test(backend_remote, full_mode_restores_from_s3) { run_mode(BK_FULL); }
