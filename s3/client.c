/*
 * s3/client.c — the client: its options and credentials, the event loop that drives it
 * (s3_client_run), and the ops with their completion queue. The rest of the engine is in
 * request.c (requests, attempts, retries, hedges), response.c (what an attempt received and
 * whether it wins), transport_curl.c and transport_fake.c (the network and its test twin),
 * timer.c and endpoint.c; they share s3/engine.h.
 *
 * The loop. One turn of s3_client_run does what needs no waiting (step: completions, timers,
 * detached deadlines, queued launches, test answers), waits on the network, the wakeup, the
 * caller's fds and the next timer or deadline, moves the transfers on, then does it again. Completions due run before
 * anything is launched: an op that was cancelled or failed (and queued the cleanup it needs)
 * has its callback run before any cleanup request goes out.
 *
 * Ops: a finished op waits in the completion queue for its callback (the next turn at the
 * latest); a parent that no longer wants a child drops it (s3_op_drop: no callback). Detached
 * ops (cleanups) are kept on their own list with a deadline (cleanup_timeout_ms), past which
 * they are dropped; s3_client_free gives them all one such bound together.
 *
 * Threads: everything runs on the client's thread; only s3_client_wakeup (curl_multi_wakeup)
 * is called from others. Callbacks of ops run from s3_client_run's completion queue, never
 * inside a start call; request callbacks (internal) run from the loop too.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "s3/engine.h"

/* ---- ops ---- */

s3_op *s3_op_new(s3_client *c, size_t size, s3_done_fn cb, void *ctx)
{
    s3_op *op = calloc(1, size);
    if (!op) return NULL;
    op->c = c;
    op->cb = cb;
    op->ctx = ctx;
    op->next = c->ops;
    if (c->ops) c->ops->prev = op;
    c->ops = op;
    return op;
}

static void op_unlink(s3_op *op)
{
    s3_client *c = op->c;
    if (op->prev) op->prev->next = op->next;
    else c->ops = op->next;
    if (op->next) op->next->prev = op->prev;
}

void s3_op_discard(s3_op *op)
{
    if (!op) return;
    op_unlink(op);
    if (op->destroy) op->destroy(op);
    free(op);
}

static void done_remove(s3_client *c, s3_op *op)
{
    if (op->prev_done) op->prev_done->next_done = op->next_done;
    else c->done_head = op->next_done;
    if (op->next_done) op->next_done->prev_done = op->prev_done;
    else c->done_tail = op->prev_done;
    op->next_done = op->prev_done = NULL;
}

static void detached_remove(s3_client *c, s3_op *op)
{
    if (op->prev_det) op->prev_det->next_det = op->next_det;
    else c->detached = op->next_det;
    if (op->next_det) op->next_det->prev_det = op->prev_det;
    op->next_det = op->prev_det = NULL;
}

void s3_op_finish(s3_op *op)
{
    if (op->finished) return;
    op->finished = true;
    s3_client *c = op->c;
    op->next_done = NULL;
    op->prev_done = c->done_tail;
    if (c->done_tail) c->done_tail->next_done = op;
    else c->done_head = op;
    c->done_tail = op;
}

void s3_op_drop(s3_op *op)
{
    if (!op) return;
    s3_client *c = op->c;
    if (op->finished) done_remove(c, op);
    if (op->detached) {
        detached_remove(c, op);
        if (!op->finished || op->res.err) c->stats.cleanups_incomplete++;
    }
    op_unlink(op);
    op->finished = true; /* nothing may queue it any more */
    if (op->destroy) op->destroy(op);
    free(op);
}

void s3_op_detach(s3_op *op)
{
    s3_client *c = op->c;
    op->internal = true;
    op->detached = true;
    op->deadline_ms = s3_client_now_ms(c) + c->o.cleanup_timeout_ms;
    op->next_det = c->detached;
    op->prev_det = NULL;
    if (c->detached) c->detached->prev_det = op;
    c->detached = op;
    c->stats.cleanups++;
}

void s3_op_cancel(s3_op *op)
{
    if (!op || op->finished || op->cancelled) return;
    op->cancelled = true;
    if (op->cancel) op->cancel(op);
}

/* Runs the callbacks of finished ops; returns how many user ops completed. */
static int drain_done(s3_client *c)
{
    int ran = 0;
    s3_op *op;
    while ((op = c->done_head)) {
        done_remove(c, op);
        op_unlink(op);
        if (op->detached) {
            detached_remove(c, op);
            if (op->res.err) c->stats.cleanups_incomplete++;
        }
        if (!op->internal) ran++;
        if (op->cb) op->cb(op->ctx, &op->res);
        if (op->destroy) op->destroy(op);
        free(op);
    }
    return ran;
}

/* Drops the detached cleanups whose deadline has passed (their requests are cancelled). */
static void expire_cleanups(s3_client *c)
{
    if (!c->detached) return;
    uint64_t now = s3_client_now_ms(c);
    for (s3_op *op = c->detached, *next; op; op = next) {
        next = op->next_det;
        if (!op->finished && now >= op->deadline_ms) {
            s3_op_drop(op);
            next = c->detached; /* dropping may have unlinked others: start over */
        }
    }
}

/* ---- the loop ---- */

/* Everything that needs no waiting: completions, timers, queued launches, fake answers.
 * Completions due run before anything is launched: an op that was cancelled or failed (and
 * queued the cleanup it needs) has its callback run before any cleanup request goes out. */
static int step(s3_client *c)
{
    int ran = 0;
    for (int round = 0; round < 8; round++) {
        ran += drain_done(c);
        s3_timers_fire(&c->timers, s3_client_now_ms(c));
        expire_cleanups(c);
        s3_launch_queued(c);
        s3_fake_deliver(c);
        int n = drain_done(c);
        ran += n;
        bool more = c->fake_ready || c->done_head ||
                    (c->queue_head && c->n_running < c->o.connections);
        if (!more) break;
    }
    return ran;
}

int s3_client_run(s3_client *c, s3_waitfd *extra, size_t n_extra, int timeout_ms)
{
    if (c->in_run) return -EDEADLK;
    c->in_run = true;
    int ran = step(c);
    /* a negative timeout waits for activity (an hour at most per turn) */
    long wait = ran || c->fake_ready || c->done_head ? 0 : timeout_ms < 0 ? 3600000 : timeout_ms;
    if (c->timers) {
        uint64_t now = s3_client_now_ms(c);
        long until = c->timers->due_ms <= now ? 0 : (long)(c->timers->due_ms - now);
        if (until < wait) wait = until;
    }
    for (const s3_op *op = c->detached; op; op = op->next_det) {
        uint64_t now = s3_client_now_ms(c);
        long until = op->deadline_ms <= now ? 0 : (long)(op->deadline_ms - now);
        if (until < wait) wait = until;
    }
    int rc = 0;
    bool net_active = c->n_running > 0 && !c->o.transport;
    if (!net_active && n_extra == 0 && c->o.sleep_ms) {
        if (wait > 0) c->o.sleep_ms(c->o.seam_ctx, (uint32_t)wait);
    } else {
        rc = s3_curl_poll(c, extra, n_extra, (int)wait);
    }
    s3_curl_perform(c);
    ran += step(c);
    c->in_run = false;
    return rc ? rc : ran;
}

void s3_client_wakeup(s3_client *c)
{
    s3_curl_wakeup(c);
}

size_t s3_client_pending(const s3_client *c)
{
    size_t n = 0;
    for (const s3_op *op = c->ops; op; op = op->next) n += !op->internal;
    return n;
}

bool s3_client_md5_checks(const s3_client *c) { return c && c->md5_checks; }

size_t s3_client_cleanups(const s3_client *c)
{
    size_t n = 0;
    for (const s3_op *op = c->detached; op; op = op->next_det) n += !op->finished;
    return n;
}

void s3_client_stats(const s3_client *c, s3_stats *out)
{
    *out = c->stats;
}

const s3_opts *s3_client_opts(const s3_client *c)
{
    return &c->o;
}

/* ---- the client ---- */

/* The defaults of s3_opts (s3.h), applied to o. */
static void opts_defaults(s3_opts *o)
{
    if (!o->region || !*o->region) o->region = "us-east-1";
    if (o->connections <= 0) o->connections = 8;
    if (o->connections > 64) o->connections = 64;
    if (!o->connect_timeout_ms) o->connect_timeout_ms = 5000;
    if (!o->attempt_timeout_ms) o->attempt_timeout_ms = 1000;
    if (!o->transfer_timeout_ms) {
        o->transfer_timeout_ms = 3 * o->attempt_timeout_ms;
        if (o->transfer_timeout_ms < 10000) o->transfer_timeout_ms = 10000;
    }
    if (o->max_attempts <= 0) o->max_attempts = 3;
    if (!o->next_attempt_delay_ms) o->next_attempt_delay_ms = 500;
    if (!o->max_backoff_ms) o->max_backoff_ms = 20 * o->next_attempt_delay_ms;
    if (!o->max_response_bytes) o->max_response_bytes = 16u << 20;
    if (!o->cleanup_timeout_ms) {
        uint64_t t = (uint64_t)o->max_attempts * o->attempt_timeout_ms + 1000;
        o->cleanup_timeout_ms = t > UINT32_MAX ? UINT32_MAX : (uint32_t)t;
    }
}

/* Wipes the credentials and frees the client's memory (its multi handle is closed already, or
 * was never made). */
static void client_dealloc(s3_client *c)
{
    OPENSSL_cleanse(&c->cred, sizeof c->cred);
    free(c->endpoint);
    free(c->region);
    free(c->ca_file);
    free(c);
}

int s3_client_new(const s3_opts *opts, s3_client **out, s3_result *res)
{
    s3_result scratch;
    if (!res) res = &scratch;
    memset(res, 0, sizeof *res);
    s3_opts o = opts ? *opts : (s3_opts){0};
    if (!o.crc32c) {
        s3_result_fail(res, -EINVAL, "S3 client: s3_opts.crc32c is NULL (the caller must give "
                       "the CRC32C function for x-amz-checksum-crc32c)");
        return -EINVAL;
    }
    opts_defaults(&o);

    s3_client *c = calloc(1, sizeof *c);
    if (c) c->attempt_end = s3_attempt_end;   /* how the transports end an attempt */
    if (!c) return s3_result_fail(res, -ENOMEM, "S3 client: out of memory"), -ENOMEM;
    char ep[300];
    if (!o.endpoint || !*o.endpoint) {
        s3_endpoint_default(o.region, ep, sizeof ep);
        o.endpoint = ep;
    }
    c->endpoint = strdup(o.endpoint);
    c->region = strdup(o.region);
    c->ca_file = o.ca_file && *o.ca_file ? strdup(o.ca_file) : NULL;
    int rc = (!c->endpoint || !c->region) ? -ENOMEM : 0;
    if (rc) s3_result_fail(res, rc, "S3 client: out of memory");
    if (!rc) rc = s3_endpoint_parse(c->endpoint, c->scheme, c->authority, res);
    if (!rc) {
        char why[512];
        rc = s3_credentials_resolve(o.access_key, o.secret_key, o.session_token,
                                    o.credentials_file, o.profile, &c->cred, why, sizeof why);
        if (rc) {
            rc = -EINVAL;
            s3_result_fail(res, rc, "S3 client for %s: %s", c->endpoint,
                           why[0] ? why : "credential value too long");
        }
    }
    if (!rc) rc = s3_curl_open(c, o.connections, res);
    if (rc) {
        client_dealloc(c);
        return rc;
    }
    o.endpoint = c->endpoint;
    o.region = c->region;
    o.ca_file = c->ca_file;
    o.access_key = o.secret_key = o.session_token = NULL; /* kept in c->cred only */
    o.profile = o.credentials_file = NULL;
    c->o = o;
    c->rng = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() ^ (uintptr_t)c;
    if (!c->rng) c->rng = 1;
    *out = c;
    return 0;
}

/* Waiting turns of s3_client_free: short, so that its one bound is kept closely. */
#define FREE_TURN_MS 50

void s3_client_free(s3_client *c)
{
    if (!c) return;
    /* cancel every user op: their callbacks run on the first turn below */
    for (;;) {
        s3_op *op = c->ops;
        while (op && (op->internal || op->finished || op->cancelled)) op = op->next;
        if (!op) break;
        s3_op_cancel(op);
    }
    /* then the detached cleanups (aborts, deletes) get cleanup_timeout_ms in all */
    uint64_t deadline = s3_client_now_ms(c) + c->o.cleanup_timeout_ms;
    bool first = true;
    while (first || c->done_head || s3_client_cleanups(c) > 0) {
        uint64_t now = s3_client_now_ms(c);
        if (!first && now >= deadline) break;
        long left = (long)(deadline > now ? deadline - now : 0);
        first = false;
        if (s3_client_run(c, NULL, 0, left < FREE_TURN_MS ? (int)left : FREE_TURN_MS) < 0) break;
    }
    /* what is left is abandoned (dstl gc removes it): dropped without callbacks */
    while (c->detached) s3_op_drop(c->detached);
    while (c->ops) s3_op_drop(c->ops); /* their requests go with them */
    while (c->reqs) s3_req_cancel(c->reqs);
    s3_curl_close(c);
    client_dealloc(c);
}
