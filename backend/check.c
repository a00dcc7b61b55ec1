/*
 * backend/check.c — the built-in correctness check (job.h, job_check): restore the job's final
 * checkpoint into new tasks, possibly of another parallelism, and compare every key with the
 * live state.
 *
 * Restore is what a restarted job does: each new task owns its key groups; it reads every old
 * part whose key groups meet them, keeping only its key groups (the readers filter) and
 * replaying the records in order. Two restore plans, one on the snapshot storage and one on the
 * changelog storage, each for all new tasks, are started together, so the changelogs' GETs run
 * while the snapshots are fetched and replayed (one after the other they were 1.5x slower:
 * restore.ratio 1.99 -> 1.32). Each task still replays its snapshots before its changelogs.
 * Old parts own disjoint key groups, so the order across them does not matter; within one, the
 * snapshot comes before its changelog, which starts exactly where the snapshot was taken.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "backend/job_int.h"

/* Reader threads of a restore: enough to keep the plan's GETs busy on 2 cores. */
#define RESTORE_THREADS 8u

/* One plan over one storage (the snapshots' or the changelogs'): its entries, and for each new
 * task the entry that is its (-1: it meets no old part with such a handle). */
typedef struct {
    dstl_restore *plan;
    dstl_restore_entry *ents;
    const dstl_handle **hs;
    long *task_entry;
    size_t n;
} pass;

typedef struct {
    pass *ps;                        /* [0] snapshots, [1] changelogs */
    size_t npass;
    bk_task **tasks;
    uint32_t np, first, step;
    double snap_done_s;              /* when this thread replayed its last snapshot */
    int err;
    char why[256];
} replay_arg;

/* Replays every handle of entry e of plan p into t; 0 or the first error (why says where). */
static int replay_entry(replay_arg *a, const pass *p, long e, uint32_t ti, const char *what)
{
    bk_task *t = a->tasks[ti];
    for (size_t h = 0; e >= 0 && h < p->ents[e].nhandles; h++) {
        dstl_reader *r = NULL;
        int rc = dstl_restore_reader_open(p->plan, (size_t)e, h, &r);
        dstl_record rec;
        while (rc == 0 && (rc = dstl_reader_next(r, &rec)) == 1) {
            rc = bk_apply(t, &rec);
            if (rc < 0)
                snprintf(a->why, sizeof a->why, "%s: new task %u, handle %zu, record seq %" PRIu64
                         " (key group %u): %s", what, ti, h, rec.seq, rec.key_group,
                         rc == DSTL_ECORRUPT ? "not a state change of its key group" : dstl_strerror(rc));
        }
        dstl_reader_close(r);
        if (rc < 0) {
            if (!a->why[0])
                snprintf(a->why, sizeof a->why, "%s: new task %u, handle %zu: read: %s (%s)", what, ti, h,
                         dstl_strerror(rc), dstl_last_error());
            return rc;
        }
    }
    return 0;
}

/* Each of this thread's new tasks: its snapshots, then its changelogs (which start exactly
 * where those snapshots were taken). Both plans fetch meanwhile. */
static void *replay(void *arg)
{
    replay_arg *a = arg;
    for (uint32_t t = a->first; t < a->np && !a->err; t += a->step)
        a->err = replay_entry(a, &a->ps[0], a->ps[0].task_entry[t], t, "snapshot");
    a->snap_done_s = job_now_s();
    for (uint32_t t = a->first; a->npass > 1 && t < a->np && !a->err; t += a->step)
        a->err = replay_entry(a, &a->ps[1], a->ps[1].task_entry[t], t, "changelog");
    return NULL;
}

static int overlaps(const bk_part *p, uint32_t f, uint32_t l)
{
    uint32_t pf, pl;
    bk_part_range(p, &pf, &pl);
    return pf <= l && f <= pl;
}

/* Plans (and so starts fetching) over storage s: for each new task, the chosen handle
 * (snapshot or changelog) of every old part that meets its key groups. */
static int plan_pass(job *j, dstl_storage *s, int changelog, bk_task **nt, uint32_t np, pass *p,
                     char *why, size_t why_len)
{
    bk_part **parts = j->last->parts;
    uint32_t P = j->o.parallelism;
    p->ents = calloc(np, sizeof *p->ents);
    p->hs = calloc((size_t)np * P, sizeof *p->hs);
    p->task_entry = calloc(np, sizeof *p->task_entry);
    if (!p->ents || !p->hs || !p->task_entry) return -ENOMEM;
    for (uint32_t t = 0; t < np; t++) {
        uint32_t f, l;
        bk_task_range(nt[t], &f, &l);
        const dstl_handle **mine = p->hs + (size_t)t * P;
        size_t k = 0;
        for (uint32_t i = 0; i < P; i++) {
            const dstl_handle *h = changelog ? bk_part_changelog(parts[i]) : bk_part_snapshot(parts[i]);
            if (h && overlaps(parts[i], f, l)) mine[k++] = h;
        }
        p->task_entry[t] = k ? (long)p->n : -1;
        if (k)
            p->ents[p->n++] = (dstl_restore_entry){.handles = mine, .nhandles = k, .key_group_first = f,
                                                   .key_group_last = l};
    }
    int rc = p->n ? dstl_restore_plan(s, p->ents, p->n, &p->plan) : 0;
    if (rc < 0)
        snprintf(why, why_len, "%s restore plan: %s (%s)", changelog ? "changelog" : "snapshot",
                 dstl_strerror(rc), dstl_last_error());
    return rc;
}

static void pass_free(pass *p)
{
    dstl_restore_close(p->plan);
    free(p->ents);
    free(p->hs);
    free(p->task_entry);
}

/* The restore: both plans in flight at once (the changelog GETs overlap the snapshots' and
 * their replay), then every new task replayed on a few threads. *snap_done_s: when the last
 * snapshot replay finished. */
static int restore(job *j, dstl_storage *snap, dstl_storage *cl, bk_task **nt, uint32_t np,
                   double *snap_done_s, char *why, size_t why_len)
{
    pass ps[2] = {{0}};
    size_t npass = cl ? 2 : 1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < npass; i++) rc = plan_pass(j, i ? cl : snap, (int)i, nt, np, &ps[i], why, why_len);
    replay_arg args[RESTORE_THREADS];
    pthread_t th[RESTORE_THREADS];
    uint32_t nth = np < RESTORE_THREADS ? np : RESTORE_THREADS, started = 0;
    for (; rc == 0 && started < nth; started++) {
        args[started] = (replay_arg){.ps = ps, .npass = npass, .tasks = nt, .np = np, .first = started, .step = nth};
        if (pthread_create(&th[started], NULL, replay, &args[started])) break;
    }
    *snap_done_s = 0;
    for (uint32_t i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        if (args[i].snap_done_s > *snap_done_s) *snap_done_s = args[i].snap_done_s;
        if (args[i].err && rc == 0) {
            rc = args[i].err;
            snprintf(why, why_len, "%s", args[i].why);
        }
    }
    if (rc == 0 && started < nth) rc = -EAGAIN;
    for (size_t i = 0; i < npass; i++) pass_free(&ps[i]);
    return rc;
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

/* CPU seconds all cores spent not idle since boot (Linux /proc/stat); 0 when unreadable. */
static double machine_busy_s(void)
{
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                       &v[5], &v[6], &v[7]) : 0;
    if (f) fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    return n == 8 && hz > 0 ? (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz : 0;
}

/* Every live entry of the old tasks in new task t's key groups is in t with the same bytes,
 * and t holds no other: -EILSEQ with the first difference otherwise. */
static int compare(job *j, const bk_task *t, uint32_t ti, char *why, size_t why_len)
{
    uint32_t f, l;
    bk_task_range(t, &f, &l);
    const kv_map *got = bk_task_state(t);
    uint64_t want = 0;
    for (uint32_t i = 0; i < j->o.parallelism; i++) {
        const kv_map *live = bk_task_state(j->tasks[i]);
        size_t pos = 0;
        for (const kv_entry *e; (e = kv_next(live, &pos));) {
            if (e->key_group < f || e->key_group > l) continue;
            want++;
            const kv_entry *g = kv_get(got, e->state, kv_key(e), e->key_len, kv_user_key(e), e->user_key_len);
            if (!g || g->value_len != e->value_len || memcmp(kv_value(g), kv_value(e), e->value_len)) {
                snprintf(why, why_len, "new task %u: key \"%.*s\" state %s%s%.*s: %s", ti, (int)e->key_len,
                         (const char *)kv_key(e), e->state == BK_STATE_VALUE ? "value" : "map",
                         e->user_key_len ? " user key " : "", (int)e->user_key_len,
                         (const char *)kv_user_key(e), g ? "restored with other bytes" : "missing after restore");
                return -EILSEQ;
            }
        }
    }
    if (got->count != want) {
        snprintf(why, why_len, "new task %u: %zu entries restored, the live state has %" PRIu64
                 " (a key restored that was deleted)", ti, got->count, want);
        return -EILSEQ;
    }
    return 0;
}

int job_check(job *j, dstl_storage *snap_storage, dstl_storage *changelog_storage,
              uint32_t np, double *restore_s, char *why, size_t why_len)
{
    why[0] = 0;
    if (!j->last || !np) {
        snprintf(why, why_len, "no completed checkpoint");
        return -ENOENT;
    }
    bk_task **nt = calloc(np, sizeof *nt);
    int rc = nt ? 0 : -ENOMEM;
    for (uint32_t i = 0; rc == 0 && i < np; i++)
        rc = bk_task_open(NULL, j->o.name, j->o.max_parallelism, np, i, BK_DETACHED, NULL, &nt[i]);
    if (rc == 0 && j->o.mode == BK_CHANGELOG && !changelog_storage) rc = -EINVAL;
    double t0 = job_now_s(), t1 = t0, cpu0 = self_cpu_s(), busy0 = machine_busy_s();
    if (rc == 0)
        rc = restore(j, snap_storage, j->o.mode == BK_CHANGELOG ? changelog_storage : NULL, nt, np, &t1, why, why_len);
    double t2 = job_now_s();
    j->restore_cpu_s[0] = self_cpu_s() - cpu0;
    j->restore_cpu_s[1] = machine_busy_s() - busy0;
    if (t1 < t0) t1 = t0;
    j->restore_pass_s[0] = t1 - t0;
    j->restore_pass_s[1] = t2 - t1;
    if (restore_s) *restore_s = t2 - t0;
    for (uint32_t i = 0; rc == 0 && i < np; i++) rc = compare(j, nt[i], i, why, why_len);
    for (uint32_t i = 0; nt && i < np; i++) bk_task_close(nt[i]);
    free(nt);
    return rc;
}
