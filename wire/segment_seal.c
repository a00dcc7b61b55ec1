/*
 * wire/segment_seal.c — encryption at rest for segments: the key block, the data key, and
 * which key seals which bytes with which nonce and associated data (FORMAT.md, "Encryption").
 *
 * Envelope: every segment has its own random data key DK (from the caller), wrapped with the
 * key file's active key by AES-256 key wrap and stored in the clear key block at the start of
 * the footer, beside the key's id. From DK, HKDF-SHA256 derives two values bound to the
 * segment's header and key block: the key commitment (stored) and the data-encryption key E.
 * E seals, with AES-256-GCM, each key-group run of an uncompressed section, each compressed
 * section as a whole, and the footer protobuf. Nonces are positions (kind, section, run): E
 * is never used for another segment, so positions never repeat under one key.
 *
 * A reader checks, before any plaintext is released: the wrap's integrity value (a different
 * key), the commitment (a segment that would open under two keys), then each unit's tag.
 *
 * Pure; any thread; a wire_seal is read-only after creation except for its GCM contexts,
 * which are used by one thread at a time (the iterator's open, on the reader's thread).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include <openssl/crypto.h>

#include "wire/seal.h"
#include "wire/wire_int.h"

#define ULL(x) ((unsigned long long)(x))

struct wire_seal {
    wire_gcm *gcm;
    pthread_mutex_t mu;            /* one GCM context: units opened from several threads */
    uint8_t header[WIRE_SEG_HEADER_LEN];
    char key_id[WIRE_KEY_ID_MAX + 1];
};

int wire_key_id_valid(const char *id, size_t len)
{
    if (!id || len == 0 || len > WIRE_KEY_ID_MAX) return 0;
    for (size_t i = 0; i < len; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

size_t seal_block_len(size_t key_id_len, size_t run_id_len)
{
    return SEAL_FIXED_LEN + key_id_len + run_id_len;
}

/* HKDF from DK to the commitment and to E, both bound to ctx = header || key block through
 * the wrapped key. */
static int derive(const uint8_t dk[WIRE_KEY_LEN], const uint8_t *header, const uint8_t *block,
                  size_t prefix_len, uint8_t commit[32], uint8_t e[32])
{
    size_t n = 8 + WIRE_SEG_HEADER_LEN + prefix_len;
    uint8_t *info = malloc(n);
    if (!info) return -ENOMEM;
    memcpy(info + 8, header, WIRE_SEG_HEADER_LEN);
    memcpy(info + 8 + WIRE_SEG_HEADER_LEN, block, prefix_len);
    memcpy(info, "commit\0\0", 8);
    int rc = wire_hkdf_sha256(SEAL_HKDF_SALT, sizeof SEAL_HKDF_SALT - 1, dk, WIRE_KEY_LEN, info, n, commit, 32);
    memcpy(info, "encrypt\0", 8);
    if (rc == 0) rc = wire_hkdf_sha256(SEAL_HKDF_SALT, sizeof SEAL_HKDF_SALT - 1, dk, WIRE_KEY_LEN, info, n, e, 32);
    free(info);   /* public bytes only */
    return rc;
}

static int seal_new(const uint8_t e[32], const uint8_t *header, const char *key_id, wire_seal **out)
{
    wire_seal *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    int rc = wire_gcm_new(e, &s->gcm);
    if (rc < 0) {
        free(s);
        return rc;
    }
    pthread_mutex_init(&s->mu, NULL);
    memcpy(s->header, header, WIRE_SEG_HEADER_LEN);
    snprintf(s->key_id, sizeof s->key_id, "%s", key_id);
    *out = s;
    return 0;
}

void seal_free(wire_seal *s)
{
    if (!s) return;
    wire_gcm_free(s->gcm);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

const char *seal_key_id(const wire_seal *s) { return s->key_id; }

int seal_start(const wire_key *kek, const uint8_t dk[WIRE_KEY_LEN], const uint8_t *header, uint64_t segment_no,
               const char *run_id, uint8_t *block, wire_seal **out)
{
    size_t k = strlen(kek->id), r = strlen(run_id);
    if (!wire_key_id_valid(kek->id, k) || r == 0 || r > SEAL_RUN_ID_MAX) return -EINVAL;
    memcpy(block, SEAL_MAGIC, 4);
    block[4] = SEAL_SCHEME;
    block[5] = (uint8_t)k;
    wire_put16(block + 6, (uint16_t)r);
    wire_put64(block + 8, segment_no);
    memcpy(block + 16, kek->id, k);
    memcpy(block + 16 + k, run_id, r);
    uint8_t *wrapped = block + 16 + k + r;
    int rc = wire_kw_wrap(kek->key, dk, wrapped);
    uint8_t e[32];
    if (rc == 0) rc = derive(dk, header, block, 16 + k + r + WIRE_KW_LEN, wrapped + WIRE_KW_LEN, e);
    if (rc == 0) rc = seal_new(e, header, kek->id, out);
    OPENSSL_cleanse(e, sizeof e);
    return rc;
}

/* The nonce of a unit: its kind and position, little-endian u32s. */
static void nonce_of(uint8_t n[WIRE_GCM_NONCE_LEN], uint32_t kind, uint32_t section, uint32_t run)
{
    wire_put32(n, kind);
    wire_put32(n + 4, section);
    wire_put32(n + 8, run);
}

/* The associated data of a section unit (run = SEAL_WHOLE: the compressed section): the
 * header, then every index field of the section and of the run that the reader trusts. */
static size_t unit_aad(const wire_seal *s, const wire_section_info *sec, uint32_t run, uint8_t *a)
{
    uint8_t *p = a;
    memcpy(p, s->header, WIRE_SEG_HEADER_LEN);
    p += WIRE_SEG_HEADER_LEN;
    wire_put32(p, sec->index); p += 4;
    wire_put32(p, run); p += 4;
    wire_put64(p, sec->seq_first); p += 8;
    wire_put64(p, sec->seq_end); p += 8;
    wire_put64(p, sec->nrec); p += 8;
    wire_put64(p, sec->data_bytes); p += 8;
    wire_put32(p, sec->kg_first); p += 4;
    wire_put32(p, sec->kg_last); p += 4;
    wire_put64(p, sec->offset); p += 8;
    wire_put64(p, sec->stored_len); p += 8;
    wire_put64(p, sec->raw_len); p += 8;
    wire_put32(p, (uint32_t)sec->compression); p += 4;
    const wire_kg_run *k = run == SEAL_WHOLE ? NULL : &sec->runs[run];
    wire_put32(p, k ? k->key_group : 0); p += 4;
    wire_put32(p, k ? (uint32_t)k->is_meta : 0); p += 4;
    wire_put64(p, k ? k->offset : 0); p += 8;
    wire_put64(p, k ? k->len : 0); p += 8;
    wire_put64(p, k ? k->count : 0); p += 8;
    wire_put32(p, k ? k->crc : 0); p += 4;
    size_t w = strlen(sec->writer_id);
    wire_put16(p, (uint16_t)w); p += 2;
    memcpy(p, sec->writer_id, w);
    return (size_t)(p + w - a);
}

int seal_unit(wire_seal *s, int open, const wire_section_info *sec, uint32_t run, const uint8_t *in, size_t n,
              uint8_t *out, uint8_t tag[WIRE_GCM_TAG_LEN])
{
    if (strlen(sec->writer_id) > SEAL_WRITER_ID_MAX) return -EINVAL;
    uint8_t aad[SEAL_AAD_MAX], nonce[WIRE_GCM_NONCE_LEN];
    size_t alen = unit_aad(s, sec, run, aad);
    nonce_of(nonce, run == SEAL_WHOLE ? SEAL_KIND_SECTION : SEAL_KIND_RUN, sec->index, run == SEAL_WHOLE ? 0 : run);
    pthread_mutex_lock(&s->mu);
    int rc = open ? wire_gcm_open(s->gcm, nonce, aad, alen, in, n, out, tag)
                  : wire_gcm_seal(s->gcm, nonce, aad, alen, in, n, out, tag);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* The footer: AAD = header || key block through the commitment; the tag follows it. */
int seal_footer(wire_seal *s, int open, uint8_t *block, size_t block_len, uint8_t *pb, size_t n)
{
    size_t alen = WIRE_SEG_HEADER_LEN + block_len - WIRE_GCM_TAG_LEN;
    uint8_t *aad = malloc(alen), nonce[WIRE_GCM_NONCE_LEN];
    if (!aad) return -ENOMEM;
    memcpy(aad, s->header, WIRE_SEG_HEADER_LEN);
    memcpy(aad + WIRE_SEG_HEADER_LEN, block, block_len - WIRE_GCM_TAG_LEN);
    nonce_of(nonce, SEAL_KIND_FOOTER, 0, 0);
    uint8_t *tag = block + block_len - WIRE_GCM_TAG_LEN;
    int rc = open ? wire_gcm_open(s->gcm, nonce, aad, alen, pb, n, pb, tag)
                  : wire_gcm_seal(s->gcm, nonce, aad, alen, pb, n, pb, tag);
    free(aad);
    return rc;
}

int seal_block_parse(const uint8_t *f, size_t len, seal_block *b)
{
    if (len < 4 || memcmp(f, SEAL_MAGIC, 4) != 0) return 0;
    if (len < SEAL_FIXED_LEN) return DSTL_ECORRUPT;
    b->scheme = f[4];
    b->key_id_len = f[5];
    b->run_id_len = wire_le16(f + 6);
    b->segment_no = wire_le64(f + 8);
    if (b->key_id_len == 0 || b->key_id_len > WIRE_KEY_ID_MAX || b->run_id_len == 0 ||
        b->run_id_len > SEAL_RUN_ID_MAX || len < seal_block_len(b->key_id_len, b->run_id_len))
        return DSTL_ECORRUPT;
    memcpy(b->key_id, f + 16, b->key_id_len);
    b->key_id[b->key_id_len] = 0;
    if (!wire_key_id_valid(b->key_id, b->key_id_len)) return DSTL_ECORRUPT;
    memcpy(b->run_id, f + 16 + b->key_id_len, b->run_id_len);
    b->run_id[b->run_id_len] = 0;
    b->len = seal_block_len(b->key_id_len, b->run_id_len);
    return 1;
}

int wire_footer_key_id(const void *footer, size_t len, char id[WIRE_KEY_ID_MAX + 1])
{
    seal_block b;
    int rc = footer ? seal_block_parse(footer, len, &b) : DSTL_ECORRUPT;
    if (rc == 1) memcpy(id, b.key_id, b.key_id_len + 1);
    return rc;
}

int seal_resume(const uint8_t *block, const seal_block *b, const wire_keyring *keys, wire_seal **out,
                wire_err *err, uint64_t at)
{
    if (b->scheme != SEAL_SCHEME)
        return wire_fail(err, DSTL_ECORRUPT, "segment offset %llu: unknown encryption scheme %u", ULL(at + 4),
                         b->scheme);
    const wire_key *k = NULL;
    for (size_t i = 0; keys && i < keys->nkeys && !k; i++)
        if (strcmp(keys->keys[i].id, b->key_id) == 0) k = &keys->keys[i];
    if (!keys)
        return wire_fail(err, DSTL_ECRYPTO, "encrypted with key id '%s', and no key file is configured "
                         "(dstl.encryption.key-file)", b->key_id);
    if (!k)
        return wire_fail(err, DSTL_ECRYPTO, "encrypted with key id '%s', which the key file does not list",
                         b->key_id);
    uint8_t header[WIRE_SEG_HEADER_LEN], dk[WIRE_KEY_LEN], commit[32], e[32];
    wire_header_put(header, b->segment_no, WIRE_SEG_FLAG_SEALED);
    size_t prefix = 16 + b->key_id_len + b->run_id_len;
    int rc = wire_kw_unwrap(k->key, block + prefix, dk);
    if (rc < 0) {
        OPENSSL_cleanse(dk, sizeof dk);
        return wire_fail(err, rc, "segment offset %llu: key id '%s' does not unwrap the data key (the key "
                         "file's key under that id is not the one that wrote it)", ULL(at + prefix), b->key_id);
    }
    rc = derive(dk, header, block, prefix + WIRE_KW_LEN, commit, e);
    OPENSSL_cleanse(dk, sizeof dk);
    if (rc == 0 && CRYPTO_memcmp(commit, block + prefix + WIRE_KW_LEN, 32) != 0)
        rc = wire_fail(err, DSTL_ECRYPTO, "segment offset %llu: key commitment does not match (key id '%s')",
                       ULL(at + prefix + WIRE_KW_LEN), b->key_id);
    else if (rc == 0)
        rc = seal_new(e, header, b->key_id, out);
    OPENSSL_cleanse(e, sizeof e);
    return rc;
}
