/*
 * dstl/read/cache.c — the reader cache and the pool of readers' S3 clients (see cache.h).
 *
 * Why on disk: a recovery may fetch gigabytes, and dstl.cache.max-size (1gb by default) is
 * disk, not heap; the files are written without fsync (the cache is not durable: a crash
 * loses it, and the next run sweeps it away), so an insert costs a copy into the page cache.
 *
 * Structure: entries (one per remote object) in a hash map by URI hash with collision chains,
 * and on one LRU list (most recent first). Each entry has a sorted array of disjoint extents
 * [off, end) — what its sparse file holds — and a reference count. `bytes` is the sum of
 * every entry's extents.
 *
 * Threads: one mutex `mu` guards the map, the list, every entry's refs/extents/bytes and the
 * client pool. File I/O (open, pread, pwrite, unlink) runs outside it: a reader holds a
 * reference on the entry it reads or writes, and an entry is removed (its file unlinked) only
 * with no reference, after it left the map — so no I/O ever races with the removal of its file.
 * Two readers inserting the same range write identical (verified) bytes; the extent is
 * published only after the write returned.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dstl/read/cache.h"
#include "dstl/err.h"
#include "dstl/storage.h"
#include "dstl/remote/remote.h"

/* Idle clients kept for the next readers: recovery opens readers a few at a time per task,
 * and a kept client saves its connections' TCP (and TLS) handshakes. Four covers a few
 * concurrent readers opening one after another without holding many idle sockets. */
#define CLIENT_POOL_MAX 4

typedef struct {
    uint64_t off, end;
} extent;

struct cache_entry {
    cache_entry *hnext;         /* same hash */
    cache_entry *prev, *next;   /* LRU list, most recent first */
    char *uri;
    uint64_t hash;
    uint64_t no;                /* file name */
    int refs;
    int has_file;
    uint64_t last_used_ms;
    extent *ext;
    size_t n_ext, cap_ext;
    uint64_t bytes;
};

struct read_cache {
    pthread_mutex_t mu;
    char *dir;                  /* the cache directory */
    char *run_dir;              /* dir/run_id */
    char *lock_path;            /* dir/run_id.lock */
    char *run_id;
    uint64_t max_bytes, idle_ms;
    int dir_state;              /* 0 not made yet, 1 ready, -1 failed (nothing is cached) */
    int lock_fd;
    u64map map;                 /* uri hash -> chain */
    cache_entry *lru_head, *lru_tail;
    uint64_t bytes, next_no;
    uint64_t reserved;          /* restore plans' bytes in memory (cache_reserve) */
    size_t nentries;
    s3_client *pool[CLIENT_POOL_MAX];
    size_t npool;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t uri_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static char *join(const char *a, const char *b, const char *suffix)
{
    size_t n = strlen(a) + strlen(b) + strlen(suffix) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s%s", a, b, suffix);
    return p;
}

int cache_new(const cache_opts *o, read_cache **out)
{
    read_cache *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->dir = strdup(o->dir);
    c->run_id = strdup(o->run_id);
    c->run_dir = join(o->dir, o->run_id, "");
    c->lock_path = join(o->dir, o->run_id, ".lock");
    if (!c->dir || !c->run_id || !c->run_dir || !c->lock_path) {
        free(c->dir);
        free(c->run_id);
        free(c->run_dir);
        free(c->lock_path);
        free(c);
        return -ENOMEM;
    }
    c->max_bytes = o->max_size_bytes;
    c->idle_ms = o->idle_timeout_ms;
    c->lock_fd = -1;
    pthread_mutex_init(&c->mu, NULL);
    u64map_init(&c->map);
    *out = c;
    return 0;
}

/* ---- files ---- */

static void entry_path(const read_cache *c, uint64_t no, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%llu", c->run_dir, (unsigned long long)no);
}

static int all_digits(const char *s)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

/* Removes the cache files (decimal names) in dir, then dir if that left it empty. */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)))
            if (all_digits(de->d_name)) unlinkat(dirfd(d), de->d_name, 0);
        closedir(d);
    }
    rmdir(dir);
}

/* Whether name is "<run id>" or "<run id>.lock" of some storage run (16 hex digits): the
 * sweep touches nothing else, whatever else shares the directory. */
static int run_name(const char *name, size_t *stem)
{
    size_t n = strspn(name, "0123456789abcdef");
    *stem = n;
    return n == 16 && (name[n] == '\0' || strcmp(name + n, ".lock") == 0);
}

static int mkdir_p(const char *path)
{
    char tmp[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp) return -ENAMETOOLONG;
    memcpy(tmp, path, n + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) < 0 && errno != EEXIST) return -errno;
        *p = '/';
    }
    return mkdir(tmp, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

/* Removes the run directories of dead runs: a run holds an flock on dir/<run>.lock while its
 * storage is open (made before its directory, so a directory without a lock file is dead). */
static void sweep_dead_runs(read_cache *c)
{
    DIR *d = opendir(c->dir);
    if (!d) return;
    struct dirent *de;
    char path[4096];
    while ((de = readdir(d))) {
        size_t n;
        if (!run_name(de->d_name, &n) || strncmp(de->d_name, c->run_id, n) == 0) continue;
        snprintf(path, sizeof path, "%s/%.*s.lock", c->dir, (int)n, de->d_name);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0 && errno != ENOENT) continue;
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0) {      /* alive */
            close(fd);
            continue;
        }
        snprintf(path, sizeof path, "%s/%.*s", c->dir, (int)n, de->d_name);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) remove_dir(path);
        if (fd >= 0) {
            snprintf(path, sizeof path, "%s/%.*s.lock", c->dir, (int)n, de->d_name);
            unlink(path);
            close(fd);
        }
    }
    closedir(d);
}

/* Makes the run directory, once: the lock first (held for the cache's life; re-made if a
 * sweeper of another process removed it between our open and flock), then the directory,
 * then the sweep of dead runs. Under c->mu: the first insert of a run waits for it. */
static int ensure_dir(read_cache *c)
{
    if (c->dir_state) return c->dir_state;
    c->dir_state = -1;
    if (mkdir_p(c->dir) < 0) return -1;
    for (int tries = 0; tries < 3 && c->lock_fd < 0; tries++) {
        int fd = open(c->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0) return -1;
        struct stat a, b;
        if (flock(fd, LOCK_EX) == 0 && fstat(fd, &a) == 0 && stat(c->lock_path, &b) == 0 && a.st_ino == b.st_ino &&
            a.st_dev == b.st_dev)
            c->lock_fd = fd;
        else
            close(fd);
    }
    if (c->lock_fd < 0 || mkdir(c->run_dir, 0700) < 0) return -1;
    sweep_dead_runs(c);
    return c->dir_state = 1;
}

/* ---- entries (under mu) ---- */

static void lru_unlink(read_cache *c, cache_entry *e)
{
    if (e->prev) e->prev->next = e->next;
    else c->lru_head = e->next;
    if (e->next) e->next->prev = e->prev;
    else c->lru_tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push_front(read_cache *c, cache_entry *e)
{
    e->next = c->lru_head;
    if (c->lru_head) c->lru_head->prev = e;
    c->lru_head = e;
    if (!c->lru_tail) c->lru_tail = e;
}

/* Takes e out of the map and the list; the caller frees it (and its file) after unlocking. */
static void detach(read_cache *c, cache_entry *e)
{
    cache_entry *head = u64map_get(&c->map, e->hash);
    if (head == e) {
        if (e->hnext) u64map_put(&c->map, e->hash, e->hnext);   /* replaces: cannot fail */
        else u64map_del(&c->map, e->hash);
    } else {
        while (head && head->hnext != e) head = head->hnext;
        if (head) head->hnext = e->hnext;
    }
    lru_unlink(c, e);
    c->bytes -= e->bytes;
    c->nentries--;
}

static void entry_free(read_cache *c, cache_entry *e)
{
    if (e->has_file) {
        char path[4096];
        entry_path(c, e->no, path, sizeof path);
        unlink(path);
    }
    free(e->ext);
    free(e->uri);
    free(e);
}

/* Detaches onto *gone the unreferenced entries that hold nothing, are idle longer than the
 * idle timeout, or (least recently used first) are beyond max-size. The list is in order of
 * last use, so the walk from the tail stops at the first unreferenced entry that may stay. */
static void evict(read_cache *c, cache_entry **gone)
{
    uint64_t now = now_ms();
    for (cache_entry *e = c->lru_tail, *prev; e; e = prev) {
        prev = e->prev;
        if (e->refs) continue;
        if (e->bytes && now - e->last_used_ms < c->idle_ms && c->bytes + c->reserved <= c->max_bytes) break;
        detach(c, e);
        e->hnext = *gone;
        *gone = e;
    }
}

static void free_list(read_cache *c, cache_entry *gone)
{
    while (gone) {
        cache_entry *n = gone->hnext;
        entry_free(c, gone);
        gone = n;
    }
}

/* A new entry for uri at the head of its hash chain, or NULL (out of memory). */
static cache_entry *entry_new(read_cache *c, const char *uri, uint64_t h)
{
    cache_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->uri = strdup(uri))) {
        free(e);
        return NULL;
    }
    e->hash = h;
    e->hnext = u64map_get(&c->map, h);
    if (u64map_put(&c->map, h, e) < 0) {
        free(e->uri);
        free(e);
        return NULL;
    }
    e->no = c->next_no++;
    c->nentries++;
    return e;
}

cache_entry *cache_acquire(read_cache *c, const char *uri)
{
    if (!c || c->max_bytes == 0) return NULL;
    uint64_t h = uri_hash(uri);
    cache_entry *gone = NULL, *e;
    pthread_mutex_lock(&c->mu);
    evict(c, &gone);            /* first: an expired entry must not come back to life */
    for (e = u64map_get(&c->map, h); e && strcmp(e->uri, uri) != 0; e = e->hnext) {}
    if (e) lru_unlink(c, e);
    else e = entry_new(c, uri, h);
    if (e) {
        lru_push_front(c, e);
        e->refs++;
    }
    pthread_mutex_unlock(&c->mu);
    free_list(c, gone);
    return e;
}

void cache_release(read_cache *c, cache_entry *e)
{
    if (!c || !e) return;
    cache_entry *gone = NULL;
    pthread_mutex_lock(&c->mu);
    e->refs--;
    e->last_used_ms = now_ms();
    lru_unlink(c, e);
    lru_push_front(c, e);
    evict(c, &gone);
    pthread_mutex_unlock(&c->mu);
    free_list(c, gone);
}

void cache_expire(read_cache *c)
{
    if (!c) return;
    cache_entry *gone = NULL;
    pthread_mutex_lock(&c->mu);
    evict(c, &gone);
    pthread_mutex_unlock(&c->mu);
    free_list(c, gone);
}

/* Whether one extent of e covers [off, end). Under mu. */
static int covered(const cache_entry *e, uint64_t off, uint64_t end)
{
    for (size_t i = 0; i < e->n_ext && e->ext[i].off <= off; i++)
        if (e->ext[i].end >= end) return 1;
    return 0;
}

/* Adds [off, end) to e's sorted disjoint extents, merging what it overlaps or touches.
 * Returns the bytes added, or -ENOMEM. Under mu. */
static int64_t extent_add(cache_entry *e, uint64_t off, uint64_t end)
{
    size_t i = 0, j;
    while (i < e->n_ext && e->ext[i].end < off) i++;
    uint64_t before = 0;
    for (j = i; j < e->n_ext && e->ext[j].off <= end; j++) {
        before += e->ext[j].end - e->ext[j].off;
        if (e->ext[j].off < off) off = e->ext[j].off;
        if (e->ext[j].end > end) end = e->ext[j].end;
    }
    if (i == j) {
        if (e->n_ext == e->cap_ext) {
            size_t cap = e->cap_ext ? 2 * e->cap_ext : 4;
            extent *x = realloc(e->ext, cap * sizeof *x);
            if (!x) return -ENOMEM;
            e->ext = x;
            e->cap_ext = cap;
        }
        memmove(e->ext + i + 1, e->ext + i, (e->n_ext - i) * sizeof *e->ext);
        e->n_ext++;
    } else {
        memmove(e->ext + i + 1, e->ext + j, (e->n_ext - j) * sizeof *e->ext);
        e->n_ext -= j - i - 1;
    }
    e->ext[i] = (extent){off, end};
    return (int64_t)(end - off - before);
}

static int file_io(const char *path, int write, uint64_t off, size_t len, void *buf)
{
    int fd = open(path, write ? O_WRONLY | O_CREAT | O_CLOEXEC : O_RDONLY | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    size_t done = 0;
    while (done < len) {
        ssize_t n = write ? pwrite(fd, (const uint8_t *)buf + done, len - done, (off_t)(off + done))
                          : pread(fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += (size_t)n;
    }
    close(fd);
    return done == len ? 0 : -EIO;
}

int cache_read(read_cache *c, cache_entry *e, uint64_t off, size_t len, void *dst)
{
    if (!c || !e || len == 0) return 0;
    pthread_mutex_lock(&c->mu);
    int hit = e->has_file && covered(e, off, off + len);
    pthread_mutex_unlock(&c->mu);
    if (!hit) return 0;
    char path[4096];
    entry_path(c, e->no, path, sizeof path);
    return file_io(path, 0, off, len, dst) == 0;
}

void cache_insert(read_cache *c, cache_entry *e, uint64_t off, size_t len, const void *src)
{
    if (!c || !e || len == 0 || len > c->max_bytes) return;
    pthread_mutex_lock(&c->mu);
    int skip = ensure_dir(c) < 0 || covered(e, off, off + len);
    if (!skip) e->has_file = 1;     /* from now on its removal unlinks the file */
    pthread_mutex_unlock(&c->mu);
    if (skip) return;
    char path[4096];
    entry_path(c, e->no, path, sizeof path);
    if (file_io(path, 1, off, len, (void *)src) < 0) return;
    cache_entry *gone = NULL;
    pthread_mutex_lock(&c->mu);
    int64_t added = extent_add(e, off, off + len);
    if (added > 0) {
        e->bytes += (uint64_t)added;
        c->bytes += (uint64_t)added;
    }
    evict(c, &gone);
    pthread_mutex_unlock(&c->mu);
    free_list(c, gone);
}

int cache_reserve(read_cache *c, uint64_t bytes)
{
    if (!c) return 1;
    cache_entry *gone = NULL;
    pthread_mutex_lock(&c->mu);
    c->reserved += bytes;
    evict(c, &gone);
    int ok = c->bytes + c->reserved <= c->max_bytes;
    if (!ok) c->reserved -= bytes;
    pthread_mutex_unlock(&c->mu);
    free_list(c, gone);
    return ok;
}

void cache_unreserve(read_cache *c, uint64_t bytes)
{
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->reserved -= bytes;
    pthread_mutex_unlock(&c->mu);
}

void cache_sweep(read_cache *c)
{
    if (c) sweep_dead_runs(c);
}

void cache_invalidate(read_cache *c, cache_entry *e)
{
    if (!c || !e) return;
    pthread_mutex_lock(&c->mu);
    c->bytes -= e->bytes;
    e->bytes = 0;
    e->n_ext = 0;
    pthread_mutex_unlock(&c->mu);
}

uint64_t cache_bytes(read_cache *c)
{
    if (!c) return 0;
    pthread_mutex_lock(&c->mu);
    uint64_t b = c->bytes;
    pthread_mutex_unlock(&c->mu);
    return b;
}

size_t cache_entries(read_cache *c)
{
    if (!c) return 0;
    pthread_mutex_lock(&c->mu);
    size_t n = c->nentries;
    pthread_mutex_unlock(&c->mu);
    return n;
}

void cache_free(read_cache *c)
{
    if (!c) return;
    while (c->lru_head) {
        cache_entry *e = c->lru_head;
        lru_unlink(c, e);
        entry_free(c, e);
    }
    for (size_t i = 0; i < c->npool; i++) s3_client_free(c->pool[i]);
    if (c->dir_state == 1) remove_dir(c->run_dir);
    if (c->lock_fd >= 0) {
        unlink(c->lock_path);
        close(c->lock_fd);
    }
    u64map_destroy(&c->map);
    pthread_mutex_destroy(&c->mu);
    free(c->dir);
    free(c->run_id);
    free(c->run_dir);
    free(c->lock_path);
    free(c);
}

/* ---- the storage's cache ---- */

int cache_open(dstl_storage *s)
{
    if (s->locked.cache) return 0;
    char dflt[4096];
    const char *dir = s->conf.cache_dir;
    if (!*dir) {
        snprintf(dflt, sizeof dflt, "%s/cache", s->local_dir);
        dir = dflt;
    }
    cache_opts o = {.dir = dir, .run_id = s->run_id, .max_size_bytes = s->conf.cache_max_size_bytes,
                     .idle_timeout_ms = s->conf.cache_idle_timeout_ms};
    int rc = cache_new(&o, &s->locked.cache);
    if (rc < 0) return err_fail(rc, "reader cache %s: out of memory", dir);
    cache_sweep(s->locked.cache);
    return 0;
}

void cache_close(dstl_storage *s)
{
    cache_free(s->locked.cache);
    s->locked.cache = NULL;
}

read_cache *cache_get(dstl_storage *s)
{
    pthread_mutex_lock(&s->mu);
    if (!s->locked.cache) cache_open(s);
    read_cache *c = s->locked.cache;
    pthread_mutex_unlock(&s->mu);
    return c;
}

/* ---- clients ---- */

int cache_client_take(dstl_storage *s, s3_client **out)
{
    read_cache *c = cache_get(s);
    s3_client *cli = NULL;
    if (c) {
        pthread_mutex_lock(&c->mu);
        if (c->npool) cli = c->pool[--c->npool];
        pthread_mutex_unlock(&c->mu);
    }
    if (cli) {
        *out = cli;
        return 0;
    }
    return remote_client_new(&s->conf, out);
}

void cache_client_give(dstl_storage *s, s3_client *cli)
{
    if (!cli) return;
    read_cache *c = cache_get(s);
    if (c && s3_client_pending(cli) == 0) {
        pthread_mutex_lock(&c->mu);
        int kept = c->npool < CLIENT_POOL_MAX;
        if (kept) c->pool[c->npool++] = cli;
        pthread_mutex_unlock(&c->mu);
        if (kept) return;
    }
    s3_client_free(cli);
}
