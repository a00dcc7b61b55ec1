/*
 * dstl/local/ioeng_aio.c — the libaio engine (Linux AIO), the twin for kernels or sandboxes without
 * io_uring.
 *
 * What: raw requests become iocbs — IOCB_CMD_PWRITE, IOCB_CMD_FDSYNC, IOCB_CMD_FSYNC (the sync
 * commands exist since Linux 4.18) — each carrying the front end's eventfd (IOCB_FLAG_RESFD), so
 * the kernel makes it readable as each one completes. There is no linking: the front end issues
 * an fdatasync only after its write has completed in full. On a buffered file io_submit may do
 * the write before it returns; its result still arrives only through io_getevents.
 *
 * Threads: one thread at a time. Invariant: at most `depth` requests here (the front end's
 * bound), which is also the io_setup size, so a slot is always free and io_submit is never asked
 * for more than the context holds.
 */
#include <errno.h>
#include <libaio.h>
#include <stdlib.h>
#include <string.h>

#include "dstl/err.h"
#include "dstl/local/ioeng_backend.h"

struct aio_slot {
    struct iocb cb; /* first: io_event.obj points here */
    struct ioeng_req *req;
    struct aio_slot *next_free;
};

struct aio {
    struct ioeng_backend base;
    io_context_t ctx;
    int event_fd;
    unsigned depth;
    struct aio_slot *slots;
    struct aio_slot *free_slots;
    struct iocb **pend;              /* prepared, not yet taken by io_submit, in order      */
    unsigned n_pend;
    struct ioeng_raw_cqe *refused;   /* requests io_submit refused, reported as results    */
    unsigned n_refused;
};

static int aio_prep(struct ioeng_backend *b, struct ioeng_req *const *reqs, unsigned n)
{
    struct aio *a = (struct aio *)b;
    struct aio_slot *check = a->free_slots;
    for (unsigned i = 0; i < n; i++, check = check->next_free)
        if (!check) return -EAGAIN;
    for (unsigned i = 0; i < n; i++) {
        struct ioeng_req *r = reqs[i];
        struct aio_slot *s = a->free_slots;
        a->free_slots = s->next_free;
        s->req = r;
        switch (r->kind) {
        case IOENG_OP_WRITE:
            io_prep_pwrite(&s->cb, r->fd, (void *)r->buf, r->len, (long long)r->off);
            break;
        case IOENG_OP_FDATASYNC:
            io_prep_fdsync(&s->cb, r->fd);
            break;
        default:
            io_prep_fsync(&s->cb, r->fd);
            break;
        }
        io_set_eventfd(&s->cb, a->event_fd);
        a->pend[a->n_pend++] = &s->cb;
    }
    return 0;
}

static int aio_submit(struct ioeng_backend *b)
{
    struct aio *a = (struct aio *)b;
    unsigned done = 0;
    while (done < a->n_pend) {
        int rc = io_submit(a->ctx, (long)(a->n_pend - done), a->pend + done);
        if (rc > 0) {
            done += (unsigned)rc;
        } else if (rc == -EAGAIN || rc == -EINTR || rc == 0) {
            ioeng_signal_fd(a->event_fd); /* kernel out of resources: come back later */
            break;
        } else {
            /* The first iocb was refused (e.g. -EINVAL: no aio fsync before Linux 4.18, or a
             * bad fd): it becomes a result of its own, the rest are submitted. */
            struct aio_slot *s = (struct aio_slot *)a->pend[done];
            a->refused[a->n_refused].req = s->req;
            a->refused[a->n_refused].res = rc;
            a->n_refused++;
            s->next_free = a->free_slots;
            a->free_slots = s;
            done++;
            ioeng_signal_fd(a->event_fd);
        }
    }
    memmove(a->pend, a->pend + done, (a->n_pend - done) * sizeof a->pend[0]);
    a->n_pend -= done;
    return (int)a->n_pend;
}

static int aio_reap(struct ioeng_backend *b, struct ioeng_raw_cqe *out, unsigned max, int wait)
{
    struct aio *a = (struct aio *)b;
    unsigned n = 0;
    while (n < max && a->n_refused) {
        out[n++] = a->refused[0];
        memmove(a->refused, a->refused + 1, --a->n_refused * sizeof a->refused[0]);
    }
    if (n == max) return (int)n;
    struct io_event ev[64];
    long want = (long)(max - n) > 64 ? 64 : (long)(max - n);
    struct timespec zero = {0, 0};
    int rc;
    do rc = io_getevents(a->ctx, wait && n == 0 ? 1 : 0, want, ev, wait && n == 0 ? NULL : &zero);
    while (rc == -EINTR);
    if (rc < 0) return rc;
    for (int i = 0; i < rc; i++) {
        struct aio_slot *s = (struct aio_slot *)ev[i].obj;
        out[n].req = s->req;
        out[n].res = (int)(long)ev[i].res; /* bytes, or -errno */
        n++;
        s->next_free = a->free_slots;
        a->free_slots = s;
    }
    return (int)n;
}

static void aio_free(struct aio *a)
{
    if (!a) return;
    free(a->slots);
    free(a->pend);
    free(a->refused);
    free(a);
}

static void aio_close(struct ioeng_backend *b)
{
    struct aio *a = (struct aio *)b;
    io_destroy(a->ctx);
    aio_free(a);
}

static const struct ioeng_backend_ops aio_ops = {
    .name = "libaio",
    .prep = aio_prep,
    .submit = aio_submit,
    .reap = aio_reap,
    .close = aio_close,
};

int ioeng_aio_open(unsigned depth, int event_fd, struct ioeng_backend **out)
{
    struct aio *a = calloc(1, sizeof *a);
    if (a) {
        a->slots = calloc(depth, sizeof a->slots[0]);
        a->pend = calloc(depth, sizeof a->pend[0]);
        a->refused = calloc(depth, sizeof a->refused[0]);
    }
    if (!a || !a->slots || !a->pend || !a->refused) {
        aio_free(a);
        return err_fail(-ENOMEM, "libaio: out of memory for %u slots", depth);
    }
    int rc = io_setup((int)depth, &a->ctx);
    if (rc < 0) {
        aio_free(a);
        return err_fail(rc, "libaio io_setup(%u): %s (fs.aio-max-nr reached? dstl.io.engine: "
                        "psync avoids it)", depth, strerror(-rc));
    }
    for (unsigned i = 0; i < depth; i++) {
        a->slots[i].next_free = a->free_slots;
        a->free_slots = &a->slots[i];
    }
    a->event_fd = event_fd;
    a->depth = depth;
    a->base.can_link = 0;
    a->base.ops = &aio_ops;
    strcpy(a->base.name, "libaio");
    *out = &a->base;
    return 0;
}
