/*
 * dstl/read/cache.h — the reader cache: byte ranges of remote segment objects kept on local disk so
 * that readers needing the same bytes fetch them once; and a small pool of idle S3 clients so
 * that readers opened one after another reuse connections.
 *
 * Granularity: byte ranges of one object (the footer+trailer tail, a section's key-group runs,
 * a whole compressed section) — exactly what a reader fetched, so a reader of a few key groups
 * caches only those. An object's ranges live in one sparse file at their object offsets; a
 * lookup hits when one cached extent covers the asked range (ranges merge as they arrive, so a
 * reader of all key groups serves later readers of any subset).
 *
 * Files: <dstl.cache.dir>/<run id>/<entry no>, one per cached object, plus <run id>.lock
 * (flock'ed while the storage is open). Each storage run caches only its own fetches; every
 * storage open removes the directories of runs whose lock nobody holds (crashed or killed
 * processes: cache_sweep), so nothing piles up. Only bytes that passed their CRC check are inserted, and a
 * reader checks cached bytes again as it reads them (every byte, every time).
 *
 * Eviction: an entry is referenced by each reader job using it (cache_acquire .. release) and
 * is never removed while referenced. Unreferenced entries go when idle longer than
 * dstl.cache.idle-timeout, and least recently used first when the cached bytes exceed
 * dstl.cache.max-size (only referenced entries may hold more). max-size 0 disables caching.
 *
 * Threads: everything here is thread-safe (one mutex per cache; file reads and writes happen
 * outside it, under an entry reference).
 */
#ifndef DSTL_CACHE_H
#define DSTL_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "dstl.h"
#include "s3/s3.h"

typedef struct read_cache read_cache;
typedef struct cache_entry cache_entry;

typedef struct {
    const char *dir;            /* the cache directory (created on first insert) */
    const char *run_id;         /* names this run's subdirectory */
    uint64_t max_size_bytes;    /* 0: nothing is cached */
    uint64_t idle_timeout_ms;
} cache_opts;

/* A cache over o (strings copied). No I/O. Returns 0 or -ENOMEM. */
int cache_new(const cache_opts *o, read_cache **out);
/* Frees the entries and pooled clients, removes this run's directory and lock. No entry may be
 * referenced. NULL is fine. Blocking (unlink). */
void cache_free(read_cache *c);

/* ---- the storage's cache: the two calls storage.c makes, and the lazy accessor ---- */

/* Creates s->locked.cache from s->conf (dir, max size, idle timeout) and s->run_id, unless it exists.
 * Call once the storage's mutex is initialized and before it is shared (or under s->mu).
 * Returns 0 or -ENOMEM. No I/O. */
int cache_open(dstl_storage *s);
/* cache_free(s->locked.cache); every reader must be closed. NULL-safe, idempotent. */
void cache_close(dstl_storage *s);
/* s->locked.cache, made under s->mu on first use when storage.c did not call cache_open. NULL only
 * when out of memory (readers then fetch without caching). */
read_cache *cache_get(dstl_storage *s);

/* ---- entries ---- */

/* The entry of object uri ("s3://bucket/key"), made if absent, with a reference the caller
 * releases. NULL when caching is disabled or out of memory (the caller fetches uncached). */
cache_entry *cache_acquire(read_cache *c, const char *uri);
/* Drops the reference; the entry's idle time starts when the last one goes. NULL is fine. */
void cache_release(read_cache *c, cache_entry *e);

/* Copies [off, off + len) of the object into dst when cached. Returns 1 (copied), 0 (not
 * cached, or its file could not be read: the caller fetches). Blocking (pread). */
int cache_read(read_cache *c, cache_entry *e, uint64_t off, size_t len, void *dst);
/* Keeps [off, off + len) of the object (bytes already verified). Best effort: a failure to
 * write, or a range larger than max-size, just leaves it uncached. Evicts unreferenced entries
 * beyond max-size. Blocking (open, pwrite). */
void cache_insert(read_cache *c, cache_entry *e, uint64_t off, size_t len, const void *src);
/* Forgets everything cached of e (its bytes failed a check). */
void cache_invalidate(read_cache *c, cache_entry *e);
/* Removes the unreferenced entries idle longer than the idle timeout (done by every acquire,
 * release and insert too). */
void cache_expire(read_cache *c);

/* Restore plans hold fetched bytes in memory within the same bound: cache_reserve counts
 * `bytes` against max-size (evicting unreferenced entries to make room) and returns 1, or 0
 * (nothing counted) when they do not fit; cache_unreserve gives them back. NULL c: 1 / no-op. */
int cache_reserve(read_cache *c, uint64_t bytes);
void cache_unreserve(read_cache *c, uint64_t bytes);

/* Removes what dead runs left in the cache directory (their lock is not held: crashed or
 * killed processes), without making anything. storage open calls it through cache_open, so a
 * cache found on open is trimmed before this run caches anything. */
void cache_sweep(read_cache *c);

/* Bytes cached now, and entries (for tests and stats). */
uint64_t cache_bytes(read_cache *c);
size_t cache_entries(read_cache *c);

/* ---- S3 clients for readers ---- */

/* An idle client of c's pool, or a new one from s's configuration (remote_client_new).
 * Returns 0, or its error with the detail in dstl_last_error. The caller owns it (one thread
 * at a time) until cache_client_give. */
int cache_client_take(dstl_storage *s, s3_client **out);
/* Returns a client to the pool (or frees it when the pool is full, or it still has
 * operations). NULL is fine. */
void cache_client_give(dstl_storage *s, s3_client *cli);

#endif
