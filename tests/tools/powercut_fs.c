/*
 * tests/tools/powercut_fs.c — a power-cut simulator: a FUSE file system that stands between a
 * program and the disk and, at a simulated power cut, forgets everything the program had not
 * made durable.
 *
 *   powercut_fs [--mode drop|prefix|tear] [--seed N] [--max-mb N] [--debug] BACKING MOUNTPOINT
 *
 * Why: a crash test that kills its child with SIGKILL keeps the page cache, so it cannot see a
 * missing fsync. Under this file system the page cache is this process's memory, and only what
 * fsync/fdatasync/fsyncdir made durable survives a cut (tests/test_dstl_powercut.c).
 *
 * What it models (low-level FUSE API, inode based, single-threaded, all in memory):
 *  - Per regular file: its current content and its durable content. fsync and fdatasync of the
 *    file make its current bytes and size durable (both the same here). Writes and truncates
 *    since the last sync are also kept as a journal in modes prefix and tear.
 *  - Per directory: its current entries and its durable entries. fsyncdir makes the current
 *    entries of that one directory durable: creations, unlinks, mkdir, rmdir and renames in it
 *    count only once their directory is synced (a rename needs both of its directories).
 *    An fsync of a file never makes its name durable.
 *  - Inodes live while a current name, a durable name, the kernel's lookup count or an open
 *    handle refers to them, so an unlinked file stays readable and writable through its open
 *    fds and reports st_nlink 0; a durably named file unlinked since the last fsyncdir comes
 *    back after a cut with its durable content.
 *  - The post-crash image: from the root's durable entries down, each directory's durable
 *    entries and each file's durable content. Mode drop (default) keeps exactly that. Mode
 *    prefix also keeps, per file, a random prefix of its unsynced journal; mode tear does the
 *    same and cuts the next journalled write short (at a random byte, or half of the time at a
 *    512-byte boundary), a torn last write. Choices come from --seed.
 * What it does not model: reordering or loss inside what was synced (a synced file is all
 * there), unsynced directory changes partly surviving, metadata durability (modes, owners,
 * times: the image has the current ones; mtime is not kept), hard links, symlinks, special
 * files, xattrs, mmap writes (no writeback cache: every write(2) reaches this process).
 * A directory renamed without syncing both parents can appear twice in the image, or inside
 * itself; a cycle is cut (with a warning on stderr) where the walk meets it again.
 *
 * Image: at start every file and directory under BACKING is loaded and counts as durable. When
 * the daemon stops (SIGTERM, SIGINT, or an external unmount) it unmounts (lazily; the kernel's
 * caches of that mount go with it) and writes the image to BACKING, replacing what was there
 * (a sibling directory is built and swapped in with RENAME_EXCHANGE): the post-crash image after
 * a cut, else the current state. A new daemon on the same BACKING sees what survived.
 *
 * Control: the file `.powercut` at the mount root (not listed by readdir, not part of the image).
 * Writing `cut` freezes the file system: the durable state is fixed before the write returns,
 * and from then on every operation fails with EIO, so nothing can become durable after the cut.
 * Reading it gives a status text (state, mode, counters). Stop the daemon afterwards with
 * SIGTERM; it prints "ready" on stdout once mounted.
 *
 * Bounds: file data, journals, names and inodes are counted against --max-mb (default
 * PC_DEFAULT_MAX_MB); beyond it writes fail with ENOSPC and a note on stderr. Anything
 * unexpected (an unknown inode from the kernel, a lookup count going negative, a failed image
 * write) is reported on stderr and makes the exit status 1. Exit 0 only after a clean run.
 *
 * Threads: one (fuse_session_loop); signals only set libfuse's exit flag.
 */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* Memory for file data, journals and names: a trial of the crash child writes a few tens of MB;
 * 512 MiB is far above that and far below what a test machine can spare per daemon. */
#define PC_DEFAULT_MAX_MB 512u
/* Inodes: the crash child creates a few thousand files per trial. */
#define PC_MAX_INODES (1u << 20)
/* Directory depth the image walk follows: far beyond any test tree, and below PATH_MAX. */
#define PC_MAX_DEPTH 64
/* Kernel attribute and entry caching (seconds): only this mount changes the tree, and the
 * kernel updates what it cached from our replies; 1 s saves most GETATTR round trips. */
#define PC_CACHE_TIMEOUT_S 1.0
/* Bytes of one control command ("cut"). */
#define PC_CMD_MAX 64u
#define PC_CTL_NAME ".powercut"
#define PC_CTL_INO 2u

enum pc_mode { MODE_DROP, MODE_PREFIX, MODE_TEAR };
static const char *const mode_names[] = {"drop", "prefix", "tear"};

/* File bytes, shared between a file's current and durable content until the next write. */
struct blob {
    size_t refs, len, cap;
    unsigned char data[];
};

/* One write or truncate since the file's last sync (modes prefix and tear). */
struct jop {
    struct jop *next;
    uint64_t off;    /* write: offset; truncate: the new size */
    size_t len;      /* write: bytes in data                  */
    bool trunc;
    unsigned char data[];
};

struct ent {
    char *name;
    struct node *node;
};

struct ents {
    struct ent *v;
    size_t n, cap;
};

struct node {
    fuse_ino_t ino;
    struct node *hnext;           /* inode hash chain                                      */
    mode_t mode;
    uid_t uid;
    gid_t gid;
    struct timespec atime, mtime, ctime;
    uint32_t nlink;               /* current names (a directory: 1 while named)            */
    uint32_t dlinks;              /* durable entries naming it                             */
    uint32_t opens;               /* open handles                                          */
    uint64_t lookups;             /* the kernel's lookup count                             */
    /* regular files */
    struct blob *cur, *dur;       /* NULL: empty                                           */
    struct blob *crash;           /* the image content, computed once at the stop          */
    bool crash_done;
    struct jop *jhead, *jtail;
    size_t jn;
    /* directories */
    struct ents cur_e, dur_e;
    struct node *parent;          /* current parent; NULL once removed                     */
    bool on_path;                 /* image walk: an ancestor of the directory being written */
};

struct snap_ent {
    fuse_ino_t ino;
    mode_t type;
    char *name;
};

/* A readdir snapshot; all open ones are listed, since a release may never come (the daemon
 * stops while the kernel still owes it). */
struct snap {
    struct snap *prev, *next;
    size_t n;
    struct snap_ent v[];
};

static struct {
    enum pc_mode mode;
    uint64_t seed, rng;
    size_t max_mem, mem;
    bool unbounded;               /* writing the image: no bound                           */
    bool frozen;                  /* cut: every operation fails with EIO                   */
    bool warned_full;
    unsigned errors;              /* unexpected events; exit status 1                      */
    struct node *root;
    struct node ctl;
    struct node **buckets;
    size_t nbuckets, count;
    struct snap *snaps;           /* open readdir snapshots                                */
    fuse_ino_t next_ino;
    uint64_t st_writes, st_fsyncs, st_fsyncdirs, st_bytes;
    uint64_t im_files, im_dirs, im_kept_ops, im_unsynced_ops, im_torn, im_cycles;
} g;

static void complain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void complain(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "powercut_fs: ERROR: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    g.errors++;
}

static uint64_t rnd(void)
{
    uint64_t z = (g.rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static struct timespec now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t;
}

/* ---- memory accounting ---------------------------------------------------------------------- */

static int mem_take(size_t n)
{
    if (!g.unbounded && (n > g.max_mem || g.mem > g.max_mem - n)) {
        if (!g.warned_full)
            fprintf(stderr, "powercut_fs: the memory bound of %zu MiB is reached: writes fail with "
                            "ENOSPC (raise --max-mb)\n", g.max_mem >> 20);
        g.warned_full = true;
        return -ENOSPC;
    }
    g.mem += n;
    return 0;
}

static void mem_give(size_t n) { g.mem -= n; }

/* malloc counted against the bound: NULL with *err = ENOSPC or ENOMEM. */
static void *xalloc(size_t n, int *err)
{
    if (mem_take(n) < 0) {
        *err = ENOSPC;
        return NULL;
    }
    void *p = calloc(1, n);
    if (!p) {
        mem_give(n);
        complain("out of memory (%zu bytes)", n);
        *err = ENOMEM;
    }
    return p;
}

static void xfree(void *p, size_t n)
{
    if (!p) return;
    free(p);
    mem_give(n);
}

static char *xstrdup(const char *s, int *err)
{
    size_t n = strlen(s) + 1;
    char *d = xalloc(n, err);
    if (d) memcpy(d, s, n);
    return d;
}

static void xfree_str(char *s)
{
    if (s) xfree(s, strlen(s) + 1);
}

/* ---- blobs ---------------------------------------------------------------------------------- */

static size_t blob_len(const struct blob *b) { return b ? b->len : 0; }

static struct blob *blob_ref(struct blob *b)
{
    if (b) b->refs++;
    return b;
}

static void blob_put(struct blob *b)
{
    if (b && --b->refs == 0) xfree(b, sizeof *b + b->cap);
}

/* Makes *bp unshared with room for need bytes. 0 or -ENOSPC/-ENOMEM. */
static int blob_room(struct blob **bp, size_t need)
{
    struct blob *b = *bp;
    if (need > SIZE_MAX / 4) return -EFBIG;
    if (b && b->refs == 1 && b->cap >= need) return 0;
    size_t cap = b ? b->cap : 0;
    if (cap < need) {
        cap = cap * 2 > need ? cap * 2 : need;
        if (cap < 4096) cap = 4096;
        if (!g.unbounded && cap > need && g.mem + sizeof *b + cap > g.max_mem) cap = need;
    }
    int err;
    struct blob *nb = xalloc(sizeof *nb + cap, &err);
    if (!nb) return -err;
    nb->refs = 1;
    nb->cap = cap;
    nb->len = blob_len(b);
    if (b) memcpy(nb->data, b->data, b->len);
    blob_put(b);
    *bp = nb;
    return 0;
}

static int blob_write(struct blob **bp, uint64_t off, const void *buf, size_t len)
{
    if (len == 0) return 0;   /* POSIX: a write of nothing changes nothing, not even the size */
    if (off > (uint64_t)(SIZE_MAX / 4) || len > SIZE_MAX / 4) return -EFBIG;
    size_t end = (size_t)off + len, cur = blob_len(*bp);
    int rc = blob_room(bp, end > cur ? end : cur);
    if (rc < 0) return rc;
    struct blob *b = *bp;
    if (off > b->len) memset(b->data + b->len, 0, (size_t)off - b->len);
    memcpy(b->data + off, buf, len);
    if (end > b->len) b->len = end;
    return 0;
}

static int blob_truncate(struct blob **bp, uint64_t size)
{
    if (size > (uint64_t)(SIZE_MAX / 4)) return -EFBIG;
    size_t cur = blob_len(*bp);
    if (size == cur) return 0;
    int rc = blob_room(bp, size > cur ? (size_t)size : cur);
    if (rc < 0) return rc;
    struct blob *b = *bp;
    if (size > b->len) memset(b->data + b->len, 0, (size_t)size - b->len);
    b->len = (size_t)size;
    return 0;
}

/* ---- inodes --------------------------------------------------------------------------------- */

static size_t hash_ino(fuse_ino_t ino, size_t nb) { return (size_t)((ino * 0x9E3779B97F4A7C15ull) >> 17) & (nb - 1); }

static struct node *node_find(fuse_ino_t ino)
{
    if (ino == FUSE_ROOT_ID) return g.root;
    if (ino == PC_CTL_INO) return &g.ctl;
    for (struct node *n = g.buckets[hash_ino(ino, g.nbuckets)]; n; n = n->hnext)
        if (n->ino == ino) return n;
    return NULL;
}

static int hash_grow(void)
{
    size_t nb = g.nbuckets * 2;
    struct node **b = calloc(nb, sizeof *b);
    if (!b) {
        complain("out of memory (inode table of %zu buckets)", nb);
        return -ENOMEM;
    }
    for (size_t i = 0; i < g.nbuckets; i++) {
        for (struct node *n = g.buckets[i], *next; n; n = next) {
            next = n->hnext;
            size_t h = hash_ino(n->ino, nb);
            n->hnext = b[h];
            b[h] = n;
        }
    }
    free(g.buckets);
    g.buckets = b;
    g.nbuckets = nb;
    return 0;
}

static struct node *node_new(mode_t mode, uid_t uid, gid_t gid, int *err)
{
    if (g.count >= PC_MAX_INODES) {
        *err = ENOSPC;
        fprintf(stderr, "powercut_fs: %u inodes exist: creations fail with ENOSPC\n", PC_MAX_INODES);
        return NULL;
    }
    if (g.count >= g.nbuckets && hash_grow() < 0) {
        *err = ENOMEM;
        return NULL;
    }
    struct node *n = xalloc(sizeof *n, err);
    if (!n) return NULL;
    n->ino = g.next_ino++;
    n->mode = mode;
    n->uid = uid;
    n->gid = gid;
    n->atime = n->mtime = n->ctime = now();
    size_t h = hash_ino(n->ino, g.nbuckets);
    n->hnext = g.buckets[h];
    g.buckets[h] = n;
    g.count++;
    return n;
}

static void journal_clear(struct node *n)
{
    for (struct jop *j = n->jhead, *next; j; j = next) {
        next = j->next;
        xfree(j, sizeof *j + j->len);
    }
    n->jhead = n->jtail = NULL;
    n->jn = 0;
}

static void ents_free(struct ents *es);
static void node_maybe_free(struct node *n);

/* Drops a durable entry list, with the durable links it held. */
static void dur_drop(struct ents *es)
{
    struct ents old = *es;
    *es = (struct ents){0};
    for (size_t i = 0; i < old.n; i++) old.v[i].node->dlinks--;
    for (size_t i = 0; i < old.n; i++) node_maybe_free(old.v[i].node);
    ents_free(&old);
}

/* Frees n once nothing refers to it any more. Never after the cut: the frozen state stays. */
static void node_maybe_free(struct node *n)
{
    if (g.frozen || n == g.root || n == &g.ctl) return;
    if (n->nlink || n->dlinks || n->lookups || n->opens) return;
    struct node **pp = &g.buckets[hash_ino(n->ino, g.nbuckets)];
    while (*pp && *pp != n) pp = &(*pp)->hnext;
    if (!*pp) {
        complain("inode %" PRIu64 " is missing from the inode table", (uint64_t)n->ino);
        return;
    }
    *pp = n->hnext;
    g.count--;
    blob_put(n->cur);
    blob_put(n->dur);
    blob_put(n->crash);
    journal_clear(n);
    if (n->cur_e.n) complain("directory inode %" PRIu64 " freed with %zu entries", (uint64_t)n->ino, n->cur_e.n);
    ents_free(&n->cur_e);
    dur_drop(&n->dur_e);
    xfree(n, sizeof *n);
}

static void fill_stat(const struct node *n, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = n->ino;
    st->st_mode = n->mode;
    if (S_ISDIR(n->mode)) {
        nlink_t links = n->nlink ? 2 : 0;
        for (size_t i = 0; n->nlink && i < n->cur_e.n; i++)
            if (S_ISDIR(n->cur_e.v[i].node->mode)) links++;
        st->st_nlink = links;
        st->st_size = 4096;
    } else {
        st->st_nlink = n->nlink;
        st->st_size = (off_t)blob_len(n->cur);
    }
    st->st_uid = n->uid;
    st->st_gid = n->gid;
    st->st_blksize = 4096;
    st->st_blocks = (blkcnt_t)((st->st_size + 511) / 512);
    st->st_atim = n->atime;
    st->st_mtim = n->mtime;
    st->st_ctim = n->ctime;
}

/* ---- directory entries ---------------------------------------------------------------------- */

static void ents_free(struct ents *es)
{
    for (size_t i = 0; i < es->n; i++) xfree_str(es->v[i].name);
    xfree(es->v, es->cap * sizeof *es->v);
    *es = (struct ents){0};
}

static struct ent *ents_find(struct ents *es, const char *name)
{
    for (size_t i = 0; i < es->n; i++)
        if (strcmp(es->v[i].name, name) == 0) return &es->v[i];
    return NULL;
}

static int ents_add(struct ents *es, const char *name, struct node *n)
{
    int err;
    if (es->n == es->cap) {
        size_t cap = es->cap ? es->cap * 2 : 16;
        struct ent *v = xalloc(cap * sizeof *v, &err);
        if (!v) return -err;
        if (es->n) memcpy(v, es->v, es->n * sizeof *v);
        xfree(es->v, es->cap * sizeof *es->v);
        es->v = v;
        es->cap = cap;
    }
    char *s = xstrdup(name, &err);
    if (!s) return -err;
    es->v[es->n++] = (struct ent){s, n};
    return 0;
}

static void ents_remove(struct ents *es, struct ent *e)
{
    xfree_str(e->name);
    *e = es->v[--es->n];
}

/* ---- requests: helpers ---------------------------------------------------------------------- */

#define FROZEN_EIO(req)                                                                            \
    do {                                                                                           \
        if (g.frozen) {                                                                            \
            fuse_reply_err((req), EIO);                                                            \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static struct node *get(fuse_req_t req, fuse_ino_t ino)
{
    struct node *n = node_find(ino);
    if (!n) {
        complain("the kernel asked for inode %" PRIu64 ", which does not exist", (uint64_t)ino);
        fuse_reply_err(req, ESTALE);
    }
    return n;
}

static struct node *get_dir(fuse_req_t req, fuse_ino_t ino)
{
    struct node *n = get(req, ino);
    if (n && !S_ISDIR(n->mode)) {
        fuse_reply_err(req, ENOTDIR);
        return NULL;
    }
    return n;
}

static bool is_ctl_name(const struct node *dir, const char *name)
{
    return dir == g.root && strcmp(name, PC_CTL_NAME) == 0;
}

static void reply_entry(fuse_req_t req, struct node *n)
{
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.ino = n->ino;
    e.generation = 1;
    e.attr_timeout = PC_CACHE_TIMEOUT_S;
    e.entry_timeout = PC_CACHE_TIMEOUT_S;
    fill_stat(n, &e.attr);
    if (fuse_reply_entry(req, &e) == 0) n->lookups++;
}

static void reply_attr(fuse_req_t req, struct node *n)
{
    struct stat st;
    fill_stat(n, &st);
    fuse_reply_attr(req, &st, PC_CACHE_TIMEOUT_S);
}

/* A name for a new entry in d: 0, or an errno. */
static int check_new_name(struct node *d, const char *name)
{
    if (strlen(name) > NAME_MAX) return ENAMETOOLONG;
    if (d->nlink == 0) return ENOENT;   /* a removed directory */
    if (is_ctl_name(d, name) || ents_find(&d->cur_e, name)) return EEXIST;
    return 0;
}

static void touch_dir(struct node *d) { d->mtime = d->ctime = now(); }

/* ---- file data ------------------------------------------------------------------------------ */

static int journal_add(struct node *n, bool trunc, uint64_t off, const void *buf, size_t len)
{
    if (g.mode == MODE_DROP) return 0;
    int err;
    struct jop *j = xalloc(sizeof *j + len, &err);
    if (!j) return -err;
    j->trunc = trunc;
    j->off = off;
    j->len = len;
    if (len) memcpy(j->data, buf, len);
    if (n->jtail)
        n->jtail->next = j;
    else
        n->jhead = j;
    n->jtail = j;
    n->jn++;
    return 0;
}

/* Takes back the last journal entry: its operation failed. */
static void journal_pop(struct node *n)
{
    struct jop **pp = &n->jhead, *prev = NULL;
    while ((*pp)->next) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    xfree(*pp, sizeof **pp + (*pp)->len);
    *pp = NULL;
    n->jtail = prev;
    n->jn--;
}

static int file_write(struct node *n, uint64_t off, const void *buf, size_t len)
{
    int rc = journal_add(n, false, off, buf, len);
    if (rc < 0) return rc;
    rc = blob_write(&n->cur, off, buf, len);
    if (rc < 0) {
        if (g.mode != MODE_DROP) journal_pop(n);
        return rc;
    }
    n->mtime = n->ctime = now();
    g.st_writes++;
    g.st_bytes += len;
    return 0;
}

static int file_truncate(struct node *n, uint64_t size)
{
    if (size == blob_len(n->cur)) return 0;
    int rc = journal_add(n, true, size, NULL, 0);
    if (rc < 0) return rc;
    rc = blob_truncate(&n->cur, size);
    if (rc < 0) {
        if (g.mode != MODE_DROP) journal_pop(n);
        return rc;
    }
    n->mtime = n->ctime = now();
    return 0;
}

/* fsync / fdatasync: the file's current bytes and size become durable. */
static void file_sync(struct node *n)
{
    blob_put(n->dur);
    n->dur = blob_ref(n->cur);
    journal_clear(n);
    g.st_fsyncs++;
}

/* fsyncdir: the directory's current entries become durable. */
static int dir_sync(struct node *d)
{
    struct ents nd = {0};
    for (size_t i = 0; i < d->cur_e.n; i++) {
        int rc = ents_add(&nd, d->cur_e.v[i].name, d->cur_e.v[i].node);
        if (rc < 0) {
            ents_free(&nd);
            return rc;
        }
    }
    for (size_t i = 0; i < nd.n; i++) nd.v[i].node->dlinks++;
    dur_drop(&d->dur_e);         /* after the increments: entries in both stay alive */
    d->dur_e = nd;
    g.st_fsyncdirs++;
    return 0;
}

/* ---- control file --------------------------------------------------------------------------- */

static size_t unsynced_files(size_t *ops)
{
    size_t files = 0;
    *ops = 0;
    for (size_t i = 0; i < g.nbuckets; i++)
        for (struct node *n = g.buckets[i]; n; n = n->hnext)
            if (S_ISREG(n->mode) && (n->cur != n->dur || n->jn)) {
                files++;
                *ops += n->jn;
            }
    return files;
}

static void do_cut(void)
{
    g.frozen = true;
    size_t ops, files = unsynced_files(&ops);
    fprintf(stderr, "powercut_fs: cut (mode %s, seed %" PRIu64 "): %zu files with unsynced data "
                    "(%zu journalled operations); %" PRIu64 " writes, %" PRIu64 " fsyncs, %" PRIu64
                    " fsyncdirs before it\n",
            mode_names[g.mode], g.seed, files, ops, g.st_writes, g.st_fsyncs, g.st_fsyncdirs);
}

static int ctl_status(char *buf, size_t cap)
{
    size_t ops, files = unsynced_files(&ops);
    return snprintf(buf, cap,
                    "state %s\nmode %s\nseed %" PRIu64 "\ninodes %zu\nmemory %zu\nwrites %" PRIu64
                    "\nbytes %" PRIu64 "\nfsyncs %" PRIu64 "\nfsyncdirs %" PRIu64
                    "\nunsynced_files %zu\njournal_ops %zu\n",
                    g.frozen ? "cut" : "running", mode_names[g.mode], g.seed, g.count, g.mem,
                    g.st_writes, g.st_bytes, g.st_fsyncs, g.st_fsyncdirs, files, ops);
}

static void ctl_write(fuse_req_t req, const char *buf, size_t size)
{
    char cmd[PC_CMD_MAX + 1];
    size_t n = size < PC_CMD_MAX ? size : PC_CMD_MAX;
    memcpy(cmd, buf, n);
    while (n && (cmd[n - 1] == '\n' || cmd[n - 1] == ' ' || cmd[n - 1] == '\r')) n--;
    cmd[n] = '\0';
    if (size <= PC_CMD_MAX && strcmp(cmd, "cut") == 0) {
        do_cut();
        fuse_reply_write(req, size);
        return;
    }
    fprintf(stderr, "powercut_fs: unknown control command '%s' (%zu bytes); the command is 'cut'\n",
            cmd, size);
    fuse_reply_err(req, EINVAL);
}

/* ---- requests ------------------------------------------------------------------------------- */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    (void)userdata;
    /* Every write(2) must reach this process, in order: no kernel-side write cache. */
    conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    FROZEN_EIO(req);
    struct node *d = get_dir(req, parent);
    if (!d) return;
    if (strlen(name) > NAME_MAX) {
        fuse_reply_err(req, ENAMETOOLONG);
        return;
    }
    if (is_ctl_name(d, name)) {
        reply_entry(req, &g.ctl);
        return;
    }
    struct ent *e = ents_find(&d->cur_e, name);
    if (!e) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    reply_entry(req, e->node);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    struct node *n = node_find(ino);
    if (!n) {
        complain("forget of inode %" PRIu64 ", which does not exist", (uint64_t)ino);
    } else if (n == &g.ctl) {
        /* never freed: its count is not kept */
    } else if (n->lookups < nlookup) {
        complain("forget of %" PRIu64 " lookups of inode %" PRIu64 ", which has %" PRIu64, nlookup,
                 (uint64_t)ino, n->lookups);
        n->lookups = 0;
        node_maybe_free(n);
    } else {
        n->lookups -= nlookup;
        node_maybe_free(n);
    }
    fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    FROZEN_EIO(req);
    struct node *n = get(req, ino);
    if (n) reply_attr(req, n);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    (void)fi;
    FROZEN_EIO(req);
    struct node *n = get(req, ino);
    if (!n) return;
    if (to_set & FUSE_SET_ATTR_SIZE) {
        if (S_ISDIR(n->mode)) {
            fuse_reply_err(req, EISDIR);
            return;
        }
        if (attr->st_size < 0) {
            fuse_reply_err(req, EINVAL);
            return;
        }
        if (n != &g.ctl) {   /* `echo cut > .powercut` truncates first: nothing to do */
            int rc = file_truncate(n, (uint64_t)attr->st_size);
            if (rc < 0) {
                fuse_reply_err(req, -rc);
                return;
            }
        }
    }
    struct timespec t = now();
    if (to_set & FUSE_SET_ATTR_MODE) n->mode = (n->mode & S_IFMT) | (attr->st_mode & 07777);
    if (to_set & FUSE_SET_ATTR_UID) n->uid = attr->st_uid;
    if (to_set & FUSE_SET_ATTR_GID) n->gid = attr->st_gid;
    if (to_set & FUSE_SET_ATTR_ATIME) n->atime = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? t : attr->st_atim;
    if (to_set & FUSE_SET_ATTR_MTIME) n->mtime = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? t : attr->st_mtim;
    n->ctime = (to_set & FUSE_SET_ATTR_CTIME) ? attr->st_ctim : t;
    reply_attr(req, n);
}

/* A new regular file or directory named name in d; NULL after replying with the error. */
static struct node *make_node(fuse_req_t req, struct node *d, const char *name, mode_t mode)
{
    int err = check_new_name(d, name);
    if (err) {
        fuse_reply_err(req, err);
        return NULL;
    }
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    struct node *n = node_new(mode, ctx->uid, ctx->gid, &err);
    if (!n) {
        fuse_reply_err(req, err);
        return NULL;
    }
    int rc = ents_add(&d->cur_e, name, n);
    if (rc < 0) {
        node_maybe_free(n);
        fuse_reply_err(req, -rc);
        return NULL;
    }
    n->nlink = 1;
    if (S_ISDIR(mode)) n->parent = d;
    touch_dir(d);
    return n;
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
    (void)rdev;
    FROZEN_EIO(req);
    struct node *d = get_dir(req, parent);
    if (!d) return;
    if (!S_ISREG(mode)) {
        fuse_reply_err(req, EPERM);   /* only regular files and directories are modelled */
        return;
    }
    struct node *n = make_node(req, d, name, S_IFREG | (mode & 07777));
    if (n) reply_entry(req, n);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    FROZEN_EIO(req);
    struct node *d = get_dir(req, parent);
    if (!d) return;
    struct node *n = make_node(req, d, name, S_IFDIR | (mode & 07777));
    if (n) reply_entry(req, n);
}

/* open flags on an existing file: O_TRUNC. 0 or an errno. */
static int open_existing(struct node *n, int flags)
{
    if (S_ISDIR(n->mode)) return EISDIR;
    if ((flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY && n != &g.ctl) {
        int rc = file_truncate(n, 0);
        if (rc < 0) return -rc;
    }
    return 0;
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    FROZEN_EIO(req);
    struct node *d = get_dir(req, parent);
    if (!d) return;
    struct node *n;
    struct ent *e = strlen(name) <= NAME_MAX ? ents_find(&d->cur_e, name) : NULL;
    if (e || is_ctl_name(d, name)) {
        /* the kernel looked the name up first; it can exist here only after a race */
        if (fi->flags & O_EXCL) {
            fuse_reply_err(req, EEXIST);
            return;
        }
        n = e ? e->node : &g.ctl;
        int err = open_existing(n, fi->flags);
        if (err) {
            fuse_reply_err(req, err);
            return;
        }
    } else {
        n = make_node(req, d, name, S_IFREG | (mode & 07777));
        if (!n) return;
    }
    struct fuse_entry_param ep;
    memset(&ep, 0, sizeof ep);
    ep.ino = n->ino;
    ep.generation = 1;
    ep.attr_timeout = PC_CACHE_TIMEOUT_S;
    ep.entry_timeout = PC_CACHE_TIMEOUT_S;
    fill_stat(n, &ep.attr);
    fi->fh = 0;
    fi->direct_io = n == &g.ctl;
    fi->keep_cache = n != &g.ctl;
    fi->noflush = n != &g.ctl;
    if (fuse_reply_create(req, &ep, fi) == 0) {
        n->lookups++;
        n->opens++;
    } else {
        node_maybe_free(n);
    }
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    FROZEN_EIO(req);
    struct node *n = get(req, ino);
    if (!n) return;
    int err = open_existing(n, fi->flags);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    /* The control file: every read and write reaches us. Other files keep the kernel's cached
     * pages across opens: every change goes through this mount, which keeps them current. */
    fi->direct_io = n == &g.ctl;
    fi->keep_cache = n != &g.ctl;
    fi->noflush = n != &g.ctl;     /* flush does nothing here: save the round trip per close */
    if (fuse_reply_open(req, fi) == 0) n->opens++;
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)fi;
    FROZEN_EIO(req);
    struct node *n = get(req, ino);
    if (!n) return;
    if (S_ISDIR(n->mode)) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    if (n == &g.ctl) {
        char text[1024];
        int len = ctl_status(text, sizeof text);
        size_t l = len < 0 ? 0 : (size_t)len >= sizeof text ? sizeof text - 1 : (size_t)len;
        size_t o = off < 0 || (size_t)off > l ? l : (size_t)off;
        fuse_reply_buf(req, text + o, size < l - o ? size : l - o);
        return;
    }
    size_t len = blob_len(n->cur);
    if (off < 0 || (uint64_t)off >= len) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    size_t avail = len - (size_t)off;
    fuse_reply_buf(req, (const char *)n->cur->data + off, size < avail ? size : avail);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    (void)fi;
    FROZEN_EIO(req);
    struct node *n = get(req, ino);
    if (!n) return;
    if (n == &g.ctl) {
        ctl_write(req, buf, size);
        return;
    }
    if (!S_ISREG(n->mode)) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    if (off < 0) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    int rc = file_write(n, (uint64_t)off, buf, size);
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_write(req, size);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    (void)fi;
    FROZEN_EIO(req);
    fuse_reply_err(req, 0);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct node *n = node_find(ino);
    if (!n) {
        complain("release of inode %" PRIu64 ", which does not exist", (uint64_t)ino);
    } else if (n->opens == 0) {
        complain("release of inode %" PRIu64 ", which is not open", (uint64_t)ino);
    } else {
        n->opens--;
        node_maybe_free(n);
    }
    fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    (void)datasync;
    (void)fi;
    FROZEN_EIO(req);
    struct node *n = get(req, ino);
    if (!n) return;
    if (S_ISREG(n->mode) && n != &g.ctl) {
        /* DURABILITY (simulated): the file's bytes and size as of now survive a cut. */
        file_sync(n);
    } else if (S_ISDIR(n->mode)) {
        int rc = dir_sync(n);
        if (rc < 0) {
            fuse_reply_err(req, -rc);
            return;
        }
    }
    fuse_reply_err(req, 0);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    FROZEN_EIO(req);
    struct node *d = get_dir(req, parent);
    if (!d) return;
    if (is_ctl_name(d, name)) {
        fuse_reply_err(req, EPERM);
        return;
    }
    struct ent *e = ents_find(&d->cur_e, name);
    if (!e) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    struct node *n = e->node;
    if (S_ISDIR(n->mode)) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    ents_remove(&d->cur_e, e);
    n->nlink--;
    n->ctime = now();
    touch_dir(d);
    node_maybe_free(n);
    fuse_reply_err(req, 0);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    FROZEN_EIO(req);
    struct node *d = get_dir(req, parent);
    if (!d) return;
    struct ent *e = ents_find(&d->cur_e, name);
    if (!e) {
        fuse_reply_err(req, is_ctl_name(d, name) ? ENOTDIR : ENOENT);
        return;
    }
    struct node *n = e->node;
    if (!S_ISDIR(n->mode)) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    if (n->cur_e.n) {
        fuse_reply_err(req, ENOTEMPTY);
        return;
    }
    ents_remove(&d->cur_e, e);
    n->nlink = 0;
    n->parent = NULL;
    touch_dir(d);
    node_maybe_free(n);
    fuse_reply_err(req, 0);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
    FROZEN_EIO(req);
    if (flags & ~(unsigned)RENAME_NOREPLACE) {
        fuse_reply_err(req, EINVAL);   /* RENAME_EXCHANGE, RENAME_WHITEOUT: not modelled */
        return;
    }
    struct node *sd = get_dir(req, parent);
    if (!sd) return;
    struct node *td = get_dir(req, newparent);
    if (!td) return;
    if (is_ctl_name(sd, name) || is_ctl_name(td, newname)) {
        fuse_reply_err(req, EPERM);
        return;
    }
    if (strlen(newname) > NAME_MAX) {
        fuse_reply_err(req, ENAMETOOLONG);
        return;
    }
    struct ent *se = ents_find(&sd->cur_e, name);
    if (!se) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    struct node *src = se->node;
    struct ent *te = ents_find(&td->cur_e, newname);
    struct node *dst = te ? te->node : NULL;
    if (dst == src) {                 /* the same file: nothing happens */
        fuse_reply_err(req, 0);
        return;
    }
    int err = 0;
    if (dst && (flags & RENAME_NOREPLACE))
        err = EEXIST;
    else if (dst && S_ISDIR(src->mode) && !S_ISDIR(dst->mode))
        err = ENOTDIR;
    else if (dst && !S_ISDIR(src->mode) && S_ISDIR(dst->mode))
        err = EISDIR;
    else if (dst && S_ISDIR(dst->mode) && dst->cur_e.n)
        err = ENOTEMPTY;
    else if (td->nlink == 0)
        err = ENOENT;
    if (!err && S_ISDIR(src->mode)) {
        for (struct node *p = td; p; p = p == g.root ? NULL : p->parent)
            if (p == src) err = EINVAL;   /* into its own subtree */
    }
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    if (dst) {
        te->node = src;
        dst->nlink--;
        dst->ctime = now();
        if (S_ISDIR(dst->mode)) dst->parent = NULL;
    } else {
        int rc = ents_add(&td->cur_e, newname, src);
        if (rc < 0) {
            fuse_reply_err(req, -rc);
            return;
        }
    }
    ents_remove(&sd->cur_e, ents_find(&sd->cur_e, name));   /* the add may have moved it */
    if (S_ISDIR(src->mode)) src->parent = td;
    src->ctime = now();
    touch_dir(sd);
    touch_dir(td);
    if (dst) node_maybe_free(dst);
    fuse_reply_err(req, 0);
}

static void snap_free(struct snap *s)
{
    if (!s) return;
    if (s->prev)
        s->prev->next = s->next;
    else if (g.snaps == s)
        g.snaps = s->next;
    if (s->next) s->next->prev = s->prev;
    for (size_t k = 0; k < s->n; k++) free(s->v[k].name);
    free(s);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    FROZEN_EIO(req);
    struct node *d = get_dir(req, ino);
    if (!d) return;
    /* A snapshot, so entries removed while a reader iterates (rm -r) shift nothing. */
    size_t n = d->cur_e.n + 2;
    struct snap *s = calloc(1, sizeof *s + n * sizeof s->v[0]);
    if (!s) {
        complain("out of memory (readdir snapshot of %zu entries)", n);
        fuse_reply_err(req, ENOMEM);
        return;
    }
    s->v[0] = (struct snap_ent){d->ino, S_IFDIR, strdup(".")};
    s->v[1] = (struct snap_ent){d->parent ? d->parent->ino : d->ino, S_IFDIR, strdup("..")};
    for (size_t i = 0; i < d->cur_e.n; i++)
        s->v[i + 2] = (struct snap_ent){d->cur_e.v[i].node->ino, d->cur_e.v[i].node->mode & S_IFMT,
                                        strdup(d->cur_e.v[i].name)};
    s->n = n;
    s->next = g.snaps;
    if (g.snaps) g.snaps->prev = s;
    g.snaps = s;
    for (size_t i = 0; i < n; i++) {
        if (!s->v[i].name) {
            snap_free(s);
            complain("out of memory (readdir snapshot)");
            fuse_reply_err(req, ENOMEM);
            return;
        }
    }
    fi->fh = (uint64_t)(uintptr_t)s;
    if (fuse_reply_open(req, fi) != 0) snap_free(s);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)ino;
    FROZEN_EIO(req);
    struct snap *s = (struct snap *)(uintptr_t)fi->fh;
    char *buf = malloc(size ? size : 1);
    if (!buf) {
        complain("out of memory (readdir buffer of %zu bytes)", size);
        fuse_reply_err(req, ENOMEM);
        return;
    }
    size_t used = 0;
    for (size_t i = off < 0 ? 0 : (size_t)off; i < s->n; i++) {
        struct stat st;
        memset(&st, 0, sizeof st);
        st.st_ino = s->v[i].ino;
        st.st_mode = s->v[i].type;
        size_t need = fuse_add_direntry(req, buf + used, size - used, s->v[i].name, &st, (off_t)(i + 1));
        if (need > size - used) break;
        used += need;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    snap_free((struct snap *)(uintptr_t)fi->fh);
    fuse_reply_err(req, 0);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    (void)datasync;
    (void)fi;
    FROZEN_EIO(req);
    struct node *d = get_dir(req, ino);
    if (!d) return;
    /* DURABILITY (simulated): this directory's entries as of now survive a cut. */
    int rc = dir_sync(d);
    fuse_reply_err(req, rc < 0 ? -rc : 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)ino;
    FROZEN_EIO(req);
    struct statvfs s;
    memset(&s, 0, sizeof s);
    s.f_bsize = s.f_frsize = 4096;
    s.f_blocks = g.max_mem / 4096;
    s.f_bfree = s.f_bavail = (g.max_mem - (g.mem < g.max_mem ? g.mem : g.max_mem)) / 4096;
    s.f_files = PC_MAX_INODES;
    s.f_ffree = s.f_favail = PC_MAX_INODES - g.count;
    s.f_namemax = NAME_MAX;
    fuse_reply_statfs(req, &s);
}

static const struct fuse_lowlevel_ops ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .rename = op_rename,
    .open = op_open,
    .read = op_read,
    .write = op_write,
    .flush = op_flush,
    .release = op_release,
    .fsync = op_fsync,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .releasedir = op_releasedir,
    .fsyncdir = op_fsyncdir,
    .statfs = op_statfs,
    .create = op_create,
};

/* ---- the image ------------------------------------------------------------------------------ */

/* The content a file has after the cut: durable, plus in modes prefix/tear a random prefix of
 * its journal, the next write torn in mode tear. Computed once per inode (it may be named twice). */
static struct blob *crash_content(struct node *n)
{
    if (g.mode == MODE_DROP || n->jn == 0) return n->dur;
    if (n->crash_done) return n->crash;
    n->crash_done = true;
    n->crash = blob_ref(n->dur);
    size_t keep = (size_t)(rnd() % (n->jn + 1)), i = 0;
    struct jop *j = n->jhead;
    int rc = 0;
    for (; j && i < keep && rc == 0; j = j->next, i++)
        rc = j->trunc ? blob_truncate(&n->crash, j->off) : blob_write(&n->crash, j->off, j->data, j->len);
    g.im_kept_ops += keep;
    g.im_unsynced_ops += n->jn;
    if (rc == 0 && g.mode == MODE_TEAR && j && !j->trunc && j->len > 1) {
        size_t cut = (size_t)(rnd() % j->len);
        if (rnd() & 1) cut &= ~(size_t)511;
        if (cut) rc = blob_write(&n->crash, j->off, j->data, cut);
        g.im_torn++;
    }
    if (rc < 0) complain("inode %" PRIu64 ": applying its journal: %s", (uint64_t)n->ino, strerror(-rc));
    return n->crash;
}

static int write_all(int fd, const unsigned char *p, size_t len)
{
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Writes the entries of d (durable or current) under dfd (path: for messages). 0 or -1. */
static int image_dir(struct node *d, int dfd, const char *path, bool durable, int depth)
{
    struct ents *es = durable ? &d->dur_e : &d->cur_e;
    int rc = 0;
    d->on_path = true;
    for (size_t i = 0; i < es->n && rc == 0; i++) {
        struct node *c = es->v[i].node;
        const char *name = es->v[i].name;
        if (S_ISDIR(c->mode)) {
            if (c->on_path || depth >= PC_MAX_DEPTH) {
                fprintf(stderr, "powercut_fs: image: %s/%s leads back into itself (unsynced renames "
                                "of directories); not written\n", path, name);
                g.im_cycles++;
                continue;
            }
            char sub[PATH_MAX];
            snprintf(sub, sizeof sub, "%s/%s", path, name);
            int cfd = -1;
            if (mkdirat(dfd, name, c->mode & 07777) < 0 ||
                (cfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
                complain("image: mkdir %s: %s", sub, strerror(errno));
                rc = -1;
                break;
            }
            rc = image_dir(c, cfd, sub, durable, depth + 1);
            close(cfd);
            g.im_dirs++;
        } else {
            struct blob *b = durable ? crash_content(c) : c->cur;
            int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, c->mode & 07777);
            if (fd < 0 || write_all(fd, b ? b->data : NULL, blob_len(b)) < 0) {
                complain("image: write %s/%s: %s", path, name, strerror(errno));
                rc = -1;
            }
            if (fd >= 0 && close(fd) < 0 && rc == 0) {
                complain("image: close %s/%s: %s", path, name, strerror(errno));
                rc = -1;
            }
            g.im_files++;
        }
    }
    d->on_path = false;
    return rc;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if ((flag == FTW_DP ? rmdir(path) : unlink(path)) < 0) {
        complain("remove %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* The image replaces backing: built in a sibling directory, swapped in, the old one removed.
 * No fsync: the simulated disk is this directory; the machine's own crashes are not modelled. */
static int image_write(const char *backing)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.powercut-new.%ld", backing, (long)getpid()) >= (int)sizeof tmp) {
        complain("image: %s: path too long", backing);
        return -1;
    }
    bool durable = g.frozen;
    g.unbounded = true;
    int dfd = -1;
    if (mkdir(tmp, g.root->mode & 07777) < 0 || (dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        complain("image: mkdir %s: %s", tmp, strerror(errno));
        return -1;
    }
    int rc = image_dir(g.root, dfd, tmp, durable, 0);
    close(dfd);
    if (rc == 0 && renameat2(AT_FDCWD, tmp, AT_FDCWD, backing, RENAME_EXCHANGE) < 0) {
        complain("image: exchange %s with %s: %s", tmp, backing, strerror(errno));
        rc = -1;
    }
    if (rc == 0 && nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0) rc = -1;
    fprintf(stderr, "powercut_fs: image of the %s state: %" PRIu64 " files, %" PRIu64 " directories"
                    "; %" PRIu64 " of %" PRIu64 " unsynced journalled operations kept, %" PRIu64
                    " torn, %" PRIu64 " cycles cut -> %s%s\n",
            durable ? "durable (post-cut)" : "current", g.im_files, g.im_dirs, g.im_kept_ops,
            g.im_unsynced_ops, g.im_torn, g.im_cycles, backing, rc == 0 ? "" : " FAILED");
    return rc;
}

/* ---- loading -------------------------------------------------------------------------------- */

static int load_dir(struct node *d, int dfd, const char *path, int depth)
{
    int fd = dup(dfd);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dir) {
        if (fd >= 0) close(fd);
        complain("load: opendir %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (struct dirent *de; rc == 0 && (errno = 0, de = readdir(dir));) {
        const char *name = de->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
        char sub[PATH_MAX];
        snprintf(sub, sizeof sub, "%s/%s", path, name);
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            complain("load: stat %s: %s", sub, strerror(errno));
            rc = -1;
            break;
        }
        if (is_ctl_name(d, name) || (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) ||
            (S_ISDIR(st.st_mode) && depth >= PC_MAX_DEPTH)) {
            complain("load: %s: only regular files and directories (not named %s at the top, at "
                     "most %d deep) can be loaded", sub, PC_CTL_NAME, PC_MAX_DEPTH);
            rc = -1;
            break;
        }
        int err;
        struct node *n = node_new(st.st_mode, st.st_uid, st.st_gid, &err);
        if (!n || ents_add(&d->cur_e, name, n) < 0) {
            complain("load: %s: %s (raise --max-mb?)", sub, strerror(n ? ENOSPC : err));
            rc = -1;
            break;
        }
        n->nlink = 1;
        n->atime = st.st_atim;
        n->mtime = st.st_mtim;
        n->ctime = st.st_ctim;
        int cfd = openat(dfd, name, (S_ISDIR(st.st_mode) ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
        if (cfd < 0) {
            complain("load: open %s: %s", sub, strerror(errno));
            rc = -1;
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            n->parent = d;
            rc = load_dir(n, cfd, sub, depth + 1);
        } else if (st.st_size > 0) {
            rc = blob_room(&n->cur, (size_t)st.st_size);
            size_t got = 0;
            while (rc == 0 && got < (size_t)st.st_size) {
                ssize_t r = read(cfd, n->cur->data + got, (size_t)st.st_size - got);
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) rc = r < 0 ? -errno : -EIO;
                else got += (size_t)r;
            }
            if (rc < 0) complain("load: read %s: %s", sub, strerror(-rc));
            if (n->cur) n->cur->len = got;
            n->dur = blob_ref(n->cur);
        }
        close(cfd);
    }
    if (rc == 0 && errno) {
        complain("load: readdir %s: %s", path, strerror(errno));
        rc = -1;
    }
    closedir(dir);
    if (rc == 0) rc = dir_sync(d) < 0 ? -1 : 0;   /* what was there is durable */
    g.st_fsyncdirs = 0;
    return rc;
}

/* ---- main ----------------------------------------------------------------------------------- */

static void free_all(void)
{
    g.frozen = false;   /* let node_maybe_free work */
    for (size_t i = 0; i < g.nbuckets; i++) {
        for (struct node *n = g.buckets[i], *next; n; n = next) {
            next = n->hnext;
            blob_put(n->cur);
            blob_put(n->dur);
            blob_put(n->crash);
            journal_clear(n);
            ents_free(&n->cur_e);
            ents_free(&n->dur_e);
            free(n);
        }
    }
    free(g.buckets);
    while (g.snaps) snap_free(g.snaps);
    ents_free(&g.root->cur_e);
    ents_free(&g.root->dur_e);
    free(g.root);
}

static int usage(void)
{
    fprintf(stderr, "usage: powercut_fs [--mode drop|prefix|tear] [--seed N] [--max-mb N] [--debug] "
                    "BACKING MOUNTPOINT\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *backing_arg = NULL, *mnt = NULL;
    bool debug = false;
    unsigned long long max_mb = PC_DEFAULT_MAX_MB;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            const char *m = argv[++i];
            if (!strcmp(m, "drop")) g.mode = MODE_DROP;
            else if (!strcmp(m, "prefix")) g.mode = MODE_PREFIX;
            else if (!strcmp(m, "tear")) g.mode = MODE_TEAR;
            else {
                fprintf(stderr, "powercut_fs: --mode %s: the modes are drop, prefix, tear\n", m);
                return usage();
            }
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            errno = 0;
            g.seed = strtoull(argv[++i], &end, 10);
            if (errno || *end || end == argv[i]) {
                fprintf(stderr, "powercut_fs: --seed %s: not a number\n", argv[i]);
                return usage();
            }
        } else if (!strcmp(argv[i], "--max-mb") && i + 1 < argc) {
            errno = 0;
            max_mb = strtoull(argv[++i], &end, 10);
            if (errno || *end || max_mb == 0 || max_mb > (SIZE_MAX >> 21)) {
                fprintf(stderr, "powercut_fs: --max-mb %s: not a size in MiB\n", argv[i]);
                return usage();
            }
        } else if (!strcmp(argv[i], "--debug")) {
            debug = true;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "powercut_fs: unknown option %s\n", argv[i]);
            return usage();
        } else if (!backing_arg) {
            backing_arg = argv[i];
        } else if (!mnt) {
            mnt = argv[i];
        } else {
            return usage();
        }
    }
    if (!backing_arg || !mnt) return usage();
    char backing[PATH_MAX];
    if (!realpath(backing_arg, backing)) {
        fprintf(stderr, "powercut_fs: backing dir %s: %s\n", backing_arg, strerror(errno));
        return 1;
    }
    g.max_mem = (size_t)max_mb << 20;
    g.rng = g.seed;
    g.next_ino = PC_CTL_INO + 1;
    g.nbuckets = 1024;
    g.buckets = calloc(g.nbuckets, sizeof *g.buckets);
    g.root = calloc(1, sizeof *g.root);
    if (!g.buckets || !g.root) {
        fprintf(stderr, "powercut_fs: out of memory\n");
        return 1;
    }
    struct stat bst;
    if (stat(backing, &bst) < 0 || !S_ISDIR(bst.st_mode)) {
        fprintf(stderr, "powercut_fs: backing dir %s: not a directory\n", backing);
        return 1;
    }
    *g.root = (struct node){.ino = FUSE_ROOT_ID, .mode = bst.st_mode, .uid = bst.st_uid,
                            .gid = bst.st_gid, .nlink = 1, .lookups = 1, .atime = bst.st_atim,
                            .mtime = bst.st_mtim, .ctime = bst.st_ctim};
    g.root->parent = g.root;
    g.ctl = (struct node){.ino = PC_CTL_INO, .mode = S_IFREG | 0600, .nlink = 1};
    g.ctl.atime = g.ctl.mtime = g.ctl.ctime = now();
    int bfd = open(backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (bfd < 0 || load_dir(g.root, bfd, backing, 0) < 0) {
        if (bfd < 0) fprintf(stderr, "powercut_fs: open %s: %s\n", backing, strerror(errno));
        free_all();
        return 1;
    }
    close(bfd);

    char *fargv[] = {argv[0], "-o", "fsname=powercut,subtype=powercut", debug ? "-d" : NULL, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(debug ? 4 : 3, fargv);
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, NULL);
    if (!se) {
        fprintf(stderr, "powercut_fs: fuse_session_new failed\n");
        free_all();
        return 1;
    }
    if (fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, mnt) != 0) {
        fprintf(stderr, "powercut_fs: cannot mount on %s (is /dev/fuse there, and are we root?)\n", mnt);
        fuse_remove_signal_handlers(se);
        fuse_session_destroy(se);
        free_all();
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    int rc = fuse_session_loop(se);
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    fuse_opt_free_args(&args);
    if (rc < 0) complain("the FUSE session failed: %s", strerror(-rc));
    if (image_write(backing) < 0) g.errors++;
    free_all();
    if (g.errors) fprintf(stderr, "powercut_fs: %u unexpected events (see above): exit 1\n", g.errors);
    return g.errors ? 1 : 0;
}
