/*
 * dstl/cmd/cmd.c — the `dstl` command: global options and dispatch, shared helpers.
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
#include "dstl/config.h"

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

/* Says what is wrong with a --set argument that has no '=': by its position, and by its key
 * when it starts with one, never by the text after the key (it may be a secret). */
static void bad_set_argument(int n, const char *arg)
{
    int k = config_key_prefix(arg);
    const char *key = k >= 0 ? config_key((size_t)k)->key : NULL;
    if (key && !arg[strlen(key)])
        fprintf(stderr, "dstl: --set argument %d: key '%s' has no value: expected key=value\n", n, key);
    else if (key)
        fprintf(stderr, "dstl: --set argument %d: expected key=value: key '%s' is not followed by '=' (the rest "
                        "is not shown)\n", n, key);
    else
        fprintf(stderr, "dstl: --set argument %d: expected key=value, found no '=' (the argument is not shown: it "
                        "may hold a secret)\n", n);
}

dstl_config *cmd_config(const cmd_globals *g, const char *local_dir)
{
    dstl_config *c = NULL;
    if (dstl_config_new(&c) < 0) {
        fprintf(stderr, "dstl: %s\n", dstl_last_error());
        return NULL;
    }
    if (g->config_file && dstl_config_load(c, g->config_file) < 0) {
        fprintf(stderr, "dstl: %s\n", dstl_last_error());
        dstl_config_free(c);
        return NULL;
    }
    for (int i = 0; i < g->nsets; i++) {
        const char *arg = g->sets[i], *eq = strchr(arg, '=');
        if (!eq) {
            bad_set_argument(i + 1, arg);
            dstl_config_free(c);
            return NULL;
        }
        char *key = strndup(arg, (size_t)(eq - arg));
        int rc = key ? dstl_config_set(c, key, eq + 1) : -ENOMEM;
        free(key);
        if (rc < 0) {
            fprintf(stderr, "dstl: --set argument %d: %s\n", i + 1, rc == -ENOMEM ? "out of memory" : dstl_last_error());
            dstl_config_free(c);
            return NULL;
        }
    }
    if (local_dir && dstl_config_set(c, "dstl.local.dir", local_dir) < 0) {
        fprintf(stderr, "dstl: %s\n", dstl_last_error());
        dstl_config_free(c);
        return NULL;
    }
    return c;
}

dstl_handle *cmd_read_handle(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "dstl: handle file %s: %s\n", path, strerror(errno));
        return NULL;
    }
    /* Handles are small (a few KiB); 64 MiB bounds what a wrong file can make us read. */
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    const char *why = buf ? NULL : "out of memory";
    while (!why) {
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            if (ferror(f)) why = strerror(errno);
            break;
        }
        if (len < cap) continue;
        unsigned char *nb = cap >= (64u << 20) ? NULL : realloc(buf, cap * 2);
        if (!nb) why = cap >= (64u << 20) ? "larger than 64 MiB" : "out of memory";
        else {
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (why) {
        fprintf(stderr, "dstl: handle file %s: %s\n", path, why);
        free(buf);
        return NULL;
    }
    dstl_handle *h = NULL;
    if (dstl_handle_parse(buf, len, &h) < 0) fprintf(stderr, "dstl: handle file %s: %s\n", path, dstl_last_error());
    free(buf);
    return h;
}

int cmd_write_handle(const char *path, const dstl_handle *h)
{
    void *buf;
    size_t len;
    int rc = dstl_handle_serialize(h, &buf, &len);
    if (rc < 0) return rc;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        free(buf);
        return rc;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, (char *)buf + off, len - off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = -errno;
            break;
        }
        off += (size_t)n;
    }
    free(buf);
    /* DURABILITY: the bytes are durable after fsync; rename makes the file appear whole, and
     * the fsync of its directory makes the name durable. A crash before leaves the old file
     * (or none) and a .tmp. */
    if (rc == 0 && fsync(fd) < 0) rc = -errno;
    close(fd);
    if (rc == 0 && rename(tmp, path) < 0) rc = -errno;
    if (rc < 0) {
        unlink(tmp);
        return rc;
    }
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    int dfd = open(slash ? (*dir ? dir : "/") : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) < 0) rc = -errno;
    if (dfd >= 0) close(dfd);
    return rc;
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
