/*
 * tests/helpers_cmd.h — helpers for tests that run the `dstl` command (t_cmd_ prefix): the
 * binary, running a shell command and capturing its output, and snapshots of a directory
 * tree to prove that something changed nothing.
 * Threads: a test's own thread (t_cmd_tree keeps its walk state in a static). No Criterion.
 */
#ifndef DSTL_TESTS_HELPERS_CMD_H
#define DSTL_TESTS_HELPERS_CMD_H

#include <stddef.h>

/* The `dstl` binary: DSTL_TEST_BIN (tests/run.sh sets it), else build/dstl. */
const char *t_cmd_bin(void);

/* Runs the shell command made from fmt with stdout and stderr into scratch_dir/out.txt;
 * returns that output as a malloc'd string ("" when none) and sets *status to the exit
 * status (255 when it did not exit normally). NULL when the output cannot be read. */
char *t_cmd_run(const char *scratch_dir, int *status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The number of (possibly overlapping) occurrences of needle in text. */
size_t t_cmd_count(const char *text, const char *needle);

/* Every entry under root (root itself included) as sorted lines "path type size mtime_ns"
 * (type: d, f, l, o): equal snapshots mean nothing was created, removed, resized or touched.
 * A malloc'd string, or NULL when root cannot be walked. */
char *t_cmd_tree(const char *root);

#endif
