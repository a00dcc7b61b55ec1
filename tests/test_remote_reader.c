/*
 * tests/test_remote_reader.c — recovery readers over S3 (ranged GETs, prefetch, the reader
 * cache) against the server tests/run.sh starts, and the cache on its own.
 *
 * Remote segments are made without the remote write path: a storage with local durability
 * writes them, each .seg file is PUT to the key remote_key() gives, and the handles are
 * re-encoded with a remote_uri (decode, set, encode, parse: the bytes stay CRC-valid). Then
 * the local directory is deleted and a fresh storage (local durability, dstl.s3.* set) reads
 * everything back.
 *
 * Records: writer `wid`, seq n: a meta record when n % META_EVERY == 7, else a data record in
 * key group n % NKG; payloads PAYLOAD_RANDOM of stream wid, index n (tests/payload.h). Every
 * read is checked record by record.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dstl.h"
#include "dstl/read/cache.h"
#include "dstl/remote/remote.h"
#include "dstl/seams.h"
#include "helpers.h"
#include "helpers_dstl.h"
#include "helpers_remote.h"
#include "payload.h"
#include "wire/wire.h"

#define NKG 16u
#define META_EVERY 50u

static t_remote fx;
static char *wdir, *rdir, *rdir2;

static void setup(void)
{
    t_remote_init(&fx, "reader");
    wdir = t_mkdtemp("rd-w");
    rdir = t_mkdtemp("rd-r");
    rdir2 = t_mkdtemp("rd-r2");
}

static void teardown(void)
{
    t_remote_fini(&fx);
    t_rm_rf(wdir);
    t_rm_rf(rdir);
    t_rm_rf(rdir2);
    free(wdir);
    free(rdir);
    free(rdir2);
}

TestSuite(remote_reader, .init = setup, .fini = teardown, .timeout = 120);

/* ---- records ---- */

static int is_meta(uint64_t seq) { return seq % META_EVERY == 7; }

static void append_mix(dstl_writer *w, uint32_t wid, uint64_t n, size_t max_len)
{
    uint8_t *buf = malloc(max_len + 1);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t seq = dstl_writer_next_seq(w);
        size_t len = payload_make(PAYLOAD_RANDOM, wid, seq, max_len, buf);
        int rc = is_meta(seq) ? dstl_append_meta(w, buf, len) : dstl_append(w, (uint32_t)(seq % NKG), buf, len);
        cr_assert_eq(rc, 0, "%s", dstl_last_error());
    }
    free(buf);
}

/* Reads h over [kgf, kgl] and checks every record: exactly the meta records and the data
 * records of those key groups, in seq order, with their payloads. Returns the number read,
 * the reader's error (its detail stays in dstl_last_error), or -1 with why[] saying which
 * record differs. No Criterion calls: reader threads use it. */
static long check_read(dstl_storage *s, const dstl_handle *h, uint32_t wid, uint32_t kgf, uint32_t kgl,
                       size_t max_len, char *why, size_t why_cap)
{
    dstl_reader *r = NULL;
    int rc = dstl_reader_open(s, h, kgf, kgl, &r);
    if (rc < 0) return rc;
    uint64_t seq = dstl_handle_from_seq(h), to = dstl_handle_to_seq(h);
    long n = 0;
    dstl_record rec;
    for (;;) {
        while (seq < to && !is_meta(seq) && !(seq % NKG >= kgf && seq % NKG <= kgl)) seq++;
        rc = dstl_reader_next(r, &rec);
        if (rc <= 0) break;
        size_t len = payload_len(wid, seq, max_len);
        if (rec.seq != seq || rec.is_meta != is_meta(seq) || (!rec.is_meta && rec.key_group != seq % NKG) ||
            rec.len != len || payload_check(PAYLOAD_RANDOM, wid, seq, rec.data, len) != len) {
            snprintf(why, why_cap, "writer %u: record seq %lu (meta %d, kg %u, %zu bytes) is not the expected seq %lu",
                     wid, (unsigned long)rec.seq, rec.is_meta, rec.key_group, rec.len, (unsigned long)seq);
            rc = -1;
            break;
        }
        seq++;
        n++;
    }
    if (rc == 0) {
        while (seq < to && !is_meta(seq) && !(seq % NKG >= kgf && seq % NKG <= kgl)) seq++;
        if (seq != to) {
            snprintf(why, why_cap, "writer %u: records from seq %lu on are missing", wid, (unsigned long)seq);
            rc = -1;
        }
    }
    dstl_reader_close(r);
    return rc < 0 ? rc : n;
}

static long verify(dstl_storage *s, const dstl_handle *h, uint32_t wid, uint32_t kgf, uint32_t kgl, size_t max_len)
{
    char why[512] = "";
    long n = check_read(s, h, wid, kgf, kgl, max_len, why, sizeof why);
    if (n == -1) cr_expect_fail("%s", why);
    return n;
}

/* ---- making remote segments ---- */

typedef struct {
    uint32_t nwriters, rounds;
    uint64_t per_round;
    size_t max_len;
    dstl_handle *first[4], *last[4];     /* per writer: [0, round 1) and [0, all) */
} scenario;

static dstl_handle *dup_handle(const dstl_handle *h)
{
    void *buf;
    size_t len;
    dstl_handle *out = NULL;
    cr_assert_eq(dstl_handle_serialize(h, &buf, &len), 0);
    cr_assert_eq(dstl_handle_parse(buf, len, &out), 0, "%s", dstl_last_error());
    free(buf);
    return out;
}

/* Writes the scenario's records with a local storage on wdir: each writer persists from 0
 * after each round (one segment per persist), so its last handle covers all its segments and
 * its first handle the first segment. */
static void write_local(scenario *sc)
{
    dstl_storage *s = t_storage_open(wdir, "dstl.batch.persist-delay", "0", NULL);
    dstl_writer *w[4];
    for (uint32_t i = 0; i < sc->nwriters; i++) {
        char id[16];
        snprintf(id, sizeof id, "op-%u", i);
        cr_assert_eq(dstl_writer_open(s, id, 0, NKG - 1, &w[i]), 0, "%s", dstl_last_error());
    }
    for (uint32_t round = 0; round < sc->rounds; round++) {
        for (uint32_t i = 0; i < sc->nwriters; i++) {
            append_mix(w[i], i, sc->per_round, sc->max_len);
            dstl_handle *h = t_persist(w[i], 0, round + 1);
            if (round == 0) sc->first[i] = h;
            if (round + 1 == sc->rounds) sc->last[i] = round == 0 ? dup_handle(h) : h;
            else if (round > 0) dstl_handle_free(h);
        }
    }
    for (uint32_t i = 0; i < sc->nwriters; i++) cr_assert_eq(dstl_writer_close(w[i]), 0);
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());
}

static void seg_key(const char *name, char *key, size_t cap)
{
    remote_loc loc;
    cr_assert_eq(remote_parse_uri(fx.uri, "test", &loc), 0);
    cr_assert_eq(remote_key(&loc, name, key, cap), 0);
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The non-empty segment files of wdir, sorted by name (= by segment number). */
static size_t list_segments(char **names, size_t cap)
{
    DIR *d = opendir(wdir);
    cr_assert(d);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 4, ".seg") != 0) continue;
        char p[4096];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", wdir, de->d_name);
        if (stat(p, &st) == 0 && st.st_size > 0 && n < cap) names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_name);
    return n;
}

/* PUTs every segment of wdir to its key, except `skip`; flips byte `flip_at` of `flip` first. */
static void upload(const char *skip, const char *flip, uint64_t flip_at)
{
    char *names[64];
    size_t n = list_segments(names, 64);
    cr_assert_gt(n, 0);
    for (size_t i = 0; i < n; i++) {
        if (!skip || strcmp(names[i], skip) != 0) {
            char p[4096], key[1024];
            snprintf(p, sizeof p, "%s/%s", wdir, names[i]);
            size_t len = 0;
            uint8_t *buf = t_read_file(p, &len);
            cr_assert(buf);
            if (flip && strcmp(names[i], flip) == 0) {
                cr_assert_lt(flip_at, len);
                buf[flip_at] ^= 0x40;
            }
            seg_key(names[i], key, sizeof key);
            s3_result res;
            cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, key, buf, len, false, &res), 0, "%s", res.error);
            free(buf);
        }
        free(names[i]);
    }
}

/* h with remote_uri the fixture's URI: through the bytes, as another process would get it. */
static dstl_handle *with_remote(dstl_handle *h)
{
    void *buf;
    size_t len;
    cr_assert_eq(dstl_handle_serialize(h, &buf, &len), 0);
    wire_handle *wh = NULL;
    wire_err e = {{0}};
    cr_assert_eq(wire_handle_decode(buf, len, &wh, &e), 0, "%s", e.msg);
    free(buf);
    free(wh->remote_uri);
    wh->remote_uri = strdup(fx.uri);
    cr_assert_eq(wire_handle_encode(wh, &buf, &len, &e), 0, "%s", e.msg);
    wire_handle_free(wh);
    dstl_handle *out = NULL;
    cr_assert_eq(dstl_handle_parse(buf, len, &out), 0, "%s", dstl_last_error());
    free(buf);
    dstl_handle_free(h);
    return out;
}

/* Writes, uploads and patches the scenario's handles; deletes wdir when delete_local. */
static void make_remote(scenario *sc, int delete_local)
{
    write_local(sc);
    upload(NULL, NULL, 0);
    for (uint32_t i = 0; i < sc->nwriters; i++) {
        sc->first[i] = with_remote(sc->first[i]);
        sc->last[i] = with_remote(sc->last[i]);
    }
    if (delete_local) t_rm_rf(wdir);
}

static void scenario_free(scenario *sc)
{
    for (uint32_t i = 0; i < sc->nwriters; i++) {
        dstl_handle_free(sc->first[i]);
        dstl_handle_free(sc->last[i]);
    }
}

/* A reading storage on dir with the test server's S3 settings (local durability: it writes
 * nothing remote), plus up to two more key/value pairs. */
static dstl_storage *open_rd(const char *dir, const char *k1, const char *v1, const char *k2, const char *v2)
{
    dstl_config *c = t_config(dir, NULL);
    t_remote_set_s3(&fx, c);
    if (k1) cr_assert_eq(dstl_config_set(c, k1, v1), 0, "%s", dstl_last_error());
    if (k2) cr_assert_eq(dstl_config_set(c, k2, v2), 0, "%s", dstl_last_error());
    dstl_storage *s = NULL;
    cr_assert_eq(dstl_storage_open(c, &s), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    return s;
}

static dstl_stats stats(dstl_storage *s)
{
    dstl_stats st;
    cr_assert_eq(dstl_storage_stats(s, &st), 0);
    return st;
}

/* Records of h that a reader over [kgf, kgl] returns. */
static long expected(const dstl_handle *h, uint32_t kgf, uint32_t kgl)
{
    long n = 0;
    for (uint64_t q = dstl_handle_from_seq(h); q < dstl_handle_to_seq(h); q++)
        n += is_meta(q) || (q % NKG >= kgf && q % NKG <= kgl);
    return n;
}

/* Reads every writer's last handle over [kgf, kgl] and checks its records. */
static void verify_last(dstl_storage *s, const scenario *sc, uint32_t kgf, uint32_t kgl)
{
    for (uint32_t i = 0; i < sc->nwriters; i++) {
        long n = verify(s, sc->last[i], i, kgf, kgl, sc->max_len);
        cr_expect_eq(n, expected(sc->last[i], kgf, kgl), "writer %u, key groups %u-%u: %ld records (%s)", i, kgf,
                     kgl, n, dstl_last_error());
    }
}

/* ---- recovery from S3 ---- */

Test(remote_reader, recovery_with_local_dir_deleted_reads_everything_from_s3)
{
    scenario sc = {.nwriters = 3, .rounds = 3, .per_round = 400, .max_len = 300};
    make_remote(&sc, 1);
    dstl_storage *s = open_rd(rdir, NULL, NULL, NULL, NULL);
    for (uint32_t i = 0; i < sc.nwriters; i++) {
        long n = verify(s, sc.last[i], i, 0, NKG - 1, sc.max_len);
        cr_expect_eq(n, (long)(sc.rounds * sc.per_round), "writer %u: %ld records (%s)", i, n, dstl_last_error());
        n = verify(s, sc.first[i], i, 0, NKG - 1, sc.max_len);
        cr_expect_eq(n, (long)sc.per_round, "writer %u, first handle: %ld records (%s)", i, n, dstl_last_error());
    }
    dstl_stats st = stats(s);
    cr_expect_gt(st.remote_bytes_read, 0);
    cr_expect_gt(st.remote_requests, 0);
    cr_expect_eq(st.remote_failures, 0);
    cr_expect_eq(st.cache_misses, sc.nwriters * sc.rounds, "%lu misses", (unsigned long)st.cache_misses);
    cr_expect_eq(t_count_segments(rdir), 0, "the reading storage wrote segments");
    cr_assert_eq(dstl_storage_close(s), 0);
    scenario_free(&sc);
}

Test(remote_reader, half_of_the_key_groups_fetches_measurably_fewer_bytes)
{
    /* 3,000 records of up to 1,000 bytes per section (~1.5 MB): a key group's run is ~90 KiB,
     * so the gap between key groups 0-7 and the meta run (groups 8-15) is far above the merge
     * gap, and the 64 KiB tail read with each footer is small beside a section. */
    scenario sc = {.nwriters = 2, .rounds = 2, .per_round = 3000, .max_len = 1000};
    make_remote(&sc, 1);
    dstl_storage *all = open_rd(rdir, NULL, NULL, NULL, NULL);
    dstl_storage *half = open_rd(rdir2, NULL, NULL, NULL, NULL);
    verify_last(all, &sc, 0, NKG - 1);
    verify_last(half, &sc, 0, NKG / 2 - 1);
    uint64_t b_all = stats(all).remote_bytes_read, b_half = stats(half).remote_bytes_read;
    cr_expect_gt(b_half, 0);
    cr_expect_lt(b_half * 10, b_all * 6, "half of the key groups fetched %lu bytes, all of them %lu",
                 (unsigned long)b_half, (unsigned long)b_all);
    /* The upper half from the same storage: the meta runs and footers come from the cache. */
    verify_last(half, &sc, NKG / 2, NKG - 1);
    uint64_t b_upper = stats(half).remote_bytes_read - b_half;
    cr_expect_lt(b_upper * 10, b_all * 6, "the upper half of the key groups fetched %lu bytes, all of them %lu",
                 (unsigned long)b_upper, (unsigned long)b_all);
    cr_assert_eq(dstl_storage_close(all), 0);
    cr_assert_eq(dstl_storage_close(half), 0);
    scenario_free(&sc);
}

Test(remote_reader, handles_sharing_segments_fetch_them_once)
{
    scenario sc = {.nwriters = 1, .rounds = 2, .per_round = 500, .max_len = 400};
    make_remote(&sc, 1);
    dstl_storage *s = open_rd(rdir, NULL, NULL, NULL, NULL);
    cr_assert_eq(verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len), 1000);
    dstl_stats a = stats(s);
    cr_expect_eq(a.cache_misses, 2);
    /* The first handle's segment is the last handle's first one. */
    cr_assert_eq(verify(s, sc.first[0], 0, 0, NKG - 1, sc.max_len), 500);
    dstl_stats b = stats(s);
    cr_expect_eq(b.remote_bytes_read, a.remote_bytes_read, "the shared segment was fetched again");
    cr_expect_eq(b.remote_requests, a.remote_requests);
    cr_expect_eq(b.cache_hits, a.cache_hits + 1);
    cr_expect_eq(b.cache_misses, a.cache_misses);
    /* Two readers of the same handle open at once, read in turns: still nothing fetched. */
    dstl_reader *r1 = NULL, *r2 = NULL;
    cr_assert_eq(dstl_reader_open(s, sc.last[0], 0, NKG - 1, &r1), 0);
    cr_assert_eq(dstl_reader_open(s, sc.last[0], 0, NKG - 1, &r2), 0);
    dstl_record x, y;
    long n = 0;
    for (;;) {
        int rc1 = dstl_reader_next(r1, &x), rc2 = dstl_reader_next(r2, &y);
        cr_assert_eq(rc1, rc2, "%s", dstl_last_error());
        if (rc1 != 1) break;
        cr_assert(x.seq == y.seq && x.len == y.len && memcmp(x.data, y.data, x.len) == 0);
        n++;
    }
    cr_expect_eq(n, 1000);
    dstl_reader_close(r1);
    dstl_reader_close(r2);
    cr_expect_eq(stats(s).remote_bytes_read, a.remote_bytes_read);
    cr_assert_eq(dstl_storage_close(s), 0);
    scenario_free(&sc);
}

Test(remote_reader, local_copy_is_preferred_when_present)
{
    scenario sc = {.nwriters = 2, .rounds = 2, .per_round = 300, .max_len = 200};
    make_remote(&sc, 0);
    dstl_storage *s = open_rd(wdir, NULL, NULL, NULL, NULL);
    verify_last(s, &sc, 0, NKG - 1);
    dstl_stats st = stats(s);
    cr_expect_eq(st.remote_requests, 0);
    cr_expect_eq(st.remote_bytes_read, 0);
    cr_expect_eq(st.cache_hits + st.cache_misses, 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    scenario_free(&sc);
}

typedef struct {
    dstl_storage *s;
    const scenario *sc;
    long n[4];
    char why[512];
} reader_arg;

static void *reader_thread(void *p)
{
    reader_arg *a = p;
    for (uint32_t i = 0; i < a->sc->nwriters; i++)
        a->n[i] = check_read(a->s, a->sc->last[i], i, 0, NKG - 1, a->sc->max_len, a->why, sizeof a->why);
    return NULL;
}

Test(remote_reader, concurrent_readers_share_the_cache_and_clients)
{
    scenario sc = {.nwriters = 3, .rounds = 3, .per_round = 300, .max_len = 300};
    make_remote(&sc, 1);
    dstl_storage *s = open_rd(rdir, NULL, NULL, NULL, NULL);
    enum { NT = 4 };
    pthread_t th[NT];
    reader_arg a[NT];
    for (int t = 0; t < NT; t++) {
        a[t] = (reader_arg){.s = s, .sc = &sc};
        cr_assert_eq(pthread_create(&th[t], NULL, reader_thread, &a[t]), 0);
    }
    for (int t = 0; t < NT; t++) {
        pthread_join(th[t], NULL);
        for (uint32_t i = 0; i < sc.nwriters; i++)
            cr_expect_eq(a[t].n[i], 900, "thread %d, writer %u: %ld (%s)", t, i, a[t].n[i], a[t].why);
    }
    /* Everything is cached now: one more reader of each handle fetches nothing. */
    uint64_t before = stats(s).remote_bytes_read;
    cr_expect_gt(before, 0);
    verify_last(s, &sc, 0, NKG - 1);
    cr_expect_eq(stats(s).remote_bytes_read, before);
    cr_assert_eq(dstl_storage_close(s), 0);
    scenario_free(&sc);
}

/* ---- failures ---- */

Test(remote_reader, corrupted_remote_object_is_ecorrupt_naming_it)
{
    scenario sc = {.nwriters = 1, .rounds = 1, .per_round = 200, .max_len = 100};
    write_local(&sc);
    char *names[4];
    cr_assert_eq(list_segments(names, 4), 1);
    upload(NULL, names[0], WIRE_SEG_HEADER_LEN + 40);     /* inside the first section */
    sc.last[0] = with_remote(sc.last[0]);
    sc.first[0] = with_remote(sc.first[0]);
    t_rm_rf(wdir);
    dstl_storage *s = open_rd(rdir, NULL, NULL, NULL, NULL);
    char key[1024], uri[1200];
    seg_key(names[0], key, sizeof key);
    snprintf(uri, sizeof uri, "s3://%s/%s", fx.bucket, key);
    dstl_reader *r = NULL;
    cr_assert_eq(dstl_reader_open(s, sc.last[0], 0, NKG - 1, &r), 0);
    dstl_record rec;
    int rc = dstl_reader_next(r, &rec);
    cr_expect_eq(rc, DSTL_ECORRUPT, "rc %d: %s", rc, dstl_last_error());
    cr_expect(strstr(dstl_last_error(), uri) != NULL, "the error names no %s: %s", uri, dstl_last_error());
    cr_expect(strstr(dstl_last_error(), "offset") != NULL, "the error names no offset: %s", dstl_last_error());
    cr_expect_eq(dstl_reader_next(r, &rec), DSTL_ECORRUPT, "errors are sticky");
    dstl_reader_close(r);
    /* Nothing of it was cached: a second reader fails the same way. */
    cr_expect_eq(verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len), DSTL_ECORRUPT);
    cr_expect_eq(stats(s).cache_hits, 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    free(names[0]);
    scenario_free(&sc);
}

Test(remote_reader, missing_object_is_enoent_naming_it)
{
    scenario sc = {.nwriters = 1, .rounds = 2, .per_round = 200, .max_len = 100};
    write_local(&sc);
    char *names[4];
    cr_assert_eq(list_segments(names, 4), 2);
    upload(names[1], NULL, 0);
    sc.last[0] = with_remote(sc.last[0]);
    sc.first[0] = with_remote(sc.first[0]);
    t_rm_rf(wdir);
    dstl_storage *s = open_rd(rdir, NULL, NULL, NULL, NULL);
    char key[1024], uri[1200];
    seg_key(names[1], key, sizeof key);
    snprintf(uri, sizeof uri, "s3://%s/%s", fx.bucket, key);
    /* The records of the first segment come, then the error of the second. */
    dstl_reader *r = NULL;
    cr_assert_eq(dstl_reader_open(s, sc.last[0], 0, NKG - 1, &r), 0);
    dstl_record rec;
    int rc;
    long n = 0;
    while ((rc = dstl_reader_next(r, &rec)) == 1) n++;
    cr_expect_eq(n, 200);
    cr_expect_eq(rc, -ENOENT, "rc %d: %s", rc, dstl_last_error());
    cr_expect(strstr(dstl_last_error(), uri) != NULL, "the error names no %s: %s", uri, dstl_last_error());
    dstl_reader_close(r);
    cr_expect_eq(verify(s, sc.first[0], 0, 0, NKG - 1, sc.max_len), 200, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0);
    for (int i = 0; i < 2; i++) free(names[i]);
    scenario_free(&sc);
}

/* ---- a bad local copy: the object instead ---- */

/* Flips one byte (xor 0x40) of wdir/name at offset at. */
static void flip_local(const char *name, uint64_t at)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", wdir, name);
    int fd = open(p, O_RDWR);
    cr_assert_geq(fd, 0, "open %s", p);
    uint8_t b;
    cr_assert_eq(pread(fd, &b, 1, (off_t)at), 1, "%s: no byte at %lu", p, (unsigned long)at);
    b ^= 0x40;
    cr_assert_eq(pwrite(fd, &b, 1, (off_t)at), 1);
    close(fd);
}

/* The footer offset of wdir/name, from its trailer. */
static uint64_t local_footer_offset(const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", wdir, name);
    size_t len = 0;
    uint8_t *buf = t_read_file(p, &len);
    cr_assert(buf && len > WIRE_SEG_TRAILER_LEN, "%s", p);
    uint64_t foff;
    uint32_t flen, fcrc;
    wire_err e = {{0}};
    cr_assert_eq(wire_trailer_parse(buf + len - WIRE_SEG_TRAILER_LEN, WIRE_SEG_TRAILER_LEN, len, &foff, &flen, &fcrc, &e),
                 0, "%s", e.msg);
    free(buf);
    return foff;
}

/* Makes a known failure and returns its detail: a successful read must leave it in place. */
static void known_failure(dstl_storage *s, const dstl_handle *h, char *out, size_t cap)
{
    dstl_reader *r = NULL;
    cr_assert_eq(dstl_reader_open(s, h, 9, 2, &r), -EINVAL);
    snprintf(out, cap, "%s", dstl_last_error());
    cr_assert(strstr(out, "9-2"), "detail: %s", out);
}

/* One writer, one segment, remote copy good, local copy with byte `at` flipped (at_footer: at is
 * relative to the footer): every record reads back exactly, from S3, with one fallback counted,
 * and the successful read leaves dstl_last_error() as it was. */
static void local_flip_reads_from_s3(uint64_t at, int at_footer)
{
    scenario sc = {.nwriters = 1, .rounds = 1, .per_round = 400, .max_len = 200};
    make_remote(&sc, 0);
    char *names[4];
    cr_assert_eq(list_segments(names, 4), 1);
    flip_local(names[0], at_footer ? local_footer_offset(names[0]) + at : at);
    dstl_storage *s = open_rd(wdir, NULL, NULL, NULL, NULL);
    char before[1024];
    known_failure(s, sc.last[0], before, sizeof before);
    long n = verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len);
    cr_expect_eq(n, 400, "%ld records (%s)", n, dstl_last_error());
    cr_expect_str_eq(dstl_last_error(), before, "a successful read changed the thread's error detail");
    dstl_stats st = stats(s);
    cr_expect_eq(st.local_read_fallbacks, 1, "%lu fallbacks", (unsigned long)st.local_read_fallbacks);
    cr_expect_gt(st.remote_bytes_read, 0, "nothing was read from S3");
    char *text = NULL;
    cr_assert_eq(dstl_storage_metrics(s, &text), 0);
    cr_expect(strstr(text, "\ndstl_local_read_fallbacks_total 1\n") != NULL, "metrics lack the fallback");
    free(text);
    cr_assert_eq(dstl_storage_close(s), 0);
    free(names[0]);
    scenario_free(&sc);
}

Test(remote_reader, local_copy_with_bad_section_bytes_is_read_from_s3)
{
    local_flip_reads_from_s3(WIRE_SEG_HEADER_LEN + 40, 0);
}

Test(remote_reader, local_copy_with_bad_footer_is_read_from_s3)
{
    local_flip_reads_from_s3(5, 1);
}

Test(remote_reader, local_copy_with_bad_trailer_is_read_from_s3)
{
    scenario sc = {.nwriters = 1, .rounds = 1, .per_round = 100, .max_len = 100};
    make_remote(&sc, 0);
    char *names[4];
    cr_assert_eq(list_segments(names, 4), 1);
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", wdir, names[0]);
    size_t len = 0;
    free(t_read_file(p, &len));
    flip_local(names[0], len - 2);              /* in the trailer's magic */
    dstl_storage *s = open_rd(wdir, NULL, NULL, NULL, NULL);
    cr_expect_eq(verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len), 100, "%s", dstl_last_error());
    cr_expect_eq(stats(s).local_read_fallbacks, 1);
    cr_assert_eq(dstl_storage_close(s), 0);
    free(names[0]);
    scenario_free(&sc);
}

Test(remote_reader, bad_later_segment_falls_back_after_local_records)
{
    /* Three segments; the last one's local copy is bad in a key-group run of its section. The
     * first two pieces come from the local copies, the third from S3. A reader that needs none of
     * the bad run's bytes reads everything locally. */
    scenario sc = {.nwriters = 1, .rounds = 3, .per_round = 300, .max_len = 200};
    make_remote(&sc, 0);
    char *names[4];
    cr_assert_eq(list_segments(names, 4), 3);
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", wdir, names[2]);
    size_t len = 0;
    uint8_t *buf = t_read_file(p, &len);
    wire_index *ix = NULL;
    wire_err e = {{0}};
    cr_assert_eq(wire_segment_open(buf, len, &ix, &e), 0, "%s", e.msg);
    const wire_section_info *sec = wire_index_section(ix, 0);
    const wire_kg_run *run = NULL;
    for (size_t i = 0; i < sec->nruns && !run; i++)
        if (!sec->runs[i].is_meta && sec->runs[i].key_group == 9) run = &sec->runs[i];
    cr_assert(run, "no run of key group 9");
    flip_local(names[2], sec->offset + run->offset + run->len / 2);
    wire_index_free(ix);
    free(buf);
    dstl_storage *s = open_rd(wdir, NULL, NULL, NULL, NULL);
    cr_expect_eq(verify(s, sc.last[0], 0, 0, 8, sc.max_len), expected(sc.last[0], 0, 8), "%s", dstl_last_error());
    dstl_stats st = stats(s);
    cr_expect_eq(st.local_read_fallbacks, 0, "a reader not needing the bad run fell back");
    cr_expect_eq(st.remote_requests, 0);
    cr_expect_eq(verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len), 900, "%s", dstl_last_error());
    st = stats(s);
    cr_expect_eq(st.local_read_fallbacks, 1, "%lu fallbacks", (unsigned long)st.local_read_fallbacks);
    cr_expect_gt(st.remote_requests, 0);
    /* The first segment is good: its handle is read locally, without another fallback. */
    cr_expect_eq(verify(s, sc.first[0], 0, 0, NKG - 1, sc.max_len), 300, "%s", dstl_last_error());
    cr_expect_eq(stats(s).local_read_fallbacks, 1);
    cr_assert_eq(dstl_storage_close(s), 0);
    for (int i = 0; i < 3; i++) free(names[i]);
    scenario_free(&sc);
}

/* CRC32C of run[0, len) with run[pos, pos + 4) = x (little-endian). */
static uint32_t crc_with(uint8_t *run, size_t len, size_t pos, uint32_t x)
{
    for (int k = 0; k < 4; k++) run[pos + k] = (uint8_t)(x >> (8 * k));
    return wire_crc32c(0, run, len);
}

/* Sets run[pos, pos + 4) so that the run's CRC32C is want. The CRC is affine in the message bits
 * over GF(2): the 32 unit vectors give the columns of a 32x32 system, solved by elimination. */
static void crc_forge(uint8_t *run, size_t len, size_t pos, uint32_t want)
{
    uint32_t base = crc_with(run, len, pos, 0), col[32], rows[32], rhs[32];
    for (int i = 0; i < 32; i++) col[i] = crc_with(run, len, pos, 1u << i) ^ base;
    for (int b = 0; b < 32; b++) {          /* row b: which x bits flip CRC bit b */
        rows[b] = 0;
        for (int i = 0; i < 32; i++) rows[b] |= ((col[i] >> b) & 1u) << i;
        rhs[b] = ((want ^ base) >> b) & 1u;
    }
    for (int c = 0; c < 32; c++) {
        int piv = -1;
        for (int b = c; b < 32 && piv < 0; b++)
            if (rows[b] >> c & 1u) piv = b;
        cr_assert_geq(piv, 0, "CRC system singular at column %d", c);
        uint32_t tr = rows[c], tt = rhs[c];
        rows[c] = rows[piv], rhs[c] = rhs[piv];
        rows[piv] = tr, rhs[piv] = tt;
        for (int b = 0; b < 32; b++)
            if (b != c && (rows[b] >> c & 1u)) rows[b] ^= rows[c], rhs[b] ^= rhs[c];
    }
    uint32_t x = 0;
    for (int c = 0; c < 32; c++) x |= rhs[c] << c;
    cr_assert_eq(crc_with(run, len, pos, x), want, "forged CRC");
}

static uint64_t get_varint(const uint8_t **p)
{
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) return v;
    }
}

Test(remote_reader, local_copy_failing_mid_piece_continues_from_s3)
{
    /* One piece of 6,000 records. In the local copy a record of key group 3 far past the first
     * 4,096 seqs (the iterator's first window) gets a seq varint that does not parse, and four
     * bytes after it restore the run's CRC: every check at open passes, the iteration fails
     * after thousands of records were returned. The piece continues from S3 after the last
     * returned record: no record repeated, none skipped. */
    scenario sc = {.nwriters = 1, .rounds = 1, .per_round = 6000, .max_len = 60};
    write_local(&sc);
    dstl_handle *local_only = dup_handle(sc.last[0]);
    upload(NULL, NULL, 0);
    sc.last[0] = with_remote(sc.last[0]);
    sc.first[0] = with_remote(sc.first[0]);
    char *names[4];
    cr_assert_eq(list_segments(names, 4), 1);
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", wdir, names[0]);
    size_t len = 0;
    uint8_t *buf = t_read_file(p, &len);
    wire_index *ix = NULL;
    wire_err e = {{0}};
    cr_assert_eq(wire_segment_open(buf, len, &ix, &e), 0, "%s", e.msg);
    const wire_section_info *sec = wire_index_section(ix, 0);
    cr_assert_eq(sec->compression, WIRE_COMP_NONE);
    const wire_kg_run *run = NULL;
    for (size_t i = 0; i < sec->nruns && !run; i++)
        if (!sec->runs[i].is_meta && sec->runs[i].key_group == 3) run = &sec->runs[i];
    cr_assert(run, "no run of key group 3");
    uint8_t *rb = buf + sec->offset + run->offset;
    const uint8_t *q = rb;
    uint64_t seq = sec->seq_first - 1, past = 0;
    uint8_t *victim = NULL;
    for (uint64_t k = 0; k < run->count && !victim; k++) {
        const uint8_t *at = q;
        seq += get_varint(&q) + 1;
        uint64_t plen = get_varint(&q);
        /* the cursor parses one record ahead of its window: skip two past the first window */
        if (seq >= sec->seq_first + 4096 && ++past > 2 && plen >= 12 && q - at == 2) victim = (uint8_t *)at;
        q += plen;
    }
    cr_assert(victim, "no record of key group 3 to corrupt past seq %lu", (unsigned long)(sec->seq_first + 4096));
    memset(victim, 0xff, 10);                       /* an 11th varint byte would be needed */
    crc_forge(rb, run->len, (size_t)(victim + 10 - rb), run->crc);
    cr_assert_eq(t_write_file(p, buf, len), 0);
    wire_index_free(ix);
    free(buf);

    dstl_storage *s = open_rd(wdir, NULL, NULL, NULL, NULL);
    /* Without a remote copy the failure shows where it is: records first, then the error. */
    dstl_reader *r = NULL;
    cr_assert_eq(dstl_reader_open(s, local_only, 0, NKG - 1, &r), 0);
    dstl_record rec;
    long got = 0;
    int rc;
    while ((rc = dstl_reader_next(r, &rec)) == 1) got++;
    dstl_reader_close(r);
    cr_assert_eq(rc, DSTL_ECORRUPT, "rc %d: %s", rc, dstl_last_error());
    cr_assert_gt(got, 4000, "the local copy failed after %ld records, not mid-piece", got);
    cr_expect(strstr(dstl_last_error(), "bad seq varint"), "%s", dstl_last_error());
    cr_expect_eq(stats(s).local_read_fallbacks, 0, "a local-only handle fell back");
    /* With it, every record exactly once. */
    cr_expect_eq(verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len), 6000, "%s", dstl_last_error());
    cr_expect_eq(stats(s).local_read_fallbacks, 1);
    cr_expect_eq(verify(s, sc.last[0], 0, 2, 5, sc.max_len), expected(sc.last[0], 2, 5), "%s", dstl_last_error());
    cr_expect_eq(stats(s).local_read_fallbacks, 2);
    cr_assert_eq(dstl_storage_close(s), 0);
    dstl_handle_free(local_only);
    free(names[0]);
    scenario_free(&sc);
}

/* Reads h to its end; returns the final result (0 or the error). */
static int read_to_end(dstl_storage *s, const dstl_handle *h, long *n)
{
    dstl_reader *r = NULL;
    int rc = dstl_reader_open(s, h, 0, NKG - 1, &r);
    if (rc < 0) return rc;
    dstl_record rec;
    *n = 0;
    while ((rc = dstl_reader_next(r, &rec)) == 1) ++*n;
    dstl_reader_close(r);
    return rc;
}

Test(remote_reader, bad_local_copy_and_bad_or_missing_object_name_both)
{
    /* Segment 0: both copies corrupt. Segment 1: the local copy corrupt, the object missing. */
    scenario sc = {.nwriters = 1, .rounds = 2, .per_round = 200, .max_len = 100};
    write_local(&sc);
    char *names[4];
    cr_assert_eq(list_segments(names, 4), 2);
    upload(names[1], names[0], WIRE_SEG_HEADER_LEN + 40);
    sc.last[0] = with_remote(sc.last[0]);
    sc.first[0] = with_remote(sc.first[0]);
    flip_local(names[0], WIRE_SEG_HEADER_LEN + 60);
    flip_local(names[1], WIRE_SEG_HEADER_LEN + 60);
    dstl_storage *s = open_rd(wdir, NULL, NULL, NULL, NULL);
    for (int i = 0; i < 2; i++) {
        char key[1024], uri[1200], path[4200];
        seg_key(names[i], key, sizeof key);
        snprintf(uri, sizeof uri, "s3://%s/%s", fx.bucket, key);
        snprintf(path, sizeof path, "%s/%s", wdir, names[i]);
        if (i == 1) flip_local(names[0], WIRE_SEG_HEADER_LEN + 60);   /* segment 0 good again */
        long n = 0;
        int rc = read_to_end(s, i == 0 ? sc.first[0] : sc.last[0], &n);
        cr_expect_eq(n, i == 0 ? 0 : 200, "segment %d: %ld records before the error", i, n);
        cr_expect_eq(rc, DSTL_ECORRUPT, "segment %d: rc %d: %s", i, rc, dstl_last_error());
        const char *d = dstl_last_error();
        cr_expect(strstr(d, path) != NULL, "segment %d: the error names no local copy %s: %s", i, path, d);
        cr_expect(strstr(d, uri) != NULL, "segment %d: the error names no %s: %s", i, uri, d);
        cr_expect(strstr(d, "offset") != NULL, "segment %d: the error names no offset: %s", i, d);
    }
    cr_expect_eq(stats(s).local_read_fallbacks, 2);
    cr_assert_eq(dstl_storage_close(s), 0);
    for (int i = 0; i < 2; i++) free(names[i]);
    scenario_free(&sc);
}

Test(remote_reader, local_only_handle_with_bad_local_copy_is_ecorrupt)
{
    scenario sc = {.nwriters = 1, .rounds = 1, .per_round = 200, .max_len = 100};
    write_local(&sc);                           /* handles without remote_uri */
    char *names[4];
    cr_assert_eq(list_segments(names, 4), 1);
    upload(NULL, NULL, 0);                      /* a good object exists, but the handle names none */
    flip_local(names[0], WIRE_SEG_HEADER_LEN + 40);
    dstl_storage *s = open_rd(wdir, NULL, NULL, NULL, NULL);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", wdir, names[0]);
    cr_expect_eq(verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len), DSTL_ECORRUPT);
    cr_expect(strstr(dstl_last_error(), path) != NULL, "the error names no %s: %s", path, dstl_last_error());
    dstl_stats st = stats(s);
    cr_expect_eq(st.local_read_fallbacks, 0);
    cr_expect_eq(st.remote_requests, 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    free(names[0]);
    scenario_free(&sc);
}

Test(remote_reader, successful_remote_read_keeps_the_last_error_detail)
{
    /* No local copy at all: the reader's probe of the local file fails (ENOENT), the object is
     * read; the call succeeds, so the thread's last failure detail must be the one before. */
    scenario sc = {.nwriters = 1, .rounds = 2, .per_round = 200, .max_len = 100};
    make_remote(&sc, 1);
    dstl_storage *s = open_rd(rdir, NULL, NULL, NULL, NULL);
    char before[1024];
    known_failure(s, sc.last[0], before, sizeof before);
    cr_expect_eq(verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len), 400);
    cr_expect_str_eq(dstl_last_error(), before, "a successful remote read changed the thread's error detail");
    cr_expect_gt(stats(s).remote_bytes_read, 0);
    cr_expect_eq(stats(s).local_read_fallbacks, 0, "a missing local copy is not a fallback");
    cr_assert_eq(dstl_storage_close(s), 0);
    scenario_free(&sc);
}

/* ---- the cache through readers ---- */

/* The cache files of storage s under its local dir. */
static void cache_run_dir(dstl_storage *s, const char *dir, char *out, size_t cap)
{
    snprintf(out, cap, "%s/cache/%s", dir, storage_run_id(s));
}

Test(remote_reader, corrupted_cache_files_are_refetched)
{
    scenario sc = {.nwriters = 1, .rounds = 2, .per_round = 300, .max_len = 300};
    make_remote(&sc, 1);
    dstl_storage *s = open_rd(rdir, NULL, NULL, NULL, NULL);
    cr_assert_eq(verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len), 600);
    uint64_t before = stats(s).remote_bytes_read;
    /* Flip a byte inside the cached sections of every cache file. */
    char run[4096];
    cache_run_dir(s, rdir, run, sizeof run);
    DIR *d = opendir(run);
    cr_assert(d, "no cache directory %s", run);
    struct dirent *de;
    int flipped = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", run, de->d_name);
        int fd = open(p, O_RDWR);
        cr_assert_geq(fd, 0);
        uint8_t b;
        off_t at = WIRE_SEG_HEADER_LEN + 64;
        cr_assert_eq(pread(fd, &b, 1, at), 1);
        b ^= 0x01;
        cr_assert_eq(pwrite(fd, &b, 1, at), 1);
        close(fd);
        flipped++;
    }
    closedir(d);
    cr_assert_eq(flipped, 2);
    cr_expect_eq(verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len), 600, "%s", dstl_last_error());
    cr_expect_gt(stats(s).remote_bytes_read, before, "the corrupted cached bytes were not fetched again");
    cr_assert_eq(dstl_storage_close(s), 0);
    scenario_free(&sc);
}

Test(remote_reader, cache_bounds_hold_through_readers)
{
    scenario sc = {.nwriters = 1, .rounds = 2, .per_round = 300, .max_len = 300};
    make_remote(&sc, 1);
    /* max-size of 1 byte: nothing fits, every read goes to S3. */
    dstl_storage *s = open_rd(rdir, "dstl.cache.max-size", "1", NULL, NULL);
    cr_assert_eq(verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len), 600);
    uint64_t once = stats(s).remote_bytes_read;
    cr_assert_eq(verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len), 600);
    cr_expect_eq(stats(s).remote_bytes_read, 2 * once, "%lu bytes, one read %lu",
                 (unsigned long)stats(s).remote_bytes_read, (unsigned long)once);
    cr_expect_eq(stats(s).cache_hits, 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    /* An idle timeout of 1 ms: what was cached is gone by the next reader. */
    s = open_rd(rdir, "dstl.cache.idle-timeout", "1ms", NULL, NULL);
    cr_assert_eq(verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len), 600);
    once = stats(s).remote_bytes_read;
    usleep(20 * 1000);
    cr_assert_eq(verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len), 600);
    cr_expect_eq(stats(s).remote_bytes_read, 2 * once, "%lu bytes, one read %lu",
                 (unsigned long)stats(s).remote_bytes_read, (unsigned long)once);
    cr_assert_eq(dstl_storage_close(s), 0);
    /* The default bounds keep it. */
    s = open_rd(rdir, NULL, NULL, NULL, NULL);
    cr_assert_eq(verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len), 600);
    once = stats(s).remote_bytes_read;
    cr_assert_eq(verify(s, sc.last[0], 0, 0, NKG - 1, sc.max_len), 600);
    cr_expect_eq(stats(s).remote_bytes_read, once);
    cr_assert_eq(dstl_storage_close(s), 0);
    scenario_free(&sc);
}

/* ---- the cache on its own ---- */

static read_cache *test_cache_new(const char *dir, const char *run, uint64_t max, uint64_t idle_ms)
{
    cache_opts o = {.dir = dir, .run_id = run, .max_size_bytes = max, .idle_timeout_ms = idle_ms};
    read_cache *c = NULL;
    cr_assert_eq(cache_new(&o, &c), 0);
    return c;
}

static int exists(const char *dir, const char *name)
{
    char p[8300];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

Test(remote_reader, cache_ranges_merge_and_hit_only_when_covered)
{
    read_cache *c = test_cache_new(rdir, "run1", 1 << 20, 600000);
    uint8_t src[100], dst[100];
    payload_fill(PAYLOAD_RANDOM, 7, 0, src, sizeof src);
    cache_entry *e = cache_acquire(c, "s3://b/k1");
    cr_assert(e);
    cr_expect_eq(cache_read(c, e, 0, 10, dst), 0);
    cache_insert(c, e, 1000, 40, src);
    cache_insert(c, e, 1040, 60, src + 40);
    cr_expect_eq(cache_bytes(c), 100);
    cr_assert_eq(cache_read(c, e, 1020, 50, dst), 1);
    cr_expect_arr_eq(dst, src + 20, 50);
    cr_expect_eq(cache_read(c, e, 990, 20, dst), 0, "a range sticking out hits");
    cr_expect_eq(cache_read(c, e, 1090, 20, dst), 0, "a range sticking out hits");
    cache_insert(c, e, 1020, 30, src + 20);
    cr_expect_eq(cache_bytes(c), 100, "an overlap counted twice");
    cache_invalidate(c, e);
    cr_expect_eq(cache_bytes(c), 0);
    cr_expect_eq(cache_read(c, e, 1020, 10, dst), 0);
    /* Another object of the same cache is separate. */
    cache_entry *f = cache_acquire(c, "s3://b/k2");
    cr_expect_eq(cache_read(c, f, 1020, 10, dst), 0);
    cache_release(c, f);
    cache_release(c, e);
    cache_free(c);
    cr_expect(!exists(rdir, "run1"), "the run directory stays after free");
    cr_expect(!exists(rdir, "run1.lock"), "the lock stays after free");
}

Test(remote_reader, cache_evicts_least_recent_unreferenced_beyond_max_size)
{
    read_cache *c = test_cache_new(rdir, "run1", 100, 600000);
    uint8_t src[60], dst[60];
    payload_fill(PAYLOAD_RANDOM, 9, 0, src, sizeof src);
    cache_entry *a = cache_acquire(c, "s3://b/a");
    cache_insert(c, a, 0, 60, src);
    cache_release(c, a);
    cache_entry *b = cache_acquire(c, "s3://b/b");
    cache_insert(c, b, 0, 60, src);
    cr_expect_eq(cache_bytes(c), 60, "a (unreferenced, least recent) should have gone");
    /* b is referenced: inserting c goes above max-size rather than removing b. */
    cache_entry *d = cache_acquire(c, "s3://b/c");
    cache_insert(c, d, 0, 60, src);
    cr_expect_eq(cache_bytes(c), 120);
    cr_assert_eq(cache_read(c, b, 0, 60, dst), 1);
    cr_expect_arr_eq(dst, src, 60);
    cache_release(c, b);
    cr_expect_eq(cache_bytes(c), 60, "b should go once released");
    cr_assert_eq(cache_read(c, d, 0, 60, dst), 1);
    cache_release(c, d);
    a = cache_acquire(c, "s3://b/a");
    cr_expect_eq(cache_read(c, a, 0, 60, dst), 0, "a was evicted but still hits");
    cache_release(c, a);
    /* A range larger than max-size is not kept at all. */
    uint8_t big[200] = {0};
    a = cache_acquire(c, "s3://b/big");
    cache_insert(c, a, 0, sizeof big, big);
    cr_expect_eq(cache_read(c, a, 0, 10, dst), 0);
    cache_release(c, a);
    cache_free(c);
}

Test(remote_reader, cache_drops_idle_entries_and_their_files)
{
    read_cache *c = test_cache_new(rdir, "run1", 1 << 20, 1);
    uint8_t src[32] = {1, 2, 3};
    cache_entry *e = cache_acquire(c, "s3://b/a");
    cache_insert(c, e, 0, sizeof src, src);
    char run[4200];
    snprintf(run, sizeof run, "%s/run1", rdir);
    cr_expect(exists(run, "0"), "no cache file");
    usleep(20 * 1000);
    cache_expire(c);
    cr_expect_eq(cache_entries(c), 1, "a referenced entry expired");
    cache_release(c, e);
    usleep(20 * 1000);
    cache_expire(c);
    cr_expect_eq(cache_entries(c), 0);
    cr_expect_eq(cache_bytes(c), 0);
    cr_expect(!exists(run, "0"), "the idle entry's file stays");
    cache_free(c);
}

Test(remote_reader, cache_removes_dead_runs_and_keeps_live_ones)
{
    const char *dead1 = "00000000000000d1", *dead2 = "00000000000000d2", *live = "00000000000000a1";
    char p[4096];
    /* A dead run: its directory with a cache file and an unlocked lock file. */
    snprintf(p, sizeof p, "%s/%s", rdir, dead1);
    cr_assert_eq(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/%s/0", rdir, dead1);
    cr_assert_eq(t_write_file(p, "x", 1), 0);
    snprintf(p, sizeof p, "%s/%s.lock", rdir, dead1);
    cr_assert_eq(t_write_file(p, "", 0), 0);
    /* Another dead one without a lock. */
    snprintf(p, sizeof p, "%s/%s", rdir, dead2);
    cr_assert_eq(mkdir(p, 0700), 0);
    /* A live run: its lock is held (flock on another open file description). */
    snprintf(p, sizeof p, "%s/%s", rdir, live);
    cr_assert_eq(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/%s.lock", rdir, live);
    int fd = open(p, O_RDWR | O_CREAT, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(flock(fd, LOCK_EX), 0);
    /* Not a run: never touched. */
    snprintf(p, sizeof p, "%s/notes", rdir);
    cr_assert_eq(mkdir(p, 0700), 0);

    read_cache *c = test_cache_new(rdir, "00000000000000f0", 1 << 20, 600000);
    cache_entry *e = cache_acquire(c, "s3://b/a");
    cache_insert(c, e, 0, 3, "abc");        /* the first insert makes the run dir and sweeps */
    cache_release(c, e);
    cr_expect(!exists(rdir, dead1));
    cr_expect(!exists(rdir, "00000000000000d1.lock"));
    cr_expect(!exists(rdir, dead2));
    cr_expect(exists(rdir, live));
    cr_expect(exists(rdir, "00000000000000a1.lock"));
    cr_expect(exists(rdir, "notes"));
    cr_expect(exists(rdir, "00000000000000f0"));
    cr_expect(exists(rdir, "00000000000000f0.lock"));
    cache_free(c);
    cr_expect(!exists(rdir, "00000000000000f0"));
    close(fd);
}
