/*
 * Remote durability over a failed local store: after the local store goes fail-stop (an
 * fdatasync EIO), persists still complete, made durable by the object store, and read back
 * from it; under local durability the same failure stops persists (test_dstl_faults.c).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>

#include "dstl.h"
#include "dstl/local/ioeng.h"
#include "dstl/seams.h"
#include "tests/helpers.h"
#include "tests/helpers_dstl.h"
#include "tests/helpers_remote.h"

static t_remote fx;
static struct ioeng_fault *fault;

static void setup(void)
{
    t_remote_init(&fx, "localfail");
    t_config_remote(&fx);
    cr_assert_eq(ioeng_fault_new(&fault), 0);
}

static void teardown(void)
{
    t_config_remote(NULL);
    ioeng_fault_free(fault);
    fault = NULL;
    t_remote_fini(&fx);
}

TestSuite(remote_localfail, .init = setup, .fini = teardown, .timeout = 120);

Test(remote_localfail, persists_go_on_through_the_object_store)
{
    dstl_config *c = t_config(fx.dir, "dstl.batch.persist-delay", "0", NULL);
    storage_seams t = {.fault = fault};
    dstl_storage *s = NULL;
    cr_assert_eq(storage_open_with_seams(c, &t, &s), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
    t_append_n(w, 5, 100, 0, 8, 400);
    dstl_handle *h1 = t_persist(w, 0, 1);
    cr_assert_eq(ioeng_fault_add(fault, IOENG_OP_FDATASYNC, ioeng_fault_seen(fault, IOENG_OP_FDATASYNC) + 1, -EIO), 0);
    for (int cp = 2; cp < 5; cp++) {           /* the failing one and two after it */
        t_append_n(w, 5, 100, 0, 8, 400);
        dstl_handle *h = t_persist(w, 0, (uint64_t)cp);
        cr_expect_eq(t_verify(s, h, 5, 0, 8, 0, 7, 400), 100 * cp, "checkpoint %d", cp);
        dstl_handle_free(h);
    }
    cr_expect_geq(ioeng_fault_fired(fault), 1);
    cr_expect_eq(t_verify(s, h1, 5, 0, 8, 0, 7, 400), 100);
    dstl_handle_free(h1);
    dstl_writer_close(w);
    cr_assert_eq(dstl_storage_close(s), 0);
}
