/*
 * Local I/O faults through the storage, injected by the I/O engine's fault script:
 * ENOSPC and EIO on write, EIO on fdatasync, short writes. Clear errors, failed futures,
 * nothing acknowledged lost, records retried by the next persist, and fail-stop after an
 * fdatasync (or unknown-outcome write) failure.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dstl.h"
#include "dstl/local/ioeng.h"
#include "dstl/seams.h"
#include "tests/helpers.h"
#include "tests/helpers_dstl.h"

static char *dir;
static struct ioeng_fault *fault;

static void setup(void)
{
    dir = t_mkdtemp("faults");
    cr_assert_eq(ioeng_fault_new(&fault), 0);
}

static void teardown(void)
{
    ioeng_fault_free(fault);
    t_rm_rf(dir);
    free(dir);
}

TestSuite(dstl_faults, .init = setup, .fini = teardown, .timeout = 60);

/* A storage on `engine` with the fault script, or the test is skipped when the kernel lacks the
 * engine (t_engine_or_skip). */
static dstl_storage *open_faulty(const char *engine)
{
    t_engine_or_skip(engine);
    dstl_config *c = t_config(dir, "dstl.io.engine", engine, "dstl.batch.persist-delay", "0", NULL);
    dstl_storage *s = NULL;
    storage_seams t = {.fault = fault};
    cr_assert_eq(storage_open_with_seams(c, &t, &s), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    return s;
}

static void enospc_then_retry(const char *engine)
{
    dstl_storage *s = open_faulty(engine);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
    t_append_n(w, 1, 200, 0, 8, 500);
    dstl_handle *h1 = t_persist(w, 0, 1);
    t_append_n(w, 1, 200, 0, 8, 500);
    cr_assert_eq(ioeng_fault_add(fault, IOENG_OP_WRITE, ioeng_fault_seen(fault, IOENG_OP_WRITE) + 1, -ENOSPC), 0);
    dstl_handle *h = NULL;
    int rc = t_persist_result(w, 0, 2, &h);
    cr_expect_eq(rc, -ENOSPC, "got %d: %s", rc, dstl_last_error());
    cr_expect(strstr(dstl_last_error(), ".seg") != NULL, "detail names no segment: %s", dstl_last_error());
    /* the acknowledged handle is intact, and the same range goes through on the next try */
    cr_expect_eq(t_verify(s, h1, 1, 0, 8, 0, 7, 500), 200);
    cr_assert_eq(t_persist_result(w, 0, 3, &h), 0, "%s", dstl_last_error());
    cr_expect_eq(dstl_handle_to_seq(h), 400);
    cr_expect_eq(t_verify(s, h, 1, 0, 8, 0, 7, 500), 400);
    dstl_stats st;
    dstl_storage_stats(s, &st);
    cr_expect_eq(st.persist_failures, 1);
    dstl_handle_free(h);
    dstl_handle_free(h1);
    dstl_writer_close(w);
    cr_assert_eq(dstl_storage_close(s), 0);
}

Test(dstl_faults, enospc_on_write_fails_one_persist_then_retries_io_uring) { enospc_then_retry("io_uring"); }
Test(dstl_faults, enospc_on_write_fails_one_persist_then_retries_libaio) { enospc_then_retry("libaio"); }
Test(dstl_faults, enospc_on_write_fails_one_persist_then_retries_psync) { enospc_then_retry("psync"); }

static void fail_stop(int kind, const char *engine)
{
    dstl_storage *s = open_faulty(engine);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
    t_append_n(w, 2, 100, 0, 8, 300);
    dstl_handle *h1 = t_persist(w, 0, 1);
    t_append_n(w, 2, 100, 0, 8, 300);
    cr_assert_eq(ioeng_fault_add(fault, kind, ioeng_fault_seen(fault, kind) + 1, -EIO), 0);
    dstl_handle *h = NULL;
    cr_expect_eq(t_persist_result(w, 0, 2, &h), -EIO, "%s", dstl_last_error());
    /* fail-stop: no later persist writes anything, none pretends to succeed */
    t_append_n(w, 2, 10, 0, 8, 300);
    int rc = t_persist_result(w, 0, 3, &h);
    cr_expect_eq(rc, -EIO, "a persist after an fdatasync failure returned %d", rc);
    cr_expect(strstr(dstl_last_error(), "fail") != NULL, "%s", dstl_last_error());
    /* what was acknowledged before stays readable */
    cr_expect_eq(t_verify(s, h1, 2, 0, 8, 0, 7, 300), 100);
    dstl_handle_free(h1);
    dstl_writer_close(w);
    cr_assert_eq(dstl_storage_close(s), 0);
}

Test(dstl_faults, eio_on_fdatasync_makes_the_store_fail_stop) { fail_stop(IOENG_OP_FDATASYNC, "io_uring"); }
Test(dstl_faults, eio_on_fdatasync_makes_the_store_fail_stop_psync) { fail_stop(IOENG_OP_FDATASYNC, "psync"); }
Test(dstl_faults, eio_on_write_makes_the_store_fail_stop) { fail_stop(IOENG_OP_WRITE, "io_uring"); }
Test(dstl_faults, eio_on_write_makes_the_store_fail_stop_libaio) { fail_stop(IOENG_OP_WRITE, "libaio"); }

Test(dstl_faults, short_writes_are_completed_transparently)
{
    static const char *engines[] = {"io_uring", "libaio", "psync"};
    for (int e = 0; e < 3; e++) {
        dstl_storage *s = open_faulty(engines[e]);
        dstl_writer *w = NULL;
        cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
        for (int round = 0; round < 4; round++) {
            unsigned next = ioeng_fault_seen(fault, IOENG_OP_WRITE) + 1;
            cr_assert_eq(ioeng_fault_add(fault, IOENG_OP_WRITE, next, IOENG_FAULT_SHORT), 0);
            t_append_n(w, 3, 300, 0, 8, 4000);
            dstl_handle *h = t_persist(w, 0, (uint64_t)round);
            cr_expect_eq(t_verify(s, h, 3, 0, 8, 0, 7, 4000), 300 * (round + 1));
            dstl_handle_free(h);
        }
        dstl_writer_close(w);
        cr_assert_eq(dstl_storage_close(s), 0);
    }
    cr_expect_geq(ioeng_fault_fired(fault), 12);
}
