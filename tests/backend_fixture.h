/*
 * tests/backend_fixture.h — the reference backend's storages for a test: a changelog storage
 * (5 ms persist-delay) and a snapshot storage (32 MB in flight) in a fresh temp dir, and the
 * env on them. Header-only: only the backend tests link backend/.
 */
#ifndef TESTS_BACKEND_FIXTURE_H
#define TESTS_BACKEND_FIXTURE_H

#include <criterion/criterion.h>
#include <stdio.h>

#include "backend/backend.h"
#include "tests/helpers.h"
#include "tests/helpers_dstl.h"

typedef struct {
    char *dir;
    char cl_dir[512], snap_dir[512];
    dstl_storage *cl, *snap;
    bk_env *env;
} fixture;

static inline void up(fixture *f)
{
    f->dir = t_mkdtemp("backend");
    snprintf(f->cl_dir, sizeof f->cl_dir, "%s/changelog", f->dir);
    snprintf(f->snap_dir, sizeof f->snap_dir, "%s/snapshots", f->dir);
    f->cl = t_storage_open(f->cl_dir, "dstl.batch.persist-delay", "5ms", NULL);
    f->snap = t_storage_open(f->snap_dir, "dstl.upload.max-in-flight", "32mb", NULL);
    cr_assert_eq(bk_env_open(f->cl, f->snap, &f->env), 0);
}

static inline void down(fixture *f)
{
    bk_env_close(f->env);
    cr_assert_eq(dstl_storage_close(f->cl), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(f->snap), 0, "%s", dstl_last_error());
    t_rm_rf(f->dir);
}

#endif
