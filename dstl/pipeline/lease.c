/*
 * dstl/pipeline/lease.c — the run's lease object (dstl/README.md, "Who may delete what"):
 * written before the run's first upload, refreshed every dstl.remote.lease-refresh, checked
 * before any upload is acknowledged. Pipeline thread only.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dstl/clock.h"
#include "dstl/pipeline/pipeline_int.h"
#include "dstl/remote/remote.h"
#include "dstl/storage.h"
#include "s3/s3.h"

/* A failed lease write is tried again after a quarter of lease-refresh, at least this. */
#define LEASE_RETRY_MIN_NS 100000000ull

/* A lease write has the bound of an upload. */
static uint64_t lease_bound_ns(const dstl_storage *s)
{
    return (s->conf.upload_max_attempts * s->conf.upload_timeout_ms + REMOTE_SLACK_MS) * 1000000ull;
}

/* Whether uploads of this run may be acknowledged at now: 0; -EAGAIN when the lease was
 * never written yet; DSTL_EREMOTE with why when the run is fenced: its last successful
 * refresh is older than lease-timeout - 2 x lease-refresh, so a gc elsewhere may soon (after
 * lease-timeout) take the run for dead; past lease-timeout it stays fenced for good (such a
 * gc may have deleted objects this run still uses: reopen the storage). */
int lease_check(pipeline_loop *loop, uint64_t now, char *why, size_t cap)
{
    dstl_storage *s = loop->s;
    lease_state *l = &loop->lease;
    if (!l->ok_ns) return -EAGAIN;
    uint64_t age_ms = (now - l->ok_ns) / 1000000, t = s->conf.lease_timeout_ms, r = s->conf.lease_refresh_ms;
    if (age_ms > t) l->lapsed = 1;
    if (!l->lapsed && age_ms <= t - 2 * r) return 0;
    /* What it means first, then which lease and why: the detail is bounded, keys are long. */
    snprintf(why, cap, "%s: the run's lease s3://%.63s/%.300s was last refreshed %llu ms ago%s%.200s",
             l->lapsed ? "persists stay fenced, reopen the storage: past dstl.remote.lease-timeout another "
                         "machine's gc may have taken this run for dead"
                       : "persists are fenced until a refresh succeeds (dstl.remote.lease-timeout - 2 x "
                         "dstl.remote.lease-refresh)",
             s->remote.bucket, s->loop.lease_key, (unsigned long long)age_ms, l->err[0] ? "; last attempt: " : "",
             l->err);
    return DSTL_EREMOTE;
}

static void on_lease_put(void *ctx, const s3_result *r)
{
    pipeline_loop *loop = ctx;
    dstl_storage *s = loop->s;
    lease_state *l = &loop->lease;
    l->op = NULL;
    l->cancelled = 0;
    uint64_t now = now_ns();
    if (r->err == 0) {
        /* A write sent after the last one had gone stale comes too late: gc elsewhere may
         * have taken the run for dead meanwhile (fenced for good: lease_check). */
        if (l->ok_ns && (l->sent_ns - l->ok_ns) / 1000000 > s->conf.lease_timeout_ms) l->lapsed = 1;
        /* Valid from when it was sent: the server's LastModified can only be later. */
        l->ok_ns = l->sent_ns;
        l->err[0] = '\0';
        l->next_ns = l->sent_ns + s->conf.lease_refresh_ms * 1000000ull;
    } else {
        snprintf(l->err, sizeof l->err, "%.500s", r->error);
        uint64_t retry = s->conf.lease_refresh_ms / 4 * 1000000ull;
        l->next_ns = now + (retry < LEASE_RETRY_MIN_NS ? LEASE_RETRY_MIN_NS : retry);
    }
    l->written(loop, r);      /* the batches that waited for the first lease */
}

/* Writes (or rewrites) the run's lease object, unless a write is under way. */
void lease_start(pipeline_loop *loop)
{
    dstl_storage *s = loop->s;
    lease_state *l = &loop->lease;
    if (l->op) return;
    if (!s->loop.lease_key[0]) {
        if (remote_lease_key(&s->remote, s->run_id, s->conf.lease_timeout_ms, s->loop.lease_key, sizeof s->loop.lease_key) < 0) {
            snprintf(l->err, sizeof l->err, "lease key under s3://%.63s/%.300s: too long", s->remote.bucket,
                     s->remote.prefix);
            s->loop.lease_key[0] = '\0';
            return;
        }
        char host[128] = "";
        gethostname(host, sizeof host - 1);
        int n = snprintf(l->body, sizeof l->body, "dstl lease\nrun %s\nhost %.100s\npid %ld\nrefresh_ms %llu\n"
                         "timeout_ms %llu\n", s->run_id, host, (long)getpid(),
                         (unsigned long long)s->conf.lease_refresh_ms, (unsigned long long)s->conf.lease_timeout_ms);
        l->len = n > 0 && (size_t)n < sizeof l->body ? (size_t)n : 0;
    }
    l->sent_ns = now_ns();
    s->loop.lease_tried = 1;
    int rc = s3_put_object(s->loop.s3, s->remote.bucket, s->loop.lease_key, l->body, l->len, false, &l->op, on_lease_put, loop);
    if (rc < 0) {
        s3_result r = {.err = rc};
        snprintf(r.error, sizeof r.error, "PUT s3://%.63s/%.300s could not start: %.100s", s->remote.bucket,
                 s->loop.lease_key, dstl_strerror(rc));
        on_lease_put(loop, &r);
    }
}

/* The lease's part of a loop turn: a write past its bound (an upload's) is cancelled — at close
 * none is waited for, close removes the lease anyway; on_lease_put then runs on the next turn
 * with -ECANCELED, and no new write starts before it — and a refresh that is due starts. */
void lease_tick(pipeline_loop *loop, uint64_t now, int closing)
{
    lease_state *l = &loop->lease;
    if (l->op && !l->cancelled && (closing || now >= l->sent_ns + lease_bound_ns(loop->s))) {
        s3_op_cancel(l->op);
        l->cancelled = 1;
    }
    if (l->sent_ns && !l->op && now >= l->next_ns && !closing) lease_start(loop);
}

uint64_t lease_next_deadline(const pipeline_loop *loop)
{
    const lease_state *l = &loop->lease;
    if (l->op) return l->cancelled ? UINT64_MAX : l->sent_ns + lease_bound_ns(loop->s);
    return l->sent_ns ? l->next_ns : UINT64_MAX;
}
