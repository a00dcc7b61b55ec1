/*
 * tests/test_s3_faults.c — fault injection between the client and the real server through
 * tests/tools/s3proxy: 500, 503 SlowDown, an answer delayed past the attempt timeout (-> a
 * hedged attempt), a connection reset mid-answer, a truncated body. For each class: success
 * within the attempt bound (3), a clear failure beyond it, and no leftover objects or
 * multipart uploads (checked by listing, directly against the server).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "helpers_remote.h"
#include "payload.h"
#include "s3/s3_int.h"

static t_remote fx;         /* fx.s3: straight to the server, for setup and checks */
static s3_client *cli;      /* through the proxy */
static t_s3_proxy proxy;

static void setup(void) { t_remote_init(&fx, "fault"); }

static void teardown(void)
{
    s3_client_free(cli);
    cli = NULL;
    t_s3_proxy_stop(&proxy);
    t_remote_fini(&fx);
}

TestSuite(s3_faults, .init = setup, .fini = teardown, .timeout = 60);

/* Starts the proxy with script and a client through it: 3 attempts, 10 ms backoff base,
 * hedge after attempt_ms, abandon an attempt after transfer_ms. */
static void through_proxy_t(const char *script, uint32_t attempt_ms, uint32_t transfer_ms)
{
    char why[256];
    cr_assert_eq(t_s3_proxy_start(&proxy, fx.env.endpoint, script, why, sizeof why), 0, "%s", why);
    s3_opts o = t_s3_opts(&fx.env);
    o.endpoint = proxy.url;
    o.attempt_timeout_ms = attempt_ms;
    o.transfer_timeout_ms = transfer_ms;
    o.max_attempts = 3;
    o.next_attempt_delay_ms = 10;
    s3_result r;
    cr_assert_eq(s3_client_new(&o, &cli, &r), 0, "%s", r.error);
}

/* Small requests, no hedging expected: hedge after 2 s, abandon after 5 s. */
static void through_proxy(const char *script)
{
    through_proxy_t(script, 2000, 5000);
}

/* Multipart (5 MiB parts, slow under sanitizers): no hedging unless a test wants it. */
static void through_proxy_mpu(const char *script)
{
    through_proxy_t(script, 10000, 20000);
}

/* Runs the proxied client's loop until its detached cleanups are over (each has a deadline:
 * the loop is bounded by it), so that what they remove is gone before counting. */
static void finish_cleanups(void)
{
    for (int i = 0; cli && s3_client_cleanups(cli) > 0 && i < 10000; i++)
        cr_assert_geq(s3_client_run(cli, NULL, 0, 100), 0);
    if (cli) cr_assert_eq(s3_client_cleanups(cli), 0, "the cleanups ended by their deadline");
}

static void assert_left(size_t objects_want)
{
    finish_cleanups();
    size_t objects = 99, uploads = 99;
    cr_assert_eq(t_s3_count(fx.s3, fx.bucket, NULL, &objects, &uploads), 0);
    cr_assert_eq(objects, objects_want, "objects left: %zu, want %zu", objects, objects_want);
    cr_assert_eq(uploads, 0, "multipart uploads left: %zu", uploads);
}

static uint8_t *pattern(size_t len, uint64_t seed)
{
    uint8_t *p = malloc(len);
    cr_assert(p);
    payload_fill(PAYLOAD_RANDOM, seed, 0, p, len);
    return p;
}

static void assert_has(const char *error, const char *what)
{
    cr_assert(strstr(error, what), "error '%s' lacks '%s'", error, what);
}

/* ---- 500 ---- */

Test(s3_faults, http_500_twice_then_success)
{
    through_proxy("PUT 500 x2");
    s3_result r;
    cr_assert_eq(s3_put_object_sync(cli, fx.bucket, "k", "v", 1, false, &r), 0, "%s", r.error);
    cr_assert_eq(r.attempts, 3);
    assert_left(1);
}

Test(s3_faults, http_500_beyond_the_bound_fails_clearly)
{
    through_proxy("PUT 500 x3");
    s3_result r;
    cr_assert_eq(s3_put_object_sync(cli, fx.bucket, "k", "v", 1, false, &r), DSTL_EREMOTE);
    assert_has(r.error, "PUT s3://");
    assert_has(r.error, "/k: 500 InternalError: injected by s3proxy");
    assert_has(r.error, "3 attempts");
    assert_has(r.error, "req-id s3proxy-");
    assert_left(0);
}

/* ---- 503 SlowDown ---- */

Test(s3_faults, slowdown_twice_then_success)
{
    through_proxy("PUT 503 x2");
    s3_result r;
    cr_assert_eq(s3_put_object_sync(cli, fx.bucket, "k", "v", 1, false, &r), 0, "%s", r.error);
    cr_assert_eq(r.attempts, 3);
    assert_left(1);
}

Test(s3_faults, slowdown_beyond_the_bound_fails_clearly)
{
    through_proxy("PUT 503 x3");
    s3_result r;
    cr_assert_eq(s3_put_object_sync(cli, fx.bucket, "k", "v", 1, false, &r), DSTL_EREMOTE);
    assert_has(r.error, "503 SlowDown: Please reduce your request rate");
    cr_assert_str_eq(r.s3_code, "SlowDown");
    assert_left(0);
}

/* ---- delayed answers: hedging ---- */

Test(s3_faults, slow_answer_is_hedged)
{
    through_proxy_t("PUT delay=3000 x2", 300, 1500);
    s3_stats before, after;
    s3_client_stats(cli, &before);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(cli, fx.bucket, "k", "hedged", 6, false, &r), 0, "%s", r.error);
    s3_client_stats(cli, &after);
    cr_assert_eq(after.hedges - before.hedges, 2);
    cr_assert_eq(r.attempts, 3);
    assert_left(1);
}

Test(s3_faults, hedged_put_if_none_match_sees_its_own_object)
{
    /* the first attempt lands but its answer is late; the hedge gets 412 from our own
     * object: a HEAD with our ETag settles it as success */
    through_proxy_t("PUT delay=3000 x1", 300, 1500);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(cli, fx.bucket, "k", "mine", 4, true, &r), 0, "%s", r.error);
    char want[72];
    s3_md5_etag("mine", 4, want);
    cr_assert_str_eq(r.etag, want);
    assert_left(1);
    /* someone else's object is still refused */
    cr_assert_eq(s3_put_object_sync(cli, fx.bucket, "k", "other", 5, true, &r), -EEXIST, "%s", r.error);
}

Test(s3_faults, answers_slower_than_the_transfer_timeout_fail_and_clean_up)
{
    through_proxy_t("PUT delay=5000 x3", 300, 1500);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(cli, fx.bucket, "k", "late", 4, false, &r), -ETIMEDOUT);
    assert_has(r.error, "PUT s3://");
    assert_has(r.error, "timed out");
    assert_has(r.error, "3 attempts");
    /* every attempt reached the server: the object it stored was ours and is deleted */
    assert_left(0);
}

/* ---- connection reset mid-answer ---- */

Test(s3_faults, reset_mid_body_twice_then_success)
{
    uint8_t *data = pattern(300000, 5);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, "g", data, 300000, false, &r), 0, "%s", r.error);
    through_proxy("GET reset x2");
    uint8_t *back = malloc(200000);
    cr_assert_eq(s3_get_object_sync(cli, fx.bucket, "g", 1001, back, 200000, &r), 0, "%s", r.error);
    cr_assert_eq(r.attempts, 3);
    cr_assert_eq(memcmp(back, data + 1001, 200000), 0);
    assert_left(1);
    free(back);
    free(data);
}

Test(s3_faults, reset_beyond_the_bound_fails_clearly_and_cleans_up)
{
    through_proxy("PUT reset x3");
    s3_result r;
    cr_assert_eq(s3_put_object_sync(cli, fx.bucket, "k", "v", 1, false, &r), DSTL_EREMOTE);
    assert_has(r.error, "Connection reset by peer");
    assert_has(r.error, "3 attempts");
    /* each reset came after the server stored the object: the cleanup deleted it */
    assert_left(0);
}

/* ---- truncated body ---- */

Test(s3_faults, truncated_body_twice_then_success)
{
    uint8_t *data = pattern(100000, 6);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, "t", data, 100000, false, &r), 0, "%s", r.error);
    through_proxy("GET truncate x2");
    uint8_t *back = malloc(100000);
    cr_assert_eq(s3_get_object_sync(cli, fx.bucket, "t", 0, back, 100000, &r), 0, "%s", r.error);
    cr_assert_eq(r.attempts, 3);
    cr_assert_eq(memcmp(back, data, 100000), 0);
    free(back);
    free(data);
}

Test(s3_faults, truncated_body_beyond_the_bound_fails_clearly)
{
    s3_result r;
    cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, "t", "0123456789", 10, false, &r), 0, "%s",
                 r.error);
    through_proxy("GET truncate x3");
    char back[16];
    cr_assert_eq(s3_get_object_sync(cli, fx.bucket, "t", 0, back, 10, &r), DSTL_EREMOTE);
    assert_has(r.error, "GET s3://");
    assert_has(r.error, "curl 18");
    assert_left(1);
}

Test(s3_faults, truncated_listing_is_retried)
{
    s3_result r;
    cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, "l1", "a", 1, false, &r), 0, "%s", r.error);
    through_proxy("GET?list-type truncate x2");
    s3_list l;
    cr_assert_eq(s3_list_objects_all_sync(cli, fx.bucket, NULL, 0, &l, &r), 0, "%s", r.error);
    cr_assert_eq(l.n_objects, 1);
    s3_list_clear(&l);
}

/* ---- multipart uploads under faults ---- */

static const s3_upload_opts mpu_opts = {.part_size = 5u << 20, .multipart_threshold = 6u << 20};

Test(s3_faults, multipart_survives_part_and_complete_faults)
{
    const size_t len = 11u << 20;
    uint8_t *data = pattern(len, 8);
    through_proxy_mpu("PUT?partNumber=1 500 x2; PUT?partNumber=2 reset x1; POST?uploadId 503 x1");
    s3_result r;
    cr_assert_eq(s3_upload_sync(cli, fx.bucket, "m", data, len, &mpu_opts, &r), 0, "%s", r.error);
    cr_assert_eq(r.parts, 3);
    assert_left(1);
    cr_assert_eq(s3_head_object_sync(fx.s3, fx.bucket, "m", &r), 0, "%s", r.error);
    cr_assert_eq(r.bytes, len);
    free(data);
}

Test(s3_faults, multipart_part_beyond_the_bound_aborts_the_upload)
{
    const size_t len = 11u << 20;
    uint8_t *data = pattern(len, 9);
    through_proxy_mpu("PUT?partNumber=2 500 x3");
    s3_result r;
    cr_assert_eq(s3_upload_sync(cli, fx.bucket, "m", data, len, &mpu_opts, &r), DSTL_EREMOTE, "%s",
                 r.error);
    assert_has(r.error, "UploadPart s3://");
    assert_has(r.error, "(part 2 of 3)");
    assert_left(0);
    free(data);
}

Test(s3_faults, multipart_slow_complete_is_hedged_and_resolved)
{
    /* the first Complete lands, its answer is late; the hedged Complete finds the upload gone
     * (NoSuchUpload): a HEAD with the multipart ETag settles it as success */
    const size_t len = 11u << 20;
    uint8_t *data = pattern(len, 10);
    through_proxy_t("POST?uploadId delay=3000 x1", 1000, 20000);
    s3_result r;
    cr_assert_eq(s3_upload_sync(cli, fx.bucket, "m", data, len, &mpu_opts, &r), 0, "%s", r.error);
    cr_assert(strstr(r.etag, "-3\""), "%s", r.etag);
    assert_left(1);
    free(data);
}

Test(s3_faults, multipart_retried_create_leaves_no_stray_upload)
{
    /* the first Create is carried out but its answer is cut: the retry makes a second
     * upload; the first, which we never heard of, is found and aborted */
    const size_t len = 11u << 20;
    uint8_t *data = pattern(len, 11);
    through_proxy_mpu("POST?uploads= reset x1");
    s3_result r;
    cr_assert_eq(s3_upload_sync(cli, fx.bucket, "m", data, len, &mpu_opts, &r), 0, "%s", r.error);
    assert_left(1);
    free(data);
}

Test(s3_faults, multipart_complete_beyond_the_bound_cleans_up)
{
    const size_t len = 11u << 20;
    uint8_t *data = pattern(len, 12);
    through_proxy_mpu("POST?uploadId 500 x3");
    s3_result r;
    cr_assert_eq(s3_upload_sync(cli, fx.bucket, "m", data, len, &mpu_opts, &r), DSTL_EREMOTE, "%s",
                 r.error);
    assert_has(r.error, "CompleteMultipartUpload s3://");
    assert_has(r.error, "500 InternalError");
    assert_left(0);
    free(data);
}

/* ---- issue 9: integrity in transit, libcurl's own re-sends ---- */

/* A client through the proxy that sends UNSIGNED-PAYLOAD + x-amz-checksum-crc32c (DSTL's
 * default): RGW 16 does not check that header, so a body damaged in transit is stored. */
static void through_proxy_unsigned(const char *script)
{
    char why[256];
    cr_assert_eq(t_s3_proxy_start(&proxy, fx.env.endpoint, script, why, sizeof why), 0, "%s", why);
    s3_opts o = t_s3_opts(&fx.env);
    o.endpoint = proxy.url;
    o.attempt_timeout_ms = 10000;
    o.transfer_timeout_ms = 20000;
    o.max_attempts = 3;
    o.next_attempt_delay_ms = 10;
    o.payload = S3_PAYLOAD_UNSIGNED_CRC32C;
    s3_result r;
    cr_assert_eq(s3_client_new(&o, &cli, &r), 0, "%s", r.error);
}

/* What the server holds under key equals want (read straight from the server). */
static void assert_object_is(const char *key, const uint8_t *want, size_t len)
{
    uint8_t *back = malloc(len + 1);
    cr_assert(back);
    s3_result r;
    cr_assert_eq(s3_get_object_sync(fx.s3, fx.bucket, key, 0, back, len + 1, &r), 0, "%s", r.error);
    cr_assert_eq(r.bytes, len);
    size_t at = 0;
    while (at < len && back[at] == want[at]) at++;
    cr_assert_eq(at, len, "s3://%s/%s differs from what was uploaded at byte %zu", fx.bucket, key, at);
    free(back);
}

Test(s3_faults, put_body_corrupted_in_transit_is_detected_and_replaced)
{
    const size_t len = 200000;
    uint8_t *data = pattern(len, 21);
    through_proxy_unsigned("PUT corrupt x1");
    s3_result r;
    cr_assert_eq(s3_put_object_sync(cli, fx.bucket, "c", data, len, true, &r), 0, "%s", r.error);
    cr_assert_eq(r.attempts, 2, "the corrupt copy was not acknowledged: %d attempts", r.attempts);
    assert_object_is("c", data, len);
    char md5[72];
    s3_md5_etag(data, len, md5);
    cr_assert_str_eq(r.etag, md5);
    free(data);
}

Test(s3_faults, part_corrupted_in_transit_is_detected_and_replaced)
{
    const size_t len = 11u << 20;
    uint8_t *data = pattern(len, 22);
    through_proxy_unsigned("PUT?partNumber=2 corrupt x1");
    s3_result r;
    cr_assert_eq(s3_upload_sync(cli, fx.bucket, "cm", data, len, &mpu_opts, &r), 0, "%s", r.error);
    assert_object_is("cm", data, len);
    assert_left(1);
    free(data);
}

Test(s3_faults, complete_resent_by_libcurl_is_settled_as_ours)
{
    /* the Complete is carried out, its reused connection dies before any answer byte; libcurl
     * re-sends it on a fresh connection and the server answers NoSuchUpload (AWS does; RGW 16
     * answers 200, so the proxy gives AWS's answer to the re-send) */
    const size_t len = 11u << 20;
    uint8_t *data = pattern(len, 23);
    through_proxy_mpu("POST?uploadId drop-reused x1; POST?uploadId nosuchupload x1");
    s3_result r;
    s3_stats before, after;
    s3_client_stats(cli, &before);
    cr_assert_eq(s3_upload_sync(cli, fx.bucket, "rc", data, len, &mpu_opts, &r), 0, "%s", r.error);
    s3_client_stats(cli, &after);
    cr_assert(strstr(r.etag, "-3\""), "%s", r.etag);
    cr_assert_eq(after.resends - before.resends, 1, "libcurl's re-send was seen");
    assert_left(1);
    assert_object_is("rc", data, len);
    free(data);
}

Test(s3_faults, put_if_none_match_resent_by_libcurl_is_settled_as_ours)
{
    through_proxy("PUT?resent drop-reused x1");
    s3_result r;
    /* a first request leaves a connection to reuse */
    cr_assert_eq(s3_put_object_sync(cli, fx.bucket, "warm", "w", 1, false, &r), 0, "%s", r.error);
    cr_assert_eq(s3_put_object_sync(cli, fx.bucket, "resent", "mine", 4, true, &r), 0, "%s", r.error);
    cr_assert_eq(r.attempts, 2, "libcurl's re-send counts as an attempt");
    char md5[72];
    s3_md5_etag("mine", 4, md5);
    cr_assert_str_eq(r.etag, md5);
    assert_left(2);
    assert_object_is("resent", (const uint8_t *)"mine", 4);
}
