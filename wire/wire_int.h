/*
 * wire/wire_int.h — helpers shared by the wire/ sources only (not part of wire.h).
 *
 * Little-endian loads/stores, LEB128 varints with bounds checks, the error helper, the
 * section codecs (lz4/zstd) and the fixed constants of FORMAT.md. Pure functions, any thread.
 */
#ifndef DSTL_WIRE_INT_H
#define DSTL_WIRE_INT_H

#include <stdint.h>
#include <string.h>

#include "wire/seal.h"
#include "wire/wire.h"

/* ---- constants of FORMAT.md ---- */
#define WIRE_VERSION            1u
#define WIRE_SEG_MAGIC          "DSTLSEG\n"   /* header bytes 0..7 */
#define WIRE_TRL_MAGIC          "DSTLEND\n"   /* trailer bytes 24..31 */
#define WIRE_HANDLE_MAGIC       "DSTH"        /* handle bytes 0..3 */
#define WIRE_HANDLE_HDR_LEN     8u            /* magic, version, flags */
#define WIRE_HANDLE_CRC_LEN     4u

/* The largest raw section body a reader will allocate for decompression. A section is one
 * writer's records of one batch, bounded by the writer's preemptive-persist threshold and the
 * pipeline's max-in-flight (100 MiB by default); 1 GiB leaves room without letting a forged
 * footer ask for an absurd allocation. */
#define WIRE_SECTION_RAW_MAX    ((uint64_t)1 << 30)
/* The largest expansion a reader accepts from a compressed section, so that its allocation
 * stays proportional to the bytes it read (and below WIRE_SECTION_RAW_MAX): LZ4's block
 * format cannot exceed 255:1; zstd's best case is an RLE block (128 KiB from 4 bytes, about
 * 32768:1), so 65536 never refuses what zstd produced. The encoder stores a section raw if
 * it ever would. */
#define WIRE_LZ4_RATIO_MAX      256u
#define WIRE_ZSTD_RATIO_MAX     65536u

/* ---- little-endian ---- */
static inline uint16_t wire_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t wire_le32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v; /* x86-64 and aarch64 Linux are little-endian; FORMAT.md fixes LE */
}
static inline uint64_t wire_le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline void wire_put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void wire_put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void wire_put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "wire/ assumes a little-endian host (x86-64, aarch64)"
#endif

/* ---- varints (LEB128, at most 10 bytes for 64 bits; wire_varint_len is in wire.h) ---- */

static inline uint8_t *wire_varint_put(uint8_t *p, uint64_t v)
{
    if (v < 0x80) {   /* the common case: a seq gap of 0, a short length */
        *p = (uint8_t)v;
        return p + 1;
    }
    while (v >= 0x80) { *p++ = (uint8_t)(v | 0x80); v >>= 7; }
    *p++ = (uint8_t)v;
    return p;
}

/* Reads a varint from [*pp, end). Returns 0 and advances *pp, or -1 when it runs past end
 * or does not fit 64 bits (a 10th byte above 1, or an 11th byte). */
static inline int wire_varint_get(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) { *out = *p; *pp = p + 1; return 0; }
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (p >= end) return -1;
        uint8_t b = *p++;
        if (shift == 63 && b > 1) return -1;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) { *out = v; *pp = p; return 0; }
    }
    return -1;
}

/* ---- errors ---- */

/* Formats a one-line detail into err (when not NULL) and returns code. */
int wire_fail(wire_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- section codecs (wire/codec.c) ---- */

/* Upper bound of the compressed size of n raw bytes, or 0 when n is too large for the codec. */
size_t wire_codec_bound(int compression, size_t n);
/* Compresses src into dst (cap >= wire_codec_bound). Returns the compressed length, or 0
 * when the codec failed (the caller stores the section uncompressed). */
size_t wire_codec_compress(int compression, int level, const void *src, size_t n, void *dst,
                           size_t cap);
/* Decompresses exactly raw_len bytes; DSTL_ECORRUPT (detail in err) when the stored bytes
 * do not decode to exactly raw_len bytes. */
int wire_codec_decompress(int compression, const void *src, size_t n, void *dst, size_t raw_len,
                          wire_err *err);
/* Whether a reader accepts raw_len bytes decoded from stored_len compressed bytes. */
int wire_codec_ratio_ok(int compression, uint64_t stored_len, uint64_t raw_len);

/* ---- encryption at rest (wire/segment_seal.c, FORMAT.md "Encryption") ---- */

#define WIRE_SEG_FLAG_SEALED    1u            /* header and trailer flag: an encrypted segment */
#define SEAL_MAGIC              "DSTK"        /* the footer's key block, bytes 0..3 */
#define SEAL_SCHEME             1u            /* AES-256 key wrap, HKDF-SHA256, AES-256-GCM */
#define SEAL_HKDF_SALT          "DSTL segment data key v1"
/* The key block without its two ids: magic, scheme, id lengths, segment number (16), the
 * wrapped data key (40), the commitment (32), the footer's tag (16). */
#define SEAL_FIXED_LEN          (16u + WIRE_KW_LEN + 32u + WIRE_GCM_TAG_LEN)
#define SEAL_RUN_ID_MAX         255u
#define SEAL_WRITER_ID_MAX      255u
#define SEAL_WHOLE              UINT32_MAX    /* unit: a compressed section, sealed whole */
#define SEAL_AAD_MAX            (WIRE_SEG_HEADER_LEN + 128u + SEAL_WRITER_ID_MAX)
enum { SEAL_KIND_RUN = 1, SEAL_KIND_SECTION = 2, SEAL_KIND_FOOTER = 3 };

/* The clear key block at the start of an encrypted footer. */
typedef struct {
    unsigned scheme;
    size_t key_id_len, run_id_len, len;     /* len: the whole block, through the footer tag */
    uint64_t segment_no;
    char key_id[WIRE_KEY_ID_MAX + 1];
    char run_id[SEAL_RUN_ID_MAX + 1];
} seal_block;

/* The fixed header for a segment number and flags (FORMAT.md, "Header"): the writer's, and
 * the reader's rebuilt one that an encrypted segment's seals bind. */
static inline void wire_header_put(uint8_t *h, uint64_t segment_no, uint16_t flags)
{
    memset(h, 0, WIRE_SEG_HEADER_LEN);
    memcpy(h, WIRE_SEG_MAGIC, 8);
    wire_put16(h + 8, WIRE_VERSION);
    wire_put16(h + 10, flags);
    wire_put64(h + 16, segment_no);
    wire_put32(h + 28, wire_crc32c(0, h, 28));
}

size_t seal_block_len(size_t key_id_len, size_t run_id_len);
/* Writer: fills block (seal_block_len bytes; the footer tag is written by seal_footer) with
 * the key id, run id, DK wrapped by kek and the commitment, and derives E into *out. */
int seal_start(const wire_key *kek, const uint8_t dk[WIRE_KEY_LEN], const uint8_t *header,
               uint64_t segment_no, const char *run_id, uint8_t *block, wire_seal **out);
/* Reader: 1 when f starts with a key block (parsed into *b), 0 when it does not (a plain
 * footer), DSTL_ECORRUPT when the block is malformed. */
int seal_block_parse(const uint8_t *f, size_t len, seal_block *b);
/* Reader: finds b's key in keys, unwraps DK, checks the commitment, derives E. `at` is the
 * footer's offset, for details. */
int seal_resume(const uint8_t *block, const seal_block *b, const wire_keyring *keys, wire_seal **out,
                wire_err *err, uint64_t at);
/* Seals (open = 0) or opens (open = 1) one unit: run r of sec, or the whole section
 * (r = SEAL_WHOLE). in == out is allowed. Opening returns DSTL_ECRYPTO on a failed tag. */
int seal_unit(wire_seal *s, int open, const wire_section_info *sec, uint32_t r, const uint8_t *in,
              size_t n, uint8_t *out, uint8_t tag[16]);
/* Seals or opens the footer protobuf pb[0, n) in place; the tag is block's last 16 bytes. */
int seal_footer(wire_seal *s, int open, uint8_t *block, size_t block_len, uint8_t *pb, size_t n);
const char *seal_key_id(const wire_seal *s);
void seal_free(wire_seal *s);

/* ---- footer_dec.c: a footer's protobuf read in place (pointers into the footer bytes) ---- */
enum { FOOTER_ENC_NONE = 0, FOOTER_ENC_AES_256_GCM = 1 };   /* dstl.proto's Encryption */
typedef struct {
    uint32_t format_version;
    const uint8_t *run_id;
    size_t run_id_len;
    uint64_t segment_no, created_ms;
    size_t nsections, nruns;
    size_t name_bytes;          /* the writer ids and the run id, each with a NUL */
} fpb_head;

typedef struct {
    const uint8_t *writer_id;
    size_t writer_id_len;
    uint64_t seq_first, seq_end, record_count, data_bytes, offset, stored_len, raw_len;
    uint32_t kg_first, kg_last, crc, compression, encryption;
    size_t key_id_len, nonce_len;   /* unused fields: only their presence is checked */
    const uint8_t *tag;
    size_t tag_len;
    const uint8_t *msg;         /* the Section message: footer_next_run walks its runs */
    size_t msg_len;
    size_t nruns;
} fpb_section;

typedef struct {
    uint32_t key_group, crc;
    int is_meta;
    uint64_t offset, len, count;
    const uint8_t *tag;
    size_t tag_len;
} fpb_run;

/* The footer's own fields and the shape of its sections (counts, name bytes). 0, or -1 when
 * the bytes are not a well-formed SegmentFooter. */
int footer_read_head(const uint8_t *m, size_t n, fpb_head *h);
/* The next section of the footer [*p, end): 1, 0 after the last, -1 malformed. */
int footer_next_section(const uint8_t **p, const uint8_t *end, fpb_section *s);
/* The next run of a section message [*p, end) (start at s->msg): 1, 0, -1. */
int footer_next_run(const uint8_t **p, const uint8_t *end, fpb_run *r);

/* ---- footer_enc.c: a footer's protobuf written from the same structs ----
 * A footer is its head's fields, then each section (with its runs), then the padding field:
 * *_size gives the bytes each puts, *_put writes them at p and returns the end. Sections are
 * written from an fpb_section's values (its msg, nruns and the unused key_id/nonce lengths
 * are ignored) and nruns runs. */
size_t footer_head_size(const fpb_head *h);
uint8_t *footer_put_head(uint8_t *p, const fpb_head *h);
size_t footer_section_size(const fpb_section *s, const fpb_run *runs, size_t nruns);
/* NULL, having written nothing, when the section would pass end */
uint8_t *footer_put_section(uint8_t *p, const uint8_t *end, const fpb_section *s, const fpb_run *runs,
                            size_t nruns);
size_t footer_padding_size(size_t n);
uint8_t *footer_put_padding(uint8_t *p, size_t n);   /* n zeros; nothing when n is 0 */

#endif
