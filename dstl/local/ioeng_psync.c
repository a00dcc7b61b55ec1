/*
 * dstl/local/ioeng_psync.c — the synchronous twin: pwrite/fdatasync/fsync performed at submit.
 *
 * What: prep records requests; submit performs them in order on the calling thread, queues each
 * result and makes the eventfd readable; reap hands the results out. So even here a completion
 * is never delivered inside submit: the event loop sees it on its next turn, exactly as with the
 * asynchronous engines, and code above cannot come to depend on either timing.
 *
 * Why: the reference behaviour for tests, and a fallback where neither io_uring nor Linux AIO is
 * available. It blocks the pipeline thread for the duration of each write and sync.
 *
 * Threads: one thread at a time. Invariant: at most `depth` requests here (the front end's
 * bound); the queues are arrays of that size.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dstl/err.h"
#include "dstl/local/ioeng_backend.h"

struct psync {
    struct ioeng_backend base;
    int event_fd;
    unsigned depth;
    struct ioeng_req **todo;        /* prepared, in order             */
    unsigned n_todo;
    struct ioeng_raw_cqe *done;     /* ring of results                */
    unsigned done_head, n_done;
};

static int psync_prep(struct ioeng_backend *b, struct ioeng_req *const *reqs, unsigned n)
{
    struct psync *p = (struct psync *)b;
    if (p->n_todo + p->n_done + n > p->depth) return -EAGAIN;
    for (unsigned i = 0; i < n; i++) p->todo[p->n_todo++] = reqs[i];
    return 0;
}

/* One request, as the kernel would report it: bytes or 0, else -errno. */
static int perform(const struct ioeng_req *r)
{
    int rc;
    switch (r->kind) {
    case IOENG_OP_WRITE: {
        ssize_t n = pwrite(r->fd, r->buf, r->len, (off_t)r->off);
        return n < 0 ? -errno : (int)n; /* a short count is continued by the front end */
    }
    case IOENG_OP_FDATASYNC:
        rc = fdatasync(r->fd);
        break;
    default:
        rc = fsync(r->fd);
        break;
    }
    return rc < 0 ? -errno : 0;
}

static int psync_submit(struct ioeng_backend *b)
{
    struct psync *p = (struct psync *)b;
    if (!p->n_todo) return 0;
    for (unsigned i = 0; i < p->n_todo; i++) {
        struct ioeng_raw_cqe *c = &p->done[(p->done_head + p->n_done) % p->depth];
        c->req = p->todo[i];
        c->res = perform(p->todo[i]);
        p->n_done++;
    }
    p->n_todo = 0;
    ioeng_signal_fd(p->event_fd);
    return 0;
}

static int psync_reap(struct ioeng_backend *b, struct ioeng_raw_cqe *out, unsigned max, int wait)
{
    struct psync *p = (struct psync *)b;
    (void)wait; /* everything submitted has completed */
    unsigned n = 0;
    while (n < max && p->n_done) {
        out[n++] = p->done[p->done_head];
        p->done_head = (p->done_head + 1) % p->depth;
        p->n_done--;
    }
    return (int)n;
}

static void psync_close(struct ioeng_backend *b)
{
    struct psync *p = (struct psync *)b;
    free(p->todo);
    free(p->done);
    free(p);
}

static const struct ioeng_backend_ops psync_ops = {
    .name = "psync",
    .prep = psync_prep,
    .submit = psync_submit,
    .reap = psync_reap,
    .close = psync_close,
};

int ioeng_psync_open(unsigned depth, int event_fd, struct ioeng_backend **out)
{
    struct psync *p = calloc(1, sizeof *p);
    if (p) {
        p->todo = calloc(depth, sizeof p->todo[0]);
        p->done = calloc(depth, sizeof p->done[0]);
    }
    if (!p || !p->todo || !p->done) {
        if (p) psync_close(&p->base);
        return err_fail(-ENOMEM, "psync: out of memory for %u requests", depth);
    }
    p->event_fd = event_fd;
    p->depth = depth;
    p->base.can_link = 0;
    p->base.ops = &psync_ops;
    strcpy(p->base.name, "psync");
    *out = &p->base;
    return 0;
}
