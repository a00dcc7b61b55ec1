/*
 * dstl/local/segfiles.c — the local store's file operations that need no open store: reads,
 * sizes and listings of segment files, the run lock files that say which runs are alive
 * (dstl/README.md, "Who may delete what"), and the O_DIRECT probe. Thread-safe; blocking; used
 * by readers and gc on any thread, and by the store itself (segstore.c) for names and locks.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

int segfile_check_name(const char *what, const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > NAME_MAX || strchr(name, '/') || strcmp(name, ".") == 0 ||
        strcmp(name, "..") == 0)
        return err_fail(-EINVAL, "%s: bad segment file name '%s' (1..%d bytes, no '/')", what,
                        name ? name : "(null)", NAME_MAX);
    return 0;
}

/* Calls fn(ctx, dir fd, name, &counted) for each entry of dir whose name is longer than suffix
 * and ends in it, in directory order. fn returns 0, or anything else to stop the listing with
 * it, and clears counted for an entry it skipped. Returns the count of the others, fn's stop
 * value, or -errno naming dir. */
typedef int (*list_fn)(void *ctx, int dfd, const char *name, int *counted);

static int list_suffix(const char *dir, const char *suffix, list_fn fn, void *ctx)
{
    DIR *d = opendir(dir);
    if (!d) return err_fail(-errno, "list %s: %s", dir, strerror(errno));
    int count = 0, rc = 0;
    size_t k = strlen(suffix);
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno) rc = err_fail(-errno, "list %s: %s", dir, strerror(errno));
            break;
        }
        size_t n = strlen(de->d_name);
        if (n <= k || strcmp(de->d_name + n - k, suffix) != 0) continue;
        int counted = 1;
        if ((rc = fn(ctx, dirfd(d), de->d_name, &counted)) != 0) break;
        count += counted;
    }
    closedir(d);
    return rc != 0 ? rc : count;
}

int segfile_lock_name(const char *owner, char *buf, size_t cap)
{
    if (!owner || !*owner || strchr(owner, '/') ||
        snprintf(buf, cap, "%s%s", owner, SEGSTORE_LOCK_SUFFIX) >= (int)cap)
        return err_fail(-EINVAL, "bad run id '%s' for a lock file", owner ? owner : "(null)");
    return 0;
}

/* Opens dir/<owner>.lock read-only: fd, -ENOENT when there is none, or -errno. */
static int open_lock(const char *dir, const char *owner, char *path, size_t cap)
{
    char name[NAME_MAX + 1];
    int rc = segfile_lock_name(owner, name, sizeof name);
    if (rc < 0) return rc;
    if (snprintf(path, cap, "%s/%s", dir, name) >= (int)cap)
        return err_fail(-ENAMETOOLONG, "lock %s/%s: path too long", dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT) return err_fail(-errno, "lock %s: %s", path, strerror(errno));
    return fd < 0 ? -ENOENT : fd;
}

int segstore_owner_alive(const char *dir, const char *owner)
{
    char path[PATH_MAX];
    int fd = open_lock(dir, owner, path, sizeof path);
    if (fd == -ENOENT) return 0;
    if (fd < 0) return fd;
    /* flock locks belong to open file descriptions: this probe conflicts with the owner's
     * lock even inside the owner's own process. */
    int rc = flock(fd, LOCK_SH | LOCK_NB) == 0 ? 0 : errno == EWOULDBLOCK ? 1 : -errno;
    close(fd);
    return rc < 0 ? err_fail(rc, "lock %s: %s", path, strerror(-rc)) : rc;
}

int segstore_owner_forget(const char *dir, const char *owner)
{
    char path[PATH_MAX];
    int fd = open_lock(dir, owner, path, sizeof path);
    if (fd == -ENOENT) return 0;
    if (fd < 0) return fd;
    int rc;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) rc = errno == EWOULDBLOCK ? 0 : err_fail(-errno, "lock %s: %s", path, strerror(errno));
    else rc = unlink(path) == 0 || errno == ENOENT ? 1 : err_fail(-errno, "remove %s: %s", path, strerror(errno));
    close(fd);
    return rc;
}

typedef struct {
    segstore_owner_fn cb;
    void *ctx;
} owners_ctx;

static int visit_owner(void *arg, int dfd, const char *name, int *counted)
{
    (void)dfd;
    (void)counted;
    owners_ctx *o = arg;
    char owner[NAME_MAX + 1];
    size_t n = strlen(name) - strlen(SEGSTORE_LOCK_SUFFIX);
    memcpy(owner, name, n);
    owner[n] = '\0';
    return o->cb(o->ctx, owner);
}

int segstore_list_owners(const char *dir, segstore_owner_fn cb, void *ctx)
{
    owners_ctx o = {cb, ctx};
    return list_suffix(dir, SEGSTORE_LOCK_SUFFIX, visit_owner, &o);
}

static int open_in(const char *dir, const char *name, const char *what)
{
    int rc = segfile_check_name(what, name);
    if (rc < 0) return rc;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return err_fail(-ENAMETOOLONG, "%s %s/%s: path too long", what, dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_fail(-errno, "%s %s: %s", what, path, strerror(errno));
    return fd;
}

ssize_t segstore_read_at(const char *dir, const char *name, uint64_t off, void *buf, size_t len)
{
    if (len > SSIZE_MAX || off > (uint64_t)INT64_MAX)
        return err_fail(-EINVAL, "read %s/%s: offset %llu length %zu out of range", dir, name,
                        (unsigned long long)off, len);
    int fd = open_in(dir, name, "read");
    if (fd < 0) return fd;
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int rc = -errno;
            close(fd);
            return err_fail(rc, "read %s/%s at offset %llu: %s", dir, name,
                            (unsigned long long)(off + got), strerror(-rc));
        }
        if (n == 0) break; /* end of file */
        got += (size_t)n;
    }
    close(fd);
    return (ssize_t)got;
}

int segstore_size(const char *dir, const char *name, uint64_t *size_bytes)
{
    int fd = open_in(dir, name, "stat");
    if (fd < 0) return fd;
    struct stat st;
    int rc = fstat(fd, &st) < 0 ? -errno : 0;
    close(fd);
    if (rc < 0) return err_fail(rc, "stat %s/%s: %s", dir, name, strerror(-rc));
    *size_bytes = (uint64_t)st.st_size;
    return 0;
}

typedef struct {
    const char *dir;
    segstore_list_fn cb;
    void *ctx;
} segs_ctx;

static int visit_segment(void *arg, int dfd, const char *name, int *counted)
{
    segs_ctx *c = arg;
    struct stat st;
    *counted = 0;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT) return 0; /* removed meanwhile */
        return err_fail(-errno, "list %s: stat %s: %s", c->dir, name, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) return 0;
    *counted = 1;
    int64_t mtime_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
    return c->cb(c->ctx, name, (uint64_t)st.st_size, mtime_ms);
}

int segstore_list(const char *dir, segstore_list_fn cb, void *ctx)
{
    segs_ctx c = {dir, cb, ctx};
    return list_suffix(dir, SEGSTORE_SUFFIX, visit_segment, &c);
}

/* ---- the run's lock, reachability (for the store: segstore.c) ---- */

/* Attempts at taking the run's lock file when a gc removes it in between. */
#define LOCK_TRIES 8

int segfile_run_lock(int dir_fd, const char *dir, const char *owner, int *lock_fd)
{
    char name[NAME_MAX + 1];
    int rc = segfile_lock_name(owner, name, sizeof name);
    if (rc < 0) return rc;
    int fd = -1;
    /* A gc removes the lock file of a dead run under that file's lock; if it took our file
     * for a dead run's between our create and our flock, the inode we locked has no name any
     * more: create it again (twice is already a race no real gc makes). */
    for (int tries = 0; fd < 0 && tries < LOCK_TRIES; tries++) {
        fd = openat(dir_fd, name, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) return err_fail(-errno, "lock %s/%s: %s", dir, name, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
            rc = -errno;
            close(fd);
            return err_fail(rc, "lock %s/%s: %s (another storage holds this run id?)", dir, name, strerror(-rc));
        }
        struct stat a, b;
        if (fstat(fd, &a) < 0 || fstatat(dir_fd, name, &b, 0) < 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
            close(fd);
            fd = -1;
        }
    }
    if (fd < 0) return err_fail(-EAGAIN, "lock %s/%s: removed each time it was taken", dir, name);
    /* The content is for people (who holds it); never synced: after a crash nobody holds it. */
    char info[128];
    int n = snprintf(info, sizeof info, "dstl run %s, pid %ld\n", owner, (long)getpid());
    if (n > 0 && ftruncate(fd, 0) == 0 && pwrite(fd, info, (size_t)n, 0) < 0) {
        /* informational only */
    }
    *lock_fd = fd;
    return 0;
}

int segfile_reachable(int fd, const char *dir, dev_t dir_dev, ino_t dir_ino, const char *name, char *why, size_t cap)
{
    struct stat st, dst;
    if (fstat(fd, &st) < 0) {
        snprintf(why, cap, "fstat %s/%s: %s", dir, name, strerror(errno));
        return -EIO;
    }
    if (st.st_nlink == 0) {
        snprintf(why, cap, "%s/%s has no directory entry after its fdatasync (removed, or the directory was)",
                 dir, name);
        return -EIO;
    }
    if (stat(dir, &dst) < 0) {
        snprintf(why, cap, "the directory %s is gone while in use (%s): %s is not reachable", dir, strerror(errno),
                 name);
        return -EIO;
    }
    if (dst.st_dev != dir_dev || dst.st_ino != dir_ino) {
        snprintf(why, cap, "the directory %s was replaced while in use (another directory is there now): "
                 "%s is not reachable", dir, name);
        return -EIO;
    }
    return 0;
}

/* mkdir -p, with each new directory's entry made durable by an fsync of its parent. */
int segfile_make_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return err_fail(-ENOTDIR, "local dir %s: exists and is not a directory", dir);
        return 0;
    }
    if (errno != ENOENT) return err_fail(-errno, "local dir %s: %s", dir, strerror(errno));

    char parent[PATH_MAX];
    size_t n = strlen(dir);
    if (n >= sizeof parent) return err_fail(-ENAMETOOLONG, "local dir %s: path too long", dir);
    memcpy(parent, dir, n + 1);
    while (n > 1 && parent[n - 1] == '/') parent[--n] = '\0';
    char *slash = strrchr(parent, '/');
    if (!slash)
        strcpy(parent, ".");
    else if (slash == parent)
        parent[1] = '\0';
    else
        *slash = '\0';
    int rc = segfile_make_dir(parent);
    if (rc < 0) return rc;

    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return err_fail(-errno, "create local dir %s: %s", dir, strerror(errno));
    int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return err_fail(-errno, "open %s (parent of %s): %s", parent, dir, strerror(errno));
    /* DURABILITY: the new directory's entry in its parent is durable after this fsync. A crash
     * before it may lose the (still empty) directory; nothing in it was acknowledged. */
    rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    if (rc < 0)
        return err_fail(rc, "fsync %s (parent of new local dir %s): %s", parent, dir,
                        strerror(-rc));
    return 0;
}

/* Whether the store's file system takes the writes dstl.io.direct makes: a probe file opened
 * with O_DIRECT and one 4 KiB block written into it from a 4 KiB-aligned buffer (a file system
 * may take the open and refuse the alignment: a device with larger logical blocks), removed at
 * once (a crash in between leaves a dot file no gc or reader looks at). 0; 1 when the file
 * system refuses it (-EINVAL from the open or the write); or the -errno of the probe's create
 * or write (*what says which). Sets no error detail. */
int segfile_probe_direct(int dir_fd, const char **what)
{
    char name[64];
    snprintf(name, sizeof name, ".direct-probe-%ld", (long)getpid());
    unlinkat(dir_fd, name, 0); /* a crashed probe of a process with our pid */
    int fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
    int rc = fd < 0 ? -errno : 0;
    *what = "create";
    if (fd >= 0) {
        void *block = NULL;
        if (posix_memalign(&block, IOENG_DIRECT_ALIGN, IOENG_DIRECT_ALIGN) != 0) {
            rc = -ENOMEM;
        } else {
            memset(block, 0, IOENG_DIRECT_ALIGN);
            ssize_t n;
            do n = pwrite(fd, block, IOENG_DIRECT_ALIGN, 0); while (n < 0 && errno == EINTR);
            rc = n < 0 ? -errno : 0; /* a short write of a probe block is no refusal */
            free(block);
        }
        *what = "write";
        close(fd);
    }
    /* the open may refuse O_DIRECT after creating the file (ramfs): remove it in any case */
    unlinkat(dir_fd, name, 0);
    return rc == -EINVAL ? 1 : rc;
}
