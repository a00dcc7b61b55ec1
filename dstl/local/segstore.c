/*
 * dstl/local/segstore.c — the local segment store: segment files in one directory, made durable by
 * write + fdatasync (+ a grouped directory fsync for new entries) through an ioeng.
 *
 * Why this shape: the pipeline thread runs an event loop, so a write is a small state machine
 * driven by engine completions, not a blocking call. Durability has two independent parts:
 *   data  — the file's bytes and size: ioeng_write(..., IOENG_WRITE_FDATASYNC), per file;
 *   entry — the name in the directory: an fsync of the directory, shared by every creation that
 *           precedes it (generation counter below).
 * A write is acknowledged when both are durable. Reserving names ahead (segstore_reserve) moves
 * the entry part off the critical path: one directory fsync covers a batch of future segments,
 * and persist latency is one write + one fdatasync.
 *
 * Directory fsync generations: a creation needs generation g = (in-flight or last synced) + 1;
 * at most one directory fsync is in flight; when it completes, `dir_synced` becomes its
 * generation, the writes waiting for it are released, and if later creations want more, the next
 * fsync starts at once, covering all of them (group commit for directory entries).
 * Reservations defer theirs: a reserved name must be durable only before a write into it is
 * acknowledged, so its generation is synced when such a write needs it (beside the write's
 * data, like a creation), when SEGSTORE_DIR_DEFER_MAX reserved names wait, or when the owner
 * asks (segstore_sync_reserved). A deleted segment recycled per persist (bench_local commits)
 * otherwise put one directory fsync beside every segment's fdatasync.
 *
 * Threads: the store's state is pipeline-thread only; segstore_unlink is thread-safe (it uses
 * only the immutable dir path and dir fd, and an atomic flag), as are the file operations of
 * segfiles.c (reads, sizes, listings, run locks), which need no open store.
 *
 * Invariants:
 *  - Every accepted write is on exactly one of: `busy` (engine op outstanding), `dir_wait`
 *    (data durable, waiting for its entry's generation), `done` (callback pending). `inflight`
 *    counts them.
 *  - A callback runs only after the engine has released the write's buffer.
 *  - Once `failed` is set, no callback gets 0 again and no new I/O is started.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dstl/err.h"
#include "dstl/local/ioeng.h"
#include "dstl/local/segfiles.h"
#include "dstl/local/segstore.h"

/* The engine tag of the directory fsync; write tags are pointers, never 0. */
#define DIR_TAG 0u

/* Completions taken from the engine per reap. */
#define REAP_BATCH 64u

/* TEST ONLY: DSTL_TEST_SKIP_SEGMENT_FDATASYNC and DSTL_TEST_SKIP_DIR_FSYNC build variants of this
 * file without one of its syncs, linked only into extra crash_child programs (Makefile) so that
 * tests/test_dstl_powercut.c proves its power-cut simulator catches the loss. Never in the
 * library. */
#ifdef DSTL_TEST_SKIP_SEGMENT_FDATASYNC
#define SEGMENT_WRITE_FLAGS 0u
#else
#define SEGMENT_WRITE_FLAGS IOENG_WRITE_FDATASYNC
#endif

/* What a failed write's detail reports. */
enum seg_fail {
    FAIL_NONE,
    FAIL_CREATE,   /* openat O_EXCL failed                          */
    FAIL_QUEUE,    /* the engine could not take the operation       */
    FAIL_SPACE,    /* ENOSPC/EDQUOT/EFBIG: this write only          */
    FAIL_STORE,    /* the store is failed: s->failed_detail         */
    FAIL_LOCK,     /* the run's lock file could not be taken        */
};

struct seg_write {
    struct seg_write *prev, *next;  /* on busy (doubly linked), dir_wait or done           */
    segstore_done_fn cb;
    void *ctx;
    const void *buf;
    size_t len;
    uint64_t dir_gen;               /* generation that makes the entry durable            */
    uint64_t written;
    int fd;
    int res;
    enum seg_fail fail;
    char name[NAME_MAX + 1];
};

struct seg_reserved {
    int fd;
    uint64_t dir_gen;
    uint64_t size;               /* bytes in the file: 0 when created, a deleted segment's when recycled */
    char name[NAME_MAX + 1];
};

struct seg_list {
    struct seg_write *head, *tail;
};

struct segstore {
    /* immutable after open: any thread */
    char *dir;
    int dir_fd;
    dev_t dir_dev;                  /* the directory opened: o->dir must still name it      */
    ino_t dir_ino;
    atomic_bool unlink_dirty;       /* an unlink since the last directory fsync started     */
    bool direct;                    /* dstl.io.direct: segment writes with O_DIRECT         */
    bool direct_auto;               /* auto: segments of SEGSTORE_AUTO_DIRECT_MIN and more   */
    bool direct_unprobed;           /* auto: not probed yet (pipeline thread, first write)  */
    atomic_uint_fast64_t direct_writes; /* written so (segstore_direct_writes: any thread)  */
    atomic_uint_fast64_t in_place;  /* into a reserved file of their size (any thread)      */

    /* the run's ownership lock (pipeline thread): taken before the first file is created */
    char *owner;                    /* NULL: no lock                                        */
    int lock_fd;                    /* -1 until taken                                       */
    char lock_err[768];             /* why the last owner_lock failed                       */

    /* pipeline thread only */
    ioeng *io;
    struct seg_list busy, dir_wait, done;
    unsigned inflight;
    uint64_t dir_synced;            /* generations <= this are durable                      */
    uint64_t dir_running;           /* generation of the fsync in flight, 0 = none          */
    uint64_t dir_wanted;            /* highest generation a creation needs                  */
    uint64_t dir_needed;            /* ... a write needs (wanted beyond it: reservations)  */
    unsigned dir_deferred;          /* reservations since the last fsync started            */
    unsigned n_reserved;
    struct seg_reserved reserved[SEGSTORE_RESERVE_MAX];
    bool failed;
    char failed_detail[1024];
    char detail[1024];              /* scratch for one callback's detail                    */
    struct segstore_stats st;
};

/* ---- small helpers ---------------------------------------------------------------------------- */

static void list_push(struct seg_list *l, struct seg_write *w)
{
    w->next = NULL;
    w->prev = l->tail;
    if (l->tail)
        l->tail->next = w;
    else
        l->head = w;
    l->tail = w;
}

static void list_remove(struct seg_list *l, struct seg_write *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        l->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        l->tail = w->prev;
    w->prev = w->next = NULL;
}

static bool is_space_error(int res)
{
    return res == -ENOSPC || res == -EDQUOT || res == -EFBIG;
}

static const char *stage_name(int stage)
{
    return stage == IOENG_OP_WRITE ? "write" : stage == IOENG_OP_FDATASYNC ? "fdatasync" : "fsync";
}

/* Fail-stop: from now on nothing is acknowledged. The first cause is kept. */
static void fail_stop(segstore *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_stop(segstore *s, const char *fmt, ...)
{
    if (s->failed) return;
    s->failed = true;
    int n = snprintf(s->failed_detail, sizeof s->failed_detail, "local store %s failed since ",
                     s->dir);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof s->failed_detail)
        vsnprintf(s->failed_detail + n, sizeof s->failed_detail - (size_t)n, fmt, ap);
    va_end(ap);
    /* Data-durable writes still waiting for their entry are not acknowledged any more. */
    while (s->dir_wait.head) {
        struct seg_write *w = s->dir_wait.head;
        list_remove(&s->dir_wait, w);
        w->res = -EIO;
        w->fail = FAIL_STORE;
        list_push(&s->done, w);
    }
}

static void submit(segstore *s)
{
    int rc = ioeng_submit(s->io);
    if (rc < 0) fail_stop(s, "the %s engine refused a submission: %s", ioeng_name(s->io),
                          dstl_last_error());
}

/* ---- directory entries -------------------------------------------------------------------- */

static void dir_sync_start(segstore *s)
{
    if (s->dir_running || s->failed || s->dir_wanted <= s->dir_synced) return;
#ifdef DSTL_TEST_SKIP_DIR_FSYNC
    s->dir_synced = s->dir_wanted; /* TEST ONLY (see SEGMENT_WRITE_FLAGS): no fsync, "synced" */
    return;
#endif
    /* Unlinks before this point are covered by this fsync. */
    atomic_store(&s->unlink_dirty, false);
    if (ioeng_fsync(s->io, s->dir_fd, DIR_TAG) < 0) {
        fail_stop(s, "fsync %s could not be queued: %s", s->dir, dstl_last_error());
        return;
    }
    s->dir_running = s->dir_wanted;
    s->dir_deferred = 0;
    s->st.dir_fsyncs++;
}

/* Whether a directory fsync should start now: a write needs one, or enough reservations
 * wait for one. */
static bool dir_sync_due(const segstore *s)
{
    return s->dir_needed > s->dir_synced || s->dir_deferred >= SEGSTORE_DIR_DEFER_MAX;
}

/* A write needs generation g synced before its acknowledgement: starts the fsync now, or
 * after the one in flight. */
static void dir_need(segstore *s, uint64_t g)
{
    if (g > s->dir_needed) s->dir_needed = g;
    dir_sync_start(s);
}

/* A file was just created (reserved: for a later write): returns the generation whose fsync
 * makes its entry durable. */
static uint64_t dir_entry_added(segstore *s, bool reserved)
{
    uint64_t g = (s->dir_running ? s->dir_running : s->dir_synced) + 1;
    if (g > s->dir_wanted) s->dir_wanted = g;
    if (!reserved) dir_need(s, g);
    else if (++s->dir_deferred >= SEGSTORE_DIR_DEFER_MAX) dir_sync_start(s);
    return g;
}

void segstore_sync_reserved(segstore *s)
{
    if (s->dir_wanted > s->dir_synced) dir_need(s, s->dir_wanted);
}

static void on_dir_synced(segstore *s, int res)
{
    uint64_t gen = s->dir_running;
    s->dir_running = 0;
    if (res < 0) {
        /* The entries of this generation may or may not exist after a crash, and the
         * directory's error state is consumed: fail-stop, like a failed fdatasync. */
        fail_stop(s, "fsync of the directory %s: %s", s->dir, strerror(-res));
        return;
    }
    /* DURABILITY: every entry created before this fsync started (generation <= gen) is on
     * disk now. A crash from here on keeps those names; files whose data is synced too are
     * complete segments. */
    s->dir_synced = gen;
    for (struct seg_write *w = s->dir_wait.head, *next; w; w = next) {
        next = w->next;
        if (w->dir_gen <= s->dir_synced) {
            list_remove(&s->dir_wait, w);
            list_push(&s->done, w);
        }
    }
    if (dir_sync_due(s)) dir_sync_start(s);
}

/* ---- open / close ---------------------------------------------------------------------------- */

int segstore_open(const struct segstore_opts *o, segstore **out)
{
    if (!o || !o->dir || !o->dir[0]) return err_fail(-EINVAL, "local store: no directory given");
    int rc = segfile_make_dir(o->dir);
    if (rc < 0) return rc;
    segstore *s = calloc(1, sizeof *s);
    if (!s || !(s->dir = strdup(o->dir))) {
        free(s);
        return err_fail(-ENOMEM, "local store %s: out of memory", o->dir);
    }
    s->lock_fd = -1;
    s->dir_fd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat dst;
    rc = s->dir_fd < 0 || fstat(s->dir_fd, &dst) < 0 ? -errno : 0;
    if (rc < 0) err_fail(rc, "open local dir %s: %s", o->dir, strerror(-rc));
    else if (o->owner && !(s->owner = strdup(o->owner))) rc = err_fail(-ENOMEM, "local store %s: out of memory", o->dir);
    if (rc < 0) {
        if (s->dir_fd >= 0) close(s->dir_fd);
        free(s->dir);
        free(s);
        return rc;
    }
    s->dir_dev = dst.st_dev;
    s->dir_ino = dst.st_ino;
    s->direct = o->direct;
    /* true: refused at open. auto: probed before the first segment is written (an open that
     * writes nothing, as gc --dry-run's, leaves the directory as it found it) */
    s->direct_auto = o->direct && o->direct_auto;
    s->direct_unprobed = s->direct_auto;
    const char *what = "";
    rc = s->direct && !s->direct_unprobed ? segfile_probe_direct(s->dir_fd, &what) : 0;
    if (rc == 1)
        rc = err_fail(-EINVAL, "dstl.io.direct: the file system of %s refuses 4 KiB-aligned O_DIRECT writes; set "
                               "dstl.io.direct: auto (or false)", s->dir);
    else if (rc < 0)
        rc = err_fail(rc, "dstl.io.direct: probe %s in %s: %s", what, s->dir, strerror(-rc));
    if (rc < 0) {
        close(s->dir_fd);
        free(s->owner);
        free(s->dir);
        free(s);
        return rc;
    }
    struct ioeng_opts eo = {.engine = o->engine, .queue_depth = o->queue_depth,
                            .fault = o->fault};
    rc = ioeng_open(&eo, &s->io);
    if (rc < 0) {
        close(s->dir_fd);
        free(s->owner);
        free(s->dir);
        free(s);
        return rc; /* detail names the engine */
    }
    atomic_init(&s->unlink_dirty, false);
    *out = s;
    return 0;
}

const char *segstore_dir(const segstore *s) { return s->dir; }

const char *segstore_engine(const segstore *s) { return ioeng_name(s->io); }

int segstore_event_fd(const segstore *s) { return ioeng_event_fd(s->io); }

int segstore_failed(const segstore *s) { return s->failed ? err_fail(-EIO, "%s", s->failed_detail) : 0; }

void segstore_stats(const segstore *s, struct segstore_stats *out)
{
    *out = s->st;
    out->reserved = s->n_reserved;
    out->inflight = s->inflight;
    out->dir_pending = s->dir_running || (s->dir_wanted > s->dir_synced && dir_sync_due(s));
    out->dir_deferred = s->dir_wanted > s->dir_synced && !out->dir_pending;
}

/* ---- ownership ------------------------------------------------------------------------------ */

/* Takes the run's lock before the store creates its first file, so that a gc in any process
 * sees a file of this run only while the lock says the run is alive (segfile_run_lock). */
static int owner_lock(segstore *s)
{
    if (!s->owner || s->lock_fd >= 0) return 0;
    int rc = segfile_run_lock(s->dir_fd, s->dir, s->owner, &s->lock_fd);
    if (rc < 0) snprintf(s->lock_err, sizeof s->lock_err, "%s", dstl_last_error());
    return rc;
}

/* ---- reservations and writes --------------------------------------------------------------- */

/* Recycled files this large, or this small, keep their bytes (up to RECYCLE_HOLD_MAX in all) */
#define RECYCLE_KEEP_MIN (1ull << 20)
#define RECYCLE_KEEP_SMALL (64ull << 10)
#define RECYCLE_HOLD_MAX (256ull << 20)

static struct seg_reserved *find_reserved(segstore *s, const char *name)
{
    for (unsigned i = 0; i < s->n_reserved; i++)
        if (strcmp(s->reserved[i].name, name) == 0) return &s->reserved[i];
    return NULL;
}

/* The checks every reservation makes; 0 or an error naming name. */
static int reserve_check(segstore *s, const char *name)
{
    int rc = segfile_check_name("reserve", name);
    if (rc < 0) return rc;
    if (s->failed) return err_fail(-EIO, "reserve %s: %s", name, s->failed_detail);
    if (find_reserved(s, name))
        return err_fail(-EEXIST, "reserve %s/%s: already reserved", s->dir, name);
    if (s->n_reserved == SEGSTORE_RESERVE_MAX)
        return err_fail(-EAGAIN, "reserve %s/%s: %u names reserved already", s->dir, name,
                        SEGSTORE_RESERVE_MAX);
    return owner_lock(s);
}

/* Keeps fd, open on the new name and holding size bytes, as a reservation and joins the
 * next directory fsync. */
static void reserve_add(segstore *s, const char *name, int fd, uint64_t size)
{
    struct seg_reserved *r = &s->reserved[s->n_reserved++];
    r->fd = fd;
    r->size = size;
    strcpy(r->name, name);
    r->dir_gen = dir_entry_added(s, true);
    submit(s);
}

int segstore_reserve(segstore *s, const char *name)
{
    int rc = reserve_check(s, name);
    if (rc < 0) return rc;
    int fd = openat(s->dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return err_fail(-errno, "reserve %s/%s: %s", s->dir, name, strerror(errno));
    /* DURABILITY: the empty file exists in the page cache only; the directory fsync that
     * makes its name durable runs before a write into it is acknowledged (dir_entry_added).
     * A crash leaves no file or an empty one (an orphan for gc); nothing refers to it yet. */
    reserve_add(s, name, fd, 0);
    s->st.creates++;
    return 0;
}

int segstore_recycle(segstore *s, const char *old_name, const char *name)
{
    int rc = segfile_check_name("recycle", old_name);
    if (rc < 0 || (rc = reserve_check(s, name)) < 0) return rc;
    if (find_reserved(s, old_name))
        return err_fail(-EINVAL, "recycle %s/%s: it is a reservation, not a deleted segment", s->dir, old_name);
    int fd = openat(s->dir_fd, old_name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return err_fail(-errno, "recycle %s/%s: %s", s->dir, old_name, strerror(errno));
    /* A large file keeps its blocks for the next segment to overwrite (segstore_write cuts
     * off what is left past its end): freeing and allocating them again cost more than the
     * write (perf/README.md, "What held the load runs below the disk"). A small one too: a
     * segment padded to its size (segstore_reserved_bytes) overwrites it in place, and its
     * fdatasync writes no inode. One in between, or past RECYCLE_HOLD_MAX, is emptied. */
    struct stat st;
    if (fstat(fd, &st) < 0) st.st_size = 0;
    uint64_t held = 0, size = (uint64_t)st.st_size;
    for (unsigned i = 0; i < s->n_reserved; i++) held += s->reserved[i].size;
    int empty = (size > RECYCLE_KEEP_SMALL && size < RECYCLE_KEEP_MIN) || held + size > RECYCLE_HOLD_MAX;
    if (empty && ftruncate(fd, 0) < 0) {
        rc = err_fail(-errno, "recycle %s/%s: truncate: %s", s->dir, old_name, strerror(errno));
        close(fd);
        return rc;
    }
    /* RENAME_NOREPLACE: a file already named `name` is never lost to a recycled one. */
    if (renameat2(s->dir_fd, old_name, s->dir_fd, name, RENAME_NOREPLACE) < 0) {
        rc = err_fail(-errno, "recycle %s/%s as %s: %s", s->dir, old_name, name, strerror(errno));
        close(fd);
        return rc;
    }
    /* DURABILITY: like a creation: the new name (and the old one's removal) becomes durable
     * with a directory fsync (dir_entry_added), before any write into it is
     * acknowledged. Until written, the name holds the deleted segment's bytes (a truncate is
     * not synced either); a crash may leave them (or part of a new segment over them), or
     * bring back the old name. Neither is referenced by any handle; the header's segment
     * number tells a stale file from its name (dstl verify: MISNAMED), and gc removes both as
     * orphans. A write makes its own bytes and size durable with its fdatasync. */
    reserve_add(s, name, fd, empty ? 0 : size);
    s->st.recycles++;
    return 0;
}

uint64_t segstore_reserved_bytes(segstore *s, const char *name)
{
    struct seg_reserved *r = find_reserved(s, name);
    return r ? r->size : 0;
}

/* Queues w's callback without I/O (an early failure); the loop is woken to run it. */
static int finish_early(segstore *s, struct seg_write *w, int res, enum seg_fail fail)
{
    w->res = res;
    w->fail = fail;
    list_push(&s->done, w);
    ioeng_kick(s->io);
    return 0;
}

/* dstl.io.direct: a buffer aligned to IOENG_DIRECT_ALIGN of at least that length has its last
 * partial block written through the page cache here, and O_DIRECT turned on for the rest:
 * *head becomes the aligned length left for the engine and *flags gets IOENG_WRITE_DIRECT.
 * Anything else (a short segment, an unaligned buffer) keeps *head = len and is written
 * through the page cache whole. 0, or the -errno of the tail's pwrite (*head set). */
static int direct_prepare(segstore *s, struct seg_write *w, size_t *head, unsigned *flags)
{
    size_t min = s->direct_auto ? SEGSTORE_AUTO_DIRECT_MIN : IOENG_DIRECT_ALIGN;
    if (w->len < min || (uintptr_t)w->buf % IOENG_DIRECT_ALIGN) return 0;
    if (s->direct_unprobed) {
        /* auto: a file system that refuses the probe writes through the page cache from now
         * on; a probe that failed otherwise (a full disk) sends this segment through the page
         * cache (its own write reports the error) and is made again for the next */
        const char *what;
        int p = segfile_probe_direct(s->dir_fd, &what);
        if (p < 0) return 0;
        s->direct_unprobed = false;
        if (p == 1) s->direct = false;
        if (!s->direct) return 0;
    }
    size_t aligned = w->len / IOENG_DIRECT_ALIGN * IOENG_DIRECT_ALIGN;
    *head = aligned;
    /* DURABILITY: the tail is in the page cache only, and the head goes to the device past
     * it: neither counts until the fdatasync linked behind the head's write returns 0 —
     * fdatasync writes back every dirty page of the file, whichever fd dirtied it, and the
     * size and block allocations both parts need. The tail goes first, so that the direct
     * write never extends the file. A crash before the fdatasync leaves the file with any
     * part of either (blocks not yet written read as zeros): never acknowledged, an orphan
     * for gc, and a reader checks the trailer and every CRC anyway. */
    for (size_t off = aligned; off < w->len;) {
        ssize_t n = pwrite(w->fd, (const uint8_t *)w->buf + off, w->len - off, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? -errno : -EIO;
        off += (size_t)n;
    }
    int fl = fcntl(w->fd, F_GETFL);
    if (fl < 0 || fcntl(w->fd, F_SETFL, fl | O_DIRECT) < 0) return 0; /* the head goes through the cache */
    *flags |= IOENG_WRITE_DIRECT;
    atomic_fetch_add_explicit(&s->direct_writes, 1, memory_order_relaxed);
    return 0;
}

int segstore_write(segstore *s, const char *name, const void *buf, size_t len,
                   segstore_done_fn cb, void *ctx)
{
    int rc = segfile_check_name("write", name);
    if (rc < 0) return rc;
    struct seg_write *w = calloc(1, sizeof *w);
    if (!w) return err_fail(-ENOMEM, "write %s/%s: out of memory", s->dir, name);
    w->cb = cb;
    w->ctx = ctx;
    w->buf = buf;
    w->len = len;
    w->fd = -1;
    strcpy(w->name, name);
    s->inflight++;
    if (s->failed) return finish_early(s, w, -EIO, FAIL_STORE);

    struct seg_reserved *r = find_reserved(s, name);
    if (r) {
        w->fd = r->fd;
        w->dir_gen = r->dir_gen; /* usually synced long ago */
        if (w->dir_gen > s->dir_synced) dir_need(s, w->dir_gen);
        uint64_t held = r->size;
        if (held == len) atomic_fetch_add_explicit(&s->in_place, 1, memory_order_relaxed);
        *r = s->reserved[--s->n_reserved];
        s->st.reserved_hits++;
        /* a recycled file longer than this segment loses its tail first (the fdatasync makes
         * the size durable); before the write, as a truncate waits for direct writes */
        if (held > len && ftruncate(w->fd, (off_t)len) < 0) {
            rc = -errno;
            close(w->fd);
            fail_stop(s, "write %s/%s: cutting the recycled file to %zu bytes: %s", s->dir, name, len,
                      strerror(-rc));
            return finish_early(s, w, -EIO, FAIL_STORE);
        }
    } else {
        if (owner_lock(s) < 0) return finish_early(s, w, -EIO, FAIL_LOCK);
        w->fd = openat(s->dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (w->fd < 0) return finish_early(s, w, -errno, FAIL_CREATE);
        /* DURABILITY: the new name is in the page cache only; the directory fsync started
         * (or joined) here makes it durable, in parallel with the data below. A crash before
         * both leaves no file or a partial one: an orphan, never acknowledged. */
        w->dir_gen = dir_entry_added(s, false);
        s->st.creates++;
    }
    unsigned flags = SEGMENT_WRITE_FLAGS;
    size_t head = len;
    if (s->direct && (rc = direct_prepare(s, w, &head, &flags)) < 0) {
        close(w->fd);
        if (is_space_error(rc)) {
            unlinkat(s->dir_fd, name, 0);
            return finish_early(s, w, rc, FAIL_SPACE);
        }
        fail_stop(s, "write %s/%s (its last %zu bytes, through the page cache): %s", s->dir, name, len - head,
                  strerror(-rc));
        return finish_early(s, w, -EIO, FAIL_STORE);
    }
    rc = ioeng_write(s->io, w->fd, buf, head, 0, flags, (uint64_t)(uintptr_t)w);
    if (rc < 0) {
        close(w->fd);
        unlinkat(s->dir_fd, name, 0);
        return finish_early(s, w, rc, FAIL_QUEUE);
    }
    list_push(&s->busy, w);
    submit(s);
    return 0;
}

/* The write + fdatasync of w finished. */
static void on_write_done(segstore *s, struct seg_write *w, const struct ioeng_cqe *c)
{
    list_remove(&s->busy, w);
    w->written = c->written;
    char why[768];
    int reach = c->res == 0 && !s->failed ? segfile_reachable(w->fd, s->dir, s->dir_dev, s->dir_ino, w->name, why,
                                                              sizeof why) : 0;
    close(w->fd);
    w->fd = -1;
    if (reach < 0) {
        /* DURABILITY: the bytes are synced but no name leads to them (the file or its directory
         * was removed under the store): nothing a reader can find, so nothing is acknowledged,
         * now or later. */
        fail_stop(s, "%s", why);
        w->res = -EIO;
        w->fail = FAIL_STORE;
        list_push(&s->done, w);
        return;
    }
    if (c->res == 0 && !s->failed) {
        /* DURABILITY: the file's bytes and size are on disk (fdatasync returned 0). Its name is
         * durable once generation dir_gen is synced; until then a crash may lose the whole
         * file, which nothing references yet. */
        if (w->dir_gen <= s->dir_synced)
            list_push(&s->done, w);
        else
            list_push(&s->dir_wait, w);
        return;
    }
    if (c->res == 0) { /* durable, but the store failed meanwhile: not acknowledged */
        w->res = -EIO;
        w->fail = FAIL_STORE;
    } else if (c->stage == IOENG_OP_WRITE && is_space_error(c->res)) {
        /* The state is known: the write was refused, nothing was acknowledged. The partial
         * file goes; the store stays usable. DURABILITY: the unlink is not synced; a crash may
         * bring the partial file back as an orphan for gc. */
        unlinkat(s->dir_fd, w->name, 0);
        w->res = c->res;
        w->fail = FAIL_SPACE;
    } else {
        /* A failed fdatasync (the kernel may have dropped the dirty pages and cleared the
         * error: retrying could "succeed" over lost data), or a write whose effect is unknown:
         * fail-stop. The file stays for inspection; gc removes it. */
        fail_stop(s, "%s %s/%s: %s", stage_name(c->stage), s->dir, w->name, strerror(-c->res));
        w->res = -EIO;
        w->fail = FAIL_STORE;
    }
    list_push(&s->done, w);
}

static void handle(segstore *s, const struct ioeng_cqe *cq, int n)
{
    for (int i = 0; i < n; i++) {
        if (cq[i].tag == DIR_TAG)
            on_dir_synced(s, cq[i].res);
        else
            on_write_done(s, (struct seg_write *)(uintptr_t)cq[i].tag, &cq[i]);
    }
}

/* Describes w's outcome in s->detail. */
static const char *describe(segstore *s, const struct seg_write *w)
{
    switch (w->fail) {
    case FAIL_NONE:
        return "";
    case FAIL_CREATE:
        snprintf(s->detail, sizeof s->detail, "create %s/%s: %s", s->dir, w->name, strerror(-w->res));
        break;
    case FAIL_QUEUE:
        snprintf(s->detail, sizeof s->detail, "write %s/%s: not queued: %s", s->dir, w->name, strerror(-w->res));
        break;
    case FAIL_SPACE:
        snprintf(s->detail, sizeof s->detail, "write %s/%s (%zu bytes, %llu written): %s; partial file removed",
                 s->dir, w->name, w->len, (unsigned long long)w->written, strerror(-w->res));
        break;
    case FAIL_LOCK:
        snprintf(s->detail, sizeof s->detail, "write %s/%s: the run's lock could not be taken: %.700s",
                 s->dir, w->name, s->lock_err);
        break;
    case FAIL_STORE:
        /* failed_detail names the directory already */
        snprintf(s->detail, sizeof s->detail, "write %.255s: %.760s", w->name, s->failed_detail);
        break;
    }
    return s->detail;
}

/* Runs the callbacks that are ready now (not those their callbacks queue). */
static int run_callbacks(segstore *s)
{
    struct seg_write *w = s->done.head;
    s->done.head = s->done.tail = NULL;
    int ran = 0;
    while (w) {
        struct seg_write *next = w->next;
        const char *detail = describe(s, w);
        if (w->res == 0) {
            /* DURABILITY: acknowledged — bytes, size and directory entry are all durable; a
             * crash from here on leaves this segment complete. */
            s->st.writes_ok++;
            s->st.bytes_ok += w->len;
        } else {
            s->st.writes_failed++;
            err_fail(w->res, "%s", detail);
        }
        s->inflight--;
        segstore_done_fn cb = w->cb;
        void *ctx = w->ctx;
        int res = w->res;
        free(w);
        if (cb) cb(ctx, res, detail);
        ran++;
        w = next;
    }
    if (s->done.head && s->io) ioeng_kick(s->io); /* callbacks queued more: come back */
    return ran;
}

/* Takes every finished engine operation; with wait, blocks for one first. 0 or -errno. */
static int reap(segstore *s, int wait)
{
    struct ioeng_cqe cq[REAP_BATCH];
    for (;;) {
        int n = ioeng_reap(s->io, cq, REAP_BATCH, wait);
        if (n < 0) {
            fail_stop(s, "the %s engine failed: %s", ioeng_name(s->io), dstl_last_error());
            return n;
        }
        handle(s, cq, n);
        if ((unsigned)n < REAP_BATCH) break;
        wait = 0;
    }
    submit(s); /* the next directory fsync, if one was started */
    return 0;
}

int segstore_poll(segstore *s)
{
    reap(s, 0);
    return run_callbacks(s);
}

void segstore_close(segstore *s)
{
    if (!s) return;
    while (s->inflight) {
        run_callbacks(s);
        if (!s->inflight) break;
        if (reap(s, 1) < 0) break;
        if (!s->done.head && !ioeng_pending(s->io)) break; /* nothing can move: see below */
    }
    ioeng_close(s->io); /* waits until the kernel has let go of every buffer */
    s->io = NULL;
    if (s->inflight) {
        /* Only after an engine failure: what is left can never complete now. */
        fail_stop(s, "the store was closed with writes outstanding");
        while (s->busy.head) {
            struct seg_write *w = s->busy.head;
            list_remove(&s->busy, w);
            close(w->fd);
            w->res = -EIO;
            w->fail = FAIL_STORE;
            list_push(&s->done, w);
        }
        run_callbacks(s);
    }
    bool removed = atomic_load(&s->unlink_dirty);
    for (unsigned i = 0; i < s->n_reserved; i++) {
        close(s->reserved[i].fd);
        if (unlinkat(s->dir_fd, s->reserved[i].name, 0) == 0) removed = true;
    }
    /* DURABILITY: removals (unused reservations, segstore_unlink) become durable here; if the
     * fsync fails or a crash comes first, the files may come back as orphans for gc. Nothing
     * acknowledged depends on it. */
    if (removed) (void)fsync(s->dir_fd);
    if (s->lock_fd >= 0) {
        /* The run is over: its files (those live handles still reference) are judged by the
         * live set from now on. Unlinked under the lock, so a gc never takes a live run's lock
         * file for a dead one's. */
        char name[NAME_MAX + 1];
        if (segfile_lock_name(s->owner, name, sizeof name) == 0) unlinkat(s->dir_fd, name, 0);
        close(s->lock_fd);
    }
    close(s->dir_fd);
    free(s->owner);
    free(s->dir);
    free(s);
}

/* ---- any thread ------------------------------------------------------------------------------ */

uint64_t segstore_direct_writes(const segstore *s)
{
    return atomic_load_explicit(&s->direct_writes, memory_order_relaxed);
}

uint64_t segstore_in_place_writes(const segstore *s) { return atomic_load_explicit(&s->in_place, memory_order_relaxed); }

int segstore_unlink(segstore *s, const char *name)
{
    int rc = segfile_check_name("unlink", name);
    if (rc < 0) return rc;
    if (unlinkat(s->dir_fd, name, 0) < 0)
        return err_fail(-errno, "unlink %s/%s: %s", s->dir, name, strerror(errno));
    atomic_store(&s->unlink_dirty, true);
    return 0;
}
