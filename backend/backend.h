/*
 * backend/backend.h — the reference keyed state backend: how a stream processor's state
 * backend uses DSTL, through include/dstl.h alone.
 *
 * A task (one parallel instance of a keyed operator) owns the key groups Flink would give it
 * (dstl_key_group_range of max parallelism 128 by default) and keeps two states of its keys in
 * memory (kvmap.h): a ValueState "value" and a MapState "map". Modes:
 *
 *  - BK_CHANGELOG: every state change is appended at once to the task's changelog writer as a
 *    canonical state change (dstl_state_change: op, state, key, user key, value), in the key's
 *    key group, so `dstl cat` shows it. A checkpoint persists the changelog since the last
 *    materialization: its part is (the last materialized snapshot, that changelog handle).
 *    Materialization (bk_materialize, every M seconds, staggered by the caller) writes the
 *    whole state as PUT state changes to a snapshot writer on a second storage, in the
 *    background; when that snapshot is durable the task truncates its changelog up to where the
 *    snapshot was taken and later checkpoints reference the new snapshot.
 *  - BK_FULL: no changelog; every checkpoint is a materialization (the non-incremental
 *    baseline: every checkpoint writes the full state).
 *  - BK_DETACHED: state only, no writers (a restore target for checks).
 *
 * Why a second storage for snapshots: a storage has one pipeline, one in-flight bound and one
 * batch queue. Snapshots of gigabytes through the changelog's storage would fill its
 * dstl.upload.max-in-flight and its batches, and checkpoint persists would wait behind them.
 * Through their own storage (own dstl.local.dir, own remote prefix, own max-in-flight and
 * pipeline thread) a snapshot never delays a changelog persist; only the disk and the network
 * are shared.
 *
 * Discard: snapshots are reference-counted (the task's current one, and every checkpoint part
 * that names it). bk_part_discard (the coordinator, when a later checkpoint subsumes this one)
 * discards the part's changelog handle and drops its snapshot reference; a snapshot whose last
 * reference goes is discarded in the snapshot storage. DSTL then deletes segments no writer and
 * no live handle needs.
 *
 * Threads: a task is used by one thread at a time (its worker). The materializer thread of the
 * bk_env persists snapshots; future callbacks run on the storages' pipeline threads. Parts are
 * handed to the coordinator (any thread) once complete.
 */
#ifndef BACKEND_BACKEND_H
#define BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "dstl.h"
#include "backend/kvmap.h"

enum { BK_CHANGELOG = 1, BK_FULL = 2, BK_DETACHED = 3 };
enum { BK_STATE_VALUE = 1, BK_STATE_MAP = 2 };   /* state ids in the state changes */

typedef struct bk_env bk_env;
typedef struct bk_task bk_task;
typedef struct bk_snap bk_snap;

/* Test seams: records left out, to prove the restore check catches a lost record (0 = off). */
typedef struct {
    const char *drop_changelog_key;   /* no change of this key is appended to the changelog */
    uint64_t drop_snapshot_record;    /* the Nth record (1-based) of every snapshot is left out */
    uint64_t fail_checkpoints_upto;   /* checkpoints 1..N fail at once with -EIO             */
    uint64_t fail_snapshot_record;    /* appending the Nth record of a snapshot fails (-EIO)  */
} bk_faults;

/* The storages of a process: changelog persists go to `changelog` (NULL when no task is
 * BK_CHANGELOG), snapshots (materializations, full checkpoints) to `snapshots`. Starts the
 * materializer thread. 0 or -errno. */
int bk_env_open(dstl_storage *changelog, dstl_storage *snapshots, bk_env **out);
/* Stops the materializer (after the snapshots handed to it). Tasks must be closed first. */
void bk_env_close(bk_env *e);

/* Sets, on the config the snapshot storage will be opened with, what suits snapshots: a
 * dstl.preemptive-persist-threshold and dstl.batch.persist-size-threshold of BK_SNAPSHOT_BATCH
 * (64 MB), so a task's snapshot (appended whole, then persisted) goes up as one segment, one
 * object, instead of one per 5 MB hand-off and 10 MB batch (the defaults, sized for latency-
 * bound changelog persists). A restore then reads each snapshot with one GET. The storage's
 * dstl.upload.max-in-flight must hold a batch (>= 64 MB). 0 or dstl_config_set's error. */
#define BK_SNAPSHOT_BATCH "64mb"
int bk_snapshot_config(dstl_config *c);
/* Sets, on the config the changelog storage will be opened with, what suits a job whose tasks
 * all persist at each checkpoint barrier: dstl.batch.close-when-all-in, so the checkpoint's
 * segment goes out once the last task has persisted rather than persist-delay after the
 * first (the storage's writers must be the job's changelog writers only). 0 or
 * dstl_config_set's error. */
int bk_changelog_config(dstl_config *c);

/* Task `index` of `parallelism` under max_parallelism key groups; writers are named
 * "<job>-t<index>" (changelog) and "<job>-t<index>-snap" on the env's storages. env may be
 * NULL for BK_DETACHED. 0, -EINVAL, -ENOMEM, or dstl_writer_open's error. */
int bk_task_open(bk_env *e, const char *job, uint32_t max_parallelism, uint32_t parallelism,
                 uint32_t index, int mode, const bk_faults *faults, bk_task **out);
/* Waits for its materialization in flight, closes its writers, drops its snapshot references
 * (a snapshot no checkpoint part holds is discarded; one a part freed with bk_part_free
 * holds stays live). */
int bk_task_close(bk_task *t);
void bk_task_range(const bk_task *t, uint32_t *first, uint32_t *last);
const kv_map *bk_task_state(const bk_task *t);

/* ---- state: ValueState "value" and MapState "map"; in changelog mode each change is
 * appended (dstl_append, no I/O) before it is applied. 0 or dstl_append's error (-EINVAL for
 * a key outside the task's key groups). */
int bk_value_put(bk_task *t, const void *key, size_t klen, const void *val, size_t vlen);
int bk_value_delete(bk_task *t, const void *key, size_t klen);
int bk_map_put(bk_task *t, const void *key, size_t klen, const void *uk, size_t uklen,
               const void *val, size_t vlen);
int bk_map_remove(bk_task *t, const void *key, size_t klen, const void *uk, size_t uklen);
/* State loaded from a savepoint or an earlier job, not appended to any changelog: in
 * changelog mode checkpoints return -EAGAIN until a materialization that includes it is
 * complete. 0, -EINVAL (key outside the task's groups), -ENOMEM. */
int bk_load_value(bk_task *t, const void *key, size_t klen, const void *val, size_t vlen);
/* NULL when absent. */
const void *bk_value_get(const bk_task *t, const void *key, size_t klen, size_t *vlen);

/* ---- materialization ---- */
/* Starts a materialization (changelog mode): appends the whole state to the snapshot writer
 * (memory copies) and hands the persist to the materializer thread. 1 started, 0 one is still
 * running, < 0 error. */
int bk_materialize(bk_task *t);
/* A materialization copies the whole state on the task's thread; so that a barrier never waits
 * for that copy (16 MB a task in the benchmark: tens of ms), fn(arg) runs every
 * BK_YIELD_RECORDS records of it. fn may checkpoint any task (bk_checkpoint), this one
 * included: that part persists the changelog since the last complete snapshot, as any part
 * taken while a materialization runs. fn must not change any state or materialize. NULL: no
 * yields (the default). */
#define BK_YIELD_RECORDS 256
typedef void (*bk_yield_fn)(void *arg);
void bk_task_set_yield(bk_task *t, bk_yield_fn fn, void *arg);
/* Finishes a materialization that completed: takes its handle, truncates the changelog and the
 * snapshot writer, makes it the current snapshot. Call often (each loop of the worker).
 * 0, or the snapshot persist's error (the materialization is dropped; the old one stays). */
int bk_poll(bk_task *t);
uint64_t bk_materializations(const bk_task *t);

/* ---- checkpoints ---- */
typedef struct bk_part bk_part;
/* Called once when the part's handles are durable (or failed): on a pipeline thread. */
typedef void (*bk_part_fn)(bk_part *p, void *arg);

/* The task's share of checkpoint cp: changelog mode persists the changelog since the current
 * snapshot; full mode materializes. fn(part, arg) runs when it is complete. 0 or -errno. */
int bk_checkpoint(bk_task *t, uint64_t cp, bk_part_fn fn, void *arg, bk_part **out);
/* After fn ran: 0 when the part is complete and usable for restore, else the error. */
int bk_part_result(bk_part *p);
uint32_t bk_part_task(const bk_part *p);
void bk_part_range(const bk_part *p, uint32_t *first, uint32_t *last);
/* The part's handles: its snapshot (NULL before the first materialization) and its changelog
 * (NULL in full mode). Valid until bk_part_discard. */
const dstl_handle *bk_part_snapshot(const bk_part *p);
const dstl_handle *bk_part_changelog(const bk_part *p);
/* The checkpoint is subsumed (or aborted): discard its handles, free. Accepts NULL. */
void bk_part_discard(bk_part *p);
/* Frees without discarding (the handles stay live: a checkpoint kept for restore). */
void bk_part_free(bk_part *p);

/* ---- restore ---- */
/* Applies one record of a snapshot or changelog to t's state (no writer involved):
 * 0, DSTL_ECORRUPT for bytes that are not a state change (detail names the seq), -EINVAL for
 * an op the backend does not write. */
int bk_apply(bk_task *t, const dstl_record *rec);

#endif
