/*
 * tests/helpers.h — small helpers shared by the Criterion tests (t_ prefix).
 */
#ifndef DSTL_TESTS_HELPERS_H
#define DSTL_TESTS_HELPERS_H

#include <stddef.h>
#include <stdint.h>

/* A fresh directory under $TMPDIR (or /tmp); the caller removes it with t_rm_rf. */
char *t_mkdtemp(const char *tag);
/* Removes a directory tree; ignores what is already gone. */
void t_rm_rf(const char *path);
/* Writes len bytes to path (creating or truncating); 0 or -errno. */
int t_write_file(const char *path, const void *buf, size_t len);
/* Reads a whole file into a malloc'd buffer; NULL on failure. */
void *t_read_file(const char *path, size_t *len);
/* Reads a whole file as a NUL-terminated string (malloc'd); NULL on failure. */
char *t_read_text(const char *path);
/* Deterministic pseudo-random numbers (xorshift64*), for reproducible test data. */
uint64_t t_rand(uint64_t *state);
/* Fills buf with bytes derived from seed (the t_rand stream). Kept for the wire tests, whose
 * golden files (tests/data/wire_segment_v1.hex) pin these bytes; record payloads everywhere
 * else come from tests/payload.h. */
void t_fill(void *buf, size_t len, uint64_t seed);
/* Whether a thread of this process is named name (/proc/self/task/N/comm). */
int t_thread_named(const char *name);
/* Directory of the repository's tests/data (DSTL_TEST_DATA, else "tests/data"). */
const char *t_data_dir(void);

#endif
