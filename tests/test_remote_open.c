/*
 * tests/test_remote_open.c — the open-time bucket check (include/dstl.h, dstl_storage_open)
 * against the test RGW: a healthy remote opens with no detail and creates nothing; a missing
 * bucket (404 NoSuchBucket) and refused credentials (403 SignatureDoesNotMatch,
 * InvalidAccessKeyId) fail the open with a detail naming the bucket and the answer, never the
 * secret; a refused endpoint (an outage) opens within the bound with a warning, and local
 * recovery through that storage works.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dstl.h"
#include "tests/helpers.h"
#include "tests/helpers_cmd.h"
#include "tests/helpers_dstl.h"
#include "tests/helpers_remote.h"

static t_remote fx;
static char ldir[4200];

static void setup(void)
{
    t_remote_init(&fx, "open");
    snprintf(ldir, sizeof ldir, "%s/data", fx.dir);
}

static void teardown(void) { t_remote_fini(&fx); }

TestSuite(remote_open, .init = setup, .fini = teardown, .timeout = 60);

/* The check's bound at the defaults: max-attempts x upload.timeout = 3 s; slack for a loaded
 * machine. */
#define OPEN_BOUND_MS 3000
#define SLACK_MS 3000

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Opens c; returns the code, the detail in detail[] and the time taken in *ms. */
static int open_rc(dstl_config *c, dstl_storage **s, char *detail, size_t cap, int64_t *ms)
{
    int64_t t0 = now_ms();
    int rc = dstl_storage_open(c, s);
    *ms = now_ms() - t0;
    snprintf(detail, cap, "%s", dstl_last_error());
    return rc;
}

Test(remote_open, a_healthy_remote_opens_quietly_and_creates_nothing)
{
    dstl_config *c = t_remote_config(&fx, ldir, NULL);
    dstl_storage *s = NULL;
    char detail[1024];
    int64_t ms;
    cr_assert_eq(open_rc(c, &s, detail, sizeof detail, &ms), 0, "%s", detail);
    cr_expect_str_eq(detail, "", "a healthy open left a detail");
    cr_assert_eq(dstl_storage_close(s), 0);
    size_t objects = 0, uploads = 0;
    t_remote_count(&fx, &objects, &uploads);
    cr_expect_eq(objects + uploads + t_remote_leases(&fx), 0, "an open and close wrote to the bucket");
    dstl_config_free(c);
}

Test(remote_open, a_missing_bucket_fails_the_open)
{
    char uri[200], bucket[80];
    snprintf(bucket, sizeof bucket, "%.50s-missing", fx.bucket);
    snprintf(uri, sizeof uri, "s3://%s/p", bucket);
    dstl_config *c = t_remote_config(&fx, ldir, "dstl.remote.uri", uri, NULL);
    dstl_storage *s = NULL;
    char detail[1024];
    int64_t ms;
    cr_expect_eq(open_rc(c, &s, detail, sizeof detail, &ms), -ENOENT, "%s", detail);
    cr_expect_null(s);
    cr_expect(strstr(detail, uri) != NULL && strstr(detail, "NoSuchBucket") != NULL &&
              strstr(detail, "does not exist") != NULL, "%s", detail);
    cr_expect_leq(ms, OPEN_BOUND_MS + SLACK_MS);
    dstl_config_free(c);
    /* the command says the same */
    char conf[4300];
    snprintf(conf, sizeof conf, "%s/s3.conf", fx.dir);
    t_remote_write_conf(&fx, conf, "dstl.remote.uri", uri, NULL);
    int st;
    char *out = t_cmd_run(fx.dir, &st, "'%s' --config '%s' --set 'dstl.local.dir=%s' demo --duration 1", t_cmd_bin(),
                          conf, ldir);
    cr_expect_eq(st, 1, "%s", out);
    cr_expect(strstr(out, "NoSuchBucket") != NULL, "%s", out);
    free(out);
}

Test(remote_open, refused_credentials_fail_the_open_without_naming_the_secret)
{
    dstl_config *c = t_remote_config(&fx, ldir, "dstl.s3.secret-key", "WRONG-SECRET-VALUE", NULL);
    dstl_storage *s = NULL;
    char detail[1024];
    int64_t ms;
    cr_expect_eq(open_rc(c, &s, detail, sizeof detail, &ms), -EACCES, "%s", detail);
    cr_expect_null(s);
    cr_expect(strstr(detail, fx.uri) != NULL && strstr(detail, "SignatureDoesNotMatch") != NULL, "%s", detail);
    cr_expect(strstr(detail, "WRONG-SECRET-VALUE") == NULL, "%s", detail);
    dstl_config_free(c);
    c = t_remote_config(&fx, ldir, "dstl.s3.access-key", "NOSUCHACCESSKEY", NULL);
    cr_expect_eq(open_rc(c, &s, detail, sizeof detail, &ms), -EACCES, "%s", detail);
    cr_expect(strstr(detail, "InvalidAccessKeyId") != NULL, "%s", detail);
    dstl_config_free(c);
}

Test(remote_open, an_outage_opens_with_a_warning_and_local_recovery_works)
{
    /* a handle written while the remote answered (local durability, the object uploaded) */
    dstl_storage *s = t_remote_open(&fx, ldir, "dstl.durability", "local", NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
    t_append_n(w, 4, 30, 0, 8, 200);
    dstl_handle *h = t_persist(w, 0, 1);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    /* then the endpoint refuses connections: a closed loopback port */
    int st;
    char *port = t_cmd_run(fx.dir, &st, "python3 -c 'import socket;s=socket.socket();s.bind((\"127.0.0.1\",0));"
                                        "print(s.getsockname()[1]);s.close()'");
    cr_assert_eq(st, 0, "%s", port);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", atoi(port));
    free(port);
    dstl_config *c = t_remote_config(&fx, ldir, "dstl.s3.endpoint", ep, NULL);
    char detail[1024];
    int64_t ms;
    cr_assert_eq(open_rc(c, &s, detail, sizeof detail, &ms), 0, "an outage failed the open: %s", detail);
    cr_expect(!strncmp(detail, "warning: the remote ", 20) && strstr(detail, fx.uri) != NULL, "%s", detail);
    cr_expect_leq(ms, OPEN_BOUND_MS + SLACK_MS, "the open took %lld ms", (long long)ms);
    cr_expect_eq(t_verify(s, h, 4, 0, 8, 0, 7, 200), 30, "local recovery during the outage: %s", dstl_last_error());
    dstl_handle_free(h);
    cr_assert_eq(dstl_storage_close(s), 0);
    dstl_config_free(c);
}
