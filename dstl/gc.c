/*
 * dstl/gc.c — the orphan sweep: delete every segment in the local dir that no live handle
 * references, that is older than min_age, and that this storage is not still using.
 *
 * "Still using" means: a segment of this run that the registry knows (being written,
 * referenced by a writer section or a live handle, or queued for deletion), or a name the
 * pipeline reserved ahead (segment numbers at or above the next one). Segments of other
 * runs are judged only by the live set and their age: this is how the leftovers of a crash
 * go. Runs on the caller's thread; blocking (directory listing, unlinks).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dstl/err.h"
#include "dstl/internal.h"
#include "dstl/segstore.h"

typedef struct {
    dstl_storage *s;
    const char **live;          /* sorted names */
    size_t nlive;
    uint64_t min_age_ms;
    int64_t now_ms;
    int dry_run;
    dstl_gc_report rep;
    int err;
} gc_ctx;

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* 0: not this run's; 1: a segment this run still knows; 2: a name reserved ahead (an empty
 * file, not a segment yet). */
static int in_use(dstl_storage *s, const char *name)
{
    char run[32];
    uint64_t no;
    if (segment_name_parse(name, run, sizeof run, &no) < 0 || strcmp(run, s->run_id) != 0) return 0;
    pthread_mutex_lock(&s->mu);
    int used = no >= s->next_seg_no ? 2 : u64map_get(&s->segs, no) != NULL;
    pthread_mutex_unlock(&s->mu);
    return used;
}

static int visit(void *arg, const char *name, uint64_t size, int64_t mtime_ms)
{
    gc_ctx *g = arg;
    int use = in_use(g->s, name);
    if (use == 2) return 0;
    g->rep.scanned++;
    if (use || bsearch(&name, g->live, g->nlive, sizeof *g->live, cmp_str)) {
        g->rep.kept_live++;
        return 0;
    }
    if (g->now_ms - mtime_ms < (int64_t)g->min_age_ms) {
        g->rep.kept_young++;
        return 0;
    }
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
    g.now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    int rc = segstore_list(s->local_dir, visit, &g);
    free(g.live);
    if (rc < 0) return g.err ? rc : err_fail(rc, "dstl_gc %s: %s", s->local_dir, dstl_last_error());
    *out = g.rep;
    return 0;
}
