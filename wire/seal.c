/*
 * wire/seal.c — HKDF-SHA256, AES-256 key wrap and AES-256-GCM over OpenSSL's EVP interface.
 *
 * Only the primitives live here; which key seals what, with which nonce and associated data,
 * is the segment format's business (wire/segment_seal.c, FORMAT.md "Encryption"). The tests
 * check each function against published vectors (RFC 5869, RFC 3394, the GCM specification's
 * AES-256 cases).
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "dstl.h"
#include "wire/seal.h"

int wire_hkdf_sha256(const void *salt, size_t salt_len, const void *ikm, size_t ikm_len,
                     const void *info, size_t info_len, uint8_t *out, size_t n)
{
    static const uint8_t zeros[32];
    if (n == 0 || n > 255u * 32u || (!salt && salt_len) || (!ikm && ikm_len) || (!info && info_len) ||
        salt_len > INT_MAX || ikm_len > INT_MAX)
        return -EINVAL;
    uint8_t prk[32], t[32];
    unsigned int len = 0;
    int rc = 0;
    /* Extract: PRK = HMAC(salt, IKM); an absent salt is 32 zero bytes (RFC 5869 2.2). */
    if (!HMAC(EVP_sha256(), salt_len ? salt : zeros, salt_len ? (int)salt_len : 32, ikm, ikm_len, prk, &len))
        return -ENOMEM;
    /* Expand: T(i) = HMAC(PRK, T(i-1) || info || i), through one buffer (HMAC()'s one-shot
     * form: OpenSSL 3 deprecates HMAC_CTX). */
    uint8_t *m = malloc(32 + info_len + 1);
    if (!m) { rc = -ENOMEM; goto out; }
    size_t done = 0, tlen = 0;
    for (uint8_t i = 1; done < n; i++) {
        memcpy(m, t, tlen);
        if (info_len) memcpy(m + tlen, info, info_len);
        m[tlen + info_len] = i;
        if (!HMAC(EVP_sha256(), prk, 32, m, tlen + info_len + 1, t, &len)) {
            rc = -ENOMEM;
            break;
        }
        tlen = 32;
        size_t k = n - done < 32 ? n - done : 32;
        memcpy(out + done, t, k);
        done += k;
    }
    OPENSSL_cleanse(m, 32 + info_len + 1);
    free(m);
out:
    OPENSSL_cleanse(prk, sizeof prk);
    OPENSSL_cleanse(t, sizeof t);
    return rc;
}

/* One AES-256 key wrap or unwrap (the cipher checks the integrity value on unwrap). */
static int kw_run(int enc, const uint8_t kek[32], const uint8_t *in, int in_len, uint8_t *out, int *out_len)
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    if (!c) return -ENOMEM;
    EVP_CIPHER_CTX_set_flags(c, EVP_CIPHER_CTX_FLAG_WRAP_ALLOW);
    int n = 0, m = 0, ok = EVP_CipherInit_ex(c, EVP_aes_256_wrap(), NULL, kek, NULL, enc) &&
                           EVP_CipherUpdate(c, out, &n, in, in_len) && EVP_CipherFinal_ex(c, out + n, &m);
    EVP_CIPHER_CTX_free(c);
    *out_len = n + m;
    return ok ? 0 : DSTL_ECRYPTO;
}

int wire_kw_wrap(const uint8_t kek[32], const uint8_t key[32], uint8_t out[WIRE_KW_LEN])
{
    int n = 0, rc = kw_run(1, kek, key, 32, out, &n);
    return rc < 0 ? rc : n == (int)WIRE_KW_LEN ? 0 : -EINVAL;
}

int wire_kw_unwrap(const uint8_t kek[32], const uint8_t in[WIRE_KW_LEN], uint8_t key[32])
{
    uint8_t tmp[WIRE_KW_LEN + 16];   /* the cipher may write a block beyond the key */
    int n = 0, rc = kw_run(0, kek, in, (int)WIRE_KW_LEN, tmp, &n);
    if (rc == 0 && n == 32) memcpy(key, tmp, 32);
    else rc = DSTL_ECRYPTO;
    OPENSSL_cleanse(tmp, sizeof tmp);
    return rc;
}

struct wire_gcm {
    EVP_CIPHER_CTX *enc, *dec;
};

int wire_gcm_new(const uint8_t key[32], wire_gcm **out)
{
    wire_gcm *g = calloc(1, sizeof *g);
    if (!g) return -ENOMEM;
    g->enc = EVP_CIPHER_CTX_new();
    g->dec = EVP_CIPHER_CTX_new();
    if (!g->enc || !g->dec || !EVP_EncryptInit_ex(g->enc, EVP_aes_256_gcm(), NULL, key, NULL) ||
        !EVP_DecryptInit_ex(g->dec, EVP_aes_256_gcm(), NULL, key, NULL)) {
        wire_gcm_free(g);
        return -ENOMEM;
    }
    *out = g;
    return 0;
}

void wire_gcm_free(wire_gcm *g)
{
    if (!g) return;
    EVP_CIPHER_CTX_free(g->enc);   /* clears the key schedule */
    EVP_CIPHER_CTX_free(g->dec);
    free(g);
}

/* EVP takes int lengths: larger inputs go through in pieces. */
#define GCM_STEP ((size_t)1 << 30)

static int gcm_update(EVP_CIPHER_CTX *c, int enc, const uint8_t *in, size_t n, uint8_t *out)
{
    for (size_t done = 0; done < n;) {
        size_t k = n - done < GCM_STEP ? n - done : GCM_STEP;
        int got = 0;
        if (!(enc ? EVP_EncryptUpdate(c, out + done, &got, in + done, (int)k)
                  : EVP_DecryptUpdate(c, out + done, &got, in + done, (int)k)) || got != (int)k)
            return -1;
        done += k;
    }
    return 0;
}

static int gcm_aad(EVP_CIPHER_CTX *c, int enc, const void *aad, size_t aad_len)
{
    int got = 0;
    if (!aad_len) return 0;
    if (aad_len > INT_MAX) return -1;
    return (enc ? EVP_EncryptUpdate(c, NULL, &got, aad, (int)aad_len)
                : EVP_DecryptUpdate(c, NULL, &got, aad, (int)aad_len)) ? 0 : -1;
}

int wire_gcm_seal(wire_gcm *g, const uint8_t nonce[WIRE_GCM_NONCE_LEN], const void *aad,
                  size_t aad_len, const void *in, size_t n, void *out, uint8_t tag[WIRE_GCM_TAG_LEN])
{
    int fin = 0;
    if (!EVP_EncryptInit_ex(g->enc, NULL, NULL, NULL, nonce) || gcm_aad(g->enc, 1, aad, aad_len) < 0 ||
        gcm_update(g->enc, 1, in, n, out) < 0 || !EVP_EncryptFinal_ex(g->enc, (uint8_t *)out + n, &fin) ||
        !EVP_CIPHER_CTX_ctrl(g->enc, EVP_CTRL_GCM_GET_TAG, (int)WIRE_GCM_TAG_LEN, tag))
        return -ENOMEM;
    return 0;
}

int wire_gcm_open(wire_gcm *g, const uint8_t nonce[WIRE_GCM_NONCE_LEN], const void *aad,
                  size_t aad_len, const void *in, size_t n, void *out,
                  const uint8_t tag[WIRE_GCM_TAG_LEN])
{
    int fin = 0;
    uint8_t t[WIRE_GCM_TAG_LEN];
    memcpy(t, tag, sizeof t);   /* the ctrl takes a non-const pointer */
    if (!EVP_DecryptInit_ex(g->dec, NULL, NULL, NULL, nonce) || gcm_aad(g->dec, 0, aad, aad_len) < 0 ||
        gcm_update(g->dec, 0, in, n, out) < 0)
        return -ENOMEM;
    if (!EVP_CIPHER_CTX_ctrl(g->dec, EVP_CTRL_GCM_SET_TAG, (int)WIRE_GCM_TAG_LEN, t) ||
        EVP_DecryptFinal_ex(g->dec, (uint8_t *)out + n, &fin) <= 0) {
        OPENSSL_cleanse(out, n);   /* never leave unauthenticated plaintext behind */
        return DSTL_ECRYPTO;
    }
    return 0;
}
