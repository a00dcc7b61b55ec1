/*
 * dstl/config.h — the key table's typed view, for components inside dstl/.
 *
 * dstl_config (include/dstl.h) holds text values; config_resolve() checks every value and
 * fills one `config_values` with units in the names. Components take their *_opts from it.
 * The table itself (key, default, parser, unit, doc) lives in dstl/config.c: it is the one
 * list of keys; configs/ and the README are checked against it by a test.
 */
#ifndef DSTL_CONFIG_H
#define DSTL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "dstl.h"

enum { CFG_DURABILITY_LOCAL = 0, CFG_DURABILITY_REMOTE = 1 };
enum { CFG_BACKPRESSURE_BLOCK = 0, CFG_BACKPRESSURE_FAIL = 1 };
enum { CFG_COMP_NONE = 0, CFG_COMP_LZ4 = 1, CFG_COMP_ZSTD = 2 };  /* = WIRE_COMP_* */
enum { CFG_IO_URING = 0, CFG_IO_LIBAIO = 1, CFG_IO_PSYNC = 2 };
enum { CFG_PAYLOAD_UNSIGNED = 0, CFG_PAYLOAD_SHA256 = 1 };
enum { CFG_VERIFY_AUTO = 0, CFG_VERIFY_READ_BACK = 1 };
enum { CFG_BOOL_AUTO = 2 };   /* a bool-or-auto key set to auto (false 0, true 1) */

typedef struct {
    const char *local_dir;
    const char *remote_uri;              /* "" = local only */
    int durability;                      /* CFG_DURABILITY_* (effective) */
    const char *s3_endpoint, *s3_region;
    int s3_path_style;
    const char *s3_access_key, *s3_secret_key, *s3_session_token;
    int s3_tls_verify;
    const char *s3_ca_file;
    int s3_payload;                      /* CFG_PAYLOAD_* */
    int s3_verify_writes;                /* CFG_VERIFY_* */
    uint64_t lease_refresh_ms;           /* dstl.remote.lease-refresh */
    uint64_t lease_timeout_ms;           /* dstl.remote.lease-timeout */
    uint64_t persist_delay_us;
    int close_when_all_in;               /* dstl.batch.close-when-all-in */
    uint64_t persist_size_threshold_bytes;
    uint64_t preemptive_persist_threshold_bytes;
    uint64_t max_in_flight_bytes;
    int backpressure;                    /* CFG_BACKPRESSURE_* */
    uint64_t upload_timeout_ms;
    uint32_t upload_max_attempts;
    uint64_t upload_next_attempt_delay_ms;
    uint32_t upload_connections;
    uint64_t upload_part_size_bytes;
    uint64_t upload_multipart_threshold_bytes;
    int compression;                     /* CFG_COMP_* */
    const char *encryption_key_file;
    int io_engine;                       /* CFG_IO_* */
    int io_direct;                       /* dstl.io.direct: 0, 1, CFG_BOOL_AUTO */
    const char *cache_dir;               /* "" = <local_dir>/cache */
    uint64_t cache_max_size_bytes;
    uint64_t cache_idle_timeout_ms;
    uint32_t recovery_connections;       /* dstl.recovery.connections */
    uint64_t recovery_read_ahead_bytes;  /* dstl.recovery.read-ahead */
    const char *metrics_file;            /* "" = none */
} config_values;

/* Checks every value and fills v; strings point into c (valid while c is unchanged).
 * DSTL_ECONFIG naming the key when a value does not parse (cannot happen for values that
 * went through dstl_config_set/load, which check on entry). */
int config_resolve(const dstl_config *c, config_values *v);

/* A copy with the same values (the environment is not read again). */
int config_clone(const dstl_config *c, dstl_config **out);

/* The key table, for `dstl config` and the consistency test. */
typedef struct {
    const char *key;
    const char *default_text;            /* NULL: derived (see doc) */
    const char *unit;                    /* "duration", "size", "bool", "count", "enum: a|b", "text" */
    const char *doc;
    int secret;                          /* never printed */
} config_key_info;
size_t config_nkeys(void);
const config_key_info *config_key(size_t i);
/* The index of the table key that text starts with, followed by its end, ':', '=' or
 * whitespace; -1 when none. Lets an error about malformed input name the key without
 * repeating what follows it (it may be a secret). */
int config_key_prefix(const char *text);

/* Parsers shared with the command line (--duration 10s, --min-age 1h). */
int config_parse_duration_us(const char *s, uint64_t *us);
int config_parse_size(const char *s, uint64_t *bytes);

/* Where key's value came from: "default", "file" (dstl_config_load), "environment" (its
 * DSTL_* variable) or "set" (dstl_config_set: the command's --set); "unknown key". */
const char *config_source_of(const dstl_config *c, const char *key);

/* The environment variable of a key (dstl.batch.persist-delay -> DSTL_BATCH_PERSIST_DELAY);
 * and (config_env.c) the DSTL_* variables of the environment that look like a
 * key's but are none: DSTL_<word>_... where <word> is the first word of a key
 * (DSTL_BATCH_PERSIST_DELAYY), the typos dstl_config_new cannot see. cb gets each one with the
 * nearest key (by edit distance on the variable names). Returns how many. Reads environ. */
void config_env_name(const char *key, char *buf, size_t cap);
typedef void (*config_env_fn)(void *ctx, const char *var, const char *nearest_key);
size_t config_unknown_env(config_env_fn cb, void *ctx);

#endif
