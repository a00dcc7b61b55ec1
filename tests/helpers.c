/*
 * tests/helpers.c — see helpers.h.
 */
#include "tests/helpers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *t_mkdtemp(const char *tag)
{
    const char *base = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/dstl-%s.XXXXXX", base && *base ? base : "/tmp", tag);
    if (!mkdtemp(path)) return NULL;
    return strdup(path);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

void t_rm_rf(const char *path)
{
    if (path) nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int t_write_file(const char *path, const void *buf, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -errno;
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            return -e;
        }
        p += n;
        len -= (size_t)n;
    }
    return close(fd) < 0 ? -errno : 0;
}

void *t_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); buf = NULL; }
            else buf = nb;
        }
    }
    fclose(f);
    if (buf) *len = n;
    return buf;
}

char *t_read_text(const char *path)
{
    size_t n = 0;
    char *buf = t_read_file(path, &n);
    if (buf) buf[n] = '\0';    /* t_read_file always leaves room after the bytes (n < cap) */
    return buf;
}

uint64_t t_rand(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

void t_fill(void *buf, size_t len, uint64_t seed)
{
    uint8_t *p = buf;
    uint64_t state = seed | 1, r = 0;
    for (size_t i = 0; i < len; i++) {
        if ((i & 7) == 0) r = t_rand(&state);
        p[i] = (uint8_t)(r >> ((i & 7) * 8));
    }
}

const char *t_data_dir(void)
{
    const char *d = getenv("DSTL_TEST_DATA");
    return d && *d ? d : "tests/data";
}

int t_thread_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d));) {
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
        found = strcmp(comm, name) == 0;
    }
    closedir(d);
    return found;
}
