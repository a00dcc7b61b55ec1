/*
 * Power cuts: the crash child persists heavily on a file system that forgets, at a simulated
 * power cut, everything not made durable (tests/tools/powercut_fs.c: unsynced file data,
 * directory entries not covered by an fsync of their directory; in modes prefix and tear a
 * random prefix of each file's unsynced writes survives, in tear the next one torn). Every
 * handle the child reported before the cut must then read back byte for byte on a remount.
 *
 * A trial: a fresh backing dir; powercut_fs mounted on a fresh mount point; `crash_child
 * run-acks` on <mount>/data with one engine, printing one line per completed persist; this test
 * plays the checkpoint coordinator on another machine: every line it has read is an
 * acknowledged checkpoint. The cut comes right after the Nth acknowledgement in half of the
 * trials, after a random delay in the others: write `cut` to <mount>/.powercut (the file system
 * freezes: nothing can become durable after it), SIGKILL the child, read what is left in the
 * pipe (those lines count too), SIGTERM the daemon (it writes the post-cut image to the backing
 * dir and unmounts, so the kernel's cache of that mount is gone), mount a new daemon on the same
 * backing dir, and `crash_child verify-acks` every acknowledged handle there. Modes drop, prefix
 * and tear take turns. 10 trials per engine (io_uring, libaio, psync) in `make test`, 70 with
 * DSTL_SOAK=1; the counts (trials, handles, records checked) are logged.
 *
 * It bites: crash_child-skip-fdatasync and crash_child-skip-dirsync are the same child built
 * with a local store that skips the segment fdatasync or the directory fsync (Makefile,
 * dstl/local/segstore.c's DSTL_TEST_* switches); with each, trials must report a lost acknowledged
 * record (at most BITE_TRIALS trials). And the simulator itself forgets what it should: the
 * tools_powercut tests check it through a mount (unsynced write gone, fsync'd data kept, a new
 * name without a directory fsync gone, unlink/rename undone, prefix and tear, EIO after the cut,
 * st_nlink 0 of an unlinked open file, a clean stop keeping everything).
 *
 * Not modelled (see powercut_fs.c): reordering or partial loss inside synced data, metadata
 * durability (mode, times), hard links and symlinks, unsynced directory changes half-surviving.
 * The test needs /dev/fuse and root (CI runs as root).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/helpers.h"
#include "tests/helpers_dstl.h"

#define FUSE_SUPER_MAGIC 0x65735546
/* Trials per engine: make test and make soak (3 engines: 30 and 210 in all). */
#define TRIALS_PER_ENGINE 10
#define SOAK_TRIALS_PER_ENGINE 70
/* Bite tests: trials until a loss must show; a loss comes in the first trial almost always
 * (any acknowledged segment is lost), so 10 leaves room only for a broken simulator to fail. */
#define BITE_TRIALS 10
/* Bounds on waiting: a daemon's "ready", the first acknowledgements, and a whole verify. */
#define READY_TIMEOUT_MS 30000
#define ACK_TIMEOUT_MS 60000

/* ---- processes ------------------------------------------------------------------------------ */

/* Every daemon and child this test started and has not reaped: the .fini ends them (and
 * detaches a daemon's mount, in case it died without unmounting), so a failed assertion leaves
 * no mount behind. */
#define MAX_PROCS 8
static pid_t procs[MAX_PROCS];
static int proc_sig[MAX_PROCS];
static char proc_mnt[MAX_PROCS][4096];

static void proc_add(pid_t pid, int sig, const char *mnt)
{
    for (int i = 0; i < MAX_PROCS; i++)
        if (!procs[i]) {
            procs[i] = pid;
            proc_sig[i] = sig;
            snprintf(proc_mnt[i], sizeof proc_mnt[i], "%s", mnt ? mnt : "");
            return;
        }
    cr_assert_fail("more than %d processes at once", MAX_PROCS);
}

static int proc_wait(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    for (int i = 0; i < MAX_PROCS; i++)
        if (procs[i] == pid) procs[i] = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void end_procs(void)
{
    for (int i = 0; i < MAX_PROCS; i++)
        if (procs[i]) {
            kill(procs[i], proc_sig[i]);
            proc_wait(procs[i]);
            if (proc_mnt[i][0]) umount2(proc_mnt[i], MNT_DETACH);
        }
}

static const char *tool(const char *name)
{
    static char path[4][4096];
    static int k;
    const char *d = getenv("DSTL_TEST_TOOLS");
    char *p = path[k++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", d && *d ? d : "build/tools", name);
    return p;
}

/* Starts argv with stdout to a pipe (its read end in *out_fd, unless NULL: then to out_path) and
 * stderr to err_path. The child gets `sig` when this test process dies. */
static pid_t spawn(char *const argv[], int *out_fd, const char *out_path, const char *err_path, int sig,
                   const char *mnt)
{
    int pfd[2] = {-1, -1};
    if (out_fd) cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
    pid_t parent = getpid();
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, sig);
        if (getppid() != parent) _exit(127);
        int o = out_fd ? pfd[1] : open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    if (out_fd) {
        close(pfd[1]);
        *out_fd = pfd[0];
    }
    proc_add(pid, sig, mnt);
    return pid;
}

static char *slurp(const char *path)
{
    size_t len;
    char *s = t_read_file(path, &len);
    if (!s) return strdup("(nothing)");
    char *z = realloc(s, len + 1);
    z[len] = '\0';
    return z;
}

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- the daemon ----------------------------------------------------------------------------- */

typedef struct {
    pid_t pid;
    char mnt[4096];
    char err[4096];
} pcfs;

static int is_fuse(const char *path)
{
    struct statfs sf;
    return statfs(path, &sf) == 0 && sf.f_type == FUSE_SUPER_MAGIC;
}

/* Mounts powercut_fs on mnt over backing and waits until it says "ready". */
static void pcfs_start(pcfs *fs, const char *backing, const char *mnt, const char *mode, uint64_t seed,
                       const char *err)
{
    char seed_s[32];
    snprintf(seed_s, sizeof seed_s, "%" PRIu64, seed);
    snprintf(fs->mnt, sizeof fs->mnt, "%s", mnt);
    snprintf(fs->err, sizeof fs->err, "%s", err);
    cr_assert(mkdir(mnt, 0755) == 0 || errno == EEXIST);
    const char *bin = tool("powercut_fs");
    cr_assert_eq(access(bin, X_OK), 0, "the power-cut file system %s is missing (build it with make)", bin);
    char *argv[] = {(char *)bin, "--mode", (char *)mode, "--seed", seed_s, (char *)backing, (char *)mnt, NULL};
    int out;
    fs->pid = spawn(argv, &out, NULL, err, SIGTERM, mnt);
    char buf[64];
    size_t got = 0;
    int64_t deadline = now_ms() + READY_TIMEOUT_MS;
    while (got < 6 && now_ms() < deadline) {
        struct pollfd p = {out, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t n = read(out, buf + got, sizeof buf - 1 - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(out);
    buf[got] = '\0';
    cr_assert(strncmp(buf, "ready\n", 6) == 0, "powercut_fs on %s did not come up; its stderr:\n%s", mnt, slurp(err));
    cr_assert(is_fuse(mnt), "%s is not a FUSE mount after powercut_fs said ready", mnt);
}

/* The cut: the write returns once the durable state is fixed. The close may fail (EIO). */
static void pcfs_cut(const pcfs *fs)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/.powercut", fs->mnt);
    int fd = open(path, O_WRONLY);
    cr_assert(fd >= 0, "open %s: %s", path, strerror(errno));
    ssize_t n = write(fd, "cut", 3);
    cr_assert_eq(n, 3, "cut via %s: %s", path, strerror(errno));
    close(fd);
}

/* SIGTERM: the daemon writes its image (post-cut, or current) and unmounts. */
static void pcfs_stop(pcfs *fs)
{
    kill(fs->pid, SIGTERM);
    int rc = proc_wait(fs->pid);
    if (rc != 0) umount2(fs->mnt, MNT_DETACH);   /* it may have died without unmounting */
    cr_assert_eq(rc, 0, "powercut_fs on %s ended with %d; its stderr:\n%s", fs->mnt, rc, slurp(fs->err));
    cr_assert(!is_fuse(fs->mnt), "%s is still a FUSE mount after powercut_fs exited", fs->mnt);
}

/* ---- trials --------------------------------------------------------------------------------- */

typedef struct {
    int trials, losing_trials, at_ack, no_ack, direct;
    uint64_t handles, records, lost;
    int64_t ms;
} tally;

/* One trial with the child program child_path (a crash_child build). Returns verify-acks' exit
 * status (0 nothing lost, 1 an acknowledged record lost: a failure unless expect_loss); adds its
 * counts to *t. The trial's dir is removed when the trial passes; a failed assertion leaves it
 * for inspection (its path is in the message). */
static int trial(const char *child_path, const char *engine, int direct, const char *mode, int cut_at_ack,
                 uint64_t *rnd, tally *t, int expect_loss)
{
    int64_t t0 = now_ms();
    char child[4096];
    snprintf(child, sizeof child, "%s", child_path);
    char *dir = t_mkdtemp("powercut");
    cr_assert(dir);
    char backing[4200], mnt1[4200], mnt2[4200], data[4300], acks[4200], cerr[4200], fs1e[4200], fs2e[4200],
        vout[4200], verr[4200], seed_s[32];
    snprintf(backing, sizeof backing, "%s/backing", dir);
    snprintf(mnt1, sizeof mnt1, "%s/mnt1", dir);
    snprintf(mnt2, sizeof mnt2, "%s/mnt2", dir);
    snprintf(acks, sizeof acks, "%s/acks", dir);
    snprintf(cerr, sizeof cerr, "%s/child.err", dir);
    snprintf(fs1e, sizeof fs1e, "%s/fs1.err", dir);
    snprintf(fs2e, sizeof fs2e, "%s/fs2.err", dir);
    snprintf(vout, sizeof vout, "%s/verify.out", dir);
    snprintf(verr, sizeof verr, "%s/verify.err", dir);
    cr_assert_eq(mkdir(backing, 0755), 0);
    uint64_t fs_seed = t_rand(rnd), child_seed = t_rand(rnd);
    /* a quarter of the ack cuts right after the first acknowledgement */
    int cut_after = cut_at_ack ? (t_rand(rnd) % 4 == 0 ? 1 : 1 + (int)(t_rand(rnd) % 300)) : 0;
    int delay_ms = cut_at_ack ? 0 : 10 + (int)(t_rand(rnd) % 290);
    snprintf(seed_s, sizeof seed_s, "%" PRIu64, child_seed);
    char what[512];
    snprintf(what, sizeof what,
             "%s, engine %s, dstl.io.direct %s, mode %s (seed %" PRIu64 "), child seed %s, cut %s %d%s; data in %s",
             strrchr(child, '/') + 1, engine, direct ? "true" : "false", mode, fs_seed, seed_s,
             cut_at_ack ? "after ack" : "after", cut_at_ack ? cut_after : delay_ms, cut_at_ack ? "" : " ms", dir);
    /* the child and its verifier read dstl.io.direct from the environment (DSTL_IO_DIRECT) */
    cr_assert_eq(setenv("DSTL_IO_DIRECT", direct ? "true" : "false", 1), 0);

    pcfs fs;
    pcfs_start(&fs, backing, mnt1, mode, fs_seed, fs1e);
    snprintf(data, sizeof data, "%s/data", mnt1);
    char *run[] = {child, "run-acks", data, (char *)engine, seed_s, NULL};
    int out;
    pid_t pid = spawn(run, &out, NULL, cerr, SIGKILL, NULL);
    FILE *af = fopen(acks, "w");
    cr_assert(af);

    /* Read acknowledgements until the cut point; then cut, kill, and drain. */
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    int lines = 0, cut = 0, eof = 0;
    int64_t start = now_ms();
    while (!eof) {
        if (!cut && ((cut_at_ack && lines >= cut_after) || (!cut_at_ack && now_ms() - start >= delay_ms))) {
            pcfs_cut(&fs);
            kill(pid, SIGKILL);
            cut = 1;
        }
        cr_assert(cut || now_ms() - start < ACK_TIMEOUT_MS, "%s: no cut point after %d ms (%d acks)", what,
                  ACK_TIMEOUT_MS, lines);
        struct pollfd p = {out, POLLIN, 0};
        int wait_ms = cut ? 1000 : cut_at_ack ? 100 : (int)(delay_ms - (now_ms() - start));
        if (poll(&p, 1, wait_ms < 1 ? 1 : wait_ms) <= 0) continue;
        if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t n = read(out, buf + len, cap - len);
        if (n < 0 && errno == EINTR) continue;
        cr_assert(n >= 0, "%s: reading the child: %s", what, strerror(errno));
        if (n == 0) {
            eof = 1;
            break;
        }
        len += (size_t)n;
        char *nl, *p0 = buf;
        while ((nl = memchr(p0, '\n', len - (size_t)(p0 - buf)))) {
            cr_assert(strncmp(p0, "ack ", 4) == 0, "%s: the child printed '%.*s'", what, (int)(nl - p0), p0);
            fwrite(p0, 1, (size_t)(nl - p0 + 1), af);
            lines++;
            p0 = nl + 1;
        }
        len -= (size_t)(p0 - buf);
        memmove(buf, p0, len);
    }
    /* a last line without its newline was cut short by the kill: never acknowledged */
    free(buf);
    close(out);
    fclose(af);
    cr_assert(cut, "%s: the child ended before the cut; its stderr:\n%s", what, slurp(cerr));
    int st = proc_wait(pid);
    cr_assert(st == 128 + SIGKILL || st == 2, "%s: the child ended with %d; its stderr:\n%s", what, st, slurp(cerr));
    pcfs_stop(&fs);

    pcfs fs2;
    pcfs_start(&fs2, backing, mnt2, "drop", 0, fs2e);
    snprintf(data, sizeof data, "%s/data", mnt2);
    char *ver[] = {child, "verify-acks", data, acks, NULL};
    int rc = proc_wait(spawn(ver, NULL, vout, verr, SIGKILL, NULL));
    pcfs_stop(&fs2);
    char *vo = slurp(vout);
    unsigned long long h = 0, r = 0, l = 0;
    cr_assert(rc == 0 || rc == 1, "%s: verify-acks failed (%d): %s\n%s", what, rc, vo, slurp(verr));
    cr_assert_eq(sscanf(vo, "verify-acks: %llu handles, %llu records checked, %llu handles lost", &h, &r, &l), 3,
                 "%s: verify-acks printed '%s'", what, vo);
    cr_assert_eq(h, (unsigned long long)lines, "%s: %d acks read, verify-acks checked %llu", what, lines, h);
    cr_assert_eq(rc == 1, l > 0, "%s: verify-acks exit %d with %llu lost", what, rc, l);
    if (!expect_loss)
        cr_assert_eq(rc, 0, "%s: %llu of %llu acknowledged handles lost after the power cut:\n%s", what, l, h,
                     slurp(verr));
    free(vo);
    t->trials++;
    t->direct += direct;
    t->losing_trials += rc == 1;
    t->at_ack += cut_at_ack;
    t->no_ack += h == 0;
    t->handles += h;
    t->records += r;
    t->lost += l;
    t->ms += now_ms() - t0;
    t_rm_rf(dir);
    free(dir);
    return rc;
}

static uint64_t seed0(void)
{
    return (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
}

static void engine_trials(const char *engine)
{
    static const char *const modes[] = {"drop", "prefix", "tear"};
    int n = getenv("DSTL_SOAK") ? SOAK_TRIALS_PER_ENGINE : TRIALS_PER_ENGINE;
    t_engine_or_skip(engine);
    uint64_t rnd = seed0();
    tally t = {0};
    cr_log_info("power cut %s: %d trials, seed %" PRIu64, engine, n, rnd);
    /* dstl.io.direct on in every other pair of trials: each setting meets both kinds of cut */
    for (int i = 0; i < n; i++)
        trial(tool("crash_child"), engine, (i / 2) % 2, modes[i % 3], i % 2 == 0, &rnd, &t, 0);
    cr_log_info("power cut %s: %d trials (%d with dstl.io.direct, %d cut right after an ack, %d after a delay, "
                "%d before any ack), %" PRIu64 " acknowledged handles and %" PRIu64 " records checked, %" PRIu64
                " lost, %.1f s",
                engine, t.trials, t.direct, t.at_ack, t.trials - t.at_ack, t.no_ack, t.handles, t.records, t.lost,
                (double)t.ms / 1000);
    cr_assert_gt(t.direct, 0);
    cr_assert_lt(t.direct, t.trials);
    cr_assert_eq(t.lost, 0);
}

Test(dstl_powercut, io_uring_loses_nothing_acknowledged, .fini = end_procs, .timeout = 1100)
{
    engine_trials("io_uring");
}

Test(dstl_powercut, libaio_loses_nothing_acknowledged, .fini = end_procs, .timeout = 1100)
{
    engine_trials("libaio");
}

Test(dstl_powercut, psync_loses_nothing_acknowledged, .fini = end_procs, .timeout = 1100)
{
    engine_trials("psync");
}

/* Trials with a child whose store skips one sync, until one loses an acknowledged record. */
static void bite(const char *variant)
{
    static const char *const engines[] = {"io_uring", "libaio", "psync"};
    for (size_t k = 0; k < sizeof engines / sizeof engines[0]; k++) t_engine_or_skip(engines[k]);
    uint64_t rnd = seed0();
    tally t = {0};
    int i;
    for (i = 0; i < BITE_TRIALS && t.losing_trials == 0; i++) trial(tool(variant), engines[i % 3], i % 2, "drop", 1, &rnd, &t, 1);
    cr_log_info("power cut with %s: %d trial(s) until a loss; %" PRIu64 " of %" PRIu64 " acknowledged handles lost",
                variant, t.trials, t.lost, t.handles);
    cr_assert_gt(t.losing_trials, 0, "%d trials with %s lost no acknowledged record: the simulator forgives the "
                 "missing sync", t.trials, variant);
}

Test(dstl_powercut, skipped_segment_fdatasync_loses_acknowledged_records, .fini = end_procs, .timeout = 600)
{
    bite("crash_child-skip-fdatasync");
}

Test(dstl_powercut, skipped_directory_fsync_loses_acknowledged_records, .fini = end_procs, .timeout = 600)
{
    bite("crash_child-skip-dirsync");
}

/* ---- the simulator itself ------------------------------------------------------------------- */

static char fs_dir[4096];
static pcfs fs_cur;
static int fs_gen;

static void fs_setup(void)
{
    char *d = t_mkdtemp("pcfs");
    cr_assert(d);
    snprintf(fs_dir, sizeof fs_dir, "%s", d);
    free(d);
    char b[4200];
    snprintf(b, sizeof b, "%s/backing", fs_dir);
    cr_assert_eq(mkdir(b, 0755), 0);
}

static void fs_teardown(void)
{
    end_procs();
    t_rm_rf(fs_dir);
}

/* Mounts a new daemon on the fixture's backing dir (a fresh mount point each time). */
static const char *fs_mount(const char *mode, uint64_t seed)
{
    char b[4200], m[4200], e[4200];
    snprintf(b, sizeof b, "%s/backing", fs_dir);
    snprintf(m, sizeof m, "%s/mnt%d", fs_dir, fs_gen);
    snprintf(e, sizeof e, "%s/fs%d.err", fs_dir, fs_gen++);
    pcfs_start(&fs_cur, b, m, mode, seed, e);
    return fs_cur.mnt;
}

/* Cut (or not), stop, and mount again: what survived. */
static const char *fs_cycle(int cut)
{
    if (cut) pcfs_cut(&fs_cur);
    pcfs_stop(&fs_cur);
    return fs_mount("drop", 0);
}

static const char *at(const char *mnt, const char *name)
{
    static char path[4][4200];
    static int k;
    char *p = path[k++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", mnt, name);
    return p;
}

static int put(const char *path, const char *text, int sync)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    cr_assert(fd >= 0, "open %s: %s", path, strerror(errno));
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text), "write %s: %s", path, strerror(errno));
    if (sync) cr_assert_eq(fdatasync(fd), 0, "fdatasync %s: %s", path, strerror(errno));
    return close(fd);
}

static void sync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    cr_assert(fd >= 0, "open %s: %s", path, strerror(errno));
    cr_assert_eq(fsync(fd), 0, "fsync %s: %s", path, strerror(errno));
    close(fd);
}

/* The file's content, or NULL when it does not exist. */
static char *content(const char *path)
{
    size_t len;
    char *s = t_read_file(path, &len);
    if (!s) return NULL;
    char *z = realloc(s, len + 1);
    z[len] = '\0';
    return z;
}

static void expect_content(const char *path, const char *want)
{
    char *got = content(path);
    if (!want) {
        cr_assert_null(got, "%s exists after the cut ('%s'); it should be gone", path, got);
        return;
    }
    cr_assert_not_null(got, "%s is gone after the cut; want '%s'", path, want);
    cr_assert_str_eq(got, want, "%s after the cut", path);
    free(got);
}

TestSuite(tools_powercut, .init = fs_setup, .fini = fs_teardown, .timeout = 120);

Test(tools_powercut, unsynced_write_is_lost_synced_write_survives)
{
    const char *m = fs_mount("drop", 1);
    put(at(m, "a"), "", 0);
    put(at(m, "b"), "", 0);
    sync_dir(m);
    put(at(m, "a"), "durable", 1);
    put(at(m, "a"), "+lost", 0);
    put(at(m, "b"), "lost", 0);
    expect_content(at(m, "a"), "durable+lost");
    m = fs_cycle(1);
    expect_content(at(m, "a"), "durable");
    expect_content(at(m, "b"), "");
}

Test(tools_powercut, new_name_needs_a_directory_fsync)
{
    const char *m = fs_mount("drop", 1);
    put(at(m, "f"), "synced data, unsynced name", 1);
    cr_assert_eq(mkdir(at(m, "d"), 0755), 0);
    sync_dir(m);
    put(at(m, "d/g"), "in d, d not synced", 1);
    cr_assert_eq(mkdir(at(m, "d/sub"), 0755), 0);
    put(at(m, "later"), "x", 1);   /* created after the root's fsync */
    m = fs_cycle(1);
    expect_content(at(m, "f"), "synced data, unsynced name");
    expect_content(at(m, "later"), NULL);
    struct stat st;
    cr_assert_eq(stat(at(m, "d"), &st), 0, "d was synced into the root");
    expect_content(at(m, "d/g"), NULL);
    cr_assert_neq(stat(at(m, "d/sub"), &st), 0, "d/sub exists, but d was never synced");
    /* now sync d too */
    put(at(m, "d/g"), "in d, d synced", 1);
    sync_dir(at(m, "d"));
    m = fs_cycle(1);
    expect_content(at(m, "d/g"), "in d, d synced");
}

Test(tools_powercut, unlink_and_rename_need_a_directory_fsync)
{
    const char *m = fs_mount("drop", 1);
    put(at(m, "a"), "A", 1);
    put(at(m, "b"), "B", 1);
    cr_assert_eq(mkdir(at(m, "d"), 0755), 0);
    sync_dir(m);
    cr_assert_eq(unlink(at(m, "a")), 0);
    cr_assert_eq(rename(at(m, "b"), at(m, "d/b2")), 0);
    m = fs_cycle(1);
    expect_content(at(m, "a"), "A");
    expect_content(at(m, "b"), "B");
    expect_content(at(m, "d/b2"), NULL);
    /* the rename is durable only once both directories are synced */
    cr_assert_eq(unlink(at(m, "a")), 0);
    cr_assert_eq(rename(at(m, "b"), at(m, "d/b2")), 0);
    sync_dir(at(m, "d"));
    m = fs_cycle(1);
    expect_content(at(m, "a"), "A");
    expect_content(at(m, "b"), "B");
    expect_content(at(m, "d/b2"), "B");
    cr_assert_eq(unlink(at(m, "a")), 0);
    cr_assert_eq(rename(at(m, "b"), at(m, "d/b3")), 0);
    sync_dir(m);
    sync_dir(at(m, "d"));
    m = fs_cycle(1);
    expect_content(at(m, "a"), NULL);
    expect_content(at(m, "b"), NULL);
    expect_content(at(m, "d/b3"), "B");
}

Test(tools_powercut, truncate_is_durable_only_after_fsync)
{
    const char *m = fs_mount("drop", 1);
    put(at(m, "t"), "0123456789", 1);
    sync_dir(m);
    cr_assert_eq(truncate(at(m, "t"), 3), 0);
    m = fs_cycle(1);
    expect_content(at(m, "t"), "0123456789");
    int fd = open(at(m, "t"), O_WRONLY | O_TRUNC);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, "new", 3), 3);
    cr_assert_eq(fsync(fd), 0);
    close(fd);
    m = fs_cycle(1);
    expect_content(at(m, "t"), "new");
}

Test(tools_powercut, clean_stop_keeps_the_current_state)
{
    const char *m = fs_mount("drop", 1);
    cr_assert_eq(mkdir(at(m, "d"), 0755), 0);
    put(at(m, "d/never-synced"), "kept by a clean stop", 0);
    m = fs_cycle(0);
    expect_content(at(m, "d/never-synced"), "kept by a clean stop");
    /* and what was loaded counts as durable */
    m = fs_cycle(1);
    expect_content(at(m, "d/never-synced"), "kept by a clean stop");
}

Test(tools_powercut, every_operation_fails_with_eio_after_the_cut)
{
    const char *m = fs_mount("drop", 1);
    int fd = open(at(m, "open"), O_WRONLY | O_CREAT, 0644);
    cr_assert(fd >= 0);
    pcfs_cut(&fs_cur);
    errno = 0;
    cr_assert_eq(write(fd, "x", 1), -1);
    cr_assert_eq(errno, EIO, "write after the cut: %s", strerror(errno));
    errno = 0;
    cr_assert_eq(fdatasync(fd), -1);
    cr_assert_eq(errno, EIO, "fdatasync after the cut: %s", strerror(errno));
    close(fd);
    errno = 0;
    cr_assert_eq(open(at(m, "new"), O_WRONLY | O_CREAT | O_EXCL, 0644), -1);
    cr_assert_eq(errno, EIO, "create after the cut: %s", strerror(errno));
    errno = 0;
    cr_assert_eq(mkdir(at(m, "dir"), 0755), -1);
    cr_assert_eq(errno, EIO, "mkdir after the cut: %s", strerror(errno));
    errno = 0;
    int dfd = open(m, O_RDONLY | O_DIRECTORY);
    cr_assert(dfd < 0 || (fsync(dfd) == -1 && errno == EIO), "fsync of the root after the cut: %s", strerror(errno));
    if (dfd >= 0) close(dfd);
    m = fs_cycle(0);
    expect_content(at(m, "open"), NULL);
}

Test(tools_powercut, unlinked_open_file_has_nlink_zero_and_stays_usable)
{
    const char *m = fs_mount("drop", 1);
    int fd = open(at(m, "u"), O_RDWR | O_CREAT | O_EXCL, 0644);
    cr_assert(fd >= 0);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert_eq(st.st_nlink, 1);
    cr_assert_eq(unlink(at(m, "u")), 0);
    cr_assert_eq(write(fd, "still here", 10), 10);
    cr_assert_eq(fdatasync(fd), 0);
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert_eq(st.st_nlink, 0, "fstat of an unlinked open file: st_nlink %ju", (uintmax_t)st.st_nlink);
    char back[16] = {0};
    cr_assert_eq(pread(fd, back, sizeof back, 0), 10);
    cr_assert_str_eq(back, "still here");
    close(fd);
    errno = 0;
    cr_assert_eq(stat(at(m, "u"), &st), -1);
    cr_assert_eq(errno, ENOENT);
}

Test(tools_powercut, names_are_unique_and_the_control_file_hidden)
{
    const char *m = fs_mount("drop", 1);
    put(at(m, "x"), "1", 0);
    errno = 0;
    cr_assert_eq(open(at(m, "x"), O_WRONLY | O_CREAT | O_EXCL, 0644), -1);
    cr_assert_eq(errno, EEXIST);
    cr_assert_eq(mkdir(at(m, "d"), 0755), 0);
    cr_assert_eq(mkdir(at(m, "d/e"), 0755), 0);
    errno = 0;
    cr_assert_eq(rename(at(m, "d"), at(m, "d/e/f")), -1);
    cr_assert_eq(errno, EINVAL, "a directory into its own subtree: %s", strerror(errno));
    errno = 0;
    cr_assert_eq(rmdir(at(m, "d")), -1);
    cr_assert_eq(errno, ENOTEMPTY);
    put(at(m, "y"), "2", 0);
    errno = 0;
    cr_assert_eq(renameat2(AT_FDCWD, at(m, "y"), AT_FDCWD, at(m, "x"), RENAME_NOREPLACE), -1);
    cr_assert_eq(errno, EEXIST, "RENAME_NOREPLACE over x: %s", strerror(errno));
    cr_assert_eq(rename(at(m, "y"), at(m, "x")), 0);
    expect_content(at(m, "x"), "2");
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "test \"$(ls -A '%s' | tr '\\n' ' ')\" = 'd x '", m);
    cr_assert_eq(system(cmd), 0, "the root lists exactly d and x (not .powercut)");
}

/* The library flocks lock files (dstl/read/cache.c): the kernel keeps those locks for us. */
Test(tools_powercut, flock_works_and_stays_in_the_kernel)
{
    const char *m = fs_mount("drop", 1);
    int a = open(at(m, "lock"), O_RDWR | O_CREAT, 0600), b = open(at(m, "lock"), O_RDWR);
    cr_assert(a >= 0 && b >= 0);
    cr_assert_eq(flock(a, LOCK_EX | LOCK_NB), 0, "flock: %s", strerror(errno));
    errno = 0;
    cr_assert_eq(flock(b, LOCK_EX | LOCK_NB), -1);
    cr_assert_eq(errno, EWOULDBLOCK);
    close(a);
    cr_assert_eq(flock(b, LOCK_EX | LOCK_NB), 0, "flock after the holder closed: %s", strerror(errno));
    close(b);
}

/* Unsynced writes of 16 chunks of one page (chunk i all 'a' + i) after a synced empty file. A
 * page each, so that the kernel sends each as one write (it splits writes at page boundaries). */
#define CHUNK 4096
static void chunked(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    cr_assert(fd >= 0);
    cr_assert_eq(fsync(fd), 0);
    char chunk[CHUNK];
    for (int i = 0; i < 16; i++) {
        memset(chunk, 'a' + i, sizeof chunk);
        cr_assert_eq(write(fd, chunk, sizeof chunk), (ssize_t)sizeof chunk);
    }
    close(fd);
}

/* Checks that s (len bytes) is chunked()'s content cut at len; returns the whole chunks. */
static size_t check_prefix(const char *s, size_t len)
{
    cr_assert_leq(len, 16 * CHUNK);
    for (size_t i = 0; i < len; i++)
        cr_assert_eq(s[i], 'a' + (int)(i / CHUNK), "byte %zu is '%c'", i, s[i]);
    return len / CHUNK;
}

static void prefix_or_tear(const char *mode)
{
    int strict = 0, torn = 0;
    uint64_t seed;
    for (seed = 1; seed <= 12 && !(strict && (torn || strcmp(mode, "tear"))); seed++) {
        const char *m = fs_mount(mode, seed);
        chunked(at(m, "c"));
        sync_dir(m);
        m = fs_cycle(1);
        size_t len;
        char *s = t_read_file(at(m, "c"), &len);
        cr_assert_not_null(s, "the file's name was synced");
        size_t whole = check_prefix(s, len);
        if (!strcmp(mode, "prefix")) cr_assert_eq(len % CHUNK, 0, "mode prefix (seed %" PRIu64 "): %zu bytes", seed, len);
        if (len % CHUNK) torn = 1;
        if (whole > 0 && whole < 16) strict = 1;
        free(s);
        pcfs_stop(&fs_cur);
        char b[4200];
        snprintf(b, sizeof b, "%s/backing/c", fs_dir);
        cr_assert_eq(unlink(b), 0);
    }
    cr_log_info("mode %s: %" PRIu64 " seeds until a strict prefix%s", mode, seed - 1,
                strcmp(mode, "tear") ? "" : " and a torn write");
    cr_assert(strict, "mode %s kept no strict prefix of 16 unsynced writes in 12 seeds", mode);
    if (!strcmp(mode, "tear")) cr_assert(torn, "mode tear tore no write in 12 seeds");
}

Test(tools_powercut, prefix_mode_keeps_a_prefix_of_the_unsynced_writes)
{
    prefix_or_tear("prefix");
}

Test(tools_powercut, tear_mode_also_tears_the_next_write)
{
    prefix_or_tear("tear");
}

Test(tools_powercut, drop_mode_keeps_none_of_the_unsynced_writes)
{
    for (uint64_t seed = 1; seed <= 3; seed++) {
        const char *m = fs_mount("drop", seed);
        chunked(at(m, "c"));
        sync_dir(m);
        m = fs_cycle(1);
        expect_content(at(m, "c"), "");
        pcfs_stop(&fs_cur);
        char b[4200];
        snprintf(b, sizeof b, "%s/backing/c", fs_dir);
        cr_assert_eq(unlink(b), 0);
    }
}
