/*
 * tests/tools/crash_child.c — the two halves of the crash tests (tests/test_dstl_crash.c,
 * tests/test_remote_crash.c).
 *
 *   crash_child run DIR HANDLES ENGINE SEED [REMOTE_URI MODE]
 *       Persists heavily until killed: W writers on their own threads append deterministic
 *       records, persist every few ms, materialize (truncate) now and then. After each
 *       persist completes, the new handle is written to HANDLES/<writer>.handle (write,
 *       fsync, rename, fsync dir) and only then is the previous handle discarded — the
 *       order a checkpoint coordinator uses, so the file on disk always names a handle whose
 *       segments must still exist.
 *   crash_child verify DIR HANDLES [REMOTE_URI MODE]
 *       After the kill: opens a fresh storage on DIR, reads every handle file back and checks
 *       each record. Exit 0 only if every record is there, exactly.
 *   crash_child exact DIR HANDLES
 *       After `dstl gc DIR --live` with every handle file: verify again, and check that exactly the
 *       segments the handles reference remain (nothing more deletable, nothing missing).
 *   crash_child run-acks DIR ENGINE SEED
 *       Like run, but each completed persist is reported on stdout as it completes, one line
 *       "ack <writer> <checkpoint> <serialized handle in hex>" written whole with one write(2),
 *       and no handle is ever discarded: every handle the parent (the checkpoint coordinator,
 *       tests/test_dstl_powercut.c) has read must survive a power cut. Nothing else goes to
 *       stdout.
 *   crash_child verify-acks DIR FILE
 *       Opens a fresh storage on DIR and reads back every handle listed in FILE (lines as
 *       run-acks prints them), checking each record byte for byte. Prints "verify-acks: H
 *       handles, R records checked, L handles lost"; exit 0 when nothing was lost, 1 when an
 *       acknowledged record is missing or differs (each named on stderr), 2 on a tool error.
 *
 * Remote mode (REMOTE_URI = s3://bucket/prefix): the storage uploads to it with durability
 * remote, endpoint and keys from DSTL_T_S3_ENDPOINT / _ACCESS_KEY / _SECRET_KEY / _REGION
 * (path-style). MODE "small": records up to 3,000 bytes, segments far below the multipart
 * threshold; "big": records up to 128 KiB, persist-delay 20 ms, multipart-threshold and
 * part-size 5mb, so many segments are multipart uploads and kills land amid their parts.
 * A persist that fails (the remote store) is not fatal there: the checkpoint is skipped and
 * the next persist sends the records again. The remote crash test verifies with DIR a new,
 * empty dir: every byte then comes from S3.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dstl.h"
#include "tests/payload.h"

#define WRITERS 4
#define NKG 16
#define BIG_RECORD_MAX (128u << 10)

static const char *g_handles;
static const char *g_remote;    /* NULL: local only */
static int g_big;               /* MODE big */
static int g_acks;              /* run-acks: report handles on stdout, never discard */
static pthread_mutex_t g_out_mu = PTHREAD_MUTEX_INITIALIZER;

static size_t record_max(void) { return g_big ? BIG_RECORD_MAX : 3000; }

/* Record seq of writer wid is the PAYLOAD_RANDOM payload of stream wid, index seq
 * (tests/payload.h), shorter than record_max(); in key group seq % NKG. */
static size_t record_len_max(void) { return record_max() - 1; }

/* Whether rec is record seq of writer wid, byte for byte. */
static int record_ok(uint32_t wid, uint64_t seq, const dstl_record *rec)
{
    size_t len = payload_len(wid, seq, record_len_max());
    return rec->seq == seq && rec->len == len && rec->key_group == seq % NKG &&
           payload_check(PAYLOAD_RANDOM, wid, seq, rec->data, len) == len;
}

static void die(const char *what)
{
    fprintf(stderr, "crash_child: %s: %s\n", what, dstl_last_error());
    exit(2);
}

static void write_handle(uint32_t wid, const dstl_handle *h)
{
    void *buf;
    size_t len;
    if (dstl_handle_serialize(h, &buf, &len) < 0) die("serialize");
    char tmp[4096], path[4096];
    snprintf(tmp, sizeof tmp, "%s/w%u.tmp", g_handles, wid);
    snprintf(path, sizeof path, "%s/w%u.handle", g_handles, wid);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, buf, len) != (ssize_t)len || fsync(fd) < 0) die("write handle file");
    close(fd);
    free(buf);
    if (rename(tmp, path) < 0) die("rename handle file");
    int dfd = open(g_handles, O_RDONLY | O_DIRECTORY);
    if (dfd < 0 || fsync(dfd) < 0) die("fsync handle dir");
    close(dfd);
}

/* run-acks: the handle goes to the parent as one line, written whole (one write(2) under a
 * lock, so lines of different writers never interleave). A line cut short by the kill has no
 * newline: the parent never saw that acknowledgement. */
static void report_ack(uint32_t wid, uint64_t cp, const dstl_handle *h)
{
    void *buf;
    size_t len;
    if (dstl_handle_serialize(h, &buf, &len) < 0) die("serialize");
    size_t cap = len * 2 + 64;
    char *line = malloc(cap);
    if (!line) die("out of memory");
    int n = snprintf(line, cap, "ack %u %" PRIu64 " ", wid, cp);
    for (size_t i = 0; i < len; i++) n += snprintf(line + n, cap - (size_t)n, "%02x", ((uint8_t *)buf)[i]);
    line[n++] = '\n';
    free(buf);
    pthread_mutex_lock(&g_out_mu);
    for (size_t off = 0; off < (size_t)n;) {
        ssize_t w = write(1, line + off, (size_t)n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            fprintf(stderr, "crash_child: reporting an ack: %s\n", strerror(errno));
            exit(2);
        }
        off += (size_t)w;
    }
    pthread_mutex_unlock(&g_out_mu);
    free(line);
}

typedef struct {
    dstl_storage *s;
    uint32_t wid;
    uint64_t seed;
} job;

static void *writer_main(void *arg)
{
    job *j = arg;
    char id[16];
    snprintf(id, sizeof id, "w%u", j->wid);
    dstl_writer *w;
    if (dstl_writer_open(j->s, id, 0, NKG - 1, &w) < 0) die("writer open");
    uint8_t *buf = malloc(record_max());
    dstl_handle *prev = NULL;
    uint64_t mat = 0, x = j->seed * 2654435761u + j->wid;
    for (uint64_t cp = 1;; cp++) {
        x = x * 6364136223846793005ull + 1;
        int n = 1 + (int)((x >> 33) % 60);
        for (int i = 0; i < n; i++) {
            uint64_t seq = dstl_writer_next_seq(w);
            size_t len = payload_make(PAYLOAD_RANDOM, j->wid, seq, record_len_max(), buf);
            if (dstl_append(w, (uint32_t)(seq % NKG), buf, len) < 0) die("append");
        }
        dstl_future *f;
        if (dstl_persist(w, mat, cp, &f) < 0) die("persist");
        if (dstl_future_wait(f, -1) < 0) die("wait");
        dstl_handle *h;
        if (dstl_future_result(f, &h) < 0) {
            if (!g_remote) die("persist result");
            /* the remote store failed this checkpoint: the records stay for the next one */
            fprintf(stderr, "crash_child: checkpoint %" PRIu64 " of w%u failed: %s\n", cp, j->wid,
                    dstl_last_error());
            dstl_future_free(f);
            continue;
        }
        dstl_future_free(f);
        if (g_acks) {                      /* the coordinator has it; it stays live */
            report_ack(j->wid, cp, h);
            dstl_handle_free(h);
            goto next;
        }
        write_handle(j->wid, h);           /* the checkpoint is complete ... */
        if (prev) {                        /* ... and only then the previous one goes */
            dstl_handle_discard(j->s, prev);
            dstl_handle_free(prev);
        }
        prev = h;
    next:
        if (cp % 7 == 0) {                 /* materialize */
            mat = dstl_writer_next_seq(w);
            if (dstl_truncate(w, mat) < 0) die("truncate");
        }
    }
    return NULL;
}

/* The config of DIR, and in remote mode of the remote store (g_remote, the DSTL_T_S3_* env). */
static dstl_config *config_for(const char *dir)
{
    dstl_config *c;
    if (dstl_config_new(&c) < 0 || dstl_config_set(c, "dstl.local.dir", dir) < 0) die("config");
    if (!g_remote) return c;
    static const char *const env_keys[][2] = {{"DSTL_T_S3_ENDPOINT", "dstl.s3.endpoint"},
                                              {"DSTL_T_S3_ACCESS_KEY", "dstl.s3.access-key"},
                                              {"DSTL_T_S3_SECRET_KEY", "dstl.s3.secret-key"},
                                              {"DSTL_T_S3_REGION", "dstl.s3.region"}};
    for (size_t i = 0; i < sizeof env_keys / sizeof env_keys[0]; i++) {
        const char *v = getenv(env_keys[i][0]);
        if (!v || !*v) {
            if (i == 3) continue;
            fprintf(stderr, "crash_child: %s is not set (remote mode)\n", env_keys[i][0]);
            exit(2);
        }
        if (dstl_config_set(c, env_keys[i][1], v) < 0) die("config");
    }
    /* short leases: a killed child's run counts as dead 500 ms after its last refresh, so the
     * crash test's gc can sweep its orphans (the test waits that long, and sets the same) */
    if (dstl_config_set(c, "dstl.remote.lease-refresh", "100ms") < 0 ||
        dstl_config_set(c, "dstl.remote.lease-timeout", "500ms") < 0)
        die("config");
    if (dstl_config_set(c, "dstl.remote.uri", g_remote) < 0 || dstl_config_set(c, "dstl.durability", "remote") < 0 ||
        dstl_config_set(c, "dstl.s3.path-style", "true") < 0)
        die("config");
    if (g_big && (dstl_config_set(c, "dstl.upload.multipart-threshold", "5mb") < 0 ||
                  dstl_config_set(c, "dstl.upload.part-size", "5mb") < 0))
        die("config");
    return c;
}

static int run(const char *dir, const char *engine, uint64_t seed)
{
    dstl_config *c = config_for(dir);
    if (dstl_config_set(c, "dstl.io.engine", engine) < 0 ||
        dstl_config_set(c, "dstl.batch.persist-delay", g_big ? "20ms" : seed % 2 ? "0" : "2ms") < 0)
        die("config");
    dstl_storage *s;
    if (dstl_storage_open(c, &s) < 0) die("storage open");
    pthread_t th[WRITERS];
    job jobs[WRITERS];
    for (uint32_t i = 0; i < WRITERS; i++) {
        jobs[i] = (job){s, i, seed};
        pthread_create(&th[i], NULL, writer_main, &jobs[i]);
    }
    if (!g_acks) {
        printf("running\n");
        fflush(stdout);
    }
    for (uint32_t i = 0; i < WRITERS; i++) pthread_join(th[i], NULL);   /* until killed */
    return 0;
}

static int read_file(const char *path, void **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    *buf = malloc(1 << 20);
    *len = fread(*buf, 1, 1 << 20, f);
    fclose(f);
    return 0;
}

static int verify(const char *dir, int exact)
{
    dstl_config *c = config_for(dir);
    dstl_storage *s;
    if (dstl_storage_open(c, &s) < 0) die("storage open");
    dstl_handle *live[WRITERS];
    size_t nlive = 0;
    int bad = 0;
    uint64_t records = 0;
    for (uint32_t wid = 0; wid < WRITERS; wid++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/w%u.handle", g_handles, wid);
        void *buf;
        size_t len;
        if (read_file(path, &buf, &len) < 0) continue;     /* killed before its first checkpoint */
        dstl_handle *h;
        if (dstl_handle_parse(buf, len, &h) < 0) {
            fprintf(stderr, "verify: %s: %s\n", path, dstl_last_error());
            bad = 1;
            free(buf);
            continue;
        }
        free(buf);
        live[nlive++] = h;
        dstl_reader *r;
        if (dstl_reader_open(s, h, 0, NKG - 1, &r) < 0) die("reader open");
        uint64_t seq = dstl_handle_from_seq(h);
        dstl_record rec;
        int rc;
        while ((rc = dstl_reader_next(r, &rec)) == 1) {
            if (!record_ok(wid, seq, &rec)) {
                fprintf(stderr, "verify: writer %u: record %" PRIu64 " (got seq %" PRIu64 ") differs\n", wid, seq,
                        rec.seq);
                bad = 1;
                break;
            }
            seq++;
            records++;
        }
        if (rc < 0) {
            fprintf(stderr, "verify: writer %u: %s\n", wid, dstl_last_error());
            bad = 1;
        } else if (rc == 0 && seq != dstl_handle_to_seq(h)) {
            fprintf(stderr, "verify: writer %u: records end at %" PRIu64 ", handle says %" PRIu64 "\n", wid, seq,
                    dstl_handle_to_seq(h));
            bad = 1;
        }
        dstl_reader_close(r);
    }
    if (dstl_storage_close(s) < 0) die("close");
    if (exact) {
        /* After `dstl gc` with these handles as the live set, exactly the segments they
         * reference remain: a dry run on a new storage finds nothing more to delete, and
         * what it keeps for the live set is every segment file on disk. */
        size_t remaining = 0;
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            size_t l = strlen(e->d_name);
            if (l >= 4 && !strcmp(e->d_name + l - 4, ".seg")) remaining++;
        }
        if (d) closedir(d);
        dstl_gc_report rep;
        if (dstl_storage_open(c, &s) < 0) die("storage reopen");
        if (dstl_gc(s, (const dstl_handle *const *)live, nlive, 0, 1, &rep) < 0) die("gc dry run");
        dstl_storage_close(s);
        if (rep.deleted != 0 || rep.kept_live != remaining) {
            fprintf(stderr, "verify: %zu segment files remain, %" PRIu64 " referenced, %" PRIu64 " deletable\n",
                    remaining, rep.kept_live, rep.deleted);
            bad = 1;
        }
        printf("exact: %zu segment files, all referenced by the live handles\n", remaining);
    }
    printf("verified %zu handles, %" PRIu64 " records: %s\n", nlive, records, bad ? "FAILED" : "ok");
    for (size_t i = 0; i < nlive; i++) dstl_handle_free(live[i]);
    dstl_config_free(c);
    return bad;
}

static int hex_val(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Checks h's records against what writer wid appended; 0, or 1 naming the loss on stderr. */
static int check_handle(dstl_storage *s, const dstl_handle *h, uint32_t wid, uint64_t cp, uint64_t *records)
{
    dstl_reader *r;
    if (dstl_reader_open(s, h, 0, NKG - 1, &r) < 0) {
        fprintf(stderr, "verify-acks: writer %u checkpoint %" PRIu64 ": reader: %s\n", wid, cp, dstl_last_error());
        return 1;
    }
    uint64_t seq = dstl_handle_from_seq(h);
    dstl_record rec;
    int rc, bad = 0;
    while ((rc = dstl_reader_next(r, &rec)) == 1) {
        if (!record_ok(wid, seq, &rec)) {
            fprintf(stderr, "verify-acks: writer %u checkpoint %" PRIu64 ": record %" PRIu64 " (got seq %" PRIu64
                            ", %zu bytes) differs\n", wid, cp, seq, rec.seq, rec.len);
            bad = 1;
            break;
        }
        seq++;
        (*records)++;
    }
    if (rc < 0) {
        fprintf(stderr, "verify-acks: writer %u checkpoint %" PRIu64 ": at record %" PRIu64 ": %s\n", wid, cp, seq,
                dstl_last_error());
        bad = 1;
    } else if (!bad && seq != dstl_handle_to_seq(h)) {
        fprintf(stderr, "verify-acks: writer %u checkpoint %" PRIu64 ": records end at %" PRIu64 ", handle says %"
                        PRIu64 "\n", wid, cp, seq, dstl_handle_to_seq(h));
        bad = 1;
    }
    dstl_reader_close(r);
    return bad;
}

static int verify_acks(const char *dir, const char *file)
{
    FILE *in = fopen(file, "r");
    if (!in) {
        fprintf(stderr, "verify-acks: %s: %s\n", file, strerror(errno));
        return 2;
    }
    dstl_config *c = config_for(dir);
    dstl_storage *s;
    if (dstl_storage_open(c, &s) < 0) die("storage open");
    char *line = NULL;
    size_t cap = 0, handles = 0, lost = 0, lineno = 0;
    uint64_t records = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, in)) > 0) {
        lineno++;
        unsigned wid;
        uint64_t cp;
        int hex_at = 0;
        if (sscanf(line, "ack %u %" SCNu64 " %n", &wid, &cp, &hex_at) != 2 || hex_at == 0 || wid >= WRITERS) {
            fprintf(stderr, "verify-acks: %s:%zu: not an ack line\n", file, lineno);
            exit(2);
        }
        const char *hex = line + hex_at;
        size_t hl = strcspn(hex, "\n");
        uint8_t *bytes = malloc(hl / 2 + 1);
        size_t len = 0;
        for (size_t i = 0; i < hl; i += 2) {
            int hi = hex_val(hex[i]), lo = i + 1 < hl ? hex_val(hex[i + 1]) : -1;
            if (hi < 0 || lo < 0) {
                fprintf(stderr, "verify-acks: %s:%zu: bad hex at column %zu\n", file, lineno, (size_t)hex_at + i + 1);
                exit(2);
            }
            bytes[len++] = (uint8_t)(hi << 4 | lo);
        }
        dstl_handle *h;
        if (dstl_handle_parse(bytes, len, &h) < 0) {
            fprintf(stderr, "verify-acks: %s:%zu: %s\n", file, lineno, dstl_last_error());
            exit(2);
        }
        free(bytes);
        char id[16];
        snprintf(id, sizeof id, "w%u", wid);
        if (strcmp(dstl_handle_writer_id(h), id) != 0 || dstl_handle_checkpoint_id(h) != cp) {
            fprintf(stderr, "verify-acks: %s:%zu: the handle is of %s checkpoint %" PRIu64 ", the line says %s %"
                            PRIu64 "\n", file, lineno, dstl_handle_writer_id(h), dstl_handle_checkpoint_id(h), id, cp);
            exit(2);
        }
        handles++;
        lost += (size_t)check_handle(s, h, wid, cp, &records);
        dstl_handle_free(h);
    }
    free(line);
    fclose(in);
    if (dstl_storage_close(s) < 0) die("close");
    dstl_config_free(c);
    printf("verify-acks: %zu handles, %" PRIu64 " records checked, %zu handles lost\n", handles, records, lost);
    return lost ? 1 : 0;
}

/* [REMOTE_URI MODE] at argv[first]: remote mode. 0, or -1 for a bad mode. */
static int remote_args(int argc, char **argv, int first)
{
    if (argc == first) return 0;
    if (argc != first + 2 || strncmp(argv[first], "s3://", 5) != 0) return -1;
    g_remote = argv[first];
    if (!strcmp(argv[first + 1], "big")) g_big = 1;
    else if (strcmp(argv[first + 1], "small")) return -1;
    return 0;
}

int main(int argc, char **argv)
{
    if ((argc == 6 || argc == 8) && !strcmp(argv[1], "run") && remote_args(argc, argv, 6) == 0) {
        g_handles = argv[3];
        return run(argv[2], argv[4], strtoull(argv[5], NULL, 10));
    }
    if ((argc == 4 || argc == 6) && !strcmp(argv[1], "verify") && remote_args(argc, argv, 4) == 0) {
        g_handles = argv[3];
        return verify(argv[2], 0);
    }
    if (argc == 4 && !strcmp(argv[1], "exact")) {
        g_handles = argv[3];
        return verify(argv[2], 1);
    }
    if (argc == 5 && !strcmp(argv[1], "run-acks")) {
        g_acks = 1;
        return run(argv[2], argv[3], strtoull(argv[4], NULL, 10));
    }
    if (argc == 4 && !strcmp(argv[1], "verify-acks")) return verify_acks(argv[2], argv[3]);
    fprintf(stderr, "usage: crash_child run DIR HANDLES ENGINE SEED [s3://BUCKET/PREFIX small|big]\n"
                    "       crash_child verify DIR HANDLES [s3://BUCKET/PREFIX small|big]\n"
                    "       crash_child exact DIR HANDLES\n"
                    "       crash_child run-acks DIR ENGINE SEED\n"
                    "       crash_child verify-acks DIR FILE\n");
    return 2;
}
