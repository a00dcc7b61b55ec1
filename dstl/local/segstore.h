/*
 * dstl/local/segstore.h — the local segment store: one directory of immutable segment files, written
 * asynchronously by the pipeline thread and read, listed and deleted from any thread.
 *
 * A segment is acknowledged (its callback gets 0) only when it is durable: the whole buffer
 * written, the file fdatasync'ed, and its directory entry made durable by an fsync of the
 * directory. The entry part is usually already done: names given to segstore_reserve are created
 * and their directory fsync'ed ahead of time (one fsync for a whole group of them), so a persist
 * on the critical path costs one write + one fdatasync. A name that was not reserved is created
 * by segstore_write, and its directory fsync runs in parallel with its write + fdatasync; every
 * creation that arrives while a directory fsync is in flight shares the next one.
 *
 * Failure model: a failed fdatasync or fsync, or a failed write whose effect is unknown (EIO and
 * anything that is not a plain lack of space), makes the store fail-stop: that write and every
 * write after it fail with -EIO and the detail "local store DIR failed since ...". Nothing is
 * retried on the same file (the kernel may have dropped its dirty pages and cleared the error).
 * A write refused for space (ENOSPC, EDQUOT, EFBIG) fails alone: nothing of it was acknowledged,
 * its partial file is removed, and the store stays usable.
 *
 * Threads: segstore_open/reserve/write/poll/event_fd/stats/close are "pipeline thread only"
 * (one thread at a time, the one running the event loop). segstore_unlink, segstore_read_at,
 * segstore_size and segstore_list are thread-safe and blocking: reader, gc and CLI threads use
 * them directly.
 */
#ifndef DSTL_SEGSTORE_H
#define DSTL_SEGSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ioeng_fault;
typedef struct segstore segstore;

/* Segment files end in this suffix; segstore_list lists only those. */
#define SEGSTORE_SUFFIX ".seg"
/* A run's ownership lock: <run id> + this suffix, in the store's directory. */
#define SEGSTORE_LOCK_SUFFIX ".lock"

/* Names reserved at once (created, directory-synced, not yet written). The pipeline keeps a few
 * segments ahead of the one being built; 64 covers every segment the default max-in-flight can
 * hold at the smallest useful size while bounding the empty files a crash can leave. */
#define SEGSTORE_RESERVE_MAX 64u

/* dstl.io.direct: auto writes segments this large or larger with O_DIRECT. A small segment
 * gains little (its copy into the page cache is short) and may lose a device round trip: its
 * direct head reaches the device before the fdatasync that carries its buffered tail, where
 * through the page cache one fdatasync carries both. Above it the copy saved is what counts
 * (w16 load runs: a third less CPU per MB, up to 1.5 x the MB/s). */
#define SEGSTORE_AUTO_DIRECT_MIN (1u << 20)

struct segstore_opts {
    const char *dir;             /* required; created (with parents) if missing                */
    /* The run that owns the files this store creates (its run id). Before its first file
     * (a reservation or a segment) the store creates dir/<owner>.lock and holds an exclusive
     * flock on it until segstore_close, which removes it: while the lock is held, no gc in any
     * process deletes a file of this run (segstore_owner_alive). NULL: no lock (unit tests). */
    const char *owner;
    const char *engine;          /* "io_uring" (default), "libaio", "psync"                     */
    unsigned queue_depth;        /* 0: IOENG_QUEUE_DEPTH                                        */
    struct ioeng_fault *fault;   /* tests: wrap the engine in this fault script (NULL: none)    */
    /* dstl.io.direct: segments are written with O_DIRECT — the largest multiple of
     * IOENG_DIRECT_ALIGN (4 KiB) from a buffer aligned to it, the last partial block through
     * the page cache, one fdatasync covering both. A buffer that is not aligned, or a segment
     * below 4 KiB, is written through the page cache as without it. segstore_open checks that
     * the file system takes O_DIRECT, by writing one aligned 4 KiB block to a probe file
     * (-EINVAL naming the key and dir otherwise). */
    bool direct;
    /* with direct (dstl.io.direct: auto): only segments of SEGSTORE_AUTO_DIRECT_MIN bytes or
     * more go direct; the probe runs before the first of them is written (an open that writes
     * nothing changes nothing in the directory), and a file system that refuses it is no
     * error: the store writes through the page cache (segstore_direct_writes stays 0) */
    bool direct_auto;
};

/* Called once per accepted segstore_write, from segstore_poll (or segstore_close), never from
 * inside segstore_write. res is 0 (the segment is durable) or a negative errno; detail is a
 * one-line description ("" on success; also set as the thread's dstl_last_error), valid only
 * during the call. The buffer is the caller's again when this runs. The callback may call
 * segstore_write/segstore_reserve, not segstore_poll or segstore_close. */
typedef void (*segstore_done_fn)(void *ctx, int res, const char *detail);

/* Acknowledgement needs reachability too: after a segment's fdatasync the store checks that
 * the file still has a directory entry (fstat link count) and that o->dir still names the
 * directory it opened. A segment that was removed, or whose directory was removed or replaced
 * under the store (rm -rf, mv), is never acknowledged: the store goes fail-stop with a detail
 * naming the directory, like a failed fdatasync. */

/* Opens the store on o->dir, creating it (and missing parents, each followed by an fsync of
 * its parent) if needed, and the I/O engine. Returns 0; -EINVAL (no dir, unknown engine, or
 * o->direct on a file system that refuses O_DIRECT: the detail names dstl.io.direct);
 * -ENOTDIR, -EACCES, ... naming the dir; or the engine's setup error naming the engine.
 * Blocking: yes (mkdir, fsync, open). Pipeline thread only (or before it starts). */
int segstore_open(const struct segstore_opts *o, segstore **out);

/* Waits for every accepted write and runs its callback (on this thread), removes the reserved
 * files that were never written, fsyncs the directory if anything was removed, and frees the
 * store. Accepts NULL. Blocking: yes. Not from a callback. */
void segstore_close(segstore *s);

/* The directory path as given (for segstore_read_at and friends). */
const char *segstore_dir(const segstore *s);

/* The engine name ("io_uring", "libaio", "psync", "fault(...)"). */
const char *segstore_engine(const segstore *s);

/* An fd that is readable when segstore_poll has work (completions or callbacks to run). Poll it
 * with POLLIN; the store owns it. */
int segstore_event_fd(const segstore *s);

/* Reserved names' directory fsyncs are deferred until a write into one needs its name durable,
 * until this many reserved names wait, or until segstore_sync_reserved. */
#define SEGSTORE_DIR_DEFER_MAX 8u

/* Creates the empty file dir/name now, to be made durable by a directory fsync shared with
 * other reservations (SEGSTORE_DIR_DEFER_MAX), so that a later segstore_write(name) costs only
 * write + fdatasync. Returns 0; -EINVAL for a bad name (empty, '/', ".", "..", too long);
 * -EEXIST when already reserved or on disk; -EAGAIN when SEGSTORE_RESERVE_MAX names are
 * reserved; -EIO when the store has failed; other -errno of the create. Detail names the file.
 * Blocking: openat only. Pipeline thread only.
 * A crash leaves reserved names as empty files: orphans that `dstl gc` removes (a reader must
 * treat a 0-byte segment as never written). */
int segstore_reserve(segstore *s, const char *name);

/* Reserves name by recycling the file of a deleted segment, old_name (not reserved, not being
 * written, no longer referenced): renamed to name, with no inode to allocate (on ext4 without a
 * journal, creating one inode per segment while as many are deleted cost a sixth of all CPU of
 * 64 committers: ext4's recently_deleted scan). A file of up to 64 KiB or of 1 MiB and more
 * keeps its bytes (segstore_reserved_bytes; the write overwrites them and cuts off any tail),
 * one in between is truncated to 0. Returns 0
 * (name is reserved, old_name gone); the errors of segstore_reserve; -ENOENT... naming
 * old_name, which is then left as it was unless the truncate went through (the caller
 * unlinks it). Durability as segstore_reserve's. Pipeline thread only. */
int segstore_recycle(segstore *s, const char *old_name, const char *name);

/* Starts the directory fsync that makes every name reserved so far durable (after the one in
 * flight), so that writes into them find their names durable already: for an owner whose
 * reservations are made ahead, in a quiet moment. Pipeline thread only. */
void segstore_sync_reserved(segstore *s);

/* The bytes the file reserved as name holds now (a recycled segment's, which a write of that
 * many bytes overwrites without changing the file's size: its fdatasync then writes no inode;
 * segment padding aims at it); 0 when name is not reserved or its file is empty. Pipeline
 * thread only. */
uint64_t segstore_reserved_bytes(segstore *s, const char *name);

/* Writes buf[0, len) as the new segment dir/name (the reserved file if name was reserved, else
 * created with O_CREAT|O_EXCL, mode 0644), fdatasyncs it, makes its directory entry durable,
 * then calls cb(ctx, 0, "") from segstore_poll — or cb(ctx, -errno, detail) on failure: -EEXIST
 * or another create error, -ENOSPC/-EDQUOT/-EFBIG (partial file removed), -EIO (fail-stop).
 * Returns 0 when accepted (cb will run exactly once); otherwise cb never runs and it returns
 * -EINVAL (bad name) or -ENOMEM. buf must stay valid and unchanged until cb. Many writes may
 * be in flight at once. Blocking: openat only (none for a reserved name; the psync engine also
 * performs the write and fdatasync here). Pipeline thread only. */
int segstore_write(segstore *s, const char *name, const void *buf, size_t len,
                   segstore_done_fn cb, void *ctx);

/* Reaps finished I/O, advances writes, issues the next grouped directory fsync, and runs every
 * callback that was ready when it was called. Returns the number of callbacks run (0 when none).
 * Never waits for I/O (the psync engine performs a directory fsync it starts). Pipeline thread
 * only. */
int segstore_poll(segstore *s);

/* 0 while the store works; -EIO once it has failed (detail: since which file and why). */
int segstore_failed(const segstore *s);

struct segstore_stats {
    uint64_t writes_ok;       /* callbacks with 0                                             */
    uint64_t writes_failed;   /* callbacks with an error                                      */
    uint64_t bytes_ok;        /* bytes of acknowledged segments                               */
    uint64_t creates;         /* files created (by writes and by reservations)                */
    uint64_t recycles;        /* reservations made from a deleted segment's file              */
    uint64_t reserved_hits;   /* writes into a reserved file (no directory fsync on their path)*/
    uint64_t dir_fsyncs;      /* directory fsyncs issued                                      */
    unsigned reserved;        /* names reserved now                                           */
    unsigned inflight;        /* accepted writes whose callback has not run yet               */
    bool dir_pending;         /* a directory fsync is running or due                          */
    bool dir_deferred;        /* reserved names wait for a directory fsync nothing needs yet  */
};

/* Counters since open. Pipeline thread only. */
void segstore_stats(const segstore *s, struct segstore_stats *out);

/* Segments written with O_DIRECT since open (dstl.io.direct; see segstore_opts.direct). Any
 * thread. */
uint64_t segstore_direct_writes(const segstore *s);
/* Writes into a reserved file that held exactly their length (segstore_reserved_bytes) since
 * open: no file size changed. Any thread. */
uint64_t segstore_in_place_writes(const segstore *s);

/* ---- any thread ---------------------------------------------------------------------------- */

/* Removes dir/name. Returns 0, -EINVAL (bad name), -ENOENT or another -errno naming the file.
 * DURABILITY: the removal is made durable by the store's next directory fsync (or at close), not
 * now: a crash before that may bring the file back, as an orphan `dstl gc` removes again. Never
 * pass a name that is reserved or being written. Thread-safe; blocking (unlinkat). */
int segstore_unlink(segstore *s, const char *name);

/* Reads up to len bytes of dir/name from offset off into buf (a pread loop). Returns the bytes
 * read — fewer than len only at the end of the file — or -ENOENT (missing), -EINVAL (bad name,
 * len > SSIZE_MAX), -EIO, ... with a detail naming the file and offset. Thread-safe; blocking. */
ssize_t segstore_read_at(const char *dir, const char *name, uint64_t off, void *buf, size_t len);

/* The size of dir/name. Returns 0 or -ENOENT/-errno naming the file. Thread-safe; blocking. */
int segstore_size(const char *dir, const char *name, uint64_t *size_bytes);

/* Called for each regular file named "*.seg" in the directory, in directory order: its name,
 * size and modification time (ms since the epoch). A nonzero return stops the listing and is
 * returned by segstore_list. */
typedef int (*segstore_list_fn)(void *ctx, const char *name, uint64_t size_bytes,
                                int64_t mtime_ms);

/* Whether the run `owner` is alive: 1 when someone holds the lock dir/<owner>.lock (a storage
 * of that run is open, in this process or another), 0 when there is no lock file or nobody
 * holds it (the run closed or crashed), or -errno naming the file. Never waits. Thread-safe. */
int segstore_owner_alive(const char *dir, const char *owner);

/* Removes the lock file of a dead run (taking its lock first, so a live one is never
 * removed). Returns 1 removed, 0 when the run is alive or has no lock file, -errno. */
int segstore_owner_forget(const char *dir, const char *owner);

/* Calls cb(ctx, owner) for each lock file "<owner>.lock" in dir (any owner, alive or not).
 * A nonzero return stops the listing and is returned. Returns the count or -errno. */
typedef int (*segstore_owner_fn)(void *ctx, const char *owner);
int segstore_list_owners(const char *dir, segstore_owner_fn cb, void *ctx);

/* Lists the segment files of dir. Returns the number listed, cb's nonzero value, or -errno
 * naming the dir. Files removed while listing are skipped. Thread-safe; blocking. */
int segstore_list(const char *dir, segstore_list_fn cb, void *ctx);

#endif
