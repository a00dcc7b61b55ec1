/*
 * perf/bench_local.c — local-durability benchmarks; prints `name value unit` lines.
 *
 *   bench_local append DIR                 append path vs memcpy, 100-byte records, one thread
 *   bench_local load DIR N SECONDS         N writers on up to 8 threads: append 1 KiB records,
 *                                          persist all, wait, repeat (sustained throughput)
 *   bench_local light DIR N SECONDS        N writers, each: a few records, persist, wait, 10 ms
 *                                          pause (latency at light load)
 *   bench_local commits DIR N SECONDS      N threads each: append one 100-byte record, persist,
 *                                          wait (durable commits, persist-delay 0)
 *   bench_local load-enc DIR N SECONDS     the load mode plain and with encryption at rest
 *                                          (a key file in DIR), alternating in four quarters:
 *                                          local.load.wN.enc_mb_s, local.enc_vs_plain
 *
 * Each mode runs in its own process (perf/run.sh), so peak RSS and CPU time are per mode.
 * Every loop is bounded by SECONDS. Numbers only: nothing here asserts.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dstl.h"
#include "dstl/histo.h"
#include "perf/perf_dump.h"
#include "wire/wire.h"
#include "tests/payload.h"

/* Records are PAYLOAD_FILL payloads (tests/payload.h): an 8-byte stamp, then one byte
 * repeated, so they compress like a memset buffer. Each loop makes its record once, before
 * anything is timed, and then varies only its first byte per append, as it always has: the
 * timed work stays what it was. */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

static double rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_local: %s: %s\n", what, dstl_last_error());
    exit(1);
}

static const char *key_file;   /* load-enc: the key file of the encrypted phases, else NULL */

static dstl_storage *open_storage(const char *dir, const char *delay, const char *preempt)
{
    dstl_config *c;
    if (dstl_config_new(&c) < 0 || dstl_config_set(c, "dstl.local.dir", dir) < 0 ||
        (key_file && dstl_config_set(c, "dstl.encryption.key-file", key_file) < 0) ||
        dstl_config_set(c, "dstl.durability", "local") < 0 ||
        (delay && dstl_config_set(c, "dstl.batch.persist-delay", delay) < 0) ||
        (preempt && dstl_config_set(c, "dstl.preemptive-persist-threshold", preempt) < 0))
        die("config");
    dstl_storage *s;
    if (dstl_storage_open(c, &s) < 0) die("open");
    dstl_config_free(c);
    return s;
}

/* ---- append ---- */

static int bench_append(const char *dir)
{
    enum { REC = 100 };
    const size_t n = 1000000;   /* 100 MB of records: long enough to time, fits in memory */
    uint8_t rec[REC];
    payload_fill(PAYLOAD_FILL, 1, 0, rec, sizeof rec);

    /* the peer: the same bytes copied as 100-byte records into fresh memory */
    double best_memcpy = 0;
    for (int rep = 0; rep < 3; rep++) {
        uint8_t *dst = malloc(n * REC);
        double t0 = now_s();
        for (size_t i = 0; i < n; i++) {
            rec[0] = (uint8_t)i;
            memcpy(dst + i * REC, rec, REC);
        }
        double t = now_s() - t0;
        __asm__ volatile("" ::"r"(dst) : "memory");
        free(dst);
        if (n * REC / t > best_memcpy) best_memcpy = (double)(n * REC) / t;
    }

    /* The preemptive threshold is raised so nothing leaves for the disk mid-loop: this times
     * the append path alone, as a state backend sees it between checkpoints. */
    double best_append = 0;
    for (int rep = 0; rep < 3; rep++) {
        dstl_storage *s = open_storage(dir, NULL, "4gb");
        dstl_writer *w;
        if (dstl_writer_open(s, "bench", 0, 127, &w) < 0) die("writer");
        double t0 = now_s();
        for (size_t i = 0; i < n; i++) {
            rec[0] = (uint8_t)i;
            if (dstl_append(w, (uint32_t)(i & 127), rec, REC) < 0) die("append");
        }
        double t = now_s() - t0;
        if (n / t > best_append) best_append = (double)n / t;
        dstl_truncate(w, dstl_writer_next_seq(w));
        dstl_writer_close(w);
        dstl_storage_close(s);
    }
    printf("append.records_s %.0f records/s\n", best_append);
    printf("append.mb_s %.1f MB/s\n", best_append * REC / 1e6);
    printf("memcpy_100b_mb_s %.1f MB/s\n", best_memcpy / 1e6);
    printf("append.vs_memcpy %.3f x\n", best_append * REC / best_memcpy);
    return 0;
}

/* ---- load / light ---- */

typedef struct {
    dstl_storage *s;
    dstl_writer **w;
    int nw;
    double end;
    int light;
    size_t rec_len, recs_per_round;
    uint64_t bytes;
    /* light: every persist's latency (persist call to its future done), exactly */
    uint32_t *lat_us;
    size_t nlat, caplat;
} load_job;

static void *load_thread(void *arg)
{
    load_job *j = arg;
    uint8_t rec[4096];
    payload_fill(PAYLOAD_FILL, 2, 0, rec, sizeof rec);
    dstl_future **f = calloc((size_t)j->nw, sizeof *f);
    uint64_t *from = calloc((size_t)j->nw, sizeof *from);
    double *t_persist = calloc((size_t)j->nw, sizeof *t_persist);
    uint64_t cp = 0;
    while (now_s() < j->end) {
        for (int i = 0; i < j->nw; i++) {
            for (size_t k = 0; k < j->recs_per_round; k++) {
                rec[0] = (uint8_t)k;
                if (dstl_append(j->w[i], (uint32_t)(k & 63), rec, j->rec_len) < 0) die("append");
            }
            j->bytes += j->recs_per_round * j->rec_len;
            t_persist[i] = now_s();
            if (dstl_persist(j->w[i], from[i], cp, &f[i]) < 0) die("persist");
        }
        for (int i = 0; i < j->nw; i++) {
            if (dstl_future_wait(f[i], -1) < 0) die("wait");
            if (j->light && j->nlat < j->caplat) j->lat_us[j->nlat++] = (uint32_t)((now_s() - t_persist[i]) * 1e6);
            dstl_handle *h;
            if (dstl_future_result(f[i], &h) < 0) die("persist result");
            dstl_future_free(f[i]);
            /* materialize at once: the log stays short, segments are deleted as they go */
            dstl_handle_discard(j->s, h);
            dstl_handle_free(h);
            from[i] = dstl_writer_next_seq(j->w[i]);
            dstl_truncate(j->w[i], from[i]);
        }
        cp++;
        if (j->light) usleep(10000);
    }
    free(t_persist);
    free(f);
    free(from);
    return NULL;
}

static double load_bytes, load_secs;   /* of the last bench_load */

/* The floor of the write path's CPU per byte: copying records of rec_len bytes once (the
 * append) and checksumming them once (CRC32C), single-threaded, in us per MB. Measured in the
 * process that ran the load, right after it: the same machine state. */
static double floor_us_per_mb(size_t rec_len)
{
    enum { TOTAL = 64u << 20 };
    uint8_t *src = malloc(rec_len), *dst = malloc(TOTAL);
    memset(src, 0x5a, rec_len);
    memset(dst, 0, TOTAL);              /* faulted in: the floor is copy + CRC, not page faults */
    double best = 0;
    uint32_t crc = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = cpu_s();
        for (size_t off = 0; off + rec_len <= TOTAL; off += rec_len) {
            src[0] = (uint8_t)off;
            memcpy(dst + off, src, rec_len);
            crc = wire_crc32c(crc, dst + off, rec_len);
        }
        double us = (cpu_s() - t0) * 1e6 / (TOTAL / 1e6);
        if (best == 0 || us < best) best = us;
    }
    __asm__ volatile("" ::"r"(crc), "r"(dst) : "memory");
    free(src);
    free(dst);
    return best;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile of the light jobs' exact latencies (the storage's histogram reports bucket
 * edges: 512 us wide at 10 ms, more than the budget's slack above persist-delay). */
static uint64_t exact_quantile(load_job *jobs, int n, double q)
{
    size_t total = 0, k = 0;
    for (int t = 0; t < n; t++) total += jobs[t].nlat;
    if (!total) return 0;
    uint32_t *all = malloc(total * sizeof *all);
    for (int t = 0; t < n; t++)
        for (size_t i = 0; i < jobs[t].nlat; i++) all[k++] = jobs[t].lat_us[i];
    qsort(all, total, sizeof *all, cmp_u32);
    size_t at = (size_t)(q * (double)(total - 1) + 0.5);
    uint64_t v = all[at];
    free(all);
    return v;
}
static int load_quiet;

static int bench_load(const char *dir, int nwriters, double seconds, int light)
{
    dstl_storage *s = open_storage(dir, NULL, NULL);
    int nthreads = nwriters < 8 ? nwriters : 8;
    load_job *jobs = calloc((size_t)nthreads, sizeof *jobs);
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    /* heavy: ~4 MiB per thread per round, spread over its writers; light: 4 records each */
    size_t per_thread_round = 4u << 20;
    for (int t = 0; t < nthreads; t++) {
        load_job *j = &jobs[t];
        j->s = s;
        j->nw = nwriters / nthreads + (t < nwriters % nthreads);
        j->w = calloc((size_t)j->nw, sizeof *j->w);
        j->light = light;
        if (light) {
            j->caplat = (size_t)(seconds / 0.01 + 16) * (size_t)(nwriters / nthreads + 1);
            j->lat_us = calloc(j->caplat, sizeof *j->lat_us);
        }
        j->rec_len = light ? 100 : 1024;
        j->recs_per_round = light ? 4 : per_thread_round / j->rec_len / (size_t)j->nw;
        if (j->recs_per_round == 0) j->recs_per_round = 1;
        for (int i = 0; i < j->nw; i++) {
            char id[32];
            snprintf(id, sizeof id, "t%d-w%d", t, i);
            if (dstl_writer_open(s, id, 0, 63, &j->w[i]) < 0) die("writer");
        }
    }
    double cpu0 = cpu_s(), t0 = now_s();
    for (int t = 0; t < nthreads; t++) {
        jobs[t].end = t0 + seconds;
        pthread_create(&th[t], NULL, load_thread, &jobs[t]);
    }
    uint64_t bytes = 0;
    for (int t = 0; t < nthreads; t++) {
        pthread_join(th[t], NULL);
        bytes += jobs[t].bytes;
    }
    double el = now_s() - t0, cpu = cpu_s() - cpu0;
    dstl_stats st;
    dstl_storage_stats(s, &st);
    const char *pre = light ? "light" : "load";
    load_bytes = (double)bytes;
    load_secs = el;
    if (load_quiet) goto done;
    printf("local.%s.w%d.mb_s %.1f MB/s\n", pre, nwriters, (double)bytes / el / 1e6);
    printf("local.%s.w%d.persist_p50_us %" PRIu64 " us\n", pre, nwriters, st.persist_p50_us);
    if (light) {
        /* exact, from every persist's own timing; the storage's histogram edge beside it */
        printf("local.%s.w%d.persist_p50_exact_us %" PRIu64 " us\n", pre, nwriters, exact_quantile(jobs, nthreads, 0.5));
        printf("local.%s.w%d.persist_p99_us %" PRIu64 " us\n", pre, nwriters, exact_quantile(jobs, nthreads, 0.99));
        printf("local.%s.w%d.persist_p99_hist_us %" PRIu64 " us\n", pre, nwriters, st.persist_p99_us);
    } else {
        printf("local.%s.w%d.persist_p99_us %" PRIu64 " us\n", pre, nwriters, st.persist_p99_us);
    }
    printf("local.%s.w%d.persists_s %.0f persists/s\n", pre, nwriters, (double)st.persists / el);
    printf("local.%s.w%d.segments_s %.0f segments/s\n", pre, nwriters, (double)st.segments_written / el);
    printf("local.%s.w%d.segments_direct_share %.3f x\n", pre, nwriters,
           st.segments_written ? (double)st.segments_direct / (double)st.segments_written : 0.0);
    /* what the disk was given per fdatasync: the size perf/run.sh's fio peers write */
    printf("local.%s.w%d.segment_mean_bytes %.0f B\n", pre, nwriters,
           st.segments_written ? (double)st.segment_bytes / (double)st.segments_written : 0);
    /* The peak so far is the load's: the floor below maps 64 MiB of the bench's own (which
     * made every earlier make perf's w1024 peak 25-30 MB higher than the load's, 166-173 MB
     * against 137-144 MB, with the storage's pools still held beside it). */
    double rss_peak = rss_mb();
    double cpu_per_mb = cpu * 1e6 / ((double)bytes / 1e6), floor = floor_us_per_mb(jobs[0].rec_len);
    printf("local.%s.w%d.cpu_us_per_mb %.1f us/MB\n", pre, nwriters, cpu_per_mb);
    printf("local.%s.w%d.floor_us_per_mb %.1f us/MB\n", pre, nwriters, floor);
    printf("local.%s.w%d.cpu_vs_floor %.2f x\n", pre, nwriters, floor > 0 ? cpu_per_mb / floor : 0);
    printf("local.%s.w%d.rss_peak_mb %.1f MB\n", pre, nwriters, rss_peak);
    perf_dump(s, "local-%s-w%d", pre, nwriters);
done:
    for (int t = 0; t < nthreads; t++) {
        for (int i = 0; i < jobs[t].nw; i++) dstl_writer_close(jobs[t].w[i]);
        free(jobs[t].w);
        free(jobs[t].lat_us);
    }
    dstl_storage_close(s);
    free(jobs);
    free(th);
    return 0;
}

/* ---- durable commits ---- */

typedef struct {
    dstl_storage *s;
    int id;
    double end;
    uint64_t commits;
    histo lat;
} commit_job;

static void *commit_thread(void *arg)
{
    commit_job *j = arg;
    char id[16];
    snprintf(id, sizeof id, "c%d", j->id);
    dstl_writer *w;
    if (dstl_writer_open(j->s, id, 0, 0, &w) < 0) die("writer");
    uint8_t rec[100];
    payload_fill(PAYLOAD_FILL, 3, 0, rec, sizeof rec);
    while (now_s() < j->end) {
        uint64_t from = dstl_writer_next_seq(w);
        double t0 = now_s();
        if (dstl_append(w, 0, rec, sizeof rec) < 0) die("append");
        dstl_future *f;
        if (dstl_persist(w, from, j->commits, &f) < 0) die("persist");
        if (dstl_future_wait(f, -1) < 0) die("wait");
        dstl_handle *h;
        if (dstl_future_result(f, &h) < 0) die("commit");
        dstl_future_free(f);
        histo_add(&j->lat, (uint64_t)((now_s() - t0) * 1e6));
        dstl_handle_discard(j->s, h);
        dstl_handle_free(h);
        dstl_truncate(w, dstl_writer_next_seq(w));
        j->commits++;
    }
    dstl_writer_close(w);
    return NULL;
}

static int bench_commits(const char *dir, int n, double seconds)
{
    dstl_storage *s = open_storage(dir, "0", NULL);
    commit_job *jobs = calloc((size_t)n, sizeof *jobs);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        jobs[i].s = s;
        jobs[i].id = i;
        jobs[i].end = t0 + seconds;
        pthread_create(&th[i], NULL, commit_thread, &jobs[i]);
    }
    static histo all;
    uint64_t commits = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        commits += jobs[i].commits;
        for (size_t b = 0; b < sizeof all.count / sizeof all.count[0]; b++) all.count[b] += jobs[i].lat.count[b];
        all.n += jobs[i].lat.n;
        if (jobs[i].lat.max > all.max) all.max = jobs[i].lat.max;
    }
    double el = now_s() - t0;
    dstl_stats st;
    dstl_storage_stats(s, &st);
    printf("local.commits_s_w%d %.0f commits/s\n", n, (double)commits / el);
    printf("local.commit_p50_us_w%d %" PRIu64 " us\n", n, histo_quantile(&all, 0.5));
    printf("local.commit_p99_us_w%d %" PRIu64 " us\n", n, histo_quantile(&all, 0.99));
    printf("local.commit_segments_s_w%d %.0f segments/s\n", n, (double)st.segments_written / el);
    printf("local.commit_in_place_share_w%d %.3f x\n", n,
           st.segments_written ? (double)st.segments_in_place / (double)st.segments_written : 0.0);
    perf_dump(s, "local-commits-w%d", n);
    dstl_storage_close(s);
    free(jobs);
    free(th);
    return 0;
}

/* Plain and encrypted load, alternating in quarters of `seconds` (a noisy machine slows both
 * alike), each phase on a fresh sub-dir of dir. */
static int bench_load_enc(const char *dir, int nwriters, double seconds)
{
    char kf[4096], sub[4200];
    snprintf(kf, sizeof kf, "%s/keys", dir);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) die("mkdir");
    FILE *f = fopen(kf, "w");
    if (!f) die("key file");
    fprintf(f, "bench: 5f4dcc3b5aa765d61d8327deb882cf992b95990a9151374abd8ff8c5a7a0fe08\n");
    fclose(f);
    chmod(kf, 0600);
    double bytes[2] = {0}, secs[2] = {0};
    load_quiet = 1;
    for (int q = 0; q < 4; q++) {
        int enc = q % 2;
        key_file = enc ? kf : NULL;
        snprintf(sub, sizeof sub, "%s/q%d", dir, q);
        bench_load(sub, nwriters, seconds / 4, 0);
        bytes[enc] += load_bytes;
        secs[enc] += load_secs;
    }
    double plain = bytes[0] / secs[0] / 1e6, enc = bytes[1] / secs[1] / 1e6;
    printf("local.load.w%d.plain_mb_s %.1f MB/s\n", nwriters, plain);
    printf("local.load.w%d.enc_mb_s %.1f MB/s\n", nwriters, enc);
    printf("local.enc_vs_plain %.3f x\n", plain > 0 ? enc / plain : 0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "load-enc")) return bench_load_enc(argv[2], atoi(argv[3]), atof(argv[4]));
    if (argc == 3 && !strcmp(argv[1], "append")) return bench_append(argv[2]);
    if (argc == 5 && !strcmp(argv[1], "load")) return bench_load(argv[2], atoi(argv[3]), atof(argv[4]), 0);
    if (argc == 5 && !strcmp(argv[1], "light")) return bench_load(argv[2], atoi(argv[3]), atof(argv[4]), 1);
    if (argc == 5 && !strcmp(argv[1], "commits")) return bench_commits(argv[2], atoi(argv[3]), atof(argv[4]));
    fprintf(stderr, "usage: bench_local append DIR | load DIR N S | light DIR N S | commits DIR N S\n");
    return 2;
}
