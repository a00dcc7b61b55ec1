/*
 * dstl/seams.h — test seams of the storage (not part of the public API).
 * Tests and the crash harness open a storage with faults injected where production has none.
 */
#ifndef DSTL_SEAMS_H
#define DSTL_SEAMS_H

#include <stdint.h>

#include "dstl.h"

struct ioeng_fault;

typedef struct {
    struct ioeng_fault *fault;   /* wrap the local store's I/O engine in this fault script */
    /* Nonzero (a negative errno): every s3_upload the pipeline starts fails synchronously
     * with this code, as an out-of-memory start would. */
    int fail_upload_start;
    /* Added to the local wall clock where DSTL reads it (gc's "now" for local files), so a test
     * can show that remote ages are judged on the server's clock, never the local one. */
    int64_t wall_clock_skew_ms;
    /* Nonzero: a restore plan's fetch gate (fetch_gate) holds the other GETs back this long at
     * most, instead of 20 ms, so a test can see what opens it. */
    uint32_t restore_gate_ms;
    /* Nonzero: a segment encoded as its sections join (batch_encode_open) asks for a buffer of
     * this many bytes, so a test can fill one and see the batch split. */
    uint64_t build_cap_bytes;
    /* Nonzero n: the n-th section added to such a segment fails as out of memory would. */
    uint32_t fail_build_add;
    /* Nonzero: the MD5 ETag such a segment hashes for its upload (s3_upload_opts) is spoilt,
     * so a test can see that the upload's check used it. */
    int spoil_build_md5;
} storage_seams;

/* dstl_storage_open with seams (NULL: none, which is dstl_storage_open). */
int storage_open_with_seams(const dstl_config *c, const storage_seams *seams, dstl_storage **out);

/* This storage run's id (the prefix of its segment names). */
const char *storage_run_id(const dstl_storage *s);

#endif
