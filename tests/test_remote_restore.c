/*
 * tests/test_remote_restore.c — restore plans (dstl_restore_plan): a whole job's readers
 * restoring at once from S3, each needed object fetched once; rescaled readers fetching only
 * their key groups; the memory/cache bound (bytes, files, fds) through a restore larger than
 * it, and the cache a killed run leaves trimmed at the next open (never a live run's); local
 * copies first, a bad or missing one read from S3 per segment.
 *
 * Segments are written by a storage with remote durability on the fixture's prefix (the real
 * upload path); the restore runs in a fresh storage whose local dir is another scratch dir
 * (the writer's deleted), unless a test reads the local copies.
 *
 * Records: writer w, seq n: a meta record when n % META_EVERY == 7, else a data record in key
 * group n % NKG; payload PAYLOAD_RANDOM of stream w, index n. Every read is checked record by
 * record (check_reader: no Criterion calls, reader threads use it).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dstl.h"
#include "helpers.h"
#include "helpers_dstl.h"
#include "helpers_remote.h"
#include "payload.h"
#include "dstl/handle.h"
#include "wire/wire.h"

#define NKG 16u
#define META_EVERY 50u
#define MAXW 64

static t_remote fx;
static char *wdir, *rdir, *cdir;

static void setup(void)
{
    t_remote_init(&fx, "restore");
    wdir = t_mkdtemp("rs-w");
    rdir = t_mkdtemp("rs-r");
    cdir = t_mkdtemp("rs-c");
}

static void teardown(void)
{
    t_remote_fini(&fx);
    t_rm_rf(wdir);
    t_rm_rf(rdir);
    t_rm_rf(cdir);
    free(wdir);
    free(rdir);
    free(cdir);
}

TestSuite(remote_restore, .init = setup, .fini = teardown, .timeout = 240);

static int is_meta(uint64_t seq) { return seq % META_EVERY == 7; }

static int wanted(uint64_t seq, uint32_t kgf, uint32_t kgl)
{
    return is_meta(seq) || (seq % NKG >= kgf && seq % NKG <= kgl);
}

/* ---- writing ---- */

typedef struct {
    uint32_t nwriters, rounds;
    uint64_t per_round;
    size_t max_len;
    const char *persist_delay;
    dstl_handle *last[MAXW];     /* per writer: [0, everything) */
} job;

/* Each writer appends per_round records per round and persists from 0 after it (a checkpoint
 * over everything since the start); the last handles cover every segment. */
static void write_job(job *jb, const char *dir)
{
    dstl_storage *s = t_remote_open(&fx, dir, "dstl.batch.persist-delay", jb->persist_delay, NULL);
    dstl_writer *w[MAXW];
    uint8_t *buf = malloc(jb->max_len + 1);
    for (uint32_t i = 0; i < jb->nwriters; i++) {
        char id[16];
        snprintf(id, sizeof id, "task-%u", i);
        cr_assert_eq(dstl_writer_open(s, id, 0, NKG - 1, &w[i]), 0, "%s", dstl_last_error());
    }
    for (uint32_t round = 0; round < jb->rounds; round++) {
        dstl_future *f[MAXW];
        for (uint32_t i = 0; i < jb->nwriters; i++) {
            for (uint64_t k = 0; k < jb->per_round; k++) {
                uint64_t seq = dstl_writer_next_seq(w[i]);
                size_t len = payload_make(PAYLOAD_RANDOM, i, seq, jb->max_len, buf);
                int rc = is_meta(seq) ? dstl_append_meta(w[i], buf, len)
                                      : dstl_append(w[i], (uint32_t)(seq % NKG), buf, len);
                cr_assert_eq(rc, 0, "%s", dstl_last_error());
            }
            cr_assert_eq(dstl_persist(w[i], 0, round + 1, &f[i]), 0, "%s", dstl_last_error());
        }
        for (uint32_t i = 0; i < jb->nwriters; i++) {
            cr_assert_eq(dstl_future_wait(f[i], 60000), 0);
            dstl_handle *h = NULL;
            cr_assert_eq(dstl_future_result(f[i], &h), 0, "%s", dstl_last_error());
            dstl_future_free(f[i]);
            if (round + 1 == jb->rounds) jb->last[i] = h;
            else dstl_handle_free(h);
        }
    }
    free(buf);
    for (uint32_t i = 0; i < jb->nwriters; i++) cr_assert_eq(dstl_writer_close(w[i]), 0);
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());
}

static void job_free(job *jb)
{
    for (uint32_t i = 0; i < jb->nwriters; i++) dstl_handle_free(jb->last[i]);
}

/* The distinct segments the job's handles name, and their bytes: the objects a full restore
 * needs (counted from the handles, not from the plan). */
static size_t needed_objects(const job *jb, uint64_t *bytes)
{
    const char *names[4096];
    size_t n = 0;
    *bytes = 0;
    for (uint32_t i = 0; i < jb->nwriters; i++) {
        const wire_handle *wh = jb->last[i]->wh;
        for (size_t k = 0; k < wh->nsegs; k++) {
            size_t q = 0;
            while (q < n && strcmp(names[q], wh->segs[k].name) != 0) q++;
            if (q < n) continue;
            cr_assert_lt(n, 4096);
            names[n++] = wh->segs[k].name;
            *bytes += wh->segs[k].object_len;
        }
    }
    return n;
}

/* ---- reading ---- */

/* Reads r to its end and checks every record of writer wid's handle h over [kgf, kgl]: exactly
 * the meta records and the data records of those key groups, in seq order, with their
 * payloads. Returns the records read, the reader's error, or -1 with why[] saying what differs. */
static long check_reader(dstl_reader *r, const dstl_handle *h, uint32_t wid, uint32_t kgf, uint32_t kgl,
                         size_t max_len, char *why, size_t cap)
{
    uint64_t seq = dstl_handle_from_seq(h), to = dstl_handle_to_seq(h);
    long n = 0;
    int rc;
    dstl_record rec;
    for (;;) {
        while (seq < to && !wanted(seq, kgf, kgl)) seq++;
        if ((rc = dstl_reader_next(r, &rec)) <= 0) break;
        size_t len = payload_len(wid, seq, max_len);
        if (rec.seq != seq || rec.is_meta != is_meta(seq) || (!rec.is_meta && rec.key_group != seq % NKG) ||
            rec.len != len || payload_check(PAYLOAD_RANDOM, wid, seq, rec.data, len) != len) {
            snprintf(why, cap, "writer %u: record seq %lu (meta %d, kg %u, %zu bytes) is not the expected seq %lu", wid,
                     (unsigned long)rec.seq, rec.is_meta, rec.key_group, rec.len, (unsigned long)seq);
            return -1;
        }
        seq++;
        n++;
    }
    if (rc < 0) {
        snprintf(why, cap, "writer %u: %s", wid, dstl_last_error());
        return rc;
    }
    while (seq < to && !wanted(seq, kgf, kgl)) seq++;
    if (seq != to) {
        snprintf(why, cap, "writer %u: records from seq %lu on are missing", wid, (unsigned long)seq);
        return -1;
    }
    return n;
}

static long expected(const dstl_handle *h, uint32_t kgf, uint32_t kgl)
{
    long n = 0;
    for (uint64_t q = dstl_handle_from_seq(h); q < dstl_handle_to_seq(h); q++) n += wanted(q, kgf, kgl);
    return n;
}

/* A storage that restores: local dir `dir`, the fixture's S3 settings, local durability (it
 * writes nothing), then key/value pairs (NULL-terminated). */
static dstl_storage *open_restorer(const char *dir, ...)
{
    dstl_config *c = t_config(dir, NULL);
    t_remote_set_s3(&fx, c);
    va_list ap;
    va_start(ap, dir);
    const char *k;
    while ((k = va_arg(ap, const char *))) {
        const char *v = va_arg(ap, const char *);
        cr_assert_eq(dstl_config_set(c, k, v), 0, "%s: %s", k, dstl_last_error());
    }
    va_end(ap);
    dstl_storage *s = NULL;
    cr_assert_eq(dstl_storage_open(c, &s), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    return s;
}

/* One plan entry per writer (its last handle), all over [kgf, kgl]. */
static dstl_restore *plan_all(dstl_storage *s, const job *jb, uint32_t kgf, uint32_t kgl)
{
    dstl_restore_entry e[MAXW];
    for (uint32_t i = 0; i < jb->nwriters; i++)
        e[i] = (dstl_restore_entry){(const dstl_handle *const *)&jb->last[i], 1, kgf, kgl};
    dstl_restore *p = NULL;
    cr_assert_eq(dstl_restore_plan(s, e, jb->nwriters, &p), 0, "%s", dstl_last_error());
    return p;
}

typedef struct {
    dstl_restore *p;
    const job *jb;
    uint32_t wid, kgf, kgl;
    long n;
    char why[600];
} reader_arg;

static void *reader_thread(void *arg)
{
    reader_arg *a = arg;
    dstl_reader *r = NULL;
    a->n = dstl_restore_reader_open(a->p, a->wid, 0, &r);
    if (a->n < 0) {
        snprintf(a->why, sizeof a->why, "open: %s", dstl_last_error());
        return NULL;
    }
    a->n = check_reader(r, a->jb->last[a->wid], a->wid, a->kgf, a->kgl, a->jb->max_len, a->why, sizeof a->why);
    dstl_reader_close(r);
    return NULL;
}

/* Every writer's reader of plan p on its own thread at once; checks each one's records. */
static void restore_concurrently(dstl_restore *p, const job *jb, uint32_t kgf, uint32_t kgl)
{
    pthread_t th[MAXW];
    reader_arg a[MAXW];
    for (uint32_t i = 0; i < jb->nwriters; i++) {
        a[i] = (reader_arg){.p = p, .jb = jb, .wid = i, .kgf = kgf, .kgl = kgl};
        cr_assert_eq(pthread_create(&th[i], NULL, reader_thread, &a[i]), 0);
    }
    for (uint32_t i = 0; i < jb->nwriters; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(a[i].n, expected(jb->last[i], kgf, kgl), "writer %u: %ld records (%s)", i, a[i].n, a[i].why);
    }
}

/* Every writer's reader of plan p, one after the other on this thread. */
static void restore_in_turn(dstl_restore *p, const job *jb, uint32_t kgf, uint32_t kgl)
{
    for (uint32_t i = 0; i < jb->nwriters; i++) {
        reader_arg a = {.p = p, .jb = jb, .wid = i, .kgf = kgf, .kgl = kgl};
        reader_thread(&a);
        cr_expect_eq(a.n, expected(jb->last[i], kgf, kgl), "writer %u: %ld records (%s)", i, a.n, a.why);
    }
}

static dstl_restore_stats rstats(dstl_restore *p)
{
    dstl_restore_stats st;
    cr_assert_eq(dstl_restore_get_stats(p, &st), 0);
    return st;
}

/* The plan's counters on stderr: what a failing bound was measured against. */
static void show(const char *what, const dstl_restore_stats *st)
{
    fprintf(stderr, "%s: objects %lu (%lu bytes, %lu local), fetched from %lu, GETs %lu, bytes fetched %lu, "
            "delivered %lu, hits %lu, direct %lu, held peak %lu\n", what, (unsigned long)st->objects,
            (unsigned long)st->object_bytes, (unsigned long)st->local_segments, (unsigned long)st->objects_fetched,
            (unsigned long)st->get_requests, (unsigned long)st->bytes_fetched, (unsigned long)st->bytes_delivered,
            (unsigned long)st->cache_hits, (unsigned long)st->direct_reads, (unsigned long)st->held_peak_bytes);
}

/* ---- a whole job at once ---- */

Test(remote_restore, sixty_four_readers_fetch_each_object_once)
{
    job jb = {.nwriters = 64, .rounds = 3, .per_round = 200, .max_len = 400, .persist_delay = "20ms"};
    write_job(&jb, wdir);
    t_rm_rf(wdir);
    uint64_t need_bytes;
    size_t need = needed_objects(&jb, &need_bytes);
    size_t objects, uploads;
    t_remote_count(&fx, &objects, &uploads);
    cr_assert_eq(objects, need, "the bucket holds %zu segments, the handles name %zu", objects, need);
    dstl_storage *s = open_restorer(rdir, NULL);
    dstl_restore *p = plan_all(s, &jb, 0, NKG - 1);
    restore_concurrently(p, &jb, 0, NKG - 1);
    dstl_restore_stats st = rstats(p);
    show("64 readers", &st);
    cr_expect_eq(st.objects, need);
    cr_expect_eq(st.objects_fetched, need);
    cr_expect_leq(st.bytes_fetched * 100, need_bytes * 105, "fetched %lu bytes of %zu objects of %lu bytes",
                  (unsigned long)st.bytes_fetched, need, (unsigned long)need_bytes);
    cr_expect_geq(st.bytes_fetched, need_bytes * 9 / 10, "fetched %lu bytes: less than the records need",
                  (unsigned long)st.bytes_fetched);
    cr_expect_leq(st.get_requests * 10, need * 11, "%lu GETs for %zu objects", (unsigned long)st.get_requests, need);
    cr_expect_eq(st.direct_reads, 0, "%lu reads left to readers with a cache that needs no eviction",
                 (unsigned long)st.direct_reads);
    cr_expect_gt(st.bytes_delivered, 0);
    cr_expect_eq(st.held_bytes, 0, "%lu bytes still held after every reader closed", (unsigned long)st.held_bytes);
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
    dstl_stats ss;
    cr_assert_eq(dstl_storage_stats(s, &ss), 0);
    cr_expect_eq(ss.restores, 1);
    cr_expect_eq(ss.restore_requests, st.get_requests);
    cr_expect_eq(ss.restore_bytes_fetched, st.bytes_fetched);
    cr_expect_geq(ss.remote_requests, st.get_requests);
    cr_assert_eq(dstl_storage_close(s), 0);
    job_free(&jb);
}

/* ---- rescaling ---- */

Test(remote_restore, four_rescaled_tasks_each_fetch_about_a_quarter)
{
    /* 8 writers x 2 checkpoints of 1,500 records of up to 1,000 bytes: sections of ~750 KB,
     * key-group runs of ~45 KB; a quarter of the key groups is 4 adjacent runs. */
    job jb = {.nwriters = 8, .rounds = 2, .per_round = 1500, .max_len = 1000, .persist_delay = "20ms"};
    write_job(&jb, wdir);
    t_rm_rf(wdir);
    dstl_storage *full = open_restorer(rdir, NULL);
    dstl_restore *p = plan_all(full, &jb, 0, NKG - 1);
    restore_in_turn(p, &jb, 0, NKG - 1);
    dstl_restore_stats fst = rstats(p);
    show("full", &fst);
    uint64_t full_bytes = fst.bytes_fetched;
    cr_assert_eq(dstl_restore_close(p), 0);
    cr_assert_eq(dstl_storage_close(full), 0);
    cr_assert_gt(full_bytes, 0);
    for (uint32_t q = 0; q < 4; q++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/task%u", rdir, q);
        dstl_storage *s = open_restorer(dir, NULL);
        uint32_t kgf = q * NKG / 4, kgl = (q + 1) * NKG / 4 - 1;
        /* the new task's one entry: every old writer's handle, its key groups */
        dstl_restore_entry e = {(const dstl_handle *const *)jb.last, jb.nwriters, kgf, kgl};
        cr_assert_eq(dstl_restore_plan(s, &e, 1, &p), 0, "%s", dstl_last_error());
        for (uint32_t i = 0; i < jb.nwriters; i++) {
            dstl_reader *r = NULL;
            cr_assert_eq(dstl_restore_reader_open(p, 0, i, &r), 0, "%s", dstl_last_error());
            char why[600] = "";
            long n = check_reader(r, jb.last[i], i, kgf, kgl, jb.max_len, why, sizeof why);
            cr_expect_eq(n, expected(jb.last[i], kgf, kgl), "task %u, writer %u: %ld records (%s)", q, i, n, why);
            dstl_reader_close(r);
        }
        dstl_restore_stats st = rstats(p);
        show("quarter", &st);
        cr_expect_leq(st.bytes_fetched * 4 * 10, full_bytes * 13,
                      "task %u (key groups %u-%u) fetched %lu bytes; a full reader %lu", q, kgf, kgl,
                      (unsigned long)st.bytes_fetched, (unsigned long)full_bytes);
        cr_expect_gt(st.bytes_fetched * 4 * 10, full_bytes * 7, "task %u fetched %lu bytes: too few for its records",
                     q, (unsigned long)st.bytes_fetched);
        cr_assert_eq(dstl_restore_close(p), 0);
        cr_assert_eq(dstl_storage_close(s), 0);
    }
    job_free(&jb);
}
