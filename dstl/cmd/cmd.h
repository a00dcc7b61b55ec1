/*
 * dstl/cmd/cmd.h — the `dstl` command's subcommands (the files in dstl/cmd/; not part of the library).
 */
#ifndef DSTL_CMD_H
#define DSTL_CMD_H

#include <stdint.h>

#include "dstl.h"

/* Global options, parsed by cmd.c before the subcommand: --config FILE, --set key=value. */
typedef struct {
    const char *config_file;
    const char *sets[64];
    int nsets;
} cmd_globals;

/* Builds a config from the globals (defaults, file, environment, --set); prints the error
 * and returns NULL on failure. local_dir, when not NULL, overrides dstl.local.dir. */
dstl_config *cmd_config(const cmd_globals *g, const char *local_dir);

/* Reads a handle file; prints the error and returns NULL on failure. */
dstl_handle *cmd_read_handle(const char *path);
/* Writes a handle file (write, fsync, rename); 0 or -errno. */
int cmd_write_handle(const char *path, const dstl_handle *h);

int cmd_demo(const cmd_globals *g, int argc, char **argv);
int cmd_cat(const cmd_globals *g, int argc, char **argv);
int cmd_ls(const cmd_globals *g, int argc, char **argv);
int cmd_verify(const cmd_globals *g, int argc, char **argv);
int cmd_gc(const cmd_globals *g, int argc, char **argv);

/* The demo's deterministic workload, shared with the crash harness: record `seq` of writer
 * `wid` as a canonical state change. Writes into buf (cap >= CMD_RECORD_MAX); returns the
 * length and sets *key_group (in [0, nkg)). */
#define CMD_RECORD_MAX 8192
size_t cmd_workload_record(uint32_t wid, uint64_t seq, uint32_t nkg, uint8_t *buf, uint32_t *key_group);

#endif
