/*
 * wire/seal.h — the cryptographic steps of encryption at rest (FORMAT.md, "Encryption"):
 * HKDF-SHA256, AES-256 key wrap, AES-256-GCM. Used by the segment encoder and decoder, and by
 * the known-answer tests; the rest of DSTL uses wire.h only.
 *
 * Pure (OpenSSL's EVP calls, no global state of ours); any thread; a wire_gcm is used by one
 * thread at a time. Every function that holds key material wipes it (OPENSSL_cleanse) before
 * it returns; wire_gcm_free wipes the context's key schedule.
 */
#ifndef DSTL_WIRE_SEAL_H
#define DSTL_WIRE_SEAL_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_GCM_NONCE_LEN  12u
#define WIRE_GCM_TAG_LEN    16u
#define WIRE_KW_LEN         40u     /* a wrapped 32-byte key (RFC 3394: 8 bytes longer) */

/* HKDF (RFC 5869) with SHA-256: Extract(salt, ikm) then Expand(info) into out[0, n),
 * n <= 255 * 32. Returns 0, or -EINVAL / -ENOMEM. */
int wire_hkdf_sha256(const void *salt, size_t salt_len, const void *ikm, size_t ikm_len,
                     const void *info, size_t info_len, uint8_t *out, size_t n);

/* AES-256 key wrap (RFC 3394, default IV A6A6A6A6A6A6A6A6) of a 32-byte key. unwrap returns
 * DSTL_ECRYPTO when the integrity check fails (a different wrapping key). */
int wire_kw_wrap(const uint8_t kek[32], const uint8_t key[32], uint8_t out[WIRE_KW_LEN]);
int wire_kw_unwrap(const uint8_t kek[32], const uint8_t in[WIRE_KW_LEN], uint8_t key[32]);

/* AES-256-GCM with one key and many nonces: the key schedule is set up once. seal writes n
 * bytes of ciphertext (in place when out == in) and the 16-byte tag; open checks the tag
 * before it writes anything the caller may use: on DSTL_ECRYPTO out holds no plaintext (it
 * is zeroed). 96-bit nonces only. */
typedef struct wire_gcm wire_gcm;
int wire_gcm_new(const uint8_t key[32], wire_gcm **out);
void wire_gcm_free(wire_gcm *g);
int wire_gcm_seal(wire_gcm *g, const uint8_t nonce[WIRE_GCM_NONCE_LEN], const void *aad,
                  size_t aad_len, const void *in, size_t n, void *out, uint8_t tag[WIRE_GCM_TAG_LEN]);
int wire_gcm_open(wire_gcm *g, const uint8_t nonce[WIRE_GCM_NONCE_LEN], const void *aad,
                  size_t aad_len, const void *in, size_t n, void *out,
                  const uint8_t tag[WIRE_GCM_TAG_LEN]);

#endif
