/*
 * dstl/local/ioeng.h — asynchronous file I/O for the local store: write, fdatasync, fsync, with one
 * front end over three engines (io_uring, libaio, psync) and a fault-injecting wrapper.
 *
 * Why: the pipeline thread runs one event loop; it must start segment writes and syncs without
 * blocking and learn of their completion through a file descriptor it can poll() next to its
 * own eventfd and timers. The engines differ only in how a request reaches the kernel; everything
 * the durability contract depends on — short writes completed, EINTR/EAGAIN requeued, a write
 * followed by its fdatasync in order, one final result per operation — lives once, in the front
 * end (ioeng.c), so no engine can get it wrong and the fault wrapper sits below it.
 *
 * Model: queue operations (ioeng_write / ioeng_fdatasync / ioeng_fsync) with a caller tag,
 * ioeng_submit, poll ioeng_event_fd, ioeng_reap the (tag, result) pairs. Completions are only
 * ever handed out by ioeng_reap: never inside a queueing or submit call, for every engine (psync
 * performs its I/O at submit, queues the result and signals the eventfd).
 *
 * Threads: an ioeng is used by one thread at a time (the pipeline thread). The fault script
 * (struct ioeng_fault) is thread-safe, so a test thread may arm faults while the engine runs.
 *
 * Invariants: every queued operation yields exactly one completion; a buffer passed to
 * ioeng_write belongs to the engine until that completion is reaped; at most queue_depth raw
 * requests are in the kernel at once (the rest wait in a FIFO backlog, bounded by what the
 * caller keeps in flight).
 */
#ifndef DSTL_IOENG_H
#define DSTL_IOENG_H

#include <stddef.h>
#include <stdint.h>

typedef struct ioeng ioeng;
struct ioeng_fault;

/* The kinds of request; also the `stage` of a completion (which step produced its result). */
enum ioeng_kind {
    IOENG_OP_WRITE = 1,     /* pwrite of a whole buffer at an offset                     */
    IOENG_OP_FDATASYNC = 2, /* fdatasync(fd)                                             */
    IOENG_OP_FSYNC = 3,     /* fsync(fd), e.g. of a directory after creating an entry    */
};

/* ioeng_write flag: after the whole buffer is written, fdatasync the file; the completion comes
 * after both (io_uring links the two requests; the other engines chain them). */
#define IOENG_WRITE_FDATASYNC 0x1u
/* ioeng_write flag: fd is open with O_DIRECT, and buf, len and off are multiples of
 * IOENG_DIRECT_ALIGN. A short write that stops at an offset that is not is continued through
 * the page cache: the front end clears O_DIRECT on fd (fcntl F_SETFL; the operation is the only
 * one on that fd, and nothing of it is in the kernel then) before it issues the rest. The
 * linked fdatasync covers both parts, as for any continued write. */
#define IOENG_WRITE_DIRECT 0x2u
/* Alignment of O_DIRECT writes: file offset, length and memory address. 4 KiB is the largest
 * logical block size of common devices (512 B and 4 KiB), so it suits every one of them. */
#define IOENG_DIRECT_ALIGN 4096u

/* Options; 0/NULL fields take the default. */
struct ioeng_opts {
    const char *engine;          /* "io_uring" (default), "libaio" or "psync"                     */
    unsigned queue_depth;        /* raw requests in the kernel at once; 0: IOENG_QUEUE_DEPTH       */
    struct ioeng_fault *fault;   /* when set, wrap the engine in the fault injector (tests);
                                  * the caller keeps it alive until ioeng_close                   */
};

/* Default queue depth. A write+fdatasync uses two slots; the pipeline keeps a handful of segments
 * in flight (bounded by dstl.upload.max-in-flight), so 128 leaves the kernel ring far from full
 * while its memory stays a few pages. */
#define IOENG_QUEUE_DEPTH 128u

/* One completed operation. */
struct ioeng_cqe {
    uint64_t tag;      /* the caller's tag                                                       */
    int res;           /* 0 on success (ioeng_write: the whole buffer written, and synced if
                        * asked), or -errno                                                      */
    int stage;         /* enum ioeng_kind of the step that produced res (on success the last)    */
    uint64_t written;  /* bytes of the buffer known written (== len on success)                  */
};

/* Opens an engine. Returns 0, -EINVAL for an unknown engine name (detail lists the names),
 * -ENOMEM, or the -errno of the engine's setup (io_uring_queue_init, io_setup, eventfd), with a
 * detail naming the engine and suggesting another. Blocking: no (setup syscalls only). */
int ioeng_open(const struct ioeng_opts *o, ioeng **out);

/* Waits for every queued operation to finish (their completions are dropped), then frees the
 * engine and closes its eventfd. Accepts NULL. Blocking: yes, until the kernel is done with
 * every buffer. */
void ioeng_close(ioeng *e);

/* The engine's name ("io_uring", "libaio", "psync"; "fault(io_uring)" when wrapped). */
const char *ioeng_name(const ioeng *e);

/* A non-blocking eventfd that is readable whenever completions may be ready to reap. Owned by
 * the engine. After ioeng_reap returns fewer than `max`, nothing is left until it fires again. */
int ioeng_event_fd(const ioeng *e);

/* Makes ioeng_event_fd readable (a caller that queued work of its own for the same loop). */
void ioeng_kick(ioeng *e);

/* Queues a write of buf[0, len) at offset off of fd (then an fdatasync with
 * IOENG_WRITE_FDATASYNC). Short writes are continued and EINTR/EAGAIN requeued inside the engine:
 * the completion reports the whole buffer written, or the error that stopped it. The buffer is
 * the engine's until the completion is reaped. Returns 0 or -ENOMEM (detail set).
 * Not blocking; the request reaches the kernel at the next ioeng_submit (or ioeng_reap). */
int ioeng_write(ioeng *e, int fd, const void *buf, size_t len, uint64_t off, unsigned flags,
                uint64_t tag);

/* Queues fdatasync(fd) / fsync(fd). Returns 0 or -ENOMEM. Not blocking. */
int ioeng_fdatasync(ioeng *e, int fd, uint64_t tag);
int ioeng_fsync(ioeng *e, int fd, uint64_t tag);

/* Passes every queued request the ring has room for to the kernel (psync: performs them).
 * Returns 0, or -errno when the kernel refused the submission for a reason other than
 * EAGAIN/EBUSY/EINTR (those are retried at the next call; the eventfd is kicked so the loop comes
 * back). Never delivers a completion. Blocking: io_uring/libaio no; psync does the I/O. */
int ioeng_submit(ioeng *e);

/* Collects up to max finished operations into out, continuing short or interrupted ones and
 * submitting what waited for room. With wait != 0 it blocks until at least one operation has
 * finished or none is queued. Drains the eventfd. Returns the count (0 when nothing is ready) or
 * -errno when the kernel wait itself failed (detail set). */
int ioeng_reap(ioeng *e, struct ioeng_cqe *out, unsigned max, int wait);

/* Operations queued and not yet reaped. */
unsigned ioeng_pending(const ioeng *e);

/* ---- fault injection (the test seam) ----------------------------------------------------------
 * A script of faults, each "the nth request of a kind gets this result". Counting is per kind,
 * over the first request of each operation (a continuation of a short write or a requeue is not
 * counted), across every engine wrapped with the same script. A write fault is applied when its
 * request completes: the kernel did the write, the caller sees the error (a write whose outcome
 * is unknown, as after a real EIO). A short-write fault halves the request before it reaches the
 * kernel: the front end must finish the rest. Thread-safe. */

#define IOENG_FAULT_SHORT 1   /* result for a write fault: write only half the asked bytes   */
/* Result for a write fault: a partial submit cuts the write from its linked fdatasync. The write
 * reaches the wrapped engine alone (still flagged to link); the fdatasync is held back and
 * reaches it, marked split as io_uring marks a cut chain, at the first submit after the write's
 * result was reaped (the worst case: the write then looks complete when the sync succeeds). On
 * a write without a linked fdatasync (engines that do not link, or a write that does not finish
 * its buffer) there is nothing to cut: the rule is spent without firing. */
#define IOENG_FAULT_SPLIT 2
#define IOENG_FAULT_RULES_MAX 32 /* rules per script: tests arm a few at a time              */

/* Returns 0 or -ENOMEM. */
int ioeng_fault_new(struct ioeng_fault **out);
/* Accepts NULL. The script must not be in use by an open engine. */
void ioeng_fault_free(struct ioeng_fault *f);

/* Arms one fault: the nth request of kind since the script was created (1-based; to hit "the
 * next but one", use ioeng_fault_seen(f, kind) + 2) gets result: a negative errno (-EIO,
 * -ENOSPC, ...), or IOENG_FAULT_SHORT or IOENG_FAULT_SPLIT (writes only).
 * Returns 0, -EINVAL for a bad kind/nth/result, -ENOSPC when IOENG_FAULT_RULES_MAX are armed. */
int ioeng_fault_add(struct ioeng_fault *f, int kind, unsigned nth, int result);

/* Requests of kind the script has counted so far (first requests only). */
unsigned ioeng_fault_seen(struct ioeng_fault *f, int kind);

/* Requests of kind that reached the wrapped engine so far, continuations and requeues included. */
unsigned ioeng_fault_requests(struct ioeng_fault *f, int kind);

/* Faults that have fired so far. */
unsigned ioeng_fault_fired(struct ioeng_fault *f);

#endif
