/*
 * tests/test_dstl_ioeng.c — the I/O front end and its engines (io_uring, libaio, psync) and the
 * fault wrapper: whole buffers written and synced, read back byte for byte; many operations in
 * flight beyond the queue depth; completions only through ioeng_reap; short writes finished
 * transparently; injected errors reported with the step that failed.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dstl/err.h"
#include "dstl/local/ioeng.h"
#include "tests/helpers_cmd.h"
#include "tests/helpers_dstl.h"
#include "tests/payload.h"

static const char *const engines[] = {"io_uring", "libaio", "psync"};
#define N_ENGINES (sizeof engines / sizeof engines[0])

static char tmp_dir[64];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void setup(void)
{
    strcpy(tmp_dir, "/tmp/dstl-ioeng-XXXXXX");
    cr_assert_not_null(mkdtemp(tmp_dir));
}

static void teardown(void) { nftw(tmp_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

TestSuite(dstl_ioeng, .init = setup, .fini = teardown, .timeout = 60);

static int open_file(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
    return fd;
}

/* The bytes of test buffer `seed` (tests/payload.h). */
static void fill(unsigned char *buf, size_t len, unsigned seed) { payload_fill(PAYLOAD_RANDOM, seed, 0, buf, len); }

/* The file's bytes equal buf[0, len) and it is exactly len long. */
static void expect_content(int fd, const unsigned char *buf, size_t len, const char *what)
{
    unsigned char *got = malloc(len + 1);
    ssize_t n = pread(fd, got, len + 1, 0);
    cr_assert_eq(n, (ssize_t)len, "%s: file holds %zd bytes, expected %zu", what, n, len);
    cr_assert(memcmp(got, buf, len) == 0, "%s: content differs", what);
    free(got);
}

/* The engine `name`, or the test is skipped when the kernel lacks it (t_engine_or_skip). */
static ioeng *open_engine(const char *name, unsigned depth, struct ioeng_fault *f)
{
    t_engine_or_skip(name);
    struct ioeng_opts o = {.engine = name, .queue_depth = depth, .fault = f};
    ioeng *e = NULL;
    int rc = ioeng_open(&o, &e);
    cr_assert_eq(rc, 0, "open %s: %s", name, dstl_last_error());
    return e;
}

/* Reaps until n completions are in out (indexed by tag). */
static void reap_all(ioeng *e, struct ioeng_cqe *by_tag, unsigned n)
{
    unsigned got = 0;
    struct ioeng_cqe cq[16];
    while (got < n) {
        int k = ioeng_reap(e, cq, 16, 1);
        cr_assert_geq(k, 0, "reap: %s", dstl_last_error());
        cr_assert(k > 0 || ioeng_pending(e) > 0, "nothing pending but %u of %u reaped", got, n);
        for (int i = 0; i < k; i++) {
            cr_assert_lt(cq[i].tag, n);
            by_tag[cq[i].tag] = cq[i];
            got++;
        }
    }
    cr_assert_eq(ioeng_pending(e), 0);
}

/* Writes n files of varied sizes with write+fdatasync through engine, checks every byte. */
static void write_files(const char *engine, unsigned depth, unsigned n, struct ioeng_fault *f)
{
    static const size_t sizes[] = {1, 4096, 4097, 65536, 100000, (1u << 20) + 7};
    ioeng *e = open_engine(engine, depth, f);
    int *fds = calloc(n, sizeof *fds);
    unsigned char **bufs = calloc(n, sizeof *bufs);
    size_t *lens = calloc(n, sizeof *lens);
    struct ioeng_cqe *res = calloc(n, sizeof *res);
    for (unsigned i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s-%u", engine, i);
        fds[i] = open_file(name);
        lens[i] = sizes[i % (sizeof sizes / sizeof sizes[0])];
        bufs[i] = malloc(lens[i]);
        fill(bufs[i], lens[i], i);
        cr_assert_eq(ioeng_write(e, fds[i], bufs[i], lens[i], 0, IOENG_WRITE_FDATASYNC, i), 0);
    }
    cr_assert_eq(ioeng_submit(e), 0, "%s submit: %s", engine, dstl_last_error());
    cr_assert_eq(ioeng_pending(e), n);
    reap_all(e, res, n);
    for (unsigned i = 0; i < n; i++) {
        cr_assert_eq(res[i].res, 0, "%s op %u: %s", engine, i, strerror(-res[i].res));
        cr_assert_eq(res[i].written, lens[i], "%s op %u", engine, i);
        cr_assert_eq(res[i].stage, IOENG_OP_FDATASYNC);
        expect_content(fds[i], bufs[i], lens[i], engine);
        close(fds[i]);
        free(bufs[i]);
    }
    ioeng_close(e);
    free(fds), free(bufs), free(lens), free(res);
}

Test(dstl_ioeng, writes_and_syncs_read_back_on_every_engine)
{
    for (size_t k = 0; k < N_ENGINES; k++) write_files(engines[k], 0, 12, NULL);
}

Test(dstl_ioeng, many_in_flight_beyond_queue_depth)
{
    /* depth 4: two write+fdatasync pairs in the kernel at once, the rest in the backlog */
    for (size_t k = 0; k < N_ENGINES; k++) write_files(engines[k], 4, 64, NULL);
}

Test(dstl_ioeng, fsync_and_fdatasync_operations)
{
    for (size_t k = 0; k < N_ENGINES; k++) {
        ioeng *e = open_engine(engines[k], 0, NULL);
        int dfd = open(tmp_dir, O_RDONLY | O_DIRECTORY);
        int fd = open_file("f");
        cr_assert_eq(ioeng_fsync(e, dfd, 0), 0);
        cr_assert_eq(ioeng_fdatasync(e, fd, 1), 0);
        cr_assert_eq(ioeng_write(e, fd, "", 0, 0, IOENG_WRITE_FDATASYNC, 2), 0); /* empty */
        cr_assert_eq(ioeng_submit(e), 0);
        struct ioeng_cqe r[3];
        reap_all(e, r, 3);
        cr_assert_eq(r[0].res, 0, "%s: %s", engines[k], strerror(-r[0].res));
        cr_assert_eq(r[0].stage, IOENG_OP_FSYNC);
        cr_assert_eq(r[1].res, 0);
        cr_assert_eq(r[1].stage, IOENG_OP_FDATASYNC);
        cr_assert_eq(r[2].res, 0);
        cr_assert_eq(r[2].written, 0);
        close(fd);
        close(dfd);
        ioeng_close(e);
    }
}

Test(dstl_ioeng, completions_only_through_reap_and_event_fd_signals_them)
{
    for (size_t k = 0; k < N_ENGINES; k++) {
        ioeng *e = open_engine(engines[k], 0, NULL);
        int fd = open_file("g");
        static const char msg[] = "hello, segment";
        cr_assert_eq(ioeng_write(e, fd, msg, sizeof msg, 0, 0, 7), 0);
        cr_assert_eq(ioeng_submit(e), 0);
        /* Even psync, which wrote at submit, hands the completion out only here. */
        cr_assert_eq(ioeng_pending(e), 1, "%s", engines[k]);
        struct pollfd p = {.fd = ioeng_event_fd(e), .events = POLLIN};
        cr_assert_eq(poll(&p, 1, 10000), 1, "%s: eventfd never became readable", engines[k]);
        struct ioeng_cqe c;
        int n = 0;
        for (int i = 0; i < 1000 && n == 0; i++) {
            n = ioeng_reap(e, &c, 1, 0);
            if (n == 0) poll(&p, 1, 10);
        }
        cr_assert_eq(n, 1);
        cr_assert_eq(c.tag, 7);
        cr_assert_eq(c.res, 0);
        cr_assert_eq(c.stage, IOENG_OP_WRITE);
        cr_assert_eq(ioeng_pending(e), 0);
        /* Drained: the eventfd is quiet until something new happens. */
        cr_assert_eq(poll(&p, 1, 0), 0, "%s: eventfd still readable after reap", engines[k]);
        close(fd);
        ioeng_close(e);
    }
}

Test(dstl_ioeng, unknown_engine_is_rejected_with_its_name)
{
    struct ioeng_opts o = {.engine = "posix-aio"};
    ioeng *e = NULL;
    cr_assert_eq(ioeng_open(&o, &e), -EINVAL);
    cr_assert_null(e);
    cr_assert(strstr(dstl_last_error(), "posix-aio"), "detail: %s", dstl_last_error());
}

Test(dstl_ioeng, short_writes_are_finished_transparently)
{
    for (size_t k = 0; k < N_ENGINES; k++) {
        struct ioeng_fault *f;
        cr_assert_eq(ioeng_fault_new(&f), 0);
        /* Writes 2-4 (4096, 4097, 65536 bytes) come back half done: the rest must be written,
         * and (io_uring) the fdatasync that ran behind the half write must not count. */
        for (unsigned nth = 2; nth <= 4; nth++)
            cr_assert_eq(ioeng_fault_add(f, IOENG_OP_WRITE, nth, IOENG_FAULT_SHORT), 0);
        write_files(engines[k], 0, 6, f);
        cr_assert_eq(ioeng_fault_fired(f), 3, "%s", engines[k]);
        cr_assert_eq(ioeng_fault_requests(f, IOENG_OP_WRITE), 6 + 3, "%s", engines[k]);
        /* io_uring links an fdatasync behind each write that should finish the buffer; behind
         * a short one it ran too early and a new one must follow the rest. */
        unsigned syncs = strcmp(engines[k], "io_uring") == 0 ? 6 + 3 : 6;
        cr_assert_eq(ioeng_fault_requests(f, IOENG_OP_FDATASYNC), syncs, "%s: %u syncs", engines[k],
                     ioeng_fault_requests(f, IOENG_OP_FDATASYNC));
        ioeng_fault_free(f);
    }
}

/* One write+fdatasync of 8 KiB with fault rule (kind, 1, result); returns its completion. */
static struct ioeng_cqe one_faulted_write(const char *engine, int kind, int result)
{
    struct ioeng_fault *f;
    cr_assert_eq(ioeng_fault_new(&f), 0);
    cr_assert_eq(ioeng_fault_add(f, kind, 1, result), 0);
    ioeng *e = open_engine(engine, 0, f);
    cr_assert(strstr(ioeng_name(e), "fault("), "name %s", ioeng_name(e));
    int fd = open_file("faulted");
    static unsigned char buf[8192];
    fill(buf, sizeof buf, 3);
    cr_assert_eq(ioeng_write(e, fd, buf, sizeof buf, 0, IOENG_WRITE_FDATASYNC, 0), 0);
    cr_assert_eq(ioeng_submit(e), 0);
    struct ioeng_cqe c;
    reap_all(e, &c, 1);
    cr_assert_eq(ioeng_fault_fired(f), 1);
    ioeng_close(e);
    ioeng_fault_free(f);
    close(fd);
    return c;
}

Test(dstl_ioeng, write_errors_report_the_write_stage)
{
    static const int errs[] = {-ENOSPC, -EIO};
    for (size_t k = 0; k < N_ENGINES; k++) {
        for (size_t i = 0; i < 2; i++) {
            struct ioeng_cqe c = one_faulted_write(engines[k], IOENG_OP_WRITE, errs[i]);
            cr_assert_eq(c.res, errs[i], "%s: got %d", engines[k], c.res);
            cr_assert_eq(c.stage, IOENG_OP_WRITE);
            cr_assert_lt(c.written, 8192);
        }
    }
}

Test(dstl_ioeng, fdatasync_error_reports_the_sync_stage)
{
    for (size_t k = 0; k < N_ENGINES; k++) {
        struct ioeng_cqe c = one_faulted_write(engines[k], IOENG_OP_FDATASYNC, -EIO);
        cr_assert_eq(c.res, -EIO, "%s: got %d", engines[k], c.res);
        cr_assert_eq(c.stage, IOENG_OP_FDATASYNC);
        cr_assert_eq(c.written, 8192, "the write itself succeeded");
    }
}

Test(dstl_ioeng, fault_script_counts_first_requests_and_rejects_bad_rules)
{
    struct ioeng_fault *f;
    cr_assert_eq(ioeng_fault_new(&f), 0);
    cr_assert_eq(ioeng_fault_add(f, IOENG_OP_FDATASYNC, 1, IOENG_FAULT_SHORT), -EINVAL);
    cr_assert_eq(ioeng_fault_add(f, IOENG_OP_WRITE, 0, -EIO), -EINVAL);
    cr_assert_eq(ioeng_fault_add(f, 99, 1, -EIO), -EINVAL);
    cr_assert(strstr(dstl_last_error(), "kind 99"), "detail: %s", dstl_last_error());
    /* the 2nd write is short: its continuation is not counted as a 3rd write */
    cr_assert_eq(ioeng_fault_add(f, IOENG_OP_WRITE, 2, IOENG_FAULT_SHORT), 0);
    write_files("psync", 0, 3, f);
    cr_assert_eq(ioeng_fault_seen(f, IOENG_OP_WRITE), 3);
    cr_assert_eq(ioeng_fault_seen(f, IOENG_OP_FDATASYNC), 3);
    cr_assert_eq(ioeng_fault_fired(f), 1);
    for (unsigned i = 1; i < IOENG_FAULT_RULES_MAX; i++)
        cr_assert_eq(ioeng_fault_add(f, IOENG_OP_WRITE, 100 + i, -EIO), 0);
    cr_assert_eq(ioeng_fault_add(f, IOENG_OP_WRITE, 1000, -EIO), -ENOSPC);
    ioeng_fault_free(f);
}

/* A partial submit cuts the first write from its linked fdatasync (IOENG_FAULT_SPLIT: the write
 * reaches the kernel alone, the fdatasync later, unlinked, after the write looks complete). That
 * fdatasync may have run beside the write, so it must not count: the operation issues a fresh
 * one once the write is complete, and only then succeeds. Engines that do not link have no
 * chain to cut: their fdatasync always follows the completed write, and there is one. */
Test(dstl_ioeng, fdatasync_split_from_its_write_is_issued_again)
{
    for (size_t k = 0; k < N_ENGINES; k++) {
        int links = strcmp(engines[k], "io_uring") == 0;
        struct ioeng_cqe c = {0};
        struct ioeng_fault *f;
        cr_assert_eq(ioeng_fault_new(&f), 0);
        cr_assert_eq(ioeng_fault_add(f, IOENG_OP_WRITE, 1, IOENG_FAULT_SPLIT), 0);
        ioeng *e = open_engine(engines[k], 0, f);
        int fd = open_file("split");
        static unsigned char buf[8192];
        fill(buf, sizeof buf, 5);
        cr_assert_eq(ioeng_write(e, fd, buf, sizeof buf, 0, IOENG_WRITE_FDATASYNC, 0), 0);
        cr_assert_eq(ioeng_submit(e), 0, "%s: %s", engines[k], dstl_last_error());
        reap_all(e, &c, 1);
        cr_expect_eq(c.res, 0, "%s: %s", engines[k], strerror(-c.res));
        cr_expect_eq(c.stage, IOENG_OP_FDATASYNC, "%s", engines[k]);
        cr_expect_eq(c.written, sizeof buf, "%s", engines[k]);
        expect_content(fd, buf, sizeof buf, engines[k]);
        cr_expect_eq(ioeng_fault_fired(f), links ? 1u : 0u, "%s", engines[k]);
        cr_expect_eq(ioeng_fault_requests(f, IOENG_OP_WRITE), 1, "%s", engines[k]);
        cr_expect_eq(ioeng_fault_requests(f, IOENG_OP_FDATASYNC), links ? 2u : 1u,
                     "%s: %u fdatasyncs (the split one must not count for the write)", engines[k],
                     ioeng_fault_requests(f, IOENG_OP_FDATASYNC));
        ioeng_close(e);
        ioeng_fault_free(f);
        close(fd);
    }
}

/* Splits among many operations in flight beyond the queue depth, and a split of a write that the
 * kernel also cuts short: every file is whole, and each split or short write costs one more
 * fdatasync on io_uring. */
Test(dstl_ioeng, split_chains_among_many_operations_read_back)
{
    for (size_t k = 0; k < N_ENGINES; k++) {
        int links = strcmp(engines[k], "io_uring") == 0;
        struct ioeng_fault *f;
        cr_assert_eq(ioeng_fault_new(&f), 0);
        for (unsigned nth = 2; nth <= 10; nth += 2)
            cr_assert_eq(ioeng_fault_add(f, IOENG_OP_WRITE, nth, IOENG_FAULT_SPLIT), 0);
        cr_assert_eq(ioeng_fault_add(f, IOENG_OP_WRITE, 5, IOENG_FAULT_SHORT), 0);
        write_files(engines[k], 4, 24, f);
        cr_expect_eq(ioeng_fault_fired(f), links ? 6u : 1u, "%s", engines[k]);
        cr_expect_eq(ioeng_fault_requests(f, IOENG_OP_WRITE), 24 + 1, "%s", engines[k]);
        unsigned syncs = links ? 24 + 5 + 1 : 24;
        cr_expect_eq(ioeng_fault_requests(f, IOENG_OP_FDATASYNC), syncs, "%s: %u fdatasyncs, want %u",
                     engines[k], ioeng_fault_requests(f, IOENG_OP_FDATASYNC), syncs);
        ioeng_fault_free(f);
    }
}

Test(dstl_ioeng, split_rule_is_for_writes_only)
{
    struct ioeng_fault *f;
    cr_assert_eq(ioeng_fault_new(&f), 0);
    cr_expect_eq(ioeng_fault_add(f, IOENG_OP_FDATASYNC, 1, IOENG_FAULT_SPLIT), -EINVAL);
    cr_expect_eq(ioeng_fault_add(f, IOENG_OP_FSYNC, 1, IOENG_FAULT_SPLIT), -EINVAL);
    cr_expect_eq(ioeng_fault_add(f, IOENG_OP_WRITE, 1, 3), -EINVAL);
    cr_expect_eq(ioeng_fault_add(f, IOENG_OP_WRITE, 1, IOENG_FAULT_SPLIT), 0);
    ioeng_fault_free(f);
}

/* t_engine_or_skip on a kernel without the engine (tests/tools/deny_engines: a seccomp filter
 * makes io_uring_setup or io_setup fail with ENOSYS): this binary runs one of its own tests
 * that needs every engine, and that test is skipped — not failed, not passed — with a reason
 * naming the engine and the errno. */
static void expect_skip_without(const char *denied, const char *engine)
{
    char self[4096], tools[4096], deny[8300];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    cr_assert_gt(n, 0);
    self[n] = '\0';
    const char *t = getenv("DSTL_TEST_TOOLS");
    if (t && *t) snprintf(tools, sizeof tools, "%s", t);
    else snprintf(tools, sizeof tools, "%.*s/../tools", (int)(strrchr(self, '/') - self), self);
    snprintf(deny, sizeof deny, "%s/deny_engines", tools);
    cr_assert_eq(access(deny, X_OK), 0, "%s is missing (build it with make)", deny);
    int st;
    /* BXFI_MAP tells a Criterion binary it is a worker of another: this one must be a runner */
    char *out = t_cmd_run(tmp_dir, &st, "env -u BXFI_MAP '%s' %s '%s' --verbose --short-filename --jobs 1 "
                                        "--filter 'dstl_ioeng/writes_and_syncs_read_back_on_every_engine'",
                          deny, denied, self);
    cr_assert_not_null(out);
    char want[256];
    snprintf(want, sizeof want, "[SKIP] dstl_ioeng::writes_and_syncs_read_back_on_every_engine: I/O engine %s is "
                                "unavailable here: opening a storage on it failed with ENOSYS (-38, ", engine);
    cr_expect_eq(st, 0, "without %s: exit %d:\n%s", denied, st, out);
    cr_expect(strstr(out, want) != NULL, "without %s, no skip naming %s and ENOSYS:\n%s", denied, engine, out);
    cr_expect(strstr(out, "Tested: 0 | Passing: 0 | Failing: 0") != NULL, "without %s:\n%s", denied, out);
    free(out);
}

Test(dstl_ioeng, a_kernel_without_io_uring_skips_naming_it)
{
    expect_skip_without("io_uring", "io_uring");
}

Test(dstl_ioeng, a_kernel_without_linux_aio_skips_naming_it)
{
    expect_skip_without("libaio", "libaio");
}
