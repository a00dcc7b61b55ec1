/*
 * Crash: a child persisting heavily is killed with SIGKILL at random moments; afterwards
 * every handle it reported complete reads back exactly, and gc with those handles as the
 * live set leaves exactly the segments they reference: `dstl gc` sweeps, and
 * tests/tools/crash_child.c runs the child and checks before and after. 30 trials in `make test`, 300 in `make soak` (DSTL_SOAK=1); the
 * engines take turns.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/helpers.h"
#include "tests/helpers_dstl.h"

static const char *tool(void)
{
    static char path[4096];
    const char *d = getenv("DSTL_TEST_TOOLS");
    snprintf(path, sizeof path, "%s/crash_child", d && *d ? d : "build/tools");
    return path;
}

static const char *bin(void)
{
    const char *b = getenv("DSTL_TEST_BIN");
    return b && *b ? b : "build/dstl";
}

static pid_t spawn(char *const argv[])
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static int wait_exit(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0) {
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

Test(dstl_crash, sigkill_at_random_moments_loses_nothing_acknowledged, .timeout = 900)
{
    static const char *engines[] = {"io_uring", "libaio", "psync"};
    for (size_t k = 0; k < sizeof engines / sizeof engines[0]; k++) t_engine_or_skip(engines[k]);
    int trials = getenv("DSTL_SOAK") ? 300 : 30;
    cr_assert_eq(access(tool(), X_OK), 0, "the crash tool %s is missing (build it with make)", tool());
    uint64_t rnd = (uint64_t)time(NULL) ^ (uint64_t)getpid();
    cr_log_info("crash trials: %d, seed %llu", trials, (unsigned long long)rnd);
    for (int t = 0; t < trials; t++) {
        char *dir = t_mkdtemp("crash");
        char data[4200], handles[4200], seed[32];
        snprintf(data, sizeof data, "%s/data", dir);
        snprintf(handles, sizeof handles, "%s/handles", dir);
        cr_assert_eq(mkdir(handles, 0755), 0);
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)t_rand(&rnd));
        char *run[] = {(char *)tool(), "run", data, handles, (char *)engines[t % 3], seed, NULL};
        pid_t pid = spawn(run);
        /* 10 ms to 400 ms: some kills land before the first checkpoint, most amid many */
        usleep((useconds_t)(10000 + t_rand(&rnd) % 390000));
        kill(pid, SIGKILL);
        int st = wait_exit(pid);
        cr_assert_eq(st, 128 + SIGKILL, "trial %d: the child ended on its own (%d) before the kill", t, st);
        char *ver[] = {(char *)tool(), "verify", data, handles, NULL};
        int rc = wait_exit(spawn(ver));
        cr_assert_eq(rc, 0, "trial %d (engine %s, seed %s): verification failed; data kept in %s", t,
                     engines[t % 3], seed, dir);
        /* the operator's sweep: `dstl gc DIR --live <handle files>` */
        char cmd[16384];
        int n = snprintf(cmd, sizeof cmd, "'%s' gc '%s' --min-age 0", bin(), data), nlive = 0;
        for (int w = 0; w < 4; w++) {
            char hf[4300];
            snprintf(hf, sizeof hf, "%s/w%d.handle", handles, w);
            if (access(hf, R_OK) == 0)
                n += snprintf(cmd + n, sizeof cmd - (size_t)n, "%s '%s'", nlive++ ? "" : " --live", hf);
        }
        /* killed before any checkpoint: no handle, and gc must be told so explicitly */
        if (!nlive) n += snprintf(cmd + n, sizeof cmd - (size_t)n, " --no-live-handles");
        snprintf(cmd + n, sizeof cmd - (size_t)n, " > '%s/gc.out' 2>&1", dir);
        cr_assert_eq(system(cmd), 0, "trial %d: %s failed (see %s/gc.out)", t, cmd, dir);
        char *exact[] = {(char *)tool(), "exact", data, handles, NULL};
        rc = wait_exit(spawn(exact));
        cr_assert_eq(rc, 0, "trial %d: after dstl gc the dir is not exactly the live set; data kept in %s", t, dir);
        t_rm_rf(dir);
        free(dir);
    }
}
