/*
 * tests/helpers_dstl.h — helpers for tests of the storage API (t_ prefix). Records of the
 * helpers are PAYLOAD_RANDOM payloads (tests/payload.h) of stream `wid`, index seq.
 * Threads: a test's own thread (Criterion asserts).
 */
#ifndef DSTL_TESTS_HELPERS_DSTL_H
#define DSTL_TESTS_HELPERS_DSTL_H

#include <stddef.h>
#include <stdint.h>

#include "dstl.h"

struct t_remote;

/* Opens a storage on dir with local durability; then key/value pairs, NULL-terminated,
 * override the config. Asserts on failure. */
dstl_storage *t_storage_open(const char *dir, ...);
dstl_config *t_config(const char *dir, ...);

/* Appends n records (data in key group kg_first + seq % nkg; payload_make(PAYLOAD_RANDOM, wid,
 * seq, max_len)) to w; returns next seq. */
uint64_t t_append_n(dstl_writer *w, uint32_t wid, uint64_t n, uint32_t kg_first, uint32_t nkg, size_t max_len);
/* persist + wait + result; asserts success. */
dstl_handle *t_persist(dstl_writer *w, uint64_t from, uint64_t cp);
/* persist + wait (asserted, 20 s); returns the persist's or the future's result, the handle
 * in *out on success: for tests that expect a persist to fail. */
int t_persist_result(dstl_writer *w, uint64_t from, uint64_t cp, dstl_handle **out);
/* Reads h with [kgf, kgl] and checks every record against its payload (stream wid) and that the
 * seqs are exactly those in [from, to) whose key group (kg_first + seq % nkg) is in range.
 * Returns the number of records read, or a negative error. */
long t_verify(dstl_storage *s, const dstl_handle *h, uint32_t wid, uint32_t kg_first, uint32_t nkg,
              uint32_t kgf, uint32_t kgl, size_t max_len);
/* Number of *.seg files in dir that hold the segment their name says (a reserved name is empty
 * or holds a recycled, deleted segment's bytes: not counted). In remote
 * mode it also expects (waiting up to 10 s for deletes in flight) the same number of
 * segment objects under the fixture's prefix, and no incomplete multipart upload. */
size_t t_count_segments(const char *dir);

/* Remote mode, for a binary that runs cases written for local durability again with remote
 * durability (test_remote_api, test_remote_localfail): while f is set (from a .init, after
 * t_remote_init), every t_config / t_storage_open also gets t_remote_config's settings
 * (f's URI, durability remote) and t_count_segments checks f's prefix too. NULL (from .fini,
 * before t_remote_fini) ends it. */
void t_config_remote(const struct t_remote *f);

/* For a test that needs the I/O engine `name` ("io_uring", "libaio", "psync"), which the
 * kernel may lack or forbid (an old kernel, a seccomp profile, io_uring_disabled, a full
 * fs.aio-max-nr): opens a storage on it in a scratch dir; when that fails while the same
 * storage on psync opens, the test is SKIPPED (cr_skip_test) with the engine, the errno and
 * the library's detail. Any other failure fails the test. */
void t_engine_or_skip(const char *name);

#endif
