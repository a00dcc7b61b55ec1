/*
 * Remote crash: a child persisting heavily with dstl.durability remote (tests/tools/
 * crash_child.c, remote mode) is killed with SIGKILL amid its uploads; afterwards
 *  - every handle it reported complete reads back from S3 alone: the reading storage has a
 *    new, empty local dir, so the child's local copies are out of its reach (as if deleted);
 *  - `dstl gc DIR --live <handle files>` (the command, configured for the same prefix) removes
 *    exactly the orphans, local and remote: afterwards the local dir and the prefix hold
 *    exactly the segments the handles reference (compared name by name) and no incomplete
 *    multipart upload.
 * A third of the trials use big records and a 5 MiB multipart threshold, so kills land amid
 * multipart uploads (parts sent, no Complete). 20 trials in `make test`, 200 with DSTL_SOAK=1.
 * Each trial uses its own prefix under the fixture's (one bucket) and empties it afterwards
 * (memstore).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/helpers.h"
#include "tests/helpers_dstl.h"
#include "tests/helpers_remote.h"
#include "wire/wire.h"

#define WRITERS 4               /* crash_child's */

static t_remote fx;
static char conf[4300];         /* the fixture's settings, for `dstl gc` */

static void setup(void)
{
    t_remote_init(&fx, "rcrash");
    snprintf(conf, sizeof conf, "%s/s3.conf", fx.dir);
    t_remote_write_conf(&fx, conf, NULL);
}

static void teardown(void) { t_remote_fini(&fx); }

static const char *tool(void)
{
    static char path[4096];
    const char *d = getenv("DSTL_TEST_TOOLS");
    snprintf(path, sizeof path, "%s/crash_child", d && *d ? d : "build/tools");
    return path;
}

static const char *bin(void)
{
    const char *b = getenv("DSTL_TEST_BIN");
    return b && *b ? b : "build/dstl";
}

/* Starts argv; with out_fd, the child's stdout is a pipe whose read end goes there. */
static pid_t spawn(char *const argv[], int *out_fd)
{
    int pfd[2] = {-1, -1};
    if (out_fd) cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        if (out_fd) {
            dup2(pfd[1], 1);
            close(pfd[0]);
            close(pfd[1]);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    if (out_fd) {
        close(pfd[1]);
        *out_fd = pfd[0];
    }
    return pid;
}

static int wait_exit(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0) {
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- name sets ---- */

typedef struct {
    char **v;
    size_t n, cap;
} names;

static void names_add(names *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->v[i], name)) return;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = strdup(name);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void names_free(names *s)
{
    for (size_t i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* Both sets sorted and equal; else the first difference, named. */
static void names_expect_equal(names *got, names *want, const char *what, int trial)
{
    if (got->n > 1) qsort(got->v, got->n, sizeof *got->v, cmp_str);
    if (want->n > 1) qsort(want->v, want->n, sizeof *want->v, cmp_str);
    size_t i = 0, j = 0;
    while (i < got->n || j < want->n) {
        int c = i == got->n ? 1 : j == want->n ? -1 : strcmp(got->v[i], want->v[j]);
        cr_assert_eq(c, 0, "trial %d: %s: %s %s", trial, what, c < 0 ? got->v[i] : want->v[j],
                     c < 0 ? "remains but no live handle references it" : "is referenced but missing");
        i++;
        j++;
    }
}

/* The segment names the handle files reference; their paths into files[] (for dstl gc). */
static void referenced(const char *handles, names *out, char files[WRITERS][4300], int *nfiles)
{
    *nfiles = 0;
    for (int w = 0; w < WRITERS; w++) {
        char path[4300];
        snprintf(path, sizeof path, "%s/w%d.handle", handles, w);
        size_t len;
        void *buf = t_read_file(path, &len);
        if (!buf) continue;             /* killed before its first checkpoint */
        wire_handle *wh = NULL;
        wire_err e = {{0}};
        cr_assert_eq(wire_handle_decode(buf, len, &wh, &e), 0, "%s: %s", path, e.msg);
        for (size_t i = 0; i < wh->nsegs; i++) names_add(out, wh->segs[i].name);
        wire_handle_free(wh);
        free(buf);
        snprintf(files[(*nfiles)++], 4300, "%s", path);
    }
}

static void local_segments(const char *dir, names *out)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".seg")) names_add(out, e->d_name);
    }
    closedir(d);
}

/* The segment objects under prefix/ (by name) and the number of incomplete uploads. */
static void remote_segments(const char *prefix, names *out, size_t *uploads)
{
    s3_list l;
    s3_result r;
    cr_assert_eq(s3_list_objects_all_sync(fx.s3, fx.bucket, prefix, 0, &l, &r), 0, "%s", r.error);
    for (size_t i = 0; i < l.n_objects; i++) names_add(out, strrchr(l.objects[i].key, '/') + 1);
    s3_list_clear(&l);
    cr_assert_eq(s3_list_multipart_uploads_all_sync(fx.s3, fx.bucket, prefix, 0, &l, &r), 0, "%s", r.error);
    *uploads = l.n_uploads;
    s3_list_clear(&l);
}

/* Empties prefix/ (objects and uploads) so memstore does not fill up over the trials. */
static void empty_prefix(const char *prefix)
{
    s3_list l;
    s3_result r;
    cr_assert_eq(s3_list_multipart_uploads_all_sync(fx.s3, fx.bucket, prefix, 0, &l, &r), 0, "%s", r.error);
    for (size_t i = 0; i < l.n_uploads; i++)
        s3_abort_multipart_upload_sync(fx.s3, fx.bucket, l.uploads[i].key, l.uploads[i].upload_id, &r);
    s3_list_clear(&l);
    cr_assert_eq(s3_list_objects_all_sync(fx.s3, fx.bucket, prefix, 0, &l, &r), 0, "%s", r.error);
    if (l.n_objects) {
        const char **keys = calloc(l.n_objects, sizeof *keys);
        for (size_t i = 0; i < l.n_objects; i++) keys[i] = l.objects[i].key;
        cr_assert_eq(s3_delete_objects_sync(fx.s3, fx.bucket, keys, l.n_objects, &r), 0, "%s", r.error);
        free(keys);
    }
    s3_list_clear(&l);
}

/* Waits for the child's "running" line (its storage is open), or its end. */
static void wait_running(int fd)
{
    char line[64];
    size_t got = 0;
    while (got < sizeof line - 1) {
        ssize_t r = read(fd, line + got, 1);
        if (r <= 0 || line[got] == '\n') break;
        got++;
    }
    close(fd);
}

Test(remote_crash, sigkill_amid_uploads_loses_nothing_and_gc_removes_exactly_the_orphans, .init = setup,
     .fini = teardown, .timeout = 900)
{
    static const char *engines[] = {"io_uring", "libaio", "psync"};
    for (size_t k = 0; k < sizeof engines / sizeof engines[0]; k++) t_engine_or_skip(engines[k]);
    int trials = getenv("DSTL_SOAK") ? 200 : 20;
    cr_assert_eq(access(tool(), X_OK), 0, "the crash tool %s is missing (build it with make)", tool());
    cr_assert_eq(access(bin(), X_OK), 0, "the dstl command %s is missing (build it with make)", bin());
    uint64_t rnd = (uint64_t)time(NULL) ^ (uint64_t)getpid();
    cr_log_info("remote crash trials: %d, seed %llu", trials, (unsigned long long)rnd);
    size_t uploads_seen = 0, orphans_seen = 0;
    for (int t = 0; t < trials; t++) {
        const char *mode = t % 3 == 2 ? "big" : "small";
        char *dir = t_mkdtemp("rcrash");
        char data[4200], handles[4200], s3only[4200], seed[32], prefix[128], uri[256];
        snprintf(data, sizeof data, "%s/data", dir);
        snprintf(handles, sizeof handles, "%s/handles", dir);
        snprintf(s3only, sizeof s3only, "%s/s3only", dir);
        snprintf(prefix, sizeof prefix, "%sc%d", fx.prefix_dir, t);
        snprintf(uri, sizeof uri, "s3://%s/%s", fx.bucket, prefix);
        cr_assert_eq(mkdir(handles, 0755), 0);
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)t_rand(&rnd));

        char *run[] = {(char *)tool(), "run", data, handles, (char *)engines[t % 3], seed, uri, (char *)mode, NULL};
        int out;
        pid_t pid = spawn(run, &out);
        wait_running(out);
        /* small: 20-600 ms of checkpoints; big: 100-1500 ms, so some kills land amid parts */
        useconds_t us = !strcmp(mode, "big") ? (useconds_t)(100000 + t_rand(&rnd) % 1400000)
                                             : (useconds_t)(20000 + t_rand(&rnd) % 580000);
        usleep(us);
        kill(pid, SIGKILL);
        int st = wait_exit(pid);
        cr_assert_eq(st, 128 + SIGKILL, "trial %d: the child ended on its own (%d) before the kill", t, st);

        /* every handle reported complete reads back from S3 alone */
        char *ver[] = {(char *)tool(), "verify", s3only, handles, uri, (char *)mode, NULL};
        int rc = wait_exit(spawn(ver, NULL));
        cr_assert_eq(rc, 0, "trial %d (%s, engine %s, seed %s): reading back from S3 alone failed; data kept in %s, %s",
                     t, mode, engines[t % 3], seed, dir, uri);

        char pfx[136];
        snprintf(pfx, sizeof pfx, "%s/", prefix);
        names before = {0};
        size_t uploads = 0;
        remote_segments(pfx, &before, &uploads);
        names live = {0};
        char files[WRITERS][4300];
        int nfiles;
        referenced(handles, &live, files, &nfiles);
        uploads_seen += uploads;
        orphans_seen += before.n > live.n ? before.n - live.n : 0;
        names_free(&before);

        /* the operator's sweep: dstl --config <the fixture's> --set <the trial's prefix> gc DIR
         * --min-age 0 --live <handle files>,
         * once the killed run's lease (500 ms, crash_child.c) is stale on the server's clock —
         * whose Date has whole seconds, so up to a second more — until then gc must keep
         * everything of the run (a lease says it may be alive on another machine) */
        usleep(1800000);
        char cmd[32768];
        int n = snprintf(cmd, sizeof cmd,
                         "'%s' --config '%s' --set dstl.remote.uri=%s "
                         "--set dstl.remote.lease-refresh=100ms --set dstl.remote.lease-timeout=500ms "
                         "gc '%s' --min-age 0 %s",
                         bin(), conf, uri, data,
                         nfiles ? "--live" : "--no-live-handles");   /* no handle yet: said explicitly */
        for (int i = 0; i < nfiles; i++) n += snprintf(cmd + n, sizeof cmd - (size_t)n, " '%s'", files[i]);
        snprintf(cmd + n, sizeof cmd - (size_t)n, " > '%s/gc.out' 2>&1", dir);
        cr_assert_eq(system(cmd), 0, "trial %d: dstl gc failed (see %s/gc.out)", t, dir);

        /* exactly the referenced segments remain, locally and in the bucket */
        names local = {0}, remote = {0};
        local_segments(data, &local);
        remote_segments(pfx, &remote, &uploads);
        names_expect_equal(&local, &live, "local segment", t);
        names_expect_equal(&remote, &live, "segment object", t);
        cr_assert_eq(uploads, 0, "trial %d: %zu incomplete multipart uploads remain under %s", t, uploads, uri);
        names_free(&local);
        names_free(&remote);
        names_free(&live);

        empty_prefix(pfx);
        t_rm_rf(dir);
        free(dir);
    }
    cr_log_info("before gc, over all trials: %zu orphan segment objects, %zu incomplete multipart uploads",
                orphans_seen, uploads_seen);
}
