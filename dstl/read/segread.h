/*
 * dstl/read/segread.h — the two steps that turn a segment's fetched bytes into verified data,
 * shared by the readers (reader.c) and the restore planner (restore.c):
 *
 *   segread_index   the footer and trailer bytes of one segment -> its index, checked against
 *                   what the handle recorded (footer offset, length, CRC; the object's length);
 *   segread_section a piece's section bytes (the runs its key groups need) -> a record
 *                   iterator that checks every run's CRC before a record leaves it.
 *
 * Every byte a reader returns passes through these two functions, whatever copy it came from
 * (local file, reader cache, a restore plan's fetch, a GET). They are where verification
 * lives, and where an authenticated format (encryption at rest) checks its tags and decrypts.
 * segread_ranges says which bytes of a section a key-group range needs: the reader asks for
 * exactly those, and the planner fetches exactly those.
 *
 * Pure: bytes in, index or iterator out; no I/O. Any thread; the objects are the caller's.
 */
#ifndef DSTL_SEGREAD_H
#define DSTL_SEGREAD_H

#include <stddef.h>
#include <stdint.h>

#include "wire/wire.h"

/* Two ranges of one section closer than this are read as one: a request costs a round trip
 * (about 1 ms on a LAN store, 20-50 ms on S3), worth far more than 64 KiB of transfer. */
#define SEGREAD_MERGE_GAP_BYTES (64u << 10)

/* Parses the index of segment g from bytes [buf_off, buf_off + len) of its object, which must
 * cover [g->footer_offset, g->object_len). An encrypted segment is opened with keys (the
 * storage's key file; NULL = none): its data key unwrapped, its commitment and footer tag
 * checked. Returns 0 and *out, or DSTL_ECORRUPT (torn trailer, a footer other than the
 * handle's, a footer that does not parse), DSTL_ECRYPTO (a key the file lacks, a wrong key, a
 * failed tag, or a plain segment where the handle names an encrypted one), -ENOMEM, with the
 * detail in msg ("segment WHERE: ..."). */
int segread_index(const wire_seg_ref *g, const wire_keyring *keys, const uint8_t *buf, uint64_t buf_off,
                  size_t len, const char *where, wire_index **out, char *msg, size_t cap);

/* The section of ix that piece p of writer writer_id names, checked against the piece
 * (offset, length, CRC, seqs, writer). Returns it, or NULL with the detail in msg. */
const wire_section_info *segread_piece_section(const wire_index *ix, const wire_piece *p, const char *writer_id,
                                               const char *where, char *msg, size_t cap);

/* The object ranges of section sec that a reader of [kg_first, kg_last] needs: at most two
 * (the selected data runs, the meta run), merged when closer than SEGREAD_MERGE_GAP_BYTES.
 * Returns the number (0, 1 or 2); off[] are object offsets. */
int segread_ranges(const wire_section_info *sec, uint32_t kg_first, uint32_t kg_last, uint64_t off[2],
                   uint64_t len[2]);

/* Opens the records of sec with seq in [seq_from, seq_to) and key groups [kg_first, kg_last]
 * from bytes laid out as object offsets [buf_off, buf_off + len) (the covering range of
 * segread_ranges, or the whole section). Returns 0 and *out, or the iterator's error with the
 * detail in msg ("segment WHERE section N (offset O): ..."). The bytes stay the caller's
 * until wire_iter_free. */
int segread_section(const wire_section_info *sec, uint32_t section_no, const uint8_t *buf, uint64_t buf_off,
                    size_t len, uint64_t seq_from, uint64_t seq_to, uint32_t kg_first, uint32_t kg_last,
                    const char *where, wire_iter **out, char *msg, size_t cap);

#endif
