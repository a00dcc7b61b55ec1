/*
 * dstl/cmd/common.c — what every subcommand of `dstl` shares: the configuration from the
 * global options, and handle files.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dstl/cmd/common.h"
#include "dstl/tools.h"

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

static void unknown_env(void *ctx, const char *var, const char *nearest)
{
    (void)ctx;
    char env[128];
    config_env_name(nearest, env, sizeof env);
    fprintf(stderr, "dstl: warning: environment variable %s is no configuration key's and is ignored (did you mean "
                    "%s, of key %s?)\n", var, env, nearest);
}

void cmd_check_env(void) { config_unknown_env(unknown_env, NULL); }

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

int cmd_open_storage(const dstl_config *c, const char *cmd, dstl_storage **out)
{
    if (dstl_storage_open(c, out) < 0) {
        fprintf(stderr, "dstl %s: %s\n", cmd, dstl_last_error());
        return -1;
    }
    /* a remote that did not answer the open-time check: opened, and said so */
    if (*dstl_last_error()) fprintf(stderr, "dstl %s: %s\n", cmd, dstl_last_error());
    return 0;
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
