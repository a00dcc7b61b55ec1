/*
 * The API-semantics suite of the local pipeline (tests/test_dstl_api.c), run again with
 * dstl.durability: remote against the S3 server tests/run.sh starts: every storage the
 * suite opens also uploads its segments to a fresh bucket, persists complete when the object
 * is complete, and segment counts are checked in the bucket as well as on disk.
 */
#include "tests/helpers_dstl.h"

__attribute__((constructor)) static void remote_mode(void) { t_remote_enable(); }

#include "test_dstl_api.c"
