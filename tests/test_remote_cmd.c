/*
 * tests/test_remote_cmd.c — the `dstl` command against the S3 server tests/run.sh starts:
 * demos that share a remote prefix leave each other's segments alone (a demo's last handles
 * still read back from S3 after another demo ran), a demo leaves exactly its last handles'
 * objects, gc --dry-run changes nothing remotely (no object written, deleted or rewritten),
 * gc on a missing local dir touches nothing remote, and gc keeps what its live set needs.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/helpers.h"
#include "tests/helpers_cmd.h"
#include "tests/helpers_remote.h"

static t_remote fx;
static char conf[4300];

static void setup(void)
{
    t_remote_init(&fx, "rcmd");
    snprintf(conf, sizeof conf, "%s/s3.conf", fx.dir);
    /* RGW 16 ignores checksum headers; a signed body digest it verifies */
    t_remote_write_conf(&fx, conf, "dstl.s3.payload-signing", "sha256", NULL);
}

static void teardown(void) { t_remote_fini(&fx); }

TestSuite(remote_cmd, .init = setup, .fini = teardown, .timeout = 120);

#define run(status, ...) t_cmd_run(fx.dir, status, __VA_ARGS__)

/* Every object under the prefix as sorted lines "key size etag": equal listings mean nothing was
 * written, deleted or rewritten. */
static char *remote_tree(void)
{
    s3_list l;
    s3_result r;
    memset(&r, 0, sizeof r);
    cr_assert_eq(s3_list_objects_all_sync(fx.s3, fx.bucket, fx.prefix_dir, 0, &l, &r), 0, "%s", r.error);
    size_t cap = 1 + l.n_objects * 800, off = 0;
    char *text = malloc(cap);
    cr_assert_not_null(text);
    text[0] = '\0';
    for (size_t i = 0; i < l.n_objects; i++)     /* ListObjectsV2 returns keys in order */
        off += (size_t)snprintf(text + off, cap - off, "%s %llu %s\n", l.objects[i].key,
                                (unsigned long long)l.objects[i].size, l.objects[i].etag);
    s3_list_clear(&l);
    return text;
}

static size_t remote_objects(void)
{
    size_t objects = 0, uploads = 0;
    t_remote_count(&fx, &objects, &uploads);
    cr_expect_eq(uploads, 0, "%zu incomplete uploads", uploads);
    return objects;
}

static size_t local_segments(const char *d)
{
    DIR *dd = opendir(d);
    if (!dd) return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(dd))) {
        size_t l = strlen(e->d_name);
        if (l > 4 && strcmp(e->d_name + l - 4, ".seg") == 0) n++;
    }
    closedir(dd);
    return n;
}

/* Runs a short demo on local dir sub; returns its handle dir (malloc'd). */
static char *demo(const char *sub, char *ldir, size_t cap)
{
    snprintf(ldir, cap, "%s/%s", fx.dir, sub);
    int st;
    char *out = run(&st, "'%s' --config '%s' --set 'dstl.local.dir=%s' demo --writers 2 --duration 2 --rate 500 "
                         "--materialize-every 1", t_cmd_bin(), conf, ldir);
    cr_assert_eq(st, 0, "demo on %s: %s", sub, out);
    char where[200];
    snprintf(where, sizeof where, "and %s", fx.uri);
    cr_expect(strstr(out, "exactly the ones its last handles reference") != NULL && strstr(out, where) != NULL,
              "%s", out);
    const char *p = strstr(out, "last handles: ");
    cr_assert_not_null(p, "%s", out);
    p += strlen("last handles: ");
    const char *e = strstr(p, "/*.handle");
    cr_assert_not_null(e, "%s", out);
    char *hdir = strndup(p, (size_t)(e - p));
    free(out);
    return hdir;
}

/* cats every handle of hdir through --dir ldir; returns how many read back. */
static int cat_all(const char *hdir, const char *ldir)
{
    DIR *d = opendir(hdir);
    cr_assert_not_null(d, "%s: %s", hdir, strerror(errno));
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 8 || strcmp(e->d_name + l - 7, ".handle") != 0) continue;
        int st;
        char *out = run(&st, "'%s' --config '%s' cat '%s/%s' --dir '%s'", t_cmd_bin(), conf, hdir, e->d_name, ldir);
        cr_expect_eq(st, 0, "cat %s/%s --dir %s: %s", hdir, e->d_name, ldir, out);
        cr_expect(strstr(out, "\"meta\":true") != NULL, "%.300s", out);
        if (st == 0) n++;
        free(out);
    }
    closedir(d);
    return n;
}

Test(remote_cmd, demos_sharing_a_prefix_keep_each_others_segments)
{
    char d1[4300], d2[4300], empty[4300];
    char *h1 = demo("one", d1, sizeof d1);
    cr_expect_eq(remote_objects(), local_segments(d1), "the first demo left other objects than its handles need");
    char *h2 = demo("two", d2, sizeof d2);
    /* each demo left exactly its last handles' segments, locally and remotely */
    cr_expect_eq(remote_objects(), local_segments(d1) + local_segments(d2));
    /* the first demo's handles read back from S3 alone (an empty local dir) */
    snprintf(empty, sizeof empty, "%s/empty", fx.dir);
    cr_assert_eq(mkdir(empty, 0755), 0);
    cr_expect_eq(cat_all(h1, empty), 2);
    cr_expect_eq(cat_all(h2, empty), 2);
    cr_expect_eq(cat_all(h1, d1), 2);
    free(h1);
    free(h2);
}

Test(remote_cmd, gc_dry_run_and_live_set_change_nothing_remote)
{
    char d1[4300];
    char *h1 = demo("one", d1, sizeof d1);
    size_t segs = local_segments(d1);
    cr_assert_gt(segs, 0);
    char *rbefore = remote_tree(), *lbefore = t_cmd_tree(d1);
    cr_assert_not_null(lbefore);
    int st;
    char *out = run(&st, "'%s' --config '%s' gc '%s' --no-live-handles --min-age 0 --dry-run", t_cmd_bin(), conf, d1);
    cr_expect_eq(st, 0, "%s", out);
    char want[64];
    snprintf(want, sizeof want, "%zu would be deleted", 2 * segs);    /* local file and object */
    cr_expect(strstr(out, want) != NULL, "%s", out);
    free(out);
    char *rafter = remote_tree(), *lafter = t_cmd_tree(d1);
    cr_expect_str_eq(rafter, rbefore, "a dry run changed the remote prefix");
    cr_expect_str_eq(lafter, lbefore, "a dry run changed the local dir");
    free(rafter);
    free(lafter);
    /* the live set keeps every copy */
    out = run(&st, "'%s' --config '%s' gc '%s' --live '%s'/*.handle --min-age 0", t_cmd_bin(), conf, d1, h1);
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(strstr(out, " 0 deleted") != NULL, "%s", out);
    free(out);
    rafter = remote_tree();
    cr_expect_str_eq(rafter, rbefore, "gc with the live set changed the remote prefix");
    free(rafter);
    /* a missing local dir is an error before anything remote happens */
    char missing[4400];
    snprintf(missing, sizeof missing, "%s/missing", fx.dir);
    out = run(&st, "'%s' --config '%s' gc '%s' --no-live-handles --min-age 0", t_cmd_bin(), conf, missing);
    cr_expect_eq(st, 1, "%s", out);
    cr_expect(strstr(out, missing) != NULL, "%s", out);
    free(out);
    struct stat sb;
    cr_expect_neq(stat(missing, &sb), 0, "gc created %s", missing);
    rafter = remote_tree();
    cr_expect_str_eq(rafter, rbefore, "gc on a missing dir changed the remote prefix");
    free(rafter);
    /* told there is no live set, the dead run's segments go, locally and remotely */
    out = run(&st, "'%s' --config '%s' gc '%s' --no-live-handles --min-age 0", t_cmd_bin(), conf, d1);
    cr_expect_eq(st, 0, "%s", out);
    free(out);
    cr_expect_eq(remote_objects(), 0);
    cr_expect_eq(local_segments(d1), 0);
    free(rbefore);
    free(lbefore);
    free(h1);
}

/* ls, verify and cat of s3://bucket/prefix (the configured endpoint and credentials) see the
 * same segments and records as of the local dir; hh/ folders show; a corrupt object is named
 * by its s3:// key; one object (s3://bucket/key.seg) is a set of one. */
Test(remote_cmd, ls_verify_cat_of_an_s3_prefix)
{
    char d1[4300];
    char *h1 = demo("one", d1, sizeof d1);
    free(h1);
    size_t segs = local_segments(d1);
    cr_assert_gt(segs, 0);
    int st;
    char *lls = run(&st, "'%s' ls --bytes '%s'", t_cmd_bin(), d1);
    cr_assert_eq(st, 0, "%s", lls);
    char *rls = run(&st, "'%s' --config '%s' ls --bytes '%s'", t_cmd_bin(), conf, fx.uri);
    cr_assert_eq(st, 0, "%s", rls);
    char want[64];
    snprintf(want, sizeof want, "\n%zu segment files", segs);
    cr_expect(strstr(rls, want) != NULL, "%s", rls);
    /* every local segment, with its exact size, under a hh/ folder of the prefix */
    DIR *dd = opendir(d1);
    cr_assert_not_null(dd);
    struct dirent *e;
    while ((e = readdir(dd))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".seg")) continue;
        char p[4600], line[400];
        snprintf(p, sizeof p, "%s/%s", d1, e->d_name);
        struct stat sb;
        cr_assert_eq(stat(p, &sb), 0);
        snprintf(line, sizeof line, "/%s  %lld B  ", e->d_name, (long long)sb.st_size);
        cr_expect(strstr(rls, line) != NULL, "'%s' missing in\n%s", line, rls);
    }
    closedir(dd);
    /* the same sections, line for line, after the name column */
    cr_expect_eq(t_cmd_count(rls, "seqs ["), t_cmd_count(lls, "seqs ["), "%s\n---\n%s", lls, rls);
    free(lls);
    char *lv = run(&st, "'%s' verify '%s'", t_cmd_bin(), d1);
    cr_assert_eq(st, 0, "%s", lv);
    char *rv = run(&st, "'%s' --config '%s' verify '%s'", t_cmd_bin(), conf, fx.uri);
    cr_expect_eq(st, 0, "%s", rv);
    const char *lr = strstr(lv, " records checked"), *rr = strstr(rv, " records checked");
    cr_assert(lr && rr, "%s\n---\n%s", lv, rv);
    while (lr > lv && lr[-1] != ' ') lr--;
    while (rr > rv && rr[-1] != ' ') rr--;
    cr_expect_eq(atol(lr), atol(rr), "%s\n---\n%s", lv, rv);
    cr_expect_gt(atol(rr), 0);
    free(lv);
    free(rv);
    char *lc = run(&st, "'%s' cat '%s' 2>/dev/null", t_cmd_bin(), d1);
    char *rc = run(&st, "'%s' --config '%s' cat '%s' 2>/dev/null", t_cmd_bin(), conf, fx.uri);
    cr_expect_eq(st, 0);
    cr_expect_eq(t_cmd_count(rc, "\n"), t_cmd_count(lc, "\n"));
    cr_expect_gt(t_cmd_count(rc, "\"writer\":\"operator-00\""), 0);
    free(lc);
    free(rc);
    /* one object */
    const char *k = strstr(rls, "  ");
    cr_assert_not_null(k);
    k += 2;
    char key[300];
    snprintf(key, sizeof key, "%.*s", (int)strcspn(k, " "), k);
    char *one = run(&st, "'%s' --config '%s' verify '%s/%s'", t_cmd_bin(), conf, fx.uri, key);
    cr_expect_eq(st, 0, "%s", one);
    cr_expect(strstr(one, "\n1 segment files") != NULL, "%s", one);
    free(one);
    free(rls);
    /* a corrupt object is named */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/zz/ffffffffffffffff-000000000001.seg", fx.prefix);
    s3_result r;
    memset(&r, 0, sizeof r);
    cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, bad, "not a segment at all", 20, false, &r), 0, "%s", r.error);
    rv = run(&st, "'%s' --config '%s' verify '%s'", t_cmd_bin(), conf, fx.uri);
    cr_expect_eq(st, 1, "%s", rv);
    char named[400];
    snprintf(named, sizeof named, "s3://%s/%s", fx.bucket, bad);
    cr_expect(strstr(rv, "CORRUPT") != NULL && strstr(rv, named) != NULL, "%s", rv);
    free(rv);
    /* a missing bucket is an error naming it */
    rv = run(&st, "'%s' --config '%s' ls 's3://%.40s-nope/p'", t_cmd_bin(), conf, fx.bucket);
    cr_expect_eq(st, 1, "%s", rv);
    cr_expect(strstr(rv, "NoSuchBucket") != NULL, "%s", rv);
    free(rv);
}
