/*
 * tests/test_s3_sigv4.c — SigV4 stages against the published AWS S3 examples
 * (tests/data/sigv4/: canonical request, string to sign, signature per case; the signing key),
 * plus the encoding rules the examples do not cover (sorting, bare names, reserved bytes).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "s3/s3_int.h"

#define SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define ACCESS "AKIAIOSFODNN7EXAMPLE"
#define DATE "20130524T000000Z"
#define EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define HOST "examplebucket.s3.amazonaws.com"

static char *golden(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/sigv4/%s", t_data_dir(), name);
    size_t len = 0;
    char *s = t_read_file(path, &len);
    cr_assert(s, "cannot read golden file %s", path);
    char *z = realloc(s, len + 1);
    cr_assert(z);
    z[len] = '\0';
    while (len && z[len - 1] == '\n' && strstr(name, ".sig")) z[--len] = '\0';
    return z;
}

typedef struct vcase {
    const char *name, *method, *uri;
    const s3_kv *query;
    size_t n_query;
    const s3_kv *headers;
    size_t n_headers;
    const char *payload_hash;
} vcase;

static void check_case(const vcase *v)
{
    char q[256], creq[2048], sts[512], sig[65], sh[256], name[128];
    int n = s3_sigv4_canonical_query(v->query, v->n_query, q, sizeof q);
    cr_assert_geq(n, 0);
    n = s3_sigv4_canonical_request(v->method, v->uri, q, v->headers, v->n_headers,
                                   v->payload_hash, creq, sizeof creq, sh, sizeof sh);
    cr_assert_geq(n, 0);
    snprintf(name, sizeof name, "%s.creq", v->name);
    char *want = golden(name);
    cr_assert_str_eq(creq, want, "%s: canonical request differs", v->name);
    free(want);

    n = s3_sigv4_string_to_sign(DATE, "us-east-1", "s3", creq, sts, sizeof sts);
    cr_assert_geq(n, 0);
    snprintf(name, sizeof name, "%s.sts", v->name);
    want = golden(name);
    cr_assert_str_eq(sts, want, "%s: string to sign differs", v->name);
    free(want);

    uint8_t key[32];
    s3_sigv4_signing_key(SECRET, "20130524", "us-east-1", "s3", key);
    s3_sigv4_signature(key, sts, sig);
    snprintf(name, sizeof name, "%s.sig", v->name);
    want = golden(name);
    cr_assert_str_eq(sig, want, "%s: signature differs", v->name);

    char auth[1024], expect[1024];
    n = s3_sigv4_authorization(ACCESS, SECRET, "us-east-1", DATE, v->method, v->uri, q,
                               v->headers, v->n_headers, v->payload_hash, auth, sizeof auth);
    cr_assert_geq(n, 0);
    snprintf(expect, sizeof expect,
             "AWS4-HMAC-SHA256 Credential=" ACCESS "/20130524/us-east-1/s3/aws4_request, "
             "SignedHeaders=%s, Signature=%s", sh, want);
    cr_assert_str_eq(auth, expect);
    free(want);
}

Test(s3_sigv4, signing_key_matches_golden)
{
    uint8_t key[32];
    s3_sigv4_signing_key(SECRET, "20130524", "us-east-1", "s3", key);
    char hex[65];
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", key[i]);
    char *want = golden("signing-key.hex");
    want[64] = '\0';
    cr_assert_str_eq(hex, want);
    free(want);
}

Test(s3_sigv4, get_object_with_range)
{
    s3_kv h[] = {{"Host", HOST}, {"Range", "bytes=0-9"}, {"x-amz-content-sha256", EMPTY},
                 {"x-amz-date", DATE}};
    vcase v = {"get-object", "GET", "/test.txt", NULL, 0, h, 4, EMPTY};
    check_case(&v);
}

Test(s3_sigv4, put_object_with_encoded_key)
{
    char hash[65];
    s3_sha256_hex("Welcome to Amazon S3.", 21, hash);
    cr_assert_str_eq(hash, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
    char uri[64] = "/";
    cr_assert_eq(s3_uri_encode("test$file.text", true, uri + 1, sizeof uri - 1), 16);
    cr_assert_str_eq(uri, "/test%24file.text");
    /* headers in a shuffled order, names in mixed case: the stage sorts and lower-cases */
    s3_kv h[] = {{"x-amz-storage-class", "REDUCED_REDUNDANCY"}, {"Host", HOST},
                 {"Date", "Fri, 24 May 2013 00:00:00 GMT"}, {"X-Amz-Date", DATE},
                 {"x-amz-content-sha256", hash}};
    vcase v = {"put-object", "PUT", uri, NULL, 0, h, 5, hash};
    check_case(&v);
}

Test(s3_sigv4, get_bucket_lifecycle_bare_query_name)
{
    s3_kv q[] = {{"lifecycle", ""}};
    s3_kv h[] = {{"host", HOST}, {"x-amz-content-sha256", EMPTY}, {"x-amz-date", DATE}};
    vcase v = {"get-bucket-lifecycle", "GET", "/", q, 1, h, 3, EMPTY};
    check_case(&v);
}

Test(s3_sigv4, list_objects_sorted_query)
{
    s3_kv q[] = {{"prefix", "J"}, {"max-keys", "2"}}; /* unsorted on purpose */
    s3_kv h[] = {{"host", HOST}, {"x-amz-content-sha256", EMPTY}, {"x-amz-date", DATE}};
    vcase v = {"list-objects", "GET", "/", q, 2, h, 3, EMPTY};
    check_case(&v);
}

Test(s3_sigv4, uri_encoding_rules)
{
    char out[128];
    cr_assert_eq(s3_uri_encode("a b+c=/~_.-", false, out, sizeof out), 19);
    cr_assert_str_eq(out, "a%20b%2Bc%3D%2F~_.-");
    s3_uri_encode("dir/sub dir/k", true, out, sizeof out);
    cr_assert_str_eq(out, "dir/sub%20dir/k");
    s3_uri_encode("\xc3\xa9", true, out, sizeof out);
    cr_assert_str_eq(out, "%C3%A9");
    cr_assert_eq(s3_uri_encode("abc", false, out, 3), -ENOSPC);
}

Test(s3_sigv4, canonical_query_sorts_encoded_pairs)
{
    s3_kv q[] = {{"uploadId", "a/b+c=="}, {"partNumber", "2"}, {"uploads", NULL},
                 {"prefix", "x y"}};
    char out[256];
    cr_assert_gt(s3_sigv4_canonical_query(q, 4, out, sizeof out), 0);
    cr_assert_str_eq(out, "partNumber=2&prefix=x%20y&uploadId=a%2Fb%2Bc%3D%3D&uploads=");
    cr_assert_eq(s3_sigv4_canonical_query(q, 4, out, 10), -ENOSPC);
    cr_assert_eq(s3_sigv4_canonical_query(NULL, 0, out, sizeof out), 0);
    cr_assert_str_eq(out, "");
}

Test(s3_sigv4, header_values_trimmed_and_folded)
{
    s3_kv h[] = {{"My-Header", "  a   b \t c  "}, {"host", "h"}};
    char creq[512], sh[64];
    cr_assert_gt(s3_sigv4_canonical_request("GET", "/", "", h, 2, EMPTY, creq, sizeof creq, sh,
                                            sizeof sh), 0);
    cr_assert(strstr(creq, "\nmy-header:a b c\n"), "%s", creq);
    cr_assert_str_eq(sh, "host;my-header");
}

Test(s3_sigv4, amz_date_from_unix_time)
{
    char d[17];
    s3_sigv4_amz_date(1369353600, d);
    cr_assert_str_eq(d, DATE);
    s3_sigv4_amz_date(951782400, d);
    cr_assert_str_eq(d, "20000229T000000Z");
}

Test(s3_sigv4, authorization_never_contains_the_secret)
{
    s3_kv h[] = {{"host", HOST}, {"x-amz-content-sha256", EMPTY}, {"x-amz-date", DATE}};
    char auth[1024];
    cr_assert_gt(s3_sigv4_authorization(ACCESS, SECRET, "us-east-1", DATE, "GET", "/", "", h, 3,
                                        EMPTY, auth, sizeof auth), 0);
    cr_assert_null(strstr(auth, SECRET));
    cr_assert_null(strstr(auth, "EXAMPLEKEY"));
}
