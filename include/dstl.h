/*
 * dstl.h — DSTL, a durable short-term log for stream-processing state changelogs.
 *
 * A state backend appends every state change to a *writer*; at a checkpoint it *persists*
 * the records since its last materialization and keeps the small serializable *handle* it
 * gets back; after materializing it *truncates* the log. Persists of all writers of a process
 * are grouped by one shared pipeline into segments, made durable locally (io_uring +
 * fdatasync) and/or in S3. Recovery opens a handle and reads its records back, verified.
 *
 * Conventions (binding: this header is the contract):
 *  - Every function that can fail returns int: 0 (or a count, where said) on success, a
 *    negative value on failure: -errno or one of the DSTL_E* codes below.
 *  - An `out` argument is written only on success. What a function hands out through **out
 *    the caller frees with the matching _free/_close. _free/_close accept NULL.
 *  - After a failure, dstl_last_error() gives a one-line detail for the calling thread
 *    (key and file:line, object and offset, HTTP status and request id, ...).
 *  - Thread rules are stated per group: "thread-safe", or "one thread at a time".
 */
#ifndef DSTL_H
#define DSTL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ------------------------------------------------------------------------------ */

#define DSTL_ECORRUPT    (-10001) /* checksum, tag or format mismatch: bytes are not returned      */
#define DSTL_ECLOSED     (-10002) /* the object (storage, writer) is closed or closing             */
#define DSTL_ETRUNCATED  (-10003) /* the asked range starts below the writer's truncation point    */
#define DSTL_EREMOTE     (-10004) /* the remote store failed after every attempt (detail: last_error) */
#define DSTL_ECONFIG     (-10005) /* unknown configuration key or bad value                         */
#define DSTL_ECRYPTO     (-10006) /* key missing/unknown key id/authentication failed               */
#define DSTL_EFENCED     (-10007) /* reserved: a newer owner of this writer id exists; never
                                     returned by the embedded library                            */

/* Which calls return which DSTL_E* code (the -errno codes are listed at each call):
 *   DSTL_ECORRUPT    dstl_reader_next (a segment's bytes fail their CRC32C or format check in
 *                    every copy there is: local, cache, S3; detail: file or s3://bucket/key,
 *                    section, offset), dstl_handle_parse (bytes that are not a handle).
 *   DSTL_ECLOSED     dstl_writer_open, dstl_append, dstl_append_meta, dstl_persist (the
 *                    storage is closing).
 *   DSTL_ETRUNCATED  dstl_persist (from_seq below the writer's truncation point).
 *   DSTL_EREMOTE     dstl_future_result (an upload failed after every attempt, or within the
 *                    future bound; the run's lease could not be kept: fenced), dstl_gc and
 *                    dstl_reader_next (a remote request failed after every attempt: 5xx,
 *                    resets, malformed answers; a timeout, a refused connection or a 403
 *                    give -ETIMEDOUT, -ECONNREFUSED, -EACCES instead).
 *   DSTL_ECONFIG     dstl_config_new (a bad DSTL_* value), dstl_config_set, dstl_config_load,
 *                    dstl_storage_open (values that contradict each other; a key file that
 *                    cannot be read or parsed: FILE:LINE), dstl_storage_reload_keys.
 *   DSTL_ECRYPTO     dstl_reader_next (a failed GCM tag, a key id the key file lacks, no key
 *                    file, a wrong key, a plain segment where the handle names an encrypted
 *                    one), dstl_storage_open and dstl_storage_reload_keys (a key file group
 *                    or others may read).
 *   DSTL_EFENCED     none: reserved for a coordinator that fences writers across processes.
 */

/* A short description of err: every DSTL_E* code and every -errno. Never NULL. Thread-safe. */
const char *dstl_strerror(int err);

/* The calling thread's detail of its last failure ("" when none): a thread-local string,
 * valid until this thread's next failing DSTL call. Never NULL. */
const char *dstl_last_error(void);

/* The library version, "MAJOR.MINOR.PATCH". */
const char *dstl_version(void);

/* ---- objects ----------------------------------------------------------------------------- */

typedef struct dstl_config  dstl_config;
typedef struct dstl_storage dstl_storage;
typedef struct dstl_writer  dstl_writer;
typedef struct dstl_future  dstl_future;
typedef struct dstl_handle  dstl_handle;
typedef struct dstl_reader  dstl_reader;

/* ---- configuration ------------------------------------------------------------------------
 * A set of "key: value" settings; every key, its default and its meaning are listed in
 * configs/local.conf and the README. Values carry units where they have one: durations
 * "10ms", "1s", "10min" (bare numbers are milliseconds), sizes "512kb", "5mb", "1gb"
 * (binary multiples; bare numbers are bytes), booleans "true"/"false", enums by name.
 *
 * Precedence, lowest to highest: default < file (dstl_config_load) < environment < set.
 * The environment variable of a key is its name upper-cased with '.' and '-' as '_':
 * dstl.batch.persist-delay -> DSTL_BATCH_PERSIST_DELAY. It is read by dstl_config_new.
 *
 * A config is used by one thread at a time; dstl_storage_open copies what it needs.
 */

/* A config with every key at its default, then the DSTL_* environment applied.
 * Returns 0, -ENOMEM, or DSTL_ECONFIG when an environment variable holds a bad value
 * (the detail names the variable and the key). */
int dstl_config_new(dstl_config **out);

/* Sets key to value after checking the value. DSTL_ECONFIG for an unknown key or a bad
 * value (the detail names the key and says what is expected); -EINVAL for NULL arguments. */
int dstl_config_set(dstl_config *c, const char *key, const char *value);

/* Reads "key: value" lines; '#' starts a comment; blank lines are ignored. Keys set from
 * the environment or by dstl_config_set keep their value. Every error names path:line and
 * the key: DSTL_ECONFIG for a syntax error, unknown key or bad value; -errno when the file
 * cannot be read. On failure the config is unchanged. */
int dstl_config_load(dstl_config *c, const char *path);

/* The value of key as text (the default when not set; dstl.durability gives the effective
 * "local" or "remote"), or NULL for an unknown key. Valid until the key is next set. */
const char *dstl_config_get(const dstl_config *c, const char *key);

void dstl_config_free(dstl_config *c);

/* ---- storage: usually one per process; owns the shared pipeline; thread-safe -------------
 * Opening starts the pipeline thread and the local store in dstl.local.dir (created if
 * missing). Each storage run has a random run id: its segment names start with it. Several
 * storages (in one process or many) may share one dstl.local.dir and one remote prefix: each
 * run holds an flock on <dir>/<run id>.lock from before its first file until close, and, once
 * it uploads, keeps a fresh lease object PREFIX/_leases/<run id>-t<ms>.lease; no dstl_gc
 * anywhere deletes anything of a run that holds either (dstl/README.md, "Who may delete what").
 * A storage opened only to read or sweep creates no file and no object.
 */

/* Returns 0, DSTL_ECONFIG, -ENOTSUP (a feature the configuration asks for that this build
 * lacks: detail names the key), or the -errno of creating dstl.local.dir / the I/O engine.
 * With dstl.encryption.key-file: DSTL_ECONFIG when the key file cannot be read or parsed
 * (detail FILE:LINE and what is wrong, never the line's text), DSTL_ECRYPTO when group or
 * others may access it (detail names the file and its mode).
 *
 * With dstl.remote.uri set, open also looks at the bucket: one ListObjectsV2 of at most one
 * key under the prefix (it creates nothing), bounded by dstl.upload.max-attempts x
 * dstl.upload.timeout (3 s at the defaults). An answer that settles that the storage cannot
 * work fails the open: -ENOENT for 404 NoSuchBucket, -EACCES for 403 SignatureDoesNotMatch or
 * InvalidAccessKeyId (the detail names s3://bucket/prefix and the server's answer, never a
 * credential). Anything else — no answer in time, refused connections, 5xx, AccessDenied (a
 * policy may deny listing and allow writing) — is taken for an outage: the storage opens
 * (local recovery must work without the remote), and dstl_last_error() after the 0 return
 * holds a one-line warning starting "warning: the remote ...". After a 0 return without a
 * warning, dstl_last_error() is "".
 * Blocking: yes (mkdir, fsync, thread start, the bucket check). */
int dstl_storage_open(const dstl_config *c, dstl_storage **out);

/* Encryption at rest (dstl.encryption.key-file; wire/FORMAT.md "Encryption"). Every segment
 * is sealed with AES-256-GCM under its own data key, wrapped with the key file's LAST key
 * (the active one); the other keys only open older segments. Rotation needs no restart: the
 * storage re-reads the file when it changed (device, inode, size or times), before each
 * segment it writes and at each dstl_reader_open; write the new file beside the old and
 * rename it into place. A changed file that does not load leaves the previous keys in use
 * (counted in dstl_stats.key_reload_failures). dstl_storage_reload_keys re-reads it now and
 * returns what the load returned: 0, DSTL_ECONFIG (FILE:LINE), DSTL_ECRYPTO (mode), or
 * DSTL_ECONFIG when no key file is configured. Thread-safe; blocking (reads the file). */
int dstl_storage_reload_keys(dstl_storage *s);

/* Waits for in-flight work (each batch within the future bound below; then the cleanups of
 * cancelled uploads for at most one more bound), frees. Writers must be closed
 * first, else -EBUSY and nothing is freed; from a future callback on the storage's pipeline
 * thread (which close waits for) -EDEADLK and nothing is freed. Segments still referenced by live handles stay
 * on disk for recovery; dstl_gc removes what no handle needs. Accepts NULL. */
int dstl_storage_close(dstl_storage *s);

/* ---- writer: one per task/operator; used by one thread at a time ---------------------------
 * Records are numbered per writer 0, 1, 2, ... in append order (data and meta records share
 * the numbering).
 */

/* writer_id: 1-255 bytes, unique among this storage's open writers (-EBUSY otherwise).
 * Data records must name a key group in [key_group_first, key_group_last]. */
int dstl_writer_open(dstl_storage *s, const char *writer_id,
                     uint32_t key_group_first, uint32_t key_group_last, dstl_writer **out);

/* The seq the next append gets; 0 on a new writer. */
uint64_t dstl_writer_next_seq(const dstl_writer *w);

/* Copies the record (the caller may reuse data at once). -EINVAL for a key group outside
 * the writer's range or len > 2^31-1. Never waits for I/O, except under backpressure: when
 * the writer hands its records to the pipeline ahead of a checkpoint (it holds
 * dstl.preemptive-persist-threshold bytes) and dstl.upload.max-in-flight has no room for
 * them, it blocks until room frees, or returns -EAGAIN (record not appended) with
 * dstl.backpressure: fail.
 *
 * Backpressure: dstl.upload.max-in-flight bounds every byte the pipeline keeps for records
 * handed off and not yet durable: the records and the room reserved for their encoded copy
 * (as much again, twice with compression, plus 4 KiB a hand-off) until their segment is
 * encoded; then the segment buffer (the records are held once: their copy in the writer is
 * freed) until both its copies are written; and the records of a failed persist, kept for its
 * retry until a persist sends them again or a truncate drops them — so an outage applies
 * backpressure. Hand-offs (appends past the preemptive threshold, persists) are admitted in
 * arrival order, so a large one is not starved by small ones. One exception: a hand-off larger
 * than the bound is admitted alone, when nothing else is in flight but failed persists'
 * records (its segment then counts on top). */
int dstl_append(dstl_writer *w, uint32_t key_group, const void *data, size_t len);

/* A meta record (state names, serializers): no key group; every reader gets it. */
int dstl_append_meta(dstl_writer *w, const void *data, size_t len);

/* Makes every record with from_seq <= seq < next_seq durable and hands out a future that
 * completes with a handle covering exactly that range. Records already durable are
 * referenced, not written again; with nothing new the future is already complete.
 * Errors: -EINVAL (from_seq > next_seq), DSTL_ETRUNCATED (below the truncation point),
 * -EAGAIN (backpressure: fail; and inside a future callback, wherever it would block for
 * backpressure: dstl_future_on_done), -EIO (the local store failed earlier: fail-stop),
 * DSTL_ECLOSED. A future that fails leaves the records in the writer: a later persist over
 * the range writes them again. Blocks only under backpressure. */
int dstl_persist(dstl_writer *w, uint64_t from_seq, uint64_t checkpoint_id, dstl_future **out);

/* The writer no longer needs records below to_seq (its state was materialized). Segments
 * are deleted once no untruncated writer section and no live handle of this storage refers
 * to them. -EINVAL when to_seq > next_seq. Never deletes what a completed or pending
 * persist's handle needs. */
int dstl_truncate(dstl_writer *w, uint64_t to_seq);

/* Waits for the writer's records in flight (at most the future bound below), releases its
 * sections, frees. Accepts NULL. Inside a future callback, with records in flight: -EAGAIN
 * and the writer stays open (a callback never waits). */
int dstl_writer_close(dstl_writer *w);

/* ---- futures: complete once, from the pipeline; any thread may wait ------------------------
 *
 * THE BOUND. With dstl.durability: remote, a future completes (with its handle, or failed)
 * within
 *
 *     dstl.batch.persist-delay + dstl.upload.max-attempts x dstl.upload.timeout + 1 s
 *
 * after its dstl_persist returned (a persist blocked by backpressure has not handed its
 * records off yet: the bound runs from its return). The waits between attempts
 * (dstl.upload.next-attempt-delay, jittered) are spent inside this bound, not added to it: an
 * upload still running at the bound is cancelled and its batch fails, and a batch not yet
 * written by then fails unwritten; what the cancelled upload leaves behind is cleaned up
 * detached (dstl_storage_close waits for that at most one more bound; dstl gc removes the
 * rest). With the defaults: 10 ms + 3 x 1 s + 1 s = 4.01 s. The bound also needs the local
 * copy's write to finish (both copies are written at once): a local disk that hangs is
 * outside it. With dstl.durability: local, a future waits for the local write + fdatasync
 * only (no timeout can stop an fdatasync). Tests use exactly this formula.
 */

/* 0 when done, -ETIMEDOUT when still pending after timeout_ms (< 0: wait forever). Inside
 * a future callback it never waits: a pending future gives -ETIMEDOUT at once. */
int dstl_future_wait(dstl_future *f, int64_t timeout_ms);
/* 1 done, 0 pending. */
int dstl_future_done(const dstl_future *f);
/* After done: 0 and a new handle (the caller frees it), or the persist's error with its
 * detail in dstl_last_error(). -EAGAIN while pending. May be called more than once. */
int dstl_future_result(dstl_future *f, dstl_handle **out);
/* May be called while pending: the persist still completes; a handle nobody can see then
 * keeps no segment alive. A callback (dstl_future_on_done) that has not started yet then never
 * runs; one running on another thread finishes with f still valid. May be called inside the
 * future's own callback: f stays valid until the callback returns. */
void dstl_future_free(dstl_future *f);

/* ---- futures for event loops: completion callbacks --------------------------------------
 * A state backend with its own event loop (it cannot block in dstl_future_wait) registers a
 * callback; it typically posts the future to its loop (a queue and a wakeup of its own) and
 * calls dstl_future_result there, or right in the callback.
 *
 *   static void on_persisted(dstl_future *f, void *arg) {
 *       struct task *t = arg;
 *       dstl_handle *h = NULL;
 *       int rc = dstl_future_result(f, &h);     // never waits: f is done
 *       dstl_future_free(f);                    // allowed here
 *       task_post_checkpoint(t, rc, h);         // the backend's own, non-blocking
 *   }
 *   ...
 *   if (dstl_persist(w, from, cp, &f) == 0) dstl_future_on_done(f, on_persisted, task);
 *
 * Rules:
 *  - fn runs exactly once per registration, with the future done: from the storage's pipeline
 *    thread when the future completes later, or at once, on the calling thread inside
 *    dstl_future_on_done, when it is done already. No DSTL lock is held while fn runs.
 *  - fn must not block, and nothing DSTL does inside it blocks: dstl_persist and dstl_append
 *    return -EAGAIN where they would wait for backpressure (the records of an append are not
 *    appended; a persist hands nothing off and may be called again later), dstl_future_wait
 *    returns -ETIMEDOUT at once for a pending future, dstl_writer_close returns -EAGAIN while
 *    the writer has records in flight, dstl_storage_close returns -EDEADLK on the pipeline
 *    thread. A persist from a callback that needs no room (room is free, or nothing is new)
 *    works as anywhere: its new future may get a callback of its own. dstl_gc and
 *    dstl_reader_next do I/O: do not call them from a callback on the pipeline thread.
 *  - fn runs on one pipeline thread for all futures of a storage: while it runs, no other
 *    completion of that storage is delivered, so it should return quickly.
 *  - dstl_future_free(f) inside fn is allowed; after dstl_future_free from another thread a
 *    callback that has not started never runs.
 * There is no pollable descriptor per storage yet: a loop that wants one makes an eventfd or
 * pipe of its own and writes it from fn.
 */
typedef void (*dstl_future_fn)(dstl_future *f, void *arg);

/* Registers fn(f, arg) to run once when f is done (at once when it is done already). Returns
 * 0, -EINVAL (NULL f or fn), -EBUSY (f has a callback already: one per future). Thread-safe;
 * never blocks (except for what fn does when it runs at once). */
int dstl_future_on_done(dstl_future *f, dstl_future_fn fn, void *arg);

/* ---- handles: immutable, self-contained, serializable; safe to share between threads ------ */

/* malloc'd bytes (wire/FORMAT.md: magic, version, protobuf body, CRC32C). */
int dstl_handle_serialize(const dstl_handle *h, void **buf, size_t *len);
/* Validates fully; DSTL_ECORRUPT naming what is wrong for bytes that are not a handle. */
int dstl_handle_parse(const void *buf, size_t len, dstl_handle **out);
void dstl_handle_free(dstl_handle *h);
const char *dstl_handle_writer_id(const dstl_handle *h);
uint64_t dstl_handle_checkpoint_id(const dstl_handle *h);
uint64_t dstl_handle_from_seq(const dstl_handle *h);
uint64_t dstl_handle_to_seq(const dstl_handle *h);      /* exclusive */
/* Payload bytes of the records it covers. Exact when from_seq was an answer of
 * dstl_writer_next_seq or a persist boundary; otherwise whole sections count. */
uint64_t dstl_handle_size(const dstl_handle *h);
/* The checkpoint holding h is subsumed or aborted: its segments may go once no writer
 * section needs them. Discarding twice, or a handle of another storage run, is a no-op. */
int dstl_handle_discard(dstl_storage *s, const dstl_handle *h);

/* ---- restore: the lifecycle of a restored backend -----------------------------------------
 * After a failure the job restores from its last completed checkpoint: the materialized
 * snapshot plus the serialized handles it kept in that checkpoint's metadata. A restored
 * backend, in a new process or the same one:
 *  1. opens a storage (a new run with a new run id; the old run, crashed or closed, is dead)
 *     with the same dstl.local.dir (local recovery from the files that survived) and the same
 *     dstl.remote.uri (the objects);
 *  2. parses each handle (dstl_handle_parse) and reads it with dstl_reader_open /
 *     dstl_reader_next over the key groups it now owns (after rescaling, a subset or a union
 *     of the old ones: read every handle whose range overlaps), applying the records on top
 *     of the snapshot;
 *  3. opens its writers again (dstl_writer_open, any writer id: usually the old one). A new
 *     writer numbers its records from 0 again: the seqs of the new run and of the handles it
 *     restored from are separate spaces, and the new checkpoints' handles cover only what the
 *     new writer appended. Until its next materialization the checkpoint metadata holds both:
 *     the restored handles (still needed) and the new ones.
 *  4. frees the old run's segments through dstl_gc, never through truncate or discard:
 *     dstl_handle_discard of a handle of another run is a no-op, and dstl_truncate only
 *     concerns this run's writers. Once no retained checkpoint holds a handle of the old run
 *     any more (after the next materialization and the checkpoints that subsume it), run
 *     dstl_gc (or `dstl gc`) with the live set of every retained checkpoint's handles: it
 *     deletes what no live handle references and is older than min_age_ms.
 * What a handle keeps alive: inside its own run, a handle that completed and was not
 * discarded keeps its segments (dstl_truncate and dstl_handle_discard never delete them).
 * Across processes and runs a handle keeps nothing by itself: only dstl_gc's live set (and
 * min_age_ms, and the lock or lease of a run still alive) protects a dead run's segments, so
 * the live set given to gc must hold every handle any job may still restore from.
 */

/* ---- reading: recovery readers; a reader is used by one thread at a time ------------------
 * Where the bytes come from, per segment of the handle: the local copy
 * <dstl.local.dir>/<segment name> when it exists with the length the handle names (local
 * recovery: no request at all); otherwise, when the handle names a remote (its writer's
 * dstl.remote.uri at persist time), the object s3://bucket/PREFIX/hh/<name> with this
 * storage's dstl.s3.* endpoint and credentials: first the reader cache (dstl.cache.*: byte
 * ranges fetched before, on local disk, checked again on every read), then ranged GETs on a
 * client of the reader's own (only the footer and the sections of the key groups asked, a
 * few pieces fetched ahead). Every byte, whatever its source, is checked before it is
 * returned; a bad local copy is replaced by the object mid-piece (counted in
 * dstl_stats.local_read_fallbacks), a bad cached range is dropped and fetched again. Readers
 * of one storage share its cache and a pool of S3 clients; each reader is used by one thread
 * at a time, and many readers may run at once on different threads. Blocking: open and next
 * do I/O (file reads, HTTP). */
typedef struct {
    uint64_t    seq;
    uint32_t    key_group;     /* meaningless for meta records */
    int         is_meta;
    const void *data;          /* valid until the next dstl_reader_next, _try_next or _close */
    size_t      len;
} dstl_record;

/* Yields h's records in seq order, keeping data records whose key group lies in
 * [key_group_first, key_group_last] and every meta record. Reads the local copy when it is
 * there; with a remote (the handle names one), a missing, unreadable or damaged local copy is
 * read from the object instead — also mid-piece, without repeating or skipping a record — and
 * counted in dstl_stats.local_read_fallbacks. DSTL_ECORRUPT then means no copy is intact (the
 * detail names both). Encrypted segments are opened with the storage's key file (its keys at
 * reader open): DSTL_ECRYPTO when the key file lacks the segment's key id or none is
 * configured (detail: key id and segment), or a tag fails (detail: segment, section, offset);
 * no byte of a section is returned before its tag is checked. */
int dstl_reader_open(dstl_storage *s, const dstl_handle *h,
                     uint32_t key_group_first, uint32_t key_group_last, dstl_reader **out);
/* 1 record, 0 end, < 0 error: DSTL_ECORRUPT (detail: file, section, offset), -ENOENT (a
 * segment is gone: no local copy and no object), a GET's failure after every attempt
 * (DSTL_EREMOTE, or the code of the last attempt: -ETIMEDOUT, -ECONNREFUSED, -EACCES; detail:
 * s3://bucket/key and the server's answer), DSTL_ECRYPTO (encrypted segments: a key or tag
 * problem), -EIO, -ENOMEM. Errors are sticky. */
int dstl_reader_next(dstl_reader *r, dstl_record *rec);
/* As dstl_reader_next, but never waits for bytes still on their way: -EAGAIN (no error, no
 * record skipped; the record returned before is no longer valid, as after any call) when the
 * next record needs bytes not yet in — a restore plan's still queued or streaming, or the
 * reader's own GET (which it drives without waiting). For a thread that restores many tasks:
 * it takes turns on the readers with records at hand and sleeps in dstl_restore_wait when
 * none has (that wait hears of a plan's bytes only: a reader's own GETs are not news to it,
 * so a loop that also tries plain readers waits with a short timeout). A reader blocked in
 * dstl_reader_next makes its plan fetch what it waits for ahead of the plan's order (it is
 * idle until then); a reader that only tries leaves the order alone, so a thread's reader of
 * a late object does not pull that object in early, to be held until the plan's slowest
 * reader gets there. Returns as dstl_reader_next otherwise. */
int dstl_reader_try_next(dstl_reader *r, dstl_record *rec);
void dstl_reader_close(dstl_reader *r);

/* ---- restoring a whole job at once: restore plans; thread-safe -----------------------------
 * When a job restarts, all its tasks restore at the same moment, and their handles share
 * segments (one segment holds many writers' sections). A restore plan tells the storage up
 * front what every reader of the process will read — one entry per reader: its handles and
 * its key-group range — so that each needed byte range of each object is fetched once for
 * all of them:
 *  - whole objects when most of an object is needed (3/4), coalesced ranged GETs otherwise
 *    (ranges closer than 64 KiB are read as one); for a reader whose key-group range cuts a
 *    section (after a rescale) only the runs of its key groups, the meta run and the footer;
 *  - in parallel, up to dstl.recovery.connections GETs, earliest segments first, while
 *    readers consume: a reader blocks only until the bytes of its current piece are in;
 *  - held in memory within dstl.cache.max-size (shared with the reader cache), each range
 *    until every reader that needs it has passed it. A range that does not fit, or was already
 *    given up, is fetched by the reader that needs it on its own: eviction never breaks a
 *    reader, and the bound always holds;
 *  - a segment whose local copy (dstl.local.dir) has the handle's length is not fetched: its
 *    readers read the local copy, verified, and fall back to the object, per segment, when the
 *    copy is bad (as dstl_reader_open does).
 * Readers of a plan yield exactly what dstl_reader_open gives for the same handle and range,
 * verified the same way. The per-reader path (dstl_reader_open) keeps working alongside.
 */
typedef struct dstl_restore dstl_restore;

typedef struct {
    const dstl_handle *const *handles;  /* the handles one reader (task) restores */
    size_t nhandles;
    uint32_t key_group_first, key_group_last;   /* the reader's key groups, inclusive */
} dstl_restore_entry;

/* Per restore (dstl_restore_get_stats); added to dstl_stats' restore_* fields at dstl_restore_close. */
typedef struct {
    uint64_t objects;           /* distinct remote objects the plan's handles name */
    uint64_t object_bytes;      /* their total length */
    uint64_t local_segments;    /* of which a local copy of the right length is read instead */
    uint64_t objects_fetched;   /* objects some GET of the plan read from */
    uint64_t get_requests;      /* GET attempts: the plan's and its readers' own (retries, hedges too) */
    uint64_t bytes_fetched;     /* response bytes of those GETs */
    uint64_t bytes_delivered;   /* bytes readers took from what the plan fetched */
    uint64_t cache_hits;        /* reads served from bytes the plan already held (no wait) */
    uint64_t direct_reads;      /* reads the plan left to the reader's own GET (over the bound,
                                   already released, or never planned) */
    uint64_t held_bytes, held_peak_bytes;   /* fetched bytes held in memory now / at most */
    uint64_t footers_parsed;    /* segment footers parsed into the index the plan's readers share
                                   (once per object, each as soon as it is in, before any
                                   reader asks) */
    uint64_t memory_touched_bytes;  /* memory the fetched bytes have taken up: the plan reuses
                                   what readers released, so about held_peak_bytes (rounded up
                                   to 64 KiB per extent), not bytes_fetched */
} dstl_restore_stats;

/* Plans a restore of n entries (n >= 1; every handle non-NULL; first <= last) and starts
 * fetching. The plan holds a reference to each handle (handles are immutable): the caller may
 * free them. Blocking: when an entry's range cuts a section, the footers of those segments are
 * fetched (in parallel) before it returns.
 * Returns 0, -EINVAL (bad arguments, detail names the entry), -ENOMEM, DSTL_ECONFIG (a
 * handle's remote URI), or the S3 client's error. */
int dstl_restore_plan(dstl_storage *s, const dstl_restore_entry *entries, size_t n, dstl_restore **out);

/* A reader of handle `handle` of entry `entry` over the entry's key groups, fed by the plan
 * (dstl_reader_next / dstl_reader_close as for any reader; one thread at a time). Each
 * (entry, handle) may be opened once. -EINVAL for indices out of range, -EBUSY when already
 * opened. */
int dstl_restore_reader_open(dstl_restore *p, size_t entry, size_t handle, dstl_reader **out);

/* Waits until the plan has news for the calling thread since *seen — bytes one of its
 * dstl_reader_try_next calls found missing arrived, or their fetch completed, failed or was
 * left to the reader — or timeout_ms passes (< 0: no limit, 0: no wait). *seen: 0 before the
 * thread's first call (which returns at once), updated by each. Returns 1 (news: try the
 * readers again), 0 (the timeout), or -EINVAL. News that comes before the call is counted,
 * never lost; threads are woken only for bytes they tried for. A plan stuck with its bound
 * full and nothing in flight leaves the bytes readers tried for to those readers (they fetch
 * them themselves) after about 50 ms, which wakes their threads. */
int dstl_restore_wait(dstl_restore *p, uint64_t *seen, int timeout_ms);

/* The plan's counters now. */
int dstl_restore_get_stats(dstl_restore *p, dstl_restore_stats *out);

/* Stops the plan's fetches and frees it; adds its counters to the storage's. Readers opened
 * from it must be closed first, else -EBUSY and nothing is freed. Accepts NULL. */
int dstl_restore_close(dstl_restore *p);

/* ---- cleanup across crashes and runs ------------------------------------------------------ */
typedef struct {
    uint64_t scanned, deleted, kept_live, kept_young, bytes_deleted;
    uint64_t kept_running;   /* of another run that is still alive (its lock is held, or its
                                remote lease is fresh): never deleted, whatever live and min_age */
} dstl_gc_report;

/* Deletes every segment under dstl.local.dir and, with dstl.remote.uri, under the remote
 * prefix that no handle in live references, that is older than min_age_ms, and that this
 * storage is not still using; aborts the remote prefix's incomplete multipart uploads older
 * than min_age_ms that this storage is not still uploading. Nothing of a run that is still
 * alive is deleted, whatever live and min_age_ms say: locally its lock is held, remotely its
 * lease is fresh (kept_running counts those). Remote ages are the server's (a listing's Date
 * against LastModified), never the local clock. The live set must hold every handle of every
 * storage that shares the dir or prefix. Also removes stale leases and dead runs' lock files
 * that keep no file. dry_run changes nothing. The report counts local files and remote
 * objects alike (an aborted upload is deleted, 0 bytes). Errors name the file or
 * s3://bucket/key. Blocking (listings, deletes; its own S3 client). */
int dstl_gc(dstl_storage *s, const dstl_handle *const *live, size_t n_live,
            uint64_t min_age_ms, int dry_run, dstl_gc_report *out);

/* ---- statistics ---------------------------------------------------------------------------- */
typedef struct {
    uint64_t appends, append_bytes;
    uint64_t persists, persist_failures;
    uint64_t segments_written, segment_bytes;          /* one segment per flushed batch */
    uint64_t remote_requests, remote_retries, remote_failures, hedged_attempts;
    uint64_t segments_deleted;                         /* unreferenced, so deleted; while segments
                                                          are being written, a small one's local
                                                          file may stay to be reused for a later
                                                          segment, until ~1 s idle or close */
    uint64_t in_flight_bytes, queued_persists;         /* gauges, now: bytes counted against
                                                          dstl.upload.max-in-flight; hand-offs
                                                          waiting for their batch to be written */
    uint64_t persist_p50_us, persist_p99_us, persist_max_us;   /* since open */
    /* additions to the first version of the contract, at the end so the fields above keep
     * their places */
    uint64_t remote_bytes_written, remote_bytes_read;  /* request and response bodies */
    uint64_t cache_hits, cache_misses;                 /* reader cache, in sections */
    uint64_t local_read_fallbacks;  /* segments a reader read from S3 because their local copy
                                     * was unusable (bad CRC, wrong length, unreadable) */
    uint64_t key_reloads;           /* times a changed key file was re-read and taken */
    uint64_t key_reload_failures;   /* re-reads that failed (the previous keys stayed in use) */
    /* restore plans, summed over those closed (dstl_restore_stats has each one's) */
    uint64_t restores, restore_objects_fetched, restore_requests;
    uint64_t restore_bytes_fetched, restore_bytes_delivered, restore_cache_hits;
    /* segments of at least 4 KiB from an aligned buffer written with O_DIRECT (dstl.io.direct,
     * by default auto: where the local dir's file system takes it; a smaller segment goes
     * through the page cache whole): the check that the option bites */
    uint64_t segments_direct;
    /* segments written over a recycled file of exactly their length (small segments are padded
     * to it): no file size changed, so their fdatasync wrote no inode */
    uint64_t segments_in_place;
    /* gauge, now: memory kept for reuse and not counted in in_flight_bytes — the writers' free
     * chunks (within the headroom under dstl.upload.max-in-flight) and the pipeline's free
     * segment buffers (at most 32 MiB more); a storage idle for a second gives them back, down
     * to 16 MiB of chunks */
    uint64_t pooled_bytes;
} dstl_stats;
int dstl_storage_stats(dstl_storage *s, dstl_stats *out);

/* The same counters plus latency and size histograms in Prometheus text format (names like
 * Flink's ChangelogStorage metrics: dstl_upload_requests_total, dstl_upload_latency_seconds,
 * dstl_upload_batch_writers, dstl_inflight_bytes, dstl_queue_size, ...), in a malloc'd
 * string the caller frees. With dstl.metrics.file set, the storage also rewrites that file
 * every second. Thread-safe. (An addition to the first version of the contract.) */
int dstl_storage_metrics(dstl_storage *s, char **text);

/* ---- canonical state changes and key groups: for state backends; pure, any thread ---------
 * One backend-neutral encoding of a state change (FLIP-41's idea: one format for every
 * backend), the bytes of dstl.proto's message StateChange (wire/FORMAT.md). A backend appends
 * it as a record's payload (dstl_append: changelog entries; and snapshots in the same format);
 * `dstl cat` renders such records as JSON; a restoring backend decodes and replays them. The
 * library never looks inside a record: using this format is the backend's choice.
 * (Additions to the first version of the contract.)
 */
enum {
    DSTL_SC_PUT = 1,       /* key / namespace / user_key := value                              */
    DSTL_SC_DELETE = 2,    /* remove key / namespace / user_key                                */
    DSTL_SC_MERGE = 3,     /* merge value into the existing one (reducing, aggregating state)  */
    DSTL_SC_ADD = 4,       /* append value to a list state                                     */
    DSTL_SC_CLEAR = 5,     /* remove the whole state of key / namespace                        */
    DSTL_SC_METADATA = 6   /* state registration or schema change: value is opaque metadata    */
};

/* A state change. Byte fields are (pointer, length); a field of length 0 is absent (its
 * pointer may be NULL). state_name is not NUL-terminated when decoded: use state_name_len. */
typedef struct {
    int op;                                     /* DSTL_SC_*                               */
    uint32_t state_id;                          /* the backend's number for the state, or 0 */
    const char *state_name; size_t state_name_len;
    const void *key;        size_t key_len;
    const void *ns;         size_t ns_len;      /* namespace (window), or empty            */
    const void *user_key;   size_t user_key_len;/* map key of a map state, else empty      */
    const void *value;      size_t value_len;
} dstl_state_change;

/* Bytes dstl_state_change_encode writes for sc. */
size_t dstl_state_change_size(const dstl_state_change *sc);

/* Encodes sc into buf; returns the length (> 0), or -EINVAL when op is not a DSTL_SC_* value,
 * a field has a length but no pointer, or cap < dstl_state_change_size(sc) (the detail says
 * which). */
int dstl_state_change_encode(const dstl_state_change *sc, void *buf, size_t cap);

/* Decodes len bytes into *out without copying: out's pointers point into buf (valid while buf
 * is), absent byte fields as a non-NULL pointer with length 0, an absent state name as NULL.
 * Protobuf's rules: unknown fields are skipped. Returns 0, -EINVAL (NULL arguments), or
 * DSTL_ECORRUPT for bytes that are not a state change (the detail names the offset and what is
 * wrong: a bad tag or varint, a length past the end, an op outside DSTL_SC_*). */
int dstl_state_change_decode(const void *buf, size_t len, dstl_state_change *out);

/* The key group of a key, as Flink assigns it (KeyGroupRangeAssignment.assignToKeyGroup):
 * murmurHash(hashCode) % max_parallelism, where murmurHash is Flink's MathUtils.murmurHash
 * (one round of 32-bit MurmurHash3 over the int, then its finalizer, made non-negative).
 * dstl_key_group_of_hash takes the key's Java hashCode() as Flink would (a backend that has
 * it); dstl_key_group takes the key's bytes and uses as hashCode the one of a Java String
 * of those bytes read as ISO-8859-1 characters: h = 31 * h + byte (unsigned), from 0 — the
 * same key group Flink gives a String key of ASCII (or Latin-1) characters.
 * max_parallelism: 1 .. 32768 (Flink's bounds; 128 is its default), else the result is
 * UINT32_MAX. */
uint32_t dstl_key_group_of_hash(int32_t hash_code, uint32_t max_parallelism);
uint32_t dstl_key_group(const void *key, size_t len, uint32_t max_parallelism);

/* The key groups of operator index `index` of `parallelism` (Flink's
 * computeKeyGroupRangeForOperatorIndex): [ceil(index * max_p / p), ((index + 1) * max_p - 1) / p].
 * Returns 0, or -EINVAL unless 1 <= parallelism <= max_parallelism <= 32768 and index <
 * parallelism. Rescaling is restoring with another parallelism: the new task `index` reads
 * every old handle whose key groups meet its range. */
int dstl_key_group_range(uint32_t max_parallelism, uint32_t parallelism, uint32_t index,
                         uint32_t *first, uint32_t *last);

#ifdef __cplusplus
}
#endif
#endif /* DSTL_H */
