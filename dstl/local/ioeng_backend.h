/*
 * dstl/local/ioeng_backend.h — the ops table between the I/O front end (ioeng.c) and its engines:
 * io_uring (ioeng_uring.c), libaio (ioeng_aio.c), psync (ioeng_psync.c), and the fault wrapper
 * (ioeng_fault.c), which is itself an engine around another one. Only those files include this.
 *
 * An engine moves raw requests to the kernel and raw results back; it keeps no operation state.
 * The front end owns every request (`struct ioeng_req`, embedded in its operations), keeps at
 * most `depth` of them in an engine at once, and decides what a result means (short write,
 * requeue, cancelled link). One thread at a time, like the front end.
 */
#ifndef DSTL_IOENG_BACKEND_H
#define DSTL_IOENG_BACKEND_H

#include <stdint.h>
#include <sys/eventfd.h>

#include "dstl/local/ioeng.h"

struct ioeng_op;

/* One raw request: a single pwrite, fdatasync or fsync. */
struct ioeng_req {
    const void *buf;        /* write: the bytes                                                */
    uint64_t off;           /* write: file offset                                              */
    uint32_t len;           /* write: bytes asked (the fault wrapper may lower it)             */
    int fd;
    uint8_t kind;           /* enum ioeng_kind                                                 */
    uint8_t link;           /* the next request of the same prep call starts only after this
                             * one completed in full, and is cancelled otherwise (io_uring
                             * IOSQE_IO_LINK); set only when the engine can_link          */
    uint8_t attempt;        /* 0 for the operation's first request of this kind                */
    uint8_t split;          /* set by the engine: this request followed a `link` request in the
                             * prep call, but reached the kernel in a later submission than it
                             * (a partial submit cut the chain; the kernel ends a chain at the
                             * end of each submission), so it ran unordered with respect to its
                             * predecessor. The front end clears it when it builds a request  */
    struct ioeng_op *op;    /* the owner; engines do not look at it                            */
};

/* One raw result: bytes written (write) or 0, or -errno (-ECANCELED for a broken link). */
struct ioeng_raw_cqe {
    struct ioeng_req *req;
    int res;
};

struct ioeng_backend;

struct ioeng_backend_ops {
    const char *name;
    /* Takes all n requests (a chain when link is set) or none: 0, or -EAGAIN when there is no
     * room (the front end retries after a reap). Nothing reaches the kernel yet. */
    int (*prep)(struct ioeng_backend *b, struct ioeng_req *const *reqs, unsigned n);
    /* Hands prepared requests to the kernel (psync: performs them and queues their results,
     * signalling the eventfd). Returns how many prepared requests it still holds (the kernel
     * may take a prefix); on EAGAIN/EBUSY/EINTR that count too, keeping the requests and making
     * the eventfd readable so the caller comes back; otherwise -errno, for the submission as a
     * whole (libaio instead turns one request the kernel refuses — an fsync it cannot do, a bad
     * fd — into that request's result and submits the rest). An engine that can_link
     * must mark `split` on the first held request when the last one the kernel took had `link`.
     * Never blocks on I/O completion (psync aside). */
    int (*submit)(struct ioeng_backend *b);
    /* Up to max raw results, oldest first. With wait, blocks until at least one (the front end
     * asks only when a submitted request is outstanding). Count or -errno. */
    int (*reap)(struct ioeng_backend *b, struct ioeng_raw_cqe *out, unsigned max, int wait);
    /* Frees the engine; the front end has reaped every request first. */
    void (*close)(struct ioeng_backend *b);
};

struct ioeng_backend {
    const struct ioeng_backend_ops *ops;
    int can_link;   /* honours ioeng_req.link                          */
    char name[32];  /* for ioeng_name: "io_uring", "fault(psync)" */
};

/* Engine constructors: depth = requests in the engine at once; event_fd = the front end's
 * eventfd, to be made readable when results are ready. Return 0 or -errno with a detail. */
int ioeng_uring_open(unsigned depth, int event_fd, struct ioeng_backend **out);
int ioeng_aio_open(unsigned depth, int event_fd, struct ioeng_backend **out);
int ioeng_psync_open(unsigned depth, int event_fd, struct ioeng_backend **out);

/* Wraps inner with the fault script f; the wrapper owns inner from then on (closes it).
 * Returns 0 or -ENOMEM (inner is then still the caller's). */
int ioeng_fault_wrap(struct ioeng_fault *f, struct ioeng_backend *inner,
                     struct ioeng_backend **out);

/* Makes event_fd readable (eventfd_write of 1; an EAGAIN at counter overflow is harmless). */
static inline void ioeng_signal_fd(int event_fd)
{
    /* EAGAIN means the counter is at its maximum: it is readable already. (Inline: the
     * engines call no function of the front end, which calls theirs.) */
    (void)eventfd_write(event_fd, 1);
}

#endif
