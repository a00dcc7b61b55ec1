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
