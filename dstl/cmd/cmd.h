/*
 * dstl/cmd/cmd.h — the `dstl` command's subcommands (dstl/cmd/; not part of the library).
 */
#ifndef DSTL_CMD_H
#define DSTL_CMD_H

#include <stdint.h>
#include <stdio.h>

#include "dstl.h"
#include "dstl/cmd/common.h"

/* The subcommands, called by cmd.c's main with the global options (common.h). */
int cmd_demo(const cmd_globals *g, int argc, char **argv);
int cmd_cat(const cmd_globals *g, int argc, char **argv);
int cmd_ls(const cmd_globals *g, int argc, char **argv);
int cmd_verify(const cmd_globals *g, int argc, char **argv);
int cmd_gc(const cmd_globals *g, int argc, char **argv);
int cmd_stats(const cmd_globals *g, int argc, char **argv);        /* cmd_stats.c */
int cmd_show_config(const cmd_globals *g, int argc, char **argv);  /* cmd_config.c */

/* help.c: the overview (every command, one line each), and one command's help with examples
 * (-1 for an unknown name). */
void cmd_usage(FILE *f);
int cmd_help(const char *name, FILE *f);

/* The demo's deterministic workload, shared with the crash harness: record `seq` of writer
 * `wid` as a canonical state change. Writes into buf (cap >= CMD_RECORD_MAX); returns the
 * length and sets *key_group (in [0, nkg)). */
#define CMD_RECORD_MAX 8192
size_t cmd_workload_record(uint32_t wid, uint64_t seq, uint32_t nkg, uint8_t *buf, uint32_t *key_group);

#endif
