/*
 * Ownership of a local dir: a running storage's files are never deleted by a gc, in its own
 * process or another, and a segment is acknowledged only while it is reachable.
 *
 * Storages may share one dstl.local.dir: each run holds an flock on <dir>/<run id>.lock from
 * before its first file until it closes, and dstl_gc keeps every file of a run whose lock is
 * held (reserved names, segments being written, segments held only by writer sections),
 * whatever the live set and min_age say. The regressions, from issue 8:
 *  1. another storage's gc deleted the reserved (pre-created, still empty) names of a live run;
 *     the live run then acknowledged persists into unlinked files;
 *  2. a removed dstl.local.dir did not stop persists: they wrote and fdatasync'ed unlinked files;
 *  5. two storages on one dir, in one process or two, were not told apart by gc;
 *  6. a gc in another process, with a live set taken half a second earlier and min_age 1 s,
 *     deleted segments a running writer had persisted since, held only by its sections.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
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
#include "tests/payload.h"

#define NKG 8

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Files in dir ending in suffix (empty ones included). */
static size_t count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t n = 0, k = strlen(suffix);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > k && strcmp(e->d_name + l - k, suffix) == 0) n++;
    }
    closedir(d);
    return n;
}

Test(dstl_ownership, gc_of_another_storage_keeps_a_live_runs_reserved_names)
{
    char *dir = t_mkdtemp("own-reserved");
    dstl_storage *a = t_storage_open(dir, NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(a, "w", 0, NKG - 1, &w), 0);
    t_append_n(w, 1, 20, 0, NKG, 200);
    dstl_handle *h1 = t_persist(w, 0, 1);
    size_t files = count_files(dir, ".seg");
    cr_assert_gt(files, 1, "the run reserves names ahead (%zu files)", files);
    cr_assert_eq(t_count_segments(dir), 1);
    sleep_ms(1100);                          /* every reservation is older than min_age now */

    dstl_storage *b = t_storage_open(dir, NULL);
    const dstl_handle *live[] = {h1};
    dstl_gc_report rep;
    cr_assert_eq(dstl_gc(b, live, 1, 1000, 0, &rep), 0, "%s", dstl_last_error());
    cr_assert_eq(rep.deleted, 0, "a live run's files are never deleted (%llu were)", (unsigned long long)rep.deleted);
    cr_assert_eq(rep.kept_running, files, "kept_running %llu of %zu files", (unsigned long long)rep.kept_running,
                 files);
    cr_assert_eq(count_files(dir, ".seg"), files);

    /* A persists again into a reserved name: acknowledged, and readable */
    t_append_n(w, 1, 20, 0, NKG, 200);
    dstl_handle *h2 = t_persist(w, 0, 2);
    cr_assert_eq(t_verify(b, h2, 1, 0, NKG, 0, NKG - 1, 200), 40, "%s", dstl_last_error());
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(a), 0);

    /* A is closed: its lock is gone and its leftovers are judged by the live set */
    cr_assert_eq(count_files(dir, ".lock"), 0, "a closed run removes its lock file");
    const dstl_handle *live2[] = {h2};
    cr_assert_eq(dstl_gc(b, live2, 1, 0, 0, &rep), 0, "%s", dstl_last_error());
    cr_assert_eq(rep.kept_running, 0);
    cr_assert_eq(t_verify(b, h2, 1, 0, NKG, 0, NKG - 1, 200), 40, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(b), 0);
    dstl_handle_free(h1);
    dstl_handle_free(h2);
    t_rm_rf(dir);
    free(dir);
}

Test(dstl_ownership, a_removed_local_dir_fails_persists_naming_it)
{
    char *dir = t_mkdtemp("own-rmdir");
    char data[4200];
    snprintf(data, sizeof data, "%s/data", dir);
    dstl_storage *s = t_storage_open(data, NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(s, "w", 0, NKG - 1, &w), 0);
    t_append_n(w, 1, 20, 0, NKG, 200);
    dstl_handle *h1 = t_persist(w, 0, 1);
    dstl_handle_free(h1);
    t_rm_rf(data);                           /* an operator's rm -rf under the running storage */

    for (uint64_t cp = 2; cp <= 4; cp++) {
        t_append_n(w, 1, 20, 0, NKG, 200);
        dstl_future *f = NULL;
        int rc = dstl_persist(w, 0, cp, &f);
        if (rc == 0) {
            cr_assert_eq(dstl_future_wait(f, 30000), 0);
            dstl_handle *h = NULL;
            rc = dstl_future_result(f, &h);
            dstl_handle_free(h);
            dstl_future_free(f);
        }
        cr_assert_lt(rc, 0, "checkpoint %llu: a persist into a removed dir must fail", (unsigned long long)cp);
        cr_assert(strstr(dstl_last_error(), data) != NULL, "the error names the dir: %s", dstl_last_error());
    }
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    t_rm_rf(dir);
    free(dir);
}

/* Two storages on one dir in one process, both writing: a gc from either, given only its own
 * handles and min_age 0, keeps everything of the other. */
Test(dstl_ownership, two_storages_in_one_process_share_a_dir)
{
    char *dir = t_mkdtemp("own-two");
    dstl_storage *a = t_storage_open(dir, NULL), *b = t_storage_open(dir, NULL);
    dstl_writer *wa, *wb;
    cr_assert_eq(dstl_writer_open(a, "a", 0, NKG - 1, &wa), 0);
    cr_assert_eq(dstl_writer_open(b, "b", 0, NKG - 1, &wb), 0);
    dstl_handle *ha = NULL, *hb = NULL;
    for (uint64_t cp = 1; cp <= 5; cp++) {
        t_append_n(wa, 1, 30, 0, NKG, 300);
        t_append_n(wb, 2, 30, 0, NKG, 300);
        dstl_handle *na = t_persist(wa, 0, cp), *nb = t_persist(wb, 0, cp);
        if (ha) {
            dstl_handle_discard(a, ha);
            dstl_handle_free(ha);
            dstl_handle_discard(b, hb);
            dstl_handle_free(hb);
        }
        ha = na;
        hb = nb;
        dstl_gc_report rep;
        const dstl_handle *la[] = {ha}, *lb[] = {hb};
        cr_assert_eq(dstl_gc(a, la, 1, 0, 0, &rep), 0, "%s", dstl_last_error());
        cr_assert_gt(rep.kept_running, 0, "b's files are b's run's");
        cr_assert_eq(dstl_gc(b, lb, 1, 0, 0, &rep), 0, "%s", dstl_last_error());
        cr_assert_gt(rep.kept_running, 0, "a's files are a's run's");
        cr_assert_eq(t_verify(a, ha, 1, 0, NKG, 0, NKG - 1, 300), (long)(30 * cp), "%s", dstl_last_error());
        cr_assert_eq(t_verify(b, hb, 2, 0, NKG, 0, NKG - 1, 300), (long)(30 * cp), "%s", dstl_last_error());
    }
    cr_assert_eq(count_files(dir, ".lock"), 2, "one lock per running storage");
    cr_assert_eq(dstl_writer_close(wa), 0);
    cr_assert_eq(dstl_writer_close(wb), 0);
    cr_assert_eq(dstl_storage_close(a), 0);
    cr_assert_eq(t_verify(b, ha, 1, 0, NKG, 0, NKG - 1, 300), 150, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(b), 0);
    dstl_handle_free(ha);
    dstl_handle_free(hb);
    t_rm_rf(dir);
    free(dir);
}

static const char *tool(void)
{
    static char path[4096];
    const char *d = getenv("DSTL_TEST_TOOLS");
    snprintf(path, sizeof path, "%s/crash_child", d && *d ? d : "build/tools");
    return path;
}

static int run_wait(char *const argv[])
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The writer process of the next test: one writer appends without pause (its records go to
 * the pipeline ahead of the checkpoint: preemptive hand-offs of 16 KiB), checkpoints every
 * 1.2 s (persist from 0: nothing is ever truncated), writes each new handle to HDIR/w0.handle
 * (tmp, rename) and only then discards the previous one. Until killed. */
#define CHILD_RECORD_MAX 500

static void persisting_child(const char *data, const char *hdir)
{
    dstl_config *c = NULL;
    dstl_storage *s = NULL;
    dstl_writer *w = NULL;
    if (dstl_config_new(&c) < 0 || dstl_config_set(c, "dstl.local.dir", data) < 0 ||
        dstl_config_set(c, "dstl.preemptive-persist-threshold", "32kb") < 0 || dstl_storage_open(c, &s) < 0 ||
        dstl_writer_open(s, "w0", 0, NKG - 1, &w) < 0)
        _exit(3);
    uint8_t buf[CHILD_RECORD_MAX];
    dstl_handle *prev = NULL;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint64_t cp = 1;; cp++) {
        for (;;) {
            for (int i = 0; i < 20; i++) {
                uint64_t seq = dstl_writer_next_seq(w);
                size_t len = payload_make(PAYLOAD_RANDOM, 5, seq, sizeof buf, buf);
                if (dstl_append(w, (uint32_t)(seq % NKG), buf, len) < 0) _exit(4);
            }
            sleep_ms(4);                /* ~2.5 MB/s: many hand-offs, a bounded log */
            clock_gettime(CLOCK_MONOTONIC, &now);
            if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 >= (long)(1200 * cp)) break;
        }
        dstl_future *f = NULL;
        dstl_handle *h = NULL;
        if (dstl_persist(w, 0, cp, &f) < 0 || dstl_future_wait(f, -1) < 0 || dstl_future_result(f, &h) < 0) _exit(5);
        dstl_future_free(f);
        void *hb;
        size_t hl;
        char tmp[4300], path[4300];
        snprintf(tmp, sizeof tmp, "%s/w0.tmp", hdir);
        snprintf(path, sizeof path, "%s/w0.handle", hdir);
        if (dstl_handle_serialize(h, &hb, &hl) < 0 || t_write_file(tmp, hb, hl) < 0 || rename(tmp, path) < 0) _exit(6);
        free(hb);
        if (prev) {
            dstl_handle_discard(s, prev);
            dstl_handle_free(prev);
        }
        prev = h;
    }
}

/* Another process persists; this one runs gc on the same dir every 100 ms with the handle it
 * saw 500 ms earlier and min_age 1 s — a coordinator's live set is always a little old. The
 * segments the writer handed off after that handle are held only by its writer's sections
 * and are older than min_age before the next checkpoint references them: without ownership
 * the gc deleted them and the next handle did not read back. */
Test(dstl_ownership, gc_from_another_process_while_it_persists, .timeout = 120)
{
    char *dir = t_mkdtemp("own-proc");
    char data[4200], hdir[4200], hfile[4300];
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(hdir, sizeof hdir, "%s/handles", dir);
    snprintf(hfile, sizeof hfile, "%s/w0.handle", hdir);
    cr_assert_eq(mkdir(hdir, 0755), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) persisting_child(data, hdir);
    enum { ROUNDS = 60, LAG = 5 };
    dstl_handle *seen[ROUNDS];
    dstl_storage *s = NULL;
    uint64_t kept_running = 0, deleted = 0;
    long checked = 0;
    for (int r = 0; r < ROUNDS; r++) {
        seen[r] = NULL;
        size_t len;
        void *buf = t_read_file(hfile, &len);
        if (buf) {
            cr_assert_eq(dstl_handle_parse(buf, len, &seen[r]), 0, "%s", dstl_last_error());
            free(buf);
        }
        if (!s && access(data, F_OK) == 0) s = t_storage_open(data, NULL);
        if (s && r >= LAG) {
            dstl_gc_report rep;
            const dstl_handle *live[1] = {seen[r - LAG]};
            cr_assert_eq(dstl_gc(s, live, seen[r - LAG] ? 1 : 0, 1000, 0, &rep), 0, "%s", dstl_last_error());
            kept_running += rep.kept_running;
            deleted += rep.deleted;
        }
        /* the writer's handles read back while it keeps persisting (every fifth round: each
         * read covers the whole log, which only grows) */
        if (s && seen[r] && (r % 5 == 4 || r == ROUNDS - 1)) {
            long n = t_verify(s, seen[r], 5, 0, NKG, 0, NKG - 1, CHILD_RECORD_MAX);
            cr_assert_gt(n, 0, "round %d: the writer's handle of checkpoint %llu does not read back: %s", r,
                         (unsigned long long)dstl_handle_checkpoint_id(seen[r]), dstl_last_error());
            checked++;
        }
        sleep_ms(100);
    }
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFSIGNALED(st), "the writer process ended on its own (status %d)", st);
    cr_assert_geq(checked, 8);
    cr_assert_eq(deleted, 0, "nothing of a running writer is deleted (%llu were)", (unsigned long long)deleted);
    cr_assert_gt(kept_running, 0);

    /* The writer is dead now: its lock protects nothing; the live set decides. */
    dstl_handle *last = seen[ROUNDS - 1];
    cr_assert_not_null(last);
    dstl_gc_report rep;
    const dstl_handle *live[1] = {last};
    cr_assert_eq(dstl_gc(s, live, 1, 0, 0, &rep), 0, "%s", dstl_last_error());
    cr_assert_eq(rep.kept_running, 0);
    cr_assert_gt(t_verify(s, last, 5, 0, NKG, 0, NKG - 1, CHILD_RECORD_MAX), 0, "%s", dstl_last_error());
    /* once nothing of the dead run is live, its files go, and its lock file with the last */
    cr_assert_eq(dstl_gc(s, NULL, 0, 0, 0, &rep), 0, "%s", dstl_last_error());
    cr_assert_eq(count_files(data, ".seg"), 0);
    cr_assert_eq(count_files(data, ".lock"), 0, "the dead run's lock file goes with its last file");
    cr_assert_eq(dstl_storage_close(s), 0);
    for (int r = 0; r < ROUNDS; r++) dstl_handle_free(seen[r]);
    t_rm_rf(dir);
    free(dir);
}

/* The same in two processes that both write: each one's gc keeps the other's files. */
Test(dstl_ownership, two_processes_share_a_dir, .timeout = 120)
{
    char *dir = t_mkdtemp("own-2proc");
    char data[4200], hdir[4200];
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(hdir, sizeof hdir, "%s/handles", dir);
    cr_assert_eq(mkdir(hdir, 0755), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        execl(tool(), tool(), "run", data, hdir, "psync", "11", (char *)NULL);
        _exit(127);
    }
    while (access(data, F_OK) != 0) sleep_ms(10);
    dstl_storage *s = t_storage_open(data, NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(s, "mine", 0, NKG - 1, &w), 0);
    dstl_handle *h = NULL;
    for (uint64_t cp = 1; cp <= 20; cp++) {
        t_append_n(w, 9, 20, 0, NKG, 400);
        dstl_handle *n = t_persist(w, 0, cp);
        if (h) {
            dstl_handle_discard(s, h);
            dstl_handle_free(h);
        }
        h = n;
        dstl_gc_report rep;
        const dstl_handle *live[] = {h};
        cr_assert_eq(dstl_gc(s, live, 1, 0, 0, &rep), 0, "%s", dstl_last_error());
        cr_assert_eq(t_verify(s, h, 9, 0, NKG, 0, NKG - 1, 400), (long)(20 * cp), "%s", dstl_last_error());
        sleep_ms(20);
    }
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    char *ver[] = {(char *)tool(), "verify", data, hdir, NULL};
    cr_assert_eq(run_wait(ver), 0, "the other process's last handles read back; data kept in %s", dir);
    cr_assert_eq(dstl_writer_close(w), 0);
    dstl_handle_free(h);
    cr_assert_eq(dstl_storage_close(s), 0);
    t_rm_rf(dir);
    free(dir);
}
