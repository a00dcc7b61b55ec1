/*
 * dstl/local/ioeng.c — the I/O front end: operations, their state machine, and engine selection.
 *
 * What: turns the caller's operations (write a whole buffer [+ fdatasync], fdatasync, fsync)
 * into raw requests for an engine (ioeng_backend.h), and raw results back into one completion
 * per operation. Why here and only here: a short write is continued, EINTR/EAGAIN are requeued,
 * a cancelled io_uring link is re-issued and a stale fdatasync is ignored in this one place, so
 * io_uring, libaio, psync and the fault wrapper below them share one proven path. A sync that
 * a partial submit split from its write (ioeng_backend.h, `split`) is not trusted either.
 *
 * Threads: one thread at a time (the pipeline thread).
 *
 * Invariants:
 *  - An operation has at most one write and one sync request in its engine at once, and is only
 *    advanced (resubmitted or finished) when none is outstanding: a stale result can never be
 *    confused with a current one, and the caller's buffer is never released early.
 *  - A sync counts only for writes it is guaranteed to follow: either it was issued unlinked
 *    after the whole buffer was written (op_build issues an unlinked sync only when done == len),
 *    or it was linked behind the write that finished the buffer AND the pair reached the kernel
 *    in one submission (the engine did not mark the sync `split`: a partial submit that cuts a
 *    chain makes the sync an independent request, which may run while the write still runs).
 *    A linked sync completes only after its write did, whose result comes first, so `done ==
 *    len && !split` at the sync's success means the sync covered the whole buffer; otherwise
 *    the sync is ignored and a fresh, unlinked one follows once the write is complete.
 *  - A sync error is never retried and overrides a write error in the completion's stage (the
 *    caller must see that pages may have been dropped). EINTR/EAGAIN/ECANCELED are the only
 *    results that lead to a resubmission, at most IOENG_RETRY_MAX times per operation; a short
 *    write is continued as long as it makes progress.
 *  - raw_inflight <= depth: the kernel ring and completion queue can never overflow.
 *  - Completions reach the caller only through ioeng_reap.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "dstl/err.h"
#include "dstl/local/ioeng.h"
#include "dstl/local/ioeng_backend.h"

/* Largest single raw write: io_uring takes a 32-bit length and pwrite stops at 2 GiB - 4 KiB;
 * a larger buffer is written in 1 GiB requests through the short-write path. */
#define IOENG_RAW_LEN_MAX (1u << 30)

/* Transient results (EINTR, EAGAIN, ECANCELED without progress) tolerated per operation before
 * the operation fails with the last one: enough for signals and memory-pressure retries, small
 * enough that a persistent condition surfaces in well under a second. */
#define IOENG_RETRY_MAX 16u

/* Raw results taken from an engine per call. */
#define IOENG_REAP_BATCH 64u

struct ioeng_op {
    struct ioeng_op *next;      /* backlog, done list or free list                    */
    struct ioeng_op *all_next;  /* every op ever allocated, for ioeng_close           */
    uint64_t tag;
    const uint8_t *buf;
    uint64_t off;
    uint64_t len;
    uint64_t done;              /* bytes written so far                               */
    int fd;
    uint8_t kind;               /* enum ioeng_kind of the operation                   */
    uint8_t sync_after;         /* write then fdatasync                               */
    uint8_t direct;             /* IOENG_WRITE_DIRECT: fd has O_DIRECT until cleared  */
    uint8_t synced;             /* a sync covering the whole buffer succeeded         */
    uint8_t inflight;           /* raw requests in the engine                         */
    uint8_t retries;
    uint8_t w_attempts, s_attempts;
    int err;                    /* first failure (a sync failure overrides a write's) */
    int err_stage;
    struct ioeng_req w, s;
};

struct ioeng {
    struct ioeng_backend *be;
    int event_fd;
    int kicked;                 /* we wrote the eventfd since the last drain          */
    unsigned depth;
    unsigned raw_inflight;      /* requests prepared into the engine, not yet reaped  */
    unsigned held;              /* of those, not yet accepted by the kernel           */
    unsigned pending;           /* operations queued and not yet reaped               */
    struct ioeng_op *backlog_head, *backlog_tail; /* waiting for room in the engine   */
    struct ioeng_op *done_head, *done_tail;       /* finished, not yet reaped          */
    struct ioeng_op *free_list;
    struct ioeng_op *all;
};

typedef int (*engine_open_fn)(unsigned depth, int event_fd, struct ioeng_backend **out);

static const struct {
    const char *name;
    engine_open_fn open;
} engines[] = {
    {"io_uring", ioeng_uring_open},
    {"libaio", ioeng_aio_open},
    {"psync", ioeng_psync_open},
};

static void drain_event_fd(ioeng *e)
{
    eventfd_t v;
    (void)eventfd_read(e->event_fd, &v); /* EAGAIN when nothing was signalled */
    e->kicked = 0;
}

void ioeng_kick(ioeng *e)
{
    if (!e->kicked) {
        ioeng_signal_fd(e->event_fd);
        e->kicked = 1;
    }
}

static void list_push(struct ioeng_op **head, struct ioeng_op **tail, struct ioeng_op *op)
{
    op->next = NULL;
    if (*tail)
        (*tail)->next = op;
    else
        *head = op;
    *tail = op;
}

static struct ioeng_op *list_pop(struct ioeng_op **head, struct ioeng_op **tail)
{
    struct ioeng_op *op = *head;
    if (op) {
        *head = op->next;
        if (!*head) *tail = NULL;
        op->next = NULL;
    }
    return op;
}

int ioeng_open(const struct ioeng_opts *o, ioeng **out)
{
    const char *name = o && o->engine && o->engine[0] ? o->engine : "io_uring";
    unsigned depth = o && o->queue_depth ? o->queue_depth : IOENG_QUEUE_DEPTH;
    engine_open_fn open_fn = NULL;
    for (size_t i = 0; i < sizeof engines / sizeof engines[0]; i++)
        if (strcmp(engines[i].name, name) == 0) open_fn = engines[i].open;
    if (!open_fn)
        return err_fail(-EINVAL, "unknown io engine '%s' (expected io_uring, libaio or psync)",
                        name);
    if (depth < 2 || depth > 32768)
        return err_fail(-EINVAL, "io engine %s: queue depth %u out of range [2, 32768]", name,
                        depth);

    ioeng *e = calloc(1, sizeof *e);
    if (!e) return err_fail(-ENOMEM, "io engine %s: out of memory", name);
    e->depth = depth;
    e->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (e->event_fd < 0) {
        int rc = -errno;
        free(e);
        return err_fail(rc, "io engine %s: eventfd: %s", name, strerror(-rc));
    }
    int rc = open_fn(depth, e->event_fd, &e->be);
    if (rc < 0) { /* the engine set the detail */
        close(e->event_fd);
        free(e);
        return rc;
    }
    if (o && o->fault) {
        struct ioeng_backend *w;
        rc = ioeng_fault_wrap(o->fault, e->be, &w);
        if (rc < 0) {
            e->be->ops->close(e->be);
            close(e->event_fd);
            free(e);
            return rc;
        }
        e->be = w;
    }
    *out = e;
    return 0;
}

const char *ioeng_name(const ioeng *e) { return e->be->name; }

int ioeng_event_fd(const ioeng *e) { return e->event_fd; }

unsigned ioeng_pending(const ioeng *e) { return e->pending; }

static struct ioeng_op *op_alloc(ioeng *e)
{
    struct ioeng_op *op = e->free_list;
    if (op) {
        e->free_list = op->next;
        struct ioeng_op *all_next = op->all_next;
        memset(op, 0, sizeof *op);
        op->all_next = all_next;
    } else {
        op = calloc(1, sizeof *op);
        if (!op) return NULL;
        op->all_next = e->all;
        e->all = op;
    }
    op->w.op = op;
    op->s.op = op;
    return op;
}

static void op_finish(ioeng *e, struct ioeng_op *op)
{
    list_push(&e->done_head, &e->done_tail, op);
}

static int op_needs_write(const struct ioeng_op *op)
{
    return op->kind == IOENG_OP_WRITE && op->done < op->len;
}

static int op_needs_sync(const struct ioeng_op *op)
{
    return (op->kind != IOENG_OP_WRITE || op->sync_after) && !op->synced;
}

static void record_err(struct ioeng_op *op, int res, int stage)
{
    if (!op->err || (stage != IOENG_OP_WRITE && op->err_stage == IOENG_OP_WRITE)) {
        op->err = res;
        op->err_stage = stage;
    }
}

/* Called when the operation has no request outstanding: queue the next step or finish. */
static void op_step(ioeng *e, struct ioeng_op *op)
{
    if (op->direct && op_needs_write(op) && (op->done % IOENG_DIRECT_ALIGN)) {
        /* A direct write came up short at an unaligned offset: the kernel refuses the rest
         * with O_DIRECT, so it goes through the page cache (the linked fdatasync still
         * covers it). Nothing of this operation is in the kernel now. */
        int fl = fcntl(op->fd, F_GETFL);
        if (fl < 0 || fcntl(op->fd, F_SETFL, fl & ~O_DIRECT) < 0) record_err(op, -errno, IOENG_OP_WRITE);
        op->direct = 0;
    }
    if (!op->err && (op_needs_write(op) || op_needs_sync(op)))
        list_push(&e->backlog_head, &e->backlog_tail, op);
    else
        op_finish(e, op);
}

/* Fills the raw requests of op's next step; returns how many (1 or 2). */
static unsigned op_build(const ioeng *e, struct ioeng_op *op, struct ioeng_req **reqs)
{
    unsigned n = 0;
    if (op_needs_write(op)) {
        uint64_t rest = op->len - op->done;
        uint32_t chunk = rest > IOENG_RAW_LEN_MAX ? IOENG_RAW_LEN_MAX : (uint32_t)rest;
        op->w.buf = op->buf + op->done;
        op->w.off = op->off + op->done;
        op->w.len = chunk;
        op->w.fd = op->fd;
        op->w.kind = IOENG_OP_WRITE;
        op->w.attempt = op->w_attempts;
        op->w.split = 0;
        /* Link the fdatasync only behind the request that finishes the buffer. */
        op->w.link = op->sync_after && chunk == rest && e->be->can_link;
        reqs[n++] = &op->w;
        if (!op->w.link) return n;
    }
    op->s.fd = op->fd;
    op->s.kind = op->kind == IOENG_OP_WRITE ? IOENG_OP_FDATASYNC : op->kind;
    op->s.link = 0;
    op->s.split = 0;
    op->s.attempt = op->s_attempts;
    reqs[n++] = &op->s;
    return n;
}

/* Moves backlog operations into the engine while it has room, oldest first. */
static void backlog_flush(ioeng *e)
{
    while (e->backlog_head) {
        struct ioeng_op *op = e->backlog_head;
        struct ioeng_req *reqs[2];
        unsigned n = op_build(e, op, reqs);
        if (e->raw_inflight + n > e->depth) break;
        if (e->be->ops->prep(e->be, reqs, n) < 0) break; /* -EAGAIN: no room; retried later */
        list_pop(&e->backlog_head, &e->backlog_tail);
        for (unsigned i = 0; i < n; i++) {
            uint8_t *attempts = reqs[i] == &op->w ? &op->w_attempts : &op->s_attempts;
            if (*attempts < UINT8_MAX) (*attempts)++;
        }
        op->inflight = (uint8_t)n;
        e->raw_inflight += n;
        e->held += n;
    }
}

/* backlog → engine → kernel. Returns 0 or the engine's hard submit error. */
static int push(ioeng *e)
{
    backlog_flush(e);
    if (!e->held) return 0;
    int rc = e->be->ops->submit(e->be);
    if (rc < 0)
        return err_fail(rc, "io engine %s: submit: %s", e->be->name, strerror(-rc));
    e->held = (unsigned)rc;
    return 0;
}

static void retry_or_fail(struct ioeng_op *op, int res, int stage)
{
    if (++op->retries > IOENG_RETRY_MAX) record_err(op, res, stage);
}

/* One raw result. The ONE place where short writes, requeues and cancelled links are decided. */
static void on_raw(ioeng *e, struct ioeng_req *r, int res)
{
    struct ioeng_op *op = r->op;
    op->inflight--;
    e->raw_inflight--;
    if (r->kind == IOENG_OP_WRITE) {
        if (res > 0 && (uint64_t)res <= op->len - op->done)
            op->done += (uint64_t)res;             /* a short write continues at op_step */
        else if (res >= 0)
            record_err(op, -EIO, IOENG_OP_WRITE);   /* no progress, or more than asked */
        else if (res == -EINTR || res == -EAGAIN)
            retry_or_fail(op, res, IOENG_OP_WRITE);
        else
            record_err(op, res, IOENG_OP_WRITE);
    } else {
        if (res == 0) {
            /* Else it ran behind a partial write, or (split) maybe beside the write: op_step
             * issues a new one once the write is complete. */
            if (op->done == op->len && !r->split) op->synced = 1;
        } else if (res == -ECANCELED) {
            /* The linked write failed or came up short; op_step issues both again. A cancel
             * without a write in front of it (none expected) counts as a retry. */
            if (!op_needs_write(op)) retry_or_fail(op, res, r->kind);
        } else if (res == -EINTR || res == -EAGAIN) {
            retry_or_fail(op, res, r->kind);
        } else {
            record_err(op, res, r->kind); /* never retried: the pages may be gone */
        }
    }
    if (op->inflight == 0) op_step(e, op);
}

/* Takes what the engine has finished; with wait, blocks for at least one result first. */
static int harvest(ioeng *e, int wait)
{
    struct ioeng_raw_cqe cq[IOENG_REAP_BATCH];
    for (;;) {
        int n = e->be->ops->reap(e->be, cq, IOENG_REAP_BATCH, wait);
        if (n < 0)
            return err_fail(n, "io engine %s: reap: %s", e->be->name, strerror(-n));
        for (int i = 0; i < n; i++) on_raw(e, cq[i].req, cq[i].res);
        if ((unsigned)n < IOENG_REAP_BATCH) return 0;
        wait = 0;
    }
}

static int queue_op(ioeng *e, int kind, int fd, const void *buf, size_t len, uint64_t off,
                    unsigned flags, uint64_t tag)
{
    struct ioeng_op *op = op_alloc(e);
    if (!op)
        return err_fail(-ENOMEM, "io engine %s: out of memory queueing an operation on fd %d",
                        e->be->name, fd);
    op->tag = tag;
    op->kind = (uint8_t)kind;
    op->fd = fd;
    op->buf = buf;
    op->len = len;
    op->off = off;
    op->sync_after = (flags & IOENG_WRITE_FDATASYNC) != 0;
    op->direct = (flags & IOENG_WRITE_DIRECT) != 0;
    e->pending++;
    op_step(e, op);
    backlog_flush(e);
    if (e->done_head) ioeng_kick(e); /* an empty write finishes at once */
    return 0;
}

int ioeng_write(ioeng *e, int fd, const void *buf, size_t len, uint64_t off, unsigned flags,
                uint64_t tag)
{
    return queue_op(e, IOENG_OP_WRITE, fd, buf, len, off, flags, tag);
}

int ioeng_fdatasync(ioeng *e, int fd, uint64_t tag)
{
    return queue_op(e, IOENG_OP_FDATASYNC, fd, NULL, 0, 0, 0, tag);
}

int ioeng_fsync(ioeng *e, int fd, uint64_t tag)
{
    return queue_op(e, IOENG_OP_FSYNC, fd, NULL, 0, 0, 0, tag);
}

int ioeng_submit(ioeng *e)
{
    int rc = push(e);
    if (e->done_head) ioeng_kick(e);
    return rc;
}

static void pause_briefly(void)
{
    /* The kernel refused a submission for lack of resources and nothing else is in flight:
     * 1 ms keeps a blocked reap from spinning. */
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

int ioeng_reap(ioeng *e, struct ioeng_cqe *out, unsigned max, int wait)
{
    drain_event_fd(e);
    for (;;) {
        int rc = harvest(e, 0);
        if (rc == 0) rc = push(e);
        if (rc < 0) return rc;
        if (e->done_head || !wait || e->raw_inflight == 0) break;
        if (e->raw_inflight == e->held) { /* everything still waits for the kernel to take it */
            pause_briefly();
            continue;
        }
        rc = harvest(e, 1);
        if (rc < 0) return rc;
    }
    unsigned n = 0;
    while (n < max && e->done_head) {
        struct ioeng_op *op = list_pop(&e->done_head, &e->done_tail);
        out[n].tag = op->tag;
        out[n].res = op->err;
        out[n].stage = op->err ? op->err_stage
                       : op->kind == IOENG_OP_WRITE && op->sync_after ? IOENG_OP_FDATASYNC
                                                                      : op->kind;
        out[n].written = op->done;
        n++;
        e->pending--;
        op->next = e->free_list;
        e->free_list = op;
    }
    if (e->done_head) ioeng_kick(e); /* more than max were ready */
    return (int)n;
}

void ioeng_close(ioeng *e)
{
    if (!e) return;
    struct ioeng_cqe cq[IOENG_REAP_BATCH];
    while (e->pending) {
        int n = ioeng_reap(e, cq, IOENG_REAP_BATCH, 1);
        /* A broken ring cannot be waited on; its close below cancels what is left. */
        if (n < 0 || (n == 0 && e->raw_inflight == 0 && !e->backlog_head)) break;
    }
    e->be->ops->close(e->be);
    close(e->event_fd);
    for (struct ioeng_op *op = e->all, *next; op; op = next) {
        next = op->all_next;
        free(op);
    }
    free(e);
}
