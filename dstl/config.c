/*
 * dstl/config.c — the one key table, value parsers, files, environment.
 *
 * Every configuration key of DSTL is a row of `keys[]`: name, default, kind (parser), unit,
 * one-line doc. Values are checked when they enter (set, load, environment), so a config
 * that exists is valid; config_resolve() turns it into typed values for the components.
 * Precedence: default < file < environment < dstl_config_set (see include/dstl.h).
 *
 * Threads: a dstl_config is used by one thread at a time; the table is constant.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstl/config.h"
#include "dstl/err.h"

enum kind { K_TEXT, K_DURATION, K_SIZE, K_BOOL, K_BOOL_AUTO, K_COUNT, K_ENUM };   /* K_BOOL_AUTO: a bool or "auto" */

typedef struct {
    config_key_info info;
    enum kind kind;
    const char *const *choices;          /* K_ENUM: NULL-terminated */
    size_t offset;                       /* into config_values */
    uint64_t min, max;                   /* K_DURATION (us) / K_SIZE / K_COUNT bounds */
} key_def;

static const char *const durability_choices[] = {"local", "remote", NULL};
static const char *const backpressure_choices[] = {"block", "fail", NULL};
static const char *const compression_choices[] = {"none", "lz4", "zstd", NULL};
static const char *const engine_choices[] = {"io_uring", "libaio", "psync", NULL};
static const char *const payload_choices[] = {"unsigned", "sha256", NULL};
static const char *const verify_choices[] = {"auto", "read-back", NULL};

#define OFF(f) offsetof(config_values, f)
#define KIB ((uint64_t)1024)
#define MIB (KIB * 1024)
#define GIB (MIB * 1024)
#define SEC_US ((uint64_t)1000000)

/* Bounds say what a production value can be; each names why in its doc where it bites. */
static const key_def keys[] = {
    {{"dstl.local.dir", "./dstl-data", "text", "directory of local segments (and the local recovery copy)", 0},
     K_TEXT, NULL, OFF(local_dir), 0, 0},
    {{"dstl.remote.uri", "", "text", "s3://bucket/prefix of remote segments; empty = local only", 0},
     K_TEXT, NULL, OFF(remote_uri), 0, 0},
    {{"dstl.remote.lease-refresh", "30s", "duration",
      "a run that uploads rewrites its lease object (PREFIX/_leases/) this often; other machines' gc leave a run "
      "with a fresh lease alone", 0},
     K_DURATION, NULL, OFF(lease_refresh_ms), 100000, 3600 * SEC_US},
    {{"dstl.remote.lease-timeout", "10min", "duration",
      "a lease older than this (server clock) is stale: its run counts as dead; the run fails its persists once its "
      "last refresh is older than this minus 2 x lease-refresh; at least 4 x lease-refresh", 0},
     K_DURATION, NULL, OFF(lease_timeout_ms), 400000, 7 * 24 * 3600 * SEC_US},
    {{"dstl.durability", NULL, "enum: local|remote",
      "when a persist completes: local = fdatasync'ed locally; remote = object complete (default remote when dstl.remote.uri is set, else local)", 0},
     K_ENUM, durability_choices, OFF(durability), 0, 0},
    {{"dstl.s3.endpoint", "", "text", "S3 endpoint URL (MinIO, Ceph RGW); empty = AWS for the region", 0},
     K_TEXT, NULL, OFF(s3_endpoint), 0, 0},
    {{"dstl.s3.region", "us-east-1", "text", "S3 signing region", 0}, K_TEXT, NULL, OFF(s3_region), 0, 0},
    {{"dstl.s3.path-style", "false", "bool", "path-style URLs (MinIO, Ceph RGW) instead of virtual-hosted", 0},
     K_BOOL, NULL, OFF(s3_path_style), 0, 0},
    {{"dstl.s3.access-key", "", "text", "access key id; empty = AWS_ACCESS_KEY_ID, then ~/.aws/credentials", 1},
     K_TEXT, NULL, OFF(s3_access_key), 0, 0},
    {{"dstl.s3.secret-key", "", "text", "secret access key; empty = AWS_SECRET_ACCESS_KEY, then ~/.aws/credentials; never logged", 1},
     K_TEXT, NULL, OFF(s3_secret_key), 0, 0},
    {{"dstl.s3.session-token", "", "text", "session token; empty = AWS_SESSION_TOKEN; never logged", 1},
     K_TEXT, NULL, OFF(s3_session_token), 0, 0},
    {{"dstl.s3.tls-verify", "true", "bool", "verify the server's TLS certificate", 0},
     K_BOOL, NULL, OFF(s3_tls_verify), 0, 0},
    {{"dstl.s3.ca-file", "", "text", "CA bundle for TLS verification; empty = system default", 0},
     K_TEXT, NULL, OFF(s3_ca_file), 0, 0},
    {{"dstl.s3.payload-signing", "unsigned", "enum: unsigned|sha256",
      "unsigned = UNSIGNED-PAYLOAD plus a CRC32C checksum (AWS and MinIO verify it; Ceph RGW 16 ignores it, "
      "so dstl.s3.verify-writes checks the stored copy); sha256 = signed body digest, which every SigV4 server verifies", 0},
     K_ENUM, payload_choices, OFF(s3_payload), 0, 0},
    {{"dstl.s3.verify-writes", "auto", "enum: auto|read-back",
      "auto = a segment counts as written only once the server's copy is shown equal: its echoed CRC32C (AWS), "
      "else the signed SHA-256, else an ETag equal to the body's MD5 (RGW 16 with unsigned payloads); "
      "read-back = read each object back and compare (servers with neither a checksum nor an MD5 ETag: SSE-KMS, SSE-C)", 0},
     K_ENUM, verify_choices, OFF(s3_verify_writes), 0, 0},
    {{"dstl.batch.persist-delay", "10ms", "duration",
      "how long the batcher gathers persists into one segment; 0 = group commit (flush at once when idle)", 0},
     K_DURATION, NULL, OFF(persist_delay_us), 0, 60 * SEC_US},
    {{"dstl.batch.close-when-all-in", "false", "bool",
      "also close a batch before persist-delay once every open writer of the storage has persisted since it "
      "opened (writers that all persist at one checkpoint barrier); a writer's second persist within the delay "
      "then goes into the next segment", 0},
     K_BOOL, NULL, OFF(close_when_all_in), 0, 0},
    {{"dstl.batch.persist-size-threshold", "10mb", "size", "flush a batch early once it holds this many bytes", 0},
     K_SIZE, NULL, OFF(persist_size_threshold_bytes), 1, 4 * GIB},
    {{"dstl.preemptive-persist-threshold", "5mb", "size",
      "a writer with this many unpersisted bytes hands them to the pipeline ahead of the checkpoint", 0},
     K_SIZE, NULL, OFF(preemptive_persist_threshold_bytes), 1, 4 * GIB},
    {{"dstl.upload.max-in-flight", "100mb", "size",
      "hard bound on bytes handed to the pipeline and not yet durable; appends/persists wait (or fail) beyond it", 0},
     K_SIZE, NULL, OFF(max_in_flight_bytes), 64 * KIB, 64 * GIB},
    {{"dstl.backpressure", "block", "enum: block|fail", "at max-in-flight: block, or fail with -EAGAIN", 0},
     K_ENUM, backpressure_choices, OFF(backpressure), 0, 0},
    {{"dstl.upload.timeout", "1s", "duration", "an upload attempt slower than this starts a hedged parallel attempt", 0},
     K_DURATION, NULL, OFF(upload_timeout_ms), 1000, 3600 * SEC_US},
    {{"dstl.upload.max-attempts", "3", "count", "attempts per upload (first + retries + hedges)", 0},
     K_COUNT, NULL, OFF(upload_max_attempts), 1, 100},
    {{"dstl.upload.next-attempt-delay", "500ms", "duration", "wait after a failed attempt (jittered)", 0},
     K_DURATION, NULL, OFF(upload_next_attempt_delay_ms), 0, 3600 * SEC_US},
    {{"dstl.upload.connections", "8", "count", "parallel HTTP connections to the remote store", 0},
     K_COUNT, NULL, OFF(upload_connections), 1, 1024},
    {{"dstl.upload.part-size", "8mb", "size", "multipart upload part size (S3: at least 5mb)", 0},
     K_SIZE, NULL, OFF(upload_part_size_bytes), 5 * MIB, 5 * GIB},
    {{"dstl.upload.multipart-threshold", "16mb", "size", "segments this large or larger go up as multipart uploads", 0},
     K_SIZE, NULL, OFF(upload_multipart_threshold_bytes), 5 * MIB, 5 * GIB},
    {{"dstl.compression", "none", "enum: none|lz4|zstd", "per-section compression of new segments", 0},
     K_ENUM, compression_choices, OFF(compression), 0, 0},
    {{"dstl.encryption.key-file", "", "text", "AES-256-GCM key file (key ids for rotation); empty = no encryption", 0},
     K_TEXT, NULL, OFF(encryption_key_file), 0, 0},
    {{"dstl.io.engine", "io_uring", "enum: io_uring|libaio|psync", "local file I/O engine", 0},
     K_ENUM, engine_choices, OFF(io_engine), 0, 0},
    {{"dstl.io.direct", "auto", "bool or auto",
      "write segments with O_DIRECT (aligned buffers; the last partial block goes through the page cache): true = "
      "the file system must take 4 KiB-aligned O_DIRECT writes, else the storage open fails naming this key; auto = "
      "segments of 1 MiB and more with O_DIRECT where it does, the page cache where it does not (tmpfs before "
      "Linux 6.6, ramfs)", 0},
     K_BOOL_AUTO, NULL, OFF(io_direct), 0, 0},
    {{"dstl.cache.dir", "", "text", "reader cache directory; empty = <dstl.local.dir>/cache", 0},
     K_TEXT, NULL, OFF(cache_dir), 0, 0},
    {{"dstl.cache.max-size", "1gb", "size", "reader cache size bound", 0},
     K_SIZE, NULL, OFF(cache_max_size_bytes), 0, UINT64_MAX},
    {{"dstl.cache.idle-timeout", "10min", "duration", "unused cached segments are dropped after this long", 0},
     K_DURATION, NULL, OFF(cache_idle_timeout_ms), 0, UINT64_MAX},
    {{"dstl.recovery.connections", "8", "count",
      "parallel GETs of a restore plan (dstl_restore_plan): its fetches of the objects a job's readers need", 0},
     K_COUNT, NULL, OFF(recovery_connections), 1, 1024},
    {{"dstl.recovery.read-ahead", "64mb", "size",
      "bytes a restore plan fetches ahead of its readers (within dstl.cache.max-size); what a reader waits or "
      "tries for is fetched beyond it; 0 = up to dstl.cache.max-size", 0},
     K_SIZE, NULL, OFF(recovery_read_ahead_bytes), 0, UINT64_MAX},
    {{"dstl.metrics.file", "", "text",
      "write Prometheus text metrics to this file every second (for node_exporter's textfile collector); empty = off", 0},
     K_TEXT, NULL, OFF(metrics_file), 0, 0},
};
#define NKEYS (sizeof keys / sizeof keys[0])

/* Millisecond fields hold durations converted from microseconds at resolve time. */
static int is_ms_field(size_t off)
{
    return off == OFF(upload_timeout_ms) || off == OFF(upload_next_attempt_delay_ms) ||
           off == OFF(cache_idle_timeout_ms) || off == OFF(lease_refresh_ms) || off == OFF(lease_timeout_ms);
}

enum { SRC_DEFAULT = 0, SRC_FILE = 1, SRC_ENV = 2, SRC_SET = 3 };

struct dstl_config {
    char *value[NKEYS];                  /* NULL = default */
    unsigned char source[NKEYS];
};

size_t config_nkeys(void) { return NKEYS; }
const config_key_info *config_key(size_t i) { return i < NKEYS ? &keys[i].info : NULL; }

static int find_key(const char *key)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].info.key, key) == 0) return (int)i;
    return -1;
}

/* Longest name an error repeats as "unknown key": every table key is far shorter. */
#define SHOWN_KEY_MAX 96

/* Whether text that is not a table key may be repeated in an error as the unknown key it
 * claims to be: a dotted name of key characters, starting with a letter ("dstl.s3.secret_key",
 * "s3.endpoint"). Anything else ("dstl.s3.secret-key=abc", "wJalrXUtnFEMI/K7MDENG") may be a
 * value in the wrong place, a secret among them, and is not repeated. */
static int shows_as_key(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SHOWN_KEY_MAX || !isalpha((unsigned char)s[0]) || !strchr(s, '.')) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '-' && s[i] != '_') return 0;
    return 1;
}

/* The error for key, not in the table (where: "" or "path:line: "). */
static int unknown_key(const char *where, const char *key)
{
    if (shows_as_key(key)) return err_fail(DSTL_ECONFIG, "%sunknown configuration key '%s'", where, key);
    return err_fail(DSTL_ECONFIG, "%snot a configuration key (the text is not shown: it may hold a secret; keys "
                                  "look like dstl.local.dir)", where);
}

int config_key_prefix(const char *text)
{
    int best = -1;
    size_t best_len = 0;
    for (size_t i = 0; i < NKEYS; i++) {
        size_t n = strlen(keys[i].info.key);
        if (n > best_len && strncmp(text, keys[i].info.key, n) == 0 &&
            (text[n] == '\0' || text[n] == ':' || text[n] == '=' || isspace((unsigned char)text[n]))) {
            best = (int)i;
            best_len = n;
        }
    }
    return best;
}

/* ---- value parsers: strict; no trailing garbage, no negative numbers, no overflow ---- */

static int parse_u64_prefix(const char *s, uint64_t *v, const char **rest)
{
    if (!isdigit((unsigned char)*s)) return -1;
    uint64_t x = 0;
    while (isdigit((unsigned char)*s)) {
        unsigned d = (unsigned)(*s - '0');
        if (x > (UINT64_MAX - d) / 10) return -1;
        x = x * 10 + d;
        s++;
    }
    *v = x;
    *rest = s;
    return 0;
}

static int mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b && a > UINT64_MAX / b) return -1;
    *out = a * b;
    return 0;
}

int config_parse_duration_us(const char *s, uint64_t *us)
{
    static const struct { const char *suffix; uint64_t us; } units[] = {
        {"us", 1}, {"ms", 1000}, {"s", SEC_US}, {"min", 60 * SEC_US}, {"m", 60 * SEC_US},
        {"h", 3600 * SEC_US}, {"", 1000},   /* a bare number is milliseconds */
    };
    uint64_t n;
    const char *rest;
    if (parse_u64_prefix(s, &n, &rest) < 0) return -1;
    while (*rest == ' ') rest++;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(rest, units[i].suffix) == 0) return mul_ok(n, units[i].us, us);
    return -1;
}

int config_parse_size(const char *s, uint64_t *bytes)
{
    static const struct { const char *suffix; uint64_t mult; } units[] = {
        {"", 1}, {"b", 1}, {"k", KIB}, {"kb", KIB}, {"kib", KIB}, {"m", MIB}, {"mb", MIB},
        {"mib", MIB}, {"g", GIB}, {"gb", GIB}, {"gib", GIB}, {"t", GIB * 1024}, {"tb", GIB * 1024},
    };
    uint64_t n;
    const char *rest;
    if (parse_u64_prefix(s, &n, &rest) < 0) return -1;
    while (*rest == ' ') rest++;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(rest, units[i].suffix) == 0) return mul_ok(n, units[i].mult, bytes);
    return -1;
}

static int parse_bool(const char *s, int *b)
{
    if (!strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on") || !strcmp(s, "1")) { *b = 1; return 0; }
    if (!strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off") || !strcmp(s, "0")) { *b = 0; return 0; }
    return -1;
}

static int parse_enum(const key_def *k, const char *s, int *v)
{
    for (int i = 0; k->choices[i]; i++)
        if (strcmp(k->choices[i], s) == 0) { *v = i; return 0; }
    return -1;
}

static void choices_text(const key_def *k, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; k->choices[i] && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", k->choices[i]);
}

static void fmt_bound(const key_def *k, uint64_t v, char *buf, size_t cap)
{
    if (k->kind == K_DURATION) snprintf(buf, cap, "%" PRIu64 "ms", v / 1000);
    else if (k->kind == K_SIZE && v % MIB == 0) snprintf(buf, cap, "%" PRIu64 "mb", v / MIB);
    else if (k->kind == K_SIZE && v % KIB == 0) snprintf(buf, cap, "%" PRIu64 "kb", v / KIB);
    else snprintf(buf, cap, "%" PRIu64, v);
}

/* Parses value for key k into the typed slot (when v != NULL). On a bad value it sets the
 * detail as "<where>key 'name': bad value 'x' (expected ...)" and returns DSTL_ECONFIG. */
static int parse_value(const key_def *k, const char *value, config_values *v, const char *where)
{
    char expect[160];
    uint64_t n = 0;
    int b = 0;
    void *slot = v ? (char *)v + k->offset : NULL;

    switch (k->kind) {
    case K_TEXT:
        if (strchr(value, '\n')) { snprintf(expect, sizeof expect, "one line of text"); goto bad; }
        if (slot) *(const char **)slot = value;
        return 0;
    case K_BOOL:
    case K_BOOL_AUTO:
        if (k->kind == K_BOOL_AUTO && !strcmp(value, "auto")) b = CFG_BOOL_AUTO;
        else if (parse_bool(value, &b) < 0) {
            snprintf(expect, sizeof expect, k->kind == K_BOOL ? "true or false" : "true, false or auto");
            goto bad;
        }
        if (slot) *(int *)slot = b;
        return 0;
    case K_ENUM:
        if (parse_enum(k, value, &b) < 0) {
            char c[100];
            choices_text(k, c, sizeof c);
            snprintf(expect, sizeof expect, "one of: %s", c);
            goto bad;
        }
        if (slot) *(int *)slot = b;
        return 0;
    case K_DURATION:
        if (config_parse_duration_us(value, &n) < 0) {
            snprintf(expect, sizeof expect, "a duration such as 10ms, 1s, 10min");
            goto bad;
        }
        break;
    case K_SIZE:
        if (config_parse_size(value, &n) < 0) {
            snprintf(expect, sizeof expect, "a size such as 512kb, 5mb, 1gb");
            goto bad;
        }
        break;
    case K_COUNT: {
        const char *rest;
        if (parse_u64_prefix(value, &n, &rest) < 0 || *rest) {
            snprintf(expect, sizeof expect, "a whole number");
            goto bad;
        }
        break;
    }
    }
    if (n < k->min || n > k->max) {
        char lo[32], hi[32];
        fmt_bound(k, k->min, lo, sizeof lo);
        fmt_bound(k, k->max, hi, sizeof hi);
        snprintf(expect, sizeof expect, "between %s and %s", lo, hi);
        goto bad;
    }
    if (slot) {
        if (k->kind == K_COUNT) *(uint32_t *)slot = (uint32_t)n;
        else if (is_ms_field(k->offset)) *(uint64_t *)slot = n / 1000;
        else *(uint64_t *)slot = n;
    }
    return 0;
bad:
    return err_fail(DSTL_ECONFIG, "%skey '%s': bad value '%s' (expected %s)", where, k->info.key,
                    k->info.secret ? "<secret>" : value, expect);
}

static int set_from(dstl_config *c, int i, const char *value, int source)
{
    char *copy = strdup(value);
    if (!copy) return err_fail(-ENOMEM, "config: out of memory");
    free(c->value[i]);
    c->value[i] = copy;
    c->source[i] = (unsigned char)source;
    return 0;
}

/* dstl.batch.persist-delay -> DSTL_BATCH_PERSIST_DELAY */
void config_env_name(const char *key, char *buf, size_t cap)
{
    size_t n = 0;
    for (const char *p = key; *p && n + 1 < cap; p++)
        buf[n++] = (*p == '.' || *p == '-') ? '_' : (char)toupper((unsigned char)*p);
    if (cap) buf[n] = '\0';
}

int dstl_config_new(dstl_config **out)
{
    if (!out) return err_fail(-EINVAL, "dstl_config_new: out is NULL");
    dstl_config *c = calloc(1, sizeof *c);
    if (!c) return err_fail(-ENOMEM, "config: out of memory");
    for (size_t i = 0; i < NKEYS; i++) {
        char name[96], where[128];
        config_env_name(keys[i].info.key, name, sizeof name);
        const char *v = getenv(name);
        if (!v) continue;
        snprintf(where, sizeof where, "environment %s: ", name);
        int rc = parse_value(&keys[i], v, NULL, where);
        if (rc == 0) rc = set_from(c, (int)i, v, SRC_ENV);
        if (rc < 0) {
            dstl_config_free(c);
            return rc;
        }
    }
    *out = c;
    return 0;
}

int dstl_config_set(dstl_config *c, const char *key, const char *value)
{
    if (!c || !key || !value) return err_fail(-EINVAL, "dstl_config_set: NULL argument");
    int i = find_key(key);
    if (i < 0) return unknown_key("", key);
    int rc = parse_value(&keys[i], value, NULL, "");
    return rc < 0 ? rc : set_from(c, i, value, SRC_SET);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

/* Strips a '#' comment that starts the line or follows whitespace (so "a#b" stays a value). */
static void strip_comment(char *s)
{
    for (char *p = s; *p; p++)
        if (*p == '#' && (p == s || isspace((unsigned char)p[-1]))) { *p = '\0'; return; }
}

int dstl_config_load(dstl_config *c, const char *path)
{
    if (!c || !path) return err_fail(-EINVAL, "dstl_config_load: NULL argument");
    FILE *f = fopen(path, "r");
    if (!f) {
        int e = errno;
        return err_fail(-e, "config %s: %s", path, strerror(e));
    }
    /* Parse everything into a scratch array first, so a failure leaves c unchanged. */
    char *pending[NKEYS] = {0};
    char line[4096];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char where[512];
        snprintf(where, sizeof where, "%s:%d: ", path, lineno);
        if (!strchr(line, '\n') && !feof(f)) {
            rc = err_fail(DSTL_ECONFIG, "%sline longer than %zu bytes", where, sizeof line - 1);
            break;
        }
        strip_comment(line);
        char *s = trim(line);
        if (!*s) continue;
        char *colon = strchr(s, ':');
        if (!colon) {
            /* The line may be "key value" or "key=value" with a secret value: never repeat
             * it; name the key only when it starts the line. */
            int k = config_key_prefix(s);
            if (k >= 0)
                rc = err_fail(DSTL_ECONFIG, "%sexpected 'key: value': key '%s' is not followed by ':' (the rest of "
                                            "the line is not shown)", where, keys[k].info.key);
            else
                rc = err_fail(DSTL_ECONFIG, "%sexpected 'key: value', found no ':' (the line is not shown: it may "
                                            "hold a secret)", where);
            break;
        }
        *colon = '\0';
        char *key = trim(s), *value = trim(colon + 1);
        int i = find_key(key);
        if (i < 0) {
            rc = unknown_key(where, key);
            break;
        }
        if ((rc = parse_value(&keys[i], value, NULL, where)) < 0) break;
        free(pending[i]);
        if (!(pending[i] = strdup(value))) {
            rc = err_fail(-ENOMEM, "config: out of memory");
            break;
        }
    }
    if (rc == 0 && ferror(f)) rc = err_fail(-EIO, "config %s: read error", path);
    fclose(f);
    for (size_t i = 0; i < NKEYS; i++) {
        if (rc == 0 && pending[i] && c->source[i] <= SRC_FILE) {
            free(c->value[i]);
            c->value[i] = pending[i];
            c->source[i] = SRC_FILE;
        } else {
            free(pending[i]);
        }
    }
    return rc;
}

const char *dstl_config_get(const dstl_config *c, const char *key)
{
    if (!c || !key) return NULL;
    int i = find_key(key);
    if (i < 0) return NULL;
    if (c->value[i]) return c->value[i];
    if (keys[i].info.default_text) return keys[i].info.default_text;
    /* The one derived default: durability follows whether a remote is configured. */
    const char *remote = dstl_config_get(c, "dstl.remote.uri");
    return remote && *remote ? "remote" : "local";
}

void dstl_config_free(dstl_config *c)
{
    if (!c) return;
    for (size_t i = 0; i < NKEYS; i++) free(c->value[i]);
    free(c);
}

int config_resolve(const dstl_config *c, config_values *v)
{
    memset(v, 0, sizeof *v);
    for (size_t i = 0; i < NKEYS; i++) {
        int rc = parse_value(&keys[i], dstl_config_get(c, keys[i].info.key), v, "");
        if (rc < 0) return rc;
    }
    return 0;
}

int config_clone(const dstl_config *c, dstl_config **out)
{
    dstl_config *n = calloc(1, sizeof *n);
    if (!n) return err_fail(-ENOMEM, "config: out of memory");
    for (size_t i = 0; i < NKEYS; i++) {
        if (c->value[i] && !(n->value[i] = strdup(c->value[i]))) {
            dstl_config_free(n);
            return err_fail(-ENOMEM, "config: out of memory");
        }
        n->source[i] = c->source[i];
    }
    *out = n;
    return 0;
}

const char *config_source_of(const dstl_config *c, const char *key)
{
    int i = c && key ? find_key(key) : -1;
    if (i < 0) return "unknown key";
    static const char *const names[] = {"default", "file", "environment", "set"};
    return names[c->source[i]];
}
