/*
 * wire/wire.h — the DSTL byte formats: segments, handles, canonical state changes, CRC32C.
 *
 * Pure: bytes in, records out. No I/O, no threads, no clocks, no mutable global state (the
 * caller passes times and ids in; the CRC32C tables are built once, thread-safely). Every function may be called from any thread; objects are used
 * by one thread at a time. The byte layout is written out in wire/FORMAT.md.
 *
 * Errors: DSTL_ECORRUPT for malformed bytes, -EINVAL for bad arguments, -ENOMEM; when `err`
 * is not NULL it receives a one-line detail naming the offset ("segment offset 4711: ...").
 */
#ifndef DSTL_WIRE_H
#define DSTL_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "dstl.h"

typedef struct {
    char msg[256];
} wire_err;

/* ---- CRC32C (Castagnoli, as iSCSI/ext4): crc = wire_crc32c(0, buf, len) for a fresh value;
 * wire_crc32c(wire_crc32c(0, a, n), b, m) is the CRC of a||b. Hardware (SSE4.2) when the CPU
 * has it, a portable table otherwise. wire_crc32c("123456789") == 0xE3069283. */
uint32_t wire_crc32c(uint32_t crc, const void *buf, size_t len);
uint32_t wire_crc32c_portable(uint32_t crc, const void *buf, size_t len);
/* Every implementation this CPU can run, the one wire_crc32c uses last (for tests and
 * benchmarks): how many, each one's name, and a CRC through implementation i. */
size_t wire_crc32c_impls(void);
const char *wire_crc32c_impl_name(size_t i);
uint32_t wire_crc32c_impl(size_t i, uint32_t crc, const void *buf, size_t len);
/* The CRC of a||b from crc1 = CRC(a), crc2 = CRC(b) and len2 = |b|, without reading the bytes
 * (O(log len2) multiplications; zlib's crc32_combine for CRC32C). */
uint32_t wire_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

/* ---- pending records: the writer's append buffer format -----------------------------------
 * A writer keeps its not-yet-durable records in chunks of this format; the segment encoder
 * reads them directly. One record = an 8-byte header, then the payload, then padding to 8:
 *     u32 len_flags (little-endian): bits 0..30 payload length, bit 31 = meta record
 *     u32 key_group (0 for meta records)
 *     payload[len], zero padding to a multiple of 8
 * Sequence numbers are implicit: consecutive, in buffer order. */
#define WIRE_REC_HDR      8u
#define WIRE_REC_MAX_LEN  0x7fffffffu
#define WIRE_REC_META     0x80000000u
static inline size_t wire_rec_size(size_t len) { return WIRE_REC_HDR + ((len + 7u) & ~(size_t)7u); }

/* Writes one record at dst (which has wire_rec_size(len) bytes, len <= WIRE_REC_MAX_LEN);
 * returns that size. */
size_t wire_rec_put(uint8_t *dst, int is_meta, uint32_t key_group, const void *data, size_t len);

typedef struct {
    const uint8_t *p;
    size_t len;           /* whole records only */
} wire_span;

/* ---- keys for encryption at rest (FORMAT.md, "Encryption") ------------------------------------
 * A key-encryption key of the key file: its id (1..64 of [A-Za-z0-9._-], NUL-terminated) and
 * its 256 bits. Whoever holds a wire_key wipes it (OPENSSL_cleanse) when done with it. */
#define WIRE_KEY_LEN     32u
#define WIRE_KEY_ID_MAX  64u
typedef struct {
    char id[WIRE_KEY_ID_MAX + 1];
    uint8_t key[WIRE_KEY_LEN];
} wire_key;

/* The keys a reader may need: looked up by id (an encrypted segment names its key's id). */
typedef struct {
    const wire_key *keys;
    size_t nkeys;
} wire_keyring;

/* 1 when id[0, len) is a valid key id: 1 to 64 characters of [A-Za-z0-9._-]. */
int wire_key_id_valid(const char *id, size_t len);

/* ---- segment encoding ---------------------------------------------------------------------- */

enum { WIRE_COMP_NONE = 0, WIRE_COMP_LZ4 = 1, WIRE_COMP_ZSTD = 2 };

/* One key group's records in a section, counted as they are appended (wire_tally_add): what
 * the encoder's counting sort needs, so that it need not walk the records to count them. */
typedef struct {
    uint64_t count;           /* records */
    uint64_t bytes;           /* framed bytes (FORMAT.md: seq-gap varint, length varint, payload) */
    uint64_t next;            /* the section-relative seq after its last record */
} wire_kg_tally;

/* A section's tally: kg[i] counts key group kg_lo + i (nkg entries), meta the METADATA records,
 * payload_bytes the payload of all of them. */
typedef struct {
    uint32_t kg_lo, nkg;
    const wire_kg_tally *kg;
    wire_kg_tally meta;
    uint64_t payload_bytes;
} wire_section_tally;

/* Bytes of v as a varint (1..10). */
static inline size_t wire_varint_len(uint64_t v)
{
    unsigned bits = 64u - (unsigned)__builtin_clzll(v | 1);   /* 1..64 */
    return (bits + 6) / 7;
}

/* Counts a record of len payload bytes at section-relative seq rel into its key group's tally. */
static inline void wire_tally_add(wire_kg_tally *t, uint64_t rel, size_t len)
{
    uint64_t gap = rel - t->next;
    t->bytes += wire_varint_len(gap) + wire_varint_len(len) + len;
    t->next = rel + 1;
    t->count++;
}

/* One writer's contiguous records [seq_first, seq_first + nrec) for one section. */
typedef struct {
    const char *writer_id;
    uint64_t seq_first;
    uint64_t nrec;
    const wire_span *spans;   /* the records in pending-record format, in seq order */
    size_t nspans;
    /* Optional: the records' tally, as the writer counted them at append. With it the encoder
     * copies the records in one pass (and still checks them against it: a tally that does not
     * match the records is -EINVAL); without it (NULL) it counts them in a pass of its own. */
    const wire_section_tally *tally;
} wire_section_in;

typedef struct {
    const char *run_id;       /* the writing storage's run id (also in the file name) */
    uint64_t segment_no;      /* per run, increasing */
    uint64_t created_ms;      /* wall clock of the writer, for gc's min-age */
    int compression;          /* WIRE_COMP_*: compression of each section */
    int compression_level;    /* 0 = codec default */
    /* Optional allocator of the segment buffer (NULL = malloc/free). A pool of reused buffers
     * saves the page fault that every fresh 4 KiB page costs (slow under virtualization; it
     * can cost more than encoding). alloc(ctx, len) returns at least len bytes or NULL; the
     * encoder calls it once per segment, and release(ctx, p) (from wire_segment_out_free, or
     * on failure) gives the buffer back. len may exceed the segment by the codec bounds (a
     * compressed section's scratch copy is the encoder's own). Called on the encoding thread. */
    void *(*alloc)(void *ctx, size_t len);
    void (*release)(void *ctx, void *p);
    void *alloc_ctx;
    /* Encryption at rest: NULL = a plain segment. Else every section is sealed with
     * AES-256-GCM under a data key derived from seal_data_key (WIRE_KEY_LEN fresh random
     * bytes, never used for another segment), which is stored wrapped with seal_key. */
    const wire_key *seal_key;
    const uint8_t *seal_data_key;
    /* Optional padding (FORMAT.md, "Padding"), for small segments written over a file that
     * already holds a segment: overwriting the same number of bytes changes no file size, so
     * its fdatasync writes no inode. With pad_align (a power of two, at most
     * WIRE_PAD_ALIGN_MAX; 0 = no padding) a segment whose natural length L is at most
     * pad_limit gets a footer field of zeros that makes it exactly pad_to bytes when
     * L <= pad_to <= L + 2 x pad_align, else L rounded up to a multiple of pad_align (a further
     * pad_align on when no field reaches that length: 1, 2 or 130 bytes short). A segment
     * longer than pad_limit, or already aligned, stays at L. */
    uint64_t pad_to;
    uint32_t pad_align;
    uint32_t pad_limit;
} wire_seg_opts;

#define WIRE_PAD_ALIGN_MAX 8192u

/* Where one section landed, for handles. */
typedef struct {
    uint64_t offset;          /* of the section's stored bytes in the segment */
    uint64_t stored_len;
    uint64_t seq_first, seq_end;   /* seq_end exclusive */
    uint64_t data_bytes;      /* payload bytes of its records (what a handle's size counts) */
    uint32_t crc;             /* CRC32C of the stored bytes */
    uint32_t kg_first, kg_last;    /* key groups present (data records); kg_first > kg_last: none */
} wire_section_loc;

typedef struct {
    uint8_t *buf;             /* the whole segment (the caller frees with wire_segment_out_free) */
    size_t len;
    size_t cap;               /* bytes allocated at buf (>= len) */
    void (*release)(void *ctx, void *p);   /* from wire_seg_opts; NULL = free */
    void *release_ctx;
    uint64_t footer_offset;
    uint32_t footer_len, footer_crc;
    wire_section_loc *secs;   /* one per input section, in input order */
    size_t nsecs;
} wire_segment_out;

/* Encodes one segment holding the given sections (at least one; each with nrec >= 1 and a
 * non-empty writer id), in the given order. Records go into key-group runs by a counting sort;
 * a section is stored compressed only when that makes it smaller. Returns 0, -EINVAL (bad
 * opts, a torn record header, a record count that does not match the spans), -ENOMEM. On
 * success *out owns the buffer (wire_segment_out_free). The inputs are only read. */
int wire_segment_encode(const wire_seg_opts *o, const wire_section_in *secs, size_t nsecs,
                        wire_segment_out *out, wire_err *err);
void wire_segment_out_free(wire_segment_out *out);

/* A segment built one section at a time, into a buffer the caller gives (the pipeline encodes
 * each section as it joins the open batch, so only the footer is left when the batch closes).
 * The result is the segment wire_segment_encode makes of the same sections with the same
 * options, but for padding room and the buffer's size.
 *   begin   writes the header into buf (cap bytes; o->alloc is not used, o->release is what
 *           the finished wire_segment_out frees buf with, NULL = free). o's strings and keys
 *           must stay valid until finish or abort; the data key is read here only.
 *   add     writes section s (its records are read only during the call; the writer id is
 *           copied). 0; -ENOSPC when it does not fit beside the footer so far and the trailer
 *           (the builder is unchanged); -EINVAL or -ENOMEM as wire_segment_encode (the section
 *           is not added, the builder still holds those before it).
 *   bound   the segment's length if it were finished now, at most (the footer sized).
 *   finish  writes the footer and trailer: *out holds the segment in buf. At least one
 *           section. The builder is freed either way; on failure buf is still the caller's.
 *   abort   frees the builder, not buf.
 * One thread at a time. */
typedef struct wire_seg_builder wire_seg_builder;
int wire_seg_begin(const wire_seg_opts *o, uint8_t *buf, size_t cap, wire_seg_builder **out, wire_err *err);
int wire_seg_add(wire_seg_builder *b, const wire_section_in *s, wire_err *err);
size_t wire_seg_sections(const wire_seg_builder *b);
/* The segment's first bytes that are final already (the header and the sections so far):
 * what a digest of the segment may take in now. */
uint64_t wire_seg_written(const wire_seg_builder *b);
uint64_t wire_seg_bound(const wire_seg_builder *b);
int wire_seg_finish(wire_seg_builder *b, wire_segment_out *out, wire_err *err);
void wire_seg_abort(wire_seg_builder *b);

/* ---- segment decoding ---------------------------------------------------------------------- */

/* Fixed sizes so a reader can fetch the trailer (and, after it, the footer) by range. */
#define WIRE_SEG_HEADER_LEN   32u
#define WIRE_SEG_TRAILER_LEN  32u

/* From the last WIRE_SEG_TRAILER_LEN bytes of an object of object_len bytes: where its
 * footer is. DSTL_ECORRUPT when the trailer is torn, of another version or points outside. */
int wire_trailer_parse(const void *trailer, size_t len, uint64_t object_len,
                       uint64_t *footer_offset, uint32_t *footer_len, uint32_t *footer_crc,
                       wire_err *err);

typedef struct wire_index wire_index;

typedef struct {
    uint32_t key_group;
    int is_meta;
    uint64_t offset;          /* within the section's raw (uncompressed, decrypted) body */
    uint64_t len;
    uint64_t count;
    uint32_t crc;             /* CRC32C of the run's raw bytes */
    uint8_t tag[16];          /* its AES-256-GCM tag (sealed, uncompressed sections) */
} wire_kg_run;

typedef struct wire_seal wire_seal;   /* a sealed segment's data key, owned by its index */

typedef struct {
    const char *writer_id;
    uint64_t seq_first, seq_end, nrec, data_bytes;
    uint32_t kg_first, kg_last;
    uint64_t offset, stored_len, raw_len;
    uint32_t crc;
    int compression;
    const wire_kg_run *runs;  /* sorted: data runs by key group, then the meta run */
    size_t nruns;
    uint32_t index;           /* its position in the footer (part of what a seal binds) */
    const wire_seal *seal;    /* NULL: plain; else the index's data key (valid while it lives) */
    uint8_t tag[16];          /* AES-256-GCM tag of a sealed compressed section's stored bytes */
} wire_section_info;

/* Parses and validates a footer (CRC, protobuf, every offset inside object_len, runs inside
 * their section, counts plausible). The index is independent of the footer bytes. */
int wire_index_parse(const void *footer, size_t len, uint32_t footer_crc, uint64_t footer_offset,
                     uint64_t object_len, wire_index **out, wire_err *err);
/* The same for a segment that may be encrypted: its key is looked up by id in keys (NULL =
 * no key file). DSTL_ECRYPTO naming the key id when keys lack it or the key does not unwrap
 * the segment's data key, when the key commitment or the footer's tag does not match, and
 * when the segment is encrypted and keys is NULL. Plain segments parse as without keys. */
int wire_index_parse_keyed(const void *footer, size_t len, uint32_t footer_crc, uint64_t footer_offset,
                           uint64_t object_len, const wire_keyring *keys, wire_index **out, wire_err *err);
/* Frees the index, wiping its data key. */
void wire_index_free(wire_index *ix);
/* The key id of an encrypted segment's index, NULL for a plain one. */
const char *wire_index_key_id(const wire_index *ix);
/* Without any key: whether footer bytes are an encrypted segment's (1, and its key id into
 * id), a plain one's (0), or too short to tell (DSTL_ECORRUPT). */
int wire_footer_key_id(const void *footer, size_t len, char id[WIRE_KEY_ID_MAX + 1]);
const char *wire_index_run_id(const wire_index *ix);
uint64_t wire_index_segment_no(const wire_index *ix);
uint64_t wire_index_created_ms(const wire_index *ix);
size_t wire_index_nsections(const wire_index *ix);
const wire_section_info *wire_index_section(const wire_index *ix, size_t i);

/* Opens a whole segment held in memory: header, trailer, footer (not the sections' bytes:
 * those are checked by wire_iter_open). The index does not point into buf. */
int wire_segment_open(const void *buf, size_t len, wire_index **out, wire_err *err);
int wire_segment_open_keyed(const void *buf, size_t len, const wire_keyring *keys, wire_index **out,
                            wire_err *err);

/* ---- record iteration ----------------------------------------------------------------------
 * Iterates one section's records with seq in [seq_from, seq_to), keeping data records whose
 * key group lies in [kg_first, kg_last] and every meta record, in seq order (merged across
 * key-group runs). `bytes` holds the section's stored bytes [base, base + len) relative to
 * the section start: the whole section (base 0, len stored_len) always works; for an
 * uncompressed, unencrypted section it may instead cover just the runs the range needs.
 * Every byte is CRC-checked before a record from it is returned. A sealed section (sec->seal
 * set) is authenticated and decrypted at open: each needed run's tag (uncompressed) or the
 * section's (compressed) is checked before its bytes are parsed; a failed tag is DSTL_ECRYPTO
 * naming the section and offset, and no plaintext of it is kept.
 *
 * wire_iter_open checks the CRCs (and decompresses) up front; a malformed record is reported
 * by open or by a later next, as DSTL_ECORRUPT with the offset, after which next returns 0.
 * -EINVAL when bytes are not the whole section of a compressed section, or miss a run the
 * range needs. What the iterator needs of sec is copied (the index may be freed); bytes stay until
 * wire_iter_free. Memory: a cursor per run and a window of at most 4096 records. */
typedef struct wire_iter wire_iter;

typedef struct {
    uint64_t seq;
    uint32_t key_group;
    int is_meta;
    const void *data;         /* valid until the next wire_iter_next or wire_iter_free */
    size_t len;
} wire_record;

int wire_iter_open(const wire_section_info *sec, const void *bytes, uint64_t base, size_t len,
                   uint64_t seq_from, uint64_t seq_to, uint32_t kg_first, uint32_t kg_last,
                   wire_iter **out, wire_err *err);
int wire_iter_next(wire_iter *it, wire_record *rec, wire_err *err); /* 1 record, 0 end, <0 */
void wire_iter_free(wire_iter *it);

/* The byte range [*off, *off + *len) of the stored section that an iterator over
 * [kg_first, kg_last] needs (the whole section when compressed; an encrypted uncompressed
 * section is sealed run by run, so its runs can be fetched alone). */
void wire_section_range(const wire_section_info *sec, uint32_t kg_first, uint32_t kg_last,
                        uint64_t *off, uint64_t *len);

/* The same need as up to two disjoint ranges (the selected data runs, and the meta run that
 * always comes last), so a reader of a few key groups of an uncompressed section need not
 * fetch the runs in between: it may fetch just these ranges into a buffer laid out as the
 * covering range of wire_section_range; the iterator reads (and CRC-checks) only the runs it
 * needs and never touches the gap. Returns the number of ranges (0, 1 or 2), in offset order;
 * one range [0, stored_len) when compressed. */
int wire_section_ranges(const wire_section_info *sec, uint32_t kg_first, uint32_t kg_last,
                        uint64_t off[2], uint64_t len[2]);

/* ---- handles --------------------------------------------------------------------------------
 * A handle names the segments and the section pieces that hold one writer's [from, to). */
typedef struct {
    char *name;               /* segment object name, relative to the local dir / remote prefix */
    uint64_t object_len;
    uint64_t footer_offset;
    uint32_t footer_len, footer_crc;
    int encrypted;            /* sealed: a plain footer there is refused (downgrade) */
} wire_seg_ref;

typedef struct {
    uint32_t seg;             /* index into segs */
    uint32_t section;         /* index of the section in its segment's footer */
    uint64_t offset, stored_len;
    uint32_t crc;
    uint64_t seq_first, seq_end;   /* the piece's records: a sub-range of the section's */
    uint64_t data_bytes;
    uint32_t kg_first, kg_last;
} wire_piece;

typedef struct {
    char *storage_id;         /* run id of the storage that wrote it */
    char *writer_id;
    char *remote_uri;         /* "" when local only */
    uint64_t checkpoint_id, from_seq, to_seq, size;
    uint64_t writer_incarnation;  /* the writer's opening in its storage run; 0 = not recorded */
    wire_seg_ref *segs;
    size_t nsegs;
    wire_piece *pieces;       /* in seq order, contiguous from from_seq to to_seq */
    size_t npieces;
    int packed;               /* one allocation: the struct, its arrays and strings (a
                               * storage's own handles); wire_handle_free frees it whole */
} wire_handle;

/* Bytes: magic, version, protobuf, CRC32C (FORMAT.md). malloc'd into *buf. */
int wire_handle_encode(const wire_handle *h, void **buf, size_t *len, wire_err *err);
/* Validates fully: magic, version, CRC, protobuf, pieces contiguous over [from, to) and
 * inside their segments, indices in range. */
int wire_handle_decode(const void *buf, size_t len, wire_handle **out, wire_err *err);
wire_handle *wire_handle_dup(const wire_handle *h);
void wire_handle_free(wire_handle *h);

/* ---- canonical state changes (FLIP-41's unified format idea) -------------------------------
 * A backend-neutral encoding of one state change that any backend can produce and
 * `dstl cat` renders as JSON. Pointers in a decoded change point into the input bytes (no
 * allocation); an absent state name decodes as NULL, absent bytes fields as a non-NULL
 * pointer with length 0. The bytes are protobuf's for dstl.proto's StateChange. */
enum {
    WIRE_SC_PUT = 1, WIRE_SC_DELETE = 2, WIRE_SC_MERGE = 3,
    WIRE_SC_ADD = 4, WIRE_SC_CLEAR = 5, WIRE_SC_METADATA = 6
};

typedef struct {
    int op;
    uint32_t state_id;
    const char *state_name;   /* may be NULL; not NUL-terminated when decoded: see state_name_len */
    size_t state_name_len;
    const void *key;       size_t key_len;
    const void *ns;        size_t ns_len;       /* namespace */
    const void *user_key;  size_t user_key_len; /* map key for map state, else empty */
    const void *value;     size_t value_len;
} wire_state_change;

size_t wire_sc_encoded_size(const wire_state_change *sc);
/* Encodes into buf (cap >= wire_sc_encoded_size); returns the length or -EINVAL. */
int wire_sc_encode(const wire_state_change *sc, void *buf, size_t cap);
int wire_sc_decode(const void *buf, size_t len, wire_state_change *sc, wire_err *err);

#endif /* DSTL_WIRE_H */
