/*
 * tests/test_remote_api.c — the API contract cases of tests/api_cases.c (suite dstl_api) again,
 * with dstl.durability: remote against the S3 server tests/run.sh starts: every storage the
 * cases open also uploads its segments under the test's own prefix of a fresh bucket (the
 * remote fixture), persists complete when the object is complete, and segment counts are
 * checked in the bucket as well as on disk (t_count_segments).
 */
#include "tests/api_cases.h"
#include "tests/helpers_dstl.h"
#include "tests/helpers_remote.h"

static t_remote fx;

void api_storage_begin(void)
{
    t_remote_init(&fx, "api");
    t_config_remote(&fx);
}

void api_storage_end(void)
{
    t_config_remote(NULL);
    t_remote_fini(&fx);
}
