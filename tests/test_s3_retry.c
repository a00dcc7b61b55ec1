/*
 * tests/test_s3_retry.c — the pure pieces of the retry policy and request helpers: one
 * classifier, full-jitter backoff bounds, final error codes, part math, ETags (single and
 * multipart), the CRC32C header's base64 (the CRC32C itself is wire_crc32c, tested in
 * tests/test_wire_crc32c.c).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "s3/s3_int.h"

Test(s3_retry, classifier_retries_transient_and_throttled_only)
{
    cr_assert_eq(s3_retry_classify(-ECONNRESET, 0, NULL), S3_RETRY_TRANSIENT);
    cr_assert_eq(s3_retry_classify(-ETIMEDOUT, 0, NULL), S3_RETRY_TRANSIENT);
    cr_assert_eq(s3_retry_classify(-EPROTO, 0, NULL), S3_RETRY_TRANSIENT);
    cr_assert_eq(s3_retry_classify(-ECONNREFUSED, 0, NULL), S3_RETRY_TRANSIENT);
    cr_assert_eq(s3_retry_classify(-EACCES, 0, NULL), S3_RETRY_NO, "TLS trust errors are fatal");
    cr_assert_eq(s3_retry_classify(-EMSGSIZE, 0, NULL), S3_RETRY_NO);
    cr_assert_eq(s3_retry_classify(0, 500, "InternalError"), S3_RETRY_TRANSIENT);
    cr_assert_eq(s3_retry_classify(0, 502, ""), S3_RETRY_TRANSIENT);
    cr_assert_eq(s3_retry_classify(0, 503, "SlowDown"), S3_RETRY_THROTTLED);
    cr_assert_eq(s3_retry_classify(0, 429, NULL), S3_RETRY_THROTTLED);
    cr_assert_eq(s3_retry_classify(0, 400, "RequestTimeout"), S3_RETRY_TRANSIENT);
    cr_assert_eq(s3_retry_classify(0, 200, "InternalError"), S3_RETRY_TRANSIENT);
    cr_assert_eq(s3_retry_classify(0, 400, "InvalidArgument"), S3_RETRY_NO);
    cr_assert_eq(s3_retry_classify(0, 403, "SignatureDoesNotMatch"), S3_RETRY_NO);
    cr_assert_eq(s3_retry_classify(0, 404, "NoSuchKey"), S3_RETRY_NO);
    cr_assert_eq(s3_retry_classify(0, 412, "PreconditionFailed"), S3_RETRY_NO);
}

Test(s3_retry, backoff_is_full_jitter_within_the_cap)
{
    cr_assert_eq(s3_backoff_ms(1, 500, 10000, 0), 0);
    cr_assert_eq(s3_backoff_ms(1, 500, 10000, UINT32_MAX), 500);
    cr_assert_eq(s3_backoff_ms(2, 500, 10000, UINT32_MAX), 1000);
    cr_assert_eq(s3_backoff_ms(3, 500, 10000, UINT32_MAX), 2000);
    cr_assert_eq(s3_backoff_ms(30, 500, 10000, UINT32_MAX), 10000, "capped");
    uint32_t mid = s3_backoff_ms(2, 500, 10000, UINT32_MAX / 2);
    cr_assert(mid >= 499 && mid <= 501, "%u", mid);
}

Test(s3_retry, final_error_codes)
{
    cr_assert_eq(s3_error_code(0, 404, "NoSuchKey"), -ENOENT);
    cr_assert_eq(s3_error_code(0, 404, "NoSuchUpload"), -ENOENT);
    cr_assert_eq(s3_error_code(0, 412, "PreconditionFailed"), -EEXIST);
    cr_assert_eq(s3_error_code(0, 403, "AccessDenied"), -EACCES);
    cr_assert_eq(s3_error_code(0, 416, "InvalidRange"), -ERANGE);
    cr_assert_eq(s3_error_code(0, 503, "SlowDown"), DSTL_EREMOTE);
    cr_assert_eq(s3_error_code(0, 400, "BadDigest"), DSTL_EREMOTE);
    cr_assert_eq(s3_error_code(-ETIMEDOUT, 0, NULL), -ETIMEDOUT);
    cr_assert_eq(s3_error_code(-ECONNREFUSED, 0, NULL), -ECONNREFUSED);
    cr_assert_eq(s3_error_code(-ECONNRESET, 0, NULL), DSTL_EREMOTE);
    cr_assert_eq(s3_error_code(-EPROTO, 0, NULL), DSTL_EREMOTE);
}

Test(s3_retry, part_math)
{
    cr_assert_eq(s3_part_count(16u << 20, 8u << 20), 2);
    cr_assert_eq(s3_part_count((16u << 20) + 1, 8u << 20), 3);
    cr_assert_eq(s3_part_count(1, 8u << 20), 1);
    uint64_t off, n;
    s3_part_range((16u << 20) + 1, 8u << 20, 2, &off, &n);
    cr_assert_eq(off, 16u << 20);
    cr_assert_eq(n, 1);
    s3_part_range(100, 40, 1, &off, &n);
    cr_assert_eq(off, 40);
    cr_assert_eq(n, 40);
    s3_part_range(100, 40, 3, &off, &n);
    cr_assert_eq(n, 0);
}

Test(s3_retry, etags)
{
    char e[72];
    s3_md5_etag("hello world", 11, e);
    cr_assert_str_eq(e, "\"5eb63bbbe01eeed093cb22bb8f5acdc3\"");
    /* multipart: md5 of the binary part md5s, "-N" */
    s3_part_info p[2] = {{.part_number = 1}, {.part_number = 2}};
    strcpy(p[0].etag, "\"5eb63bbbe01eeed093cb22bb8f5acdc3\"");
    strcpy(p[1].etag, "5EB63BBBE01EEED093CB22BB8F5ACDC3");
    cr_assert_eq(s3_multipart_etag(p, 2, e), 0);
    cr_assert_str_eq(e, "\"f057f37734d5fb132a69d44a61780026-2\"", "%s", e);
    strcpy(p[1].etag, "\"not-an-md5\"");
    cr_assert_eq(s3_multipart_etag(p, 2, e), -EINVAL);
}

Test(s3_retry, conflict_is_ambiguous_and_a_corrupt_copy_transient)
{
    cr_assert_eq(s3_retry_classify(0, 409, "ConditionalRequestConflict"), S3_RETRY_TWIN);
    cr_assert_eq(s3_retry_classify(0, 409, "BucketNotEmpty"), S3_RETRY_NO);
    cr_assert_eq(s3_retry_classify(-EBADMSG, 200, NULL), S3_RETRY_TRANSIENT,
                 "a written copy that differs is sent again");
    cr_assert_eq(s3_error_code(0, 409, "ConditionalRequestConflict"), DSTL_EREMOTE);
    cr_assert_eq(s3_error_code(-EBADMSG, 0, NULL), DSTL_EREMOTE);
}

Test(s3_retry, etag_equality_and_checksum_encoding)
{
    cr_assert(s3_etag_eq("\"5EB63BBBE01EEED093CB22BB8F5ACDC3\"", "5eb63bbbe01eeed093cb22bb8f5acdc3"));
    cr_assert(s3_etag_eq("\"abc-2\"", "\"abc-2\""));
    cr_assert_not(s3_etag_eq("\"abc\"", "\"abd\""));
    cr_assert_not(s3_etag_eq("", ""), "an empty ETag is nobody's");
    cr_assert_not(s3_etag_eq("\"\"", "\"\""));
    char b64[9];
    s3_crc32c_b64(0, b64); /* CRC32C("") */
    cr_assert_str_eq(b64, "AAAAAA==");
    s3_crc32c_b64(0xE3069283u, b64); /* CRC32C("123456789") */
    cr_assert_str_eq(b64, "4waSgw==");
}
