/*
 * dstl.h — DSTL, a durable short-term log for stream-processing state changelogs.
 *
 * A state backend appends every state change to a *writer*; at a checkpoint it *persists*
 * the records since its last materialization and keeps the small serializable *handle* it
 * gets back; after materializing it *truncates* the log. Persists of all writers of a process
 * are grouped by one shared pipeline into segments, made durable locally (io_uring +
 * fdatasync) and/or in S3. Recovery opens a handle and reads its records back, verified.
 *
 * Conventions (binding; see API.md):
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
#define DSTL_EFENCED     (-10007) /* a newer owner of this writer id exists                         */

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

#ifdef __cplusplus
}
#endif
#endif /* DSTL_H */
