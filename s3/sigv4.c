/*
 * s3/sigv4.c — AWS Signature Version 4, in stages: URI encoding, canonical query, canonical
 * request, string to sign, signing key, signature, Authorization header.
 *
 * Why ours and not CURLOPT_AWS_SIGV4: libcurl signs the query string as written (unsorted,
 * "?uploads" without "="), which RGW and AWS reject (S3-SERVER.md, pitfall 1). Every stage is
 * a pure function so each can be checked against the published AWS examples
 * (tests/data/sigv4/). The clock is the caller's (amz_date is passed in).
 *
 * Threads: pure, thread-safe. Invariants: output buffers are always NUL-terminated when a
 * function returns a length >= 0; nothing here logs or keeps the secret.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "s3/s3_int.h"

static const char hex_digits[] = "0123456789abcdef";

static void to_hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex_digits[b[i] >> 4];
        out[2 * i + 1] = hex_digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

void s3_sha256_hex(const void *buf, size_t len, char hex[65])
{
    uint8_t md[32];
    unsigned int mdlen = 0;
    EVP_Digest(buf, len, md, &mdlen, EVP_sha256(), NULL);
    to_hex(md, 32, hex);
}

static void hmac256(const void *key, size_t key_len, const char *msg, size_t msg_len,
                    uint8_t out[32])
{
    unsigned int n = 32;
    HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)msg, msg_len, out, &n);
}

static bool unreserved(unsigned char ch)
{
    return isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~';
}

int s3_uri_encode(const char *s, bool keep_slash, char *out, size_t cap)
{
    static const char up[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (unreserved(*p) || (keep_slash && *p == '/')) {
            if (o + 1 >= cap) return -ENOSPC;
            out[o++] = (char)*p;
        } else {
            if (o + 3 >= cap) return -ENOSPC;
            out[o++] = '%';
            out[o++] = up[*p >> 4];
            out[o++] = up[*p & 15];
        }
    }
    if (o >= cap) return -ENOSPC;
    out[o] = '\0';
    return (int)o;
}

/* One encoded "name=value" pair, for sorting. */
typedef struct {
    char *name;
    char *value;
} enc_pair;

static int pair_cmp(const void *a, const void *b)
{
    const enc_pair *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

static char *encode_dup(const char *s)
{
    size_t cap = 3 * strlen(s) + 1;
    char *out = malloc(cap);
    if (out && s3_uri_encode(s, false, out, cap) < 0) {
        free(out);
        return NULL;
    }
    return out;
}

int s3_sigv4_canonical_query(const s3_kv *params, size_t n, char *out, size_t cap)
{
    if (cap == 0) return -ENOSPC;
    out[0] = '\0';
    if (n == 0) return 0;
    enc_pair *p = calloc(n, sizeof *p);
    if (!p) return -ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        p[i].name = encode_dup(params[i].name);
        p[i].value = encode_dup(params[i].value ? params[i].value : "");
        if (!p[i].name || !p[i].value) rc = -ENOMEM;
    }
    if (rc == 0) {
        qsort(p, n, sizeof *p, pair_cmp);
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            int w = snprintf(out + o, cap - o, "%s%s=%s", i ? "&" : "", p[i].name, p[i].value);
            if (w < 0 || (size_t)w >= cap - o) {
                rc = -ENOSPC;
                break;
            }
            o += (size_t)w;
        }
        if (rc == 0) rc = (int)o;
    }
    for (size_t i = 0; i < n; i++) {
        free(p[i].name);
        free(p[i].value);
    }
    free(p);
    if (rc < 0) out[0] = '\0';
    return rc;
}

void s3_sigv4_amz_date(int64_t t, char out[17])
{
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

/* A header prepared for the canonical form: lower-case name, trimmed folded value. */
typedef struct {
    char name[128];
    const char *value;
} canon_hdr;

static int hdr_cmp(const void *a, const void *b)
{
    return strcmp(((const canon_hdr *)a)->name, ((const canon_hdr *)b)->name);
}

/* Appends value trimmed, with inner runs of spaces folded to one. */
static int append_folded(char *out, size_t cap, size_t *o, const char *v)
{
    while (*v == ' ' || *v == '\t') v++;
    size_t end = strlen(v);
    while (end > 0 && (v[end - 1] == ' ' || v[end - 1] == '\t')) end--;
    bool in_space = false;
    for (size_t i = 0; i < end; i++) {
        char ch = v[i];
        if (ch == ' ' || ch == '\t') {
            if (in_space) continue;
            in_space = true;
            ch = ' ';
        } else {
            in_space = false;
        }
        if (*o + 1 >= cap) return -ENOSPC;
        out[(*o)++] = ch;
    }
    return 0;
}

static int append_str(char *out, size_t cap, size_t *o, const char *s)
{
    size_t n = strlen(s);
    if (*o + n >= cap) return -ENOSPC;
    memcpy(out + *o, s, n);
    *o += n;
    out[*o] = '\0';
    return 0;
}

int s3_sigv4_canonical_request(const char *method, const char *canonical_uri, const char *query,
                               const s3_kv *headers, size_t n_headers, const char *payload_hash,
                               char *out, size_t cap, char *signed_headers, size_t sh_cap)
{
    if (!method || !canonical_uri || !payload_hash || n_headers == 0 || n_headers > 64 ||
        cap == 0)
        return -EINVAL;
    canon_hdr h[64];
    for (size_t i = 0; i < n_headers; i++) {
        size_t nl = strlen(headers[i].name);
        if (nl == 0 || nl >= sizeof h[i].name) return -EINVAL;
        for (size_t j = 0; j <= nl; j++)
            h[i].name[j] = (char)tolower((unsigned char)headers[i].name[j]);
        h[i].value = headers[i].value ? headers[i].value : "";
    }
    qsort(h, n_headers, sizeof h[0], hdr_cmp);

    size_t o = 0;
    out[0] = '\0';
    int rc = append_str(out, cap, &o, method);
    rc = rc ? rc : append_str(out, cap, &o, "\n");
    rc = rc ? rc : append_str(out, cap, &o, canonical_uri[0] ? canonical_uri : "/");
    rc = rc ? rc : append_str(out, cap, &o, "\n");
    rc = rc ? rc : append_str(out, cap, &o, query ? query : "");
    rc = rc ? rc : append_str(out, cap, &o, "\n");
    for (size_t i = 0; i < n_headers && !rc; i++) {
        rc = append_str(out, cap, &o, h[i].name);
        rc = rc ? rc : append_str(out, cap, &o, ":");
        rc = rc ? rc : append_folded(out, cap, &o, h[i].value);
        rc = rc ? rc : append_str(out, cap, &o, "\n");
    }
    rc = rc ? rc : append_str(out, cap, &o, "\n");
    size_t sh_start = o;
    for (size_t i = 0; i < n_headers && !rc; i++) {
        if (i) rc = append_str(out, cap, &o, ";");
        rc = rc ? rc : append_str(out, cap, &o, h[i].name);
    }
    size_t sh_end = o;
    rc = rc ? rc : append_str(out, cap, &o, "\n");
    rc = rc ? rc : append_str(out, cap, &o, payload_hash);
    if (rc) {
        out[0] = '\0';
        return rc;
    }
    if (signed_headers) {
        size_t n = sh_end - sh_start;
        if (n >= sh_cap) return -ENOSPC;
        memcpy(signed_headers, out + sh_start, n);
        signed_headers[n] = '\0';
    }
    return (int)o;
}

int s3_sigv4_string_to_sign(const char *amz_date, const char *region, const char *service,
                            const char *canonical_request, char *out, size_t cap)
{
    char hash[65];
    s3_sha256_hex(canonical_request, strlen(canonical_request), hash);
    int w = snprintf(out, cap, "AWS4-HMAC-SHA256\n%s\n%.8s/%s/%s/aws4_request\n%s", amz_date,
                     amz_date, region, service, hash);
    if (w < 0 || (size_t)w >= cap) return -ENOSPC;
    return w;
}

void s3_sigv4_signing_key(const char *secret, const char *date8, const char *region,
                          const char *service, uint8_t key[32])
{
    char k0[300];
    int n = snprintf(k0, sizeof k0, "AWS4%s", secret);
    if (n < 0 || (size_t)n >= sizeof k0) n = (int)sizeof k0 - 1;
    uint8_t a[32], b[32];
    hmac256(k0, (size_t)n, date8, strlen(date8), a);
    hmac256(a, 32, region, strlen(region), b);
    hmac256(b, 32, service, strlen(service), a);
    hmac256(a, 32, "aws4_request", 12, key);
    OPENSSL_cleanse(k0, sizeof k0);
    OPENSSL_cleanse(a, sizeof a);
    OPENSSL_cleanse(b, sizeof b);
}

void s3_sigv4_signature(const uint8_t key[32], const char *string_to_sign, char hex[65])
{
    uint8_t sig[32];
    hmac256(key, 32, string_to_sign, strlen(string_to_sign), sig);
    to_hex(sig, 32, hex);
}

int s3_sigv4_authorization(const char *access_key, const char *secret_key, const char *region,
                           const char *amz_date, const char *method, const char *canonical_uri,
                           const char *query, const s3_kv *headers, size_t n_headers,
                           const char *payload_hash, char *out, size_t cap)
{
    /* The canonical request holds the encoded path and query: a 1 KiB key encodes to 3 KiB,
     * a continuation token a little more; 16 KiB bounds both with room for the headers. */
    enum { CREQ_CAP = 16384 };
    char *creq = malloc(CREQ_CAP);
    if (!creq) return -ENOMEM;
    char sh[1024], sts[512], sig[65];
    int rc = s3_sigv4_canonical_request(method, canonical_uri, query, headers, n_headers,
                                        payload_hash, creq, CREQ_CAP, sh, sizeof sh);
    if (rc >= 0) rc = s3_sigv4_string_to_sign(amz_date, region, "s3", creq, sts, sizeof sts);
    free(creq);
    if (rc < 0) return rc;
    char date8[9];
    memcpy(date8, amz_date, 8);
    date8[8] = '\0';
    uint8_t key[32];
    s3_sigv4_signing_key(secret_key, date8, region, "s3", key);
    s3_sigv4_signature(key, sts, sig);
    OPENSSL_cleanse(key, sizeof key);
    int w = snprintf(out, cap,
                     "AWS4-HMAC-SHA256 Credential=%s/%s/%s/s3/aws4_request, SignedHeaders=%s, "
                     "Signature=%s",
                     access_key, date8, region, sh, sig);
    if (w < 0 || (size_t)w >= cap) return -ENOSPC;
    return w;
}
