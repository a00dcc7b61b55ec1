/*
 * s3/checksum.c — how S3 names the content of what we wrote: the ETags by which we recognise
 * our own objects (the hex MD5 of a single PUT's body; the multipart ETag, the MD5 of the
 * parts' MD5s with "-N"; comparison that ignores quotes and hex case) and the base64 form in
 * which x-amz-checksum-crc32c carries a CRC32C. The CRC32C itself is the caller's
 * (s3_opts.crc32c): s3/ keeps none.
 *
 * Threads: pure, thread-safe.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "s3/s3_int.h"

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

void s3_md5_etag(const void *buf, size_t len, char out[72])
{
    uint8_t md[16];
    unsigned int n = 16;
    EVP_Digest(buf, len, md, &n, EVP_md5(), NULL);
    etag_from_md5(md, "", out);
}

struct s3_md5 {
    EVP_MD_CTX *ctx;
};

s3_md5 *s3_md5_new(void)
{
    s3_md5 *m = calloc(1, sizeof *m);
    if (m && (!(m->ctx = EVP_MD_CTX_new()) || EVP_DigestInit_ex(m->ctx, EVP_md5(), NULL) != 1)) {
        EVP_MD_CTX_free(m->ctx);
        free(m);
        m = NULL;
    }
    return m;
}

void s3_md5_add(s3_md5 *m, const void *p, size_t n)
{
    if (m && n) EVP_DigestUpdate(m->ctx, p, n);
}

void s3_md5_free(s3_md5 *m)
{
    if (!m) return;
    EVP_MD_CTX_free(m->ctx);
    free(m);
}

void s3_md5_end(s3_md5 *m, char out[72])
{
    out[0] = '\0';
    if (!m) return;
    uint8_t md[16];
    unsigned int n = 16;
    if (EVP_DigestFinal_ex(m->ctx, md, &n) == 1 && n == 16) etag_from_md5(md, "", out);
    s3_md5_free(m);
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

/* ---- x-amz-checksum-crc32c ---- */

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
