/*
 * dstl/local/ioeng_fault.c — the fault-injecting engine: wraps any engine and, per a test's script,
 * turns the nth write into -ENOSPC / -EIO / a short write and the nth fdatasync or fsync into
 * -EIO (or any -errno).
 *
 * Why here: it sits below the front end, so the code under test is the real one — the front
 * end's short-write loop and error classification and everything above it — and the faults look
 * exactly like a kernel's: an error result is substituted when the request completes (the write
 * or sync did run: its outcome is "unknown", as after a real EIO), a short write is made by
 * halving the request before it reaches the kernel (the kernel reports fewer bytes, so the
 * front end must write the rest), and a split is made as a partial io_uring submit makes one:
 * the write goes to the inner engine alone, and its linked fdatasync is held here and handed on
 * (marked `split`, as ioeng_uring.c marks a cut chain) only at the first submit after the
 * write's result came back.
 *
 * Threads: the script (struct ioeng_fault) is shared and guarded by a mutex, so a test thread can
 * arm faults while the pipeline thread runs the engine; the wrapper itself is one thread at a
 * time, like every engine. Invariant: each rule fires at most once; a fired error rule holds one
 * entry of the wrapper's substitution table until its request completes, and a fired split rule
 * one entry of the held table until its fdatasync reached the inner engine, so neither table,
 * like the rule list, ever holds more than IOENG_FAULT_RULES_MAX entries. Held requests count
 * as the wrapper's (submit reports them as not yet taken by the kernel).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "dstl/err.h"
#include "dstl/local/ioeng_backend.h"

struct fault_rule {
    int kind;
    unsigned nth;
    int result;
    int fired;
};

struct ioeng_fault {
    pthread_mutex_t mu;
    unsigned seen[IOENG_OP_FSYNC + 1];   /* first requests counted, per kind      */
    unsigned all[IOENG_OP_FSYNC + 1];    /* every request, retries too, per kind  */
    unsigned fired;
    unsigned n_rules;
    struct fault_rule rules[IOENG_FAULT_RULES_MAX];
};

struct substitution {
    struct ioeng_req *req;
    int res;
};

/* An fdatasync cut from its write by a split rule. */
struct held_req {
    struct ioeng_req *req;      /* the fdatasync, not yet in the inner engine      */
    struct ioeng_req *after;    /* the write it was linked behind                  */
    int ready;                  /* the write's result was reaped: hand on at submit */
};

struct fault_backend {
    struct ioeng_backend base;
    struct ioeng_fault *f;
    struct ioeng_backend *inner;
    unsigned n_subst;
    struct substitution subst[IOENG_FAULT_RULES_MAX];
    unsigned n_held;
    struct held_req held[IOENG_FAULT_RULES_MAX];
};

int ioeng_fault_new(struct ioeng_fault **out)
{
    struct ioeng_fault *f = calloc(1, sizeof *f);
    if (!f) return err_fail(-ENOMEM, "fault script: out of memory");
    pthread_mutex_init(&f->mu, NULL);
    *out = f;
    return 0;
}

void ioeng_fault_free(struct ioeng_fault *f)
{
    if (!f) return;
    pthread_mutex_destroy(&f->mu);
    free(f);
}

int ioeng_fault_add(struct ioeng_fault *f, int kind, unsigned nth, int result)
{
    if (kind < IOENG_OP_WRITE || kind > IOENG_OP_FSYNC || nth == 0 || result == 0 ||
        (result > 0 && ((result != IOENG_FAULT_SHORT && result != IOENG_FAULT_SPLIT) ||
                        kind != IOENG_OP_WRITE)))
        return err_fail(-EINVAL, "fault rule kind %d nth %u result %d: expected a kind, nth >= 1 "
                        "and a -errno (or IOENG_FAULT_SHORT / IOENG_FAULT_SPLIT for writes)",
                        kind, nth, result);
    pthread_mutex_lock(&f->mu);
    int rc = 0;
    if (f->n_rules == IOENG_FAULT_RULES_MAX)
        rc = err_fail(-ENOSPC, "fault script full (%d rules)", IOENG_FAULT_RULES_MAX);
    else
        f->rules[f->n_rules++] = (struct fault_rule){kind, nth, result, 0};
    pthread_mutex_unlock(&f->mu);
    return rc;
}

/* counts[kind] under the mutex; 0 for an unknown kind. */
static unsigned count_of(struct ioeng_fault *f, const unsigned *counts, int kind)
{
    if (kind < IOENG_OP_WRITE || kind > IOENG_OP_FSYNC) return 0;
    pthread_mutex_lock(&f->mu);
    unsigned n = counts[kind];
    pthread_mutex_unlock(&f->mu);
    return n;
}

unsigned ioeng_fault_seen(struct ioeng_fault *f, int kind) { return count_of(f, f->seen, kind); }

unsigned ioeng_fault_requests(struct ioeng_fault *f, int kind)
{
    return count_of(f, f->all, kind);
}

unsigned ioeng_fault_fired(struct ioeng_fault *f)
{
    pthread_mutex_lock(&f->mu);
    unsigned n = f->fired;
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* The unfired rule for the count-th request of kind, or NULL. Caller holds the mutex. */
static struct fault_rule *match(struct ioeng_fault *f, int kind, unsigned count)
{
    for (unsigned i = 0; i < f->n_rules; i++) {
        struct fault_rule *r = &f->rules[i];
        if (!r->fired && r->kind == kind && r->nth == count) return r;
    }
    return NULL;
}

static int fault_prep(struct ioeng_backend *b, struct ioeng_req *const *reqs, unsigned n)
{
    struct fault_backend *fb = (struct fault_backend *)b;
    struct ioeng_fault *f = fb->f;
    struct fault_rule *hit[2] = {NULL, NULL};
    pthread_mutex_lock(&f->mu);
    /* Decide first (a short write must reach the inner engine halved), commit only once the
     * inner engine took the requests: a refused prep is retried and must count once. */
    unsigned extra[IOENG_OP_FSYNC + 1] = {0};
    for (unsigned i = 0; i < n && i < 2; i++) {
        struct ioeng_req *r = reqs[i];
        if (r->attempt != 0 || r->kind > IOENG_OP_FSYNC) continue;
        extra[r->kind]++;
        hit[i] = match(f, r->kind, f->seen[r->kind] + extra[r->kind]);
        if (hit[i] && hit[i]->result == IOENG_FAULT_SHORT && r->len >= 2) r->len /= 2;
    }
    /* A split needs a chain to cut: this write linked to the request after it. */
    int split = hit[0] && hit[0]->result == IOENG_FAULT_SPLIT && n == 2 && reqs[0]->link;
    if (hit[0] && hit[0]->result == IOENG_FAULT_SPLIT && !split) hit[0] = NULL; /* spent */
    unsigned to_inner = split ? 1 : n;
    int rc = fb->inner->ops->prep(fb->inner, reqs, to_inner);
    if (rc == 0) {
        for (int k = IOENG_OP_WRITE; k <= IOENG_OP_FSYNC; k++) f->seen[k] += extra[k];
        for (unsigned i = 0; i < to_inner; i++)
            if (reqs[i]->kind <= IOENG_OP_FSYNC) f->all[reqs[i]->kind]++;
        for (unsigned i = 0; i < n && i < 2; i++) {
            if (!hit[i]) continue;
            hit[i]->fired = 1;
            f->fired++;
            if (hit[i]->result < 0)
                fb->subst[fb->n_subst++] = (struct substitution){reqs[i], hit[i]->result};
        }
        if (split) fb->held[fb->n_held++] = (struct held_req){reqs[1], reqs[0], 0};
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

/* Hands the held fdatasyncs whose write has completed to the inner engine, marked split. */
static void release_held(struct fault_backend *fb)
{
    for (unsigned i = 0; i < fb->n_held;) {
        struct held_req *h = &fb->held[i];
        if (!h->ready) {
            i++;
            continue;
        }
        h->req->split = 1;
        /* The front end counts held requests as in the engine, so the inner one has room; a
         * refusal all the same leaves it held for the next submit. */
        if (fb->inner->ops->prep(fb->inner, &h->req, 1) < 0) break;
        pthread_mutex_lock(&fb->f->mu);
        fb->f->all[h->req->kind]++;
        pthread_mutex_unlock(&fb->f->mu);
        *h = fb->held[--fb->n_held];
    }
}

static int fault_submit(struct ioeng_backend *b)
{
    struct fault_backend *fb = (struct fault_backend *)b;
    release_held(fb);
    int rc = fb->inner->ops->submit(fb->inner);
    return rc < 0 ? rc : rc + (int)fb->n_held;
}

static int fault_reap(struct ioeng_backend *b, struct ioeng_raw_cqe *out, unsigned max, int wait)
{
    struct fault_backend *fb = (struct fault_backend *)b;
    int n = fb->inner->ops->reap(fb->inner, out, max, wait);
    for (int i = 0; i < n && (fb->n_subst || fb->n_held); i++) {
        for (unsigned j = 0; j < fb->n_subst; j++) {
            if (fb->subst[j].req != out[i].req) continue;
            out[i].res = fb->subst[j].res;
            fb->subst[j] = fb->subst[--fb->n_subst];
            break;
        }
        for (unsigned j = 0; j < fb->n_held; j++)
            if (fb->held[j].after == out[i].req) fb->held[j].ready = 1;
    }
    return n;
}

static void fault_close(struct ioeng_backend *b)
{
    struct fault_backend *fb = (struct fault_backend *)b;
    fb->inner->ops->close(fb->inner);
    free(fb);
}

static const struct ioeng_backend_ops fault_ops = {
    .name = "fault",
    .prep = fault_prep,
    .submit = fault_submit,
    .reap = fault_reap,
    .close = fault_close,
};

int ioeng_fault_wrap(struct ioeng_fault *f, struct ioeng_backend *inner,
                     struct ioeng_backend **out)
{
    struct fault_backend *fb = calloc(1, sizeof *fb);
    if (!fb) return err_fail(-ENOMEM, "fault engine: out of memory");
    fb->f = f;
    fb->inner = inner;
    fb->base.ops = &fault_ops;
    fb->base.can_link = inner->can_link; /* passes links through untouched */
    snprintf(fb->base.name, sizeof fb->base.name, "fault(%.16s)", inner->name);
    *out = &fb->base;
    return 0;
}
