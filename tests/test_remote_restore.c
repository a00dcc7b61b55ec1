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
#include "dstl/remote/remote.h"
#include "dstl/seams.h"
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
    const char *batch_bytes;     /* dstl.batch.persist-size-threshold; NULL: the default */
    dstl_handle *last[MAXW];     /* per writer: [0, everything) */
} job;

/* Each writer appends per_round records per round and persists from 0 after it (a checkpoint
 * over everything since the start); the last handles cover every segment. */
static void write_job(job *jb, const char *dir)
{
    dstl_storage *s = t_remote_open(&fx, dir, "dstl.batch.persist-delay", jb->persist_delay,
                                    "dstl.batch.persist-size-threshold", jb->batch_bytes ? jb->batch_bytes : "10mb", NULL);
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

/* What a reader of writer wid's handle over [kgf, kgl] must yield from seq on: exactly the
 * meta records and the data records of those key groups, in seq order, with their payloads. */
typedef struct {
    uint32_t wid, kgf, kgl;
    size_t max_len;
    uint64_t seq, to;
    long n;
} rec_check;

static rec_check check_start(const dstl_handle *h, uint32_t wid, uint32_t kgf, uint32_t kgl, size_t max_len)
{
    return (rec_check){wid, kgf, kgl, max_len, dstl_handle_from_seq(h), dstl_handle_to_seq(h), 0};
}

/* Checks rec, the reader's next record (rc 1), or its end (rc 0): 0, or -1 with why[] saying
 * what differs. */
static int check_next(rec_check *c, int rc, const dstl_record *rec, char *why, size_t cap)
{
    while (c->seq < c->to && !wanted(c->seq, c->kgf, c->kgl)) c->seq++;
    if (rc == 0) {
        if (c->seq == c->to) return 0;
        snprintf(why, cap, "writer %u: records from seq %lu on are missing", c->wid, (unsigned long)c->seq);
        return -1;
    }
    size_t len = payload_len(c->wid, c->seq, c->max_len);
    if (rec->seq != c->seq || rec->is_meta != is_meta(c->seq) || (!rec->is_meta && rec->key_group != c->seq % NKG) ||
        rec->len != len || payload_check(PAYLOAD_RANDOM, c->wid, c->seq, rec->data, len) != len) {
        snprintf(why, cap, "writer %u: record seq %lu (meta %d, kg %u, %zu bytes) is not the expected seq %lu", c->wid,
                 (unsigned long)rec->seq, rec->is_meta, rec->key_group, rec->len, (unsigned long)c->seq);
        return -1;
    }
    c->seq++;
    c->n++;
    return 0;
}

/* Reads r to its end and checks every record of writer wid's handle h over [kgf, kgl]
 * (check_next). Returns the records read, the reader's error, or -1 with why[] saying what
 * differs. */
static long check_reader(dstl_reader *r, const dstl_handle *h, uint32_t wid, uint32_t kgf, uint32_t kgl,
                         size_t max_len, char *why, size_t cap)
{
    rec_check c = check_start(h, wid, kgf, kgl, max_len);
    int rc;
    dstl_record rec;
    do {
        if ((rc = dstl_reader_next(r, &rec)) < 0) {
            snprintf(why, cap, "writer %u: %s", wid, dstl_last_error());
            return rc;
        }
        if (check_next(&c, rc, &rec, why, cap) < 0) return -1;
    } while (rc == 1);
    return c.n;
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
    dstl_restore_stats st;
    cr_assert_eq(dstl_restore_get_stats(p, &st), 0);
    if (st.objects > st.local_segments)     /* objects to fetch: the plan's own thread runs */
        cr_assert(t_thread_named("dstl-fetch"), "the plan's fetch thread is not named dstl-fetch");
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
            "delivered %lu, hits %lu, direct %lu, held peak %lu, memory touched %lu\n", what, (unsigned long)st->objects,
            (unsigned long)st->object_bytes, (unsigned long)st->local_segments, (unsigned long)st->objects_fetched,
            (unsigned long)st->get_requests, (unsigned long)st->bytes_fetched, (unsigned long)st->bytes_delivered,
            (unsigned long)st->cache_hits, (unsigned long)st->direct_reads, (unsigned long)st->held_peak_bytes,
            (unsigned long)st->memory_touched_bytes);
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
    /* what `dstl stats` prints: the Prometheus text's restore counters */
    char *text = NULL, want[128];
    cr_assert_eq(dstl_storage_metrics(s, &text), 0);
    snprintf(want, sizeof want, "dstl_restore_requests_total %lu\n", (unsigned long)st.get_requests);
    cr_expect(strstr(text, want), "no \"%s\" in the metrics", want);
    snprintf(want, sizeof want, "dstl_restore_bytes_delivered_total %lu\n", (unsigned long)st.bytes_delivered);
    cr_expect(strstr(text, want), "no \"%s\" in the metrics", want);
    free(text);
    cr_assert_eq(dstl_storage_close(s), 0);
    job_free(&jb);
}

Test(remote_restore, a_plan_fetches_ahead_of_its_readers_only_as_far_as_its_read_ahead)
{
    /* dstl.recovery.read-ahead 1 MiB, the cache bound 1 GB: before any reader opens, the plan
     * fetches its first record's bytes and then about 1 MiB more, and stops there (~3 MB of
     * objects); readers that then come get everything, once per object, with no read left to
     * them. (Without the window a plan fetched up to the cache bound ahead: all of it here,
     * 145-220 MB of memory touched in the bench's restores.) */
    job jb = {.nwriters = 8, .rounds = 4, .per_round = 400, .max_len = 500, .persist_delay = "20ms",
              .batch_bytes = "256kb"};
    write_job(&jb, wdir);
    t_rm_rf(wdir);
    uint64_t need_bytes;
    size_t need = needed_objects(&jb, &need_bytes);
    const uint64_t ahead = 1u << 20;
    cr_assert_gt(need_bytes, 2 * ahead + (1u << 20), "the restore (%lu bytes) is not larger than the window",
                 (unsigned long)need_bytes);
    dstl_storage *s = open_restorer(rdir, "dstl.recovery.read-ahead", "1mb", NULL);
    dstl_restore *p = plan_all(s, &jb, 0, NKG - 1);
    dstl_restore_stats st = rstats(p);
    for (int still = 0, i = 0; still < 10 && i < 400; i++) {      /* until nothing arrives for 0.5 s */
        usleep(50000);
        dstl_restore_stats now = rstats(p);
        still = now.bytes_fetched == st.bytes_fetched ? still + 1 : 0;
        st = now;
    }
    show("before any reader", &st);
    /* the window, one extent that went when nothing was held, and the first record's bytes
     * and the footers fetched first (each at most a small object) */
    cr_expect_leq(st.held_bytes, 2 * ahead, "%lu bytes held with no reader open (read-ahead %lu)",
                  (unsigned long)st.held_bytes, (unsigned long)ahead);
    cr_expect_lt(st.bytes_fetched, need_bytes - ahead, "%lu of %lu bytes fetched with no reader open",
                 (unsigned long)st.bytes_fetched, (unsigned long)need_bytes);
    cr_expect_gt(st.bytes_fetched, 0, "nothing fetched ahead");
    restore_concurrently(p, &jb, 0, NKG - 1);
    st = rstats(p);
    show("after the readers", &st);
    cr_expect_eq(st.objects_fetched, need);
    cr_expect_eq(st.direct_reads, 0, "%lu reads left to readers", (unsigned long)st.direct_reads);
    cr_expect_leq(st.get_requests * 10, need * 11, "%lu GETs for %zu objects", (unsigned long)st.get_requests, need);
    cr_expect_leq(st.bytes_fetched * 100, need_bytes * 105, "fetched %lu bytes of %lu", (unsigned long)st.bytes_fetched,
                  (unsigned long)need_bytes);
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
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

/* ---- the bound ---- */

typedef struct {
    dstl_restore *p;
    const char *cache_dir;
    atomic_int stop;
    uint64_t held_max, files_max, bytes_max, fds_max;
} monitor_arg;

/* Files and bytes under dir (recursively). */
static void dir_usage(const char *dir, uint64_t *files, uint64_t *bytes)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char p[4200];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (lstat(p, &st) < 0) continue;
        if (S_ISDIR(st.st_mode)) {
            dir_usage(p, files, bytes);
        } else {
            (*files)++;
            *bytes += (uint64_t)st.st_size;
        }
    }
    closedir(d);
}

static uint64_t open_fds(void)
{
    uint64_t n = 0, b = 0;
    dir_usage("/proc/self/fd", &n, &b);
    return n;
}

static void *monitor_thread(void *arg)
{
    monitor_arg *m = arg;
    while (!atomic_load(&m->stop)) {
        dstl_restore_stats st;
        if (dstl_restore_get_stats(m->p, &st) == 0 && st.held_bytes > m->held_max) m->held_max = st.held_bytes;
        uint64_t files = 0, bytes = 0, fds = open_fds();
        dir_usage(m->cache_dir, &files, &bytes);
        if (files > m->files_max) m->files_max = files;
        if (bytes > m->bytes_max) m->bytes_max = bytes;
        if (fds > m->fds_max) m->fds_max = fds;
        usleep(1000);
    }
    return NULL;
}

/* Writes jb (~3 MB in segments of ~300 KB with the job of the two tests below) and opens a
 * storage to restore it with a bound of `bound` bytes (1 MiB), over half the restore, and
 * dstl.recovery.read-ahead read_ahead; *need_bytes: the bytes of the objects the handles name. */
static dstl_storage *job_over_bound(job *jb, uint64_t bound, const char *read_ahead, uint64_t *need_bytes)
{
    write_job(jb, wdir);
    t_rm_rf(wdir);
    size_t need = needed_objects(jb, need_bytes);
    cr_assert_gt(*need_bytes, 2 * bound, "the restore (%lu bytes in %zu objects) is not larger than the bound",
                 (unsigned long)*need_bytes, need);
    cr_assert_eq(bound, 1u << 20);
    return open_restorer(rdir, "dstl.cache.dir", cdir, "dstl.cache.max-size", "1mb", "dstl.recovery.read-ahead",
                         read_ahead, NULL);
}

Test(remote_restore, restore_larger_than_the_cache_stays_within_its_bound)
{
    /* ~3 MB in segments of ~300 KB (a 256 KiB batch threshold), restored through a 1 MiB bound */
    job jb = {.nwriters = 8, .rounds = 4, .per_round = 400, .max_len = 500, .persist_delay = "20ms",
              .batch_bytes = "256kb"};
    uint64_t need_bytes;
    const uint64_t bound = 1u << 20;
    dstl_storage *s = job_over_bound(&jb, bound, "64mb", &need_bytes);
    uint64_t fds0 = open_fds();
    dstl_restore *p = plan_all(s, &jb, 0, NKG - 1);
    monitor_arg m = {.p = p, .cache_dir = cdir};
    pthread_t mt;
    cr_assert_eq(pthread_create(&mt, NULL, monitor_thread, &m), 0);
    restore_concurrently(p, &jb, 0, NKG - 1);
    atomic_store(&m.stop, 1);
    pthread_join(mt, NULL);
    dstl_restore_stats st = rstats(p);
    show("bounded", &st);
    cr_expect_leq(st.held_peak_bytes, bound, "the plan held %lu bytes at most", (unsigned long)st.held_peak_bytes);
    cr_expect_leq(m.held_max + m.bytes_max, bound, "held %lu bytes in memory and %lu in cache files",
                  (unsigned long)m.held_max, (unsigned long)m.bytes_max);
    cr_expect_gt(st.held_peak_bytes, 0, "the plan fetched nothing ahead");
    /* the memory the fetched bytes took up is reused as readers release it: about the most held
     * at once, not every byte fetched (each extent in fresh memory cost a VM's host its first
     * touch of every byte a restore fetched) */
    cr_expect_leq(st.memory_touched_bytes, 2 * bound, "%lu bytes of memory touched for %lu fetched, %lu held at most",
                  (unsigned long)st.memory_touched_bytes, (unsigned long)st.bytes_fetched,
                  (unsigned long)st.held_peak_bytes);
    cr_expect_geq(st.memory_touched_bytes, st.held_peak_bytes);
    /* the plan's connections and each reader's own client (for what the plan gave up) */
    cr_expect_leq(m.fds_max, fds0 + 8 + 8 * (uint64_t)jb.nwriters, "%lu fds open at most, %lu before",
                  (unsigned long)m.fds_max, (unsigned long)fds0);
    cr_expect_gt(st.bytes_fetched, need_bytes - need_bytes / 10);
    cr_assert_eq(dstl_restore_close(p), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    job_free(&jb);
}

Test(remote_restore, one_thread_trying_every_reader_in_turn_restores_them_all_within_the_bound)
{
    /* A thread that restores many tasks takes turns on their readers with dstl_reader_try_next
     * and sleeps in dstl_restore_wait when none has a record at hand: every reader's records
     * come exact, and the plan keeps its bound — with the bound full of bytes whose readers
     * try for others that do not fit, the plan leaves those to the readers (as it does for
     * readers that wait) rather than stall the thread; with a read-ahead (256 KiB) below an
     * object, each object starts only once a reader tried for it and nothing was in flight.
     * A plain reader tried in the same loop drives its own GETs. */
    job jb = {.nwriters = 8, .rounds = 4, .per_round = 400, .max_len = 500, .persist_delay = "20ms",
              .batch_bytes = "256kb"};
    uint64_t need_bytes;
    const uint64_t bound = 1u << 20;
    dstl_storage *s = job_over_bound(&jb, bound, "256kb", &need_bytes);
    dstl_restore *p = plan_all(s, &jb, 0, NKG - 1);
    enum { NR = 8 + 1 };                    /* the plan's readers, and a plain one of writer 0 */
    dstl_reader *r[NR];
    rec_check c[NR];
    int live[NR], rc = 0;
    for (uint32_t i = 0; i < NR; i++) {
        uint32_t wid = i < jb.nwriters ? i : 0;
        rc = i < jb.nwriters ? dstl_restore_reader_open(p, i, 0, &r[i]) : dstl_reader_open(s, jb.last[0], 0, NKG - 1, &r[i]);
        cr_assert_eq(rc, 0, "%s", dstl_last_error());
        c[i] = check_start(jb.last[wid], wid, 0, NKG - 1, jb.max_len);
        live[i] = 1;
    }
    char why[600];
    uint64_t seen = 0, tries = 0, misses = 0, idle = 0;
    for (int left = NR; left > 0;) {
        int took = 0;
        for (uint32_t i = 0; i < NR; i++) {
            dstl_record rec;
            for (int t = 0; live[i] && t < 32; t++) {
                tries++;
                if ((rc = dstl_reader_try_next(r[i], &rec)) == -EAGAIN) {
                    misses++;
                    break;
                }
                cr_assert_geq(rc, 0, "reader %u: %s", i, dstl_last_error());
                cr_assert_eq(check_next(&c[i], rc, &rec, why, sizeof why), 0, "reader %u: %s", i, why);
                took++;
                if (rc == 0) {
                    live[i] = 0;
                    left--;
                }
            }
        }
        if (took) continue;
        cr_assert_lt(++idle, 100000, "no reader had a record in %lu turns", (unsigned long)idle);
        /* short: the plain reader's own GETs are not news to the plan's wait */
        cr_assert_geq(dstl_restore_wait(p, &seen, 20), 0, "%s", dstl_last_error());
    }
    for (uint32_t i = 0; i < NR; i++) {
        cr_expect_eq(c[i].n, expected(jb.last[i < jb.nwriters ? i : 0], 0, NKG - 1), "reader %u", i);
        dstl_reader_close(r[i]);
    }
    dstl_restore_stats st = rstats(p);
    show("one thread trying", &st);
    fprintf(stderr, "one thread trying: %lu tries, %lu found their bytes missing, %lu waits\n", (unsigned long)tries,
            (unsigned long)misses, (unsigned long)idle);
    cr_expect_leq(st.held_peak_bytes, bound, "the plan held %lu bytes at most", (unsigned long)st.held_peak_bytes);
    cr_expect_gt(st.held_peak_bytes, 0, "the plan fetched nothing ahead");
    cr_expect_gt(misses, 0, "no try found its bytes missing: the loop never took the path it is for");
    cr_expect_eq(st.held_bytes, 0, "%lu bytes still held after every reader closed", (unsigned long)st.held_bytes);
    cr_assert_eq(dstl_restore_close(p), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    job_free(&jb);
}

/* ---- a killed restore's cache ---- */

/* A child that restores writer 0's handle with a plain reader (its bytes go to the reader
 * cache in cache_dir), tells its run id through fd once it has read 100 records, then waits to
 * be killed. Returns its pid; *run gets the run id (17 bytes). */
static pid_t restoring_child(const job *jb, const char *dir, char run[17])
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        dstl_config *c = NULL;
        dstl_storage *s = NULL;
        dstl_reader *r = NULL;
        if (dstl_config_new(&c) < 0 || dstl_config_set(c, "dstl.local.dir", dir) < 0 ||
            dstl_config_set(c, "dstl.cache.dir", cdir) < 0 || dstl_config_set(c, "dstl.s3.endpoint", fx.env.endpoint) < 0 ||
            dstl_config_set(c, "dstl.s3.region", fx.env.region) < 0 ||
            dstl_config_set(c, "dstl.s3.access-key", fx.env.access_key) < 0 ||
            dstl_config_set(c, "dstl.s3.secret-key", fx.env.secret_key) < 0 ||
            dstl_config_set(c, "dstl.s3.path-style", "true") < 0 || dstl_storage_open(c, &s) < 0 ||
            dstl_reader_open(s, jb->last[0], 0, NKG - 1, &r) < 0)
            _exit(2);
        dstl_record rec;
        for (int n = 0; n < 100; n++)
            if (dstl_reader_next(r, &rec) != 1) _exit(3);
        if (write(fds[1], storage_run_id(s), 16) != 16) _exit(4);
        for (;;) pause();
    }
    close(fds[1]);
    ssize_t n = read(fds[0], run, 16);
    close(fds[0]);
    cr_assert_eq(n, 16, "the restoring child failed before reading 100 records");
    run[16] = '\0';
    return pid;
}

static int exists(const char *dir, const char *name, const char *suffix)
{
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s%s", dir, name, suffix);
    return stat(p, &st) == 0;
}

static void kill_child(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

Test(remote_restore, cache_of_a_killed_restore_is_trimmed_at_the_next_open_never_a_live_one)
{
    job jb = {.nwriters = 1, .rounds = 2, .per_round = 2000, .max_len = 300, .persist_delay = "0"};
    write_job(&jb, wdir);
    t_rm_rf(wdir);
    char dead[17], live[17];
    char d1[4200], d2[4200];
    snprintf(d1, sizeof d1, "%s/dead", rdir);
    snprintf(d2, sizeof d2, "%s/live", rdir);
    pid_t pd = restoring_child(&jb, d1, dead), pl = restoring_child(&jb, d2, live);
    uint64_t files = 0, bytes = 0;
    dir_usage(cdir, &files, &bytes);
    cr_assert(exists(cdir, dead, "") && exists(cdir, live, ""), "the children cached nothing in %s", cdir);
    cr_assert_gt(bytes, 0);
    kill_child(pd);                                  /* killed mid-restore: its cache stays behind */
    cr_assert(exists(cdir, dead, ""));
    /* the next open trims it, before reading anything; the live run's cache is kept */
    dstl_storage *s = open_restorer(rdir, "dstl.cache.dir", cdir, NULL);
    cr_expect(!exists(cdir, dead, ""), "the killed run's cache %s/%s is still there after an open", cdir, dead);
    cr_expect(!exists(cdir, dead, ".lock"));
    cr_expect(exists(cdir, live, ""), "the live run's cache %s/%s was removed", cdir, live);
    cr_expect(exists(cdir, live, ".lock"));
    cr_assert_eq(dstl_storage_close(s), 0);
    kill_child(pl);
    s = open_restorer(rdir, "dstl.cache.dir", cdir, NULL);
    cr_expect(!exists(cdir, live, ""), "the second killed run's cache is still there after an open");
    files = bytes = 0;
    dir_usage(cdir, &files, &bytes);
    cr_expect_eq(bytes, 0, "%lu bytes in %lu files left in the cache", (unsigned long)bytes, (unsigned long)files);
    cr_assert_eq(dstl_storage_close(s), 0);
    job_free(&jb);
}

/* ---- local copies first ---- */

/* The non-empty segment files of dir, sorted by name (= by segment number). */
static size_t local_segments(const char *dir, char names[][64], size_t cap)
{
    DIR *d = opendir(dir);
    cr_assert(d);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        char p[4200];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (l > 4 && l < 64 && !strcmp(de->d_name + l - 4, ".seg") && stat(p, &st) == 0 && st.st_size > 0 && n < cap)
            snprintf(names[n++], 64, "%s", de->d_name);
    }
    closedir(d);
    qsort(names, n, 64, (int (*)(const void *, const void *))strcmp);
    return n;
}

/* Four writers over four checkpoints in wdir, one segment each (the writers persist together):
 * the segments' names (sorted) into names, their count returned, their bytes in *need_bytes. */
static size_t write_four_checkpoints(job *jb, char names[][64], uint64_t *need_bytes)
{
    *jb = (job){.nwriters = 4, .rounds = 4, .per_round = 300, .max_len = 300, .persist_delay = "50ms"};
    write_job(jb, wdir);
    size_t n = local_segments(wdir, names, 16);
    cr_assert_geq(n, 4, "%zu segments", n);
    cr_assert_eq(needed_objects(jb, need_bytes), n);
    return n;
}

Test(remote_restore, local_copies_first_bad_or_missing_ones_from_s3_per_segment)
{
    job jb;
    char names[16][64];
    uint64_t need_bytes;
    size_t n = write_four_checkpoints(&jb, names, &need_bytes);
    char p[4200];
    /* segment 0 stays intact; 1 is gone; 2 is torn (half its length); 3 has a flipped byte in
     * its first section (the right length: only reading finds it) */
    snprintf(p, sizeof p, "%s/%s", wdir, names[1]);
    cr_assert_eq(unlink(p), 0);
    snprintf(p, sizeof p, "%s/%s", wdir, names[2]);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_eq(truncate(p, st.st_size / 2), 0);
    uint64_t torn_len = (uint64_t)st.st_size, gone_len = 0;
    size_t len = 0;
    snprintf(p, sizeof p, "%s/%s", wdir, names[3]);
    uint8_t *buf = t_read_file(p, &len);
    cr_assert(buf && len > WIRE_SEG_HEADER_LEN + 100);
    buf[WIRE_SEG_HEADER_LEN + 40] ^= 0x40;
    cr_assert_eq(t_write_file(p, buf, len), 0);
    free(buf);
    for (uint32_t i = 0; i < jb.nwriters; i++)      /* how batches fell decides who is in which */
        for (size_t k = 0; k < jb.last[i]->wh->nsegs; k++)
            if (!strcmp(jb.last[i]->wh->segs[k].name, names[1])) gone_len = jb.last[i]->wh->segs[k].object_len;
    cr_assert_gt(gone_len, 0);
    dstl_storage *s = open_restorer(wdir, NULL);
    dstl_restore *pl = plan_all(s, &jb, 0, NKG - 1);
    restore_concurrently(pl, &jb, 0, NKG - 1);
    dstl_restore_stats rs = rstats(pl);
    show("local first", &rs);
    cr_expect_eq(rs.objects, n);
    cr_expect_eq(rs.local_segments, n - 2, "local copies used: %lu", (unsigned long)rs.local_segments);
    cr_expect_eq(rs.objects_fetched, 2, "the plan fetched %lu objects: the missing and the torn copy's",
                 (unsigned long)rs.objects_fetched);
    /* the plan's fetches, and the reader's own GETs of the flipped segment's section */
    cr_expect_lt(rs.bytes_fetched, need_bytes, "everything was fetched from S3");
    cr_expect_geq(rs.bytes_fetched, gone_len + torn_len);
    cr_assert_eq(dstl_restore_close(pl), 0);
    dstl_stats ss;
    cr_assert_eq(dstl_storage_stats(s, &ss), 0);
    /* the torn copy (each reader of it), and the flipped section (its one reader) */
    cr_expect_geq(ss.local_read_fallbacks, 2, "%lu fallbacks", (unsigned long)ss.local_read_fallbacks);
    cr_assert_eq(dstl_storage_close(s), 0);
    job_free(&jb);
}

/* The plan looks for each object's local copy once, for all its readers: a reader of an
 * object the plan found no copy of reads what the plan fetches, and does not look again. Shown
 * by copies that appear after the plan, torn: a reader that looked would find one, count a
 * fallback (dstl_stats.local_read_fallbacks) and read S3 itself. */
Test(remote_restore, readers_take_the_plans_look_at_local_copies)
{
    job jb;
    char names[16][64];
    uint64_t need_bytes;
    size_t n = write_four_checkpoints(&jb, names, &need_bytes);
    dstl_storage *s = open_restorer(rdir, NULL);
    dstl_restore *pl = plan_all(s, &jb, 0, NKG - 1);
    cr_assert_eq(rstats(pl).local_segments, 0, "the restorer's dir was empty when the plan was made");
    for (size_t i = 0; i < n; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", rdir, names[i]);
        cr_assert_eq(t_write_file(p, "torn", 4), 0);
    }
    restore_concurrently(pl, &jb, 0, NKG - 1);
    dstl_restore_stats rs = rstats(pl);
    show("copies after the plan", &rs);
    cr_expect_eq(rs.objects_fetched, n, "the plan fetched %lu of %zu objects", (unsigned long)rs.objects_fetched, n);
    cr_assert_eq(dstl_restore_close(pl), 0);
    dstl_stats ss;
    cr_assert_eq(dstl_storage_stats(s, &ss), 0);
    cr_expect_eq(ss.local_read_fallbacks, 0, "%lu readers looked at a local copy again",
                 (unsigned long)ss.local_read_fallbacks);
    cr_assert_eq(dstl_storage_close(s), 0);
    job_free(&jb);
}

/* A task restoring its own local-only log (no remote: written in the restorer's dir) beside
 * other tasks' remote handles, and one remote handle in two entries: the plan copies every
 * handle — the caller's copies are freed before any reader opens, and a plan refused before
 * them did not free them — and each reader reads exactly its handle's records. The copy points the segment names of remote handles at the
 * plan's objects and copies the others (restore_map.c). */
Test(remote_restore, a_plan_mixing_local_only_and_remote_handles_reads_each_after_the_caller_freed_them)
{
    job jb = {.nwriters = 4, .rounds = 3, .per_round = 150, .max_len = 300, .persist_delay = "20ms"};
    write_job(&jb, wdir);
    const uint32_t lw = 40;             /* the local task's payload stream */
    dstl_config *lc = t_config(rdir, NULL);
    dstl_storage *ls = NULL;
    cr_assert_eq(dstl_storage_open(lc, &ls), 0, "%s", dstl_last_error());
    dstl_config_free(lc);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(ls, "local-task", 0, NKG - 1, &w), 0, "%s", dstl_last_error());
    uint8_t buf[301];
    for (uint64_t k = 0; k < 300; k++) {
        uint64_t seq = dstl_writer_next_seq(w);
        size_t len = payload_make(PAYLOAD_RANDOM, lw, seq, 300, buf);
        cr_assert_eq(is_meta(seq) ? dstl_append_meta(w, buf, len) : dstl_append(w, (uint32_t)(seq % NKG), buf, len),
                     0, "%s", dstl_last_error());
        if (k == 149) {                 /* two checkpoints: two segments */
            dstl_future *f = NULL;
            cr_assert_eq(dstl_persist(w, 0, 1, &f), 0, "%s", dstl_last_error());
            cr_assert_eq(dstl_future_wait(f, 60000), 0);
            dstl_future_free(f);
        }
    }
    dstl_future *f = NULL;
    dstl_handle *lh = NULL;
    cr_assert_eq(dstl_persist(w, 0, 2, &f), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_future_wait(f, 60000), 0);
    cr_assert_eq(dstl_future_result(f, &lh), 0, "%s", dstl_last_error());
    dstl_future_free(f);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(ls), 0, "%s", dstl_last_error());
    cr_assert_eq(lh->wh->remote_uri[0], '\0', "the local task's handle names a remote");
    cr_assert_geq(lh->wh->nsegs, 2);

    /* the caller's handles: parsed copies, freed once the plan is made */
    const dstl_handle *src[6] = {jb.last[0], lh, jb.last[1], jb.last[2], jb.last[3], jb.last[1]};
    const uint32_t wid[6] = {0, lw, 1, 2, 3, 1};
    dstl_handle *mine[6];
    for (int i = 0; i < 6; i++) {
        void *bytes = NULL;
        size_t len = 0;
        cr_assert_eq(dstl_handle_serialize(src[i], &bytes, &len), 0, "%s", dstl_last_error());
        cr_assert_eq(dstl_handle_parse(bytes, len, &mine[i]), 0, "%s", dstl_last_error());
        free(bytes);
    }
    dstl_restore_entry e[5] = {
        {(const dstl_handle *const *)&mine[0], 2, 0, NKG - 1},      /* a remote and the local one */
        {(const dstl_handle *const *)&mine[2], 1, 0, NKG - 1},
        {(const dstl_handle *const *)&mine[3], 1, 0, NKG - 1},
        {(const dstl_handle *const *)&mine[4], 1, 0, NKG - 1},
        {(const dstl_handle *const *)&mine[5], 1, 0, NKG - 1},      /* writer 1's again */
    };
    dstl_storage *s = open_restorer(rdir, NULL);
    dstl_restore *pl = NULL;
    /* a plan refused at its last entry, after mapping the others (taking a reference to
     * each), leaves the caller's handles whole, and drops what it took (ASan: no leak) */
    dstl_restore_entry bad[6];
    memcpy(bad, e, sizeof e);
    bad[5] = (dstl_restore_entry){(const dstl_handle *const *)&mine[1], 1, 5, 4};
    cr_assert_eq(dstl_restore_plan(s, bad, 6, &pl), -EINVAL);
    cr_assert(strstr(dstl_last_error(), "entry 5"), "%s", dstl_last_error());
    cr_assert_eq(dstl_restore_plan(s, e, 5, &pl), 0, "%s", dstl_last_error());
    for (int i = 0; i < 6; i++) dstl_handle_free(mine[i]);
    const size_t at[6][2] = {{0, 0}, {0, 1}, {1, 0}, {2, 0}, {3, 0}, {4, 0}};
    for (int i = 0; i < 6; i++) {
        dstl_reader *r = NULL;
        char why[600] = "";
        cr_assert_eq(dstl_restore_reader_open(pl, at[i][0], at[i][1], &r), 0, "%s", dstl_last_error());
        long n = check_reader(r, src[i], wid[i], 0, NKG - 1, 300, why, sizeof why);
        dstl_reader_close(r);
        cr_expect_eq(n, expected(src[i], 0, NKG - 1), "entry %zu handle %zu: %ld records (%s)", at[i][0], at[i][1],
                     n, why);
    }
    uint64_t need_bytes;
    size_t objects = needed_objects(&jb, &need_bytes);
    dstl_restore_stats rs = rstats(pl);
    show("local and remote", &rs);
    cr_expect_eq(rs.objects, objects, "the remote handles' objects, each once (and no object for the local one)");
    cr_expect_leq(rs.objects_fetched, objects, "objects fetched: counted when their first bytes come in");
    cr_expect_eq(rs.direct_reads, 0, "every remote byte came through the plan");
    cr_assert_eq(dstl_restore_close(pl), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    dstl_handle_free(lh);
    job_free(&jb);
}

/* ---- the API's edges ---- */

Test(remote_restore, plan_readers_open_once_and_the_plan_closes_after_them)
{
    job jb = {.nwriters = 2, .rounds = 1, .per_round = 100, .max_len = 100, .persist_delay = "20ms"};
    write_job(&jb, wdir);
    t_rm_rf(wdir);
    dstl_storage *s = open_restorer(rdir, NULL);
    dstl_restore *p = NULL;
    dstl_restore_entry bad = {(const dstl_handle *const *)jb.last, 2, 5, 4};
    cr_expect_eq(dstl_restore_plan(s, &bad, 1, &p), -EINVAL);
    cr_expect(strstr(dstl_last_error(), "entry 0"), "%s", dstl_last_error());
    cr_expect_eq(dstl_restore_plan(s, &bad, 0, &p), -EINVAL);
    p = plan_all(s, &jb, 0, NKG - 1);
    dstl_reader *r = NULL, *r2 = NULL;
    cr_expect_eq(dstl_restore_reader_open(p, 2, 0, &r), -EINVAL);
    cr_expect_eq(dstl_restore_reader_open(p, 0, 1, &r), -EINVAL);
    cr_assert_eq(dstl_restore_reader_open(p, 0, 0, &r), 0);
    cr_expect_eq(dstl_restore_reader_open(p, 0, 0, &r2), -EBUSY);
    cr_expect_eq(dstl_restore_close(p), -EBUSY, "closed under an open reader");
    char why[600] = "";
    cr_expect_eq(check_reader(r, jb.last[0], 0, 0, NKG - 1, jb.max_len, why, sizeof why), expected(jb.last[0], 0, NKG - 1),
                 "%s", why);
    dstl_reader_close(r);
    /* entry 1 never read: closing the plan drops what it fetched for it */
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_restore_close(NULL), 0);
    /* the per-reader path keeps working beside plans */
    cr_assert_eq(dstl_reader_open(s, jb.last[1], 0, NKG - 1, &r), 0);
    cr_expect_eq(check_reader(r, jb.last[1], 1, 0, NKG - 1, jb.max_len, why, sizeof why), expected(jb.last[1], 0, NKG - 1),
                 "%s", why);
    dstl_reader_close(r);
    cr_assert_eq(dstl_storage_close(s), 0);
    job_free(&jb);
}

Test(remote_restore, objects_larger_than_the_bound_are_read_by_their_readers)
{
    /* a bound below every object: the plan holds nothing, each reader GETs what it needs */
    job jb = {.nwriters = 4, .rounds = 2, .per_round = 300, .max_len = 400, .persist_delay = "20ms"};
    write_job(&jb, wdir);
    t_rm_rf(wdir);
    dstl_storage *s = open_restorer(rdir, "dstl.cache.dir", cdir, "dstl.cache.max-size", "4kb", NULL);
    dstl_restore *p = plan_all(s, &jb, 0, NKG - 1);
    restore_concurrently(p, &jb, 0, NKG - 1);
    dstl_restore_stats st = rstats(p);
    show("over the bound", &st);
    cr_expect_eq(st.held_peak_bytes, 0);
    cr_expect_gt(st.direct_reads, 0);
    cr_expect_gt(st.bytes_fetched, 0, "the readers' own GETs are counted in the plan");
    uint64_t files = 0, bytes = 0;
    dir_usage(cdir, &files, &bytes);
    cr_expect_leq(bytes, 4096);
    cr_assert_eq(dstl_restore_close(p), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    job_free(&jb);
}

Test(remote_restore, corrupted_object_is_ecorrupt_naming_it)
{
    job jb = {.nwriters = 1, .rounds = 1, .per_round = 300, .max_len = 200, .persist_delay = "0"};
    write_job(&jb, wdir);
    t_rm_rf(wdir);
    const wire_seg_ref *g = &jb.last[0]->wh->segs[0];
    remote_loc loc;
    char key[1024];
    cr_assert_eq(remote_parse_uri(fx.uri, "test", &loc), 0);
    cr_assert_eq(remote_key(&loc, g->name, key, sizeof key), 0);
    uint8_t *buf = malloc(g->object_len);
    s3_result res;
    cr_assert_eq(s3_get_object_sync(fx.s3, fx.bucket, key, 0, buf, g->object_len, &res), 0, "%s", res.error);
    buf[WIRE_SEG_HEADER_LEN + 40] ^= 0x40;             /* inside the first section */
    cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, key, buf, g->object_len, false, &res), 0, "%s", res.error);
    free(buf);
    dstl_storage *s = open_restorer(rdir, NULL);
    dstl_restore *p = plan_all(s, &jb, 0, NKG - 1);
    dstl_reader *r = NULL;
    cr_assert_eq(dstl_restore_reader_open(p, 0, 0, &r), 0);
    dstl_record rec;
    int rc;
    while ((rc = dstl_reader_next(r, &rec)) == 1) {}
    cr_expect_eq(rc, DSTL_ECORRUPT, "%d: %s", rc, dstl_last_error());
    cr_expect(strstr(dstl_last_error(), key), "the error names the object: %s", dstl_last_error());
    dstl_reader_close(r);
    cr_assert_eq(dstl_restore_close(p), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    job_free(&jb);
}
