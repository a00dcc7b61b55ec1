/*
 * perf/bench_ckpt.c — FLIP-158's checkpoint benchmark on the reference state backend
 * (backend/): P tasks in one process under a steady update rate, a checkpoint every second,
 * in two modes one after the other on the same workload:
 *   changelog  DSTL: each checkpoint persists the changes since the last materialization;
 *              every task materializes every M seconds (staggered) through its own storage;
 *   full       every checkpoint writes the full state (a non-incremental baseline).
 * One checkpoint at a time; a trigger that finds one running is skipped (ckpt.MODE.skipped).
 * Each mode runs until it has COMPLETED the checkpoint count (skipped triggers are counted
 * apart and do not count towards it). After each mode, its final checkpoint is restored from
 * S3 alone (fresh local dirs: no local copy) onto P tasks, timed (restore.MODE_s), and every
 * key is compared with the live state; the changelog mode's is also restored rescaled.
 *
 *   bench_ckpt DIR BUCKET OUT_DIR
 * S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY (S3_REGION): the endpoint (perf/ckpt.sh).
 * Knobs (environment; defaults are the issue's: P = 50, >= 300 checkpoints a mode):
 *   DSTL_CKPT_TASKS 50, DSTL_CKPT_CHECKPOINTS 300, DSTL_CKPT_STATE_MB 900 (all tasks: a full
 *   snapshot takes >= 5 s p50 on the RGW here: ckpt.full.p50_ms; on a quiet machine 500 MB took
 *   3.7 s, 700 MB 4.9 s and 800 MB 4.98 s),
 *   DSTL_CKPT_VALUE_BYTES 1024, DSTL_CKPT_RATE 3000 (updates/s in all),
 *   DSTL_CKPT_MATERIALIZE_S 60, DSTL_CKPT_MODES "changelog full",
 *   DSTL_CKPT_FULL_CHECKPOINTS (the full mode's count, when it must differ; default the same:
 *   each of its checkpoints writes the whole state, 300 x 900 MB in all, which the RGW of
 *   tests/s3/rgw-up.sh frees within seconds of each subsumed checkpoint's deletes).
 *   DSTL_CKPT_RESTORE_ROUNDS 3 (after both modes ran, rounds of one timed restore of each mode's
 *   final checkpoint, interleaved: restore.MODE.roundK_s; restore.MODE_s is the median),
 *   DSTL_CKPT_PEER 1 (0: no PUT peer during the changelog mode; see put_peer below),
 *   DSTL_CKPT_YIELD 1 (0: a materialization's copy never answers a barrier: the A/B of
 *   bk_task_set_yield, backend/backend.h),
 *   DSTL_CKPT_ALL_IN 1 (0: the changelog storage without bk_changelog_config's
 *   dstl.batch.close-when-all-in: every checkpoint's batch waits the full persist-delay).
 * Prints `name value unit` lines; writes OUT_DIR/ckpt-MODE.dat (completion time, duration).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/job.h"
#include "dstl/config.h"
#include "dstl/remote/remote.h"
#include "s3/s3.h"
#include "perf/put_peer.h"

/* S3 Standard prices (us-east-1, as published in 2026): what usd_per_month is computed from. */
#define USD_PER_1000_PUT 0.005
#define USD_PER_GB_MONTH 0.023
#define CKPTS_PER_MONTH (30.0 * 24 * 3600)     /* one a second */
#define RESTORE_ROUNDS_MAX 9

static double envf(const char *k, double def)
{
    const char *v = getenv(k);
    return v && *v ? atof(v) : def;
}

static const char *need(const char *k)
{
    const char *v = getenv(k);
    if (!v || !*v) {
        fprintf(stderr, "bench_ckpt: %s is not set\n", k);
        exit(1);
    }
    return v;
}

static dstl_config *s3_config(const char *dir, const char *bucket, const char *prefix)
{
    dstl_config *c;
    char uri[512];
    snprintf(uri, sizeof uri, "s3://%s/%s", bucket, prefix);
    const char *region = getenv("S3_REGION") ? getenv("S3_REGION") : "us-east-1";
    if (dstl_config_new(&c) < 0 || dstl_config_set(c, "dstl.local.dir", dir) < 0 ||
        dstl_config_set(c, "dstl.remote.uri", uri) < 0 || dstl_config_set(c, "dstl.durability", "remote") < 0 ||
        dstl_config_set(c, "dstl.s3.endpoint", need("S3_ENDPOINT")) < 0 ||
        dstl_config_set(c, "dstl.s3.region", region) < 0 ||
        dstl_config_set(c, "dstl.s3.access-key", need("S3_ACCESS_KEY")) < 0 ||
        dstl_config_set(c, "dstl.s3.secret-key", need("S3_SECRET_KEY")) < 0 ||
        dstl_config_set(c, "dstl.s3.path-style", "true") < 0) {
        fprintf(stderr, "bench_ckpt: config %s: %s\n", dir, dstl_last_error());
        exit(1);
    }
    return c;
}

static dstl_storage *open_storage(const char *dir, const char *bucket, const char *prefix, int snapshots,
                                  const char *in_flight, const char *timeout)
{
    dstl_config *c = s3_config(dir, bucket, prefix);
    dstl_storage *s = NULL;
    if ((in_flight && dstl_config_set(c, "dstl.upload.max-in-flight", in_flight) < 0) ||
        (timeout && dstl_config_set(c, "dstl.upload.timeout", timeout) < 0) ||
        (snapshots && bk_snapshot_config(c) < 0) ||
        (!snapshots && envf("DSTL_CKPT_ALL_IN", 1) != 0 && bk_changelog_config(c) < 0) ||
        dstl_storage_open(c, &s) < 0) {
        fprintf(stderr, "bench_ckpt: storage %s: %s\n", dir, dstl_last_error());
        exit(1);
    }
    dstl_config_free(c);
    return s;
}

/* ---- the PUT peer: the budget's PUT p99, measured in the same run ------------------------
 * During the changelog mode perf/put_peer.h's peer PUTs once per checkpoint interval a body
 * of the changelog's mean segment size so far, on its own connection: the work of one
 * changelog persist, done next to the job's, under the same snapshot uploads, CPU and RGW.
 * ckpt.changelog.peer_put_p99_ms is what perf/ckpt.sh's budget is computed from. */

/* Starts the peer (0), or says why not (-1: the figure is then missing, the run goes on). */
static int peer_start(put_peer *pp, pthread_t *th, dstl_storage *cl, const char *dir, const char *bucket)
{
    dstl_config *c = s3_config(dir, bucket, "ckpt-peer");
    int rc = put_peer_start(pp, th, cl, c, bucket, "ckpt-peer", pp->interval_s);
    dstl_config_free(c);
    return rc;
}

/* Stops the peer, prints its lines and writes OUT_DIR/ckpt-peer.dat (end time, ms) on the
 * time base of ckpt-changelog.dat. */
static void peer_stop(put_peer *pp, pthread_t th, const char *out)
{
    put_peer_stop(pp, th);
    char path[1024];
    snprintf(path, sizeof path, "%s/ckpt-peer.dat", out);
    FILE *f = fopen(path, "w");
    for (size_t i = 0; f && i < pp->n; i++) fprintf(f, "%.3f %.3f\n", pp->at[i], pp->ms[i]);
    if (f) fclose(f);
    printf("ckpt.changelog.peer_puts %zu count\n", pp->n);
    printf("ckpt.changelog.peer_put_errors %" PRIu64 " count\n", pp->errors);
    printf("ckpt.changelog.peer_put_bytes %.0f bytes\n", pp->n ? (double)pp->bytes / (double)pp->n : 0.0);
    printf("ckpt.changelog.peer_put_p50_ms %.1f ms\n", job_quantile(pp->ms, pp->n, 0.5));
    printf("ckpt.changelog.peer_put_p99_ms %.1f ms\n", job_quantile(pp->ms, pp->n, 0.99));
    free(pp->ms);
    free(pp->at);
}

/* A mode after its run: its job (stopped, its live state kept for the restores' checks),
 * storages and names, until the interleaved restores (restore_rounds) are done. */
typedef struct {
    const char *mode;
    int ran, changelog, bad;
    uint32_t P;
    char p1[256], p2[256];
    job *j;
    bk_env *env;
    dstl_storage *cl, *sn;
    double p99_ms;
    double restore_s[RESTORE_ROUNDS_MAX];
    int rounds;
} mode_out;

static void stats(dstl_storage *s, dstl_stats *st)
{
    if (dstl_storage_stats(s, st) < 0) memset(st, 0, sizeof *st);
}

/* One timed restore of mode mo's final checkpoint from S3 alone (storages with fresh, empty
 * local dirs) onto P tasks, checked key by key. The first round prints what it fetched and
 * the CPU it took, and checks the changelog mode's onto 3P/4 too. */
static int restore_round(mode_out *mo, const char *dir, const char *bucket, int round)
{
    char why[512], rd1[1024], rd2[1024];
    const char *mode = mo->mode;
    snprintf(rd1, sizeof rd1, "%s/%s-restore%d-changelog", dir, mode, round);
    snprintf(rd2, sizeof rd2, "%s/%s-restore%d-snapshots", dir, mode, round);
    dstl_storage *rcl = mo->changelog ? open_storage(rd1, bucket, mo->p1, 0, NULL, NULL) : NULL;
    dstl_storage *rsn = open_storage(rd2, bucket, mo->p2, 1, NULL, "30s");
    double rs = 0, cpu, busy;
    int ck = job_check(mo->j, rsn, rcl, mo->P, &rs, why, sizeof why);
    mo->restore_s[mo->rounds++] = rs;
    /* what bounds it: this process's CPU, and the whole machine's (RGW and OSD run here too,
     * and whatever else the machine runs), in cores over the restore */
    job_restore_cpu(mo->j, &cpu, &busy);
    printf("restore.%s.round%d_s %.2f s (process %.2f cores, machine %.2f of %ld)\n", mode, round, rs,
           rs > 0 ? cpu / rs : 0.0, rs > 0 ? busy / rs : 0.0, sysconf(_SC_NPROCESSORS_ONLN));
    if (ck < 0) fprintf(stderr, "bench_ckpt: %s: restore check (round %d): %s\n", mode, round, why);
    if (round == 0) {
        printf("restore.%s.process_cores %.2f cores\n", mode, rs > 0 ? cpu / rs : 0.0);
        printf("restore.%s.machine_busy_cores %.2f cores (of %ld)\n", mode, rs > 0 ? busy / rs : 0.0,
               sysconf(_SC_NPROCESSORS_ONLN));
        double ps, pc;
        job_restore_passes(mo->j, &ps, &pc);
        /* what the restore fetched, per storage (the restore storages are fresh: all of it is
         * this restore's) */
        dstl_stats snst = {0}, clst = {0}, rst;
        stats(rsn, &snst);
        if (rcl) stats(rcl, &clst);
        rst = snst;
        rst.restore_bytes_fetched += clst.restore_bytes_fetched;
        rst.restore_requests += clst.restore_requests;
        printf("restore.%s.snapshots_s %.2f s\n", mode, ps);
        if (rcl) printf("restore.%s.changelogs_s %.2f s\n", mode, pc);
        printf("restore.%s.snapshot_bytes %" PRIu64 " bytes\n", mode, snst.restore_bytes_fetched);
        printf("restore.%s.snapshot_gets %" PRIu64 " count\n", mode, snst.restore_requests);
        if (rcl) {
            printf("restore.%s.changelog_bytes %" PRIu64 " bytes\n", mode, clst.restore_bytes_fetched);
            printf("restore.%s.changelog_gets %" PRIu64 " count\n", mode, clst.restore_requests);
        }
        printf("restore.%s.fetched_mb %.1f MB\n", mode, (double)rst.restore_bytes_fetched / 1e6);
        printf("restore.%s.requests %" PRIu64 " count\n", mode, rst.restore_requests);
        printf("ckpt.%s.check %s\n", mode, ck == 0 ? "ok" : "FAILED");
        if (ck == 0 && rcl) {
            uint32_t np = mo->P > 1 ? mo->P * 3 / 4 : 2;
            ck = job_check(mo->j, rsn, rcl, np, NULL, why, sizeof why);
            printf("ckpt.%s.check_rescaled_p%u %s\n", mode, np, ck == 0 ? "ok" : "FAILED");
            if (ck < 0) fprintf(stderr, "bench_ckpt: %s: rescaled restore check: %s\n", mode, why);
        }
    }
    fflush(stdout);
    dstl_storage_close(rcl);
    dstl_storage_close(rsn);
    return ck;
}

/* The restores of both modes' final checkpoints, after both modes ran, interleaved: rounds
 * of one restore per mode, the order alternating (changelog first in even rounds, full first
 * in odd ones), so both meet the same RGW, the same background work (its garbage collection
 * of the subsumed checkpoints, BlueStore's compactions) and the same neighbours. A mode's
 * restore right after its own run met that run's aftermath: on 2026-12-03 (900 MB) the
 * changelog's took 4.54 s after its 5 minutes and the full one 3.45 s after its 35
 * (restore.ratio 1.315, against 0.82 and 1.07 in runs before). restore.MODE_s is the median
 * of a mode's rounds (DSTL_CKPT_RESTORE_ROUNDS, default 3). */
static int restore_rounds(mode_out *m, int nm, const char *dir, const char *bucket)
{
    int rounds = (int)envf("DSTL_CKPT_RESTORE_ROUNDS", 3), bad = 0;
    if (rounds < 1) rounds = 1;
    if (rounds > RESTORE_ROUNDS_MAX) rounds = RESTORE_ROUNDS_MAX;
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < nm; k++) {
            mode_out *mo = &m[r % 2 ? nm - 1 - k : k];
            if (mo->ran && !mo->bad) mo->bad |= restore_round(mo, dir, bucket, r) != 0;
        }
    for (int k = 0; k < nm; k++) {
        mode_out *mo = &m[k];
        if (!mo->ran) continue;
        if (mo->rounds) printf("restore.%s_s %.2f s (median of %d)\n", mo->mode,
                               job_quantile(mo->restore_s, (size_t)mo->rounds, 0.5), mo->rounds);
        bad |= mo->bad;
    }
    return bad;
}

/* What the barrier costs of a checkpoint's duration: trigger to the last task's part
 * registered (a worker busy in an update slice, or in a materialization's copy when the yields
 * are off), and the share of the checkpoints in which it was more than 5 ms. */
static void print_barriers(const char *mode, const job_result *r)
{
    size_t late = 0;
    for (uint64_t i = 0; i < r->completed; i++) late += r->barriers_ms[i] > 5;
    printf("ckpt.%s.barrier_p50_ms %.2f ms\n", mode, job_quantile(r->barriers_ms, r->completed, 0.5));
    printf("ckpt.%s.barrier_p99_ms %.2f ms\n", mode, job_quantile(r->barriers_ms, r->completed, 0.99));
    printf("ckpt.%s.barrier_max_ms %.2f ms\n", mode, job_quantile(r->barriers_ms, r->completed, 1.0));
    printf("ckpt.%s.barrier_over_5ms %.3f share\n", mode, r->completed ? (double)late / (double)r->completed : 0.0);
}

/* Runs mode mo->mode; its job, storages and names stay in mo for restore_rounds (mode_close
 * frees them). */
static int run_mode(mode_out *mo, const char *dir, const char *bucket, const char *out)
{
    const char *mode = mo->mode;
    int m = !strcmp(mode, "full") ? BK_FULL : BK_CHANGELOG;
    uint32_t P = (uint32_t)envf("DSTL_CKPT_TASKS", 50);
    double state_mb = envf("DSTL_CKPT_STATE_MB", 900), vlen = envf("DSTL_CKPT_VALUE_BYTES", 1024);
    job_opts o = {.name = mode, .mode = m, .parallelism = P, .max_parallelism = 128, .workers = 2,
                  .keys = (uint64_t)(state_mb * 1e6 / (vlen + 10)), .value_len = (size_t)vlen,
                  .updates_per_s = envf("DSTL_CKPT_RATE", 3000), .interval_s = 1,
                  .materialize_s = envf("DSTL_CKPT_MATERIALIZE_S", 60),
                  .min_checkpoints = (uint64_t)envf(m == BK_FULL && getenv("DSTL_CKPT_FULL_CHECKPOINTS")
                                                        ? "DSTL_CKPT_FULL_CHECKPOINTS" : "DSTL_CKPT_CHECKPOINTS", 300),
                  .min_s = 0,
                  .verbose = 1, .no_yield = envf("DSTL_CKPT_YIELD", 1) == 0};
    o.max_s = (double)o.min_checkpoints * 30 + 600;
    char d1[1024], d2[1024];
    snprintf(d1, sizeof d1, "%s/%s-changelog", dir, mode);
    snprintf(d2, sizeof d2, "%s/%s-snapshots", dir, mode);
    snprintf(mo->p1, sizeof mo->p1, "ckpt-%s/changelog", mode);
    snprintf(mo->p2, sizeof mo->p2, "ckpt-%s/snapshots", mode);
    const char *p1 = mo->p1, *p2 = mo->p2;
    /* the snapshot storage: its own dir, prefix and in-flight bound (backend/backend.h), and
     * bk_snapshot_config's 64 MB hand-offs and batches (a task's snapshot is one segment), and
     * a bulk upload timeout: a full snapshot queues 50 of them at once; the changelog's 1 s (hedge after 1 s, fail after 3 attempts) suits small,
     * latency-bound checkpoint segments, not those */
    dstl_storage *cl = m == BK_CHANGELOG ? open_storage(d1, bucket, p1, 0, NULL, NULL) : NULL;
    dstl_storage *sn = open_storage(d2, bucket, p2, 1, "256mb", "30s");
    bk_env *env;
    job *j;
    job_result r;
    if (bk_env_open(cl, sn, &env) < 0 || job_open(env, &o, &j) < 0) {
        fprintf(stderr, "bench_ckpt: %s: set-up failed: %s\n", mode, dstl_last_error());
        return 1;
    }
    dstl_stats c0 = {0}, s0, c1 = {0}, s1;
    if (cl) stats(cl, &c0);
    stats(sn, &s0);
    put_peer pp = {.interval_s = o.interval_s};
    pthread_t pth;
    int peer = cl && getenv("DSTL_CKPT_PEER") && !strcmp(getenv("DSTL_CKPT_PEER"), "0") ? -1
             : cl ? peer_start(&pp, &pth, cl, d1, bucket) : -1;
    int rc = job_run(j, &r);
    if (peer == 0) peer_stop(&pp, pth, out);
    if (cl) stats(cl, &c1);
    stats(sn, &s1);
    if (rc < 0) fprintf(stderr, "bench_ckpt: %s: run failed: %s\n", mode, dstl_strerror(rc));
    double n = r.completed ? (double)r.completed : 1;
    double q[4] = {0.5, 0.9, 0.99, 0.999};
    const char *qn[4] = {"p50", "p90", "p99", "p999"};
    if (m == BK_FULL) printf("# full: every checkpoint writes the full state (a non-incremental baseline)\n");
    printf("ckpt.%s.checkpoints %" PRIu64 " count\n", mode, r.completed);
    printf("ckpt.%s.skipped %" PRIu64 " count\n", mode, r.skipped);
    printf("ckpt.%s.failed %" PRIu64 " count\n", mode, r.failed);
    printf("ckpt.%s.materialization_failures %" PRIu64 " count\n", mode, r.materialization_failures);
    printf("ckpt.%s.run_s %.1f s\n", mode, r.run_s);
    printf("ckpt.%s.state_mb %.1f MB\n", mode, (double)r.state_bytes / 1e6);
    if (m == BK_CHANGELOG || !strstr(getenv("DSTL_CKPT_MODES") ? getenv("DSTL_CKPT_MODES") : "changelog", "changelog"))
        printf("ckpt.state_mb %.1f MB\n", (double)r.state_bytes / 1e6);   /* key bytes + values */
    for (int k = 0; k < 4; k++)
        printf("ckpt.%s.%s_ms %.1f ms\n", mode, qn[k], job_quantile(r.durations_ms, r.completed, q[k]));
    mo->p99_ms = job_quantile(r.durations_ms, r.completed, 0.99);
    print_barriers(mode, &r);
    uint64_t req = (c1.remote_requests - c0.remote_requests) + (s1.remote_requests - s0.remote_requests);
    uint64_t bytes = (c1.remote_bytes_written - c0.remote_bytes_written) + (s1.remote_bytes_written - s0.remote_bytes_written);
    printf("ckpt.%s.bytes_per_ckpt %.0f bytes\n", mode, (double)bytes / n);
    printf("ckpt.%s.requests_per_ckpt %.2f requests\n", mode, (double)req / n);
    printf("ckpt.%s.materializations %" PRIu64 " count\n", mode, r.materializations);
    if (m == BK_CHANGELOG) {
        uint64_t segs = c1.segments_written - c0.segments_written;
        printf("ckpt.changelog.changelog_bytes_per_ckpt %.0f bytes\n",
               (double)(c1.remote_bytes_written - c0.remote_bytes_written) / n);
        printf("ckpt.changelog.segment_bytes %.0f bytes\n",
               segs ? (double)(c1.segment_bytes - c0.segment_bytes) / (double)segs : 0.0);
        /* retained in S3: the last snapshot of every task + the changelog since (on average
         * half a materialization interval of changes) */
        double gb = ((double)r.state_bytes + (double)(c1.remote_bytes_written - c0.remote_bytes_written) /
                     r.run_s * o.materialize_s / 2) / 1e9;
        double usd = (double)req / n * CKPTS_PER_MONTH * USD_PER_1000_PUT / 1000 + gb * USD_PER_GB_MONTH;
        printf("# S3 Standard prices: $%.3f per 1000 PUT requests, $%.3f per GB-month; a checkpoint a second\n",
               USD_PER_1000_PUT, USD_PER_GB_MONTH);
        printf("ckpt.changelog.usd_per_month %.2f USD\n", usd);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/ckpt-%s.dat", out, mode);
    FILE *f = fopen(path, "w");
    for (uint64_t i = 0; f && i < r.completed; i++) fprintf(f, "%.3f %.3f\n", r.completed_at_s[i], r.durations_ms[i]);
    if (f) fclose(f);
    fflush(stdout);
    job_result_free(&r);
    mo->ran = rc == 0;
    mo->bad = rc < 0;
    mo->changelog = cl != NULL;
    mo->P = P;
    mo->j = j;
    mo->env = env;
    mo->cl = cl;
    mo->sn = sn;
    return rc == 0 ? 0 : 1;
}

static void mode_close(mode_out *mo)
{
    if (!mo->j) return;
    job_close(mo->j);
    bk_env_close(mo->env);
    dstl_storage_close(mo->cl);
    dstl_storage_close(mo->sn);
    mo->j = NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: bench_ckpt DIR BUCKET OUT_DIR\n");
        return 2;
    }
    mkdir(argv[3], 0755);
    const char *modes = getenv("DSTL_CKPT_MODES") ? getenv("DSTL_CKPT_MODES") : "changelog full";
    printf("# P = %.0f tasks, max parallelism 128, state %.0f MB (values of %.0f bytes), %.0f updates/s, a checkpoint "
           "every 1 s, changelog materializes every %.0f s per task (staggered); each mode runs until %.0f "
           "checkpoints completed (full: %.0f; skipped triggers are counted apart)\n",
           envf("DSTL_CKPT_TASKS", 50), envf("DSTL_CKPT_STATE_MB", 900), envf("DSTL_CKPT_VALUE_BYTES", 1024),
           envf("DSTL_CKPT_RATE", 3000), envf("DSTL_CKPT_MATERIALIZE_S", 60), envf("DSTL_CKPT_CHECKPOINTS", 300),
           envf(getenv("DSTL_CKPT_FULL_CHECKPOINTS") ? "DSTL_CKPT_FULL_CHECKPOINTS" : "DSTL_CKPT_CHECKPOINTS", 300));
    mode_out m[2] = {{.mode = "changelog"}, {.mode = "full"}};
    int bad = 0;
    for (int k = 0; k < 2; k++)
        if (strstr(modes, m[k].mode)) bad |= run_mode(&m[k], argv[1], argv[2], argv[3]);
    if (m[0].p99_ms > 0 && m[1].p99_ms > 0) printf("ckpt.p99_ratio %.3f x\n", m[0].p99_ms / m[1].p99_ms);
    bad |= restore_rounds(m, 2, argv[1], argv[2]);
    if (m[0].rounds && m[1].rounds)
        printf("restore.ratio %.3f x\n", job_quantile(m[0].restore_s, (size_t)m[0].rounds, 0.5) /
                                               job_quantile(m[1].restore_s, (size_t)m[1].rounds, 0.5));
    for (int k = 0; k < 2; k++) mode_close(&m[k]);
    return bad;
}
