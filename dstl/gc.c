/*
 * dstl/gc.c — the orphan sweep: delete every segment in the local dir and under the remote
 * prefix that belongs to a run that is not alive, that no live handle references and that is
 * older than min_age; abort the incomplete multipart uploads of dead runs; remove stale leases
 * and the lock files of dead runs that keep no file (dstl/README.md, "Who may delete what").
 *
 * Alive: another run is alive while its lock <dir>/<run>.lock is held (segstore_owner_alive,
 * probed once per run per sweep) or, for remote copies, while its lease under PREFIX/_leases/
 * is younger than its timeout on the server's clock; everything of a live run is kept
 * (kept_running). This storage's own run: a segment the registry knows, or a name it reserved
 * ahead, is kept; others of its run (a failed write's leftovers) go like a dead run's.
 *
 * Remote (dstl.remote.uri set): uploads, then objects, then leases are listed (a live run's
 * lease precedes its first object, so listing leases last never misses one). A key counts only
 * when it is exactly where remote_key() puts a segment ("PREFIX/hh/<segment name>"); anything
 * else under the prefix is not DSTL's and is neither scanned nor touched. Ages: the listing's
 * Date against LastModified / Initiated; without either, nothing counts as old (unless
 * min_age is 0). The report counts remote objects like local files (a segment with both copies
 * is scanned twice); an aborted upload counts as deleted with 0 bytes.
 *
 * Threads: the caller's. The pipeline's S3 client is the pipeline thread's, so a gc call makes
 * its own client (remote_client_new) and frees it before returning. Blocking: directory
 * listing, unlinks, S3 listings, DeleteObjects, AbortMultipartUpload.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dstl/err.h"
#include "dstl/handle.h"
#include "dstl/storage.h"
#include "dstl/local/segstore.h"

/* What gc learned of another run: whether it is alive, and whether it keeps files. */
typedef struct {
    char id[32];
    int alive;                  /* its lock is held in this dir */
    int leased;                 /* its remote lease is fresh (server clock) */
    int kept;                   /* some file of it stays after this sweep */
} run_info;

typedef struct {
    dstl_storage *s;
    const char **live;          /* sorted names */
    size_t nlive;
    uint64_t min_age_ms;
    int64_t now_ms;
    int dry_run;
    dstl_gc_report rep;
    int err;
    run_info *runs;             /* other runs met so far (a few: one per run that left files) */
    size_t nruns, capruns;
} gc_ctx;

enum { GC_RESERVED, GC_KEEP_LIVE, GC_KEEP_YOUNG, GC_KEEP_RUNNING, GC_DELETE };

/* The record of run `id`, its liveness probed once per sweep (a dead run never comes back:
 * run ids are fresh per storage open; a run seen alive stays kept for the whole sweep). */
static run_info *run_of(gc_ctx *g, const char *id)
{
    for (size_t i = 0; i < g->nruns; i++)
        if (strcmp(g->runs[i].id, id) == 0) return &g->runs[i];
    if (g->nruns == g->capruns) {
        size_t cap = g->capruns ? 2 * g->capruns : 16;
        run_info *n = realloc(g->runs, cap * sizeof *n);
        if (!n) return NULL;
        g->runs = n;
        g->capruns = cap;
    }
    run_info *r = &g->runs[g->nruns];
    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", id);
    int alive = segstore_owner_alive(g->s->local_dir, id);
    if (alive < 0) return NULL;         /* detail set: a lock we cannot judge */
    r->alive = alive;
    g->nruns++;
    return r;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* 0: not this run's; 1: a segment this run still knows; 2: a name reserved ahead (an empty
 * file, not a segment yet). */
static int in_use(dstl_storage *s, const char *name)
{
    char run[32];
    uint64_t no;
    if (segment_name_parse(name, run, sizeof run, &no) < 0 || strcmp(run, s->run_id) != 0) return 0;
    pthread_mutex_lock(&s->mu);
    int used = no >= s->locked.reg.next_seg_no ? 2 : u64map_get(&s->locked.reg.segs, no) != NULL;
    pthread_mutex_unlock(&s->mu);
    return used;
}

/* What to do with the copy `name` made at time_ms (0: unknown). Counts it in the report,
 * except a reserved name, which is not a segment yet. by_live: whether the live set keeps it. */
/* remote: name is a remote copy, judged also by its run's lease; now_ms is the clock time_ms
 * is judged against (the local one for files, the server's for objects; 0: unknown, so
 * nothing counts as old unless min_age is 0). */
static int verdict(gc_ctx *g, const char *name, int64_t time_ms, int64_t now_ms, int by_live, int remote)
{
    int use = in_use(g->s, name);
    if (use == 2) return GC_RESERVED;
    run_info *run = NULL;
    char id[32];
    uint64_t no;
    if (!use && segment_name_parse(name, id, sizeof id, &no) == 0 && strcmp(id, g->s->run_id) != 0) {
        if (!(run = run_of(g, id))) {
            g->err = err_fail(-EIO, "dstl_gc: cannot tell whether run %s (of %s) is alive: %s", id, name,
                              dstl_last_error());
            return -1;
        }
    }
    g->rep.scanned++;
    if (run && (run->alive || (remote && run->leased))) {
        /* A running storage's files: reserved names, segments being written, segments held
         * only by its writers' sections. Its lock (on this machine) or its fresh lease (on any)
         * says it is alive, whatever live and min_age. */
        run->kept = 1;
        g->rep.kept_running++;
        return GC_KEEP_RUNNING;
    }
    int v = GC_DELETE;
    if (use || (by_live && bsearch(&name, g->live, g->nlive, sizeof *g->live, cmp_str))) {
        g->rep.kept_live++;
        v = GC_KEEP_LIVE;
    } else if (g->min_age_ms > 0 && (time_ms <= 0 || now_ms <= 0 || now_ms - time_ms < (int64_t)g->min_age_ms)) {
        /* (a server's Date has whole seconds: it may read earlier than a LastModified) */
        g->rep.kept_young++;
        v = GC_KEEP_YOUNG;
    }
    if (run && v != GC_DELETE) run->kept = 1;
    return v;
}

static int visit(void *arg, const char *name, uint64_t size, int64_t mtime_ms)
{
    gc_ctx *g = arg;
    int v = verdict(g, name, mtime_ms, g->now_ms, 1, 0);
    if (v < 0) return g->err;
    if (v != GC_DELETE) return 0;
    if (!g->dry_run) {
        int rc = segstore_unlink(g->s->store, name);
        if (rc < 0 && rc != -ENOENT) {
            g->err = rc;
            return rc;
        }
    }
    g->rep.deleted++;
    g->rep.bytes_deleted += size;
    return 0;
}

/* ---- the remote prefix ---- */

/* The segment name of key when key is exactly where remote_key() puts that segment, else NULL
 * (not a DSTL segment object: left alone). */
static const char *segment_of(const remote_loc *loc, const char *key)
{
    const char *name = strrchr(key, '/');
    name = name ? name + 1 : key;
    char run[32], want[640];
    uint64_t no;
    if (segment_name_parse(name, run, sizeof run, &no) < 0) return NULL;
    if (remote_key(loc, name, want, sizeof want) < 0 || strcmp(want, key) != 0) return NULL;
    return name;
}

/* Deletes the orphan objects in one DeleteObjects run (batches of 1,000 inside). */
static int sweep_objects(gc_ctx *g, s3_client *cli, const s3_list *l, const char *prefix)
{
    const remote_loc *loc = &g->s->remote;
    const char **doomed = malloc((l->n_objects ? l->n_objects : 1) * sizeof *doomed);
    if (!doomed) return err_fail(-ENOMEM, "dstl_gc: out of memory for %zu keys", l->n_objects);
    size_t n = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < l->n_objects; i++) {
        const s3_object_info *o = &l->objects[i];
        const char *name = segment_of(loc, o->key);
        int v = name ? verdict(g, name, o->last_modified_ms, l->server_date_ms, 1, 1) : GC_KEEP_LIVE;
        if (v < 0) {
            free(doomed);
            return g->err;
        }
        if (v != GC_DELETE) continue;
        doomed[n++] = o->key;
        bytes += o->size;
    }
    int rc = 0;
    if (n && !g->dry_run) {
        s3_result r;
        memset(&r, 0, sizeof r);
        rc = s3_delete_objects_sync(cli, loc->bucket, doomed, n, &r);
        if (rc < 0)
            err_fail(rc, "dstl_gc: delete %zu orphan objects under s3://%s/%s: %s", n, loc->bucket, prefix,
                     *r.error ? r.error : dstl_strerror(rc));
    }
    if (rc == 0) {
        g->rep.deleted += n;
        g->rep.bytes_deleted += bytes;
    }
    free(doomed);
    return rc;
}

/* Aborts the incomplete multipart uploads of segment keys that nobody here is uploading. */
static int sweep_uploads(gc_ctx *g, s3_client *cli, const s3_list *l)
{
    const remote_loc *loc = &g->s->remote;
    for (size_t i = 0; i < l->n_uploads; i++) {
        const s3_upload_info *u = &l->uploads[i];
        const char *name = segment_of(loc, u->key);
        int v = name ? verdict(g, name, u->initiated_ms, l->server_date_ms, 0, 1) : GC_KEEP_LIVE;
        if (v < 0) return g->err;
        if (v != GC_DELETE) continue;
        if (!g->dry_run) {
            s3_result r;
            memset(&r, 0, sizeof r);
            int rc = s3_abort_multipart_upload_sync(cli, loc->bucket, u->key, u->upload_id, &r);
            if (rc < 0)
                return err_fail(rc, "dstl_gc: abort the incomplete upload of s3://%s/%s: %s", loc->bucket, u->key,
                                *r.error ? r.error : dstl_strerror(rc));
        }
        g->rep.deleted++;
    }
    return 0;
}

/* A lease is fresh while younger than its timeout (the one in its key, or this storage's if
 * larger), on the server's clock: the listing's Date against its LastModified. Without a
 * Date, every lease counts as fresh. */
static int lease_fresh(const gc_ctx *g, const s3_list *l, const s3_object_info *o, uint64_t timeout_ms)
{
    uint64_t t = timeout_ms > g->s->conf.lease_timeout_ms ? timeout_ms : g->s->conf.lease_timeout_ms;
    if (l->server_date_ms <= 0 || o->last_modified_ms <= 0) return 1;
    return l->server_date_ms - o->last_modified_ms <= (int64_t)t;
}

static int judge_leases(gc_ctx *g, const s3_list *l)
{
    for (size_t i = 0; i < l->n_objects; i++) {
        char id[32];
        uint64_t t;
        const s3_object_info *o = &l->objects[i];
        if (remote_lease_parse(&g->s->remote, o->key, id, sizeof id, &t) < 0 || !lease_fresh(g, l, o, t)) continue;
        if (strcmp(id, g->s->run_id) == 0) continue;
        run_info *run = run_of(g, id);
        if (!run)
            return err_fail(-EIO, "dstl_gc: cannot tell whether run %s is alive: %s", id, dstl_last_error());
        run->leased = 1;
    }
    return 0;
}

/* Removes stale leases: their runs count as dead already, and a stale holder has fenced
 * itself for good (pipeline/lease.c lease_check). */
static int sweep_leases(gc_ctx *g, s3_client *cli, const s3_list *l)
{
    if (g->dry_run) return 0;
    const remote_loc *loc = &g->s->remote;
    const char **doomed = malloc((l->n_objects ? l->n_objects : 1) * sizeof *doomed);
    if (!doomed) return err_fail(-ENOMEM, "dstl_gc: out of memory for %zu keys", l->n_objects);
    size_t n = 0;
    for (size_t i = 0; i < l->n_objects; i++) {
        char id[32];
        uint64_t t;
        const s3_object_info *o = &l->objects[i];
        if (remote_lease_parse(loc, o->key, id, sizeof id, &t) == 0 && strcmp(id, g->s->run_id) != 0 &&
            !lease_fresh(g, l, o, t))
            doomed[n++] = o->key;
    }
    int rc = 0;
    if (n) {
        s3_result r;
        memset(&r, 0, sizeof r);
        rc = s3_delete_objects_sync(cli, loc->bucket, doomed, n, &r);
        if (rc < 0)
            err_fail(rc, "dstl_gc: delete %zu stale leases under s3://%s/: %s", n, loc->bucket,
                     *r.error ? r.error : dstl_strerror(rc));
    }
    free(doomed);
    return rc;
}

static int sweep_remote(gc_ctx *g)
{
    const remote_loc *loc = &g->s->remote;
    s3_client *cli = NULL;
    int rc = remote_client_new(&g->s->conf, &cli);
    if (rc < 0) return err_fail(rc, "dstl_gc s3://%s/%s: %s", loc->bucket, loc->prefix, dstl_last_error());
    char prefix[520];
    remote_list_prefix(loc, prefix, sizeof prefix);
    s3_list objects, uploads, leases;
    memset(&objects, 0, sizeof objects);
    memset(&uploads, 0, sizeof uploads);
    memset(&leases, 0, sizeof leases);
    s3_result r;
    memset(&r, 0, sizeof r);
    /* Uploads first: one that completes between the two listings then shows up as an object,
     * judged by the live set, instead of being missed by both. */
    rc = s3_list_multipart_uploads_all_sync(cli, loc->bucket, prefix, 0, &uploads, &r);
    if (rc < 0) {
        err_fail(rc, "dstl_gc: list the multipart uploads under s3://%s/%s: %s", loc->bucket, prefix,
                 *r.error ? r.error : dstl_strerror(rc));
        goto out;
    }
    rc = s3_list_objects_all_sync(cli, loc->bucket, prefix, 0, &objects, &r);
    if (rc < 0) {
        err_fail(rc, "dstl_gc: list s3://%s/%s: %s", loc->bucket, prefix, *r.error ? r.error : dstl_strerror(rc));
        goto out;
    }
    /* Leases last: a run whose object or upload is listed above wrote its lease before it
     * (it is written before the run's first upload), so a live run's lease is seen here. */
    char lprefix[600];
    remote_lease_prefix(loc, lprefix, sizeof lprefix);
    rc = s3_list_objects_all_sync(cli, loc->bucket, lprefix, 0, &leases, &r);
    if (rc < 0) {
        err_fail(rc, "dstl_gc: list the leases under s3://%s/%s: %s", loc->bucket, lprefix,
                 *r.error ? r.error : dstl_strerror(rc));
        goto out;
    }
    rc = judge_leases(g, &leases);
    if (rc == 0) rc = sweep_objects(g, cli, &objects, prefix);
    if (rc == 0) rc = sweep_uploads(g, cli, &uploads);
    if (rc == 0) rc = sweep_leases(g, cli, &leases);
out:
    s3_list_clear(&leases);
    s3_list_clear(&objects);
    s3_list_clear(&uploads);
    s3_client_free(cli);
    return rc;
}

/* Removes the lock files of dead runs that keep no file any more (what crashed runs leave
 * behind), under their lock: a live run's lock file is never removed. */
static int forget_one(void *arg, const char *owner)
{
    gc_ctx *g = arg;
    if (strcmp(owner, g->s->run_id) == 0) return 0;
    for (size_t i = 0; i < g->nruns; i++)
        if (strcmp(g->runs[i].id, owner) == 0 && (g->runs[i].alive || g->runs[i].leased || g->runs[i].kept)) return 0;
    int rc = segstore_owner_forget(g->s->local_dir, owner);
    return rc < 0 ? rc : 0;
}

static int forget_dead_runs(gc_ctx *g)
{
    int rc = segstore_list_owners(g->s->local_dir, forget_one, g);
    return rc < 0 ? err_fail(rc, "dstl_gc %s: %s", g->s->local_dir, dstl_last_error()) : 0;
}

int dstl_gc(dstl_storage *s, const dstl_handle *const *live, size_t n_live, uint64_t min_age_ms,
            int dry_run, dstl_gc_report *out)
{
    if (!s || !out || (n_live && !live)) return err_fail(-EINVAL, "dstl_gc: NULL argument");
    size_t total = 0;
    for (size_t i = 0; i < n_live; i++) {
        if (!live[i]) return err_fail(-EINVAL, "dstl_gc: live handle %zu is NULL", i);
        total += live[i]->wh->nsegs;
    }
    gc_ctx g = {.s = s, .min_age_ms = min_age_ms, .dry_run = dry_run};
    g.live = malloc((total ? total : 1) * sizeof *g.live);
    if (!g.live) return err_fail(-ENOMEM, "dstl_gc: out of memory");
    for (size_t i = 0; i < n_live; i++)
        for (size_t j = 0; j < live[i]->wh->nsegs; j++) g.live[g.nlive++] = live[i]->wh->segs[j].name;
    qsort(g.live, g.nlive, sizeof *g.live, cmp_str);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    g.now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + s->seams.wall_clock_skew_ms;
    int rc = segstore_list(s->local_dir, visit, &g);    /* the number listed, or < 0 */
    if (rc < 0 && !g.err) rc = err_fail(rc, "dstl_gc %s: %s", s->local_dir, dstl_last_error());
    if (rc >= 0) rc = s->loop.s3 ? sweep_remote(&g) : 0;
    if (rc >= 0 && !dry_run) rc = forget_dead_runs(&g);
    free(g.live);
    free(g.runs);
    if (rc < 0) return rc;
    *out = g.rep;
    return 0;
}
