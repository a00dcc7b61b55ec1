/*
 * tests/test_remote_encrypt.c — encryption at rest with the object store (the RGW that
 * `make test` starts): recovery from S3 with the local dir deleted, whole and by key-group
 * range, with and without compression; no plaintext payload, writer id or key bytes in any
 * object, in the local dir or in dstl.cache.dir; a reading storage without the key gets
 * DSTL_ECRYPTO naming the key id and the object.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dstl.h"
#include "s3/s3.h"
#include "tests/helpers.h"
#include "tests/helpers_dstl.h"
#include "tests/helpers_cmd.h"
#include "tests/helpers_keys.h"
#include "tests/helpers_remote.h"

#define NKG 16

static t_remote fx;

static void setup(void) { t_remote_init(&fx, "encrypt"); }
static void teardown(void) { t_remote_fini(&fx); }

TestSuite(remote_encrypt, .init = setup, .fini = teardown, .timeout = 120);

/* Whether needle occurs in any object under the fixture's prefix; *n counts the objects. */
static int objects_have(const void *needle, size_t len, size_t *n)
{
    s3_list l = {0};
    s3_result r;
    cr_assert_eq(s3_list_objects_all_sync(fx.s3, fx.bucket, fx.prefix_dir, 0, &l, &r), 0, "%s", r.error);
    int found = 0;
    for (size_t i = 0; i < l.n_objects && !found; i++) {
        if (!l.objects[i].size) continue;
        uint8_t *b = malloc(l.objects[i].size);
        cr_assert_eq(s3_get_object_sync(fx.s3, fx.bucket, l.objects[i].key, 0, b, l.objects[i].size, &r), 0,
                     "%s", r.error);
        found = memmem(b, l.objects[i].size, needle, len) != NULL;
        free(b);
        (*n)++;
    }
    s3_list_clear(&l);
    return found;
}

static void recover_from_s3(const char *compression)
{
    char *wdir = t_mkdtemp("enc-w"), *rdir = t_mkdtemp("enc-r"), *kdir = t_mkdtemp("enc-k");
    char *kf = tk_write(kdir, "keys", "s3-key-1: " TK_HEX_A "\n", 0600);
    dstl_storage *s = t_remote_open(&fx, wdir, "dstl.encryption.key-file", kf, "dstl.compression", compression,
                                    NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(s, "payments-op", 0, NKG - 1, &w), 0);
    uint64_t end = tk_append(w, "p", 0, 2000, NKG);
    dstl_handle *h = t_persist(w, 0, 1);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    t_rm_rf(wdir);   /* recovery on a new machine: only the bucket is left */

    char cache[4200];
    snprintf(cache, sizeof cache, "%s/cache", rdir);
    dstl_config *c = t_remote_config(&fx, rdir, "dstl.encryption.key-file", kf, "dstl.cache.dir", cache, NULL);
    dstl_storage *r;
    cr_assert_eq(dstl_storage_open(c, &r), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    cr_assert_eq(tk_verify(r, h, "p", 0, end, NKG, 0, NKG - 1), (long)end, "%s", dstl_last_error());
    long n = tk_verify(r, h, "p", 0, end, NKG, 4, 5);   /* a rescaled task's slice */
    cr_assert_eq(n, (long)(2 * end / NKG), "%ld: %s", n, dstl_last_error());
    dstl_stats st;
    cr_assert_eq(dstl_storage_stats(r, &st), 0);
    cr_assert_gt(st.remote_bytes_read, 0, "read from S3");
    size_t objs = 0, files = 0;
    unsigned char key[32];
    tk_key_bytes(TK_HEX_A, key);
    /* while the reading storage is open: its cache files are still there */
    cr_assert_eq(tk_dir_has(cache, TK_MARK, strlen(TK_MARK), &files), 0, "a payload in clear in %s", cache);
    cr_assert_eq(tk_dir_has(cache, key, 32, &files), 0, "key bytes under %s", cache);
    cr_assert_gt(files, 0, "the cache holds the fetched bytes (%s)", cache);
    cr_assert_eq(dstl_storage_close(r), 0);

    cr_assert_eq(objects_have(TK_MARK, strlen(TK_MARK), &objs), 0, "a payload in clear in an object");
    cr_assert_gt(objs, 0);
    cr_assert_eq(objects_have("payments-op", 11, &objs), 0, "a writer id in clear in an object");
    cr_assert_eq(objects_have(key, 32, &objs), 0, "key bytes in an object");
    cr_assert_eq(tk_dir_has(rdir, TK_MARK, strlen(TK_MARK), &files), 0, "a payload in clear in %s", rdir);

    /* the command over the prefix: key ids always, records with the key file */
    char conf[4300];
    snprintf(conf, sizeof conf, "%s/s3.conf", kdir);
    t_remote_write_conf(&fx, conf, NULL);
    int cst;
    char *out = t_cmd_run(kdir, &cst, "'%s' --config '%s' ls '%s'", t_cmd_bin(), conf, fx.uri);
    cr_expect(cst == 0 && strstr(out, "NEEDS KEY 's3-key-1'"), "%s", out);
    free(out);
    out = t_cmd_run(kdir, &cst, "'%s' --config '%s' --set dstl.encryption.key-file='%s' verify '%s'", t_cmd_bin(), conf,
                    kf, fx.uri);
    cr_expect(cst == 0 && strstr(out, "keys: s3-key-1 (") && strstr(out, "records checked"), "%s", out);
    free(out);

    /* a reading storage without the key file */
    c = t_remote_config(&fx, rdir, NULL);
    cr_assert_eq(dstl_storage_open(c, &r), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    cr_assert_eq(tk_verify(r, h, "p", 0, end, NKG, 0, NKG - 1), DSTL_ECRYPTO);
    cr_assert(strstr(dstl_last_error(), "key id 's3-key-1'") && strstr(dstl_last_error(), "s3://"), "%s",
              dstl_last_error());
    cr_assert_eq(dstl_storage_close(r), 0);
    dstl_handle_free(h);
    t_rm_rf(rdir);
    t_rm_rf(kdir);
    free(kf);
    free(wdir);
    free(rdir);
    free(kdir);
}

Test(remote_encrypt, recovery_from_s3_without_compression) { recover_from_s3("none"); }
Test(remote_encrypt, recovery_from_s3_with_zstd) { recover_from_s3("zstd"); }

/* Reads one plan reader to the end, checking records as tk_verify does; returns the count. */
static long plan_verify(dstl_restore *p, size_t entry, const char *tag, uint64_t to, uint32_t kgf, uint32_t kgl)
{
    dstl_reader *r;
    int rc = dstl_restore_reader_open(p, entry, 0, &r);
    if (rc < 0) return rc;
    uint64_t want = 0;
    long n = 0;
    dstl_record rec;
    while ((rc = dstl_reader_next(r, &rec)) == 1) {
        while (want < to && !(want % NKG >= kgf && want % NKG <= kgl)) want++;
        cr_assert_eq(rec.seq, want);
        char buf[128];
        int len = snprintf(buf, sizeof buf, TK_MARK "%s-%llu-padding-padding-padding", tag, (unsigned long long)want);
        cr_assert(rec.len == (size_t)len && memcmp(rec.data, buf, (size_t)len) == 0, "payload of %llu",
                  (unsigned long long)want);
        want++;
        n++;
    }
    dstl_reader_close(r);
    return rc < 0 ? rc : n;
}

Test(remote_encrypt, a_restore_plan_over_encrypted_segments_reads_every_task_its_key_groups)
{
    char *wdir = t_mkdtemp("enc-pw"), *rdir = t_mkdtemp("enc-pr"), *kdir = t_mkdtemp("enc-pk");
    char *kf = tk_write(kdir, "keys", "plan-key: " TK_HEX_B "\n", 0600);
    dstl_storage *s = t_remote_open(&fx, wdir, "dstl.encryption.key-file", kf, NULL);
    enum { NW = 4 };
    dstl_writer *w[NW];
    dstl_handle *h[NW];
    uint64_t end = 0;
    for (int i = 0; i < NW; i++) {
        char id[16];
        snprintf(id, sizeof id, "task-%d", i);
        cr_assert_eq(dstl_writer_open(s, id, 0, NKG - 1, &w[i]), 0);
    }
    for (int i = 0; i < NW; i++) end = tk_append(w[i], "q", 0, 800, NKG);
    for (int i = 0; i < NW; i++) h[i] = t_persist(w[i], 0, 1);
    for (int i = 0; i < NW; i++) cr_assert_eq(dstl_writer_close(w[i]), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    t_rm_rf(wdir);

    /* rescaled: each new task reads a quarter of the key groups of every old writer */
    dstl_storage *r = t_remote_open(&fx, rdir, "dstl.encryption.key-file", kf, NULL);
    dstl_restore_entry e[NW * NW];
    const dstl_handle *hs[NW];
    for (int i = 0; i < NW; i++) hs[i] = h[i];
    for (int t = 0; t < NW; t++)
        for (int i = 0; i < NW; i++)
            e[t * NW + i] = (dstl_restore_entry){.handles = &hs[i], .nhandles = 1,
                                                 .key_group_first = (uint32_t)(t * NKG / NW),
                                                 .key_group_last = (uint32_t)((t + 1) * NKG / NW - 1)};
    dstl_restore *p;
    cr_assert_eq(dstl_restore_plan(r, e, NW * NW, &p), 0, "%s", dstl_last_error());
    for (size_t k = 0; k < NW * NW; k++) {
        long n = plan_verify(p, k, "q", end, e[k].key_group_first, e[k].key_group_last);
        cr_assert_eq(n, (long)(end / NW), "entry %zu: %ld (%s)", k, n, dstl_last_error());
    }
    dstl_restore_stats rs;
    cr_assert_eq(dstl_restore_get_stats(p, &rs), 0);
    cr_assert_gt(rs.objects_fetched, 0, "the plan fetched from S3");
    cr_assert_eq(dstl_restore_close(p), 0);
    cr_assert_eq(dstl_storage_close(r), 0);

    /* the same plan without the key: DSTL_ECRYPTO naming the key id, from the plan's readers */
    r = t_remote_open(&fx, rdir, NULL);
    int rc = dstl_restore_plan(r, e, NW * NW, &p);
    long n = rc == 0 ? plan_verify(p, 0, "q", end, e[0].key_group_first, e[0].key_group_last) : rc;
    cr_assert_eq(n, DSTL_ECRYPTO, "%ld %s", n, dstl_last_error());
    cr_assert(strstr(dstl_last_error(), "key id 'plan-key'"), "%s", dstl_last_error());
    if (rc == 0) cr_assert_eq(dstl_restore_close(p), 0);
    cr_assert_eq(dstl_storage_close(r), 0);
    for (int i = 0; i < NW; i++) dstl_handle_free(h[i]);
    t_rm_rf(rdir);
    t_rm_rf(kdir);
    free(kf);
    free(wdir);
    free(rdir);
    free(kdir);
}
