/*
 * tests/test_dstl_api.c — the API contract cases of tests/api_cases.c (suite dstl_api) with
 * local durability: the storages the cases open are t_config's default (dstl.durability
 * local, no remote), so there is nothing to set up or tear down.
 */
#include "tests/api_cases.h"

void api_storage_begin(void) {}
void api_storage_end(void) {}
