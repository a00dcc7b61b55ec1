/*
 * backend/job.h — a job of P tasks of the reference backend in one process, with the
 * checkpoint coordinator Flink's JobManager would be (FLIP-158's benchmark shape):
 *
 *  - a steady update rate spread over the tasks (ValueState puts and deletes, MapState puts),
 *    driven by a few worker threads, each the one thread of its tasks;
 *  - a checkpoint every interval: the barrier reaches every task (its worker), each task
 *    persists its part; the checkpoint is complete when the last part is durable, so its
 *    duration (trigger to completion) is the slowest task's. One checkpoint at a time: a trigger
 *    that finds one running is skipped and counted;
 *  - on completion the coordinator notifies: the previous completed checkpoint is subsumed and
 *    its parts discarded (bk_part_discard); a failed checkpoint's parts are discarded too;
 *  - changelog mode materializes each task every materialize_s, staggered across tasks.
 *
 * After the run (job_run returns) the job is quiet: a last checkpoint of the quiet state is
 * the one kept, and job_check restores it into new tasks and compares them with the live state
 * key by key.
 */
#ifndef BACKEND_JOB_H
#define BACKEND_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

typedef struct {
    const char *name;            /* writer ids start with it */
    int mode;                    /* BK_CHANGELOG or BK_FULL */
    uint32_t parallelism;        /* tasks */
    uint32_t max_parallelism;    /* key groups (Flink's default 128) */
    uint32_t workers;            /* threads driving the tasks */
    uint64_t keys;               /* distinct keys in all; each has a ValueState value */
    size_t value_len;            /* ValueState value bytes */
    double updates_per_s;        /* in all */
    double interval_s;           /* checkpoint interval */
    double materialize_s;        /* changelog mode: per task */
    uint64_t min_checkpoints;    /* run until this many completed ... */
    double min_s, max_s;         /* ... and at least min_s; never longer than max_s */
    bk_faults faults;            /* applied to task 0 */
    int verbose;                 /* progress lines on stdout ... */
    double report_s;             /* ... every this many seconds (0: 10) */
    int no_yield;                /* materializations never answer barriers mid-copy (A/B) */
} job_opts;

typedef struct {
    uint64_t completed, skipped, failed;   /* checkpoints of the run (not the final quiet one) */
    double *durations_ms;                  /* per completed checkpoint, in order (malloc'd) */
    double *completed_at_s;                /* when each completed, since the run started */
    double *barriers_ms;                   /* per completed checkpoint: trigger to the last
                                            * task's part registered (the barrier's share) */
    double run_s;
    uint64_t updates, materializations, materialization_failures;
    uint64_t state_bytes, state_entries;   /* at the end */
    uint64_t changelog_bytes_persisted;    /* sum of the parts' changelog handle sizes */
} job_result;

typedef struct job job;

/* Opens the tasks on env (the storages), loads every key's initial value and, in changelog
 * mode, materializes every task once (a job restored from a savepoint), then runs the
 * workload and checkpoints until min_checkpoints and min_s, then stops the updates and takes
 * the final checkpoint. 0, or the first error (printed with its detail). */
int job_open(bk_env *env, const job_opts *o, job **out);
int job_run(job *j, job_result *r);
void job_result_free(job_result *r);

/* Restores the final checkpoint into new_parallelism detached tasks — snapshots through a
 * restore plan on snap_storage, changelogs through one on changelog_storage (NULL in full
 * mode), both started at once; each task replays its snapshots first — and compares every
 * key with the live state. *restore_s is the restore's time (plans, reads, replay; not the
 * comparison). 0 when every key matches; -EILSEQ with the first
 * difference in why (task, key, state); another negative code when a read failed (why says
 * which). */
int job_check(job *j, dstl_storage *snap_storage, dstl_storage *changelog_storage,
              uint32_t new_parallelism, double *restore_s, char *why, size_t why_len);

/* The last job_check's two phases (both plans fetch from the start): until every snapshot was
 * replayed, and from then until the last changelog was. */
void job_restore_passes(const job *j, double *snapshots_s, double *changelogs_s);

/* The last job_check's restore: CPU seconds of this process, and of the whole machine (every
 * core's non-idle time, /proc/stat; 0 when unreadable), over the restore (not the comparison). */
void job_restore_cpu(const job *j, double *process_s, double *machine_s);

/* The final checkpoint's parts (for the demo's figures). */
size_t job_parts(job *j, bk_part *const **parts);

/* The q-quantile (0..1) of n values (sorted copy, nearest rank); NaN when n is 0. */
double job_quantile(const double *v, size_t n, double q);

/* Discards the final checkpoint (a job that is done with it: its segments go once the tasks
 * close). */
void job_discard_last(job *j);

/* Closes the tasks; the final checkpoint's handles stay live unless job_discard_last ran. */
void job_close(job *j);

#endif
