/*
 * tests/helpers_cmd.c — running the `dstl` command from tests; directory snapshots.
 */
#include "tests/helpers_cmd.h"

#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/helpers.h"

const char *t_cmd_bin(void)
{
    const char *b = getenv("DSTL_TEST_BIN");
    return b && *b ? b : "build/dstl";
}

char *t_cmd_run(const char *scratch_dir, int *status, const char *fmt, ...)
{
    char cmd[16384], out[4300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(out, sizeof out, "%s/out.txt", scratch_dir);
    size_t full_cap = strlen(cmd) + strlen(out) + 32;
    char *full = malloc(full_cap);
    if (!full) return NULL;
    snprintf(full, full_cap, "( %s ) > '%s' 2>&1", cmd, out);
    int st = system(full);
    free(full);
    *status = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : 255;
    size_t len = 0;
    char *text = t_read_file(out, &len);
    if (!text) return NULL;
    char *t = realloc(text, len + 1);
    if (!t) {
        free(text);
        return NULL;
    }
    t[len] = '\0';
    return t;
}

size_t t_cmd_count(const char *text, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* ---- tree snapshots ---- */

static struct {
    char **lines;
    size_t n, cap;
    int oom;
} walk;

static int walk_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)f;
    if (walk.n == walk.cap) {
        size_t cap = walk.cap ? walk.cap * 2 : 64;
        char **l = realloc(walk.lines, cap * sizeof *l);
        if (!l) {
            walk.oom = 1;
            return 1;
        }
        walk.lines = l;
        walk.cap = cap;
    }
    char type = flag == FTW_D || flag == FTW_DP ? 'd' : flag == FTW_SL ? 'l' : S_ISREG(st->st_mode) ? 'f' : 'o';
    char line[4400];
    snprintf(line, sizeof line, "%s %c %lld %lld.%09ld", path, type, (long long)st->st_size,
             (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
    if (!(walk.lines[walk.n] = strdup(line))) {
        walk.oom = 1;
        return 1;
    }
    walk.n++;
    return 0;
}

static int cmp_line(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

char *t_cmd_tree(const char *root)
{
    walk.n = 0;
    walk.oom = 0;
    int rc = nftw(root, walk_one, 16, FTW_PHYS);
    char *text = NULL;
    if (rc == 0 && !walk.oom) {
        qsort(walk.lines, walk.n, sizeof *walk.lines, cmp_line);
        size_t len = 1;
        for (size_t i = 0; i < walk.n; i++) len += strlen(walk.lines[i]) + 1;
        if ((text = malloc(len))) {
            size_t off = 0;
            for (size_t i = 0; i < walk.n; i++) off += (size_t)sprintf(text + off, "%s\n", walk.lines[i]);
            text[off] = '\0';
        }
    }
    for (size_t i = 0; i < walk.n; i++) free(walk.lines[i]);
    free(walk.lines);
    walk.lines = NULL;
    walk.n = walk.cap = 0;
    return text;
}
