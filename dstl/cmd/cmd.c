/*
 * dstl/cmd/cmd.c — the `dstl` command: global options and dispatch (the helpers every
 * subcommand shares: common.c).
 *
 *   dstl [--config FILE] [--set key=value]... COMMAND [ARGS]
 *   commands: demo, cat, ls, verify, gc, config, version
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

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dstl [--config FILE] [--set key=value]... COMMAND [ARGS]\n"
            "\n"
            "  demo [--writers N] [--duration S] [--rate R] [--materialize-every S]\n"
            "                                                  run the embedded-default workload and verify recovery\n"
            "  cat HANDLE_FILE [--dir DIR] [--key-groups A-B] print a handle's records as JSON lines\n"
            "  ls DIR                                          list segments: writers, seq ranges, sizes, age\n"
            "  verify DIR                                      check every segment's checksums\n"
            "  gc DIR (--live HANDLE_FILE... | --no-live-handles) [--min-age D (default 1h)] [--dry-run]\n"
            "                                                  delete segments (local, remote) no live handle references\n"
            "  stats [--prometheus] [METRICS_FILE]             a running storage's metrics (dstl.metrics.file)\n"
            "  config                                          print every key with its value (secrets hidden)\n"
            "  version\n"
            "\n"
            "Configuration: defaults < --config file < DSTL_* environment < --set.\n");
}

/* `dstl stats`: the metrics a running storage writes to dstl.metrics.file (every second),
 * as Prometheus text (--prometheus) or as a short table of the samples. */
static int cmd_stats(const cmd_globals *g, int argc, char **argv)
{
    int prom = 0;
    const char *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--prometheus")) prom = 1;
        else if (!file && argv[i][0] != '-') file = argv[i];
        else {
            fprintf(stderr, "usage: dstl stats [--prometheus] [METRICS_FILE]\n");
            return 2;
        }
    }
    dstl_config *c = NULL;
    if (!file) {
        if (!(c = cmd_config(g, NULL))) return 1;
        file = dstl_config_get(c, "dstl.metrics.file");
        if (!*file) {
            fprintf(stderr, "dstl stats: no metrics file: give one, or set dstl.metrics.file (the running storage "
                            "writes it every second)\n");
            dstl_config_free(c);
            return 1;
        }
    }
    FILE *f = fopen(file, "r");
    if (!f) {
        fprintf(stderr, "dstl stats: %s: %s\n", file, strerror(errno));
        dstl_config_free(c);
        return 1;
    }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        if (prom) fputs(line, stdout);
        else if (line[0] != '#' && !strstr(line, "_bucket{")) {
            char name[256];
            double v;
            if (sscanf(line, "%255s %lf", name, &v) == 2) printf("%-40s %.0f\n", name, v);
        }
    }
    fclose(f);
    dstl_config_free(c);
    return 0;
}

static int cmd_show_config(const cmd_globals *g)
{
    dstl_config *c = cmd_config(g, NULL);
    if (!c) return 1;
    for (size_t i = 0; i < config_nkeys(); i++) {
        const config_key_info *k = config_key(i);
        const char *v = dstl_config_get(c, k->key);
        printf("%s: %s\n", k->key, k->secret && v && *v ? "<set, hidden>" : v);
    }
    dstl_config_free(c);
    return 0;
}

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
    int i = 1;
    if (i < argc && (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))) {
        usage(stdout);
        return 0;
    }
    if (i < argc && argv[i][0] == '-') {
        fprintf(stderr, "dstl: unknown option %s\n", argv[i]);
        usage(stderr);
        return 2;
    }
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[i];
    int sub_argc = argc - i;
    char **sub_argv = argv + i;
    if (!strcmp(cmd, "demo")) return cmd_demo(&g, sub_argc, sub_argv);
    if (!strcmp(cmd, "cat")) return cmd_cat(&g, sub_argc, sub_argv);
    if (!strcmp(cmd, "ls")) return cmd_ls(&g, sub_argc, sub_argv);
    if (!strcmp(cmd, "verify")) return cmd_verify(&g, sub_argc, sub_argv);
    if (!strcmp(cmd, "gc")) return cmd_gc(&g, sub_argc, sub_argv);
    if (!strcmp(cmd, "config")) return cmd_show_config(&g);
    if (!strcmp(cmd, "stats")) return cmd_stats(&g, sub_argc, sub_argv);
    if (!strcmp(cmd, "version")) {
        printf("dstl %s\n", dstl_version());
        return 0;
    }
    fprintf(stderr, "dstl: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
