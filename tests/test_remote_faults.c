/*
 * tests/test_remote_faults.c — remote durability through the fault proxy (tests/tools/s3proxy)
 * in front of the S3 server tests/run.sh starts.
 *
 *  - A 5-second outage (the proxy is killed: connections in flight are reset, new ones
 *    refused; then it comes back on the same port): the persists that fall in it fail with a
 *    detail naming the object, the later ones succeed, and in the end one handle from seq 0
 *    reads back every record appended, with no gap — from the local copy and from S3 alone.
 *  - 503 SlowDown bursts and answers slower than dstl.upload.timeout, on single PUTs and on a
 *    multipart upload (CreateMultipartUpload, parts, CompleteMultipartUpload): retries and
 *    hedges happen (stats), every persist succeeds, the data reads back from S3 alone, and
 *    after truncating, discarding and closing the prefix holds no object and no upload.
 *
 * Storages use small upload timeouts (300-500 ms) and attempt counts so a failure is quick.
 * Every test fails (never skips) without the S3 environment (DSTL_T_S3_*).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dstl.h"
#include "dstl/seams.h"
#include "tests/helpers.h"
#include "tests/helpers_dstl.h"
#include "tests/helpers_remote.h"

#define NKG 16

static t_remote fx;
static t_s3_proxy proxy;

static void setup(void) { t_remote_init(&fx, "rfaults"); }

static void teardown(void)
{
    t_s3_proxy_stop(&proxy);
    t_remote_fini(&fx);
}

TestSuite(remote_faults, .init = setup, .fini = teardown, .timeout = 120);

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A storage of the fixture on local_dir, through endpoint, then the key/value pairs of extra
 * (NULL-terminated array). */
static dstl_storage *open_remote(const char *local_dir, const char *endpoint, const char *const *extra)
{
    dstl_config *c = t_remote_config(&fx, local_dir, "dstl.s3.endpoint", endpoint, NULL);
    for (size_t i = 0; extra && extra[i]; i += 2)
        cr_assert_eq(dstl_config_set(c, extra[i], extra[i + 1]), 0, "%s", dstl_last_error());
    dstl_storage *s = NULL;
    cr_assert_eq(dstl_storage_open(c, &s), 0, "open: %s", dstl_last_error());
    dstl_config_free(c);
    return s;
}

/* The proxy with script in front of the server, a storage on DIR/data through it (extra:
 * key/value pairs), and its writer "w0". */
static dstl_storage *through_proxy(const char *script, const char *const *extra, dstl_writer **w)
{
    char why[512], ldir[4200];
    cr_assert_eq(t_s3_proxy_start(&proxy, fx.env.endpoint, script, why, sizeof why), 0, "%s", why);
    snprintf(ldir, sizeof ldir, "%s/data", fx.dir);
    dstl_storage *s = open_remote(ldir, proxy.url, extra);
    cr_assert_eq(dstl_writer_open(s, "w0", 0, NKG - 1, w), 0);
    return s;
}

/* persist + wait; the future's result (a handle in *out on success, the detail in errmsg). */
static int persist_result(dstl_writer *w, uint64_t from, uint64_t cp, dstl_handle **out, char *errmsg, size_t cap)
{
    dstl_future *f = NULL;
    int rc = dstl_persist(w, from, cp, &f);
    if (rc == 0) {
        cr_assert_eq(dstl_future_wait(f, 30000), 0, "a future stayed pending for 30 s");
        rc = dstl_future_result(f, out);
        dstl_future_free(f);
    }
    if (rc < 0) snprintf(errmsg, cap, "%s", dstl_last_error());
    return rc;
}

/* Reads h back through a storage whose local dir is new and empty: every byte from S3. */
static void verify_from_s3(const dstl_handle *h, uint32_t wid, size_t max_len)
{
    char rdir[4200];
    snprintf(rdir, sizeof rdir, "%s/s3only", fx.dir);
    dstl_storage *rs = open_remote(rdir, fx.env.endpoint, NULL);
    long n = t_verify(rs, h, wid, 0, NKG, 0, NKG - 1, max_len);
    cr_assert_eq(n, (long)(dstl_handle_to_seq(h) - dstl_handle_from_seq(h)),
                 "read back from S3 alone: %ld (%s)", n, n < 0 ? dstl_last_error() : "records");
    cr_assert_eq(dstl_storage_close(rs), 0);
    t_rm_rf(rdir);
}

static void assert_prefix_empty(const char *when)
{
    size_t objects = 99, uploads = 99;
    t_remote_count(&fx, &objects, &uploads);
    cr_assert_eq(objects, 0, "%s: %zu objects left in %s/", when, objects, fx.uri);
    cr_assert_eq(uploads, 0, "%s: %zu incomplete multipart uploads left in %s/", when, uploads, fx.uri);
}

/* The faults caused retries and hedges, and no persist failed. Stats are copied from the
 * pipeline's client on its loop's turns: wait until the counters show them (or 5 s). */
static void assert_retried_and_hedged(dstl_storage *s, const char *what)
{
    dstl_stats st;
    for (int i = 0; i < 500; i++) {
        cr_assert_eq(dstl_storage_stats(s, &st), 0);
        if (st.remote_retries > 0 && st.hedged_attempts > 0) break;
        usleep(10000);
    }
    cr_log_info("%s: %llu requests, %llu retries, %llu hedges", what, (unsigned long long)st.remote_requests,
                (unsigned long long)st.remote_retries, (unsigned long long)st.hedged_attempts);
    cr_assert_gt(st.remote_retries, 0, "%s: 503 SlowDown caused no retry", what);
    cr_assert_gt(st.hedged_attempts, 0, "%s: answers slower than dstl.upload.timeout caused no hedge", what);
    cr_assert_eq(st.persist_failures, 0);
}

/* ---- the outage ---- */

/* The proxy again on the port it had, passing everything. */
static int proxy_restart(t_s3_proxy *p, int port)
{
    char why[512];
    return t_s3_proxy_start_on(p, fx.env.endpoint, NULL, port, why, sizeof why);
}

typedef struct {
    int64_t t0_ms, down_ms, up_ms;  /* when the outage started and ended (from t0) */
    int err;                        /* the restart's failure */
} outage;

#define OUTAGE_START_MS 1500
#define OUTAGE_LEN_MS 5000

static void *outage_main(void *arg)
{
    outage *o = arg;
    usleep(OUTAGE_START_MS * 1000);
    int port = proxy.port;
    t_s3_proxy_stop(&proxy);            /* SIGTERM: in-flight connections reset, new ones refused */
    o->down_ms = now_ms() - o->t0_ms;
    usleep(OUTAGE_LEN_MS * 1000);
    o->err = proxy_restart(&proxy, port);
    o->up_ms = now_ms() - o->t0_ms;
    return NULL;
}

typedef struct {
    int64_t start_ms;
    int rc;
    char err[600];
} attempt;

Test(remote_faults, outage_fails_persists_in_it_and_loses_nothing, .timeout = 120)
{
    const char *extra[] = {"dstl.upload.timeout", "300ms", "dstl.upload.max-attempts", "3",
                           "dstl.upload.next-attempt-delay", "50ms", "dstl.batch.persist-delay", "5ms", NULL};
    dstl_writer *w = NULL;
    dstl_storage *s = through_proxy("", extra, &w);
    char ldir[4200];
    snprintf(ldir, sizeof ldir, "%s/data", fx.dir);

    outage o = {.t0_ms = now_ms()};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, outage_main, &o), 0);
    static attempt log[2000];
    size_t n = 0;
    dstl_handle *last = NULL;
    const size_t max_len = 300;
    uint64_t cp = 1;
    /* a writer that persists everything since seq 0 (no materialization) every ~50 ms */
    while (n < sizeof log / sizeof log[0] && now_ms() - o.t0_ms < OUTAGE_START_MS + OUTAGE_LEN_MS + 3000) {
        t_append_n(w, 0, 20, 0, NKG, max_len);
        attempt *a = &log[n++];
        a->start_ms = now_ms() - o.t0_ms;
        dstl_handle *h = NULL;
        a->rc = persist_result(w, 0, cp++, &h, a->err, sizeof a->err);
        if (a->rc == 0) {              /* the new checkpoint subsumes the previous one */
            if (last) cr_assert_eq(dstl_handle_discard(s, last), 0);
            dstl_handle_free(last);
            last = h;
        }
        usleep(50000);
    }
    pthread_join(th, NULL);
    cr_assert_eq(o.err, 0, "the proxy did not come back on port %d: %d", proxy.port, o.err);

    char want_obj[200];
    snprintf(want_obj, sizeof want_obj, "%s/", fx.uri);
    size_t failed = 0, after_ok = 0;
    for (size_t i = 0; i < n; i++) {
        attempt *a = &log[i];
        if (a->rc != 0) {
            if (failed++ == 0) cr_log_info("first failure: %d (%s): %s", a->rc, dstl_strerror(a->rc), a->err);
            cr_expect(a->rc == DSTL_EREMOTE || a->rc == -ETIMEDOUT || a->rc == -ECONNREFUSED,
                      "persist at %lld ms failed with %d (%s): %s", (long long)a->start_ms, a->rc,
                      dstl_strerror(a->rc), a->err);
            cr_expect(strstr(a->err, want_obj) != NULL, "the detail names the object: %s", a->err);
            cr_expect(a->start_ms + 3000 > o.down_ms && a->start_ms < o.up_ms,
                      "persist at %lld ms failed outside the outage [%lld, %lld] ms: %s", (long long)a->start_ms,
                      (long long)o.down_ms, (long long)o.up_ms, a->err);
        } else if (a->start_ms > o.up_ms) {
            after_ok++;
        }
        cr_expect(a->start_ms <= o.up_ms || a->rc == 0, "persist at %lld ms, after the outage, failed: %s",
                  (long long)a->start_ms, a->err);
    }
    cr_log_info("outage [%lld, %lld] ms: %zu persists, %zu failed, %zu after it", (long long)o.down_ms,
                (long long)o.up_ms, n, failed, after_ok);
    cr_assert_gt(failed, 0, "no persist failed during a %d ms outage", OUTAGE_LEN_MS);
    cr_assert_gt(after_ok, 0, "no persist after the outage");

    /* one handle from 0: every record, no gap */
    uint64_t end = dstl_writer_next_seq(w);
    dstl_handle *all = t_persist(w, 0, cp++);
    cr_assert_eq(dstl_handle_from_seq(all), 0);
    cr_assert_eq(dstl_handle_to_seq(all), end);
    cr_assert_eq(t_verify(s, all, 0, 0, NKG, 0, NKG - 1, max_len), (long)end);
    dstl_stats st;
    cr_assert_eq(dstl_storage_stats(s, &st), 0);
    cr_expect_geq(st.persist_failures, failed);
    cr_expect_gt(st.remote_failures, 0);
    verify_from_s3(all, 0, max_len);

    /* everything goes: truncate, discard, close; then gc sweeps what the outage stranded
     * (a PUT that landed while its answer was lost), and the prefix is empty */
    cr_assert_eq(dstl_truncate(w, end), 0);
    cr_assert_eq(dstl_writer_close(w), 0);
    dstl_handle_discard(s, all);
    if (last) dstl_handle_discard(s, last);
    dstl_handle_free(all);
    dstl_handle_free(last);
    cr_assert_eq(dstl_storage_close(s), 0);
    dstl_storage *g = open_remote(ldir, fx.env.endpoint, NULL);
    dstl_gc_report rep;
    cr_assert_eq(dstl_gc(g, NULL, 0, 0, 0, &rep), 0, "gc: %s", dstl_last_error());
    cr_assert_eq(rep.kept_live + rep.kept_young, 0);
    cr_log_info("gc after the outage: %llu scanned, %llu deleted", (unsigned long long)rep.scanned,
                (unsigned long long)rep.deleted);
    cr_assert_eq(dstl_storage_close(g), 0);
    assert_prefix_empty("after the outage, truncate, discard, close and gc");
}

/* ---- throttling and slow answers ---- */

/* Persists n times (appending `per` records of up to max_len bytes before each), asserting
 * each succeeds; returns the handles (the caller discards and frees them). */
static dstl_handle **persist_rounds(dstl_writer *w, int n, uint64_t per, size_t max_len)
{
    dstl_handle **hs = calloc((size_t)n, sizeof *hs);
    for (int i = 0; i < n; i++) {
        t_append_n(w, 0, per, 0, NKG, max_len);
        char err[600];
        int rc = persist_result(w, 0, (uint64_t)i + 1, &hs[i], err, sizeof err);
        cr_assert_eq(rc, 0, "persist %d failed under throttling/slow answers: %s", i, err);
    }
    return hs;
}

static void drain_and_check(dstl_storage *s, dstl_writer *w, dstl_handle **hs, int n)
{
    cr_assert_eq(dstl_truncate(w, dstl_writer_next_seq(w)), 0);
    cr_assert_eq(dstl_writer_close(w), 0);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(dstl_handle_discard(s, hs[i]), 0);
        dstl_handle_free(hs[i]);
    }
    free(hs);
    cr_assert_eq(dstl_storage_close(s), 0);
    char ldir[4200];
    snprintf(ldir, sizeof ldir, "%s/data", fx.dir);
    cr_assert_eq(t_count_segments(ldir), 0, "local segments left");
    assert_prefix_empty("after truncating everything, discarding every handle and closing");
}

Test(remote_faults, slowdown_and_slow_puts_retry_and_hedge_leaving_nothing, .timeout = 120)
{
    /* each rule is used up once per request it takes, in order: 503 bursts of two (the third
     * attempt passes), and answers held 800 ms (> upload.timeout: a hedged twin races them;
     * the first attempt landed, so the twin meets If-None-Match and the client settles it) */
    const char *script = "PUT?.seg 503 x2; PUT?.seg delay=800; PUT?.seg 503 x2; PUT?.seg delay=800 x2; "
                         "PUT?.seg 503 x2; PUT?.seg delay=800";
    const char *extra[] = {"dstl.upload.timeout", "300ms", "dstl.upload.max-attempts", "3",
                           "dstl.upload.next-attempt-delay", "20ms", "dstl.batch.persist-delay", "5ms", NULL};
    dstl_writer *w = NULL;
    dstl_storage *s = through_proxy(script, extra, &w);
    const int rounds = 8;
    dstl_handle **hs = persist_rounds(w, rounds, 50, 2000);
    assert_retried_and_hedged(s, "single PUTs");
    verify_from_s3(hs[rounds - 1], 0, 2000);
    drain_and_check(s, w, hs, rounds);
}

Test(remote_faults, slowdown_and_slow_multipart_retry_and_hedge_leaving_nothing, .timeout = 180)
{
    /* CreateMultipartUpload throttled once, parts throttled and one held, the Complete held
     * (its hedged twin finds the upload completed: the client settles it with a HEAD) */
    const char *script = "POST?uploads 503; PUT?partNumber 503 x2; PUT?partNumber=2 delay=1200; "
                         "POST?uploadId delay=1200";
    const char *extra[] = {"dstl.upload.timeout", "500ms", "dstl.upload.max-attempts", "4",
                           "dstl.upload.next-attempt-delay", "20ms", "dstl.batch.persist-delay", "5ms",
                           "dstl.upload.part-size", "5mb", "dstl.upload.multipart-threshold", "5mb",
                           "dstl.preemptive-persist-threshold", "64mb", NULL};
    dstl_writer *w = NULL;
    dstl_storage *s = through_proxy(script, extra, &w);
    /* 360 records of up to 64 KiB: about 11.5 MiB in one segment, three parts */
    const size_t max_len = 65536;
    dstl_handle **hs = persist_rounds(w, 1, 360, max_len);
    cr_assert_gt(dstl_handle_size(hs[0]), 10u << 20, "the segment must be a multipart upload (> 10 MiB)");
    /* and a small one after it: the client is healthy again */
    dstl_handle **more = persist_rounds(w, 1, 10, 100);
    assert_retried_and_hedged(s, "multipart");
    verify_from_s3(hs[0], 0, max_len);
    dstl_handle **all = realloc(hs, 2 * sizeof *hs);
    all[1] = more[0];
    free(more);
    drain_and_check(s, w, all, 2);
}

/* An upload that cannot even start (s3_upload fails at once: out of memory, a bad argument)
 * under local durability: the persists are durable locally, and the segment, once nobody
 * needs it, is deleted and the storage closes. The segment used to stay marked "uploading"
 * for ever: its deletion was put off at every turn and dstl_storage_close never returned. */
Test(remote_faults, an_upload_that_cannot_start_leaves_nothing_waiting, .timeout = 60)
{
    char ldir[4200];
    snprintf(ldir, sizeof ldir, "%s/data", fx.dir);
    dstl_config *c = t_remote_config(&fx, ldir, "dstl.durability", "local", NULL);
    storage_seams t = {.fail_upload_start = -ENOMEM};
    dstl_storage *s = NULL;
    cr_assert_eq(storage_open_with_seams(c, &t, &s), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w0", 0, NKG - 1, &w), 0);
    t_append_n(w, 3, 50, 0, NKG, 300);
    dstl_handle *h = t_persist(w, 0, 1);
    cr_assert_eq(t_verify(s, h, 3, 0, NKG, 0, NKG - 1, 300), 50, "%s", dstl_last_error());
    cr_assert_eq(t_count_segments(ldir), 1);
    cr_assert_eq(dstl_handle_discard(s, h), 0);
    dstl_handle_free(h);
    cr_assert_eq(dstl_truncate(w, dstl_writer_next_seq(w)), 0);
    cr_assert_eq(dstl_writer_close(w), 0);
    int64_t t0 = now_ms();
    cr_assert_eq(dstl_storage_close(s), 0);
    cr_assert_lt(now_ms() - t0, 20000, "close took %lld ms", (long long)(now_ms() - t0));
    cr_assert_eq(t_count_segments(ldir), 0, "the unreferenced segment is deleted");
}

/* A segment body corrupted in transit, with the default unsigned payloads, against a server
 * that ignores x-amz-checksum-crc32c (Ceph RGW 16): the persist must not be acknowledged for
 * the damaged object (dstl.s3.verify-writes auto compares the ETag with the body's MD5), the
 * retry lands the right bytes, and the handle reads back from S3 alone. Today's reader would
 * otherwise find the damage only at recovery (DSTL_ECORRUPT). */
Test(remote_faults, a_body_corrupted_in_transit_is_never_acknowledged)
{
    static const char *const extra[] = {"dstl.s3.payload-signing", "unsigned", "dstl.upload.timeout", "1s",
                                        "dstl.upload.max-attempts", "3", "dstl.batch.persist-delay", "0", NULL};
    dstl_writer *w = NULL;
    dstl_storage *s = through_proxy("PUT?.seg corrupt", extra, &w);
    t_append_n(w, 4, 200, 0, NKG, 2000);
    dstl_handle *h = NULL;
    char err[1024] = "";
    cr_assert_eq(persist_result(w, 0, 1, &h, err, sizeof err), 0, "%s", err);
    verify_from_s3(h, 4, 2000);
    cr_assert_eq(dstl_writer_close(w), 0);
    dstl_handle_free(h);
    cr_assert_eq(dstl_storage_close(s), 0);
}

/* Every answer of the server stalls (the proxy forwards each request, then holds its answer
 * 20 s): each future completes, failed, within its bound — persist-delay + max-attempts x
 * upload.timeout + 1 s (include/dstl.h) — whatever cleanup its cancelled upload needs, which
 * runs detached; dstl_writer_close returns at once after, and dstl_storage_close within one
 * more bound (then what is left is for dstl gc). The cancel used to wait for its cleanups'
 * own attempts and transfer timeouts: 13.5 s against a bound of 3.5 s. Single PUTs and
 * multipart uploads (5 MiB parts) alike. */
static void stalled_answers_keep_the_bound(const char *record_max, uint64_t records)
{
    static const char *const extra[] = {"dstl.upload.timeout", "500ms", "dstl.upload.max-attempts", "3",
                                        "dstl.batch.persist-delay", "10ms", "dstl.upload.multipart-threshold", "5mb",
                                        "dstl.upload.part-size", "5mb", NULL};
    const int64_t bound_ms = 10 + 3 * 500 + 1000, slack_ms = 1500;
    dstl_writer *w = NULL;
    /* the run's first lease write passes, so the segment uploads themselves stall */
    dstl_storage *s = through_proxy("PUT?_leases pass; * delay=20000 x1000", extra, &w);
    size_t max_len = (size_t)atol(record_max);
    int64_t worst = 0;
    for (uint64_t cp = 1; cp <= 2; cp++) {
        t_append_n(w, 6, records, 0, NKG, max_len);
        dstl_future *f = NULL;
        int64_t t0 = now_ms();
        cr_assert_eq(dstl_persist(w, 0, cp, &f), 0, "%s", dstl_last_error());
        cr_assert_eq(dstl_future_wait(f, bound_ms + slack_ms + 5000), 0, "the future outlived its bound by 5 s");
        int64_t took = now_ms() - t0;
        if (took > worst) worst = took;
        dstl_handle *h = NULL;
        int rc = dstl_future_result(f, &h);
        cr_assert_eq(rc, DSTL_EREMOTE, "checkpoint %llu: %s", (unsigned long long)cp, dstl_strerror(rc));
        dstl_future_free(f);
        cr_assert_leq(took, bound_ms + slack_ms, "checkpoint %llu completed after %lld ms, bound %lld ms",
                      (unsigned long long)cp, (long long)took, (long long)bound_ms);
    }
    cr_log_info("stalled answers (%s-byte records): futures completed after at most %lld ms (bound %lld ms)",
                record_max, (long long)worst, (long long)bound_ms);
    int64_t t0 = now_ms();
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_leq(now_ms() - t0, slack_ms, "dstl_writer_close took %lld ms", (long long)(now_ms() - t0));
    t0 = now_ms();
    cr_assert_eq(dstl_storage_close(s), 0);
    int64_t close_ms = now_ms() - t0;
    cr_log_info("dstl_storage_close with cleanups stalled: %lld ms", (long long)close_ms);
    cr_assert_leq(close_ms, bound_ms + slack_ms, "dstl_storage_close took %lld ms, one more bound is %lld ms",
                  (long long)close_ms, (long long)bound_ms);
}

Test(remote_faults, stalled_answers_keep_the_future_bound_single_put, .timeout = 120)
{
    stalled_answers_keep_the_bound("2000", 100);
}

Test(remote_faults, stalled_answers_keep_the_future_bound_multipart, .timeout = 120)
{
    stalled_answers_keep_the_bound("100000", 140);     /* ~7 MiB: two 5 MiB parts */
}

/* ---- a built segment's MD5 ETag, hashed as it is built (pipeline/batch.c, md5_feed) ---- */

/* Against a server that checks unsigned writes by their MD5 ETag (RGW 16 echoes no checksum),
 * a segment encoded as its sections join hashes its body as they go in, and its upload checks
 * the server's ETag against that hash instead of hashing the body when the answer comes.
 * With the hash spoilt (seam) the upload must fail as a differing copy: that is what shows the
 * check used it. Whole, the persist succeeds and reads back from the object store. */
static void built_md5(int spoil)
{
    /* the precondition: this server checks such writes by MD5 (a 1.5 MB unsigned PUT) */
    size_t big = 1536u << 10;
    uint8_t *body = malloc(big);
    memset(body, 0x5a, big);
    s3_result r;
    char key[200];
    snprintf(key, sizeof key, "%s/md5-probe", fx.prefix);
    cr_assert_eq(s3_upload_sync(fx.s3, fx.bucket, key, body, big, NULL, &r), 0, "%s", r.error);
    cr_assert_eq(r.write_check, S3_CHECK_MD5, "this server's writes are checked by %d, not their MD5 ETag: "
                 "the test needs one that echoes no checksum (Ceph RGW 16)", (int)r.write_check);
    cr_assert(s3_client_md5_checks(fx.s3));
    free(body);

    char ldir[4200];
    snprintf(ldir, sizeof ldir, "%s/data", fx.dir);
    dstl_config *c = t_remote_config(&fx, ldir, "dstl.batch.persist-delay", "100ms", "dstl.upload.max-attempts", "2",
                                     NULL);
    storage_seams seams = {.spoil_build_md5 = spoil};
    dstl_storage *s = NULL;
    cr_assert_eq(storage_open_with_seams(c, &seams, &s), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w0", 0, NKG - 1, &w), 0);
    /* the first segment teaches the storage's client how the server checks writes */
    uint64_t end1 = t_append_n(w, 1, 4000, 0, NKG, 700);
    dstl_handle *h = t_persist(w, 0, 1);
    dstl_handle_free(h);
    uint64_t end2 = t_append_n(w, 1, 4000, 0, NKG, 700);
    int rc = t_persist_result(w, 0, 2, &h);
    if (spoil) {
        cr_assert_eq(rc, DSTL_EREMOTE, "a spoilt MD5 passed the upload's check: %s", dstl_last_error());
        cr_assert(strstr(dstl_last_error(), "differs"), "%s", dstl_last_error());
    } else {
        cr_assert_eq(rc, 0, "%s", dstl_last_error());
        cr_assert_eq(dstl_handle_to_seq(h), end2);
        char rdir[4300];
        snprintf(rdir, sizeof rdir, "%s/other", fx.dir);
        dstl_storage *o = t_remote_open(&fx, rdir, NULL);
        cr_assert_eq(t_verify(o, h, 1, 0, NKG, 0, NKG - 1, 700), (long)end2);
        cr_assert_eq(dstl_storage_close(o), 0);
        dstl_handle_free(h);
    }
    (void)end1;
    dstl_writer_close(w);
    cr_assert_eq(dstl_storage_close(s), 0);
}

Test(remote_faults, a_built_segments_md5_is_hashed_as_it_is_built_and_checks_its_upload) { built_md5(0); }
Test(remote_faults, a_built_segment_with_a_spoilt_md5_fails_its_upload) { built_md5(1); }
