/*
 * s3/retry.c — the retry policy and the small pure helpers around requests: one classifier
 * (transient / throttled / fatal), full-jitter backoff, the final error code, part-size math,
 * and the ETags used to recognise our own objects.
 *
 * Why one classifier: every request (PUT, part, GET, list, ...) must agree on what is worth
 * another attempt, or a hedge and a retry could disagree about the same failure. Besides
 * fatal / transient / throttled there is one ambiguous class: 409 ConditionalRequestConflict
 * (AWS's answer to an If-None-Match PUT while another upload of the key is in flight — with
 * hedging, often our own twin): not retried, but not fatal while a twin may still land.
 * Threads: pure, thread-safe.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

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

size_t s3_part_count(uint64_t len, uint64_t part_size)
{
    return (size_t)((len + part_size - 1) / part_size);
}

void s3_part_range(uint64_t len, uint64_t part_size, size_t i, uint64_t *off, uint64_t *n)
{
    *off = (uint64_t)i * part_size;
    *n = *off >= len ? 0 : (len - *off < part_size ? len - *off : part_size);
}

/* ---- ETags ---- */

static const char hexd[] = "0123456789abcdef";

static int unhex(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static void etag_from_md5(const uint8_t md[16], const char *suffix, char out[72])
{
    char hex[33];
    for (int i = 0; i < 16; i++) {
        hex[2 * i] = hexd[md[i] >> 4];
        hex[2 * i + 1] = hexd[md[i] & 15];
    }
    hex[32] = '\0';
    snprintf(out, 72, "\"%s%s\"", hex, suffix);
}

bool s3_etag_eq(const char *a, const char *b)
{
    if (*a == '"') a++;
    if (*b == '"') b++;
    size_t la = strlen(a), lb = strlen(b);
    if (la && a[la - 1] == '"') la--;
    if (lb && b[lb - 1] == '"') lb--;
    return la && la == lb && strncasecmp(a, b, la) == 0;
}

void s3_crc32c_b64(uint32_t crc, char out[9])
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const uint8_t be[4] = {(uint8_t)(crc >> 24), (uint8_t)(crc >> 16), (uint8_t)(crc >> 8),
                           (uint8_t)crc};
    out[0] = b64[be[0] >> 2];
    out[1] = b64[((be[0] & 3) << 4) | (be[1] >> 4)];
    out[2] = b64[((be[1] & 15) << 2) | (be[2] >> 6)];
    out[3] = b64[be[2] & 63];
    out[4] = b64[be[3] >> 2];
    out[5] = b64[(be[3] & 3) << 4];
    out[6] = out[7] = '=';
    out[8] = '\0';
}

void s3_md5_etag(const void *buf, size_t len, char out[72])
{
    uint8_t md[16];
    unsigned int n = 16;
    EVP_Digest(buf, len, md, &n, EVP_md5(), NULL);
    etag_from_md5(md, "", out);
}

int s3_multipart_etag(const s3_part_info *parts, size_t n, char out[72])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) return -ENOMEM;
    EVP_DigestInit_ex(ctx, EVP_md5(), NULL);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const char *e = parts[i].etag;
        if (*e == '"') e++;
        uint8_t md[16];
        for (int k = 0; k < 16 && !rc; k++) {
            int hi = unhex(e[2 * k]), lo = hi < 0 ? -1 : unhex(e[2 * k + 1]);
            if (hi < 0 || lo < 0) rc = -EINVAL;
            else md[k] = (uint8_t)(hi << 4 | lo);
        }
        if (!rc && e[32] != '"' && e[32] != '\0') rc = -EINVAL;
        if (!rc) EVP_DigestUpdate(ctx, md, 16);
    }
    if (!rc) {
        uint8_t md[16];
        unsigned int mdn = 16;
        EVP_DigestFinal_ex(ctx, md, &mdn);
        char suffix[16];
        snprintf(suffix, sizeof suffix, "-%zu", n);
        etag_from_md5(md, suffix, out);
    }
    EVP_MD_CTX_free(ctx);
    return rc;
}
