/*
 * perf/bench_remote.c — remote-durability benchmarks against an S3 endpoint; prints
 * `name value unit` lines. The endpoint comes from S3_ENDPOINT / S3_ACCESS_KEY /
 * S3_SECRET_KEY / S3_REGION (perf/run.sh exports them for the RGW it starts, or for the
 * user's own endpoint through DSTL_PERF_S3_*).
 *
 *   bench_remote load DIR BUCKET N SECONDS RATE_MB_S KEYS_FILE
 *       N writers (on up to 8 threads) with dstl.durability remote: each appends 1 KiB
 *       records and persists every 100 ms (as a checkpoint interval), materializing every
 *       second (writer i owns key groups [16 i, 16 i + 15], one record for each per round);
 *       RATE_MB_S 0 appends flat out (remote.wN.mb_s), else offers that load in all
 *       (remote.wN.requests_s, persist_p50/p99_us). At the end every writer persists from its
 *       last materialization; on the flat-out runs those handles are restored with the local
 *       dir deleted, as a restarted job restores: one restore plan, one entry (task) per
 *       handle, every reader at once on up to 64 threads (each thread's readers in turns of
 *       RECOVER_TURN_RECORDS records), in DSTL_PERF_RECOVERY_ROUNDS rounds
 *       (default 3) alternating with the raw-GET peer DSTL_PERF_RAW_GET when it is set
 *       (recovery.wN.vs_raw; the median round's lines: recovery.wN.mb_s, .object_mb_s,
 *       .requests, .first_record_ms; and where the time goes: .ms the whole restore, .plan_ms
 *       dstl_restore_plan, .fetch_done_ms when its last byte arrived, .cpu_ms this process's CPU
 *       time meanwhile — the S3 server shares the machine's cores, so a restore's CPU slows
 *       the server it reads from; each round's .roundK.plan_ms and .plan_cpu_ms, the plan's
 *       wall and thread CPU time, round 1's a cold process's); the keys of the objects they name go to KEYS_FILE ("" for
 *       none) for the raw-GET peer (perf/remote.sh). With `rescale`, four more storages (four
 *       new tasks after a rescale) each restore a quarter of the key groups from the handles
 *       of the old writers whose ranges meet it:
 *       recovery.rescale4.bytes_ratio = the largest one's bytes fetched / a quarter of the
 *       full restore's; recovery.rescale4.share_skew = the largest one's share of the records /
 *       0.25 (the workload's balance: flat out, the threads append in lockstep by bytes since
 *       their last materialization, a thread ahead of the slowest by over 1 MiB waits for it,
 *       so every quarter of the writers' final handles holds about as much, as a real job's
 *       equal tasks do).
 *   bench_remote put DIR BUCKET SIZE COUNT
 *       COUNT sequential PUTs of SIZE bytes with the same client: remote.put_p50/p99_us.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dstl.h"
#include "dstl/handle.h"
#include "dstl/histo.h"
#include "dstl/remote/remote.h"
#include "perf/perf_dump.h"
#include "perf/put_peer.h"
#include "tests/payload.h"

/* Each writer owns a range of this many key groups (as a task of a keyed operator does: its
 * share of the job's max parallelism), and its records cycle through them. */
#define KG_PER_WRITER 16u

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_remote: %s: %s\n", what, dstl_last_error());
    exit(1);
}

static const char *env(const char *k)
{
    const char *v = getenv(k);
    if (!v || !*v) {
        fprintf(stderr, "bench_remote: %s is not set\n", k);
        exit(1);
    }
    return v;
}

static dstl_config *remote_config(const char *dir, const char *bucket, const char *prefix)
{
    dstl_config *c;
    char uri[256];
    snprintf(uri, sizeof uri, "s3://%s/%s", bucket, prefix);
    if (dstl_config_new(&c) < 0 || dstl_config_set(c, "dstl.local.dir", dir) < 0 ||
        dstl_config_set(c, "dstl.remote.uri", uri) < 0 || dstl_config_set(c, "dstl.durability", "remote") < 0 ||
        dstl_config_set(c, "dstl.s3.endpoint", env("S3_ENDPOINT")) < 0 ||
        dstl_config_set(c, "dstl.s3.region", getenv("S3_REGION") ? getenv("S3_REGION") : "us-east-1") < 0 ||
        dstl_config_set(c, "dstl.s3.access-key", env("S3_ACCESS_KEY")) < 0 ||
        dstl_config_set(c, "dstl.s3.secret-key", env("S3_SECRET_KEY")) < 0 ||
        dstl_config_set(c, "dstl.s3.path-style", "true") < 0)
        die("config");
    return c;
}

typedef struct {
    dstl_storage *s;
    dstl_writer **w;
    int nw, first;
    double start, end;
    double rate_bytes_s;         /* this thread's share of the offered load; 0 = flat out */
    uint64_t bytes;
    dstl_handle **last;          /* per writer: the final handle */
    _Atomic uint64_t *progress;  /* flat out: every thread's progress_of (balance_wait) */
    uint64_t epoch, epoch_bytes; /* materializations so far; bytes appended since the last */
    int nt, self;
} job;

/* Flat out, the threads append in lockstep, as a real job's tasks take equal input (the
 * source spreads it evenly and backpressure holds a task that runs ahead): a thread ahead of
 * the slowest by more than this (or one round of its own, if larger) waits for it, without a
 * time limit (a thread blocked in a persist holds back the rest, as backpressure would). What
 * is balanced is what the final handles hold: the bytes appended since the thread's last
 * materialization (materializations fall at the same wall-clock second in every thread, so
 * epochs match). Balancing cumulative bytes with waits capped at 20 ms gave a quarter of the
 * writers 1.4 x its share of the last 1-2 s (recovery.rescale4.share_skew 1.401), so a
 * rescaled task of that quarter restored 1.4 x its share whatever the restore did. */
#define BALANCE_SLACK_BYTES (1u << 20)
#define EPOCH_SHIFT 40          /* progress = epoch << 40 | bytes since the epoch began */

static uint64_t progress_of(const job *j)
{
    uint64_t b = j->epoch_bytes < (1ull << EPOCH_SHIFT) ? j->epoch_bytes : (1ull << EPOCH_SHIFT) - 1;
    return j->epoch << EPOCH_SHIFT | b;
}

static void balance_wait(job *j, uint64_t round_bytes)
{
    uint64_t slack = round_bytes > BALANCE_SLACK_BYTES ? round_bytes : BALANCE_SLACK_BYTES;
    uint64_t mine = progress_of(j);
    atomic_store_explicit(&j->progress[j->self], mine, memory_order_relaxed);
    for (;;) {
        uint64_t min = UINT64_MAX;
        for (int t = 0; t < j->nt; t++) {
            uint64_t b = atomic_load_explicit(&j->progress[t], memory_order_relaxed);
            if (b < min) min = b;
        }
        if (mine <= min + slack || now_s() >= j->end) return;
        usleep(100);
    }
}

/* Materializes every writer of the thread once a second of wall time (the same moments in
 * every thread), but not in the last 1.5 s: the final handles (what recovery reads) then cover
 * 1-2 s of changes, not a random 0-1 s. Checked between append rounds and before each wait for
 * a persist: once per thread's 100 ms tick, behind persist waits that take up to a second at
 * 1,024 writers, spread the writers' materializations over seconds, so the segments of that
 * time held needed and unneeded sections interleaved (1.3-2 GETs per object restored). */
static void materialize_due(job *j, uint64_t *mat, double *next_mat)
{
    double t = now_s();
    if (t < *next_mat || t >= j->end - 1.5) return;
    while (*next_mat <= t) *next_mat += 1.0;
    for (int i = 0; i < j->nw; i++) {
        mat[i] = dstl_writer_next_seq(j->w[i]);
        dstl_truncate(j->w[i], mat[i]);
    }
    j->epoch++;
    j->epoch_bytes = 0;
    if (j->progress) atomic_store_explicit(&j->progress[j->self], progress_of(j), memory_order_relaxed);
}

/* Each writer: append continuously, persist when its 100 ms interval is up (without waiting
 * for the previous persist unless it is still pending at the next interval), materialize
 * every second. */
static void *load_thread(void *arg)
{
    job *j = arg;
    uint8_t rec[1024];          /* compresses like a memset buffer (tests/payload.h) */
    payload_fill(PAYLOAD_FILL, 1, 0, rec, sizeof rec);
    dstl_future **f = calloc((size_t)j->nw, sizeof *f);
    double t0 = now_s();
    uint64_t *mat = calloc((size_t)j->nw, sizeof *mat), cp = 0;
    dstl_handle **prev = calloc((size_t)j->nw, sizeof *prev);
    /* Checkpoints are aligned, as barriers align them in a stream processor: at every 100 ms
     * tick the thread persists all its writers, one after the other. */
    double next_tick = t0 + 0.1, next_mat = j->start + 1.0;
    while (now_s() < j->end) {
        for (int i = 0; i < j->nw; i++) {
            for (int k = 0; k < 16; k++)
                if (dstl_append(j->w[i], KG_PER_WRITER * (uint32_t)(j->first + i) + (uint32_t)k, rec, sizeof rec) < 0)
                    die("append");
            j->bytes += 16 * sizeof rec;
            j->epoch_bytes += 16 * sizeof rec;
        }
        if (j->progress) balance_wait(j, (uint64_t)j->nw * 16 * sizeof rec);
        materialize_due(j, mat, &next_mat);
        double t = now_s();
        if (j->rate_bytes_s > 0) {
            double ahead = (double)j->bytes / j->rate_bytes_s - (t - t0);
            if (ahead > 0.001) usleep((useconds_t)(ahead * 1e6));
            t = now_s();
        }
        if (t < next_tick) continue;
        next_tick += 0.1;
        cp++;
        for (int i = 0; i < j->nw; i++) {
            materialize_due(j, mat, &next_mat);
            if (f[i]) {                            /* the previous checkpoint completes first */
                dstl_handle *h;
                if (dstl_future_wait(f[i], -1) < 0 || dstl_future_result(f[i], &h) < 0) die("persist");
                dstl_future_free(f[i]);
                f[i] = NULL;
                if (prev[i]) {
                    dstl_handle_discard(j->s, prev[i]);
                    dstl_handle_free(prev[i]);
                }
                prev[i] = h;
            }
            if (dstl_persist(j->w[i], mat[i], cp, &f[i]) < 0) die("persist");
        }
    }
    for (int i = 0; i < j->nw; i++) {
        if (f[i]) {
            dstl_future_wait(f[i], -1);
            dstl_future_free(f[i]);
        }
        dstl_future *ff;
        dstl_handle *h;
        if (dstl_persist(j->w[i], mat[i], cp + 1, &ff) < 0 || dstl_future_wait(ff, -1) < 0 ||
            dstl_future_result(ff, &h) < 0)
            die("final persist");
        dstl_future_free(ff);
        if (prev[i]) {
            dstl_handle_discard(j->s, prev[i]);
            dstl_handle_free(prev[i]);
        }
        j->last[i] = h;
    }
    free(f);
    free(mat);
    free(prev);
    return NULL;
}

/* ---- recovery: a whole job restoring at once through one restore plan ---- */

typedef struct {
    dstl_restore *p;
    int n, first, step;         /* the readers (plan entries) first, first + step, ... */
    double t0;
    _Atomic uint64_t *first_ns;  /* the first record of any reader, ns after t0 (0: none yet) */
    uint64_t bytes;
} rec_job;

/* Records a thread takes from one reader before it turns to the next of its readers. */
#define RECOVER_TURN_RECORDS 32

/* A thread's readers, every one opened at once and read in turns of RECOVER_TURN_RECORDS
 * records: its tasks restore at the same moment, as a restarted job's tasks do, with the
 * thread as the core they share. (Read one after the other, each thread's later tasks started
 * only once its earlier ones were done, and every object stayed in memory until the last of
 * them had read it: the whole restore, 250-385 MB at w256 and w1024, where readers that move
 * together let each object go once they are all past it.) A turn never waits for bytes
 * (dstl_reader_try_next): a reader whose bytes are not in yet lets the thread's others go on,
 * and the thread sleeps in dstl_restore_wait only when none of them has a record at hand. (A
 * turn that blocked stalled the thread's other tasks behind a reader of a later object, and
 * made the plan fetch that object early, held until the slowest reader got there: at w256,
 * 64 threads of 4 tasks held 217 MB at the peak where a thread per task held 127 MB.) */
/* Reads up to RECOVER_TURN_RECORDS records from r: 1 when it has more (*took: how many it
 * read), 0 when it ended. */
static int recover_turn(rec_job *j, dstl_reader *r, int *took)
{
    dstl_record rec;
    int rc = 1, t = 0;
    for (; t < RECOVER_TURN_RECORDS && (rc = dstl_reader_try_next(r, &rec)) == 1; t++) {
        if (j->bytes == 0 && atomic_load_explicit(j->first_ns, memory_order_relaxed) == 0) {
            uint64_t ns = (uint64_t)((now_s() - j->t0) * 1e9), zero = 0;
            atomic_compare_exchange_strong(j->first_ns, &zero, ns ? ns : 1);
        }
        j->bytes += rec.len;
    }
    *took += t;
    if (rc == -EAGAIN) return 1;
    if (rc < 0) die("recovery read");
    return rc;
}

static void *recover_thread(void *arg)
{
    rec_job *j = arg;
    int nr = 0;
    uint64_t seen = 0;
    dstl_reader **rs = calloc((size_t)(j->n / j->step + 1), sizeof *rs);
    for (int i = j->first; i < j->n; i += j->step)
        if (dstl_restore_reader_open(j->p, (size_t)i, 0, &rs[nr++]) < 0) die("reader");
    while (nr > 0) {
        int took = 0;
        for (int k = 0; k < nr;) {
            if (recover_turn(j, rs[k], &took)) {
                k++;
                continue;
            }
            dstl_reader_close(rs[k]);       /* this task is done: its slot goes to the last one */
            rs[k] = rs[--nr];
            took++;
        }
        if (!took && dstl_restore_wait(j->p, &seen, 1000) < 0) die("restore wait");
    }
    free(rs);
    return NULL;
}

typedef struct {
    double secs, first_ms;
    double plan_ms;             /* dstl_restore_plan's own time */
    double plan_cpu_ms;         /* ... and its thread's CPU time */
    double fetch_ms;            /* when the plan's last fetched byte arrived (after t0) */
    double cpu_ms;              /* the process's CPU time (user + system) during the restore */
    uint64_t record_bytes;
    dstl_restore_stats st;
} restore_result;

/* Samples the plan's bytes fetched every 2 ms: the time the last byte arrived says how much
 * of a restore is the fetch and how much the readers' work after it. */
typedef struct {
    dstl_restore *p;
    double t0, last_change;
    uint64_t last_bytes;
    _Atomic int stop;
} fetch_watch;

static void *watch_thread(void *arg)
{
    fetch_watch *w = arg;
    while (!atomic_load(&w->stop)) {
        dstl_restore_stats st;
        dstl_restore_get_stats(w->p, &st);
        if (st.bytes_fetched != w->last_bytes) {
            w->last_bytes = st.bytes_fetched;
            w->last_change = now_s() - w->t0;
        }
        usleep(2000);
    }
    return NULL;
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Restores the n handles over [kgf, kgl] through one plan: one entry per handle (a task each)
 * when per_task, else one entry holding them all (one rescaled task); up to 64 threads read
 * the entries' readers at once. */
static restore_result restore_once(dstl_storage *s, dstl_handle **h, int n, int per_task, uint32_t kgf, uint32_t kgl)
{
    dstl_restore_entry *e = calloc((size_t)n, sizeof *e);
    int ne = per_task ? n : 1;
    for (int i = 0; i < ne; i++)
        e[i] = (dstl_restore_entry){(const dstl_handle *const *)&h[per_task ? i : 0], per_task ? 1 : (size_t)n, kgf, kgl};
    restore_result res = {0};
    _Atomic uint64_t first_ns = 0;
    double t0 = now_s(), c0 = cpu_s(), pc0 = thread_cpu_s();
    dstl_restore *p;
    if (dstl_restore_plan(s, e, (size_t)ne, &p) < 0) die("restore plan");
    res.plan_ms = (now_s() - t0) * 1e3;
    res.plan_cpu_ms = (thread_cpu_s() - pc0) * 1e3;
    fetch_watch fw = {.p = p, .t0 = t0};
    pthread_t wt;
    pthread_create(&wt, NULL, watch_thread, &fw);
    if (per_task) {
        size_t nt = n < 64 ? (size_t)n : 64;
        rec_job *rj = calloc(nt, sizeof *rj);
        pthread_t *rt = calloc(nt, sizeof *rt);
        for (size_t t = 0; t < nt; t++) {
            rj[t] = (rec_job){p, n, (int)t, (int)nt, t0, &first_ns, 0};
            pthread_create(&rt[t], NULL, recover_thread, &rj[t]);
        }
        for (size_t t = 0; t < nt; t++) {
            pthread_join(rt[t], NULL);
            res.record_bytes += rj[t].bytes;
        }
        free(rj);
        free(rt);
    } else {
        for (int i = 0; i < n; i++) {
            dstl_reader *r;
            dstl_record rec;
            int rc;
            if (dstl_restore_reader_open(p, 0, (size_t)i, &r) < 0) die("reader");
            while ((rc = dstl_reader_next(r, &rec)) == 1) res.record_bytes += rec.len;
            if (rc < 0) die("rescaled read");
            dstl_reader_close(r);
        }
    }
    res.secs = now_s() - t0;
    res.cpu_ms = (cpu_s() - c0) * 1e3;
    atomic_store(&fw.stop, 1);
    pthread_join(wt, NULL);
    res.fetch_ms = fw.last_change * 1e3;
    res.first_ms = (double)atomic_load(&first_ns) / 1e6;
    dstl_restore_get_stats(p, &res.st);
    if (dstl_restore_close(p) < 0) die("restore close");
    free(e);
    return res;
}

/* The raw-GET peer (DSTL_PERF_RAW_GET: a command given KEYS_FILE that GETs every object in it
 * and prints the seconds its GETs took, perf/remote.sh's rawget.sh): run by this process
 * between the restores, so both see the server in the same state. 0 when there is no peer. */
static double raw_get_mb_s(const char *keys_file, uint64_t bytes)
{
    const char *cmd = getenv("DSTL_PERF_RAW_GET");
    if (!cmd || !*cmd || !keys_file || !*keys_file || !bytes) return 0;
    char line[4400];
    snprintf(line, sizeof line, "'%s' '%s'", cmd, keys_file);
    FILE *f = popen(line, "r");
    double secs = 0;
    if (!f || fscanf(f, "%lf", &secs) != 1) secs = 0;
    if (f && pclose(f) != 0) secs = 0;
    if (secs <= 0) die("raw GET peer");
    return (double)bytes / secs / 1e6;
}

static double median(const double *v, int n)
{
    double t[16];
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, put_peer_cmp);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

#define MAX_ROUNDS 9

/* The recovery lines of n writers' last handles: a fresh storage on dir (the local dir was
 * deleted), every task restoring at once, in DSTL_PERF_RECOVERY_ROUNDS rounds (default 3),
 * each alternating with the raw-GET peer (raw first in odd rounds, after in even ones): a
 * restore takes well under a second, so one sample is mostly the server's moment. The lines
 * are the median round's (by fetched MB/s), first_record_ms the median of all rounds, and
 * vs_raw the median fetched MB/s over the peer's median. With rescale, four more storages
 * (four new tasks) each restore a quarter of the key groups of every handle, once. */
static void bench_recover(dstl_config *c, const char *dir, dstl_handle **last, int n, int rescale,
                          const char *keys_file, uint64_t keys_bytes)
{
    dstl_storage *s;
    uint32_t nkg = KG_PER_WRITER * (uint32_t)n;
    const char *rv = getenv("DSTL_PERF_RECOVERY_ROUNDS");
    int rounds = rv && *rv ? atoi(rv) : 3;
    if (rounds < 1) rounds = 1;
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
    restore_result rr[MAX_ROUNDS];
    double fetched[MAX_ROUNDS], raw[MAX_ROUNDS], first[MAX_ROUNDS];
    for (int k = 0; k < rounds; k++) {
        raw[k] = k % 2 == 0 ? raw_get_mb_s(keys_file, keys_bytes) : 0;
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);     /* every round starts cold */
        if (system(cmd) != 0) die("rm local dir");
        if (dstl_storage_open(c, &s) < 0) die("reopen");
        rr[k] = restore_once(s, last, n, 1, 0, nkg - 1);
        dstl_storage_close(s);
        if (k % 2 == 1) raw[k] = raw_get_mb_s(keys_file, keys_bytes);
        fetched[k] = (double)rr[k].st.bytes_fetched / rr[k].secs / 1e6;
        first[k] = rr[k].first_ms;
        printf("recovery.w%d.round%d.fetched_mb_s %.1f MB/s\n", n, k + 1, fetched[k]);
        if (raw[k] > 0) printf("recovery.w%d.round%d.raw_get_mb_s %.1f MB/s\n", n, k + 1, raw[k]);
        printf("recovery.w%d.round%d.first_record_ms %.1f ms\n", n, k + 1, first[k]);
        /* the plan's part of it, each round: the first round's is a cold process's */
        printf("recovery.w%d.round%d.plan_ms %.2f ms\n", n, k + 1, rr[k].plan_ms);
        printf("recovery.w%d.round%d.plan_cpu_ms %.2f ms\n", n, k + 1, rr[k].plan_cpu_ms);
    }
    double mid = median(fetched, rounds);
    int m = 0;
    for (int k = 1; k < rounds; k++)
        if (fabs(fetched[k] - mid) < fabs(fetched[m] - mid)) m = k;
    restore_result r = rr[m];
    printf("recovery.w%d.rounds %d rounds\n", n, rounds);
    printf("recovery.w%d.mb_s %.1f MB/s\n", n, (double)r.record_bytes / r.secs / 1e6);
    printf("recovery.w%d.fetched_mb_s %.1f MB/s\n", n, fetched[m]);
    printf("recovery.w%d.object_mb_s %.1f MB/s\n", n, (double)r.st.object_bytes / r.secs / 1e6);
    printf("recovery.w%d.objects %" PRIu64 " objects\n", n, r.st.objects);
    printf("recovery.w%d.object_bytes %" PRIu64 " B\n", n, r.st.object_bytes);
    printf("recovery.w%d.requests %" PRIu64 " GETs\n", n, r.st.get_requests);
    double per_object = r.st.objects ? (double)r.st.get_requests / (double)r.st.objects : 0.0;
    printf("recovery.w%d.requests_per_object %.3f x\n", n, per_object);
    printf("recovery.w%d.requests_vs_objects %.3f x\n", n, per_object);   /* the goal's name */
    printf("recovery.w%d.first_record_ms %.1f ms\n", n, median(first, rounds));
    printf("recovery.w%d.held_peak_mb %.1f MB\n", n, (double)r.st.held_peak_bytes / 1e6);
    printf("recovery.w%d.touched_mb %.1f MB\n", n, (double)r.st.memory_touched_bytes / 1e6);
    printf("recovery.w%d.ms %.1f ms\n", n, r.secs * 1e3);
    printf("recovery.w%d.direct_reads %" PRIu64 " reads\n", n, r.st.direct_reads);
    printf("recovery.w%d.plan_ms %.1f ms\n", n, r.plan_ms);
    printf("recovery.w%d.fetch_done_ms %.1f ms\n", n, r.fetch_ms);
    printf("recovery.w%d.cpu_ms %.1f ms\n", n, r.cpu_ms);
    if (raw[0] > 0) {
        double rm = median(raw, rounds);
        printf("recovery.w%d.raw_get_mb_s %.1f MB/s\n", n, rm);
        printf("recovery.w%d.vs_raw %.3f x\n", n, mid / rm);
    }
    fprintf(stderr, "full: records %.1f MB fetched %.1f MB delivered %.1f MB\n", (double)r.record_bytes / 1e6,
            (double)r.st.bytes_fetched / 1e6, (double)r.st.bytes_delivered / 1e6);
    if (!rescale) return;
    double worst = 0;
    uint64_t qbytes[4], qsum = 0, qmax = 0;
    for (int q = 0; q < 4; q++) {
        char sub[4200], cmd[4300];
        snprintf(sub, sizeof sub, "%s-task%d", dir, q);
        dstl_config *qc;
        if (config_clone(c, &qc) < 0 || dstl_config_set(qc, "dstl.local.dir", sub) < 0) die("task config");
        if (dstl_storage_open(qc, &s) < 0) die("task open");
        /* the new task's key groups, and the old writers' handles whose ranges meet them */
        uint32_t kgf = (uint32_t)q * nkg / 4, kgl = (uint32_t)(q + 1) * nkg / 4 - 1;
        int h0 = (int)(kgf / KG_PER_WRITER), h1 = (int)(kgl / KG_PER_WRITER);
        restore_result rq = restore_once(s, last + h0, h1 - h0 + 1, 0, kgf, kgl);
        dstl_storage_close(s);
        dstl_config_free(qc);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", sub);
        if (system(cmd) != 0) die("rm task dir");
        double ratio = (double)rq.st.bytes_fetched / ((double)r.st.bytes_fetched / 4);
        /* what a task's bytes are made of: fetched vs delivered (gaps read through, whole
         * small objects), and its GETs over its objects (diagnostics, not goal lines) */
        fprintf(stderr, "rescale4 task %d: ratio %.3f records %.1f MB fetched %.1f MB delivered %.1f MB "
                "objects %" PRIu64 " fetched from %" PRIu64 " GETs %" PRIu64 "\n", q, ratio,
                (double)rq.record_bytes / 1e6, (double)rq.st.bytes_fetched / 1e6,
                (double)rq.st.bytes_delivered / 1e6, rq.st.objects, rq.st.objects_fetched, rq.st.get_requests);
        if (ratio > worst) worst = ratio;
        qbytes[q] = rq.record_bytes;
        qsum += qbytes[q];
        if (qbytes[q] > qmax) qmax = qbytes[q];
    }
    printf("recovery.rescale4.bytes_ratio %.3f x\n", worst);
    /* how balanced the workload was: the largest quarter's share of the records / 0.25 (1.0:
     * even; bytes_ratio cannot be below it, whatever the restore does) */
    printf("recovery.rescale4.share_skew %.3f x\n", qsum ? (double)qmax / (double)qsum / 0.25 : 0.0);
}

static int bench_load(const char *dir, const char *bucket, int n, double secs, double rate_mb_s,
                      const char *keys_file, int rescale)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "bench-w%d-%d", n, (int)getpid());
    dstl_config *c = remote_config(dir, bucket, prefix);
    dstl_storage *s;
    if (dstl_storage_open(c, &s) < 0) die("open");
    int nt = n < 8 ? n : 8;
    job *jobs = calloc((size_t)nt, sizeof *jobs);
    pthread_t *th = calloc((size_t)nt, sizeof *th);
    dstl_handle **last = calloc((size_t)n, sizeof *last);
    _Atomic uint64_t *progress = calloc((size_t)nt, sizeof *progress);
    int first = 0;
    double t0 = now_s();
    for (int t = 0; t < nt; t++) {
        job *j = &jobs[t];
        j->s = s;
        j->nw = n / nt + (t < n % nt);
        j->first = first;
        j->w = calloc((size_t)j->nw, sizeof *j->w);
        j->last = last + first;
        j->start = t0;
        j->end = t0 + secs;
        j->rate_bytes_s = rate_mb_s * 1e6 / nt;
        j->progress = rate_mb_s > 0 ? NULL : progress;
        j->nt = nt;
        j->self = t;
        for (int i = 0; i < j->nw; i++) {
            char id[32];
            snprintf(id, sizeof id, "w%d", first + i);
            uint32_t kg0 = KG_PER_WRITER * (uint32_t)(first + i);
            if (dstl_writer_open(s, id, kg0, kg0 + KG_PER_WRITER - 1, &j->w[i]) < 0) die("writer");
        }
        first += j->nw;
    }
    dstl_stats st0;
    dstl_storage_stats(s, &st0);
    /* At an offered load, a PUT peer of the run's mean segment size once per checkpoint
     * interval, on its own connection (perf/put_peer.h): remote.p99_vs_put's denominator */
    put_peer pp = {0};
    pthread_t pth;
    dstl_config *pc = rate_mb_s > 0 ? remote_config("/tmp", bucket, "put-peer") : NULL;
    int peer = pc ? put_peer_start(&pp, &pth, s, pc, bucket, "put-peer", 0.1) : -1;
    for (int t = 0; t < nt; t++) pthread_create(&th[t], NULL, load_thread, &jobs[t]);
    uint64_t bytes = 0;
    for (int t = 0; t < nt; t++) {
        pthread_join(th[t], NULL);
        bytes += jobs[t].bytes;
    }
    double el = now_s() - t0;
    if (peer == 0) {
        put_peer_stop(&pp, pth);
        printf("remote.w%d.peer_puts %zu count\n", n, pp.n);
        printf("remote.w%d.peer_put_errors %" PRIu64 " count\n", n, pp.errors);
        printf("remote.w%d.peer_put_bytes %.0f B\n", n, pp.n ? (double)pp.bytes / (double)pp.n : 0.0);
        printf("remote.w%d.peer_put_p50_us %.0f us\n", n, put_peer_quantile(&pp, 0.5) * 1e3);
        printf("remote.w%d.peer_put_p99_us %.0f us\n", n, put_peer_quantile(&pp, 0.99) * 1e3);
        free(pp.ms);
        free(pp.at);
    }
    dstl_config_free(pc);
    dstl_stats st;
    dstl_storage_stats(s, &st);
    /* Flat out: throughput (and the latency that comes with a saturated server). At an
     * offered load: request rate and latency, comparable across writer counts. */
    const char *tag = rate_mb_s > 0 ? "" : "sat_";
    if (rate_mb_s <= 0) printf("remote.w%d.mb_s %.1f MB/s\n", n, (double)bytes / el / 1e6);
    else printf("remote.w%d.offered_mb_s %.1f MB/s\n", n, (double)bytes / el / 1e6);
    printf("remote.w%d.%srequests_s %.1f requests/s\n", n, tag, (double)(st.remote_requests - st0.remote_requests) / el);
    printf("remote.w%d.%ssegments_s %.1f segments/s\n", n, tag, (double)st.segments_written / el);
    printf("remote.w%d.%spersists_s %.0f persists/s\n", n, tag, (double)st.persists / el);
    printf("remote.w%d.%spersist_p50_us %" PRIu64 " us\n", n, tag, st.persist_p50_us);
    printf("remote.w%d.%spersist_p99_us %" PRIu64 " us\n", n, tag, st.persist_p99_us);
    printf("remote.w%d.%ssegment_mean_bytes %.0f B\n", n, tag,
           st.segments_written ? (double)st.segment_bytes / (double)st.segments_written : 0.0);
    perf_dump(s, "remote-%s-w%d", rate_mb_s > 0 ? "rate" : "flat", n);
    for (int t = 0; t < nt; t++) {
        for (int i = 0; i < jobs[t].nw; i++) dstl_writer_close(jobs[t].w[i]);
        free(jobs[t].w);
    }
    if (dstl_storage_close(s) < 0) die("close");
    if (rate_mb_s > 0) {                        /* recovery is measured on the flat-out runs */
        for (int i = 0; i < n; i++) dstl_handle_free(last[i]);
        free(last);
        dstl_config_free(c);
        free(jobs);
        free(th);
        free(progress);
        return 0;
    }

    /* Recovery from the object store alone: a fresh storage, the local dir gone (each round
     * deletes it). First the objects the last handles name (each once), for the raw GET peer. */
    uint64_t keys_bytes = 0;
    FILE *kf = keys_file && *keys_file ? fopen(keys_file, "w") : NULL;
    if (kf) {
        remote_loc loc;
        char uri[256];
        snprintf(uri, sizeof uri, "s3://%s/%s", bucket, prefix);
        if (remote_parse_uri(uri, "bench", &loc) < 0) die("uri");
        for (int i = 0; i < n; i++)
            for (size_t k = 0; k < last[i]->wh->nsegs; k++) {
                int dup = 0;
                for (int q = 0; q < i && !dup; q++)
                    for (size_t m = 0; m < last[q]->wh->nsegs && !dup; m++)
                        dup = !strcmp(last[q]->wh->segs[m].name, last[i]->wh->segs[k].name);
                char key[700];
                if (!dup && remote_key(&loc, last[i]->wh->segs[k].name, key, sizeof key) == 0) {
                    fprintf(kf, "%s %llu\n", key, (unsigned long long)last[i]->wh->segs[k].object_len);
                    keys_bytes += last[i]->wh->segs[k].object_len;
                }
            }
        if (fclose(kf) != 0) die("keys file");
    }
    bench_recover(c, dir, last, n, rescale, kf ? keys_file : NULL, keys_bytes);
    for (int i = 0; i < n; i++) dstl_handle_free(last[i]);
    free(last);
    dstl_config_free(c);
    free(jobs);
    free(th);
    free(progress);
    return 0;
}

static int bench_put(const char *bucket, size_t size, int count)
{
    config_values cv;
    dstl_config *c = remote_config("/tmp", bucket, "put");
    if (config_resolve(c, &cv) < 0) die("config");
    s3_client *cli;
    if (remote_client_new(&cv, &cli) < 0) die("client");
    uint8_t *buf = malloc(size);
    payload_fill(PAYLOAD_FILL, 2, 0, buf, size);
    static histo h;
    for (int i = 0; i < count; i++) {
        char key[128];
        snprintf(key, sizeof key, "put/%d-%d", (int)getpid(), i);
        double t0 = now_s();
        s3_result r;
        if (s3_put_object_sync(cli, bucket, key, buf, size, true, &r) < 0) {
            fprintf(stderr, "bench_remote: put: %s\n", r.error);
            return 1;
        }
        histo_add(&h, (uint64_t)((now_s() - t0) * 1e6));
        s3_delete_object_sync(cli, bucket, key, &r);
    }
    printf("remote.put_bytes %zu B\n", size);
    printf("remote.put_p50_us %" PRIu64 " us\n", histo_quantile(&h, 0.5));
    printf("remote.put_p99_us %" PRIu64 " us\n", histo_quantile(&h, 0.99));
    s3_client_free(cli);
    free(buf);
    dstl_config_free(c);
    return 0;
}

int main(int argc, char **argv)
{
    if ((argc == 8 || argc == 9) && !strcmp(argv[1], "load"))
        return bench_load(argv[2], argv[3], atoi(argv[4]), atof(argv[5]), atof(argv[6]), argv[7],
                          argc == 9 && !strcmp(argv[8], "rescale"));
    if (argc == 6 && !strcmp(argv[1], "put")) return bench_put(argv[3], (size_t)atol(argv[4]), atoi(argv[5]));
    fprintf(stderr, "usage: bench_remote load DIR BUCKET N SECONDS RATE_MB_S KEYS_FILE [rescale] | put DIR BUCKET SIZE COUNT\n");
    return 2;
}
