/*
 * perf/bench_remote.c — remote-durability benchmarks against an S3 endpoint; prints
 * `name value unit` lines. The endpoint comes from S3_ENDPOINT / S3_ACCESS_KEY /
 * S3_SECRET_KEY / S3_REGION (perf/run.sh exports them for the RGW it starts, or for the
 * user's own endpoint through DSTL_PERF_S3_*).
 *
 *   bench_remote load DIR BUCKET N SECONDS RATE_MB_S KEYS_FILE
 *       N writers (on up to 8 threads) with dstl.durability remote: each appends 1 KiB
 *       records and persists every 100 ms (as a checkpoint interval), materializing every
 *       second; RATE_MB_S 0 appends flat out (remote.wN.mb_s), else offers that load in all
 *       (remote.wN.requests_s, persist_p50/p99_us). At the end every writer persists from its
 *       last materialization; those handles are read back with the local dir deleted, by 8
 *       readers in parallel (recovery.wN.mb_s), and the keys of the objects they name go to
 *       KEYS_FILE ("" for none) for the raw-GET peer (perf/remote.sh).
 *   bench_remote put DIR BUCKET SIZE COUNT
 *       COUNT sequential PUTs of SIZE bytes with the same client: remote.put_p50/p99_us.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dstl.h"
#include "dstl/handle.h"
#include "dstl/histo.h"
#include "dstl/remote/remote.h"
#include "tests/payload.h"

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
    double end;
    double rate_bytes_s;         /* this thread's share of the offered load; 0 = flat out */
    uint64_t bytes;
    dstl_handle **last;          /* per writer: the final handle */
} job;

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
    double next_tick = t0 + 0.1;
    while (now_s() < j->end) {
        for (int i = 0; i < j->nw; i++) {
            for (int k = 0; k < 16; k++)
                if (dstl_append(j->w[i], (uint32_t)k, rec, sizeof rec) < 0) die("append");
            j->bytes += 16 * sizeof rec;
        }
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
            if (cp % 10 == 0) {                    /* materialize once a second */
                mat[i] = dstl_writer_next_seq(j->w[i]);
                dstl_truncate(j->w[i], mat[i]);
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

typedef struct {
    dstl_storage *s;
    dstl_handle **h;
    int n, first, step;
    uint64_t bytes;
} rec_job;

static void *recover_thread(void *arg)
{
    rec_job *j = arg;
    for (int i = j->first; i < j->n; i += j->step) {
        dstl_reader *r;
        dstl_record rec;
        int rc;
        if (dstl_reader_open(j->s, j->h[i], 0, 15, &r) < 0) die("reader");
        while ((rc = dstl_reader_next(r, &rec)) == 1) j->bytes += rec.len;
        if (rc < 0) die("recovery read");
        dstl_reader_close(r);
    }
    return NULL;
}

static int bench_load(const char *dir, const char *bucket, int n, double secs, double rate_mb_s,
                      const char *keys_file)
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
    int first = 0;
    double t0 = now_s();
    for (int t = 0; t < nt; t++) {
        job *j = &jobs[t];
        j->s = s;
        j->nw = n / nt + (t < n % nt);
        j->first = first;
        j->w = calloc((size_t)j->nw, sizeof *j->w);
        j->last = last + first;
        j->end = t0 + secs;
        j->rate_bytes_s = rate_mb_s * 1e6 / nt;
        for (int i = 0; i < j->nw; i++) {
            char id[32];
            snprintf(id, sizeof id, "w%d", first + i);
            if (dstl_writer_open(s, id, 0, 15, &j->w[i]) < 0) die("writer");
        }
        first += j->nw;
    }
    dstl_stats st0;
    dstl_storage_stats(s, &st0);
    for (int t = 0; t < nt; t++) pthread_create(&th[t], NULL, load_thread, &jobs[t]);
    uint64_t bytes = 0;
    for (int t = 0; t < nt; t++) {
        pthread_join(th[t], NULL);
        bytes += jobs[t].bytes;
    }
    double el = now_s() - t0;
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
        return 0;
    }

    /* Recovery from the object store alone: a fresh storage, the local dir gone. */
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) die("rm local dir");
    if (dstl_storage_open(c, &s) < 0) die("reopen");
    FILE *kf = keys_file && *keys_file ? fopen(keys_file, "w") : NULL;
    /* as a restarted job recovers: its tasks in parallel (8 readers, as many as the
     * client's connections) */
    rec_job rj[8];
    pthread_t rt[8];
    int nr = n < 8 ? n : 8;
    double r0 = now_s();
    for (int t = 0; t < nr; t++) {
        rj[t] = (rec_job){s, last, n, t, nr, 0};
        pthread_create(&rt[t], NULL, recover_thread, &rj[t]);
    }
    uint64_t rbytes = 0;
    for (int t = 0; t < nr; t++) {
        pthread_join(rt[t], NULL);
        rbytes += rj[t].bytes;
    }
    double rel = now_s() - r0;
    dstl_stats rs;
    dstl_storage_stats(s, &rs);
    if (rate_mb_s <= 0) {
        printf("recovery.w%d.mb_s %.1f MB/s\n", n, (double)rbytes / rel / 1e6);
        printf("recovery.w%d.fetched_mb_s %.1f MB/s\n", n, (double)rs.remote_bytes_read / rel / 1e6);
    }
    if (kf) {
        /* the objects the last handles name (each once), for the raw GET peer */
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
                if (!dup && remote_key(&loc, last[i]->wh->segs[k].name, key, sizeof key) == 0)
                    fprintf(kf, "%s %llu\n", key, (unsigned long long)last[i]->wh->segs[k].object_len);
            }
        fclose(kf);
    }
    for (int i = 0; i < n; i++) dstl_handle_free(last[i]);
    free(last);
    dstl_storage_close(s);
    dstl_config_free(c);
    free(jobs);
    free(th);
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
    if (argc == 8 && !strcmp(argv[1], "load"))
        return bench_load(argv[2], argv[3], atoi(argv[4]), atof(argv[5]), atof(argv[6]), argv[7]);
    if (argc == 6 && !strcmp(argv[1], "put")) return bench_put(argv[3], (size_t)atol(argv[4]), atoi(argv[5]));
    fprintf(stderr, "usage: bench_remote load DIR BUCKET N SECONDS RATE_MB_S KEYS_FILE | put DIR BUCKET SIZE COUNT\n");
    return 2;
}
