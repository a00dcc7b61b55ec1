/*
 * backend/backend.c — the reference keyed state backend (backend.h): state, changelog appends,
 * materialization through the snapshot storage, checkpoint parts, snapshot references, replay.
 * Uses include/dstl.h only.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"

struct bk_env {
    dstl_storage *changelog, *snapshots;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bk_snap *head, *tail;      /* snapshots to persist, in order */
    int stop;
};

/* One materialization: the records [from_seq, end) of the task's snapshot writer, the full
 * state as of changelog seq changelog_from. Reference-counted (task, checkpoint parts). */
struct bk_snap {
    atomic_int refs;
    atomic_int keep;           /* someone let go without discarding: the handle stays live */
    atomic_int complete;       /* h (or err) is set; the writer is the task's again */
    bk_env *env;
    dstl_writer *w;
    uint32_t task;
    int loaded_state;          /* it holds state that no changelog has (bk_load_value) */
    uint64_t from_seq, changelog_from, cp;
    dstl_future *f;
    dstl_handle *h;
    int err;
    pthread_mutex_t mu;        /* handed, fired, notify */
    int handed, fired;
    void (*notify)(void *arg);
    void *notify_arg;
    bk_snap *next;
};

struct bk_task {
    bk_env *env;
    int mode;
    uint32_t index, max_p, kg_first, kg_last;
    dstl_writer *changelog, *snapw;
    kv_map state;
    bk_snap *cur;              /* the last completed materialization, or NULL */
    bk_snap *running;          /* the one in flight, or NULL */
    _Atomic uint64_t materializations;   /* read by the coordinator's progress lines */
    unsigned char *buf;        /* encoding scratch */
    size_t buf_cap;
    bk_faults faults;
    int loaded;                /* bk_load_value since the last materialization started */
    bk_yield_fn yield;         /* bk_task_set_yield */
    void *yield_arg;
};

struct bk_part {
    bk_env *env;
    uint32_t task, kg_first, kg_last;
    bk_snap *snap;
    dstl_future *f;            /* changelog persist */
    dstl_handle *changelog;
    int err;
    bk_part_fn fn;
    void *arg;
};

/* ---- snapshots ------------------------------------------------------------------------- */

static void snap_unref(bk_snap *s, int discard)
{
    if (!s) return;
    if (!discard) atomic_store(&s->keep, 1);
    if (atomic_fetch_sub(&s->refs, 1) != 1) return;
    if (s->h) {
        if (!atomic_load(&s->keep)) dstl_handle_discard(s->env->snapshots, s->h);
        dstl_handle_free(s->h);
    }
    dstl_future_free(s->f);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Under s->mu, once both the persist returned and the future fired: the result is taken. */
static void snap_complete(bk_snap *s)
{
    /* DURABILITY: the future is done: with a handle, the whole snapshot is durable at the
     * snapshot storage's level; only then may the task truncate or a full checkpoint complete. */
    if (s->f && !s->err) s->err = dstl_future_result(s->f, &s->h);
    if (s->err)                                /* the detail is this thread's: say it here */
        fprintf(stderr, "backend: snapshot of task %u failed: %s (%s)\n", s->task, dstl_strerror(s->err),
                dstl_last_error());
    void (*fn)(void *) = s->notify;
    void *arg = s->notify_arg;
    atomic_store(&s->complete, 1);
    pthread_mutex_unlock(&s->mu);
    if (fn) fn(arg);
}

static void snap_fired(dstl_future *f, void *arg)
{
    (void)f;
    bk_snap *s = arg;
    pthread_mutex_lock(&s->mu);
    s->fired = 1;
    if (s->handed) snap_complete(s);
    else pthread_mutex_unlock(&s->mu);
}

/* Runs fn(arg) once s is complete: at once when it is. */
static void snap_on_complete(bk_snap *s, void (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&s->mu);
    if (atomic_load(&s->complete)) {
        pthread_mutex_unlock(&s->mu);
        fn(arg);
        return;
    }
    s->notify = fn;
    s->notify_arg = arg;
    pthread_mutex_unlock(&s->mu);
}

/* The materializer: persists each snapshot handed to it. dstl_persist blocks only under the
 * snapshot storage's backpressure, and that wait is here, never on a task or the changelog. */
static void *materializer(void *arg)
{
    bk_env *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->head && !e->stop) pthread_cond_wait(&e->cv, &e->mu);
        bk_snap *s = e->head;
        if (!s) break;
        e->head = s->next;
        if (!e->head) e->tail = NULL;
        pthread_mutex_unlock(&e->mu);
        dstl_future *f = NULL;
        int rc = dstl_persist(s->w, s->from_seq, s->cp, &f);
        if (rc < 0) {
            fprintf(stderr, "backend: snapshot persist of task %u: %s (%s)\n", s->task,
                    dstl_strerror(rc), dstl_last_error());
            pthread_mutex_lock(&s->mu);
            s->err = rc;
            s->fired = 1;
        } else {
            s->f = f;
            dstl_future_on_done(f, snap_fired, s);
            pthread_mutex_lock(&s->mu);
        }
        s->handed = 1;
        if (s->fired) snap_complete(s);
        else pthread_mutex_unlock(&s->mu);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

int bk_snapshot_config(dstl_config *c)
{
    int rc = dstl_config_set(c, "dstl.preemptive-persist-threshold", BK_SNAPSHOT_BATCH);
    return rc < 0 ? rc : dstl_config_set(c, "dstl.batch.persist-size-threshold", BK_SNAPSHOT_BATCH);
}

int bk_changelog_config(dstl_config *c) { return dstl_config_set(c, "dstl.batch.close-when-all-in", "true"); }

int bk_env_open(dstl_storage *changelog, dstl_storage *snapshots, bk_env **out)
{
    if (!snapshots || !out) return -EINVAL;
    bk_env *e = calloc(1, sizeof *e);
    if (!e) return -ENOMEM;
    e->changelog = changelog;
    e->snapshots = snapshots;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    int rc = pthread_create(&e->thread, NULL, materializer, e);
    if (rc) {
        free(e);
        return -rc;
    }
    (void)pthread_setname_np(e->thread, "bk-materialize");
    *out = e;
    return 0;
}

void bk_env_close(bk_env *e)
{
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

/* ---- tasks and state ------------------------------------------------------------------- */

static unsigned char *scratch(bk_task *t, size_t n)
{
    if (n <= t->buf_cap) return t->buf;
    size_t cap = n < 4096 ? 4096 : n * 2;
    unsigned char *b = realloc(t->buf, cap);
    if (!b) return NULL;
    t->buf = b;
    t->buf_cap = cap;
    return b;
}

/* Encodes sc and appends it to w in key group kg (meta when kg is UINT32_MAX). */
static int append_sc(bk_task *t, dstl_writer *w, uint32_t kg, const dstl_state_change *sc)
{
    size_t n = dstl_state_change_size(sc);
    unsigned char *b = scratch(t, n);
    if (!b) return -ENOMEM;
    int len = dstl_state_change_encode(sc, b, n);
    if (len < 0) return len;
    return kg == UINT32_MAX ? dstl_append_meta(w, b, (size_t)len) : dstl_append(w, kg, b, (size_t)len);
}

/* The state registrations every changelog and snapshot starts with (what `dstl cat` names). */
static int append_registrations(bk_task *t, dstl_writer *w)
{
    static const struct { uint32_t id; const char *name, *kind; } states[] = {
        {BK_STATE_VALUE, "value", "ValueState<bytes>"}, {BK_STATE_MAP, "map", "MapState<bytes,bytes>"}};
    for (size_t i = 0; i < 2; i++) {
        dstl_state_change sc = {.op = DSTL_SC_METADATA, .state_id = states[i].id,
                                .state_name = states[i].name, .state_name_len = strlen(states[i].name),
                                .value = states[i].kind, .value_len = strlen(states[i].kind)};
        int rc = append_sc(t, w, UINT32_MAX, &sc);
        if (rc < 0) return rc;
    }
    return 0;
}

int bk_task_open(bk_env *e, const char *job, uint32_t max_p, uint32_t parallelism, uint32_t index,
                 int mode, const bk_faults *faults, bk_task **out)
{
    if (!out || !job || (mode != BK_DETACHED && !e) || (mode == BK_CHANGELOG && !e->changelog))
        return -EINVAL;
    bk_task *t = calloc(1, sizeof *t);
    if (!t) return -ENOMEM;
    t->env = e;
    t->mode = mode;
    t->index = index;
    t->max_p = max_p;
    if (faults) t->faults = *faults;
    kv_init(&t->state);
    int rc = dstl_key_group_range(max_p, parallelism, index, &t->kg_first, &t->kg_last);
    char name[256];
    if (rc == 0 && mode == BK_CHANGELOG) {
        snprintf(name, sizeof name, "%s-t%u", job, index);
        rc = dstl_writer_open(e->changelog, name, t->kg_first, t->kg_last, &t->changelog);
        if (rc == 0) rc = append_registrations(t, t->changelog);
    }
    if (rc == 0 && mode != BK_DETACHED) {
        snprintf(name, sizeof name, "%s-t%u-snap", job, index);
        rc = dstl_writer_open(e->snapshots, name, t->kg_first, t->kg_last, &t->snapw);
    }
    if (rc < 0) {
        bk_task_close(t);
        return rc;
    }
    *out = t;
    return 0;
}

int bk_task_close(bk_task *t)
{
    if (!t) return 0;
    /* the materializer owns the snapshot writer until its persist completes */
    while (t->running && !atomic_load(&t->running->complete)) nanosleep(&(struct timespec){0, 1000000}, NULL);
    /* the task lets go of its snapshots; a checkpoint kept with bk_part_free keeps its own */
    snap_unref(t->running, 1);
    snap_unref(t->cur, 1);
    int rc = dstl_writer_close(t->changelog), rc2 = dstl_writer_close(t->snapw);
    kv_free(&t->state);
    free(t->buf);
    free(t);
    return rc < 0 ? rc : rc2;
}

void bk_task_range(const bk_task *t, uint32_t *first, uint32_t *last)
{
    *first = t->kg_first;
    *last = t->kg_last;
}

const kv_map *bk_task_state(const bk_task *t) { return &t->state; }
uint64_t bk_materializations(const bk_task *t) { return atomic_load(&t->materializations); }

/* A change: appended to the changelog first (changelog mode), then applied. */
static int change(bk_task *t, int op, uint8_t state, const void *key, size_t klen, const void *uk,
                  size_t uklen, const void *val, size_t vlen)
{
    uint32_t kg = dstl_key_group(key, klen, t->max_p);
    if (kg < t->kg_first || kg > t->kg_last) return -EINVAL;
    const char *drop = t->faults.drop_changelog_key;
    if (t->mode == BK_CHANGELOG && !(drop && strlen(drop) == klen && memcmp(drop, key, klen) == 0)) {
        dstl_state_change sc = {.op = op, .state_id = state, .key = key, .key_len = klen,
                                .user_key = uk, .user_key_len = uklen, .value = val, .value_len = vlen};
        int rc = append_sc(t, t->changelog, kg, &sc);
        if (rc < 0) return rc;
    }
    if (op == DSTL_SC_DELETE) {
        kv_del(&t->state, state, key, klen, uk, uklen);
        return 0;
    }
    return kv_put(&t->state, state, kg, key, klen, uk, uklen, val, vlen);
}

int bk_value_put(bk_task *t, const void *key, size_t klen, const void *val, size_t vlen)
{
    return change(t, DSTL_SC_PUT, BK_STATE_VALUE, key, klen, NULL, 0, val, vlen);
}

int bk_value_delete(bk_task *t, const void *key, size_t klen)
{
    return change(t, DSTL_SC_DELETE, BK_STATE_VALUE, key, klen, NULL, 0, NULL, 0);
}

int bk_map_put(bk_task *t, const void *key, size_t klen, const void *uk, size_t uklen,
               const void *val, size_t vlen)
{
    return change(t, DSTL_SC_PUT, BK_STATE_MAP, key, klen, uk, uklen, val, vlen);
}

int bk_map_remove(bk_task *t, const void *key, size_t klen, const void *uk, size_t uklen)
{
    return change(t, DSTL_SC_DELETE, BK_STATE_MAP, key, klen, uk, uklen, NULL, 0);
}

int bk_load_value(bk_task *t, const void *key, size_t klen, const void *val, size_t vlen)
{
    uint32_t kg = dstl_key_group(key, klen, t->max_p);
    if (kg < t->kg_first || kg > t->kg_last) return -EINVAL;
    t->loaded = 1;
    return kv_put(&t->state, BK_STATE_VALUE, kg, key, klen, NULL, 0, val, vlen);
}

const void *bk_value_get(const bk_task *t, const void *key, size_t klen, size_t *vlen)
{
    const kv_entry *e = kv_get(&t->state, BK_STATE_VALUE, key, klen, NULL, 0);
    if (!e) return NULL;
    *vlen = e->value_len;
    return kv_value(e);
}

/* ---- materialization ------------------------------------------------------------------- */

/* Appends the whole state (on the task thread: memory copies into the writer; preemptive
 * hand-offs go to the snapshot storage) and queues the persist. */
static int start_snapshot(bk_task *t, uint64_t cp, bk_snap **out)
{
    bk_snap *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    atomic_init(&s->refs, 1);
    pthread_mutex_init(&s->mu, NULL);
    s->env = t->env;
    s->w = t->snapw;
    s->task = t->index;
    s->cp = cp;
    s->from_seq = dstl_writer_next_seq(t->snapw);
    s->changelog_from = t->changelog ? dstl_writer_next_seq(t->changelog) : 0;
    s->loaded_state = t->loaded;
    /* yields only for a materialization (a full checkpoint is itself the barrier's answer) */
    bk_yield_fn yield = t->mode == BK_CHANGELOG ? t->yield : NULL;
    int rc = append_registrations(t, t->snapw);
    size_t pos = 0;
    uint64_t nrec = 0;
    for (const kv_entry *e; rc == 0 && (e = kv_next(&t->state, &pos));) {
        if (++nrec == t->faults.drop_snapshot_record) continue;
        if (nrec == t->faults.fail_snapshot_record) {
            fprintf(stderr, "backend: task %u: snapshot record %llu fails (test seam fail_snapshot_record)\n",
                    t->index, (unsigned long long)nrec);
            rc = -EIO;
            break;
        }
        dstl_state_change sc = {.op = DSTL_SC_PUT, .state_id = e->state, .key = kv_key(e),
                                .key_len = e->key_len, .user_key = kv_user_key(e),
                                .user_key_len = e->user_key_len, .value = kv_value(e),
                                .value_len = e->value_len};
        rc = append_sc(t, t->snapw, e->key_group, &sc);
        if (yield && nrec % BK_YIELD_RECORDS == 0) yield(t->yield_arg);
    }
    if (rc < 0) {                              /* t->loaded stays: no snapshot holds that state */
        snap_unref(s, 1);
        return rc;
    }
    /* Only now: a checkpoint taken during the copy (a yield) still saw the loaded state as in
     * no snapshot, and so does every one after a copy that failed. */
    t->loaded = 0;
    atomic_fetch_add(&s->refs, 1);             /* the task's, as t->running */
    t->running = s;
    bk_env *e = t->env;
    pthread_mutex_lock(&e->mu);
    if (e->tail) e->tail->next = s;
    else e->head = s;
    e->tail = s;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    *out = s;
    return 0;
}

void bk_task_set_yield(bk_task *t, bk_yield_fn fn, void *arg)
{
    t->yield = fn;
    t->yield_arg = arg;
}

int bk_materialize(bk_task *t)
{
    if (t->mode != BK_CHANGELOG) return -EINVAL;
    int rc = bk_poll(t);
    if (rc < 0) return rc;
    if (t->running) return 0;
    bk_snap *s;
    rc = start_snapshot(t, 0, &s);
    if (rc < 0) return rc;
    snap_unref(s, 1);                          /* t->running holds it */
    return 1;
}

int bk_poll(bk_task *t)
{
    bk_snap *s = t->running;
    if (!s || !atomic_load(&s->complete)) return 0;
    t->running = NULL;
    if (s->err) {
        int err = s->err;
        if (s->loaded_state) t->loaded = 1;    /* still only in memory */
        snap_unref(s, 1);
        return err;
    }
    /* DURABILITY: the snapshot's future completed: every record of it is durable at the
     * snapshot storage's level (remote: the objects are complete). Only now is the changelog
     * below its seq given up; a crash before this line leaves the old snapshot + the full
     * changelog, still restorable. Handles of retained checkpoints keep their own segments
     * until they are discarded. */
    int rc = dstl_truncate(t->snapw, s->from_seq);
    if (rc == 0 && t->changelog) rc = dstl_truncate(t->changelog, s->changelog_from);
    snap_unref(t->cur, 1);
    t->cur = s;
    atomic_fetch_add(&t->materializations, 1);
    return rc;
}

/* ---- checkpoints ----------------------------------------------------------------------- */

static void part_changelog_done(dstl_future *f, void *arg)
{
    /* DURABILITY: the changelog persist completed: its handle's records are durable at the
     * changelog storage's level, and the part's snapshot was durable before the part began.
     * The part is acknowledged to the coordinator only now (or failed with the error). */
    bk_part *p = arg;
    p->err = dstl_future_result(f, &p->changelog);
    p->fn(p, p->arg);
}

static void part_snapshot_done(void *arg)
{
    bk_part *p = arg;
    p->err = p->snap->err;
    p->fn(p, p->arg);
}

int bk_checkpoint(bk_task *t, uint64_t cp, bk_part_fn fn, void *arg, bk_part **out)
{
    if (t->mode == BK_DETACHED || !fn || !out) return -EINVAL;
    if (cp <= t->faults.fail_checkpoints_upto) {
        fprintf(stderr, "backend: task %u: checkpoint %llu fails (test seam fail_checkpoints_upto)\n",
                t->index, (unsigned long long)cp);
        return -EIO;
    }
    int rc;
    /* full mode: the last checkpoint's snapshot must be taken over first; had it failed, that
     * checkpoint failed with it (its part has the error), so the error is not this one's */
    if (t->mode == BK_FULL) (void)bk_poll(t);
    bk_part *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    *p = (bk_part){.env = t->env, .task = t->index, .kg_first = t->kg_first, .kg_last = t->kg_last, .fn = fn, .arg = arg};
    if (t->mode == BK_FULL) {
        if (t->running) {                      /* one checkpoint at a time: never here */
            free(p);
            return -EBUSY;
        }
        rc = start_snapshot(t, cp, &p->snap);  /* the part holds this reference */
        if (rc < 0) {
            free(p);
            return rc;
        }
        *out = p;
        snap_on_complete(p->snap, part_snapshot_done, p);
        return 0;
    }
    if (t->loaded || (t->running && t->running->loaded_state)) {
        free(p);                               /* the changelog lacks the loaded state */
        return -EAGAIN;
    }
    if (t->cur) atomic_fetch_add(&t->cur->refs, 1);
    p->snap = t->cur;
    rc = dstl_persist(t->changelog, t->cur ? t->cur->changelog_from : 0, cp, &p->f);
    if (rc < 0) {
        snap_unref(p->snap, 1);
        free(p);
        return rc;
    }
    *out = p;
    dstl_future_on_done(p->f, part_changelog_done, p);
    return 0;
}

int bk_part_result(bk_part *p) { return p->err; }
uint32_t bk_part_task(const bk_part *p) { return p->task; }

void bk_part_range(const bk_part *p, uint32_t *first, uint32_t *last)
{
    *first = p->kg_first;
    *last = p->kg_last;
}

const dstl_handle *bk_part_snapshot(const bk_part *p) { return p->snap ? p->snap->h : NULL; }
const dstl_handle *bk_part_changelog(const bk_part *p) { return p->changelog; }

static void part_release(bk_part *p, int discard)
{
    if (!p) return;
    dstl_future_free(p->f);
    if (p->changelog) {
        if (discard) dstl_handle_discard(p->env->changelog, p->changelog);
        dstl_handle_free(p->changelog);
    }
    snap_unref(p->snap, discard);
    free(p);
}

void bk_part_discard(bk_part *p) { part_release(p, 1); }
void bk_part_free(bk_part *p) { part_release(p, 0); }

/* ---- restore --------------------------------------------------------------------------- */

int bk_apply(bk_task *t, const dstl_record *rec)
{
    if (rec->is_meta) return 0;
    dstl_state_change sc;
    int rc = dstl_state_change_decode(rec->data, rec->len, &sc);
    if (rc < 0) return rc;
    uint32_t kg = dstl_key_group(sc.key, sc.key_len, t->max_p);
    if (kg != rec->key_group)
        return DSTL_ECORRUPT;                  /* a record filed under another key's group */
    if (kg < t->kg_first || kg > t->kg_last) return -EINVAL;
    if (sc.state_id != BK_STATE_VALUE && sc.state_id != BK_STATE_MAP) return -EINVAL;
    switch (sc.op) {
    case DSTL_SC_PUT:
        return kv_put(&t->state, (uint8_t)sc.state_id, kg, sc.key, sc.key_len, sc.user_key,
                      sc.user_key_len, sc.value, sc.value_len);
    case DSTL_SC_DELETE:
        kv_del(&t->state, (uint8_t)sc.state_id, sc.key, sc.key_len, sc.user_key, sc.user_key_len);
        return 0;
    case DSTL_SC_METADATA:
        return 0;
    default:
        return -EINVAL;
    }
}
