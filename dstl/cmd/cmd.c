/*
 * dstl/cmd/cmd.c — the `dstl` command: global options and dispatch (the helpers every
 * subcommand shares: common.c).
 *
 *   dstl [--config FILE] [--set key=value]... COMMAND [ARGS]
 *   dstl --help | --version | help [COMMAND] | COMMAND --help|-h
 * Help texts: help.c. Every form of help and the version go to stdout with exit status 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dstl/cmd/cmd.h"
#include "dstl/cmd/common.h"
#include "dstl/tools.h"

static const struct {
    const char *name;
    int (*run)(const cmd_globals *g, int argc, char **argv);
} commands[] = {
    {"demo", cmd_demo}, {"cat", cmd_cat}, {"ls", cmd_ls}, {"verify", cmd_verify},
    {"gc", cmd_gc}, {"stats", cmd_stats}, {"config", cmd_show_config},
};

int main(int argc, char **argv)
{
    cmd_globals g = {0};
    /* --config and --set are taken wherever they stand (`dstl demo --config F` works as
     * `dstl --config F demo`); everything else keeps its order. */
    int n = 1;
    for (int k = 1; k < argc; k++) {
        if (!strcmp(argv[k], "--config") && k + 1 < argc) {
            g.config_file = argv[++k];
        } else if (!strcmp(argv[k], "--set") && k + 1 < argc) {
            if (g.nsets == (int)(sizeof g.sets / sizeof g.sets[0])) {
                fprintf(stderr, "dstl: too many --set options\n");
                return 2;
            }
            g.sets[g.nsets++] = argv[++k];
        } else {
            argv[n++] = argv[k];
        }
    }
    argc = n;
    if (argc < 2) {
        cmd_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
        cmd_usage(stdout);
        return 0;
    }
    int asks_help = argc > 2 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"));
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V") || !strcmp(cmd, "version")) {
        if (asks_help) return cmd_help("version", stdout) == 0 ? 0 : 2;
        printf("dstl %s\n", dstl_version());
        return 0;
    }
    if (!strcmp(cmd, "help")) {
        if (asks_help) return cmd_help("help", stdout) == 0 ? 0 : 2;
        if (argc < 3) {
            cmd_usage(stdout);
            return 0;
        }
        if (cmd_help(argv[2], stdout) == 0) return 0;
        fprintf(stderr, "dstl help: unknown command '%s'\n", argv[2]);
        cmd_usage(stderr);
        return 2;
    }
    if (cmd[0] == '-') {
        fprintf(stderr, "dstl: unknown option %s\n", cmd);
        cmd_usage(stderr);
        return 2;
    }
    for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++) {
        if (strcmp(cmd, commands[k].name) != 0) continue;
        /* COMMAND --help anywhere before a "--" (no subcommand takes a value starting with
         * "-h" or "--help") */
        for (int a = 2; a < argc && strcmp(argv[a], "--"); a++)
            if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) return cmd_help(cmd, stdout) == 0 ? 0 : 2;
        cmd_check_env();
        return commands[k].run(&g, argc - 1, argv + 1);
    }
    fprintf(stderr, "dstl: unknown command '%s'\n", cmd);
    cmd_usage(stderr);
    return 2;
}
