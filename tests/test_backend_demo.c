/*
 * tests/test_backend_demo.c — `make run`'s program (backend/demo.c), short: both modes run,
 * the failed job's last checkpoint is restored and verified (same and rescaled parallelism),
 * the closing table has DSTL's rows, and nothing of the run stays in its local dir.
 */
#include <criterion/criterion.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers.h"
#include "tests/helpers_cmd.h"

Test(backend_demo, tells_the_story_and_verifies_the_restore, .timeout = 180)
{
    char *dir = t_mkdtemp("bdemo");
    char bin[1024];
    snprintf(bin, sizeof bin, "%s", t_cmd_bin());
    const char *bindir = dirname(bin);        /* the demo sits beside the dstl binary */
    int status;
    char *out = t_cmd_run(dir, &status, "cd '%s' && '%s/dstl-backend-demo' --seconds 3 --tasks 4", dir, bindir);
    cr_assert_not_null(out);
    cr_assert_eq(status, 0, "%s", out);
    cr_assert_eq(t_cmd_count(out, "every key equals the failed job's state"), 4, "%s", out);
    cr_assert(strstr(out, "onto 3 tasks (rescaled)"), "%s", out);
    cr_assert(strstr(out, "| DSTL here, changelog on"), "%s", out);
    cr_assert(strstr(out, "| DSTL here, full snapshots"), "%s", out);
    cr_assert(strstr(out, "| Flink, changelog on"), "%s", out);
    cr_assert(strstr(out, "demo: ok"), "%s", out);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "find '%s/dstl-data' -name '*.seg' | wc -l", dir);
    char *n = t_cmd_run(dir, &status, "%s", cmd);
    cr_assert(n && atoi(n) == 0, "segments left behind: %s", n ? n : "?");
    free(n);
    char *usage = t_cmd_run(dir, &status, "'%s/dstl-backend-demo' --tasks 0", bindir);
    cr_assert_not_null(usage);
    cr_assert_eq(status, 2, "a bad argument is a usage error: %s", usage);
    cr_assert(strstr(usage, "--tasks"), "names the argument: %s", usage);
    free(usage);
    free(out);
    t_rm_rf(dir);
}
