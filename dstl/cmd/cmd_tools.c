/*
 * dstl/cmd/cmd_tools.c — `dstl cat`, `ls`, `verify`, `gc`: looking at and cleaning a local dir.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "dstl/cmd/cmd.h"
#include "dstl/tools.h"

/* ---- JSON output ---- */

static void json_bytes(const char *name, const void *p, size_t n)
{
    const unsigned char *b = p;
    int text = 1;
    for (size_t i = 0; i < n; i++)
        if (b[i] < 0x20 || b[i] >= 0x7f) text = 0;
    if (text) {
        printf("\"%s\":\"", name);
        for (size_t i = 0; i < n; i++) {
            if (b[i] == '"' || b[i] == '\\') putchar('\\');
            putchar(b[i]);
        }
        putchar('"');
    } else {
        printf("\"%s_hex\":\"", name);
        for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
        putchar('"');
    }
}

static const char *op_name(int op)
{
    static const char *const names[] = {"?", "PUT", "DELETE", "MERGE", "ADD", "CLEAR", "METADATA"};
    return op >= 1 && op <= 6 ? names[op] : "?";
}

static void print_record(const dstl_record *r)
{
    printf("{\"seq\":%" PRIu64 ",", r->seq);
    if (r->is_meta) printf("\"meta\":true,");
    else printf("\"key_group\":%u,", r->key_group);
    wire_state_change sc;
    if (wire_sc_decode(r->data, r->len, &sc, NULL) == 0) {
        printf("\"op\":\"%s\",\"state_id\":%u,", op_name(sc.op), sc.state_id);
        if (sc.state_name) {
            json_bytes("state", sc.state_name, sc.state_name_len);
            putchar(',');
        }
        json_bytes("key", sc.key, sc.key_len);
        putchar(',');
        json_bytes("namespace", sc.ns, sc.ns_len);
        if (sc.user_key_len) {
            putchar(',');
            json_bytes("user_key", sc.user_key, sc.user_key_len);
        }
        putchar(',');
        json_bytes("value", sc.value, sc.value_len);
    } else {
        /* not a canonical state change: the raw bytes */
        json_bytes("bytes", r->data, r->len);
    }
    printf("}\n");
}

static int parse_range(const char *s, uint32_t *a, uint32_t *b)
{
    char *end;
    unsigned long x = strtoul(s, &end, 10);
    if (end == s || *end != '-') return -1;
    const char *t = end + 1;
    unsigned long y = strtoul(t, &end, 10);
    if (end == t || *end || x > y || y > UINT32_MAX) return -1;
    *a = (uint32_t)x;
    *b = (uint32_t)y;
    return 0;
}

int cmd_cat(const cmd_globals *g, int argc, char **argv)
{
    const char *file = NULL, *dir = NULL;
    uint32_t kgf = 0, kgl = UINT32_MAX;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--key-groups") && i + 1 < argc) {
            if (parse_range(argv[++i], &kgf, &kgl) < 0) {
                fprintf(stderr, "dstl cat: --key-groups %s: expected A-B with A <= B\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--dir") && i + 1 < argc) {
            dir = argv[++i];
        } else if (!file && argv[i][0] != '-') {
            file = argv[i];
        } else {
            fprintf(stderr, "usage: dstl cat HANDLE_FILE [--dir LOCAL_DIR] [--key-groups A-B]\n");
            return 2;
        }
    }
    if (!file) {
        fprintf(stderr, "usage: dstl cat HANDLE_FILE [--dir LOCAL_DIR] [--key-groups A-B]\n");
        return 2;
    }
    dstl_handle *h = cmd_read_handle(file);
    if (!h) return 1;
    dstl_config *c = cmd_config(g, dir);
    dstl_storage *s = NULL;
    if (!c || dstl_storage_open(c, &s) < 0) {
        if (c) fprintf(stderr, "dstl cat: %s\n", dstl_last_error());
        dstl_handle_free(h);
        dstl_config_free(c);
        return 1;
    }
    dstl_reader *r = NULL;
    int rc = dstl_reader_open(s, h, kgf, kgl, &r);
    dstl_record rec;
    while (rc == 0 && (rc = dstl_reader_next(r, &rec)) == 1) {
        print_record(&rec);
        rc = 0;
    }
    if (rc < 0) fprintf(stderr, "dstl cat %s: %s\n", file, dstl_last_error());
    dstl_reader_close(r);
    dstl_handle_free(h);
    dstl_storage_close(s);
    dstl_config_free(c);
    return rc < 0 ? 1 : 0;
}

/* ---- ls / verify ---- */

#define SCAN_KEY_IDS 64

typedef struct {
    const char *dir;
    int verify;
    int64_t now_ms;
    uint64_t files, bad, empty, records, bytes;
    const wire_keyring *keys;           /* the configured key file's, or NULL */
    uint64_t need_key;                  /* encrypted segments whose key the file lacks */
    struct { char id[WIRE_KEY_ID_MAX + 1]; uint64_t segments; int missing; } ids[SCAN_KEY_IDS];
    size_t nids;
} scan_ctx;

/* The key id of an encrypted segment in memory (from its clear key block), "" when plain or
 * unreadable. */
static void segment_key_id(const uint8_t *buf, uint64_t size, char id[WIRE_KEY_ID_MAX + 1])
{
    uint64_t foff;
    uint32_t flen, fcrc;
    id[0] = 0;
    if (wire_trailer_parse(buf, size, size, &foff, &flen, &fcrc, NULL) == 0 &&
        wire_footer_key_id(buf + foff, flen, id) != 1)
        id[0] = 0;
}

/* Counts a segment under its key id; missing: the key file lacks it. */
static void count_key(scan_ctx *c, const char *id, int missing)
{
    size_t i = 0;
    while (i < c->nids && strcmp(c->ids[i].id, id) != 0) i++;
    if (i == c->nids) {
        if (c->nids == SCAN_KEY_IDS) return;
        snprintf(c->ids[c->nids++].id, sizeof c->ids[0].id, "%s", id);
    }
    c->ids[i].segments++;
    c->ids[i].missing |= missing;
}

static int key_listed(const wire_keyring *k, const char *id)
{
    for (size_t i = 0; k && i < k->nkeys; i++)
        if (!strcmp(k->keys[i].id, id)) return 1;
    return 0;
}

static void *read_whole(const char *dir, const char *name, uint64_t size)
{
    void *buf = malloc(size ? size : 1);
    if (!buf) return NULL;
    ssize_t n = segstore_read_at(dir, name, 0, buf, size);
    if (n < 0 || (uint64_t)n != size) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* Iterates every record of every section (each CRC checked); returns records or < 0. */
static long check_all(const wire_index *ix, const uint8_t *buf, wire_err *e)
{
    long n = 0;
    for (size_t i = 0; i < wire_index_nsections(ix); i++) {
        const wire_section_info *sec = wire_index_section(ix, i);
        wire_iter *it = NULL;
        int rc = wire_iter_open(sec, buf + sec->offset, 0, sec->stored_len, sec->seq_first, sec->seq_end, 0,
                                UINT32_MAX, &it, e);
        wire_record r;
        while (rc == 0 && (rc = wire_iter_next(it, &r, e)) == 1) {
            n++;
            rc = 0;
        }
        wire_iter_free(it);
        if (rc < 0) return rc;
    }
    return n;
}

static int scan_one(void *arg, const char *name, uint64_t size, int64_t mtime_ms)
{
    scan_ctx *c = arg;
    c->files++;
    if (size == 0) {
        c->empty++;
        printf("%s  0 B  empty (a reserved name never written: an orphan for gc)\n", name);
        return 0;
    }
    uint8_t *buf = read_whole(c->dir, name, size);
    if (!buf) {
        c->bad++;
        printf("%s  %" PRIu64 " B  UNREADABLE: %s\n", name, size, dstl_last_error());
        return 0;
    }
    wire_index *ix = NULL;
    wire_err e = {{0}};
    char kid[WIRE_KEY_ID_MAX + 1];
    segment_key_id(buf, size, kid);
    int rc = wire_segment_open_keyed(buf, size, c->keys, &ix, &e);
    long recs = 0;
    if (rc == 0 && c->verify) recs = check_all(ix, buf, &e);
    if (*kid) count_key(c, kid, rc == DSTL_ECRYPTO && !key_listed(c->keys, kid));
    if (rc == DSTL_ECRYPTO && *kid && !key_listed(c->keys, kid)) {
        /* not damage: a key the operator must keep (or a key file to configure) */
        c->need_key++;
        printf("%s  %" PRIu64 " B  NEEDS KEY '%s': %s\n", name, size, kid,
               c->keys ? "the key file does not list it" : "no dstl.encryption.key-file is configured");
    } else if (rc < 0 || recs < 0) {
        c->bad++;
        printf("%s  %" PRIu64 " B  CORRUPT: %s\n", name, size, e.msg);
    } else {
        c->bytes += size;
        size_t ns = wire_index_nsections(ix);
        if (c->verify) {
            c->records += (uint64_t)recs;
            printf("%s  %" PRIu64 " B  ok: %zu sections, %ld records%s%s%s\n", name, size, ns, recs,
                   *kid ? ", key '" : "", kid, *kid ? "'" : "");
        } else {
            printf("%s  %" PRIu64 " B  age %.1f s  %zu sections  key %s\n", name, size,
                   (double)(c->now_ms - mtime_ms) / 1000.0, ns, *kid ? kid : "- (plain)");
            for (size_t i = 0; i < ns; i++) {
                const wire_section_info *sec = wire_index_section(ix, i);
                printf("    %-24s seqs [%" PRIu64 ", %" PRIu64 ")  %" PRIu64 " records  key groups %u-%u  %" PRIu64 " B\n",
                       sec->writer_id, sec->seq_first, sec->seq_end, sec->nrec, sec->kg_first, sec->kg_last,
                       sec->stored_len);
            }
        }
    }
    wire_index_free(ix);
    free(buf);
    return 0;
}

/* The key file of the configuration (dstl.encryption.key-file, also from --config, --set and
 * DSTL_ENCRYPTION_KEY_FILE): 0 with *out NULL when none is set, 1 on an error (printed). */
static int load_keys(const cmd_globals *g, const char *cmd, keyring **out)
{
    *out = NULL;
    dstl_config *c = cmd_config(g, NULL);
    if (!c) return 1;
    const char *kf = dstl_config_get(c, "dstl.encryption.key-file");
    int rc = kf && *kf ? keyring_load(kf, out) : 0;
    dstl_config_free(c);
    if (rc < 0) {
        fprintf(stderr, "dstl %s: %s\n", cmd, dstl_last_error());
        return 1;
    }
    return 0;
}

static int cmp_key_id(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

/* The keys the segments need, sorted: each id, its segment count, and whether the file lacks it. */
static void print_keys(scan_ctx *c)
{
    if (!c->nids) return;
    qsort(c->ids, c->nids, sizeof c->ids[0], cmp_key_id);   /* the id is the entry's first field */
    printf("keys:");
    for (size_t i = 0; i < c->nids; i++)
        printf(" %s (%" PRIu64 " segment%s%s)", c->ids[i].id, c->ids[i].segments, c->ids[i].segments == 1 ? "" : "s",
               c->ids[i].missing ? ", NOT IN THE KEY FILE" : "");
    printf("\n");
    if (c->need_key)
        printf("%" PRIu64 " segment(s) need a key the key file lacks: keep that key until they are deleted\n",
               c->need_key);
    else if (c->verify && c->keys)
        printf("every encrypted segment opens with the key file; a key it lists that no segment names above can be "
               "retired (after every other dir and prefix using it is checked too)\n");
}

static int scan_dir(const cmd_globals *g, int argc, char **argv, int verify)
{
    const char *cmd = verify ? "verify" : "ls";
    if (argc != 2) {
        fprintf(stderr, "usage: dstl %s DIR\n", cmd);
        return 2;
    }
    keyring *k;
    if (load_keys(g, cmd, &k)) return 1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    scan_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        keyring_unref(k);
        fprintf(stderr, "dstl %s: out of memory\n", cmd);
        return 1;
    }
    *c = (scan_ctx){.dir = argv[1], .verify = verify, .now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
                    .keys = k ? keyring_wire(k) : NULL};
    int rc = segstore_list(argv[1], scan_one, c);
    if (rc < 0) {
        fprintf(stderr, "dstl %s: %s\n", cmd, dstl_last_error());
    } else {
        printf("%" PRIu64 " segment files, %" PRIu64 " B", c->files, c->bytes);
        if (verify) printf(", %" PRIu64 " records checked", c->records);
        printf(", %" PRIu64 " empty, %" PRIu64 " corrupt\n", c->empty, c->bad);
        print_keys(c);
        rc = verify && (c->bad || c->need_key);
    }
    keyring_unref(k);
    free(c);
    return rc < 0 ? 1 : rc;
}

int cmd_ls(const cmd_globals *g, int argc, char **argv)
{
    return scan_dir(g, argc, argv, 0);
}

int cmd_verify(const cmd_globals *g, int argc, char **argv)
{
    return scan_dir(g, argc, argv, 1);
}

/* ---- gc ---- */

/* Segments younger than this are kept unless --min-age says otherwise: an hour is far longer
 * than any upload, batch or checkpoint takes, so a segment another process is still writing,
 * or whose handle is not yet in any checkpoint (so in no live set), is never touched. */
#define GC_DEFAULT_MIN_AGE "1h"

static const char gc_usage[] =
    "usage: dstl gc DIR (--live HANDLE_FILE... | --no-live-handles) [--min-age D] [--dry-run]\n"
    "  --live             the live set: every handle of every storage that shares DIR or its remote prefix\n"
    "  --no-live-handles  there is none: every segment of a dead run older than --min-age is deleted\n"
    "  --min-age D        keep segments younger than D (default " GC_DEFAULT_MIN_AGE ")\n"
    "  --dry-run          count only: nothing is created, changed or deleted, locally or remotely\n";

int cmd_gc(const cmd_globals *g, int argc, char **argv)
{
    const char *dir = NULL, *min_age = GC_DEFAULT_MIN_AGE;
    uint64_t min_age_us = 0;
    int dry = 0, no_live = 0, live_flag = 0, in_live = 0, rc = 0;
    dstl_handle **live = calloc((size_t)argc, sizeof *live);
    size_t nlive = 0;
    if (!live) {
        fprintf(stderr, "dstl gc: out of memory\n");
        return 1;
    }
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--dry-run")) {
            dry = 1;
            in_live = 0;
        } else if (!strcmp(a, "--no-live-handles")) {
            no_live = 1;
            in_live = 0;
        } else if (!strcmp(a, "--min-age") && i + 1 < argc) {
            min_age = argv[++i];
            in_live = 0;
        } else if (!strcmp(a, "--live")) {
            live_flag = in_live = 1;
        } else if (in_live && a[0] != '-') {
            /* A handle that cannot be read is an error, never a smaller live set. */
            if (!(live[nlive++] = cmd_read_handle(a))) rc = 1;
        } else if (!dir && a[0] != '-') {
            dir = a;
        } else {
            fprintf(stderr, "dstl gc: unexpected argument '%s'\n%s", a, gc_usage);
            rc = 2;
        }
    }
    if (rc == 0 && config_parse_duration_us(min_age, &min_age_us) < 0) {
        fprintf(stderr, "dstl gc: --min-age %s: expected a duration such as 10min or 1h\n", min_age);
        rc = 2;
    }
    if (rc == 0 && !dir) {
        fprintf(stderr, "dstl gc: no DIR given\n%s", gc_usage);
        rc = 2;
    }
    if (rc == 0 && no_live && live_flag) {
        fprintf(stderr, "dstl gc: --live and --no-live-handles contradict each other: give one\n");
        rc = 2;
    }
    if (rc == 0 && !no_live && nlive == 0) {
        fprintf(stderr,
                "dstl gc: refusing to run without a live set%s: every segment no live handle references would be "
                "deleted, including the segments of every checkpoint still needed for recovery.\n"
                "Give --live HANDLE_FILE... with every handle of every storage that shares %s or its remote prefix, "
                "or --no-live-handles if there is none: then every segment of a dead run older than --min-age (%s) "
                "is deleted.\n",
                live_flag ? " (--live named no handle file)" : "", dir, min_age);
        rc = 2;
    }
    /* Opening a storage creates a missing dir: check first, so a typo creates nothing. */
    struct stat st;
    if (rc == 0 && stat(dir, &st) < 0) {
        fprintf(stderr, "dstl gc: %s: %s (nothing was created or deleted)\n", dir, strerror(errno));
        rc = 1;
    } else if (rc == 0 && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "dstl gc: %s: not a directory\n", dir);
        rc = 1;
    }
    dstl_config *c = rc == 0 ? cmd_config(g, dir) : NULL;
    if (rc == 0 && !c) rc = 1;
    dstl_storage *s = NULL;
    if (rc == 0 && dstl_storage_open(c, &s) < 0) {
        fprintf(stderr, "dstl gc: %s\n", dstl_last_error());
        rc = 1;
    }
    dstl_gc_report rep;
    if (rc == 0 && dstl_gc(s, (const dstl_handle *const *)live, nlive, min_age_us / 1000, dry, &rep) < 0) {
        fprintf(stderr, "dstl gc: %s\n", dstl_last_error());
        rc = 1;
    }
    if (rc == 0) {
        const char *remote = dstl_config_get(c, "dstl.remote.uri");
        printf("dstl gc %s%s%s: %zu live handle(s), min-age %s%s\n", dir, *remote ? " and " : "", remote, nlive,
               min_age, dry ? ", dry run: nothing was changed" : "");
        printf("%" PRIu64 " scanned, %" PRIu64 " %s (%" PRIu64 " B), %" PRIu64 " kept live, %" PRIu64
               " kept young, %" PRIu64 " kept for running storages\n",
               rep.scanned, rep.deleted, dry ? "would be deleted" : "deleted", rep.bytes_deleted, rep.kept_live,
               rep.kept_young, rep.kept_running);
    }
    dstl_storage_close(s);
    dstl_config_free(c);
    for (size_t i = 0; i < nlive; i++) dstl_handle_free(live[i]);
    free(live);
    return rc;
}
