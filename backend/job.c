/*
 * backend/job.c — the job and its checkpoint coordinator (job.h): workers apply updates and
 * answer barriers, the coordinator (job_run's thread) triggers, completes, skips and discards.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/job_int.h"

double job_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

size_t job_key(uint64_t k, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "key-%" PRIu64, k);
    return n < 0 ? 0 : (size_t)n;
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Value bytes derived from the random word r (cheap, and every update changes them). */
static void fill_value(unsigned char *v, size_t n, uint64_t r)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = r + i * 0x9e3779b97f4a7c15ull;
        memcpy(v + i, &w, n - i < 8 ? n - i : 8);
    }
}

static void sleep_s(double s) { nanosleep(&(struct timespec){(time_t)s, (long)((s - (time_t)s) * 1e9)}, NULL); }

static void fail(job *j, int rc, const char *what, uint32_t task)
{
    fprintf(stderr, "job %s: %s of task %u: %s (%s)\n", j->o.name, what, task, dstl_strerror(rc),
            dstl_last_error());
    int none = 0;
    atomic_compare_exchange_strong(&j->err, &none, rc);
}

/* ---- the workload ---- */

/* One update of task t: 85 % ValueState puts, 12 % MapState puts (4 user keys per key), 3 %
 * ValueState deletes (the key comes back with its next put). */
static int update(job *j, uint32_t ti, uint64_t *rng, unsigned char *val)
{
    uint64_t r = xorshift(rng);
    uint64_t k = j->task_keys[ti][r % j->ntask_keys[ti]];
    char key[32], uk[16];
    size_t klen = job_key(k, key, sizeof key);
    unsigned kind = (unsigned)((r >> 40) % 100);
    bk_task *t = j->tasks[ti];
    if (kind < 85) {
        fill_value(val, j->o.value_len, r);
        return bk_value_put(t, key, klen, val, j->o.value_len);
    }
    if (kind < 97) {
        int ulen = snprintf(uk, sizeof uk, "u%u", (unsigned)(r >> 56) % 4);
        fill_value(val, 32, r);
        return bk_map_put(t, key, klen, uk, (size_t)ulen, val, 32);
    }
    return bk_value_delete(t, key, klen);
}

static void part_done(bk_part *p, void *arg)
{
    (void)p;
    ckpt *c = arg;
    uint64_t t = now_ns(), d = atomic_load(&c->done_ns);
    while (d < t && !atomic_compare_exchange_weak(&c->done_ns, &d, t)) {}
    atomic_fetch_sub(&c->pending, 1);
}

static void barrier(job *j, ckpt *c, uint32_t ti)
{
    int rc = bk_checkpoint(j->tasks[ti], c->id, part_done, c, &c->parts[ti]);
    if (rc < 0) {                              /* this checkpoint fails; the job goes on */
        fprintf(stderr, "job %s: checkpoint %" PRIu64 " of task %u: %s (%s)\n", j->o.name, c->id, ti,
                dstl_strerror(rc), dstl_last_error());
        atomic_store(&c->failed, 1);
        atomic_fetch_sub(&c->pending, 1);      /* no callback will come */
    }
    uint64_t t = now_ns(), b = atomic_load(&c->barrier_ns);
    while (b < t && !atomic_compare_exchange_weak(&c->barrier_ns, &b, t)) {}
    atomic_fetch_sub(&c->pending, 1);          /* registered */
}

typedef struct {
    job *j;
    uint32_t w;
    uint64_t seen;                             /* the newest checkpoint id answered */
} worker_arg;

/* A new trigger: the barrier reaches every task of the worker. Called between update slices
 * and, through bk_task_set_yield, inside a materialization's copy of a task's state. */
static void answer_barriers(worker_arg *a)
{
    job *j = a->j;
    if (atomic_load(&j->trigger_id) <= a->seen) return;
    ckpt *c = atomic_load(&j->trigger);        /* at least as new as the id: alive */
    a->seen = c->id;
    for (uint32_t i = a->w; i < j->o.parallelism; i += j->o.workers) barrier(j, c, i);
}

static void yield_to_barriers(void *arg) { answer_barriers(arg); }

static void *worker(void *arg)
{
    worker_arg *a = arg;
    job *j = a->j;
    uint32_t W = j->o.workers, P = j->o.parallelism;
    uint64_t rng = 0x2545f4914f6cdd1dull ^ ((uint64_t)a->w + 1) * 0x9e3779b97f4a7c15ull;
    unsigned char *val = malloc(j->o.value_len > 32 ? j->o.value_len : 32);
    double rate = j->o.updates_per_s / W, start = job_now_s();
    double *next_mat = calloc(P, sizeof *next_mat);
    for (uint32_t i = a->w; i < P; i += W)     /* staggered: task i first at (i + 1) / P of M */
        next_mat[i] = start + j->o.materialize_s * (i + 1) / P;
    uint64_t done = 0;
    uint32_t rr = a->w;
    if (!j->o.no_yield)
        for (uint32_t i = a->w; i < P; i += W) bk_task_set_yield(j->tasks[i], yield_to_barriers, a);
    while (!atomic_load(&j->stop) && val && next_mat) {
        answer_barriers(a);
        double now = job_now_s();
        for (uint32_t i = a->w; i < P; i += W) {
            int rc = bk_poll(j->tasks[i]);
            if (rc < 0) {                      /* the old snapshot stays; the next one retries */
                fprintf(stderr, "job %s: materialization of task %u failed: %s\n", j->o.name, i, dstl_strerror(rc));
                atomic_fetch_add(&j->mat_failures, 1);
            }
            if (j->o.mode == BK_CHANGELOG && now >= next_mat[i]) {
                if ((rc = bk_materialize(j->tasks[i])) < 0) fail(j, rc, "materialize", i);
                next_mat[i] += j->o.materialize_s;
            }
        }
        /* catch up with the offered rate in slices of at most 1 ms of updates, so a barrier
         * waits at most that long for its worker */
        uint64_t target = (uint64_t)((now - start) * rate), slice = (uint64_t)(rate / 1000) + 1;
        if (target - done > 10 * slice * 1000) done = target - slice; /* never a burst after a stall */
        for (uint64_t n = 0; done < target && n < slice; n++, done++) {
            int rc = update(j, rr, &rng, val);
            if (rc < 0) fail(j, rc, "update", rr);
            rr += W;
            if (rr >= P) rr = a->w;
            atomic_fetch_add(&j->updates, 1);
        }
        if (done >= target) sleep_s(0.0005);
    }
    for (uint32_t i = a->w; i < P; i += W) bk_task_set_yield(j->tasks[i], NULL, NULL);
    free(val);
    free(next_mat);
    return NULL;
}

/* ---- the coordinator ---- */

static ckpt *ckpt_new(job *j, uint64_t id)
{
    ckpt *c = calloc(1, sizeof *c);
    if (!c || !(c->parts = calloc(j->o.parallelism, sizeof *c->parts))) {
        free(c);
        return NULL;
    }
    c->id = id;
    c->trigger_s = job_now_s();
    atomic_init(&c->pending, (int)(2 * j->o.parallelism));
    return c;
}

static void ckpt_release(job *j, ckpt *c, int discard)
{
    if (!c) return;
    for (uint32_t i = 0; i < j->o.parallelism; i++)
        if (discard) bk_part_discard(c->parts[i]);
        else bk_part_free(c->parts[i]);
    free(c->parts);
    free(c);
}

/* A checkpoint whose parts are all in: completed (the previous one is subsumed: its handles
 * are discarded, the notification Flink's checkpoint coordinator sends) or failed (aborted). */
static int ckpt_finish(job *j, ckpt *c, job_result *r)
{
    int ok = !atomic_load(&c->failed);
    for (uint32_t i = 0; ok && i < j->o.parallelism; i++)
        if (bk_part_result(c->parts[i]) < 0) {    /* counted, not fatal: the next one may pass */
            fprintf(stderr, "job %s: checkpoint %" PRIu64 " failed: task %u: %s\n", j->o.name, c->id, i,
                    dstl_strerror(bk_part_result(c->parts[i])));
            ok = 0;
        }
    if (!ok) {
        if (r) r->failed++;
        ckpt_release(j, c, 1);
        return -1;
    }
    if (r) {
        double d = (double)atomic_load(&c->done_ns) / 1e9 - c->trigger_s;
        r->durations_ms[r->completed] = d * 1000;
        r->barriers_ms[r->completed] = ((double)atomic_load(&c->barrier_ns) / 1e9 - c->trigger_s) * 1000;
        r->completed_at_s[r->completed] = job_now_s() - j->t0;
        r->completed++;
        for (uint32_t i = 0; i < j->o.parallelism; i++)
            if (bk_part_changelog(c->parts[i]))
                r->changelog_bytes_persisted += dstl_handle_size(bk_part_changelog(c->parts[i]));
    }
    /* DURABILITY: every part of c is durable, so c is complete and restorable by itself:
     * only now is the previous checkpoint subsumed and its handles discarded. A crash before
     * this line leaves both checkpoints' segments (the previous one still complete). */
    ckpt_release(j, j->last, 1);
    j->last = c;
    return 0;
}

static int grow_result(job_result *r, size_t *cap)
{
    if (r->completed < *cap) return 0;
    size_t n = *cap ? *cap * 2 : 512;
    double *d = realloc(r->durations_ms, n * sizeof *d);
    if (d) r->durations_ms = d;
    double *a = realloc(r->completed_at_s, n * sizeof *a);
    if (a) r->completed_at_s = a;
    double *b = realloc(r->barriers_ms, n * sizeof *b);
    if (b) r->barriers_ms = b;
    if (!d || !a || !b) return -ENOMEM;
    *cap = n;
    return 0;
}

static void coordinate(job *j, job_result *r)
{
    uint64_t id = 0;
    size_t cap = 0;
    ckpt *running = NULL;
    double every = j->o.report_s > 0 ? j->o.report_s : 10;
    double next = j->t0 + j->o.interval_s, report = j->t0 + every;
    for (;;) {
        double now = job_now_s(), el = now - j->t0;
        if (running && atomic_load(&running->pending) == 0) {
            if (grow_result(r, &cap) < 0) break;
            ckpt_finish(j, running, r);
            running = NULL;
        }
        if (!running && ((r->completed >= j->o.min_checkpoints && el >= j->o.min_s) || el >= j->o.max_s || j->err))
            break;
        if (now >= next) {
            next += j->o.interval_s;
            if (next < now) next = now + j->o.interval_s;
            if (running) r->skipped++;
            else if ((running = ckpt_new(j, ++id))) {
                atomic_store(&j->trigger, running);
                atomic_store(&j->trigger_id, id);
            }
        }
        if (j->o.verbose && now >= report) {
            report += every;
            uint64_t mats = 0;
            for (uint32_t i = 0; i < j->o.parallelism; i++) mats += bk_materializations(j->tasks[i]);
            printf("  %s: %.0f s, %" PRIu64 " checkpoints completed (last %.0f ms), %" PRIu64 " skipped, %" PRIu64
                   " updates, %" PRIu64 " materializations\n", j->o.name, el, r->completed,
                   r->completed ? r->durations_ms[r->completed - 1] : 0.0, r->skipped,
                   (uint64_t)atomic_load(&j->updates), mats);
            fflush(stdout);
        }
        sleep_s(0.0002);
    }
    r->run_s = job_now_s() - j->t0;
}

/* The last, quiet checkpoint (workers stopped): taken on this thread, waited for. */
static int final_checkpoint(job *j)
{
    ckpt *c = ckpt_new(j, UINT32_MAX);
    if (!c) return -ENOMEM;
    for (uint32_t i = 0; i < j->o.parallelism; i++) {
        /* -EAGAIN: a first materialization is still running; it completes by itself */
        while (bk_checkpoint(j->tasks[i], c->id, part_done, c, &c->parts[i]) == -EAGAIN && !j->err) {
            int rc = bk_poll(j->tasks[i]);
            if (rc < 0) fail(j, rc, "materialization", i);
            sleep_s(0.01);
        }
        if (!c->parts[i]) {
            atomic_store(&c->failed, 1);
            atomic_fetch_sub(&c->pending, 1);
        }
        atomic_fetch_sub(&c->pending, 1);
    }
    while (atomic_load(&c->pending) > 0) sleep_s(0.001);
    return ckpt_finish(j, c, NULL) < 0 ? (j->err ? j->err : -EIO) : 0;
}

int job_run(job *j, job_result *r)
{
    memset(r, 0, sizeof *r);
    uint32_t W = j->o.workers;
    pthread_t *th = calloc(W, sizeof *th);
    worker_arg *wa = calloc(W, sizeof *wa);
    if (!th || !wa) {
        free(th);
        free(wa);
        return -ENOMEM;
    }
    j->t0 = job_now_s();
    uint32_t started = 0;
    for (; started < W; started++) {
        wa[started] = (worker_arg){.j = j, .w = started};
        if (pthread_create(&th[started], NULL, worker, &wa[started])) break;
        (void)pthread_setname_np(th[started], "bk-worker");
    }
    if (started == W) coordinate(j, r);
    atomic_store(&j->stop, 1);
    for (uint32_t i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
    free(wa);
    if (started < W) return -EAGAIN;
    r->updates = atomic_load(&j->updates);
    r->materialization_failures = atomic_load(&j->mat_failures);
    int rc = atomic_load(&j->err) ? atomic_load(&j->err) : final_checkpoint(j);
    for (uint32_t i = 0; i < j->o.parallelism; i++) {
        r->materializations += bk_materializations(j->tasks[i]);
        r->state_bytes += bk_task_state(j->tasks[i])->bytes;
        r->state_entries += bk_task_state(j->tasks[i])->count;
    }
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double job_quantile(const double *v, size_t n, double q)
{
    if (!n) return 0.0 / 0.0;
    double *c = malloc(n * sizeof *c);
    if (!c) return 0.0 / 0.0;
    memcpy(c, v, n * sizeof *c);
    qsort(c, n, sizeof *c, cmp_double);
    size_t i = (size_t)(q * (double)n + 0.999999);   /* nearest rank: ceil(q n), 1-based */
    double x = c[i ? (i > n ? n : i) - 1 : 0];
    free(c);
    return x;
}

void job_result_free(job_result *r)
{
    free(r->durations_ms);
    free(r->completed_at_s);
    free(r->barriers_ms);
    memset(r, 0, sizeof *r);
}

/* ---- set-up ---- */

static int load(job *j)
{
    uint32_t P = j->o.parallelism;
    j->task_keys = calloc(P, sizeof *j->task_keys);
    j->ntask_keys = calloc(P, sizeof *j->ntask_keys);
    size_t *cap = calloc(P, sizeof *cap);
    unsigned char *val = malloc(j->o.value_len + 8);
    uint32_t *owner = calloc(j->o.max_parallelism, sizeof *owner);
    int rc = (j->task_keys && j->ntask_keys && cap && val && owner) ? 0 : -ENOMEM;
    for (uint32_t i = 0; rc == 0 && i < P; i++) {
        uint32_t f, l;
        bk_task_range(j->tasks[i], &f, &l);
        for (uint32_t g = f; g <= l; g++) owner[g] = i;
    }
    char key[32];
    for (uint64_t k = 0; rc == 0 && k < j->o.keys; k++) {
        size_t klen = job_key(k, key, sizeof key);
        uint32_t ti = owner[dstl_key_group(key, klen, j->o.max_parallelism)];
        if (j->ntask_keys[ti] == cap[ti]) {
            size_t n = cap[ti] ? cap[ti] * 2 : 1024;
            uint64_t *a = realloc(j->task_keys[ti], n * sizeof *a);
            if (!a) { rc = -ENOMEM; break; }
            j->task_keys[ti] = a;
            cap[ti] = n;
        }
        j->task_keys[ti][j->ntask_keys[ti]++] = k;
        fill_value(val, j->o.value_len, k * 0x2545f4914f6cdd1dull);
        rc = bk_load_value(j->tasks[ti], key, klen, val, j->o.value_len);
    }
    for (uint32_t i = 0; rc == 0 && i < P; i++)
        if (!j->ntask_keys[i]) rc = -EINVAL;   /* too few keys for the parallelism */
    free(cap);
    free(val);
    free(owner);
    return rc;
}

/* Changelog mode: one materialization of every task before the run, as after a restore. */
static int materialize_all(job *j)
{
    for (uint32_t i = 0; i < j->o.parallelism; i++) {
        int rc = bk_materialize(j->tasks[i]);
        if (rc < 0) return rc;
    }
    for (uint32_t i = 0; i < j->o.parallelism; i++) {
        while (bk_materializations(j->tasks[i]) == 0) {
            int rc = bk_poll(j->tasks[i]);
            if (rc < 0) return rc;
            sleep_s(0.002);
        }
    }
    return 0;
}

int job_open(bk_env *env, const job_opts *o, job **out)
{
    job *j = calloc(1, sizeof *j);
    if (!j) return -ENOMEM;
    j->o = *o;
    if (!j->o.workers) j->o.workers = 2;
    if (j->o.workers > j->o.parallelism) j->o.workers = j->o.parallelism;
    if (!j->o.max_parallelism) j->o.max_parallelism = 128;
    j->env = env;
    int rc = (j->tasks = calloc(o->parallelism, sizeof *j->tasks)) ? 0 : -ENOMEM;
    for (uint32_t i = 0; rc == 0 && i < o->parallelism; i++) {
        rc = bk_task_open(env, o->name, j->o.max_parallelism, o->parallelism, i, o->mode,
                          i == 0 ? &o->faults : NULL, &j->tasks[i]);
        if (rc < 0) fail(j, rc, "open", i);
    }
    if (rc == 0) rc = load(j);
    if (rc == 0 && o->mode == BK_CHANGELOG) rc = materialize_all(j);
    if (rc < 0) {
        job_close(j);
        return rc;
    }
    *out = j;
    return 0;
}

size_t job_parts(job *j, bk_part *const **parts)
{
    *parts = j->last ? j->last->parts : NULL;
    return j->last ? j->o.parallelism : 0;
}

void job_restore_cpu(const job *j, double *process_s, double *machine_s)
{
    *process_s = j->restore_cpu_s[0];
    *machine_s = j->restore_cpu_s[1];
}

void job_restore_passes(const job *j, double *snapshots_s, double *changelogs_s)
{
    *snapshots_s = j->restore_pass_s[0];
    *changelogs_s = j->restore_pass_s[1];
}

void job_discard_last(job *j)
{
    ckpt_release(j, j->last, 1);
    j->last = NULL;
}

void job_close(job *j)
{
    if (!j) return;
    ckpt_release(j, j->last, 0);
    for (uint32_t i = 0; j->tasks && i < j->o.parallelism; i++) bk_task_close(j->tasks[i]);
    for (uint32_t i = 0; j->task_keys && i < j->o.parallelism; i++) free(j->task_keys[i]);
    free(j->task_keys);
    free(j->ntask_keys);
    free(j->tasks);
    free(j);
}
