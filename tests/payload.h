/*
 * tests/payload.h — the one generator of deterministic record payloads, shared by the tests,
 * the test tools (tests/tools/crash_child.c) and the benchmarks (perf/bench_*.c).
 *
 * A payload is named by a stream seed (a writer id, a benchmark thread, a test's constant)
 * and an index in that stream (usually the record's seq). Its length and bytes are pure
 * functions of (seed, index), so a writer and a reader that agree on them agree on every
 * byte: a reader checks a record it got back with payload_check, without keeping a copy of
 * what was written, and a second process (a crash test's verifier) can check what the first
 * wrote.
 *
 * Two kinds, for the two kinds of state a backend logs:
 *   PAYLOAD_RANDOM  every byte pseudo-random: incompressible (serialized, already compressed
 *                   or hashed values); one 64-bit mix per 8 bytes.
 *   PAYLOAD_FILL    an 8-byte stamp (a mix of seed and index), then one byte (from the seed
 *                   alone) repeated: compresses about as well as a memset buffer, and records
 *                   of one stream differ only in their stamp; costs a memset.
 * The bytes at an offset do not depend on the length asked for: a shorter payload is a prefix
 * of a longer one of the same (kind, seed, index).
 *
 * No allocation, no global state, no I/O: thread-safe, and cheap enough to make records in a
 * loop (the benchmarks still make theirs before the timed part).
 */
#ifndef DSTL_TESTS_PAYLOAD_H
#define DSTL_TESTS_PAYLOAD_H

#include <stddef.h>
#include <stdint.h>

typedef enum payload_kind {
    PAYLOAD_RANDOM,
    PAYLOAD_FILL,
} payload_kind;

/* The length of record (seed, index) of a stream whose records are at most max_len bytes:
 * spread over [0, max_len], 0 and max_len included. */
size_t payload_len(uint64_t seed, uint64_t index, size_t max_len);

/* Writes the first len bytes of record (seed, index) of kind to buf. */
void payload_fill(payload_kind kind, uint64_t seed, uint64_t index, void *buf, size_t len);

/* payload_len(seed, index, max_len) bytes of record (seed, index) to buf (which holds at
 * least max_len bytes); returns that length. */
size_t payload_make(payload_kind kind, uint64_t seed, uint64_t index, size_t max_len, void *buf);

/* Checks buf[0, len) against the first len bytes of record (seed, index) of kind. Returns
 * len when every byte matches, else the offset of the first byte that differs. */
size_t payload_check(payload_kind kind, uint64_t seed, uint64_t index, const void *buf, size_t len);

#endif
