/*
 * dstl/cmd/cmd_demo.c — `dstl demo`: the product's main job on the embedded default.
 *
 * N writer threads (one per simulated operator) append a keyed-state workload in the
 * canonical state-change encoding — value updates, list appends, map puts; Zipf-popular keys;
 * values of 16 B to 4 KiB — checkpoint every second (persist from the materialization point;
 * the new handle subsumes the previous one, which is discarded), and materialize every 10 s
 * (--materialize-every; truncate at the materialization point). The main thread prints one
 * line per second. At the end every writer persists once more and the storage closes; then
 * the demo checks what the run left behind: exactly the segments its last handles reference,
 * in the local dir and under the remote prefix (its truncates, discards and close delete the
 * rest of its own segments, so it needs no sweep, and it never touches another run's files:
 * two demos can share a dir or a prefix). A fresh storage then recovers every writer from its
 * last handle and checks it record for record; the last handles are kept in
 * <dstl.local.dir>/handles/<run id>/. Exit status 0 only when all of that holds.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dstl/cmd/cmd.h"
#include "dstl/tools.h"

#define NKEYS 20000          /* distinct keys per writer */
#define ZIPF_S 1.1           /* skew: the top 1 % of keys take about half the updates */
#define NKG 128              /* key groups per writer */

static double zipf_cdf[NKEYS];
static pthread_once_t zipf_once = PTHREAD_ONCE_INIT;

static void zipf_init(void)
{
    double sum = 0;
    for (int i = 0; i < NKEYS; i++) sum += 1.0 / pow(i + 1, ZIPF_S);
    double acc = 0;
    for (int i = 0; i < NKEYS; i++) {
        acc += 1.0 / pow(i + 1, ZIPF_S) / sum;
        zipf_cdf[i] = acc;
    }
    zipf_cdf[NKEYS - 1] = 1.0;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static const char meta_payload[] = "{\"states\":[{\"id\":1,\"name\":\"counts\",\"kind\":\"value\"},"
                                   "{\"id\":2,\"name\":\"events\",\"kind\":\"list\"},"
                                   "{\"id\":3,\"name\":\"sessions\",\"kind\":\"map\"}]}";

static size_t meta_record(uint8_t *buf)
{
    wire_state_change sc = {.op = WIRE_SC_METADATA, .state_name = "metadata", .state_name_len = 8,
                            .value = meta_payload, .value_len = sizeof meta_payload - 1};
    int n = wire_sc_encode(&sc, buf, CMD_RECORD_MAX);
    return n < 0 ? 0 : (size_t)n;
}

size_t cmd_workload_record(uint32_t wid, uint64_t seq, uint32_t nkg, uint8_t *buf, uint32_t *key_group)
{
    pthread_once(&zipf_once, zipf_init);
    uint64_t r = mix(((uint64_t)wid << 40) ^ seq ^ 0x5eed);
    double u = (double)(r >> 11) / 9007199254740992.0;
    int lo = 0, hi = NKEYS - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (zipf_cdf[mid] < u) lo = mid + 1;
        else hi = mid;
    }
    uint32_t key = (uint32_t)lo;
    *key_group = (uint32_t)(mix(key) % nkg);
    r = mix(r);
    char k[24], ns[24], uk[24];
    int kl = snprintf(k, sizeof k, "user-%u", key);
    int nl = snprintf(ns, sizeof ns, "window-%" PRIu64, seq / 10000);
    /* values: mostly small, a tail up to 4 KiB */
    size_t vlen = (r & 15) == 0 ? 256 + (size_t)((r >> 8) % (4096 - 256 + 1)) : 16 + (size_t)((r >> 8) % 240);
    uint8_t val[4096];
    uint64_t v = r;
    for (size_t i = 0; i < vlen; i++) {
        if ((i & 7) == 0) v = mix(v + i);
        val[i] = (uint8_t)(v >> ((i & 7) * 8));
    }
    wire_state_change sc = {.key = k, .key_len = (size_t)kl, .ns = ns, .ns_len = (size_t)nl,
                            .value = val, .value_len = vlen};
    unsigned kind = (unsigned)((r >> 40) % 100);
    if (kind < 60) {
        sc.op = WIRE_SC_PUT;
        sc.state_id = 1;
        sc.state_name = "counts";
    } else if (kind < 85) {
        sc.op = WIRE_SC_ADD;
        sc.state_id = 2;
        sc.state_name = "events";
    } else {
        sc.op = WIRE_SC_PUT;
        sc.state_id = 3;
        sc.state_name = "sessions";
        sc.user_key = uk;
        sc.user_key_len = (size_t)snprintf(uk, sizeof uk, "session-%u", (unsigned)((r >> 48) % 64));
    }
    sc.state_name_len = strlen(sc.state_name);
    int n = wire_sc_encode(&sc, buf, CMD_RECORD_MAX);
    return n < 0 ? 0 : (size_t)n;
}

/* ---- the run ---- */

/* If every persist that completed in this many seconds failed (and some did), the demo stops:
 * three seconds cover a few checkpoints of every writer, and a refused or unreachable endpoint
 * fails each one within the future bound, so the demo ends a few seconds after the first
 * failure instead of printing lines of zeros until --duration is over. */
#define STOP_WINDOW_S 3

/* What the writers share with the main thread: persist outcomes, the stop flag. */
typedef struct {
    _Atomic uint64_t ok, failed;  /* persists completed, by outcome */
    atomic_int stop;              /* set by the main thread: writers end their loop */
    pthread_mutex_t mu;
    char last_err[600];           /* under mu: the latest failed persist's detail */
} demo_shared;

typedef struct {
    dstl_storage *s;
    demo_shared *sh;
    uint32_t wid;
    double duration_s, rate, materialize_s;
    int ok;
    char err[512];
    uint64_t mat;                /* materialization point of the last handle */
    void *last;                  /* serialized last handle */
    size_t last_len;
} writer_job;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int job_fail(writer_job *j, const char *what)
{
    snprintf(j->err, sizeof j->err, "writer %u: %s: %s", j->wid, what, dstl_last_error());
    j->ok = 0;
    return -1;
}

/* Waits for a checkpoint's persist; the new handle subsumes (discards) the previous one. A
 * failed checkpoint is counted, not fatal: its records stay in the writer and the next persist
 * writes them again (the main thread stops the demo when every persist fails); only the last
 * one (final) must succeed. */
static int complete_checkpoint(writer_job *j, dstl_future *f, dstl_handle **prev, int final)
{
    if (dstl_future_wait(f, -1) < 0) return job_fail(j, "wait");
    dstl_handle *h = NULL;
    int rc = dstl_future_result(f, &h);
    dstl_future_free(f);
    if (rc < 0) {
        atomic_fetch_add(&j->sh->failed, 1);
        pthread_mutex_lock(&j->sh->mu);
        snprintf(j->sh->last_err, sizeof j->sh->last_err, "%s", dstl_last_error());
        pthread_mutex_unlock(&j->sh->mu);
        return final ? job_fail(j, "persist") : -1;
    }
    atomic_fetch_add(&j->sh->ok, 1);
    if (*prev) {
        dstl_handle_discard(j->s, *prev);
        dstl_handle_free(*prev);
    }
    *prev = h;
    return 0;
}

static void *writer_main(void *arg)
{
    writer_job *j = arg;
    char id[32];
    snprintf(id, sizeof id, "operator-%02u", j->wid);
    dstl_writer *w = NULL;
    if (dstl_writer_open(j->s, id, 0, NKG - 1, &w) < 0) {
        job_fail(j, "open");
        return NULL;
    }
    uint8_t *buf = malloc(CMD_RECORD_MAX);
    dstl_handle *prev = NULL;
    dstl_future *pending = NULL;
    uint64_t cp = 1;
    double t0 = now_s(), next_cp = t0 + 1, next_mat = t0 + j->materialize_s, end = t0 + j->duration_s;
    uint64_t appended = 0;
    if (dstl_append_meta(w, buf, meta_record(buf)) < 0) job_fail(j, "append meta");
    while (j->ok && now_s() < end && !atomic_load(&j->sh->stop)) {
        /* append at the target rate, in bursts of 100 */
        for (int i = 0; i < 100 && j->ok; i++) {
            uint32_t kg;
            size_t len = cmd_workload_record(j->wid, dstl_writer_next_seq(w), NKG, buf, &kg);
            if (dstl_append(w, kg, buf, len) < 0) job_fail(j, "append");
            appended++;
        }
        double t = now_s();
        if (t >= next_cp && j->ok) {
            if (pending) complete_checkpoint(j, pending, &prev, 0);
            pending = NULL;
            if (j->ok && dstl_persist(w, j->mat, cp++, &pending) < 0) job_fail(j, "persist");
            next_cp += 1;
        }
        if (t >= next_mat && j->ok) {
            /* Materialization: the state up to here is in a snapshot now. */
            uint64_t m = dstl_writer_next_seq(w);
            if (pending) complete_checkpoint(j, pending, &prev, 0);
            pending = NULL;
            if (j->ok && dstl_truncate(w, m) < 0) job_fail(j, "truncate");
            j->mat = m;
            if (j->ok && dstl_append_meta(w, buf, meta_record(buf)) < 0) job_fail(j, "append meta");
            next_mat += j->materialize_s;
        }
        double ahead = (double)appended / j->rate - (now_s() - t0);
        if (ahead > 0) usleep((useconds_t)(ahead * 1e6));
    }
    if (pending) complete_checkpoint(j, pending, &prev, 0);
    /* the final checkpoint: what recovery must give back (none when the demo was stopped) */
    if (atomic_load(&j->sh->stop)) j->ok = 0;
    else if (j->ok && dstl_persist(w, j->mat, cp++, &pending) == 0) complete_checkpoint(j, pending, &prev, 1);
    else if (j->ok) job_fail(j, "final persist");
    if (j->ok && dstl_handle_serialize(prev, &j->last, &j->last_len) < 0) job_fail(j, "serialize");
    dstl_handle_free(prev);
    if (dstl_writer_close(w) < 0) job_fail(j, "close");
    free(buf);
    return NULL;
}

/* Reads writer j's last handle through storage s and checks every record. */
static int recover_and_check(dstl_storage *s, writer_job *j, uint64_t *records, dstl_handle **keep)
{
    dstl_handle *h = NULL;
    if (dstl_handle_parse(j->last, j->last_len, &h) < 0) return job_fail(j, "parse handle");
    dstl_reader *r = NULL;
    if (dstl_reader_open(s, h, 0, NKG - 1, &r) < 0) {
        dstl_handle_free(h);
        return job_fail(j, "open reader");
    }
    uint8_t *want = malloc(CMD_RECORD_MAX);
    uint64_t seq = dstl_handle_from_seq(h), n = 0;
    dstl_record rec;
    int rc;
    while ((rc = dstl_reader_next(r, &rec)) == 1) {
        size_t len;
        uint32_t kg = 0;
        if (rec.seq != seq) {
            snprintf(j->err, sizeof j->err, "writer %u: record seq %" PRIu64 " where %" PRIu64 " was expected", j->wid,
                     rec.seq, seq);
            j->ok = 0;
            break;
        }
        if (rec.is_meta) len = meta_record(want);
        else len = cmd_workload_record(j->wid, seq, NKG, want, &kg);
        if (rec.len != len || memcmp(rec.data, want, len) != 0 || (!rec.is_meta && rec.key_group != kg)) {
            snprintf(j->err, sizeof j->err, "writer %u: record %" PRIu64 " differs from what was appended", j->wid, seq);
            j->ok = 0;
            break;
        }
        seq++;
        n++;
    }
    if (rc < 0) job_fail(j, "read");
    else if (j->ok && seq != dstl_handle_to_seq(h)) {
        snprintf(j->err, sizeof j->err, "writer %u: records end at %" PRIu64 ", the handle says %" PRIu64, j->wid, seq,
                 dstl_handle_to_seq(h));
        j->ok = 0;
    }
    free(want);
    dstl_reader_close(r);
    *records += n;
    *keep = h;
    return j->ok ? 0 : -1;
}

/* ---- what the run leaves behind ---- */

typedef struct {
    char **v;
    size_t n, cap;
} name_set;

static int names_add(name_set *ns, const char *name)
{
    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? ns->cap * 2 : 64;
        char **v = realloc(ns->v, cap * sizeof *v);
        if (!v) return -ENOMEM;
        ns->v = v;
        ns->cap = cap;
    }
    if (!(ns->v[ns->n] = strdup(name))) return -ENOMEM;
    ns->n++;
    return 0;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorts and drops duplicates. */
static void names_sort(name_set *ns)
{
    if (!ns->n) return;
    qsort(ns->v, ns->n, sizeof *ns->v, cmp_name);
    size_t k = 1;
    for (size_t i = 1; i < ns->n; i++) {
        if (strcmp(ns->v[i], ns->v[k - 1]) == 0) free(ns->v[i]);
        else ns->v[k++] = ns->v[i];
    }
    ns->n = k;
}

static void names_free(name_set *ns)
{
    for (size_t i = 0; i < ns->n; i++) free(ns->v[i]);
    free(ns->v);
    *ns = (name_set){0};
}

/* Whether name is a segment of run ("<run id>-<number>.seg"). */
static int of_run(const char *run, const char *name)
{
    size_t n = strlen(run), len = strlen(name), sl = strlen(SEGSTORE_SUFFIX);
    return len > n + 1 + sl && strncmp(name, run, n) == 0 && name[n] == '-' &&
           strcmp(name + len - sl, SEGSTORE_SUFFIX) == 0;
}

typedef struct {
    const char *run;
    name_set *found;
    int err;
} local_scan;

static int collect_local(void *arg, const char *name, uint64_t size, int64_t mtime_ms)
{
    (void)size;
    (void)mtime_ms;
    local_scan *ls = arg;
    if (of_run(ls->run, name) && names_add(ls->found, name) < 0) return ls->err = -ENOMEM;
    return 0;
}

/* This run's segment objects under the remote prefix (keys exactly where remote_key puts a
 * segment). 0, or < 0 with the error printed. */
static int collect_remote(const dstl_config *c, const char *run, name_set *found, char *where, size_t where_cap)
{
    config_values cv;
    remote_loc loc;
    int rc = config_resolve(c, &cv);
    if (rc == 0) rc = remote_parse_uri(cv.remote_uri, "key 'dstl.remote.uri'", &loc);
    if (rc < 0) {
        fprintf(stderr, "dstl demo: %s\n", dstl_last_error());
        return rc;
    }
    snprintf(where, where_cap, "s3://%s/%s", loc.bucket, loc.prefix);
    s3_client *cli = NULL;
    if ((rc = remote_client_new(&cv, &cli)) < 0) {
        fprintf(stderr, "dstl demo: %s: %s\n", where, dstl_last_error());
        return rc;
    }
    char prefix[520];
    remote_list_prefix(&loc, prefix, sizeof prefix);
    s3_list l;
    memset(&l, 0, sizeof l);
    s3_result r;
    memset(&r, 0, sizeof r);
    rc = s3_list_objects_all_sync(cli, loc.bucket, prefix, 0, &l, &r);
    if (rc < 0) fprintf(stderr, "dstl demo: list %s: %s\n", where, *r.error ? r.error : dstl_strerror(rc));
    for (size_t i = 0; rc == 0 && i < l.n_objects; i++) {
        const char *key = l.objects[i].key, *name = strrchr(key, '/');
        name = name ? name + 1 : key;
        char want[640];
        if (!of_run(run, name) || remote_key(&loc, name, want, sizeof want) < 0 || strcmp(want, key) != 0) continue;
        if ((rc = names_add(found, name)) < 0) fprintf(stderr, "dstl demo: out of memory\n");
    }
    s3_list_clear(&l);
    s3_client_free(cli);
    return rc;
}

/* Compares what is left (found) with what the last handles reference (want), both sorted;
 * prints the difference. 1 when they are the same set. */
static int same_set(const name_set *found, const name_set *want, const char *where)
{
    size_t extra = 0, missing = 0, i = 0, k = 0;
    const char *first_extra = NULL, *first_missing = NULL;
    while (i < found->n || k < want->n) {
        int d = i == found->n ? 1 : k == want->n ? -1 : strcmp(found->v[i], want->v[k]);
        if (d < 0) {
            if (!extra++) first_extra = found->v[i];
            i++;
        } else if (d > 0) {
            if (!missing++) first_missing = want->v[k];
            k++;
        } else {
            i++;
            k++;
        }
    }
    if (extra)
        fprintf(stderr, "dstl demo: %s holds %zu segment(s) of this run that no last handle references (first: %s)\n",
                where, extra, first_extra);
    if (missing)
        fprintf(stderr, "dstl demo: %s lacks %zu segment(s) the last handles reference (first: %s)\n", where, missing,
                first_missing);
    return !extra && !missing;
}

/* After the run's storage closed: its segments left locally and remotely must be exactly the
 * ones its last handles reference. Prints one line; 0 when that holds, -1 otherwise. */
static int check_footprint(const dstl_config *c, const char *run, writer_job *jobs, int nwriters, uint64_t written)
{
    name_set want = {0}, local = {0}, remote = {0};
    int ok = 1;
    for (int i = 0; ok && i < nwriters; i++) {
        wire_handle *wh = NULL;
        wire_err e = {{0}};
        if (wire_handle_decode(jobs[i].last, jobs[i].last_len, &wh, &e) < 0) {
            fprintf(stderr, "dstl demo: writer %d: its last handle does not decode: %s\n", i, e.msg);
            ok = 0;
            break;
        }
        for (size_t k = 0; ok && k < wh->nsegs; k++) {
            if (!of_run(run, wh->segs[k].name)) {
                fprintf(stderr, "dstl demo: writer %d: its last handle references %s, not a segment of this run\n", i,
                        wh->segs[k].name);
                ok = 0;
            } else if (names_add(&want, wh->segs[k].name) < 0) {
                fprintf(stderr, "dstl demo: out of memory\n");
                ok = 0;
            }
        }
        wire_handle_free(wh);
    }
    names_sort(&want);
    const char *dir = dstl_config_get(c, "dstl.local.dir"), *uri = dstl_config_get(c, "dstl.remote.uri");
    local_scan ls = {.run = run, .found = &local};
    if (ok) {
        int rc = segstore_list(dir, collect_local, &ls);
        if (rc < 0) {
            fprintf(stderr, "dstl demo: %s\n", ls.err ? "out of memory" : dstl_last_error());
            ok = 0;
        }
    }
    names_sort(&local);
    if (ok) ok = same_set(&local, &want, dir);
    char where[600] = "";
    if (ok && *uri) {
        ok = collect_remote(c, run, &remote, where, sizeof where) == 0;
        names_sort(&remote);
        if (ok) ok = same_set(&remote, &want, where);
    }
    if (ok)
        printf("footprint: this run (%s) wrote %" PRIu64 " segments and deleted %" PRIu64 " of them itself (truncate, "
               "discard, close); %zu remain, exactly the ones its last handles reference, in %s%s%s\n",
               run, written, written >= local.n ? written - local.n : 0, local.n, dir, *where ? " and " : "", where);
    names_free(&want);
    names_free(&local);
    names_free(&remote);
    return ok ? 0 : -1;
}

typedef struct {
    int nwriters;
    double duration, rate, materialize;
} demo_args;

/* 0, or 2 (usage) after saying what is wrong. */
static int parse_args(int argc, char **argv, demo_args *a)
{
    *a = (demo_args){.nwriters = 16, .duration = 15, .rate = 4000, .materialize = 10};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--writers") && i + 1 < argc) a->nwriters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--duration") && i + 1 < argc) a->duration = atof(argv[++i]);
        else if (!strcmp(argv[i], "--rate") && i + 1 < argc) a->rate = atof(argv[++i]);
        else if (!strcmp(argv[i], "--materialize-every") && i + 1 < argc) a->materialize = atof(argv[++i]);
        else {
            fprintf(stderr, "dstl demo: unknown argument %s\n"
                            "usage: dstl demo [--writers N] [--duration S] [--rate RECORDS_PER_S_PER_WRITER] "
                            "[--materialize-every S]\n", argv[i]);
            return 2;
        }
    }
    if (a->nwriters < 1 || a->nwriters > 4096 || a->duration <= 0 || a->duration > 86400 || a->rate <= 0 ||
        !(a->materialize >= 1)) {
        fprintf(stderr, "dstl demo: --writers 1..4096, --duration 0..86400 s, --rate > 0 and --materialize-every "
                        ">= 1 s\n");
        return 2;
    }
    return 0;
}

/* A histogram-bucket latency (an upper bound of its bucket) in ms, for "p99 <= 69.8 ms". */
static double ms(uint64_t us) { return (double)us / 1000.0; }

/* One line of counters per second while the writers run. Returns 1 when it stopped the demo
 * early (every persist of the last STOP_WINDOW_S seconds failed), after saying so once. */
static int print_progress(dstl_storage *s, demo_shared *sh, double duration)
{
    /* p50/p99 are bucket bounds (within 1/16 above the true value): hence "<=". */
    printf("%4s %10s %8s %9s %8s %9s %10s %10s %12s %9s\n", "sec", "records/s", "MB/s", "persists/s", "failed/s",
           "segments/s", "p50<=ms", "p99<=ms", "in_flight_B", "live_segs");
    dstl_stats prev = {0}, st;
    uint64_t ok_at[STOP_WINDOW_S + 1] = {0}, failed_at[STOP_WINDOW_S + 1] = {0};
    double t0 = now_s();
    for (int sec = 1; now_s() - t0 < duration + 0.5; sec++) {
        double d = t0 + sec - now_s();
        if (d > 0) usleep((useconds_t)(d * 1e6));
        dstl_storage_stats(s, &st);
        printf("%4d %10" PRIu64 " %8.1f %9" PRIu64 " %8" PRIu64 " %9" PRIu64 " %10.1f %10.1f %12" PRIu64 " %9" PRIu64 "\n",
               sec, st.appends - prev.appends, (double)(st.append_bytes - prev.append_bytes) / 1e6,
               st.persists - prev.persists, st.persist_failures - prev.persist_failures,
               st.segments_written - prev.segments_written, ms(st.persist_p50_us), ms(st.persist_p99_us),
               st.in_flight_bytes, st.segments_written - st.segments_deleted);
        fflush(stdout);
        prev = st;
        /* the outcomes of the last STOP_WINDOW_S seconds: a ring of the counters */
        memmove(ok_at, ok_at + 1, STOP_WINDOW_S * sizeof ok_at[0]);
        memmove(failed_at, failed_at + 1, STOP_WINDOW_S * sizeof failed_at[0]);
        ok_at[STOP_WINDOW_S] = atomic_load(&sh->ok);
        failed_at[STOP_WINDOW_S] = atomic_load(&sh->failed);
        if (sec > STOP_WINDOW_S && ok_at[STOP_WINDOW_S] == ok_at[0] && failed_at[STOP_WINDOW_S] > failed_at[0]) {
            atomic_store(&sh->stop, 1);
            pthread_mutex_lock(&sh->mu);
            fprintf(stderr, "dstl demo: stopping early: every persist of the last %d s failed (%" PRIu64 " failed, "
                            "none succeeded); the last error: %s\n", STOP_WINDOW_S,
                    failed_at[STOP_WINDOW_S] - failed_at[0], sh->last_err);
            pthread_mutex_unlock(&sh->mu);
            return 1;
        }
    }
    return 0;
}

/* The plan, before anything runs: what the demo will do, and where. */
static void print_plan(const dstl_config *c, const demo_args *a)
{
    const char *uri = dstl_config_get(c, "dstl.remote.uri"), *ep = dstl_config_get(c, "dstl.s3.endpoint");
    printf("dstl demo plan: %d writers x %.0f records/s for %.0f s; checkpoint (persist) every 1 s, materialize "
           "(truncate) every %.0f s\n", a->nwriters, a->rate, a->duration, a->materialize);
    printf("  durability %s, persist-delay %s, local dir %s\n", dstl_config_get(c, "dstl.durability"),
           dstl_config_get(c, "dstl.batch.persist-delay"), dstl_config_get(c, "dstl.local.dir"));
    if (*uri) printf("  remote %s at %s\n", uri, *ep ? ep : "AWS (dstl.s3.endpoint empty)");
    else printf("  remote: none (dstl.remote.uri empty: local only)\n");
    printf("  then: close, check what is left, recover every writer from its last handle in a fresh storage\n");
    fflush(stdout);
}

/* Recovery through a fresh storage, as after a restart: every writer's last handle read back
 * and checked. keep[] gets the handles (for save_handles). 0 or -1 after saying why. */
static int recover_all(dstl_config *c, writer_job *jobs, int nwriters, dstl_handle **keep, size_t *nkeep,
                       uint64_t *records)
{
    dstl_storage *s = NULL;
    if (cmd_open_storage(c, "demo: reopen", &s) < 0) return -1;
    int ok = 1;
    for (int i = 0; i < nwriters; i++) {
        dstl_handle *h = NULL;
        if (recover_and_check(s, &jobs[i], records, &h) < 0) {
            fprintf(stderr, "dstl demo: recovery: %s\n", jobs[i].err);
            ok = 0;
        }
        if (h) keep[(*nkeep)++] = h;
    }
    dstl_storage_close(s);
    return ok ? 0 : -1;
}

/* Keeps the last handles beside the data, for `dstl cat` and `dstl gc --live`: one directory
 * per run, so demos sharing a dir keep theirs apart. 0 or -1 after saying why. */
static int save_handles(dstl_config *c, const char *run, dstl_handle *const *keep, size_t nkeep)
{
    char hdir[4200];
    snprintf(hdir, sizeof hdir, "%s/handles", dstl_config_get(c, "dstl.local.dir"));
    if (mkdir(hdir, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "dstl demo: mkdir %s: %s\n", hdir, strerror(errno));
        return -1;
    }
    size_t n = strlen(hdir);
    snprintf(hdir + n, sizeof hdir - n, "/%s", run);
    if (mkdir(hdir, 0755) < 0) {
        fprintf(stderr, "dstl demo: mkdir %s: %s\n", hdir, strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < nkeep; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s.handle", hdir, dstl_handle_writer_id(keep[i]));
        int rc = cmd_write_handle(path, keep[i]);
        if (rc < 0) {
            fprintf(stderr, "dstl demo: writing %s: %s\n", path, dstl_strerror(rc));
            return -1;
        }
    }
    printf("last handles: %s/*.handle (try: dstl cat %s/%s.handle)\n", hdir, hdir, dstl_handle_writer_id(keep[0]));
    return 0;
}

/* Runs the writers on s and prints progress; 1 when every writer ended well, 0 when one
 * failed (each says why), -1 when the demo stopped early (one message: print_progress). */
static int run_writers(dstl_storage *s, const demo_args *a, writer_job *jobs)
{
    demo_shared sh = {0};
    pthread_mutex_init(&sh.mu, NULL);
    pthread_t *th = calloc((size_t)a->nwriters, sizeof *th);
    int ok = th != NULL;
    for (int i = 0; ok && i < a->nwriters; i++) {
        jobs[i] = (writer_job){.s = s, .sh = &sh, .wid = (uint32_t)i, .duration_s = a->duration, .rate = a->rate,
                               .materialize_s = a->materialize, .ok = 1};
        pthread_create(&th[i], NULL, writer_main, &jobs[i]);
    }
    int stopped = ok ? print_progress(s, &sh, a->duration) : 0;
    for (int i = 0; th && i < a->nwriters; i++) {
        pthread_join(th[i], NULL);
        if (!jobs[i].ok && !stopped) fprintf(stderr, "dstl demo: %s\n", jobs[i].err);
        if (!jobs[i].ok) ok = 0;
    }
    free(th);
    pthread_mutex_destroy(&sh.mu);
    return stopped ? -1 : ok;
}

int cmd_demo(const cmd_globals *g, int argc, char **argv)
{
    demo_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    int nwriters = a.nwriters;
    dstl_config *c = cmd_config(g, NULL);
    if (!c) return 1;
    print_plan(c, &a);
    dstl_storage *s = NULL;
    if (cmd_open_storage(c, "demo", &s) < 0) {
        dstl_config_free(c);
        return 1;
    }
    char run[64];
    snprintf(run, sizeof run, "%s", storage_run_id(s));
    printf("dstl demo: run %s\n", run);
    writer_job *jobs = calloc((size_t)nwriters, sizeof *jobs);
    int ran = jobs ? run_writers(s, &a, jobs) : 0, ok = ran == 1;
    dstl_stats st;
    dstl_storage_stats(s, &st);
    printf("total: %" PRIu64 " records, %.1f MB, %" PRIu64 " persists (%" PRIu64 " failed), %" PRIu64
           " segments, %" PRIu64 " deleted, persist p50 <= %.1f ms, p99 <= %.1f ms, max %.1f ms\n",
           st.appends, (double)st.append_bytes / 1e6, st.persists, st.persist_failures, st.segments_written,
           st.segments_deleted, ms(st.persist_p50_us), ms(st.persist_p99_us), ms(st.persist_max_us));
    if (dstl_storage_close(s) < 0) {
        fprintf(stderr, "dstl demo: close: %s\n", dstl_last_error());
        ok = 0;
    }
    /* No sweep: the run deleted what it no longer needs itself; check that it did, and that
     * it left exactly what its last handles need (other runs' files are not looked at). */
    if (ok && check_footprint(c, run, jobs, nwriters, st.segments_written) < 0) ok = 0;
    uint64_t records = 0;
    dstl_handle **keep = calloc((size_t)nwriters, sizeof *keep);
    size_t nkeep = 0;
    /* The recovery storage only reads: it must not replace the run's metrics file (its final
     * totals, written at close) with its own zeros. */
    if (ok && dstl_config_set(c, "dstl.metrics.file", "") < 0) ok = 0;
    if (ok && recover_all(c, jobs, nwriters, keep, &nkeep, &records) < 0) ok = 0;
    if (ok && nkeep && save_handles(c, run, keep, nkeep) < 0) ok = 0;
    for (size_t i = 0; i < nkeep; i++) dstl_handle_free(keep[i]);
    free(keep);
    if (ran < 0) printf("recovery: not checked: the demo stopped early (above)\n");
    else printf("recovery: %d writers, %" PRIu64 " records read back and checked: %s\n", nwriters, records,
                ok ? "OK" : "FAILED");
    for (int i = 0; jobs && i < nwriters; i++) free(jobs[i].last);
    free(jobs);
    dstl_config_free(c);
    return ok ? 0 : 1;
}
