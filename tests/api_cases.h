/*
 * tests/api_cases.h — the seam between the API contract cases (tests/api_cases.c, suite
 * dstl_api) and the binaries that run them, so that one set of cases, under one set of names
 * (dstl_api::<case>), runs on each kind of storage:
 *   tests/test_dstl_api.c    local durability (t_config's default)
 *   tests/test_remote_api.c  remote durability against the S3 test server (t_config_remote)
 * Each binary defines both functions; the Makefile links api_cases.o into both binaries.
 */
#ifndef DSTL_TESTS_API_CASES_H
#define DSTL_TESTS_API_CASES_H

/* The suite's .init calls it after making its scratch dir: from then on, every t_config /
 * t_storage_open of the cases makes a storage of this binary's kind. May assert. */
void api_storage_begin(void);
/* The suite's .fini calls it before removing the scratch dir. Must accept a begin that
 * failed half-way. */
void api_storage_end(void);

#endif
