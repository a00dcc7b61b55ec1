/*
 * tests/test_dstl_segstore.c — the local segment store on every engine: segments written and
 * acknowledged only through segstore_poll, read back byte for byte; reserved names and grouped
 * directory fsyncs; I/O faults through the engine seam (ENOSPC and EIO on write, EIO on
 * fdatasync and on the directory fsync, short writes) with their details; fail-stop; the
 * any-thread helpers (read_at, size, list, unlink); open and close.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dstl/err.h"
#include "dstl/local/ioeng.h"
#include "dstl/local/segstore.h"
#include "tests/helpers_dstl.h"
#include "tests/payload.h"

static const char *const engines[] = {"io_uring", "libaio", "psync"};
#define N_ENGINES (sizeof engines / sizeof engines[0])

static char tmp_dir[64];
static char store_dir[96];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void setup(void)
{
    strcpy(tmp_dir, "/tmp/dstl-segstore-XXXXXX");
    cr_assert_not_null(mkdtemp(tmp_dir));
    snprintf(store_dir, sizeof store_dir, "%s/segs", tmp_dir);
}

static void teardown(void)
{
    static const char *const mounts[] = {"ram", "small"}; /* a failed direct_auto test's */
    for (size_t i = 0; i < 2; i++) {
        char m[96];
        snprintf(m, sizeof m, "%s/%s", tmp_dir, mounts[i]);
        umount2(m, MNT_DETACH); /* EINVAL where there is none */
    }
    nftw(tmp_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(dstl_segstore, .init = setup, .fini = teardown, .timeout = 60);

/* ---- helpers ----------------------------------------------------------------------------------- */

/* One write's outcome, filled by its callback. */
struct outcome {
    int calls;
    int res;
    char detail[1024];
};

static int in_write; /* set while segstore_write runs: a callback must never see it */

static void on_done(void *ctx, int res, const char *detail)
{
    cr_assert_eq(in_write, 0, "callback ran inside segstore_write");
    struct outcome *o = ctx;
    o->calls++;
    o->res = res;
    snprintf(o->detail, sizeof o->detail, "%s", detail);
    if (res < 0)
        cr_assert_str_eq(dstl_last_error(), detail, "detail is also the thread's last error");
    else
        cr_assert_str_eq(detail, "");
}

/* A store on `engine`, or the test is skipped when the kernel lacks it (t_engine_or_skip). */
static segstore *open_store(const char *engine, struct ioeng_fault *f, unsigned depth)
{
    t_engine_or_skip(engine);
    struct segstore_opts o = {.dir = store_dir, .engine = engine, .fault = f,
                              .queue_depth = depth};
    segstore *s = NULL;
    int rc = segstore_open(&o, &s);
    cr_assert_eq(rc, 0, "open %s: %s", engine, dstl_last_error());
    return s;
}

static int write_seg(segstore *s, const char *name, const void *buf, size_t len,
                     struct outcome *o)
{
    in_write = 1;
    int rc = segstore_write(s, name, buf, len, on_done, o);
    in_write = 0;
    return rc;
}

/* Polls until every outcome in o[0, n) has its callback (bounded by the suite timeout). */
static void wait_for(segstore *s, struct outcome *o, unsigned n)
{
    for (;;) {
        unsigned done = 0;
        for (unsigned i = 0; i < n; i++) {
            cr_assert_leq(o[i].calls, 1, "callback %u ran %d times", i, o[i].calls);
            done += (unsigned)o[i].calls;
        }
        if (done == n) return;
        struct pollfd p = {.fd = segstore_event_fd(s), .events = POLLIN};
        poll(&p, 1, 1000);
        segstore_poll(s);
    }
}

/* Waits until the store has nothing in flight (directory fsyncs of reservations included). */
static void settle(segstore *s)
{
    struct segstore_stats st;
    for (int i = 0; i < 1000; i++) {
        segstore_stats(s, &st);
        segstore_poll(s);
        struct pollfd p = {.fd = segstore_event_fd(s), .events = POLLIN};
        /* Quiet only when no write and no directory fsync is left: a reservation's directory
         * fsync may take longer than one poll timeout on a busy disk. */
        if (poll(&p, 1, 5) == 0 && st.inflight == 0 && !st.dir_pending) return;
    }
}

/* The bytes of test segment `seed` (tests/payload.h). */
static void fill(unsigned char *buf, size_t len, unsigned seed) { payload_fill(PAYLOAD_RANDOM, seed, 0, buf, len); }

static void expect_segment(const char *name, const unsigned char *buf, size_t len)
{
    unsigned char *got = malloc(len + 16);
    ssize_t n = segstore_read_at(store_dir, name, 0, got, len + 16);
    cr_assert_eq(n, (ssize_t)len, "%s: read %zd bytes, expected %zu (%s)", name, n, len,
                 n < 0 ? dstl_last_error() : "");
    cr_assert(memcmp(got, buf, len) == 0, "%s: content differs", name);
    free(got);
}

static int file_exists(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", store_dir, name);
    return access(path, F_OK) == 0;
}

#define N_SEGS 16
static unsigned char seg_bufs[N_SEGS][20000];

static size_t seg_len(unsigned i) { return 4096 + i * 997; }


/* The segment write_segments wrote as number `seg` at position i of its batch. */
static void expect_written(unsigned seg, unsigned i)
{
    unsigned char buf[sizeof seg_bufs[0]];
    char name[64];
    fill(buf, seg_len(i), seg);
    snprintf(name, sizeof name, "seg-%u.seg", seg);
    expect_segment(name, buf, seg_len(i));
}

/* Writes segments seg-<first>.seg .. first+n-1 at once, waits for their callbacks. */
static void write_segments(segstore *s, unsigned first, unsigned n, struct outcome *o)
{
    char name[64];
    for (unsigned i = 0; i < n; i++) {
        snprintf(name, sizeof name, "seg-%u.seg", first + i);
        fill(seg_bufs[i], seg_len(i), first + i);
        cr_assert_eq(write_seg(s, name, seg_bufs[i], seg_len(i), &o[i]), 0, "%s",
                     dstl_last_error());
    }
    for (unsigned i = 0; i < n; i++) cr_assert_eq(o[i].calls, 0, "callback before poll");
    wait_for(s, o, n);
}

/* ---- writes ------------------------------------------------------------------------------------- */

Test(dstl_segstore, writes_segments_on_every_engine)
{
    for (size_t k = 0; k < N_ENGINES; k++) {
        segstore *s = open_store(engines[k], NULL, 0);
        cr_assert_str_eq(segstore_engine(s), engines[k]);
        struct outcome o[N_SEGS] = {0};
        unsigned first = (unsigned)k * 100;
        write_segments(s, first, N_SEGS, o);
        char name[64];
        for (unsigned i = 0; i < N_SEGS; i++) {
            cr_assert_eq(o[i].res, 0, "%s seg %u: %s", engines[k], i, o[i].detail);
            snprintf(name, sizeof name, "seg-%u.seg", first + i);
            expect_segment(name, seg_bufs[i], seg_len(i));
        }
        struct segstore_stats st;
        segstore_stats(s, &st);
        cr_assert_eq(st.writes_ok, N_SEGS);
        cr_assert_eq(st.inflight, 0);
        cr_assert_eq(segstore_failed(s), 0);
        segstore_close(s);
    }
}

Test(dstl_segstore, many_writes_in_flight_beyond_queue_depth)
{
    for (size_t k = 0; k < N_ENGINES; k++) {
        segstore *s = open_store(engines[k], NULL, 4);
        enum { N = 200 };
        static struct outcome o[N];
        static unsigned char bufs[N][512];
        memset(o, 0, sizeof o);
        char name[64];
        for (unsigned i = 0; i < N; i++) {
            fill(bufs[i], sizeof bufs[i], i);
            snprintf(name, sizeof name, "%s-%u.seg", engines[k], i);
            cr_assert_eq(write_seg(s, name, bufs[i], sizeof bufs[i], &o[i]), 0);
        }
        struct segstore_stats st;
        segstore_stats(s, &st);
        cr_assert_eq(st.inflight, N);
        wait_for(s, o, N);
        for (unsigned i = 0; i < N; i++) {
            cr_assert_eq(o[i].res, 0, "%s: %s", engines[k], o[i].detail);
            snprintf(name, sizeof name, "%s-%u.seg", engines[k], i);
            expect_segment(name, bufs[i], sizeof bufs[i]);
        }
        segstore_close(s);
    }
}

Test(dstl_segstore, concurrent_creations_share_directory_fsyncs)
{
    segstore *s = open_store("io_uring", NULL, 0);
    struct outcome o[N_SEGS] = {0};
    write_segments(s, 0, N_SEGS, o);
    struct segstore_stats st;
    segstore_stats(s, &st);
    /* The first creation starts an fsync; the 15 created while it runs share the next one. */
    cr_assert_eq(st.creates, N_SEGS);
    cr_assert_eq(st.dir_fsyncs, 2, "dir fsyncs: %llu", (unsigned long long)st.dir_fsyncs);
    segstore_close(s);
}

Test(dstl_segstore, reserved_names_need_no_directory_fsync_on_write)
{
    for (size_t k = 0; k < N_ENGINES; k++) {
        segstore *s = open_store(engines[k], NULL, 0);
        char name[64];
        unsigned first = (unsigned)k * 100;
        for (unsigned i = 0; i < 8; i++) {
            snprintf(name, sizeof name, "seg-%u.seg", first + i);
            cr_assert_eq(segstore_reserve(s, name), 0, "%s", dstl_last_error());
        }
        settle(s);
        struct segstore_stats before, after;
        segstore_stats(s, &before);
        cr_assert_eq(before.reserved, 8);
        cr_assert_leq(before.dir_fsyncs, 2, "8 reservations, %llu dir fsyncs",
                      (unsigned long long)before.dir_fsyncs);
        struct outcome o[8] = {0};
        write_segments(s, first, 8, o);
        segstore_stats(s, &after);
        for (unsigned i = 0; i < 8; i++) {
            cr_assert_eq(o[i].res, 0, "%s", o[i].detail);
            snprintf(name, sizeof name, "seg-%u.seg", first + i);
            expect_segment(name, seg_bufs[i], seg_len(i));
        }
        cr_assert_eq(after.reserved_hits, 8);
        cr_assert_eq(after.reserved, 0);
        cr_assert_eq(after.dir_fsyncs, before.dir_fsyncs, "%s: a write fsynced the dir",
                     engines[k]);
        cr_assert_eq(after.creates, before.creates);
        segstore_close(s);
    }
}

Test(dstl_segstore, recycled_files_hold_only_the_new_segment)
{
    for (size_t k = 0; k < N_ENGINES; k++) {
        segstore *s = open_store(engines[k], NULL, 0);
        unsigned first = (unsigned)k * 100;
        /* segments of every length in seg_len's range, then each recycled into a later name
         * and a shorter or longer segment written there: the file is that segment alone */
        struct outcome o[N_SEGS] = {0}, o2[N_SEGS] = {0};
        write_segments(s, first, N_SEGS, o);
        char old[64], name[64];
        for (unsigned i = 0; i < N_SEGS; i++) {
            snprintf(old, sizeof old, "seg-%u.seg", first + i);
            snprintf(name, sizeof name, "seg-%u.seg", first + 50 + (N_SEGS - 1 - i));
            cr_assert_eq(segstore_recycle(s, old, name), 0, "%s: %s", engines[k], dstl_last_error());
            cr_assert(!file_exists(old), "%s: %s still there", engines[k], old);
        }
        settle(s);
        struct segstore_stats before, after;
        segstore_stats(s, &before);
        cr_assert_eq(before.recycles, N_SEGS);
        cr_assert_eq(before.reserved, N_SEGS);
        write_segments(s, first + 50, N_SEGS, o2);
        segstore_stats(s, &after);
        for (unsigned i = 0; i < N_SEGS; i++) {
            cr_assert_eq(o2[i].res, 0, "%s", o2[i].detail);
            snprintf(old, sizeof old, "seg-%u.seg", first + i);
            cr_assert(!file_exists(old), "%s: %s came back", engines[k], old);
        }
        for (unsigned i = 0; i < N_SEGS; i++) expect_written(first + 50 + i, i);
        cr_assert_eq(after.reserved_hits - before.reserved_hits, N_SEGS);
        cr_assert_eq(after.creates, before.creates, "%s: a recycled name was created anew", engines[k]);
        segstore_close(s);
    }
}

static long long file_size(const char *name)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", store_dir, name);
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* A recycled file of 1 MiB or more keeps its bytes for the next segment to overwrite (freeing
 * and reallocating a large file's blocks cost more than writing them); a shorter segment
 * written there cuts off the rest, a longer one extends it: either way the file is the new
 * segment alone. Every engine, through the page cache and with O_DIRECT. */
Test(dstl_segstore, large_recycled_files_are_overwritten_and_cut_to_the_new_segment)
{
    enum { MIB = 1 << 20 };
    const size_t old_len[2] = {3 * MIB + 123, 2 * MIB + 5}, new_len[2] = {MIB + MIB / 2 + 77, 2 * MIB + MIB / 2 + 1000};
    unsigned char *buf[2][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            buf[i][j] = aligned_alloc(4096, 4 * MIB);
            fill(buf[i][j], 4 * MIB, (unsigned)(10 * i + j + 1));
        }
    for (size_t k = 0; k < N_ENGINES * 2; k++) {
        t_engine_or_skip(engines[k / 2]);
        struct segstore_opts opts = {.dir = store_dir, .engine = engines[k / 2], .direct = k % 2};
        segstore *s = NULL;
        cr_assert_eq(segstore_open(&opts, &s), 0, "open %s: %s", engines[k / 2], dstl_last_error());
        struct outcome o[2] = {0}, o2[2] = {0};
        char old[2][64], name[2][64];
        for (int i = 0; i < 2; i++) {
            snprintf(old[i], sizeof old[i], "big-%zu-%d.seg", k, i);
            snprintf(name[i], sizeof name[i], "big-%zu-%d.seg", k, i + 2);
            cr_assert_eq(write_seg(s, old[i], buf[0][i], old_len[i], &o[i]), 0, "%s", dstl_last_error());
        }
        wait_for(s, o, 2);
        for (int i = 0; i < 2; i++) {
            cr_assert_eq(o[i].res, 0, "%s", o[i].detail);
            cr_assert_eq(segstore_recycle(s, old[i], name[i]), 0, "%s", dstl_last_error());
            cr_expect_eq(file_size(name[i]), (long long)old_len[i], "%s (%s, direct %zu): the recycled file was "
                         "emptied", name[i], engines[k / 2], k % 2);
        }
        settle(s);
        for (int i = 0; i < 2; i++)
            cr_assert_eq(write_seg(s, name[i], buf[1][i], new_len[i], &o2[i]), 0, "%s", dstl_last_error());
        wait_for(s, o2, 2);
        for (int i = 0; i < 2; i++) {
            cr_assert_eq(o2[i].res, 0, "%s", o2[i].detail);
            expect_segment(name[i], buf[1][i], new_len[i]);   /* its bytes, and not one more */
        }
        segstore_close(s);
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) free(buf[i][j]);
}

static struct ioeng_fault *fault_script(int kind, unsigned nth, int result);

/* A recycled file of up to 64 KiB keeps its bytes too (segstore_reserved_bytes says how many),
 * so that a segment padded to that size overwrites it in place (its fdatasync then has no file
 * size to commit); one between 64 KiB and 1 MiB is emptied as before. Every engine. */
Test(dstl_segstore, small_recycled_files_keep_their_bytes_for_a_segment_of_their_size)
{
    static unsigned char old_buf[3][100000], new_buf[3][100000];
    const size_t old_len[3] = {12288, 65536, 100000}, new_len[3] = {12288, 5000, 12288};
    for (size_t k = 0; k < N_ENGINES; k++) {
        segstore *s = open_store(engines[k], NULL, 0);
        struct outcome o[3] = {0}, o2[3] = {0};
        char old[3][64], name[3][64];
        for (int i = 0; i < 3; i++) {
            fill(old_buf[i], old_len[i], (unsigned)(10 * k + i));
            fill(new_buf[i], new_len[i], (unsigned)(10 * k + i + 5));
            snprintf(old[i], sizeof old[i], "small-%zu-%d.seg", k, i);
            snprintf(name[i], sizeof name[i], "small-%zu-%d.seg", k, i + 3);
            cr_assert_eq(write_seg(s, old[i], old_buf[i], old_len[i], &o[i]), 0, "%s", dstl_last_error());
        }
        wait_for(s, o, 3);
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(o[i].res, 0, "%s", o[i].detail);
            cr_assert_eq(segstore_reserved_bytes(s, name[i]), 0, "not reserved yet");
            cr_assert_eq(segstore_recycle(s, old[i], name[i]), 0, "%s", dstl_last_error());
        }
        cr_assert_eq(segstore_reserved_bytes(s, name[0]), 12288, "%s", engines[k]);
        cr_assert_eq(segstore_reserved_bytes(s, name[1]), 65536, "%s", engines[k]);
        cr_assert_eq(segstore_reserved_bytes(s, name[2]), 0, "%s: 100,000 bytes are emptied", engines[k]);
        expect_segment(name[0], old_buf[0], old_len[0]);   /* the old bytes, until written */
        expect_segment(name[2], old_buf[2], 0);
        for (int i = 0; i < 3; i++)
            cr_assert_eq(write_seg(s, name[i], new_buf[i], new_len[i], &o2[i]), 0, "%s", dstl_last_error());
        wait_for(s, o2, 3);
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(o2[i].res, 0, "%s", o2[i].detail);
            expect_segment(name[i], new_buf[i], new_len[i]);   /* its bytes, and not one more */
            cr_assert_eq(segstore_reserved_bytes(s, name[i]), 0, "written: no longer reserved");
        }
        segstore_close(s);
    }
}

/* Reservations defer their directory fsync (SEGSTORE_DIR_DEFER_MAX): a few reserved names
 * start none; a write into one starts it and is acknowledged only once it succeeded (a failed
 * directory fsync fails that write); DEFER_MAX names start one by themselves, and
 * segstore_sync_reserved starts one for the rest. */
Test(dstl_segstore, reservations_defer_their_directory_fsync_until_a_write_needs_it)
{
    segstore *s = open_store("io_uring", NULL, 0);
    struct segstore_stats st;
    char name[64];
    for (unsigned i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "seg-%u.seg", i);
        cr_assert_eq(segstore_reserve(s, name), 0, "%s", dstl_last_error());
    }
    settle(s);
    segstore_stats(s, &st);
    cr_assert_eq(st.dir_fsyncs, 0, "3 reservations started %llu directory fsyncs", (unsigned long long)st.dir_fsyncs);
    cr_assert(st.dir_deferred && !st.dir_pending);
    struct outcome o[1] = {0};
    write_segments(s, 0, 1, o);
    cr_assert_eq(o[0].res, 0, "%s", o[0].detail);
    segstore_stats(s, &st);
    cr_assert_eq(st.dir_fsyncs, 1, "the write into a reserved name needs its directory fsync");
    settle(s);
    segstore_stats(s, &st);
    cr_assert(!st.dir_deferred, "the names reserved before it are durable with it");
    for (unsigned i = 10; i < 10 + SEGSTORE_DIR_DEFER_MAX; i++) {
        snprintf(name, sizeof name, "seg-%u.seg", i);
        cr_assert_eq(segstore_reserve(s, name), 0, "%s", dstl_last_error());
    }
    settle(s);
    segstore_stats(s, &st);
    cr_assert_eq(st.dir_fsyncs, 2, "%u reservations: one directory fsync, %llu", SEGSTORE_DIR_DEFER_MAX,
                 (unsigned long long)st.dir_fsyncs);
    cr_assert_eq(segstore_reserve(s, "seg-30.seg"), 0, "%s", dstl_last_error());
    segstore_sync_reserved(s);
    settle(s);
    segstore_stats(s, &st);
    cr_assert_eq(st.dir_fsyncs, 3);
    cr_assert(!st.dir_deferred && !st.dir_pending);
    segstore_close(s);

    /* the write's acknowledgement waits for the deferred fsync: failing it fails the write */
    struct ioeng_fault *f = fault_script(IOENG_OP_FSYNC, 1, -EIO);
    s = open_store("io_uring", f, 0);
    cr_assert_eq(segstore_reserve(s, "seg-40.seg"), 0, "%s", dstl_last_error());
    settle(s);
    struct outcome o2[1] = {0};
    write_segments(s, 40, 1, o2);
    cr_assert_eq(o2[0].res, -EIO, "acknowledged without its name's directory fsync");
    cr_assert(strstr(o2[0].detail, "fsync of the directory"), "detail: %s", o2[0].detail);
    segstore_close(s);
    ioeng_fault_free(f);
}

Test(dstl_segstore, recycle_refuses_reservations_missing_files_and_taken_names)
{
    segstore *s = open_store("io_uring", NULL, 0);
    struct outcome o[2] = {0};
    write_segments(s, 0, 2, o);
    cr_assert_eq(segstore_reserve(s, "r.seg"), 0);
    cr_assert_eq(segstore_recycle(s, "r.seg", "x.seg"), -EINVAL, "a reservation recycled");
    cr_assert_eq(segstore_recycle(s, "missing.seg", "y.seg"), -ENOENT);
    cr_assert(strstr(dstl_last_error(), "missing.seg"), "%s", dstl_last_error());
    /* a name on disk is never replaced: seg-1 keeps its bytes */
    cr_assert_eq(segstore_recycle(s, "seg-0.seg", "seg-1.seg"), -EEXIST);
    cr_assert(strstr(dstl_last_error(), "seg-0.seg"), "%s", dstl_last_error());
    expect_written(1, 1);
    cr_assert_eq(segstore_recycle(s, "seg-0.seg", "r.seg"), -EEXIST, "recycled onto a reservation");
    cr_assert_eq(segstore_recycle(s, "seg-0.seg", "../z.seg"), -EINVAL);
    segstore_close(s);
}

Test(dstl_segstore, reserve_rejects_duplicates_bad_names_and_a_full_pool)
{
    segstore *s = open_store("psync", NULL, 0);
    cr_assert_eq(segstore_reserve(s, "a.seg"), 0);
    cr_assert_eq(segstore_reserve(s, "a.seg"), -EEXIST);
    cr_assert(strstr(dstl_last_error(), "a.seg"), "detail: %s", dstl_last_error());
    cr_assert_eq(segstore_reserve(s, "../x.seg"), -EINVAL);
    cr_assert_eq(segstore_reserve(s, ".."), -EINVAL);
    cr_assert_eq(segstore_reserve(s, ""), -EINVAL);
    char name[32];
    for (unsigned i = 1; i < SEGSTORE_RESERVE_MAX; i++) {
        snprintf(name, sizeof name, "r%u.seg", i);
        cr_assert_eq(segstore_reserve(s, name), 0);
    }
    cr_assert_eq(segstore_reserve(s, "one-too-many.seg"), -EAGAIN);
    segstore_close(s);
}

Test(dstl_segstore, close_waits_for_writes_and_removes_unused_reservations)
{
    segstore *s = open_store("io_uring", NULL, 0);
    cr_assert_eq(segstore_reserve(s, "unused.seg"), 0);
    struct outcome o[8] = {0};
    char name[64];
    for (unsigned i = 0; i < 8; i++) {
        snprintf(name, sizeof name, "c%u.seg", i);
        fill(seg_bufs[i], seg_len(i), i);
        cr_assert_eq(write_seg(s, name, seg_bufs[i], seg_len(i), &o[i]), 0);
    }
    cr_assert(file_exists("unused.seg"));
    segstore_close(s); /* no poll: close runs the callbacks */
    for (unsigned i = 0; i < 8; i++) {
        cr_assert_eq(o[i].calls, 1);
        cr_assert_eq(o[i].res, 0, "%s", o[i].detail);
        snprintf(name, sizeof name, "c%u.seg", i);
        expect_segment(name, seg_bufs[i], seg_len(i));
    }
    cr_assert_not(file_exists("unused.seg"), "an unused reservation was left behind");
}

Test(dstl_segstore, existing_name_fails_through_the_callback)
{
    segstore *s = open_store("io_uring", NULL, 0);
    struct outcome o[2] = {0};
    write_segments(s, 0, 1, o);
    cr_assert_eq(o[0].res, 0);
    cr_assert_eq(write_seg(s, "seg-0.seg", "x", 1, &o[1]), 0);
    cr_assert_eq(o[1].calls, 0, "the failure must wait for segstore_poll");
    wait_for(s, &o[1], 1);
    cr_assert_eq(o[1].res, -EEXIST);
    cr_assert(strstr(o[1].detail, "create") && strstr(o[1].detail, "seg-0.seg"), "detail: %s",
              o[1].detail);
    expect_segment("seg-0.seg", seg_bufs[0], seg_len(0)); /* untouched */
    cr_assert_eq(segstore_failed(s), 0);
    cr_assert_eq(segstore_write(s, "a/b.seg", "x", 1, on_done, &o[1]), -EINVAL);
    segstore_close(s);
}

/* ---- faults ------------------------------------------------------------------------------------- */

static struct ioeng_fault *fault_script(int kind, unsigned nth, int result)
{
    struct ioeng_fault *f;
    cr_assert_eq(ioeng_fault_new(&f), 0);
    cr_assert_eq(ioeng_fault_add(f, kind, nth, result), 0);
    return f;
}

Test(dstl_segstore, enospc_fails_that_write_only_and_removes_its_file)
{
    for (size_t k = 0; k < N_ENGINES; k++) {
        struct ioeng_fault *f = fault_script(IOENG_OP_WRITE, 2, -ENOSPC);
        segstore *s = open_store(engines[k], f, 0);
        struct outcome o[3] = {0};
        unsigned first = (unsigned)k * 100;
        write_segments(s, first, 3, o);
        cr_assert_eq(ioeng_fault_fired(f), 1);
        cr_assert_eq(o[0].res, 0, "%s", o[0].detail);
        cr_assert_eq(o[2].res, 0, "%s", o[2].detail);
        cr_assert_eq(o[1].res, -ENOSPC, "%s: %d %s", engines[k], o[1].res, o[1].detail);
        char name[64];
        snprintf(name, sizeof name, "seg-%u.seg", first + 1);
        cr_assert(strstr(o[1].detail, name) && strstr(o[1].detail, "No space left") &&
                  strstr(o[1].detail, "removed"), "detail: %s", o[1].detail);
        cr_assert_not(file_exists(name), "partial file %s left behind", name);
        /* the store goes on */
        cr_assert_eq(segstore_failed(s), 0);
        struct outcome again[1] = {0};
        write_segments(s, first + 1, 1, again);
        cr_assert_eq(again[0].res, 0, "%s", again[0].detail);
        expect_segment(name, seg_bufs[0], seg_len(0));
        segstore_close(s);
        ioeng_fault_free(f);
    }
}

/* After the fault, the store refuses everything with -EIO naming the first failed file, and
 * issues no more I/O: no new write, no fdatasync (so nothing is retried on the failed file). */
static void expect_fail_stop(segstore *s, struct ioeng_fault *f, const char *cause)
{
    cr_assert_eq(segstore_failed(s), -EIO);
    cr_assert(strstr(dstl_last_error(), cause), "failed detail: %s (wanted %s)",
              dstl_last_error(), cause);
    unsigned writes = ioeng_fault_requests(f, IOENG_OP_WRITE);
    unsigned syncs = ioeng_fault_requests(f, IOENG_OP_FDATASYNC);
    struct outcome later[3] = {0};
    write_segments(s, 900, 3, later);
    for (unsigned i = 0; i < 3; i++) {
        cr_assert_eq(later[i].res, -EIO);
        cr_assert(strstr(later[i].detail, "failed since") && strstr(later[i].detail, cause),
                  "detail: %s", later[i].detail);
    }
    cr_assert_eq(ioeng_fault_requests(f, IOENG_OP_WRITE), writes, "I/O after fail-stop");
    cr_assert_eq(ioeng_fault_requests(f, IOENG_OP_FDATASYNC), syncs, "sync after fail-stop");
    cr_assert_eq(segstore_reserve(s, "later.seg"), -EIO);
}

Test(dstl_segstore, fdatasync_eio_is_fail_stop)
{
    for (size_t k = 0; k < N_ENGINES; k++) {
        struct ioeng_fault *f = fault_script(IOENG_OP_FDATASYNC, 2, -EIO);
        segstore *s = open_store(engines[k], f, 0);
        struct outcome o[1] = {0};
        write_segments(s, 0, 1, o); /* acknowledged before the fault */
        cr_assert_eq(o[0].res, 0);
        struct outcome bad[1] = {0};
        write_segments(s, 1, 1, bad);
        cr_assert_eq(bad[0].res, -EIO, "%s", engines[k]);
        cr_assert(strstr(bad[0].detail, "fdatasync") && strstr(bad[0].detail, "seg-1.seg") &&
                  strstr(bad[0].detail, "Input/output error"), "detail: %s", bad[0].detail);
        expect_fail_stop(s, f, "fdatasync");
        expect_written(0, 0); /* acknowledged data is untouched */
        segstore_close(s);
        ioeng_fault_free(f);
        nftw(store_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
}

Test(dstl_segstore, write_eio_is_fail_stop)
{
    for (size_t k = 0; k < N_ENGINES; k++) {
        struct ioeng_fault *f = fault_script(IOENG_OP_WRITE, 1, -EIO);
        segstore *s = open_store(engines[k], f, 0);
        struct outcome o[1] = {0};
        write_segments(s, 0, 1, o);
        cr_assert_eq(o[0].res, -EIO);
        cr_assert(strstr(o[0].detail, "write") && strstr(o[0].detail, "seg-0.seg"), "detail: %s",
                  o[0].detail);
        expect_fail_stop(s, f, "write");
        segstore_close(s);
        ioeng_fault_free(f);
        nftw(store_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
}

Test(dstl_segstore, directory_fsync_failure_is_fail_stop)
{
    struct ioeng_fault *f = fault_script(IOENG_OP_FSYNC, 1, -EIO);
    segstore *s = open_store("io_uring", f, 0);
    struct outcome o[4] = {0};
    write_segments(s, 0, 4, o);
    for (unsigned i = 0; i < 4; i++) cr_assert_eq(o[i].res, -EIO, "seg %u acknowledged", i);
    cr_assert(strstr(o[0].detail, "fsync of the directory"), "detail: %s", o[0].detail);
    expect_fail_stop(s, f, "fsync of the directory");
    segstore_close(s);
    ioeng_fault_free(f);
}

Test(dstl_segstore, inflight_writes_fail_when_the_store_fails)
{
    /* Several writes in flight; the 2nd fdatasync fails: whatever completes after that point is
     * not acknowledged, and every callback still runs exactly once. */
    struct ioeng_fault *f = fault_script(IOENG_OP_FDATASYNC, 2, -EIO);
    segstore *s = open_store("io_uring", f, 0);
    struct outcome o[N_SEGS] = {0};
    write_segments(s, 0, N_SEGS, o);
    unsigned ok = 0, failed = 0;
    for (unsigned i = 0; i < N_SEGS; i++) {
        if (o[i].res == 0) {
            ok++;
            char name[64];
            snprintf(name, sizeof name, "seg-%u.seg", i);
            expect_segment(name, seg_bufs[i], seg_len(i)); /* acknowledged means durable */
        } else {
            cr_assert_eq(o[i].res, -EIO);
            failed++;
        }
    }
    cr_assert_geq(failed, 1);
    cr_assert_eq(o[1].res, -EIO, "the write whose fdatasync failed was acknowledged");
    cr_assert_eq(segstore_failed(s), -EIO);
    struct segstore_stats st;
    segstore_stats(s, &st);
    cr_assert_eq(st.writes_ok, ok);
    cr_assert_eq(st.writes_failed, failed);
    segstore_close(s);
    ioeng_fault_free(f);
}

Test(dstl_segstore, short_writes_are_completed_transparently)
{
    for (size_t k = 0; k < N_ENGINES; k++) {
        struct ioeng_fault *f;
        cr_assert_eq(ioeng_fault_new(&f), 0);
        for (unsigned nth = 1; nth <= 6; nth += 2)
            cr_assert_eq(ioeng_fault_add(f, IOENG_OP_WRITE, nth, IOENG_FAULT_SHORT), 0);
        segstore *s = open_store(engines[k], f, 0);
        struct outcome o[6] = {0};
        unsigned first = (unsigned)k * 100;
        write_segments(s, first, 6, o);
        cr_assert_eq(ioeng_fault_fired(f), 3);
        char name[64];
        for (unsigned i = 0; i < 6; i++) {
            cr_assert_eq(o[i].res, 0, "%s: %s", engines[k], o[i].detail);
            snprintf(name, sizeof name, "seg-%u.seg", first + i);
            expect_segment(name, seg_bufs[i], seg_len(i));
        }
        segstore_close(s);
        ioeng_fault_free(f);
    }
}

/* ---- dstl.io.direct --------------------------------------------------------------------------- */

static segstore *open_direct_store(const char *engine, struct ioeng_fault *f)
{
    t_engine_or_skip(engine);
    struct segstore_opts o = {.dir = store_dir, .engine = engine, .fault = f, .direct = true};
    segstore *s = NULL;
    cr_assert_eq(segstore_open(&o, &s), 0, "open %s with O_DIRECT: %s", engine, dstl_last_error());
    return s;
}

/* Writes len bytes of segment `seed` from buf (its own buffer) as name, waits, checks the
 * outcome and the file byte for byte. */
static void write_and_expect(segstore *s, const char *engine, unsigned seed, unsigned char *buf, size_t len)
{
    char name[64];
    snprintf(name, sizeof name, "d-%u.seg", seed);
    fill(buf, len, seed);
    struct outcome o[1] = {0};
    cr_assert_eq(write_seg(s, name, buf, len, o), 0, "%s", dstl_last_error());
    wait_for(s, o, 1);
    cr_assert_eq(o[0].res, 0, "%s, %zu bytes: %s", engine, len, o[0].detail);
    expect_segment(name, buf, len);
}

Test(dstl_segstore, direct_writes_aligned_head_and_page_cache_tail_on_every_engine)
{
    /* aligned lengths with and without a tail, one below a block, one over a MiB */
    static const size_t lens[] = {3 * 4096 + 123, 8192, 1000, (1u << 20) + 7};
    const size_t n = sizeof lens / sizeof lens[0];
    unsigned char *buf = aligned_alloc(IOENG_DIRECT_ALIGN, 2u << 20);
    cr_assert(buf);
    for (size_t k = 0; k < N_ENGINES; k++) {
        segstore *s = open_direct_store(engines[k], NULL);
        for (size_t i = 0; i < n; i++) write_and_expect(s, engines[k], (unsigned)(k * 100 + i), buf, lens[i]);
        cr_assert_eq(segstore_direct_writes(s), 3, "%s: segments of 4 KiB and more go direct", engines[k]);
        /* a buffer off the alignment goes through the page cache whole */
        write_and_expect(s, engines[k], (unsigned)(k * 100 + n), buf + 1, 9000);
        cr_assert_eq(segstore_direct_writes(s), 3, "%s: an unaligned buffer went direct", engines[k]);
        cr_assert_eq(segstore_failed(s), 0);
        segstore_close(s);
        /* no probe file left behind: the dir holds the segments only */
        char name[64];
        snprintf(name, sizeof name, ".direct-probe-%ld", (long)getpid());
        cr_assert_not(file_exists(name));
    }
    free(buf);
}

Test(dstl_segstore, short_direct_writes_finish_through_the_page_cache)
{
    /* A short write halves the request: 5 x 4 KiB stops at 10 KiB, off the 4 KiB alignment,
     * so the rest must go without O_DIRECT (ioeng.c op_step) and the file still be whole. */
    unsigned char *buf = aligned_alloc(IOENG_DIRECT_ALIGN, 6 * 4096);
    cr_assert(buf);
    for (size_t k = 0; k < N_ENGINES; k++) {
        struct ioeng_fault *f;
        cr_assert_eq(ioeng_fault_new(&f), 0);
        cr_assert_eq(ioeng_fault_add(f, IOENG_OP_WRITE, 1, IOENG_FAULT_SHORT), 0);
        cr_assert_eq(ioeng_fault_add(f, IOENG_OP_WRITE, 2, IOENG_FAULT_SHORT), 0);
        segstore *s = open_direct_store(engines[k], f);
        write_and_expect(s, engines[k], (unsigned)(k * 100), buf, 5 * 4096 + 99);
        write_and_expect(s, engines[k], (unsigned)(k * 100 + 1), buf, 5 * 4096);
        cr_assert_eq(ioeng_fault_fired(f), 2, "%s", engines[k]);
        cr_assert_eq(segstore_direct_writes(s), 2);
        segstore_close(s);
        ioeng_fault_free(f);
    }
    free(buf);
}

/* dstl.io.direct: auto (the default) writes segments of SEGSTORE_AUTO_DIRECT_MIN and more with
 * O_DIRECT where the file system takes aligned O_DIRECT writes (probed before the first), and
 * through the page cache where it refuses them (ramfs), the open succeeding; smaller segments
 * always go through the page cache. true refuses such a directory. */
#define AUTO_SEG (SEGSTORE_AUTO_DIRECT_MIN + 5 * 4096 + 99)
Test(dstl_segstore, auto_direct_goes_direct_where_it_can_and_through_the_page_cache_where_refused)
{
    char ram[72], probe[64];
    snprintf(ram, sizeof ram, "%.60s/ram", tmp_dir);
    snprintf(probe, sizeof probe, ".direct-probe-%ld", (long)getpid());
    cr_assert_eq(mkdir(ram, 0700), 0);
    cr_assert_eq(mount("ramfs", ram, "ramfs", 0, NULL), 0, "mount a ramfs on %s (needs root): %s", ram,
                 strerror(errno));
    char disk_dir[96];
    snprintf(disk_dir, sizeof disk_dir, "%s", store_dir);
    snprintf(store_dir, sizeof store_dir, "%s/segs", ram);
    unsigned char *buf = aligned_alloc(IOENG_DIRECT_ALIGN, 2u << 20);
    cr_assert(buf);

    struct segstore_opts o = {.dir = store_dir, .engine = "psync", .direct = true};
    segstore *s = NULL;
    cr_assert_eq(segstore_open(&o, &s), -EINVAL, "true on a ramfs opened");
    cr_assert(strstr(dstl_last_error(), "dstl.io.direct") && strstr(dstl_last_error(), store_dir),
              "detail: %s", dstl_last_error());
    cr_assert_not(file_exists(probe), "the refused probe file was left behind");

    o.direct_auto = true;
    for (size_t k = 0; k < N_ENGINES; k++) {
        t_engine_or_skip(engines[k]);
        o.engine = engines[k];
        cr_assert_eq(segstore_open(&o, &s), 0, "auto on a ramfs, %s: %s", engines[k], dstl_last_error());
        cr_assert_not(file_exists(probe));
        write_and_expect(s, engines[k], (unsigned)k, buf, AUTO_SEG);
        write_and_expect(s, engines[k], (unsigned)(k + 10), buf, SEGSTORE_AUTO_DIRECT_MIN + 16 * 4096);
        cr_assert_eq(segstore_direct_writes(s), 0, "%s: a write went direct on a ramfs", engines[k]);
        cr_assert_not(file_exists(probe));
        cr_assert_eq(segstore_failed(s), 0);
        segstore_close(s);
    }
    cr_assert_eq(umount(ram), 0, "umount %s: %s", ram, strerror(errno));

    snprintf(store_dir, sizeof store_dir, "%s", disk_dir);
    o.engine = "psync";
    cr_assert_eq(segstore_open(&o, &s), 0, "auto on %s: %s", store_dir, dstl_last_error());
    write_and_expect(s, "psync", 20, buf, 16 * 4096);
    cr_assert_eq(segstore_direct_writes(s), 0, "auto wrote a 64 KiB segment direct");
    write_and_expect(s, "psync", 21, buf, AUTO_SEG);
    cr_assert_eq(segstore_direct_writes(s), 1, "auto did not go direct on %s", store_dir);
    cr_assert_not(file_exists(probe));
    segstore_close(s);
    free(buf);
}

/* auto's probe writes a block: on a full disk it fails with ENOSPC, which says nothing about
 * O_DIRECT. That segment goes through the page cache (and fails for want of space, the store
 * going on), and the next write probes again: once there is room, segments go direct. */
Test(dstl_segstore, auto_direct_probes_again_after_a_probe_that_found_the_disk_full)
{
    char small[72], filler[96], probe[64];
    snprintf(small, sizeof small, "%.60s/small", tmp_dir);
    snprintf(probe, sizeof probe, ".direct-probe-%ld", (long)getpid());
    cr_assert_eq(mkdir(small, 0700), 0);
    cr_assert_eq(mount("tmpfs", small, "tmpfs", 0, "size=4m"), 0, "mount a 4 MiB tmpfs on %s (needs root): %s",
                 small, strerror(errno));
    char disk_dir[96];
    snprintf(disk_dir, sizeof disk_dir, "%s", store_dir);
    snprintf(store_dir, sizeof store_dir, "%s/segs", small);
    struct segstore_opts o = {.dir = store_dir, .engine = "psync", .direct = true, .direct_auto = true};
    segstore *s = NULL;
    cr_assert_eq(segstore_open(&o, &s), 0, "%s", dstl_last_error());
    /* fill the file system to the last block */
    snprintf(filler, sizeof filler, "%s/filler", small);
    int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    static unsigned char block[4096];
    while (write(fd, block, sizeof block) == (ssize_t)sizeof block) {}
    close(fd);
    unsigned char *buf = aligned_alloc(IOENG_DIRECT_ALIGN, 2u << 20);
    cr_assert(buf);
    fill(buf, AUTO_SEG, 1);
    struct outcome out[1] = {0};
    cr_assert_eq(write_seg(s, "full.seg", buf, AUTO_SEG, out), 0, "%s", dstl_last_error());
    wait_for(s, out, 1);
    cr_assert_eq(out[0].res, -ENOSPC, "a write to a full disk: %d %s", out[0].res, out[0].detail);
    cr_assert_eq(segstore_failed(s), 0, "a full disk stopped the store");
    cr_assert_eq(segstore_direct_writes(s), 0);
    cr_assert_not(file_exists(probe));
    cr_assert_eq(unlink(filler), 0);
    write_and_expect(s, "psync", 2, buf, AUTO_SEG);
    cr_assert_eq(segstore_direct_writes(s), 1, "no second probe once there was room");
    segstore_close(s);
    free(buf);
    cr_assert_eq(umount(small), 0, "umount %s: %s", small, strerror(errno));
    snprintf(store_dir, sizeof store_dir, "%s", disk_dir);
}

/* ---- any-thread helpers, open ------------------------------------------------------------------ */

Test(dstl_segstore, read_at_reads_ranges_and_names_missing_files)
{
    segstore *s = open_store("psync", NULL, 0);
    struct outcome o[1] = {0};
    write_segments(s, 0, 1, o);
    unsigned char part[100];
    cr_assert_eq(segstore_read_at(store_dir, "seg-0.seg", 1000, part, 100), 100);
    cr_assert(memcmp(part, seg_bufs[0] + 1000, 100) == 0);
    size_t len = seg_len(0);
    cr_assert_eq(segstore_read_at(store_dir, "seg-0.seg", len - 10, part, 100), 10);
    cr_assert_eq(segstore_read_at(store_dir, "seg-0.seg", len + 5, part, 100), 0);
    uint64_t size = 0;
    cr_assert_eq(segstore_size(store_dir, "seg-0.seg", &size), 0);
    cr_assert_eq(size, len);
    cr_assert_eq(segstore_read_at(store_dir, "nope.seg", 4096, part, 100), -ENOENT);
    cr_assert(strstr(dstl_last_error(), "nope.seg"), "detail: %s", dstl_last_error());
    cr_assert_eq(segstore_size(store_dir, "nope.seg", &size), -ENOENT);
    segstore_close(s);
}

struct listing {
    unsigned n;
    char names[8][64];
    uint64_t sizes[8];
    int64_t mtimes[8];
};

static int collect(void *ctx, const char *name, uint64_t size_bytes, int64_t mtime_ms)
{
    struct listing *l = ctx;
    cr_assert_lt(l->n, 8);
    snprintf(l->names[l->n], 64, "%s", name);
    l->sizes[l->n] = size_bytes;
    l->mtimes[l->n] = mtime_ms;
    l->n++;
    return 0;
}

static int stop_at_first(void *ctx, const char *name, uint64_t size_bytes, int64_t mtime_ms)
{
    (void)ctx, (void)name, (void)size_bytes, (void)mtime_ms;
    return 42;
}

Test(dstl_segstore, list_reports_segments_with_size_and_mtime)
{
    segstore *s = open_store("io_uring", NULL, 0);
    struct outcome o[3] = {0};
    write_segments(s, 0, 3, o);
    char other[128];
    snprintf(other, sizeof other, "%s/notes.txt", store_dir);
    close(open(other, O_CREAT | O_WRONLY, 0644));
    snprintf(other, sizeof other, "%s/dir.seg", store_dir);
    mkdir(other, 0755);
    struct listing l = {0};
    cr_assert_eq(segstore_list(store_dir, collect, &l), 3, "%s", dstl_last_error());
    time_t now = time(NULL);
    for (unsigned i = 0; i < l.n; i++) {
        unsigned idx;
        cr_assert_eq(sscanf(l.names[i], "seg-%u.seg", &idx), 1, "listed %s", l.names[i]);
        cr_assert_eq(l.sizes[i], seg_len(idx));
        cr_assert_lt(llabs(l.mtimes[i] / 1000 - (int64_t)now), 120);
    }
    cr_assert_eq(segstore_list(store_dir, stop_at_first, NULL), 42);
    char missing[128];
    snprintf(missing, sizeof missing, "%s/missing", tmp_dir);
    cr_assert_eq(segstore_list(missing, collect, &l), -ENOENT);
    cr_assert(strstr(dstl_last_error(), missing), "detail: %s", dstl_last_error());
    segstore_close(s);
}

struct unlinker {
    segstore *s;
    unsigned first, n;
    int failures;
};

static void *unlink_thread(void *arg)
{
    struct unlinker *u = arg;
    char name[64];
    for (unsigned i = 0; i < u->n; i++) {
        snprintf(name, sizeof name, "seg-%u.seg", u->first + i);
        if (segstore_unlink(u->s, name) != 0) u->failures++;
    }
    return NULL;
}

Test(dstl_segstore, unlink_from_another_thread_while_writing)
{
    segstore *s = open_store("io_uring", NULL, 0);
    struct outcome o[N_SEGS] = {0};
    write_segments(s, 0, N_SEGS, o);
    struct unlinker u = {.s = s, .first = 0, .n = N_SEGS};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, unlink_thread, &u), 0);
    struct outcome more[N_SEGS] = {0};
    write_segments(s, 100, N_SEGS, more); /* the pipeline goes on meanwhile */
    pthread_join(t, NULL);
    cr_assert_eq(u.failures, 0);
    for (unsigned i = 0; i < N_SEGS; i++) cr_assert_eq(more[i].res, 0, "%s", more[i].detail);
    cr_assert_eq(segstore_list(store_dir, stop_at_first, NULL), 42); /* something is left */
    cr_assert_not(file_exists("seg-0.seg"));
    cr_assert(file_exists("seg-100.seg"));
    cr_assert_eq(segstore_unlink(s, "seg-0.seg"), -ENOENT);
    cr_assert(strstr(dstl_last_error(), "seg-0.seg"), "detail: %s", dstl_last_error());
    segstore_close(s);
}

Test(dstl_segstore, open_creates_missing_directories_and_names_bad_ones)
{
    snprintf(store_dir, sizeof store_dir, "%s/a/b/c", tmp_dir);
    segstore *s = open_store("psync", NULL, 0);
    struct stat st;
    cr_assert_eq(stat(store_dir, &st), 0);
    cr_assert(S_ISDIR(st.st_mode));
    segstore_close(s);

    char file[128];
    snprintf(file, sizeof file, "%s/plain", tmp_dir);
    close(open(file, O_CREAT | O_WRONLY, 0644));
    struct segstore_opts o = {.dir = file};
    s = NULL;
    cr_assert_eq(segstore_open(&o, &s), -ENOTDIR);
    cr_assert_null(s);
    cr_assert(strstr(dstl_last_error(), file), "detail: %s", dstl_last_error());

    o.dir = store_dir;
    o.engine = "bogus";
    cr_assert_eq(segstore_open(&o, &s), -EINVAL);
    cr_assert(strstr(dstl_last_error(), "bogus"), "detail: %s", dstl_last_error());
    o.dir = NULL;
    cr_assert_eq(segstore_open(&o, &s), -EINVAL);
}
