/*
 * dstl/cmd/cmd_source.c — a set of segment objects: a local dir walked recursively, or an
 * s3://bucket/prefix listed with ListObjectsV2 (cmd_source.h). Only names ending in ".seg"
 * count (lock files, the reader cache, handle dirs and lease objects never do); a directory
 * named "x.seg" is walked, not read. Symbolic links are not followed (a mirror has none, and
 * a link loop must not hang `ls`).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "dstl/cmd/cmd_source.h"
#include "dstl/tools.h"

/* A local walk goes at most this deep: an rclone mirror of a prefix is PREFIX/hh/x.seg,
 * and a dir of dirs of mirrors stays far below it. */
#define WALK_MAX_DEPTH 16

struct cmd_source {
    char root[4096];             /* the dir, or "s3://bucket/prefix" as given */
    int remote;
    remote_loc loc;
    s3_client *cli;
    int64_t now_ms;
    cmd_seg *v;
    size_t n, cap;
};

int cmd_source_is_remote(const char *arg) { return strncmp(arg, "s3://", 5) == 0; }

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* "<run id>-<number>.seg": the run (lower-case hex) and the number. */
static void parse_name(cmd_seg *sg)
{
    const char *dash = strrchr(sg->name, '-');
    sg->run[0] = '\0';
    sg->no = 0;
    if (!dash || dash == sg->name || (size_t)(dash - sg->name) >= sizeof sg->run) return;
    char *end;
    unsigned long long no = strtoull(dash + 1, &end, 10);
    if (end == dash + 1 || strcmp(end, SEGSTORE_SUFFIX) != 0) return;
    memcpy(sg->run, sg->name, (size_t)(dash - sg->name));
    sg->run[dash - sg->name] = '\0';
    sg->no = no;
}

static cmd_seg *add(cmd_source *src, const char *rel)
{
    if (src->n == src->cap) {
        size_t cap = src->cap ? src->cap * 2 : 64;
        cmd_seg *v = realloc(src->v, cap * sizeof *v);
        if (!v) return NULL;
        src->v = v;
        src->cap = cap;
    }
    cmd_seg *sg = &src->v[src->n];
    memset(sg, 0, sizeof *sg);
    if (!(sg->rel = strdup(rel))) return NULL;
    const char *slash = strrchr(sg->rel, '/');
    sg->name = slash ? slash + 1 : sg->rel;
    parse_name(sg);
    src->n++;
    return sg;
}

/* Walks dir (rel: its path under the root, "" for the root). 0 or -1 after printing. */
static int walk(cmd_source *src, const char *cmd, const char *dir, const char *rel, int depth)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "dstl %s: %s: %s\n", cmd, dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char path[4400], sub[4400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;   /* removed meanwhile */
        if (S_ISDIR(st.st_mode)) {
            if (depth < WALK_MAX_DEPTH) rc = walk(src, cmd, path, sub, depth + 1);
            continue;
        }
        if (!S_ISREG(st.st_mode) || !ends_with(e->d_name, SEGSTORE_SUFFIX)) continue;
        cmd_seg *sg = add(src, sub);
        if (!sg || !(sg->dir = strdup(dir))) {
            fprintf(stderr, "dstl %s: out of memory\n", cmd);
            rc = -1;
            break;
        }
        sg->size = (uint64_t)st.st_size;
        sg->mtime_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
    }
    closedir(d);
    return rc;
}

/* The set of one local segment file. 0 or -1 after printing. */
static int one_file(cmd_source *src, const char *cmd, const char *path, const struct stat *st)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    const char *name = slash ? path + (slash - dir) + 1 : path;
    if (slash) *slash = '\0';
    cmd_seg *sg = add(src, name);
    if (!sg || !(sg->dir = strdup(slash ? (*dir ? dir : "/") : "."))) {
        fprintf(stderr, "dstl %s: out of memory\n", cmd);
        return -1;
    }
    sg->size = (uint64_t)st->st_size;
    sg->mtime_ms = (int64_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000;
    return 0;
}

/* Lists s3://bucket/prefix (or the one object s3://bucket/key.seg). 0 or -1 after printing. */
static int list_remote(cmd_source *src, const cmd_globals *g, const char *cmd)
{
    dstl_config *c = cmd_config(g, NULL);
    if (!c) return -1;
    config_values cv;
    int rc = config_resolve(c, &cv);
    if (rc == 0) rc = remote_parse_uri(src->root, "argument", &src->loc);
    if (rc == 0) rc = remote_client_new(&cv, &src->cli);
    dstl_config_free(c);
    if (rc < 0) {
        fprintf(stderr, "dstl %s: %s\n", cmd, dstl_last_error());
        return -1;
    }
    char prefix[600];
    if (ends_with(src->loc.prefix, SEGSTORE_SUFFIX)) snprintf(prefix, sizeof prefix, "%s", src->loc.prefix);
    else remote_list_prefix(&src->loc, prefix, sizeof prefix);
    s3_list l;
    memset(&l, 0, sizeof l);
    s3_result r;
    memset(&r, 0, sizeof r);
    if ((rc = s3_list_objects_all_sync(src->cli, src->loc.bucket, prefix, 0, &l, &r)) < 0) {
        fprintf(stderr, "dstl %s: list s3://%s/%s: %s\n", cmd, src->loc.bucket, prefix,
                *r.error ? r.error : dstl_strerror(rc));
        s3_list_clear(&l);
        return -1;
    }
    src->now_ms = l.server_date_ms ? l.server_date_ms : src->now_ms;
    size_t pl = strlen(prefix);
    for (size_t i = 0; rc == 0 && i < l.n_objects; i++) {
        const s3_object_info *o = &l.objects[i];
        if (!ends_with(o->key, SEGSTORE_SUFFIX)) continue;
        const char *rel = strlen(o->key) > pl && pl ? o->key + pl : o->key;
        if (ends_with(src->loc.prefix, SEGSTORE_SUFFIX)) rel = strrchr(o->key, '/') ? strrchr(o->key, '/') + 1 : o->key;
        cmd_seg *sg = add(src, rel);
        if (!sg || !(sg->key = strdup(o->key))) {
            fprintf(stderr, "dstl %s: out of memory\n", cmd);
            rc = -1;
            break;
        }
        sg->size = o->size;
        sg->mtime_ms = o->last_modified_ms;
    }
    s3_list_clear(&l);
    return rc < 0 ? -1 : 0;
}

/* Runs in the order of their oldest segment (the order they wrote), each run's segments
 * together, by number. */
typedef struct {
    cmd_seg sg;
    int64_t run_first;
} keyed;

static int cmp_keyed(const void *pa, const void *pb)
{
    const keyed *a = pa, *b = pb;
    if (a->run_first != b->run_first) return a->run_first < b->run_first ? -1 : 1;
    int c = strcmp(a->sg.run, b->sg.run);
    if (c) return c;
    if (a->sg.no != b->sg.no) return a->sg.no < b->sg.no ? -1 : 1;
    return strcmp(a->sg.rel, b->sg.rel);
}

static int sort_segments(cmd_source *src)
{
    if (src->n < 2) return 0;
    keyed *k = malloc(src->n * sizeof *k);
    if (!k) return -1;
    /* first by run alone, to find each run's oldest segment; then runs in that order */
    for (size_t i = 0; i < src->n; i++) k[i] = (keyed){src->v[i], 0};
    qsort(k, src->n, sizeof *k, cmp_keyed);
    for (size_t i = 0, j; i < src->n; i = j) {
        int64_t first = INT64_MAX;
        for (j = i; j < src->n && !strcmp(k[j].sg.run, k[i].sg.run); j++)
            if (k[j].sg.mtime_ms < first) first = k[j].sg.mtime_ms;
        for (size_t m = i; m < j; m++) k[m].run_first = first;
    }
    qsort(k, src->n, sizeof *k, cmp_keyed);
    for (size_t i = 0; i < src->n; i++) src->v[i] = k[i].sg;
    free(k);
    return 0;
}

int cmd_source_open(const cmd_globals *g, const char *cmd, const char *arg, cmd_source **out)
{
    cmd_source *src = calloc(1, sizeof *src);
    if (!src) {
        fprintf(stderr, "dstl %s: out of memory\n", cmd);
        return -1;
    }
    snprintf(src->root, sizeof src->root, "%s", arg);
    src->remote = cmd_source_is_remote(arg);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    src->now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    int rc;
    if (src->remote) {
        rc = list_remote(src, g, cmd);
    } else {
        struct stat st;
        if (stat(arg, &st) == 0 && S_ISREG(st.st_mode) && ends_with(arg, SEGSTORE_SUFFIX)) {
            rc = one_file(src, cmd, arg, &st);
        } else if (stat(arg, &st) == 0 && !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "dstl %s: %s: not a directory or a .seg file (give a local dir, a segment file or "
                            "s3://bucket/prefix)\n", cmd, arg);
            rc = -1;
        } else {
            rc = walk(src, cmd, arg, "", 0);
        }
    }
    if (rc == 0 && sort_segments(src) < 0) {
        fprintf(stderr, "dstl %s: out of memory\n", cmd);
        rc = -1;
    }
    if (rc < 0) {
        cmd_source_free(src);
        return -1;
    }
    *out = src;
    return 0;
}

void cmd_source_free(cmd_source *src)
{
    if (!src) return;
    for (size_t i = 0; i < src->n; i++) {
        free(src->v[i].rel);
        free(src->v[i].dir);
        free(src->v[i].key);
    }
    free(src->v);
    s3_client_free(src->cli);
    free(src);
}

size_t cmd_source_count(const cmd_source *src) { return src->n; }
const cmd_seg *cmd_source_seg(const cmd_source *src, size_t i) { return &src->v[i]; }
int64_t cmd_source_now_ms(const cmd_source *src) { return src->now_ms; }

void cmd_source_where(const cmd_source *src, const cmd_seg *sg, char *buf, size_t cap)
{
    if (sg->key) snprintf(buf, cap, "s3://%s/%s", src->loc.bucket, sg->key);
    else snprintf(buf, cap, "%s/%s", sg->dir, sg->name);
}

int cmd_source_read(cmd_source *src, const cmd_seg *sg, uint8_t **buf, char *why, size_t cap)
{
    uint8_t *b = malloc(sg->size ? sg->size : 1);
    if (!b) {
        snprintf(why, cap, "out of memory for %" PRIu64 " bytes", sg->size);
        return -ENOMEM;
    }
    int rc = 0;
    if (sg->key) {
        s3_result r;
        memset(&r, 0, sizeof r);
        rc = s3_get_object_sync(src->cli, src->loc.bucket, sg->key, 0, b, sg->size, &r);
        if (rc < 0) snprintf(why, cap, "%s", *r.error ? r.error : dstl_strerror(rc));
        else if (r.bytes != sg->size) {
            snprintf(why, cap, "GET s3://%s/%s: %" PRIu64 " bytes where the listing said %" PRIu64, src->loc.bucket,
                     sg->key, r.bytes, sg->size);
            rc = -EIO;
        }
    } else {
        ssize_t n = segstore_read_at(sg->dir, sg->name, 0, b, sg->size);
        if (n < 0) {
            rc = (int)n;
            snprintf(why, cap, "%s", dstl_last_error());
        } else if ((uint64_t)n != sg->size) {
            snprintf(why, cap, "%s/%s: %zd bytes where stat said %" PRIu64 " (changed while read)", sg->dir, sg->name,
                     n, sg->size);
            rc = -EIO;
        }
    }
    if (rc < 0) {
        free(b);
        return rc;
    }
    *buf = b;
    return 0;
}

void cmd_fmt_size(uint64_t bytes, int exact, char *buf, size_t cap)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (exact || bytes < 1024) {
        snprintf(buf, cap, "%" PRIu64 " B", bytes);
        return;
    }
    double v = (double)bytes / 1024;
    size_t u = 0;
    while (v >= 1024 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, v < 10 ? "%.1f %s" : "%.0f %s", v, units[u]);
}

void cmd_fmt_age(int64_t now_ms, int64_t then_ms, char *buf, size_t cap)
{
    if (then_ms <= 0) {
        snprintf(buf, cap, "age unknown");
        return;
    }
    int64_t d = now_ms - then_ms;
    /* Up to a second ahead is the Date header's rounding (whole seconds), not a clock. */
    if (d < -1000) {
        snprintf(buf, cap, "in the future (clock ahead by %" PRId64 " s)", -d / 1000);
        return;
    }
    int64_t s = d < 0 ? 0 : d / 1000;
    if (s < 120) snprintf(buf, cap, "%" PRId64 " s ago", s);
    else if (s < 7200) snprintf(buf, cap, "%" PRId64 " min ago", s / 60);
    else if (s < 2 * 86400) snprintf(buf, cap, "%" PRId64 " h ago", s / 3600);
    else snprintf(buf, cap, "%" PRId64 " d ago", s / 86400);
}
