/*
 * dstl/cmd/cmd_tools.c — `dstl cat`, `ls`, `verify`: looking at segments, in a local dir (and
 * its sub-folders) or under an s3://bucket/prefix (the set: cmd_source.h), and at what a
 * handle file covers.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dstl/cmd/cmd.h"
#include "dstl/cmd/cmd_source.h"
#include "dstl/handle.h"
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

/* One record as a JSON line; seg/writer, when not NULL, lead it (records of a segment). */
static void print_record(const dstl_record *r, const char *seg, const char *writer)
{
    putchar('{');
    if (seg) {
        json_bytes("segment", seg, strlen(seg));
        putchar(',');
        json_bytes("writer", writer, strlen(writer));
        putchar(',');
    }
    printf("\"seq\":%" PRIu64 ",", r->seq);
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

/* ---- the segments of a source: ls, verify, cat ---- */

typedef enum { SCAN_LS, SCAN_VERIFY, SCAN_CAT } scan_mode;

#define SCAN_KEY_IDS 64   /* distinct key ids counted (more are listed per segment only) */

typedef struct {
    scan_mode mode;
    int exact;                   /* --bytes */
    uint32_t kg_first, kg_last;  /* cat --key-groups */
    cmd_source *src;
    uint64_t files, bad, empty, records, bytes;
    const char *run;             /* ls: the run whose header was printed last */
    keyring *ring;               /* the configured key file's keys, or NULL */
    const wire_keyring *keys;
    uint64_t need_key;           /* encrypted segments whose key the file lacks */
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

static int key_listed(const wire_keyring *k, const char *id)
{
    for (size_t i = 0; k && i < k->nkeys; i++)
        if (!strcmp(k->keys[i].id, id)) return 1;
    return 0;
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

static int cmp_key_id(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

/* The keys the segments need, sorted: each id, its segment count, and whether the file lacks
 * it — so an operator knows when an old key can be retired. */
static void print_keys(scan_ctx *c, FILE *out)
{
    if (!c->nids) return;
    qsort(c->ids, c->nids, sizeof c->ids[0], cmp_key_id);   /* the id is the entry's first field */
    fprintf(out, "keys:");
    for (size_t i = 0; i < c->nids; i++)
        fprintf(out, " %s (%" PRIu64 " segment%s%s)", c->ids[i].id, c->ids[i].segments,
                c->ids[i].segments == 1 ? "" : "s", c->ids[i].missing ? ", NOT IN THE KEY FILE" : "");
    fprintf(out, "\n");
    if (c->need_key)
        fprintf(out, "%" PRIu64 " segment(s) need a key the key file lacks: keep that key until they are deleted\n",
                c->need_key);
    else if (c->mode == SCAN_VERIFY && c->keys)
        fprintf(out, "every encrypted segment opens with the key file; a key it lists that no segment names above "
                "can be retired (after every other dir and prefix using it is checked too)\n");
}

/* The key file of the configuration (dstl.encryption.key-file, also from --config, --set and
 * DSTL_ENCRYPTION_KEY_FILE) into c; 1 on an error (printed). */
static int load_keys(const cmd_globals *g, const char *cmd, scan_ctx *c)
{
    dstl_config *cfg = cmd_config(g, NULL);
    if (!cfg) return 1;
    const char *kf = dstl_config_get(cfg, "dstl.encryption.key-file");
    int rc = kf && *kf ? keyring_load(kf, &c->ring) : 0;
    dstl_config_free(cfg);
    if (rc < 0) {
        fprintf(stderr, "dstl %s: %s\n", cmd, dstl_last_error());
        return 1;
    }
    c->keys = c->ring ? keyring_wire(c->ring) : NULL;
    return 0;
}

/* Iterates every record of every section (each CRC checked); cat prints those in the key
 * groups asked. Returns the records iterated, or < 0. */
static long each_record(scan_ctx *c, const cmd_seg *sg, const wire_index *ix, const uint8_t *buf, wire_err *e)
{
    long n = 0;
    for (size_t i = 0; i < wire_index_nsections(ix); i++) {
        const wire_section_info *sec = wire_index_section(ix, i);
        uint32_t lo = c->mode == SCAN_CAT ? c->kg_first : 0, hi = c->mode == SCAN_CAT ? c->kg_last : UINT32_MAX;
        wire_iter *it = NULL;
        int rc = wire_iter_open(sec, buf + sec->offset, 0, sec->stored_len, sec->seq_first, sec->seq_end, lo, hi, &it,
                                e);
        wire_record r;
        while (rc == 0 && (rc = wire_iter_next(it, &r, e)) == 1) {
            n++;
            rc = 0;
            if (c->mode != SCAN_CAT) continue;
            dstl_record rec = {.seq = r.seq, .key_group = r.key_group, .is_meta = r.is_meta, .data = r.data,
                               .len = r.len};
            print_record(&rec, sg->rel, sec->writer_id);
        }
        wire_iter_free(it);
        if (rc < 0) return rc;
    }
    return n;
}

static void ls_segment(scan_ctx *c, const cmd_seg *sg, const wire_index *ix, const char *kid)
{
    char size[32], age[64], ssize[32];
    cmd_fmt_size(sg->size, c->exact, size, sizeof size);
    cmd_fmt_age(cmd_source_now_ms(c->src), sg->mtime_ms, age, sizeof age);
    if (!c->run || strcmp(c->run, sg->run) != 0) {
        printf("run %s\n", *sg->run ? sg->run : "(name not of a run)");
        c->run = sg->run;
    }
    size_t ns = wire_index_nsections(ix);
    printf("  %s  %s  %s  %zu section%s  key %s\n", sg->rel, size, age, ns, ns == 1 ? "" : "s",
           *kid ? kid : "- (plain)");
    for (size_t i = 0; i < ns; i++) {
        const wire_section_info *sec = wire_index_section(ix, i);
        cmd_fmt_size(sec->stored_len, c->exact, ssize, sizeof ssize);
        printf("      %-24s seqs [%" PRIu64 ", %" PRIu64 ")  %" PRIu64 " records  key groups %u-%u  %s\n",
               sec->writer_id, sec->seq_first, sec->seq_end, sec->nrec, sec->kg_first, sec->kg_last, ssize);
    }
}

/* When the segment in the file is not the one its name says (run id and number): a file
 * recycled for a reservation (dstl/local/segstore.c) still holding a deleted segment's bytes
 * after a crash, or a copy under the wrong name. Writes why and returns 1, else 0. */
static int misnamed(const cmd_seg *sg, const wire_index *ix, char *why, size_t cap)
{
    const char *base = strrchr(sg->rel, '/');
    base = base ? base + 1 : sg->rel;
    char run[64];
    uint64_t no;
    if (segment_name_parse(base, run, sizeof run, &no) < 0) return 0;   /* not a name of that shape */
    if (no == wire_index_segment_no(ix) && strcmp(run, wire_index_run_id(ix)) == 0) return 0;
    snprintf(why, cap, "holds segment %" PRIu64 " of run %s, not the one its name says (a file recycled for a "
             "reservation and left so by a crash, or a copy: unreferenced, an orphan for gc)",
             wire_index_segment_no(ix), wire_index_run_id(ix));
    return 1;
}

static void scan_one(scan_ctx *c, const cmd_seg *sg)
{
    char size[32], why[1024];
    cmd_fmt_size(sg->size, c->exact, size, sizeof size);
    c->files++;
    /* cat prints records on stdout: what is wrong goes to stderr there */
    FILE *note = c->mode == SCAN_CAT ? stderr : stdout;
    if (sg->size == 0) {
        c->empty++;
        if (c->mode != SCAN_CAT)
            fprintf(note, "  %s  0 B  empty (a reserved name never written: an orphan for gc)\n", sg->rel);
        return;
    }
    uint8_t *buf = NULL;
    if (cmd_source_read(c->src, sg, &buf, why, sizeof why) < 0) {
        c->bad++;
        fprintf(note, "  %s  %s  UNREADABLE: %s\n", sg->rel, size, why);
        return;
    }
    wire_index *ix = NULL;
    wire_err e = {{0}};
    char kid[WIRE_KEY_ID_MAX + 1];
    segment_key_id(buf, sg->size, kid);
    int rc = wire_segment_open_keyed(buf, sg->size, c->keys, &ix, &e);
    long recs = 0;
    if (rc == 0 && c->mode != SCAN_LS) recs = each_record(c, sg, ix, buf, &e);
    int lacks = rc == DSTL_ECRYPTO && *kid && !key_listed(c->keys, kid);
    if (*kid) count_key(c, kid, lacks);
    if (lacks) {
        /* not damage: a key the operator must keep (or a key file to configure) */
        c->need_key++;
        fprintf(note, "  %s  %s  NEEDS KEY '%s': %s\n", sg->rel, size, kid,
                c->keys ? "the key file does not list it" : "no dstl.encryption.key-file is configured");
    } else if (rc < 0 || recs < 0) {
        c->bad++;
        cmd_source_where(c->src, sg, why, sizeof why);
        fprintf(note, "  %s  %s  CORRUPT: %s (%s)\n", sg->rel, size, e.msg, why);
    } else if (misnamed(sg, ix, why, sizeof why)) {
        c->bad++;
        fprintf(note, "  %s  %s  MISNAMED: %s\n", sg->rel, size, why);
    } else {
        c->bytes += sg->size;
        c->records += (uint64_t)recs;
        if (c->mode == SCAN_LS) ls_segment(c, sg, ix, kid);
        else if (c->mode == SCAN_VERIFY)
            printf("  %s  %s  ok: %zu sections, %ld records%s%s%s\n", sg->rel, size, wire_index_nsections(ix), recs,
                   *kid ? ", key '" : "", kid, *kid ? "'" : "");
    }
    wire_index_free(ix);
    free(buf);
}

/* Scans every segment of the source at arg; prints the summary (ls, verify). Exit status. */
static int scan(const cmd_globals *g, const char *cmd, const char *arg, scan_ctx *c)
{
    if (load_keys(g, cmd, c)) return 1;
    if (cmd_source_open(g, cmd, arg, &c->src) < 0) {
        keyring_unref(c->ring);
        return 1;
    }
    for (size_t i = 0; i < cmd_source_count(c->src); i++) scan_one(c, cmd_source_seg(c->src, i));
    char total[32];
    cmd_fmt_size(c->bytes, c->exact, total, sizeof total);
    FILE *sum = c->mode == SCAN_CAT ? stderr : stdout;
    if (c->mode != SCAN_CAT || c->bad) {
        fprintf(sum, "%" PRIu64 " segment files, %s", c->files, total);
        if (c->mode != SCAN_LS) fprintf(sum, ", %" PRIu64 " records %s", c->records, c->mode == SCAN_CAT ? "printed" : "checked");
        fprintf(sum, ", %" PRIu64 " empty, %" PRIu64 " corrupt\n", c->empty, c->bad);
    }
    print_keys(c, sum);
    cmd_source_free(c->src);
    keyring_unref(c->ring);
    return c->mode != SCAN_LS && (c->bad || c->need_key) ? 1 : 0;
}

/* ls/verify [--bytes] (DIR | FILE.seg | s3://bucket/prefix). */
static int scan_command(const cmd_globals *g, int argc, char **argv, scan_mode mode)
{
    const char *cmd = mode == SCAN_LS ? "ls" : "verify", *arg = NULL;
    scan_ctx c = {.mode = mode};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bytes")) c.exact = 1;
        else if (!arg && argv[i][0] != '-') arg = argv[i];
        else arg = NULL, i = argc;
    }
    if (!arg) {
        fprintf(stderr, "usage: dstl %s [--bytes] (DIR | s3://bucket/prefix)   (dstl %s --help)\n", cmd, cmd);
        return 2;
    }
    return scan(g, cmd, arg, &c);
}

int cmd_ls(const cmd_globals *g, int argc, char **argv) { return scan_command(g, argc, argv, SCAN_LS); }

int cmd_verify(const cmd_globals *g, int argc, char **argv) { return scan_command(g, argc, argv, SCAN_VERIFY); }

/* ---- cat ---- */

/* Whether cat's argument names segments (a dir, a .seg file, an s3:// location) rather than a
 * handle file. */
static int names_segments(const char *arg)
{
    struct stat st;
    size_t n = strlen(arg), k = strlen(SEGSTORE_SUFFIX);
    return cmd_source_is_remote(arg) || (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) ||
           (n > k && !strcmp(arg + n - k, SEGSTORE_SUFFIX));
}

/* A handle's records, read through a storage (local copy, cache, S3: include/dstl.h). */
static int cat_handle(const cmd_globals *g, const char *file, const char *dir, uint32_t kgf, uint32_t kgl)
{
    dstl_handle *h = cmd_read_handle(file);
    if (!h) return 1;
    dstl_config *c = cmd_config(g, dir);
    dstl_storage *s = NULL;
    if (!c || cmd_open_storage(c, "cat", &s) < 0) {
        dstl_handle_free(h);
        dstl_config_free(c);
        return 1;
    }
    dstl_reader *r = NULL;
    int rc = dstl_reader_open(s, h, kgf, kgl, &r);
    dstl_record rec;
    while (rc == 0 && (rc = dstl_reader_next(r, &rec)) == 1) {
        print_record(&rec, NULL, NULL);
        rc = 0;
    }
    if (rc < 0) fprintf(stderr, "dstl cat %s: %s\n", file, dstl_last_error());
    dstl_reader_close(r);
    dstl_handle_free(h);
    dstl_storage_close(s);
    dstl_config_free(c);
    return rc < 0 ? 1 : 0;
}

/* The records of every segment of a source (a dir, a .seg file, an s3:// location). */
static int cat_segments(const cmd_globals *g, const char *arg, uint32_t kgf, uint32_t kgl)
{
    scan_ctx c = {.mode = SCAN_CAT, .kg_first = kgf, .kg_last = kgl};
    return scan(g, "cat", arg, &c);
}

static const char cat_usage[] =
    "usage: dstl cat HANDLE_FILE [--dir LOCAL_DIR] [--key-groups A-B]\n"
    "       dstl cat (DIR | FILE.seg | s3://bucket/prefix | s3://bucket/key.seg) [--key-groups A-B]\n"
    "       (dstl cat --help)\n";

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
            fprintf(stderr, "dstl cat: unexpected argument '%s'\n%s", argv[i], cat_usage);
            return 2;
        }
    }
    if (!file) {
        fprintf(stderr, "%s", cat_usage);
        return 2;
    }
    if (!names_segments(file)) return cat_handle(g, file, dir, kgf, kgl);
    if (dir) {
        fprintf(stderr, "dstl cat: --dir goes with a handle file; %s names segments already\n", file);
        return 2;
    }
    return cat_segments(g, file, kgf, kgl);
}
