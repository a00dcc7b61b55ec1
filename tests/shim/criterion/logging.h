/*
 * <criterion/logging.h> of the Criterion-compatible shim: Criterion's criterion.h already declares
 * everything this header would, so a test that includes it gets the shim's one (and never
 * mixes in the real Criterion's, which would clash). See criterion.h here.
 */
#include <criterion/criterion.h>
