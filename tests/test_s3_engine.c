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
#include <time.h>
#include <unistd.h>

#include "s3/s3_int.h"
#include "wire/wire.h"

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
    const char *content_range;
    const char *checksum; /* x-amz-checksum-crc32c of the answer */
    const char *date;     /* Date of the answer */
    uint32_t delay_ms;    /* answer this late (the client's clock) */
} fake_rule;

typedef struct fake {
    fake_rule rules[16];
    int n_rules;
    uint64_t now_ms;
    int calls;
    char log[64][160]; /* "METHOD url" per call */
    bool headers_ok;
    char sent_checksum[16]; /* x-amz-checksum-crc32c of the last request that had one */
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
        if (strncmp(h, "x-amz-checksum-crc32c: ", 23) == 0)
            snprintf(f->sent_checksum, sizeof f->sent_checksum, "%s", h + 23);
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
        resp->content_range = r->content_range;
        resp->checksum_crc32c = r->checksum;
        resp->date = r->date;
        resp->delay_ms = r->delay_ms;
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
    F.rules[F.n_rules++] = (fake_rule){.method = method, .url_has = url_has, .act = act,
                                       .status = status, .body = body, .etag = etag,
                                       .times = times};
}

/* A rule with every field named (headers the positional form does not take). */
static void rule_x(fake_rule r)
{
    cr_assert_lt(F.n_rules, (int)(sizeof F.rules / sizeof F.rules[0]));
    F.rules[F.n_rules++] = r;
}

/* The index of the first logged request starting with `what` ("DELETE ", "HEAD ") and
 * containing has (NULL: any), or -1. */
static int logged(const char *what, const char *has)
{
    for (int i = 0; i < F.calls && i < 64; i++)
        if (strncmp(F.log[i], what, strlen(what)) == 0 && (!has || strstr(F.log[i], has))) return i;
    return -1;
}

static s3_opts fake_opts(void)
{
    F.now_ms = 1000;
    F.headers_ok = true;
    s3_opts o = {.endpoint = "http://s3.test:9000", .path_style = true, .access_key = "AKIDTEST",
                 .secret_key = "secret-test", .attempt_timeout_ms = 100,
                 .transfer_timeout_ms = 1000, .max_attempts = 3, .next_attempt_delay_ms = 50,
                 .now_ms = f_now, .wall_time_s = f_wall, .sleep_ms = f_sleep, .random = f_random,
                 .seam_ctx = &F, .transport = &transport, .crc32c = wire_crc32c};
    return o;
}

static s3_client *client_with(const s3_opts *o)
{
    s3_client *c;
    s3_result r;
    cr_assert_eq(s3_client_new(o, &c, &r), 0, "%s", r.error);
    return c;
}

static s3_client *client(void)
{
    s3_opts o = fake_opts();
    return client_with(&o);
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
    rule_x((fake_rule){.method = "GET", .act = A_FAIL, .err = -ECONNRESET, .times = 2});
    rule_x((fake_rule){.method = "GET", .act = A_ANSWER, .status = 206, .body = "abcd",
                       .content_range = "bytes 10-13/20"});
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
    int calls; /* requests the transport had seen when the callback ran */
} once;

static void once_cb(void *ctx, const s3_result *r)
{
    once *o = ctx;
    o->runs++;
    o->r = *r;
    o->calls = F.calls;
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
    s3_opts o = {.endpoint = "ftp://x", .access_key = "a", .secret_key = "b",
                 .crc32c = wire_crc32c};
    s3_client *c;
    s3_result r;
    cr_assert_eq(s3_client_new(&o, &c, &r), -EINVAL);
    cr_assert(strstr(r.error, "ftp://x"), "%s", r.error);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    s3_opts o2 = {.endpoint = "http://127.0.0.1:1", .crc32c = wire_crc32c};
    cr_assert_eq(s3_client_new(&o2, &c, &r), -EINVAL);
    cr_assert(strstr(r.error, "no S3 credentials") && strstr(r.error, "/nonexistent/credentials"),
              "%s", r.error);
}

Test(s3_engine, refuses_options_without_a_crc32c)
{
    s3_opts o = fake_opts();
    o.crc32c = NULL;
    s3_client *c = NULL;
    s3_result r;
    cr_assert_eq(s3_client_new(&o, &c, &r), -EINVAL);
    cr_assert_null(c);
    cr_assert(strstr(r.error, "s3_opts.crc32c"), "names the option: %s", r.error);
    cr_assert_eq(s3_client_new(NULL, &c, &r), -EINVAL, "no options: no CRC32C either");
    cr_assert_null(c);
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

/* ---- issue 9: outcomes, cancel, XML, integrity, ranges ---- */

typedef struct trigger {
    s3_op *victim; /* cancelled from the trigger's callback */
    int cancel_calls; /* F.calls when the cancel was made */
} trigger;

static void cancel_from_cb(void *ctx, const s3_result *r)
{
    (void)r;
    trigger *t = ctx;
    t->cancel_calls = F.calls;
    s3_op_cancel(t->victim);
}

/* Item 1: a 412 after a hedge starts a HEAD to settle whose object it is; the PUT is
 * cancelled before that HEAD answers. The HEAD finds our ETag — but a cancelled PUT must
 * report -ECANCELED (and only then clean up), never "success" for an object it deletes. */
Test(s3_engine, put_cancelled_while_settling_a_412_reports_cancelled_before_any_delete)
{
    s3_client *c = client();
    char md5[72];
    s3_md5_etag("mine", 4, md5);
    rule("PUT", "/b/k", A_HANG, 0, NULL, NULL, 1);
    rule("PUT", "/b/k", A_ANSWER, 412, "<Error><Code>PreconditionFailed</Code></Error>", NULL, 0);
    rule("HEAD", "/b/t", A_HANG, 0, NULL, NULL, 1);
    rule("HEAD", "/b/t", A_ANSWER, 200, NULL, "\"t\"", 0);
    rule("HEAD", "/b/k", A_ANSWER, 200, NULL, md5, 0);
    rule("DELETE", "/b/k", A_ANSWER, 204, NULL, NULL, 0);
    once o = {0};
    trigger t = {0};
    /* both first attempts hang; both hedges start at the same tick: the PUT's gets 412 (a
     * settling HEAD is queued), the trigger's HEAD succeeds and its callback cancels the PUT */
    cr_assert_eq(s3_put_object(c, "b", "k", "mine", 4, true, &t.victim, once_cb, &o), 0);
    cr_assert_eq(s3_head_object(c, "b", "t", NULL, cancel_from_cb, &t), 0);
    for (int i = 0; i < 100 && !o.runs; i++) cr_assert_geq(s3_client_run(c, NULL, 0, 50), 0);
    cr_assert_eq(o.runs, 1);
    cr_assert_gt(t.cancel_calls, 0, "the cancel came from the trigger");
    cr_assert_eq(o.r.err, -ECANCELED, "a cancelled PUT reports -ECANCELED, got %d (%s)", o.r.err,
                 o.r.error);
    int del = logged("DELETE ", "/b/k");
    cr_assert(del < 0 || del >= o.calls, "no DELETE before the caller was told");
    s3_client_free(c);
}

/* Item 2 (model): with every answer hanging, a cancel completes the op on the next turn. */
Test(s3_engine, cancelled_put_completes_on_the_next_turn_whatever_hangs)
{
    s3_client *c = client();
    rule("PUT", NULL, A_HANG, 0, NULL, NULL, 0);
    rule("HEAD", NULL, A_HANG, 0, NULL, NULL, 0);
    rule("DELETE", NULL, A_HANG, 0, NULL, NULL, 0);
    once o = {0};
    s3_op *op;
    cr_assert_eq(s3_put_object(c, "b", "k", "data", 4, true, &op, once_cb, &o), 0);
    cr_assert_geq(s3_client_run(c, NULL, 0, 0), 0);
    cr_assert_eq(F.calls, 1, "the PUT was sent (it may have landed)");
    s3_op_cancel(op);
    cr_assert_eq(o.runs, 0, "never inside the cancel call");
    cr_assert_eq(s3_client_run(c, NULL, 0, 0), 1, "the callback ran on the next turn");
    cr_assert_eq(o.runs, 1);
    cr_assert_eq(o.r.err, -ECANCELED, "%s", o.r.error);
    cr_assert_eq(s3_client_pending(c), 0, "the cleanup is not the caller's to wait for");
    s3_client_free(c);
}

Test(s3_engine, cancelled_multipart_upload_completes_on_the_next_turn_whatever_hangs)
{
    s3_client *c = client();
    rule("POST", "uploads=", A_ANSWER, 200, INIT, NULL, 0);
    rule("PUT", "partNumber=", A_HANG, 0, NULL, NULL, 0);
    rule("DELETE", "uploadId=UP-1", A_HANG, 0, NULL, NULL, 0);
    rule("GET", "uploads=", A_HANG, 0, NULL, NULL, 0);
    size_t len = 2500;
    char *data = calloc(1, len);
    s3_upload_opts uo = {.part_size = 1000, .multipart_threshold = 2000};
    once o = {0};
    s3_op *op;
    cr_assert_eq(s3_upload(c, "b", "k", data, len, &uo, &op, once_cb, &o), 0);
    for (int i = 0; i < 10 && logged("PUT ", "partNumber=3") < 0; i++)
        cr_assert_geq(s3_client_run(c, NULL, 0, 0), 0);
    cr_assert_geq(logged("PUT ", "partNumber=3"), 0, "the parts are in flight");
    s3_op_cancel(op);
    cr_assert_eq(o.runs, 0);
    cr_assert_eq(s3_client_run(c, NULL, 0, 0), 1, "the callback ran on the next turn");
    cr_assert_eq(o.r.err, -ECANCELED, "%s", o.r.error);
    cr_assert_eq(s3_client_pending(c), 0);
    /* the abort is sent (it hangs: the upload is left for gc once its deadline passes) */
    for (int i = 0; i < 5; i++) cr_assert_geq(s3_client_run(c, NULL, 0, 0), 0);
    cr_assert_geq(logged("DELETE ", "uploadId=UP-1"), 0, "the upload's abort was sent");
    free(data);
    s3_client_free(c);
}

/* Item 2: a failure is reported at once; the cleanup runs after, detached. */
Test(s3_engine, failed_put_reports_at_once_and_cleans_up_after)
{
    s3_client *c = client();
    char md5[72];
    s3_md5_etag("data", 4, md5);
    rule_x((fake_rule){.method = "PUT", .act = A_FAIL, .err = -ECONNRESET});
    rule("HEAD", NULL, A_ANSWER, 200, NULL, md5, 0);
    rule("DELETE", NULL, A_ANSWER, 204, NULL, NULL, 0);
    once o = {0};
    cr_assert_eq(s3_put_object(c, "b", "k", "data", 4, false, NULL, once_cb, &o), 0);
    for (int i = 0; i < 100 && !o.runs; i++) cr_assert_geq(s3_client_run(c, NULL, 0, 50), 0);
    cr_assert_eq(o.r.err, DSTL_EREMOTE, "%s", o.r.error);
    cr_assert_eq(o.calls, 3, "reported after the 3 PUTs, before any cleanup request");
    for (int i = 0; i < 20 && logged("DELETE ", NULL) < 0; i++) cr_assert_geq(s3_client_run(c, NULL, 0, 50), 0);
    cr_assert_geq(logged("HEAD ", NULL), 0);
    cr_assert_geq(logged("DELETE ", "/b/k"), 0, "what the attempts stored (ours) is deleted");
    s3_client_free(c);
}

/* Item 3: AWS sends whitespace before a Complete's body (and before an <Error> in a 200). */
Test(s3_engine, complete_with_leading_whitespace_succeeds_in_one_attempt)
{
    s3_client *c = client();
    s3_part_info parts[1] = {{.part_number = 1, .etag = "\"5eb63bbbe01eeed093cb22bb8f5acdc3\""}};
    rule("POST", "uploadId=U", A_ANSWER, 200,
         "\n  \r\n<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CompleteMultipartUploadResult>"
         "<ETag>\"e-1\"</ETag></CompleteMultipartUploadResult>", NULL, 0);
    s3_result r;
    cr_assert_eq(s3_complete_multipart_upload_sync(c, "b", "k", "U", parts, 1, false, &r), 0, "%s",
                 r.error);
    cr_assert_eq(r.attempts, 1, "a successful Complete is not re-sent");
    cr_assert_str_eq(r.etag, "\"e-1\"");
    s3_client_free(c);
}

Test(s3_engine, complete_200_with_an_error_after_whitespace_keeps_its_code)
{
    s3_client *c = client();
    s3_part_info parts[1] = {{.part_number = 1, .etag = "\"5eb63bbbe01eeed093cb22bb8f5acdc3\""}};
    rule("POST", "uploadId=U", A_ANSWER, 200,
         "   \n<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code>"
         "<Message>no</Message></Error>", NULL, 0);
    s3_result r;
    cr_assert_eq(s3_complete_multipart_upload_sync(c, "b", "k", "U", parts, 1, false, &r), DSTL_EREMOTE);
    cr_assert_str_eq(r.s3_code, "AccessDenied", "%s", r.error);
    cr_assert_eq(r.attempts, 1, "a fatal code is not retried");
    cr_assert(strstr(r.error, "AccessDenied: no"), "%s", r.error);
    s3_client_free(c);
}

/* Item 4: a 206 must be the range that was asked for. */
Test(s3_engine, partial_content_with_the_wrong_range_is_rejected)
{
    s3_client *c = client();
    rule_x((fake_rule){.method = "GET", .act = A_ANSWER, .status = 206, .body = "abcd",
                       .content_range = "bytes 0-3/20", .times = 1});
    rule_x((fake_rule){.method = "GET", .act = A_ANSWER, .status = 206, .body = "abcd",
                       .content_range = "bytes 10-14/20", .times = 1}); /* 5 bytes claimed, 4 came */
    rule_x((fake_rule){.method = "GET", .act = A_ANSWER, .status = 206, .body = "abcd",
                       .content_range = "bytes 10-13/20"});
    char buf[4];
    s3_result r;
    cr_assert_eq(s3_get_object_sync(c, "b", "k", 10, buf, 4, &r), 0, "%s", r.error);
    cr_assert_eq(r.attempts, 3, "the two wrong ranges were retried");
    cr_assert_eq(r.bytes, 4);
    cr_assert_eq(r.object_size, 20);
    s3_client_free(c);
    F.n_rules = 0;
    c = client();
    rule_x((fake_rule){.method = "GET", .act = A_ANSWER, .status = 206, .body = "abcd",
                       .content_range = "bytes 10-13/junk"});
    cr_assert_eq(s3_get_object_sync(c, "b", "k", 10, buf, 4, &r), DSTL_EREMOTE);
    cr_assert(strstr(r.error, "Content-Range"), "%s", r.error);
    s3_client_free(c);
}

/* Item 7: a server that ignores Range answers 200 with the whole object. */
Test(s3_engine, ranged_get_answered_with_the_whole_object)
{
    s3_client *c = client();
    rule("GET", NULL, A_ANSWER, 200, "0123456789", NULL, 0);
    char buf[8] = {0};
    s3_result r;
    cr_assert_eq(s3_get_object_sync(c, "b", "k", 3, buf, 4, &r), 0, "%s", r.error);
    cr_assert_eq(memcmp(buf, "3456", 4), 0);
    cr_assert_eq(r.bytes, 4);
    cr_assert_eq(r.object_size, 10);
    cr_assert_eq(r.attempts, 1);
    memset(buf, 0, sizeof buf);
    cr_assert_eq(s3_get_object_sync(c, "b", "k", 0, buf, 4, &r), 0, "%s", r.error);
    cr_assert_eq(memcmp(buf, "0123", 4), 0);
    cr_assert_eq(r.bytes, 4);
    cr_assert_eq(r.object_size, 10);
    memset(buf, 0, sizeof buf);
    cr_assert_eq(s3_get_object_sync(c, "b", "k", 7, buf, 8, &r), 0, "%s", r.error);
    cr_assert_eq(memcmp(buf, "789", 3), 0);
    cr_assert_eq(r.bytes, 3, "the object ends sooner");
    cr_assert_eq(s3_get_object_sync(c, "b", "k", 10, buf, 8, &r), -ERANGE, "%s", r.error);
    s3_client_free(c);
}

/* Item 6: a 412 / NoSuchUpload is settled by HEAD whatever the counted attempts (a transport
 * re-send is invisible to the count). */
Test(s3_engine, single_412_is_settled_by_a_head)
{
    s3_client *c = client();
    char md5[72];
    s3_md5_etag("v", 1, md5);
    rule("PUT", NULL, A_ANSWER, 412, "<Error><Code>PreconditionFailed</Code></Error>", NULL, 0);
    rule("HEAD", NULL, A_ANSWER, 200, NULL, md5, 1);
    rule("HEAD", NULL, A_ANSWER, 200, NULL, "\"someone-else\"", 0);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "v", 1, true, &r), 0, "%s", r.error);
    cr_assert_str_eq(r.etag, md5);
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "v", 1, true, &r), -EEXIST);
    cr_assert(strstr(r.error, "412"), "%s", r.error);
    s3_client_free(c);
}

Test(s3_engine, single_no_such_upload_on_complete_is_settled_by_a_head)
{
    s3_client *c = client();
    s3_part_info parts[2] = {{.part_number = 1, .etag = "\"5eb63bbbe01eeed093cb22bb8f5acdc3\""},
                             {.part_number = 2, .etag = "\"5eb63bbbe01eeed093cb22bb8f5acdc3\""}};
    char want[72];
    cr_assert_eq(s3_multipart_etag(parts, 2, want), 0);
    rule("POST", "uploadId=U", A_ANSWER, 404, "<Error><Code>NoSuchUpload</Code></Error>", NULL, 0);
    rule("HEAD", NULL, A_ANSWER, 200, NULL, want, 1);
    rule("HEAD", NULL, A_ANSWER, 404, NULL, NULL, 0);
    s3_result r;
    cr_assert_eq(s3_complete_multipart_upload_sync(c, "b", "k", "U", parts, 2, false, &r), 0, "%s",
                 r.error);
    cr_assert_str_eq(r.etag, want);
    cr_assert_eq(s3_complete_multipart_upload_sync(c, "b", "k", "U", parts, 2, false, &r), -ENOENT);
    cr_assert(strstr(r.error, "NoSuchUpload"), "%s", r.error);
    s3_client_free(c);
}

/* ---- item 2: detached, bounded cleanups ---- */

Test(s3_engine, a_hanging_cleanup_is_dropped_at_its_deadline)
{
    s3_opts o = fake_opts();
    o.cleanup_timeout_ms = 700;
    s3_client *c = client_with(&o);
    rule("PUT", NULL, A_HANG, 0, NULL, NULL, 0);
    rule("HEAD", NULL, A_HANG, 0, NULL, NULL, 0);
    once w = {0};
    s3_op *op;
    cr_assert_eq(s3_put_object(c, "b", "k", "data", 4, false, &op, once_cb, &w), 0);
    cr_assert_geq(s3_client_run(c, NULL, 0, 0), 0);
    s3_op_cancel(op);
    cr_assert_eq(s3_client_run(c, NULL, 0, 0), 1);
    cr_assert_eq(w.r.err, -ECANCELED);
    cr_assert_eq(s3_client_pending(c), 0);
    cr_assert_eq(s3_client_cleanups(c), 1, "the HEAD-then-DELETE cleanup runs detached");
    uint64_t t0 = F.now_ms;
    for (int i = 0; i < 1000 && s3_client_cleanups(c); i++) cr_assert_geq(s3_client_run(c, NULL, 0, 1000), 0);
    cr_assert_eq(s3_client_cleanups(c), 0);
    cr_assert_leq(F.now_ms - t0, 700 + 50, "dropped at its deadline (%llu ms)",
                  (unsigned long long)(F.now_ms - t0));
    cr_assert_geq(logged("HEAD ", "/b/k"), 0, "it did try");
    s3_stats st;
    s3_client_stats(c, &st);
    cr_assert_eq(st.cleanups, 1);
    cr_assert_eq(st.cleanups_incomplete, 1, "what it could not remove is left for gc");
    s3_client_free(c);
}

Test(s3_engine, client_free_waits_for_cleanups_once_not_once_each)
{
    /* each cleanup alone would take about 1.2 s (three attempts timing out after 1 s) */
    s3_opts so = fake_opts();
    so.cleanup_timeout_ms = 300;
    s3_client *c = client_with(&so);
    rule("POST", "uploads=", A_ANSWER, 200, INIT, NULL, 0);
    rule("PUT", NULL, A_HANG, 0, NULL, NULL, 0);
    rule("DELETE", NULL, A_HANG, 0, NULL, NULL, 0);
    rule("GET", NULL, A_HANG, 0, NULL, NULL, 0);
    rule("HEAD", NULL, A_HANG, 0, NULL, NULL, 0);
    size_t len = 2500;
    char *data = calloc(1, len);
    s3_upload_opts uo = {.part_size = 1000, .multipart_threshold = 2000};
    once w[4] = {{0}};
    char key[4][8];
    for (int i = 0; i < 4; i++) {
        snprintf(key[i], sizeof key[i], "k%d", i);
        cr_assert_eq(s3_upload(c, "b", key[i], data, i < 2 ? len : 10, &uo, NULL, once_cb, &w[i]), 0);
    }
    for (int i = 0; i < 5; i++) cr_assert_geq(s3_client_run(c, NULL, 0, 0), 0);
    cr_assert_eq(s3_client_pending(c), 4);
    uint64_t t0 = F.now_ms;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    s3_client_free(c); /* cancels the four: their cleanups (aborts, HEADs) all hang */
    clock_gettime(CLOCK_MONOTONIC, &b);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(w[i].runs, 1);
        cr_assert_eq(w[i].r.err, -ECANCELED, "%s", w[i].r.error);
    }
    cr_assert_leq(F.now_ms - t0, 300 + 100, "one bound for all the cleanups: %llu ms",
                  (unsigned long long)(F.now_ms - t0));
    cr_assert_lt(b.tv_sec - a.tv_sec, 5, "and no real waiting on the test transport");
    cr_assert_geq(logged("DELETE ", "uploadId=UP-1"), 0, "the aborts were sent");
    free(data);
}

Test(s3_engine, cancelled_multipart_upload_is_aborted_after_the_callback)
{
    s3_client *c = client();
    rule("POST", "uploads=", A_ANSWER, 200, INIT, NULL, 0);
    rule("PUT", "partNumber=", A_HANG, 0, NULL, NULL, 0);
    rule("DELETE", "uploadId=UP-1", A_ANSWER, 204, NULL, NULL, 0);
    size_t len = 2500;
    char *data = calloc(1, len);
    s3_upload_opts uo = {.part_size = 1000, .multipart_threshold = 2000};
    once o = {0};
    s3_op *op;
    cr_assert_eq(s3_upload(c, "b", "k", data, len, &uo, &op, once_cb, &o), 0);
    for (int i = 0; i < 10 && logged("PUT ", "partNumber=3") < 0; i++)
        cr_assert_geq(s3_client_run(c, NULL, 0, 0), 0);
    s3_op_cancel(op);
    cr_assert_eq(s3_client_run(c, NULL, 0, 0), 1);
    cr_assert_eq(o.r.err, -ECANCELED, "%s", o.r.error);
    free(data); /* the caller's buffer may go now: the cleanup does not use it */
    for (int i = 0; i < 100 && s3_client_cleanups(c); i++) cr_assert_geq(s3_client_run(c, NULL, 0, 50), 0);
    int abort_at = logged("DELETE ", "uploadId=UP-1");
    cr_assert_geq(abort_at, o.calls, "aborted after the callback");
    cr_assert_eq(logged("GET ", "uploads"), -1, "one Create attempt: no strays to look for");
    s3_stats st;
    s3_client_stats(c, &st);
    cr_assert_eq(st.cleanups, 1);
    cr_assert_eq(st.cleanups_incomplete, 0);
    s3_client_free(c);
}

/* ---- item 4: what the server stored is what was sent ---- */

static s3_client *unsigned_client(s3_verify_mode v)
{
    s3_opts o = fake_opts();
    o.payload = S3_PAYLOAD_UNSIGNED_CRC32C;
    o.verify_writes = v;
    return client_with(&o);
}

Test(s3_engine, put_with_a_wrong_etag_is_replaced)
{
    s3_client *c = unsigned_client(S3_VERIFY_AUTO);
    char md5[72];
    s3_md5_etag("data", 4, md5);
    rule("PUT", NULL, A_ANSWER, 200, NULL, "\"00000000000000000000000000000bad\"", 1);
    rule("PUT", NULL, A_ANSWER, 200, NULL, md5, 0);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "data", 4, false, &r), 0, "%s", r.error);
    cr_assert_eq(r.attempts, 2, "the corrupt copy was not acknowledged");
    cr_assert_eq(r.write_check, S3_CHECK_MD5);
    cr_assert_str_eq(r.etag, md5);
    cr_assert_eq(logged("DELETE ", NULL), -1, "without If-None-Match the retry overwrites it");
    s3_stats st;
    s3_client_stats(c, &st);
    cr_assert_eq(st.corrupt_writes, 1);
    s3_client_free(c);
}

Test(s3_engine, if_none_match_put_with_a_wrong_etag_removes_the_copy_then_retries)
{
    s3_client *c = unsigned_client(S3_VERIFY_AUTO);
    char md5[72];
    s3_md5_etag("data", 4, md5);
    const char *bad = "\"00000000000000000000000000000bad\"";
    rule("PUT", NULL, A_ANSWER, 200, NULL, bad, 1);
    rule("HEAD", NULL, A_ANSWER, 200, NULL, bad, 1);
    rule("DELETE", NULL, A_ANSWER, 204, NULL, NULL, 1);
    rule("PUT", NULL, A_ANSWER, 200, NULL, md5, 0);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "data", 4, true, &r), 0, "%s", r.error);
    cr_assert_eq(r.attempts, 2);
    int head = logged("HEAD ", NULL), del = logged("DELETE ", NULL);
    cr_assert(head == 1 && del == 2 && F.calls == 4, "PUT, HEAD, DELETE, PUT: %d %d %d", head, del,
              F.calls);
    s3_client_free(c);
}

/* s3/ keeps no CRC32C of its own: the caller's makes the header sent and checks the echo. */
static int crc_calls;
static uint32_t counting_crc32c(uint32_t crc, const void *buf, size_t len)
{
    crc_calls++;
    return wire_crc32c(crc, buf, len);
}

Test(s3_engine, checksum_comes_from_the_callers_crc32c)
{
    s3_opts o = fake_opts();
    o.payload = S3_PAYLOAD_UNSIGNED_CRC32C;
    o.crc32c = counting_crc32c;
    s3_client *c = client_with(&o);
    char good[9];
    s3_crc32c_b64(wire_crc32c(0, "data", 4), good);
    rule_x((fake_rule){.method = "PUT", .act = A_ANSWER, .status = 200, .etag = "\"e-1\"",
                       .checksum = good});
    s3_result r;
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "data", 4, false, &r), 0, "%s", r.error);
    cr_assert_eq(r.write_check, S3_CHECK_CRC32C);
    cr_assert_str_eq(F.sent_checksum, good);
    cr_assert_eq(crc_calls, 1, "one CRC per request, for the header and the check");
    s3_client_free(c);
}

Test(s3_engine, put_with_a_wrong_checksum_is_replaced)
{
    s3_client *c = unsigned_client(S3_VERIFY_AUTO);
    char good[9];
    s3_crc32c_b64(wire_crc32c(0, "data", 4), good);
    /* AWS: the ETag of an SSE-KMS object is no MD5; the checksum decides */
    rule_x((fake_rule){.method = "PUT", .act = A_ANSWER, .status = 200, .etag = "\"kms-1\"",
                       .checksum = "AAAAAA==", .times = 1});
    rule_x((fake_rule){.method = "PUT", .act = A_ANSWER, .status = 200, .etag = "\"kms-2\"",
                       .checksum = good});
    s3_result r;
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "data", 4, false, &r), 0, "%s", r.error);
    cr_assert_eq(r.attempts, 2);
    cr_assert_eq(r.write_check, S3_CHECK_CRC32C);
    cr_assert_str_eq(r.etag, "\"kms-2\"");
    s3_client_free(c);
}

Test(s3_engine, put_corrupt_on_every_attempt_fails_and_removes_the_copy)
{
    s3_client *c = unsigned_client(S3_VERIFY_AUTO);
    const char *bad = "\"00000000000000000000000000000bad\"";
    rule("PUT", NULL, A_ANSWER, 200, NULL, bad, 0);
    rule("HEAD", NULL, A_ANSWER, 200, NULL, bad, 0);
    rule("DELETE", NULL, A_ANSWER, 204, NULL, NULL, 0);
    once o = {0};
    cr_assert_eq(s3_put_object(c, "b", "k", "data", 4, false, NULL, once_cb, &o), 0);
    for (int i = 0; i < 100 && !o.runs; i++) cr_assert_geq(s3_client_run(c, NULL, 0, 50), 0);
    cr_assert_eq(o.r.err, DSTL_EREMOTE);
    cr_assert(strstr(o.r.error, "differs from what was sent") && strstr(o.r.error, "3 attempts"),
              "%s", o.r.error);
    for (int i = 0; i < 100 && s3_client_cleanups(c); i++) cr_assert_geq(s3_client_run(c, NULL, 0, 50), 0);
    cr_assert_geq(logged("DELETE ", "/b/k"), o.calls, "the corrupt copy is deleted, after the report");
    s3_client_free(c);
}

Test(s3_engine, signed_payload_needs_no_etag_check)
{
    s3_client *c = client(); /* AUTO: a small body is SHA-256 signed */
    rule("PUT", NULL, A_ANSWER, 200, NULL, "\"not-an-md5\"", 0);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "data", 4, false, &r), 0, "%s", r.error);
    cr_assert_eq(r.write_check, S3_CHECK_SHA256);
    cr_assert_eq(r.attempts, 1);
    s3_client_free(c);
}

Test(s3_engine, parts_with_a_wrong_etag_or_checksum_are_uploaded_again)
{
    s3_client *c = unsigned_client(S3_VERIFY_AUTO);
    size_t len = 2500;
    char *data = calloc(1, len);
    char md5_full[72], md5_last[72], crc_full[9];
    s3_md5_etag(data, 1000, md5_full);
    s3_md5_etag(data, 500, md5_last);
    s3_crc32c_b64(wire_crc32c(0, data, 1000), crc_full);
    rule("POST", "uploads=", A_ANSWER, 200, INIT, NULL, 0);
    rule("PUT", "partNumber=1", A_ANSWER, 200, NULL, "\"00000000000000000000000000000bad\"", 1);
    rule("PUT", "partNumber=1", A_ANSWER, 200, NULL, md5_full, 0);
    rule_x((fake_rule){.method = "PUT", .url_has = "partNumber=2", .act = A_ANSWER, .status = 200,
                       .etag = md5_full, .checksum = "AAAAAA==", .times = 1});
    rule_x((fake_rule){.method = "PUT", .url_has = "partNumber=2", .act = A_ANSWER, .status = 200,
                       .etag = md5_full, .checksum = crc_full});
    rule("PUT", "partNumber=3", A_ANSWER, 200, NULL, md5_last, 0);
    rule("POST", "uploadId=UP-1", A_ANSWER, 200,
         "<CompleteMultipartUploadResult><ETag></ETag></CompleteMultipartUploadResult>", NULL, 0);
    s3_upload_opts uo = {.part_size = 1000, .multipart_threshold = 2000};
    s3_result r;
    cr_assert_eq(s3_upload_sync(c, "b", "k", data, len, &uo, &r), 0, "%s", r.error);
    int p1 = 0, p2 = 0;
    for (int i = 0; i < F.calls && i < 64; i++) {
        p1 += strstr(F.log[i], "partNumber=1") != NULL;
        p2 += strstr(F.log[i], "partNumber=2") != NULL;
    }
    cr_assert(p1 == 2 && p2 == 2, "each corrupt part was sent again: %d %d", p1, p2);
    cr_assert_eq(r.write_check, S3_CHECK_CRC32C, "the lowest of MD5/CRC32C among the parts");
    free(data);
    s3_client_free(c);
}

Test(s3_engine, read_back_verifies_what_neither_checksum_nor_md5_can)
{
    s3_client *c = unsigned_client(S3_VERIFY_READ_BACK);
    /* the first copy is damaged: it reads back wrong, is removed (If-None-Match), sent again */
    rule("PUT", NULL, A_ANSWER, 200, NULL, "\"kms-1\"", 1);
    rule("PUT", NULL, A_ANSWER, 200, NULL, "\"kms-2\"", 0);
    rule("GET", NULL, A_ANSWER, 200, "dat4", NULL, 1);
    rule("GET", NULL, A_ANSWER, 200, "data", NULL, 0);
    rule("HEAD", NULL, A_ANSWER, 200, NULL, "\"kms-1\"", 1);
    rule("DELETE", NULL, A_ANSWER, 204, NULL, NULL, 1);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "data", 4, true, &r), 0, "%s", r.error);
    cr_assert_eq(r.write_check, S3_CHECK_READ_BACK);
    cr_assert_str_eq(r.etag, "\"kms-2\"");
    cr_assert_eq(r.attempts, 2);
    cr_assert_geq(logged("DELETE ", NULL), 0, "the corrupt copy was removed before the retry");
    s3_client_free(c);
}

Test(s3_engine, read_back_of_a_multipart_object_after_its_complete)
{
    s3_client *c = unsigned_client(S3_VERIFY_READ_BACK);
    size_t len = 2500;
    char *data = malloc(len);
    memset(data, 'x', len);
    char *wrong = malloc(len);
    memcpy(wrong, data, len);
    rule("POST", "uploads=", A_ANSWER, 200, INIT, NULL, 0);
    rule("PUT", "partNumber=", A_ANSWER, 200, NULL, "\"kms-part\"", 0);
    rule("POST", "uploadId=UP-1", A_ANSWER, 200,
         "<CompleteMultipartUploadResult><ETag>\"kms-3\"</ETag></CompleteMultipartUploadResult>",
         NULL, 0);
    /* the server answers the ranged GETs with 200 and the whole object (Range ignored): the
     * read back takes each part's range out of it */
    char *whole = calloc(1, len + 1);
    memcpy(whole, data, len);
    rule_x((fake_rule){.method = "GET", .url_has = "/b/k", .act = A_ANSWER, .status = 200,
                       .body = whole});
    s3_upload_opts uo = {.part_size = 1000, .multipart_threshold = 2000};
    s3_result r;
    cr_assert_eq(s3_upload_sync(c, "b", "k", data, len, &uo, &r), 0, "%s", r.error);
    cr_assert_eq(r.write_check, S3_CHECK_READ_BACK);
    cr_assert_str_eq(r.etag, "\"kms-3\"");
    /* the same with a damaged part: the upload fails and its object is deleted */
    F.calls = 0;
    wrong[1500] = 'y';
    memcpy(whole, wrong, len);
    rule("HEAD", NULL, A_ANSWER, 200, NULL, "\"kms-3\"", 0);
    rule("DELETE", "/b/k", A_ANSWER, 204, NULL, NULL, 0);
    once o = {0};
    cr_assert_eq(s3_upload(c, "b", "k", data, len, &uo, NULL, once_cb, &o), 0);
    for (int i = 0; i < 100 && !o.runs; i++) cr_assert_geq(s3_client_run(c, NULL, 0, 50), 0);
    cr_assert_eq(o.r.err, DSTL_EREMOTE);
    cr_assert(strstr(o.r.error, "differs from what was sent in part 2 of 3"), "%s", o.r.error);
    for (int i = 0; i < 100 && s3_client_cleanups(c); i++) cr_assert_geq(s3_client_run(c, NULL, 0, 50), 0);
    cr_assert_geq(logged("DELETE ", "s3.test:9000/b/k"), 0, "the wrong object is deleted");
    free(whole);
    free(wrong);
    free(data);
    s3_client_free(c);
}

/* ---- item 5: 409 ConditionalRequestConflict ---- */

static const char *CONFLICT = "<Error><Code>ConditionalRequestConflict</Code><Message>A conflicting "
                              "operation occurred.</Message></Error>";

Test(s3_engine, conflict_while_the_twin_runs_lets_the_twin_decide)
{
    s3_client *c = client();
    char md5[72];
    s3_md5_etag("mine", 4, md5);
    /* the first attempt answers after 150 ms, so it gets a hedge at 100 ms: the hedge meets
     * the first (still in flight) and gets 409; then the first lands */
    rule_x((fake_rule){.method = "PUT", .act = A_ANSWER, .status = 200, .etag = md5, .delay_ms = 150,
                       .times = 1});
    rule("PUT", NULL, A_ANSWER, 409, CONFLICT, NULL, 0);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "mine", 4, true, &r), 0, "%s", r.error);
    cr_assert_str_eq(r.etag, md5);
    cr_assert_eq(F.calls, 2, "no HEAD: the twin answered");
    s3_client_free(c);
}

Test(s3_engine, conflict_with_no_twin_left_is_settled_by_a_head)
{
    s3_client *c = client();
    char md5[72];
    s3_md5_etag("mine", 4, md5);
    s3_result r;
    /* the conflicting upload was ours and landed */
    rule("PUT", NULL, A_ANSWER, 409, CONFLICT, NULL, 1);
    rule("HEAD", NULL, A_ANSWER, 200, NULL, md5, 1);
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "mine", 4, true, &r), 0, "%s", r.error);
    cr_assert_str_eq(r.etag, md5);
    /* someone else's landed */
    rule("PUT", NULL, A_ANSWER, 409, CONFLICT, NULL, 1);
    rule("HEAD", NULL, A_ANSWER, 200, NULL, "\"someone-else\"", 1);
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "mine", 4, true, &r), -EEXIST, "%s", r.error);
    cr_assert(strstr(r.error, "409 ConditionalRequestConflict") && strstr(r.error, "not ours"), "%s",
              r.error);
    /* nothing landed (yet): the PUT is tried again */
    rule("PUT", NULL, A_ANSWER, 409, CONFLICT, NULL, 1);
    rule("HEAD", NULL, A_ANSWER, 404, NULL, NULL, 1);
    rule("PUT", NULL, A_ANSWER, 200, NULL, md5, 1);
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "mine", 4, true, &r), 0, "%s", r.error);
    cr_assert_eq(r.attempts, 2);
    s3_client_free(c);
}

Test(s3_engine, conflict_then_a_failing_twin_is_retried)
{
    s3_client *c = client();
    char md5[72];
    s3_md5_etag("mine", 4, md5);
    /* the first attempt fails late (500 at 150 ms) after its hedge got 409: not fatal */
    rule_x((fake_rule){.method = "PUT", .act = A_ANSWER, .status = 500,
                       .body = "<Error><Code>InternalError</Code></Error>", .delay_ms = 150, .times = 1});
    rule("PUT", NULL, A_ANSWER, 409, CONFLICT, NULL, 1);
    rule("PUT", NULL, A_ANSWER, 200, NULL, md5, 0);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "mine", 4, true, &r), 0, "%s", r.error);
    cr_assert_eq(r.attempts, 3);
    s3_client_free(c);
}

/* ---- item 8: the server's clock ---- */

Test(s3_engine, results_carry_the_servers_date)
{
    s3_client *c = client();
    rule_x((fake_rule){.method = "PUT", .act = A_ANSWER, .status = 200, .etag = "\"e\"",
                       .date = "Tue, 01 Dec 2026 19:56:58 GMT"});
    rule_x((fake_rule){.method = "HEAD", .act = A_ANSWER, .status = 200, .etag = "\"e\"",
                       .date = "garbage"});
    s3_result r;
    cr_assert_eq(s3_put_object_sync(c, "b", "k", "v", 1, false, &r), 0, "%s", r.error);
    cr_assert_eq(r.server_date_ms, 1796155018000ll);
    cr_assert_eq(s3_head_object_sync(c, "b", "k", &r), 0, "%s", r.error);
    cr_assert_eq(r.server_date_ms, 0, "a malformed Date is no date");
    s3_client_free(c);
}

Test(s3_engine, a_listing_to_the_end_has_its_first_pages_date)
{
    s3_client *c = client();
    rule_x((fake_rule){.method = "GET", .url_has = "continuation-token=t2", .act = A_ANSWER,
                       .status = 200, .date = "Tue, 01 Dec 2026 19:57:30 GMT",
                       .body = "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>b"
                               "</Key><Size>1</Size></Contents></ListBucketResult>"});
    rule_x((fake_rule){.method = "GET", .url_has = "list-type=2", .act = A_ANSWER, .status = 200,
                       .date = "Tue, 01 Dec 2026 19:56:58 GMT",
                       .body = "<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>"
                               "t2</NextContinuationToken><Contents><Key>a</Key><Size>1</Size>"
                               "</Contents></ListBucketResult>"});
    s3_list l;
    s3_result r;
    cr_assert_eq(s3_list_objects_all_sync(c, "b", NULL, 0, &l, &r), 0, "%s", r.error);
    cr_assert_eq(l.n_objects, 2);
    cr_assert_eq(l.server_date_ms, 1796155018000ll, "the first (earliest) page's Date");
    cr_assert_eq(r.server_date_ms, 1796155050000ll, "the result's is the last answer's");
    s3_list_clear(&l);
    s3_client_free(c);
}

/* Item 1 for multipart: an upload cancelled while its Complete's NoSuchUpload is being settled
 * by HEAD reports -ECANCELED at once, never a success the cleanup then deletes. */
Test(s3_engine, upload_cancelled_while_settling_its_complete_reports_cancelled)
{
    s3_client *c = client();
    rule("POST", "uploads=", A_ANSWER, 200, INIT, NULL, 0);
    rule("PUT", "partNumber=", A_ANSWER, 200, NULL, "\"5eb63bbbe01eeed093cb22bb8f5acdc3\"", 0);
    rule("POST", "uploadId=UP-1", A_ANSWER, 404, "<Error><Code>NoSuchUpload</Code></Error>", NULL, 0);
    rule("HEAD", NULL, A_HANG, 0, NULL, NULL, 0);
    rule("DELETE", "uploadId=UP-1", A_ANSWER, 204, NULL, NULL, 0);
    size_t len = 2500;
    char *data = calloc(1, len);
    s3_upload_opts uo = {.part_size = 1000, .multipart_threshold = 2000};
    once o = {0};
    s3_op *op;
    cr_assert_eq(s3_upload(c, "b", "k", data, len, &uo, &op, once_cb, &o), 0);
    for (int i = 0; i < 20 && logged("HEAD ", NULL) < 0; i++) cr_assert_geq(s3_client_run(c, NULL, 0, 0), 0);
    cr_assert_geq(logged("HEAD ", NULL), 0, "the Complete's answer is being settled");
    cr_assert_eq(o.runs, 0);
    s3_op_cancel(op);
    cr_assert_eq(s3_client_run(c, NULL, 0, 0), 1, "the callback ran on the next turn");
    cr_assert_eq(o.r.err, -ECANCELED, "%s", o.r.error);
    free(data);
    s3_client_free(c);
}

/* Item 2 for failures: a part that fails for good fails the upload at once, while the other
 * parts and the abort hang. */
Test(s3_engine, failed_part_reports_at_once_while_the_rest_hangs)
{
    s3_client *c = client();
    rule("POST", "uploads=", A_ANSWER, 200, INIT, NULL, 0);
    rule("PUT", "partNumber=2", A_ANSWER, 400, "<Error><Code>InvalidPart</Code></Error>", NULL, 0);
    rule("PUT", "partNumber=", A_HANG, 0, NULL, NULL, 0);
    rule("DELETE", "uploadId=UP-1", A_HANG, 0, NULL, NULL, 0);
    size_t len = 2500;
    char *data = calloc(1, len);
    s3_upload_opts uo = {.part_size = 1000, .multipart_threshold = 2000};
    once o = {0};
    cr_assert_eq(s3_upload(c, "b", "k", data, len, &uo, NULL, once_cb, &o), 0);
    for (int i = 0; i < 100 && !o.runs; i++) cr_assert_geq(s3_client_run(c, NULL, 0, 50), 0);
    cr_assert_eq(o.r.err, DSTL_EREMOTE);
    cr_assert(strstr(o.r.error, "(part 2 of 3)"), "%s", o.r.error);
    cr_assert_eq(o.calls, 4, "Create and three parts, nothing waited for: %d requests", o.calls);
    cr_assert_eq(s3_client_pending(c), 0);
    for (int i = 0; i < 5; i++) cr_assert_geq(s3_client_run(c, NULL, 0, 0), 0);
    cr_assert_geq(logged("DELETE ", "uploadId=UP-1"), 4, "the abort went out after the report");
    free(data);
    s3_client_free(c);
}

/* s3_md5 fed in pieces makes the ETag s3_md5_etag makes of the whole body (the pipeline hashes
 * a segment section by section: s3_upload_opts.body_md5_etag). */
Test(s3_engine, an_md5_fed_in_pieces_is_the_bodys_etag)
{
    enum { N = 300001 };
    uint8_t *body = malloc(N);
    for (size_t i = 0; i < N; i++) body[i] = (uint8_t)(i * 131 + (i >> 9));
    char whole[72], pieces[72];
    s3_md5_etag(body, N, whole);
    s3_md5 *m = s3_md5_new();
    cr_assert_not_null(m);
    for (size_t at = 0, step = 1; at < N; at += step, step = step * 3 + 7)
        s3_md5_add(m, body + at, at + step <= N ? step : N - at);
    s3_md5_end(m, pieces);
    cr_assert_str_eq(pieces, whole);
    cr_assert_eq(strlen(whole), 34, "a quoted hex MD5: %s", whole);
    s3_md5_end(NULL, pieces);
    cr_assert_str_eq(pieces, "");
    s3_md5_free(NULL);
    free(body);
}
