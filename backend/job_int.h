/* backend/job_int.h — the job's insides, shared by job.c (run) and check.c (restore check). */
#ifndef BACKEND_JOB_INT_H
#define BACKEND_JOB_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "backend/job.h"

/* A checkpoint in flight: every task's part; pending counts the registrations (by the
 * workers) and the completions (by the callbacks) still to come. */
typedef struct {
    uint64_t id;
    double trigger_s;
    atomic_int pending;
    atomic_int failed;
    _Atomic uint64_t done_ns;            /* the latest part completion (CLOCK_MONOTONIC) */
    _Atomic uint64_t barrier_ns;         /* the latest part registration (the barrier's end) */
    bk_part **parts;
} ckpt;

struct job {
    job_opts o;
    bk_env *env;
    bk_task **tasks;
    uint64_t **task_keys;                /* per task: the indices of its keys */
    size_t *ntask_keys;
    /* The barrier: the newest checkpoint and its id. Workers read the id first and touch the
     * checkpoint only when the id is new to them: a checkpoint cannot finish (and be freed)
     * before every worker registered its parts, so a new one is always alive, while an old
     * one (a failed checkpoint is freed at once) may be gone. */
    _Atomic(ckpt *) trigger;
    _Atomic uint64_t trigger_id;
    atomic_int stop;
    double t0;
    ckpt *last;                          /* the last completed (retained) checkpoint */
    atomic_uint_fast64_t updates;
    atomic_int err;                      /* the first fatal error of any thread */
    atomic_uint_fast64_t mat_failures;   /* materializations that failed (not fatal) */
    double restore_pass_s[2];            /* the last job_check: snapshots, changelogs */
    double restore_cpu_s[2];             /* its restore's CPU: this process, the machine */
};

double job_now_s(void);
/* The text of key index k ("key-<k>") into buf; returns its length. */
size_t job_key(uint64_t k, char *buf, size_t cap);

#endif
