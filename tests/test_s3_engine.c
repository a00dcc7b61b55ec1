/*
 * tests/test_s3_engine.c — the request engine without a network: the transport seam answers
 * (or hangs, or fails) per a small rule table, the clock only moves when the client sleeps.
 * Retries, hedges, timeouts, ambiguity resolution, multipart orchestration and cancellation
 * are checked by what the client sent and what the callbacks got — no timing assertions.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "s3/s3.h"

typedef enum { A_ANSWER, A_HANG, A_FAIL } action;

typedef struct fake_rule {
    const char *method;
    const char *url_has; /* NULL: any */
    action act;
    int status;
    const char *body;
    const char *etag;
    int err;   /* A_FAIL */
    int times; /* uses left; 0 = forever */
} fake_rule;

typedef struct fake {
    fake_rule rules[16];
    int n_rules;
    uint64_t now_ms;
    int calls;
    char log[64][160]; /* "METHOD url" per call */
    bool headers_ok;
} fake;

static fake F;

static uint64_t f_now(void *ctx)
{
    return ((fake *)ctx)->now_ms;
}

static int64_t f_wall(void *ctx)
{
    (void)ctx;
    return 1369353600; /* 20130524T000000Z */
}

static void f_sleep(void *ctx, uint32_t ms)
{
    ((fake *)ctx)->now_ms += ms;
}

static uint32_t f_random(void *ctx)
{
    (void)ctx;
    return UINT32_MAX / 2;
}

static int f_exchange(void *ctx, const s3_http_request *req, s3_http_response *resp)
{
    fake *f = ctx;
    if (f->calls < 64) snprintf(f->log[f->calls], sizeof f->log[0], "%s %s", req->method, req->url);
    f->calls++;
    bool auth = false, date = false, sha = false;
    for (size_t i = 0; i < req->n_headers; i++) {
        const char *h = req->headers[i];
        if (strncmp(h, "Authorization: AWS4-HMAC-SHA256 Credential=AKIDTEST/20130524/", 60) == 0 &&
            strstr(h, "SignedHeaders=host;") && !strstr(h, "secret-test"))
            auth = true;
        if (strcmp(h, "x-amz-date: 20130524T000000Z") == 0) date = true;
        if (strncmp(h, "x-amz-content-sha256: ", 22) == 0) sha = true;
    }
    if (!(auth && date && sha)) f->headers_ok = false;
    for (int i = 0; i < f->n_rules; i++) {
        fake_rule *r = &f->rules[i];
        if (r->times < 0) continue;
        if (strcmp(r->method, req->method)) continue;
        if (r->url_has && !strstr(req->url, r->url_has)) continue;
        if (r->times > 0 && --r->times == 0) r->times = -1;
        if (r->act == A_HANG) return 1;
        if (r->act == A_FAIL) return r->err;
        resp->status = r->status;
        resp->body = r->body;
        resp->body_len = r->body ? strlen(r->body) : 0;
        resp->etag = r->etag;
        resp->request_id = "fake-req";
        return 0;
    }
    resp->status = 500;
    resp->body = "<Error><Code>InternalError</Code><Message>no rule</Message></Error>";
    resp->body_len = strlen(resp->body);
    return 0;
}

static const s3_transport transport = {f_exchange, &F};

static void rule(const char *method, const char *url_has, action act, int status,
                 const char *body, const char *etag, int times)
{
    F.rules[F.n_rules++] = (fake_rule){method, url_has, act, status, body, etag, 0, times};
}

static s3_client *client(void)
{
    F.now_ms = 1000;
    F.headers_ok = true;
    s3_opts o = {.endpoint = "http://s3.test:9000", .path_style = true, .access_key = "AKIDTEST",
                 .secret_key = "secret-test", .attempt_timeout_ms = 100,
                 .transfer_timeout_ms = 1000, .max_attempts = 3, .next_attempt_delay_ms = 50,
                 .now_ms = f_now, .wall_time_s = f_wall, .sleep_ms = f_sleep, .random = f_random,
                 .seam_ctx = &F, .transport = &transport};
    s3_client *c;
    s3_result r;
    cr_assert_eq(s3_client_new(&o, &c, &r), 0, "%s", r.error);
    return c;
}

static const char *ERR503 = "<Error><Code>SlowDown</Code><Message>Please reduce your request "
                            "rate.</Message><RequestId>rid-1</RequestId></Error>";

Test(s3_engine, retries_5xx_then_succeeds)
{
    s3_client *c = client();
    rule("PUT", NULL, A_ANSWER, 500, "<Error><Code>InternalError</Code></Error>", NULL, 2);
    rule("PUT", NULL, A_ANSWER, 200, NULL, "\"abc\"", 0);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "v", 1, false, &r), 0, "%s", r.error);
    cr_assert_eq(r.attempts, 3);
    cr_assert_eq(F.calls, 3);
    cr_assert_str_eq(r.etag, "\"abc\"");
    cr_assert(F.headers_ok, "every attempt is signed with the injected clock");
    s3_stats st;
    s3_client_stats(c, &st);
    cr_assert_eq(st.retries, 2);
    cr_assert_eq(st.hedges, 0);
    cr_assert_geq(F.now_ms, 1000 + 25 + 50, "backoff waited through the injected sleep");
    s3_client_free(c);
}

Test(s3_engine, gives_up_after_max_attempts_with_the_last_error)
{
    s3_client *c = client();
    rule("GET", NULL, A_ANSWER, 503, ERR503, NULL, 0);
    char buf[4];
    s3_result r;
    cr_assert_eq(s3_get_object_sync(c, "b", "dir/k", 0, buf, 4, &r), DSTL_EREMOTE);
    cr_assert_eq(r.attempts, 3);
    cr_assert_eq(F.calls, 3);
    cr_assert_str_eq(r.error, "GET s3://b/dir/k: 503 SlowDown: Please reduce your request rate. "
                              "(req-id fake-req, 3 attempts)");
    s3_client_free(c);
}

Test(s3_engine, fatal_4xx_is_not_retried)
{
    s3_client *c = client();
    rule("DELETE", NULL, A_ANSWER, 403, "<Error><Code>AccessDenied</Code></Error>", NULL, 0);
    s3_result r;
    cr_assert_eq(s3_delete_object_sync(c, "b", "k", &r), -EACCES);
    cr_assert_eq(F.calls, 1);
    s3_client_free(c);
}

Test(s3_engine, slow_attempt_is_hedged_and_first_success_wins)
{
    s3_client *c = client();
    rule("PUT", NULL, A_HANG, 0, NULL, NULL, 1);
    rule("PUT", NULL, A_ANSWER, 200, NULL, "\"e\"", 0);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "v", 1, false, &r), 0, "%s", r.error);
    cr_assert_eq(F.calls, 2);
    s3_stats st;
    s3_client_stats(c, &st);
    cr_assert_eq(st.hedges, 1);
    cr_assert_eq(st.retries, 0);
    cr_assert_eq(s3_client_pending(c), 0, "the hung attempt was cancelled with the request");
    s3_client_free(c);
}

Test(s3_engine, attempts_that_never_answer_time_out)
{
    s3_client *c = client();
    rule("HEAD", NULL, A_HANG, 0, NULL, NULL, 0);
    s3_result r;
    cr_assert_eq(s3_head_object_sync(c, "b", "k", &r), -ETIMEDOUT);
    cr_assert_eq(F.calls, 3, "two hedges, then no more attempts");
    cr_assert(strstr(r.error, "HEAD s3://b/k: ") && strstr(r.error, "3 attempts"), "%s", r.error);
    s3_client_free(c);
}

Test(s3_engine, network_errors_are_retried)
{
    s3_client *c = client();
    F.rules[F.n_rules++] = (fake_rule){"GET", NULL, A_FAIL, 0, NULL, NULL, -ECONNRESET, 2};
    rule("GET", NULL, A_ANSWER, 206, "abcd", NULL, 0);
    char buf[4];
    s3_result r;
    cr_assert_eq(s3_get_object_sync(c, "b", "k", 10, buf, 4, &r), 0, "%s", r.error);
    cr_assert_eq(memcmp(buf, "abcd", 4), 0);
    cr_assert_eq(r.attempts, 3);
    s3_client_free(c);
}

Test(s3_engine, get_longer_than_the_buffer_is_refused)
{
    s3_client *c = client();
    rule("GET", NULL, A_ANSWER, 206, "abcdefgh", NULL, 0);
    char buf[4];
    s3_result r;
    cr_assert_eq(s3_get_object_sync(c, "b", "k", 0, buf, 4, &r), -EMSGSIZE);
    cr_assert_eq(F.calls, 1);
    s3_client_free(c);
}

Test(s3_engine, malformed_listing_is_retried)
{
    s3_client *c = client();
    rule("GET", "list-type=2", A_ANSWER, 200, "<ListBucketResult><Contents>", NULL, 1);
    rule("GET", "list-type=2", A_ANSWER, 200,
         "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><IsTruncated>false"
         "</IsTruncated><Contents><Key>a&amp;b</Key><Size>3</Size><ETag>\"x\"</ETag></Contents>"
         "</ListBucketResult>", NULL, 0);
    s3_list l;
    s3_result r;
    cr_assert_eq(s3_list_objects_all_sync(c, "b", "p/", 0, &l, &r), 0, "%s", r.error);
    cr_assert_eq(l.n_objects, 1);
    cr_assert_str_eq(l.objects[0].key, "a&b");
    cr_assert_eq(l.objects[0].size, 3);
    cr_assert(strstr(F.log[1], "?list-type=2&prefix=p%2F"), "%s", F.log[1]);
    s3_list_clear(&l);
    s3_client_free(c);
}

Test(s3_engine, hedged_if_none_match_put_settled_by_etag)
{
    s3_client *c = client();
    char md5[72];
    s3_md5_etag("mine", 4, md5);
    rule("PUT", NULL, A_HANG, 0, NULL, NULL, 1); /* lands, but its answer never comes */
    rule("PUT", NULL, A_ANSWER, 412, "<Error><Code>PreconditionFailed</Code></Error>", NULL, 0);
    rule("HEAD", NULL, A_ANSWER, 200, NULL, md5, 1);
    rule("HEAD", NULL, A_ANSWER, 200, NULL, "\"someone-else\"", 0);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "mine", 4, true, &r), 0, "%s", r.error);
    cr_assert_str_eq(r.etag, md5);
    /* the same 412 with another object's ETag is a refusal */
    rule("PUT", NULL, A_HANG, 0, NULL, NULL, 1);
    F.rules[0].times = 1;
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "mine", 4, true, &r), -EEXIST, "%s", r.error);
    s3_client_free(c);
}

Test(s3_engine, single_412_is_a_refusal_without_a_head)
{
    s3_client *c = client();
    rule("PUT", NULL, A_ANSWER, 412, "<Error><Code>PreconditionFailed</Code></Error>", NULL, 0);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "v", 1, true, &r), -EEXIST);
    cr_assert_eq(F.calls, 1);
    s3_client_free(c);
}

static const char *INIT = "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>"
                          "<UploadId>UP-1</UploadId></InitiateMultipartUploadResult>";

Test(s3_engine, multipart_upload_orchestration)
{
    s3_client *c = client();
    rule("POST", "uploads=", A_ANSWER, 200, INIT, NULL, 0);
    rule("PUT", "partNumber=", A_ANSWER, 200, NULL, "\"5eb63bbbe01eeed093cb22bb8f5acdc3\"", 0);
    /* RGW's empty ETag and moto's root name */
    rule("POST", "uploadId=UP-1", A_ANSWER, 200,
         "<CompleteMultipartUploadResponse><ETag></ETag></CompleteMultipartUploadResponse>", NULL,
         0);
    size_t len = 2500;
    char *data = calloc(1, len);
    s3_upload_opts uo = {.part_size = 1000, .multipart_threshold = 2000};
    s3_result r;
    cr_assert_eq(s3_upload_sync(c, "b", "k", data, len, &uo, &r), 0, "%s", r.error);
    cr_assert_eq(r.parts, 3);
    cr_assert_eq(F.calls, 5);
    cr_assert(strstr(r.etag, "-3\""), "the computed multipart ETag: %s", r.etag);
    /* parts went out in parallel: all three started before any Complete */
    cr_assert(strstr(F.log[4], "POST") && strstr(F.log[4], "uploadId=UP-1"), "%s", F.log[4]);
    free(data);
    s3_client_free(c);
}

Test(s3_engine, failed_part_aborts_the_upload)
{
    s3_client *c = client();
    rule("POST", "uploads=", A_ANSWER, 200, INIT, NULL, 0);
    rule("PUT", "partNumber=2", A_ANSWER, 400, "<Error><Code>InvalidPart</Code></Error>", NULL, 0);
    rule("PUT", "partNumber=", A_ANSWER, 200, NULL, "\"5eb63bbbe01eeed093cb22bb8f5acdc3\"", 0);
    rule("DELETE", "uploadId=UP-1", A_ANSWER, 204, NULL, NULL, 0);
    size_t len = 2500;
    char *data = calloc(1, len);
    s3_upload_opts uo = {.part_size = 1000, .multipart_threshold = 2000};
    s3_result r;
    cr_assert_eq(s3_upload_sync(c, "b", "k", data, len, &uo, &r), DSTL_EREMOTE);
    cr_assert(strstr(r.error, "UploadPart s3://b/k: 400 InvalidPart") &&
                  strstr(r.error, "(part 2 of 3)"), "%s", r.error);
    bool aborted = false;
    for (int i = 0; i < F.calls && i < 64; i++)
        if (strncmp(F.log[i], "DELETE ", 7) == 0 && strstr(F.log[i], "uploadId=UP-1")) aborted = true;
    cr_assert(aborted, "the upload was aborted");
    free(data);
    s3_client_free(c);
}

typedef struct once {
    int runs;
    s3_result r;
} once;

static void once_cb(void *ctx, const s3_result *r)
{
    once *o = ctx;
    o->runs++;
    o->r = *r;
}

Test(s3_engine, cancel_completes_later_exactly_once)
{
    s3_client *c = client();
    rule("GET", NULL, A_HANG, 0, NULL, NULL, 0);
    char buf[8];
    once o = {0};
    s3_op *op;
    cr_assert_eq(s3_get_object(c, "b", "k", 0, buf, 8, &op, once_cb, &o), 0);
    cr_assert_eq(o.runs, 0, "never inside the start call");
    cr_assert_geq(s3_client_run(c, NULL, 0, 0), 0);
    cr_assert_eq(F.calls, 1);
    s3_op_cancel(op);
    s3_op_cancel(op);
    cr_assert_eq(o.runs, 0, "never inside the cancel call");
    cr_assert_eq(s3_client_run(c, NULL, 0, 0), 1);
    cr_assert_eq(o.runs, 1);
    cr_assert_eq(o.r.err, -ECANCELED);
    cr_assert_eq(s3_client_run(c, NULL, 0, 0), 0);
    cr_assert_eq(s3_client_pending(c), 0);
    s3_client_free(c);
}

Test(s3_engine, delete_objects_splits_into_batches)
{
    s3_client *c = client();
    rule("POST", "delete=", A_ANSWER, 200,
         "<DeleteResult><Error><Key>k7</Key><Code>AccessDenied</Code></Error></DeleteResult>", NULL, 1);
    rule("POST", "delete=", A_ANSWER, 200, "<DeleteResult></DeleteResult>", NULL, 0);
    enum { N = 2345 };
    static char names[N][8];
    const char *keys[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "k%d", i);
        keys[i] = names[i];
    }
    s3_result r;
    cr_assert_eq(s3_delete_objects_sync(c, "b", keys, N, &r), DSTL_EREMOTE);
    cr_assert_eq(F.calls, 3, "1,000 + 1,000 + 345");
    cr_assert_eq(r.deleted, N - 1);
    cr_assert_eq(r.delete_errors, 1);
    cr_assert(strstr(r.error, "s3://b/k7: AccessDenied"), "%s", r.error);
    s3_client_free(c);
}

Test(s3_engine, bad_options_and_missing_credentials)
{
    s3_opts o = {.endpoint = "ftp://x", .access_key = "a", .secret_key = "b"};
    s3_client *c;
    s3_result r;
    cr_assert_eq(s3_client_new(&o, &c, &r), -EINVAL);
    cr_assert(strstr(r.error, "ftp://x"), "%s", r.error);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    s3_opts o2 = {.endpoint = "http://127.0.0.1:1"};
    cr_assert_eq(s3_client_new(&o2, &c, &r), -EINVAL);
    cr_assert(strstr(r.error, "no S3 credentials") && strstr(r.error, "/nonexistent/credentials"),
              "%s", r.error);
}

Test(s3_engine, credentials_precedence)
{
    char path[] = "/tmp/dstl-s3-creds-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    const char *ini = "[default]\naws_access_key_id = FILEDEF\naws_secret_access_key = s1\n"
                      "[profile other]\naws_access_key_id=FILEOTHER\naws_secret_access_key=s2\n"
                      "aws_session_token = tok\n";
    cr_assert_eq(write(fd, ini, strlen(ini)), (ssize_t)strlen(ini));
    close(fd);
    unsetenv("AWS_PROFILE");
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    s3_credentials cr;
    char why[256];
    cr_assert_eq(s3_credentials_resolve("OPTKEY", "optsecret", NULL, path, NULL, &cr, why, sizeof why), 0);
    cr_assert_str_eq(cr.access_key, "OPTKEY");
    cr_assert_eq(s3_credentials_resolve(NULL, NULL, NULL, path, NULL, &cr, why, sizeof why), 0);
    cr_assert_str_eq(cr.access_key, "ENVKEY");
    cr_assert_str_eq(cr.source, "environment");
    unsetenv("AWS_ACCESS_KEY_ID");
    cr_assert_eq(s3_credentials_resolve(NULL, NULL, NULL, path, NULL, &cr, why, sizeof why), 0);
    cr_assert_str_eq(cr.access_key, "FILEDEF");
    setenv("AWS_PROFILE", "other", 1);
    cr_assert_eq(s3_credentials_resolve(NULL, NULL, NULL, path, NULL, &cr, why, sizeof why), 0);
    cr_assert_str_eq(cr.access_key, "FILEOTHER");
    cr_assert_str_eq(cr.session_token, "tok");
    cr_assert_eq(s3_credentials_resolve(NULL, NULL, NULL, path, "missing", &cr, why, sizeof why),
                 -ENOENT);
    cr_assert(strstr(why, "[missing]"), "%s", why);
    cr_assert_null(strstr(why, "s2"));
    unlink(path);
}
