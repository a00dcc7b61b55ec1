/*
 * dstl/cmd/common.h — what the `dstl` command's subcommands share (common.c).
 */
#ifndef DSTL_CMD_COMMON_H
#define DSTL_CMD_COMMON_H

#include "dstl.h"

/* Global options, parsed by cmd.c before the subcommand: --config FILE, --set key=value. */
typedef struct {
    const char *config_file;
    const char *sets[64];
    int nsets;
} cmd_globals;

/* Warns (stderr) about each DSTL_* environment variable that looks like a key's but is none:
 * a misspelt one is otherwise silent. main calls it once before a command runs. */
void cmd_check_env(void);

/* Builds a config from the globals (defaults, file, environment, --set); prints the error
 * and returns NULL on failure. local_dir, when not NULL, overrides dstl.local.dir. */
dstl_config *cmd_config(const cmd_globals *g, const char *local_dir);

/* dstl_storage_open; prints "dstl CMD: <detail>" for a failure (-1) and for the warning of
 * a success (a remote that did not answer at open: include/dstl.h). */
int cmd_open_storage(const dstl_config *c, const char *cmd, dstl_storage **out);

/* Reads a handle file; prints the error and returns NULL on failure. */
dstl_handle *cmd_read_handle(const char *path);
/* Writes a handle file (write, fsync, rename); 0 or -errno. */
int cmd_write_handle(const char *path, const dstl_handle *h);

#endif
