/*
 * backend/check.c — the built-in correctness check (job.h, job_check): restore the job's final
 * checkpoint into new tasks, possibly of another parallelism, and compare every key with the
 * live state.
 *
 * Restore is what a restarted job does: each new task owns its key groups; it reads every old
 * part whose key groups meet them — first the snapshots (one restore plan on the snapshot
 * storage, all tasks at once), then the changelogs (one plan on the changelog storage) —
 * keeping only its key groups (the readers filter) and replaying the records in order. Old
 * parts own disjoint key groups, so the order across them does not matter; within one, the
 * snapshot comes before its changelog, which starts exactly where the snapshot was taken.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/job_int.h"

/* Reader threads of a restore: enough to keep the plan's GETs busy on 2 cores. */
#define RESTORE_THREADS 8u

typedef struct {
    dstl_restore *plan;
    bk_task **tasks;
    size_t *entry_task;              /* entry -> new task */
    size_t *entry_handles;           /* handles per entry */
    size_t nentries, first, step;
    int err;
    char why[256];
} replay_arg;

static void *replay(void *arg)
{
    replay_arg *a = arg;
    for (size_t e = a->first; e < a->nentries && !a->err; e += a->step) {
        bk_task *t = a->tasks[a->entry_task[e]];
        for (size_t h = 0; h < a->entry_handles[e] && !a->err; h++) {
            dstl_reader *r = NULL;
            int rc = dstl_restore_reader_open(a->plan, e, h, &r);
            dstl_record rec;
            while (rc == 0 && (rc = dstl_reader_next(r, &rec)) == 1) {
                rc = bk_apply(t, &rec);
                if (rc < 0)
                    snprintf(a->why, sizeof a->why, "new task %zu, handle %zu, record seq %" PRIu64
                             " (key group %u): %s", a->entry_task[e], h, rec.seq, rec.key_group,
                             rc == DSTL_ECORRUPT ? "not a state change of its key group" : dstl_strerror(rc));
            }
            if (rc < 0) {
                if (!a->why[0])
                    snprintf(a->why, sizeof a->why, "new task %zu, handle %zu: read: %s (%s)", a->entry_task[e], h,
                             dstl_strerror(rc), dstl_last_error());
                a->err = rc;
            }
            dstl_reader_close(r);
        }
    }
    return NULL;
}

static int overlaps(const bk_part *p, uint32_t f, uint32_t l)
{
    uint32_t pf, pl;
    bk_part_range(p, &pf, &pl);
    return pf <= l && f <= pl;
}

/* One plan over storage s: for each new task, the chosen handle (snapshot or changelog) of
 * every old part that meets its key groups; then every reader replayed on a few threads. */
static int restore_pass(job *j, dstl_storage *s, int changelog, bk_task **nt, uint32_t np,
                        char *why, size_t why_len)
{
    bk_part **parts = j->last->parts;
    uint32_t P = j->o.parallelism;
    dstl_restore_entry *ents = calloc(np, sizeof *ents);
    const dstl_handle **hs = calloc((size_t)np * P, sizeof *hs);
    size_t *et = calloc(np, sizeof *et), *eh = calloc(np, sizeof *eh), n = 0;
    int rc = ents && hs && et && eh ? 0 : -ENOMEM;
    for (uint32_t t = 0; rc == 0 && t < np; t++) {
        uint32_t f, l;
        bk_task_range(nt[t], &f, &l);
        const dstl_handle **mine = hs + (size_t)t * P;
        size_t k = 0;
        for (uint32_t i = 0; i < P; i++) {
            const dstl_handle *h = changelog ? bk_part_changelog(parts[i]) : bk_part_snapshot(parts[i]);
            if (h && overlaps(parts[i], f, l)) mine[k++] = h;
        }
        if (!k) continue;
        ents[n] = (dstl_restore_entry){.handles = mine, .nhandles = k, .key_group_first = f, .key_group_last = l};
        et[n] = t;
        eh[n++] = k;
    }
    dstl_restore *plan = NULL;
    if (rc == 0 && n && (rc = dstl_restore_plan(s, ents, n, &plan)) < 0)
        snprintf(why, why_len, "restore plan: %s (%s)", dstl_strerror(rc), dstl_last_error());
    replay_arg args[RESTORE_THREADS];
    pthread_t th[RESTORE_THREADS];
    size_t nth = n < RESTORE_THREADS ? n : RESTORE_THREADS, started = 0;
    for (; rc == 0 && plan && started < nth; started++) {
        args[started] = (replay_arg){.plan = plan, .tasks = nt, .entry_task = et, .entry_handles = eh,
                                     .nentries = n, .first = started, .step = nth};
        if (pthread_create(&th[started], NULL, replay, &args[started])) break;
    }
    for (size_t i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        if (args[i].err && rc == 0) {
            rc = args[i].err;
            snprintf(why, why_len, "%s: %s", changelog ? "changelog" : "snapshot", args[i].why);
        }
    }
    if (rc == 0 && started < nth) rc = -EAGAIN;
    dstl_restore_close(plan);
    free(ents);
    free(hs);
    free(et);
    free(eh);
    return rc;
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
    double t0 = job_now_s(), t1 = t0;
    if (rc == 0) rc = restore_pass(j, snap_storage, 0, nt, np, why, why_len);
    t1 = job_now_s();
    if (rc == 0 && j->o.mode == BK_CHANGELOG) {
        if (!changelog_storage) rc = -EINVAL;
        else rc = restore_pass(j, changelog_storage, 1, nt, np, why, why_len);
    }
    double t2 = job_now_s();
    j->restore_pass_s[0] = t1 - t0;
    j->restore_pass_s[1] = t2 - t1;
    if (restore_s) *restore_s = t2 - t0;
    for (uint32_t i = 0; rc == 0 && i < np; i++) rc = compare(j, nt[i], i, why, why_len);
    for (uint32_t i = 0; nt && i < np; i++) bk_task_close(nt[i]);
    free(nt);
    return rc;
}
