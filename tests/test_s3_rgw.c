/*
 * tests/test_s3_rgw.c — integration tests of every S3 operation against the real server
 * tests/run.sh starts (Ceph RGW with SigV4 enforced), or DSTL_TEST_S3_* when set. Each test
 * makes its own bucket and removes it. Missing server environment = failure, not a skip.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "helpers_remote.h"
#include "payload.h"
#include "s3/s3_int.h"

static t_remote fx;         /* its client fx.s3 and bucket fx.bucket */

static void setup(void) { t_remote_init(&fx, "rgw"); }

static void teardown(void) { t_remote_fini(&fx); }

TestSuite(s3_rgw, .init = setup, .fini = teardown, .timeout = 90);

static void *pattern(size_t len, uint64_t seed)
{
    void *p = malloc(len);
    cr_assert(p);
    payload_fill(PAYLOAD_RANDOM, seed, 0, p, len);
    return p;
}

Test(s3_rgw, put_head_get_delete_round_trip)
{
    s3_result r;
    const char *key = "dir/a key with spaces & symbols $=+!";
    cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, key, "hello world", 11, false, &r), 0, "%s",
                 r.error);
    cr_assert_str_eq(r.etag, "\"5eb63bbbe01eeed093cb22bb8f5acdc3\"");
    cr_assert_eq(r.attempts, 1);

    cr_assert_eq(s3_head_object_sync(fx.s3, fx.bucket, key, &r), 0, "%s", r.error);
    cr_assert_eq(r.bytes, 11);
    cr_assert_str_eq(r.etag, "\"5eb63bbbe01eeed093cb22bb8f5acdc3\"");

    char buf[8] = {0};
    cr_assert_eq(s3_get_object_sync(fx.s3, fx.bucket, key, 6, buf, 5, &r), 0, "%s", r.error);
    cr_assert_eq(r.bytes, 5);
    cr_assert_eq(r.object_size, 11);
    cr_assert_str_eq(buf, "world");

    /* a range running past the end gives what there is */
    memset(buf, 0, sizeof buf);
    cr_assert_eq(s3_get_object_sync(fx.s3, fx.bucket, key, 9, buf, 7, &r), 0, "%s", r.error);
    cr_assert_eq(r.bytes, 2);
    cr_assert_str_eq(buf, "ld");

    cr_assert_eq(s3_get_object_sync(fx.s3, fx.bucket, key, 11, buf, 4, &r), -ERANGE, "%s", r.error);
    cr_assert_eq(s3_delete_object_sync(fx.s3, fx.bucket, key, &r), 0, "%s", r.error);
    cr_assert_eq(s3_head_object_sync(fx.s3, fx.bucket, key, &r), -ENOENT);
    cr_assert(strstr(r.error, "HEAD s3://") && strstr(r.error, "404"), "%s", r.error);
    cr_assert_eq(s3_get_object_sync(fx.s3, fx.bucket, key, 0, buf, 4, &r), -ENOENT);
    cr_assert(strstr(r.error, "NoSuchKey"), "%s", r.error);
    /* deleting what is gone succeeds */
    cr_assert_eq(s3_delete_object_sync(fx.s3, fx.bucket, key, &r), 0, "%s", r.error);
}

Test(s3_rgw, empty_object_and_create_bucket_twice)
{
    s3_result r;
    cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, "empty", "", 0, false, &r), 0, "%s", r.error);
    cr_assert_eq(s3_head_object_sync(fx.s3, fx.bucket, "empty", &r), 0, "%s", r.error);
    cr_assert_eq(r.bytes, 0);
    cr_assert_eq(s3_create_bucket_sync(fx.s3, fx.bucket, &r), 0, "%s", r.error);
}

Test(s3_rgw, if_none_match_refuses_overwrite)
{
    s3_result r;
    cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, "once", "first", 5, true, &r), 0, "%s", r.error);
    cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, "once", "second", 6, true, &r), -EEXIST);
    cr_assert(strstr(r.error, "PUT s3://") && strstr(r.error, "/once: 412"), "%s", r.error);
    char buf[8] = {0};
    cr_assert_eq(s3_get_object_sync(fx.s3, fx.bucket, "once", 0, buf, 8, &r), 0, "%s", r.error);
    cr_assert_str_eq(buf, "first");
    /* without the condition the same PUT overwrites */
    cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, "once", "second", 6, false, &r), 0, "%s", r.error);
}

Test(s3_rgw, multipart_parallel_parts_read_back_at_odd_offsets)
{
    const size_t part = 5u << 20, len = 3 * part + 12345; /* 4 parts, the last small */
    uint8_t *data = pattern(len, 42);
    s3_upload_opts uo = {.part_size = part, .multipart_threshold = 6u << 20};
    s3_result r;
    s3_stats before, after;
    s3_client_stats(fx.s3, &before);
    cr_assert_eq(s3_upload_sync(fx.s3, fx.bucket, "mpu/object", data, len, &uo, &r), 0, "%s", r.error);
    s3_client_stats(fx.s3, &after);
    cr_assert_eq(r.parts, 4);
    /* create + 4 parts + complete, and the computed multipart ETag is the object's */
    cr_assert_eq(after.requests - before.requests, 6);
    cr_assert(strstr(r.etag, "-4\""), "%s", r.etag);
    char etag[128];
    snprintf(etag, sizeof etag, "%s", r.etag);
    cr_assert_eq(s3_head_object_sync(fx.s3, fx.bucket, "mpu/object", &r), 0, "%s", r.error);
    cr_assert_eq(r.bytes, len);
    cr_assert_str_eq(r.etag, etag);

    const uint64_t offs[] = {0, 1, part - 3, part + 7777, 2 * part - 1, 3 * part + 1, len - 17};
    uint8_t *back = malloc(1u << 20);
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        size_t n = offs[i] + (1u << 20) > len ? len - offs[i] : (1u << 20) - 13;
        cr_assert_eq(s3_get_object_sync(fx.s3, fx.bucket, "mpu/object", offs[i], back, n, &r), 0,
                     "%s", r.error);
        cr_assert_eq(r.bytes, n);
        cr_assert_eq(memcmp(back, data + offs[i], n), 0, "bytes differ at offset %llu",
                     (unsigned long long)offs[i]);
    }
    size_t objects = 9, uploads = 9;
    cr_assert_eq(t_s3_count(fx.s3, fx.bucket, NULL, &objects, &uploads), 0);
    cr_assert_eq(objects, 1);
    cr_assert_eq(uploads, 0);
    free(back);
    free(data);
}

typedef struct part_wait {
    int done;
    s3_result res[3];
} part_wait;

static void part_cb(void *ctx, const s3_result *r)
{
    part_wait *w = ctx;
    w->res[w->done++] = *r;
}

Test(s3_rgw, multipart_low_level_parts_list_complete)
{
    s3_result r;
    const size_t part = 5u << 20;
    uint8_t *data = pattern(3 * part, 7);
    cr_assert_eq(s3_create_multipart_upload_sync(fx.s3, fx.bucket, "ll", &r), 0, "%s", r.error);
    char id[512];
    snprintf(id, sizeof id, "%s", r.upload_id);
    cr_assert(id[0]);
    /* three parts in flight at once on the event loop */
    part_wait w = {0};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(s3_upload_part(fx.s3, fx.bucket, "ll", id, i + 1, data + (size_t)i * part, part,
                                    NULL, part_cb, &w), 0);
    cr_assert_eq(s3_client_pending(fx.s3), 3);
    while (w.done < 3) cr_assert_geq(s3_client_run(fx.s3, NULL, 0, 1000), 0);
    for (int i = 0; i < 3; i++) cr_assert_eq(w.res[i].err, 0, "%s", w.res[i].error);

    s3_list l;
    cr_assert_eq(s3_list_parts_all_sync(fx.s3, fx.bucket, "ll", id, &l, &r), 0, "%s", r.error);
    cr_assert_eq(l.n_parts, 3);
    s3_part_info parts[3];
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(l.parts[i].part_number, i + 1);
        cr_assert_eq(l.parts[i].size, part);
        parts[i] = l.parts[i];
    }
    s3_list_clear(&l);
    cr_assert_eq(s3_list_multipart_uploads_all_sync(fx.s3, fx.bucket, NULL, 0, &l, &r), 0, "%s", r.error);
    cr_assert_eq(l.n_uploads, 1);
    cr_assert_str_eq(l.uploads[0].upload_id, id);
    cr_assert_str_eq(l.uploads[0].key, "ll");
    s3_list_clear(&l);

    char want[72];
    cr_assert_eq(s3_multipart_etag(parts, 3, want), 0);
    cr_assert_eq(s3_complete_multipart_upload_sync(fx.s3, fx.bucket, "ll", id, parts, 3, false, &r), 0,
                 "%s", r.error);
    cr_assert_str_eq(r.etag, want); /* RGW leaves it empty: the computed one is given */
    cr_assert_eq(s3_head_object_sync(fx.s3, fx.bucket, "ll", &r), 0, "%s", r.error);
    cr_assert_str_eq(r.etag, want);
    cr_assert_eq(r.bytes, 3 * part);
    free(data);
}

Test(s3_rgw, abort_removes_the_upload)
{
    s3_result r;
    cr_assert_eq(s3_create_multipart_upload_sync(fx.s3, fx.bucket, "ab", &r), 0, "%s", r.error);
    char id[512];
    snprintf(id, sizeof id, "%s", r.upload_id);
    cr_assert_eq(s3_upload_part_sync(fx.s3, fx.bucket, "ab", id, 1, "xyz", 3, &r), 0, "%s", r.error);
    cr_assert_eq(s3_abort_multipart_upload_sync(fx.s3, fx.bucket, "ab", id, &r), 0, "%s", r.error);
    size_t objects = 9, uploads = 9;
    cr_assert_eq(t_s3_count(fx.s3, fx.bucket, NULL, &objects, &uploads), 0);
    cr_assert_eq(objects, 0);
    cr_assert_eq(uploads, 0);
    s3_list l;
    cr_assert_eq(s3_list_parts_all_sync(fx.s3, fx.bucket, "ab", id, &l, &r), -ENOENT, "%s", r.error);
    /* aborting again: the upload is gone, which is what abort wants */
    cr_assert_eq(s3_abort_multipart_upload_sync(fx.s3, fx.bucket, "ab", id, &r), 0, "%s", r.error);
}

typedef struct many {
    size_t done, failed;
    char first_error[512];
} many;

static void many_cb(void *ctx, const s3_result *r)
{
    many *m = ctx;
    m->done++;
    if (r->err && !m->failed++) snprintf(m->first_error, sizeof m->first_error, "%s", r->error);
}

static void put_many(const char *prefix, size_t n, char ***keys_out)
{
    char **keys = calloc(n, sizeof *keys);
    many m = {0};
    for (size_t i = 0; i < n; i++) {
        cr_assert(asprintf(&keys[i], "%s%05zu", prefix, i) > 0);
        cr_assert_eq(s3_put_object(fx.s3, fx.bucket, keys[i], "x", 1, false, NULL, many_cb, &m), 0);
    }
    while (m.done < n) cr_assert_geq(s3_client_run(fx.s3, NULL, 0, 1000), 0);
    cr_assert_eq(m.failed, 0, "%s", m.first_error);
    *keys_out = keys;
}

Test(s3_rgw, delete_objects_1500_keys_in_two_batches, .timeout = 120)
{
    char **keys;
    put_many("del/", 1500, &keys);
    size_t objects = 0, uploads = 0;
    cr_assert_eq(t_s3_count(fx.s3, fx.bucket, "del/", &objects, &uploads), 0);
    cr_assert_eq(objects, 1500);
    s3_stats before, after;
    s3_client_stats(fx.s3, &before);
    s3_result r;
    cr_assert_eq(s3_delete_objects_sync(fx.s3, fx.bucket, (const char *const *)keys, 1500, &r), 0, "%s",
                 r.error);
    s3_client_stats(fx.s3, &after);
    cr_assert_eq(after.requests - before.requests, 2, "1,500 keys are two requests");
    cr_assert_eq(r.deleted, 1500);
    cr_assert_eq(r.delete_errors, 0);
    cr_assert_eq(t_s3_count(fx.s3, fx.bucket, "del/", &objects, &uploads), 0);
    cr_assert_eq(objects, 0);
    for (size_t i = 0; i < 1500; i++) free(keys[i]);
    free(keys);
}

typedef struct page_wait {
    bool done;
    int err;
    size_t n;
    char first[64];
    char token[1024];
    bool truncated;
} page_wait;

static void page_cb(void *ctx, const s3_result *r)
{
    page_wait *w = ctx;
    w->done = true;
    w->err = r->err;
    if (r->err) return;
    w->n = r->list->n_objects;
    snprintf(w->first, sizeof w->first, "%s", w->n ? r->list->objects[0].key : "");
    snprintf(w->token, sizeof w->token, "%s", r->list->next_token ? r->list->next_token : "");
    w->truncated = r->list->truncated;
}

Test(s3_rgw, list_objects_with_continuation)
{
    char **keys;
    put_many("ls/", 25, &keys);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, "other/x", "y", 1, false, &r), 0, "%s", r.error);
    char token[1024] = "";
    size_t total = 0;
    int pages = 0;
    for (;;) {
        page_wait w = {0};
        cr_assert_eq(s3_list_objects(fx.s3, fx.bucket, "ls/", NULL, token[0] ? token : NULL, 10, NULL,
                                     page_cb, &w), 0);
        while (!w.done) cr_assert_geq(s3_client_run(fx.s3, NULL, 0, 1000), 0);
        cr_assert_eq(w.err, 0);
        cr_assert_str_eq(w.first, keys[total], "page %d starts at the next key", pages);
        total += w.n;
        pages++;
        if (!w.truncated) break;
        cr_assert(w.token[0]);
        snprintf(token, sizeof token, "%s", w.token);
        cr_assert_lt(pages, 10);
    }
    cr_assert_eq(pages, 3);
    cr_assert_eq(total, 25);
    s3_list l;
    cr_assert_eq(s3_list_objects_all_sync(fx.s3, fx.bucket, NULL, 0, &l, &r), 0, "%s", r.error);
    cr_assert_eq(l.n_objects, 26);
    s3_list_clear(&l);
    cr_assert_eq(s3_list_objects_all_sync(fx.s3, fx.bucket, "ls/", 12, &l, &r), 0, "%s", r.error);
    cr_assert_eq(l.n_objects, 12, "max_items bounds the listing");
    s3_list_clear(&l);
    for (size_t i = 0; i < 25; i++) free(keys[i]);
    free(keys);
}

Test(s3_rgw, wrong_secret_is_rejected_with_a_clear_error)
{
    s3_opts o = t_s3_opts(&fx.env);
    o.secret_key = "not-the-secret-0123456789";
    s3_client *bad;
    s3_result r;
    cr_assert_eq(s3_client_new(&o, &bad, &r), 0, "%s", r.error);
    cr_assert_eq(s3_put_object_sync(bad, fx.bucket, "k", "v", 1, false, &r), -EACCES);
    cr_assert_eq(r.http_status, 403);
    cr_assert_eq(r.attempts, 1, "a 403 is not retried");
    char want[128];
    snprintf(want, sizeof want, "PUT s3://%s/k: 403 SignatureDoesNotMatch", fx.bucket);
    cr_assert(strstr(r.error, want), "%s", r.error);
    cr_assert(strstr(r.error, "req-id "), "%s", r.error);
    cr_assert_null(strstr(r.error, o.secret_key));
    cr_assert_null(strstr(r.error, fx.env.secret_key));
    s3_client_free(bad);
}

Test(s3_rgw, missing_bucket_is_enoent)
{
    s3_result r;
    char name[64];
    t_s3_bucket_name(name, sizeof name, "absent");
    cr_assert_eq(s3_put_object_sync(fx.s3, name, "k", "v", 1, false, &r), -ENOENT);
    cr_assert(strstr(r.error, "NoSuchBucket"), "%s", r.error);
}

/* ---- the event loop: extra fds, wakeup from another thread, cancel ---- */

static void *poke(void *arg)
{
    int fd = *(int *)arg;
    usleep(50 * 1000);
    uint64_t one = 1;
    if (write(fd, &one, 8) != 8) abort(); /* no Criterion asserts off the test's thread */
    s3_client_wakeup(fx.s3);
    return NULL;
}

Test(s3_rgw, run_waits_on_extra_fds_and_wakeup)
{
    int efd = eventfd(0, EFD_NONBLOCK);
    cr_assert_geq(efd, 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, poke, &efd), 0);
    s3_waitfd w = {.fd = efd, .events = POLLIN};
    int turns = 0;
    while (!(w.revents & POLLIN) && turns++ < 100) cr_assert_geq(s3_client_run(fx.s3, &w, 1, 10000), 0);
    cr_assert(w.revents & POLLIN, "the eventfd's readiness is reported");
    cr_assert_lt(turns, 100);
    pthread_join(t, NULL);
    close(efd);
}

typedef struct one_wait {
    bool done;
    s3_result r;
} one_wait;

static void one_cb(void *ctx, const s3_result *r)
{
    one_wait *w = ctx;
    cr_assert_not(w->done, "a callback runs once");
    w->done = true;
    w->r = *r;
}

Test(s3_rgw, callbacks_never_run_inside_the_start_call)
{
    one_wait w = {0};
    cr_assert_eq(s3_put_object(fx.s3, fx.bucket, "cb", "x", 1, false, NULL, one_cb, &w), 0);
    cr_assert_not(w.done);
    while (!w.done) cr_assert_geq(s3_client_run(fx.s3, NULL, 0, 1000), 0);
    cr_assert_eq(w.r.err, 0, "%s", w.r.error);
    cr_assert_eq(s3_client_pending(fx.s3), 0);
}

/* Runs the loop until the detached cleanups are over (bounded by their deadline). */
static void finish_cleanups(s3_client *c)
{
    for (int i = 0; s3_client_cleanups(c) > 0 && i < 10000; i++)
        cr_assert_geq(s3_client_run(c, NULL, 0, 100), 0);
    cr_assert_eq(s3_client_cleanups(c), 0, "the cleanups ended by their deadline");
}

Test(s3_rgw, cancelled_multipart_upload_leaves_nothing)
{
    const size_t len = 24u << 20;
    uint8_t *data = pattern(len, 3);
    s3_upload_opts uo = {.part_size = 5u << 20, .multipart_threshold = 6u << 20};
    one_wait w = {0};
    s3_op *op = NULL;
    cr_assert_eq(s3_upload(fx.s3, fx.bucket, "cancelme", data, len, &uo, &op, one_cb, &w), 0);
    /* let the upload get going: the create, then some parts */
    s3_stats st;
    for (int i = 0; i < 400; i++) {
        cr_assert_geq(s3_client_run(fx.s3, NULL, 0, 5), 0);
        s3_client_stats(fx.s3, &st);
        if (st.requests >= 3) break;
    }
    cr_assert_not(w.done);
    s3_op_cancel(op);
    cr_assert_not(w.done, "cancel does not run the callback itself");
    while (!w.done) cr_assert_geq(s3_client_run(fx.s3, NULL, 0, 1000), 0);
    cr_assert_eq(w.r.err, -ECANCELED, "%s", w.r.error);
    finish_cleanups(fx.s3);
    size_t objects = 9, uploads = 9;
    cr_assert_eq(t_s3_count(fx.s3, fx.bucket, NULL, &objects, &uploads), 0);
    cr_assert_eq(objects, 0);
    cr_assert_eq(uploads, 0);
    free(data);
}

Test(s3_rgw, cancelled_put_leaves_nothing)
{
    const size_t len = 3u << 20;
    uint8_t *data = pattern(len, 4);
    one_wait w = {0};
    s3_op *op = NULL;
    cr_assert_eq(s3_put_object(fx.s3, fx.bucket, "cancelput", data, len, false, &op, one_cb, &w), 0);
    cr_assert_geq(s3_client_run(fx.s3, NULL, 0, 0), 0); /* launched, maybe partly sent */
    s3_op_cancel(op);
    while (!w.done) cr_assert_geq(s3_client_run(fx.s3, NULL, 0, 1000), 0);
    cr_assert_eq(w.r.err, -ECANCELED, "%s", w.r.error);
    finish_cleanups(fx.s3);
    size_t objects = 9, uploads = 9;
    cr_assert_eq(t_s3_count(fx.s3, fx.bucket, NULL, &objects, &uploads), 0);
    cr_assert_eq(objects, 0);
    free(data);
}

Test(s3_rgw, client_free_cancels_what_is_in_flight)
{
    one_wait w = {0};
    cr_assert_eq(s3_put_object(fx.s3, fx.bucket, "inflight", "x", 1, false, NULL, one_cb, &w), 0);
    s3_client_free(fx.s3);
    fx.s3 = NULL;
    cr_assert(w.done);
    cr_assert_eq(w.r.err, -ECANCELED);
    /* teardown needs a client */
    s3_opts o = t_s3_opts(&fx.env);
    cr_assert_eq(s3_client_new(&o, &fx.s3, NULL), 0);
}

Test(s3_rgw, unsigned_payload_with_crc32c)
{
    s3_opts o = t_s3_opts(&fx.env);
    o.payload = S3_PAYLOAD_UNSIGNED_CRC32C;
    s3_client *c2;
    s3_result r;
    cr_assert_eq(s3_client_new(&o, &c2, &r), 0, "%s", r.error);
    uint8_t *data = pattern(100000, 9);
    cr_assert_eq(s3_put_object_sync(c2, fx.bucket, "unsigned", data, 100000, false, &r), 0, "%s",
                 r.error);
    uint8_t *back = malloc(100000);
    cr_assert_eq(s3_get_object_sync(c2, fx.bucket, "unsigned", 0, back, 100000, &r), 0, "%s", r.error);
    cr_assert_eq(memcmp(back, data, 100000), 0);
    s3_client_free(c2);
    free(data);
    free(back);
}

Test(s3_rgw, results_and_listings_carry_the_servers_date)
{
    s3_result r;
    cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, "dated", "x", 1, false, &r), 0, "%s", r.error);
    int64_t put_date = r.server_date_ms;
    /* the server runs on this machine: its clock is ours, within any sane skew */
    int64_t local = (int64_t)time(NULL) * 1000;
    cr_assert(put_date > local - 86400000 && put_date < local + 86400000,
              "PUT's Date %lld vs local %lld", (long long)put_date, (long long)local);
    cr_assert_eq(put_date % 1000, 0, "IMF-fixdate has whole seconds");
    s3_list l;
    cr_assert_eq(s3_list_objects_all_sync(fx.s3, fx.bucket, NULL, 0, &l, &r), 0, "%s", r.error);
    cr_assert_geq(l.server_date_ms, put_date, "the listing came after the PUT");
    cr_assert_eq(l.n_objects, 1);
    cr_assert_geq(l.server_date_ms + 1000, l.objects[0].last_modified_ms,
                  "ages are judged on the server's clock: LastModified is not after its Date");
    s3_list_clear(&l);
}
