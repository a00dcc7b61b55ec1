/*
 * s3/retry.c — the retry policy: one classifier (transient / throttled / ambiguous / fatal) and
 * full-jitter backoff. What an op reports once no attempt is left is in s3/result.c.
 *
 * Why one classifier: every request (PUT, part, GET, list, ...) must agree on what is worth
 * another attempt, or a hedge and a retry could disagree about the same failure. Besides
 * fatal / transient / throttled there is one ambiguous class: 409 ConditionalRequestConflict
 * (AWS's answer to an If-None-Match PUT while another upload of the key is in flight — with
 * hedging, often our own twin): not retried, but not fatal while a twin may still land.
 * Threads: pure, thread-safe.
 */
#include <errno.h>
#include <string.h>

#include "s3/s3_int.h"

static bool code_is(const char *code, const char *want)
{
    return code && strcmp(code, want) == 0;
}

s3_retry_class s3_retry_classify(int net_err, int status, const char *s3_code)
{
    if (net_err) {
        /* -EBADMSG (a written copy that differs from the body) is transient: a new attempt
         * sends the body again and replaces it */
        switch (net_err) {
        case -EACCES:   /* TLS trust failure: another attempt sees the same certificate */
        case -EINVAL:   /* a request we could not even form */
        case -ENOMEM:
        case -EMSGSIZE: /* the server insists on a body larger than we accept */
            return S3_RETRY_NO;
        default:
            return S3_RETRY_TRANSIENT;
        }
    }
    if (code_is(s3_code, "SlowDown") || code_is(s3_code, "Throttling") ||
        code_is(s3_code, "ThrottlingException") || code_is(s3_code, "RequestLimitExceeded") ||
        status == 429 || status == 503)
        return S3_RETRY_THROTTLED;
    if (status == 409 && code_is(s3_code, "ConditionalRequestConflict")) return S3_RETRY_TWIN;
    /* RequestTimeout comes with a 400: the server gave up waiting for our body. */
    if (code_is(s3_code, "RequestTimeout") || code_is(s3_code, "InternalError") ||
        code_is(s3_code, "ServiceUnavailable"))
        return S3_RETRY_TRANSIENT;
    if (status >= 500) return S3_RETRY_TRANSIENT;
    return S3_RETRY_NO;
}

uint32_t s3_backoff_ms(int failures, uint32_t base_ms, uint32_t cap_ms, uint32_t r)
{
    if (failures < 1) failures = 1;
    uint64_t ceil_ms = base_ms;
    for (int i = 1; i < failures && ceil_ms < cap_ms; i++) ceil_ms *= 2;
    if (ceil_ms > cap_ms) ceil_ms = cap_ms;
    return (uint32_t)(((uint64_t)r * (ceil_ms + 1)) >> 32);
}
