/*
 * dstl/local/ioeng_uring.c — the io_uring engine (the default).
 *
 * What: raw requests become SQEs (write, fsync with IORING_FSYNC_DATASYNC, fsync), a write's
 * `link` becomes IOSQE_IO_LINK so the kernel runs the fdatasync right behind the write without a
 * round trip through the event loop; CQEs come back as raw results. The front end's eventfd is
 * registered with the ring, so the kernel makes it readable whenever it posts a CQE.
 *
 * Why so little: everything a result means (short write → a broken link → -ECANCELED on the
 * fdatasync; EINTR/EAGAIN) is decided in ioeng.c, once for every engine.
 *
 * Cut chains: io_uring_submit may take only a prefix of the prepared SQEs (it returns fewer than
 * were ready when the kernel runs short of request memory, for instance). The kernel ends a link
 * chain at the end of each submission, so when the last SQE it took carried IOSQE_IO_LINK, that
 * write was submitted without its fdatasync, and the fdatasync goes in a later submission as an
 * independent request that may run while the write is still in progress. The engine keeps the
 * prepared requests in SQ order (`held`), and after each submit marks such a follower `split`;
 * the front end then does not count that fdatasync for the write (ioeng.c, on_raw).
 *
 * Threads: one thread at a time. Invariant: the front end keeps at most `depth` requests here,
 * the SQ has `depth` entries and the CQ twice that, so SQEs are always available and the CQ
 * cannot overflow; `held` mirrors the SQEs prepared and not yet taken by the kernel, in order,
 * and so never holds more than `depth`.
 */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>

#include "dstl/err.h"
#include "dstl/local/ioeng_backend.h"

struct uring {
    struct ioeng_backend base;
    struct io_uring ring;
    int event_fd;
    unsigned depth;
    struct ioeng_req **held;    /* ring of `depth`: prepared, not yet taken by the kernel */
    unsigned held_head, n_held;
};

static int uring_prep(struct ioeng_backend *b, struct ioeng_req *const *reqs, unsigned n)
{
    struct uring *u = (struct uring *)b;
    if (io_uring_sq_space_left(&u->ring) < n) return -EAGAIN;
    for (unsigned i = 0; i < n; i++) {
        struct ioeng_req *r = reqs[i];
        struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
        switch (r->kind) {
        case IOENG_OP_WRITE:
            io_uring_prep_write(sqe, r->fd, r->buf, r->len, r->off);
            break;
        case IOENG_OP_FDATASYNC:
            io_uring_prep_fsync(sqe, r->fd, IORING_FSYNC_DATASYNC);
            break;
        default:
            io_uring_prep_fsync(sqe, r->fd, 0);
            break;
        }
        if (r->link) sqe->flags |= IOSQE_IO_LINK;
        io_uring_sqe_set_data(sqe, r);
        u->held[(u->held_head + u->n_held++) % u->depth] = r;
    }
    return 0;
}

/* The kernel took the oldest `taken` held requests: drop them, and when the last of them was
 * linked to a request that it did not take, mark that one split (see the head comment). */
static void took(struct uring *u, unsigned taken)
{
    if (taken == 0) return;
    if (taken > u->n_held) taken = u->n_held; /* not expected: the kernel takes only what we gave */
    struct ioeng_req *last = u->held[(u->held_head + taken - 1) % u->depth];
    u->held_head = (u->held_head + taken) % u->depth;
    u->n_held -= taken;
    if (last->link && u->n_held > 0) u->held[u->held_head]->split = 1;
}

static int uring_submit(struct ioeng_backend *b)
{
    struct uring *u = (struct uring *)b;
    int rc = io_uring_submit(&u->ring);
    if (rc == -EAGAIN || rc == -EBUSY || rc == -EINTR) {
        /* Out of kernel resources or completions not yet reaped: the SQEs stay queued and are
         * taken at the next submit; make the loop come back. */
        ioeng_signal_fd(u->event_fd);
    } else if (rc < 0) {
        return rc;
    } else {
        took(u, (unsigned)rc);
    }
    return (int)io_uring_sq_ready(&u->ring);
}

static int uring_reap(struct ioeng_backend *b, struct ioeng_raw_cqe *out, unsigned max, int wait)
{
    struct uring *u = (struct uring *)b;
    struct io_uring_cqe *cqes[64];
    if (max > 64) max = 64;
    if (wait) {
        struct io_uring_cqe *cqe;
        int rc;
        do rc = io_uring_wait_cqe(&u->ring, &cqe);
        while (rc == -EINTR);
        if (rc < 0) return rc;
    }
    unsigned n = io_uring_peek_batch_cqe(&u->ring, cqes, max);
    for (unsigned i = 0; i < n; i++) {
        out[i].req = io_uring_cqe_get_data(cqes[i]);
        out[i].res = cqes[i]->res;
    }
    io_uring_cq_advance(&u->ring, n);
    return (int)n;
}

static void uring_close(struct ioeng_backend *b)
{
    struct uring *u = (struct uring *)b;
    io_uring_queue_exit(&u->ring);
    free(u->held);
    free(u);
}

static const struct ioeng_backend_ops uring_ops = {
    .name = "io_uring",
    .prep = uring_prep,
    .submit = uring_submit,
    .reap = uring_reap,
    .close = uring_close,
};

int ioeng_uring_open(unsigned depth, int event_fd, struct ioeng_backend **out)
{
    struct uring *u = calloc(1, sizeof *u);
    if (u && !(u->held = calloc(depth, sizeof *u->held))) {
        free(u);
        u = NULL;
    }
    if (!u) return err_fail(-ENOMEM, "io_uring: out of memory");
    u->depth = depth;
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_CQSIZE;
    p.cq_entries = depth * 2;
    int rc = io_uring_queue_init_params(depth, &u->ring, &p);
    if (rc < 0) {
        free(u->held);
        free(u);
        return err_fail(rc, "io_uring_queue_init(%u entries): %s (io_uring disabled or "
                        "RLIMIT_MEMLOCK too low? dstl.io.engine: libaio or psync avoid it)",
                        depth, strerror(-rc));
    }
    rc = io_uring_register_eventfd(&u->ring, event_fd);
    if (rc < 0) {
        io_uring_queue_exit(&u->ring);
        free(u->held);
        free(u);
        return err_fail(rc, "io_uring_register_eventfd: %s", strerror(-rc));
    }
    u->event_fd = event_fd;
    u->base.can_link = 1;
    u->base.ops = &uring_ops;
    strcpy(u->base.name, "io_uring");
    *out = &u->base;
    return 0;
}
