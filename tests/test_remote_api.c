/*
 * tests/test_remote_api.c — the API contract cases of tests/api_cases.c (suite dstl_api) again,
 * with dstl.durability: remote against the S3 server tests/run.sh starts: every storage the
 * cases open also uploads its segments to a fresh bucket, persists complete when the object
 * is complete, and segment counts are checked in the bucket as well as on disk.
 */
#include "tests/api_cases.h"
#include "tests/helpers_dstl.h"

void api_storage_begin(void)
{
    t_remote_enable();
    t_remote_begin("api");
}

void api_storage_end(void) { t_remote_end(); }
