/*
 * tests/test_remote_gc.c — dstl_gc over the remote prefix, against the S3 server tests/run.sh
 * starts: what a live handle references stays (local file and object), orphan segment objects
 * and incomplete multipart uploads of segment keys go, young ones stay, a dry run only counts,
 * keys under the prefix that are not where DSTL puts segments are never touched, this run's
 * own segments are kept, and a failure names s3://bucket/prefix.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstl.h"
#include "dstl/remote/remote.h"
#include "tests/helpers.h"
#include "tests/helpers_dstl.h"
#include "tests/helpers_remote.h"

#define NKG 8

static t_remote fx;

static void setup(void) { t_remote_init(&fx, "rgc"); }

static void teardown(void) { t_remote_fini(&fx); }

TestSuite(remote_gc, .init = setup, .fini = teardown, .timeout = 60);

/* A storage of the fixture on DIR/<sub>, uploading to uri (NULL: the fixture's), persist-delay 0. */
static dstl_storage *open_at(const char *sub, const char *uri)
{
    char ldir[4200];
    snprintf(ldir, sizeof ldir, "%s/%s", fx.dir, sub);
    return t_remote_open(&fx, ldir, "dstl.remote.uri", uri ? uri : fx.uri, "dstl.batch.persist-delay", "0", NULL);
}

static void counts(size_t *objects, size_t *uploads) { t_remote_count(&fx, objects, uploads); }

static void put(const char *key, size_t len)
{
    uint8_t *b = calloc(1, len + 1);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, key, b, len, false, &r), 0, "%s", r.error);
    free(b);
}

static void start_upload(const char *key)
{
    s3_result r;
    cr_assert_eq(s3_create_multipart_upload_sync(fx.s3, fx.bucket, key, &r), 0, "%s", r.error);
}

static void seg_key(const char *name, char *key, size_t cap)
{
    remote_loc loc;
    cr_assert_eq(remote_parse_uri(fx.uri, "test", &loc), 0);
    cr_assert_eq(remote_key(&loc, name, key, cap), 0);
}

static void report_is(const dstl_gc_report *r, uint64_t scanned, uint64_t deleted, uint64_t live, uint64_t young,
                      uint64_t bytes)
{
    cr_assert_eq(r->scanned, scanned, "scanned %llu, want %llu", (unsigned long long)r->scanned,
                 (unsigned long long)scanned);
    cr_assert_eq(r->deleted, deleted, "deleted %llu, want %llu", (unsigned long long)r->deleted,
                 (unsigned long long)deleted);
    cr_assert_eq(r->kept_live, live, "kept_live %llu, want %llu", (unsigned long long)r->kept_live,
                 (unsigned long long)live);
    cr_assert_eq(r->kept_young, young, "kept_young %llu, want %llu", (unsigned long long)r->kept_young,
                 (unsigned long long)young);
    cr_assert_eq(r->bytes_deleted, bytes, "bytes_deleted %llu, want %llu", (unsigned long long)r->bytes_deleted,
                 (unsigned long long)bytes);
}

Test(remote_gc, keeps_the_live_set_and_removes_orphans_and_stray_uploads)
{
    /* run A: two checkpoints in two segments; both handles stay live when it closes */
    dstl_storage *a = open_at("data", NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(a, "w", 0, NKG - 1, &w), 0);
    uint64_t mid = t_append_n(w, 1, 40, 0, NKG, 500);
    dstl_handle *h1 = t_persist(w, 0, 1);
    t_append_n(w, 1, 40, 0, NKG, 500);
    dstl_handle *h2 = t_persist(w, mid, 2);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(a), 0);
    size_t objects, uploads;
    counts(&objects, &uploads);
    cr_assert_eq(objects, 2);

    /* what a crash of another run leaves, and what is not DSTL's */
    char key[640];
    seg_key("0123456789abcdef-000000000007.seg", key, sizeof key);
    put(key, 1000);                                              /* orphan object */
    seg_key("0123456789abcdef-000000000008.seg", key, sizeof key);
    start_upload(key);                                           /* orphan incomplete upload */
    char other[640];
    snprintf(other, sizeof other, "%snotes.txt", fx.prefix_dir);
    put(other, 10);                                              /* not a segment */
    seg_key("0123456789abcdef-000000000009.seg", key, sizeof key);
    char wrong[640];
    size_t pl = strlen(fx.prefix_dir);
    snprintf(wrong, sizeof wrong, "%s%s/0123456789abcdef-000000000009.seg", fx.prefix_dir,
             strncmp(key + pl, "zz", 2) ? "zz" : "zy");
    put(wrong, 10);                                              /* a segment name where DSTL never puts it */
    snprintf(other, sizeof other, "%sother/big.bin", fx.prefix_dir);
    start_upload(other);                                         /* an upload that is not DSTL's */
    counts(&objects, &uploads);
    cr_assert_eq(objects, 5);
    cr_assert_eq(uploads, 2);

    /* run B sweeps with h1 live: local S1 S2, remote S1 S2 O, upload U = 6 scanned;
     * kept S1 twice; deleted S2 twice, O and U */
    dstl_storage *b = open_at("data", NULL);
    const dstl_handle *live[] = {h1};
    dstl_gc_report rep;
    uint64_t s2_bytes;
    {
        s3_list l;
        s3_result r;
        cr_assert_eq(s3_list_objects_all_sync(fx.s3, fx.bucket, fx.prefix_dir, 0, &l, &r), 0);
        for (size_t i = 0; i < l.n_objects; i++)
            cr_assert_gt(l.objects[i].last_modified_ms, 1600000000000ll, "LastModified of %s parsed", l.objects[i].key);
        s3_list_clear(&l);
    }
    cr_assert_eq(dstl_gc(b, live, 1, 0, 1, &rep), 0, "dry run: %s", dstl_last_error());
    s2_bytes = (rep.bytes_deleted - 1000) / 2;
    cr_assert_eq(rep.bytes_deleted, 2 * s2_bytes + 1000);
    cr_assert_gt(s2_bytes, 0);
    report_is(&rep, 6, 4, 2, 0, 2 * s2_bytes + 1000);
    counts(&objects, &uploads);
    cr_assert_eq(objects, 5, "a dry run deletes nothing");
    cr_assert_eq(uploads, 2);

    cr_assert_eq(dstl_gc(b, live, 1, 3600000, 0, &rep), 0, "%s", dstl_last_error());
    report_is(&rep, 6, 0, 2, 4, 0);
    counts(&objects, &uploads);
    cr_assert_eq(objects, 5, "young segments stay");
    cr_assert_eq(uploads, 2);

    cr_assert_eq(dstl_gc(b, live, 1, 0, 0, &rep), 0, "%s", dstl_last_error());
    report_is(&rep, 6, 4, 2, 0, 2 * s2_bytes + 1000);
    counts(&objects, &uploads);
    cr_assert_eq(objects, 3, "S1 and the two objects that are not DSTL's remain");
    cr_assert_eq(uploads, 1, "the upload that is not DSTL's remains");
    char ldir[4200];
    snprintf(ldir, sizeof ldir, "%s/data", fx.dir);
    cr_assert_eq(t_count_segments(ldir), 1, "the local copy of S1 remains");

    /* the live handle still reads, from S3 alone */
    dstl_storage *c = open_at("empty", NULL);
    cr_assert_eq(t_verify(c, h1, 1, 0, NKG, 0, NKG - 1, 500), 40, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(c), 0);

    /* once nothing is live, everything of DSTL's goes */
    cr_assert_eq(dstl_gc(b, NULL, 0, 0, 0, &rep), 0, "%s", dstl_last_error());
    report_is(&rep, 2, 2, 0, 0, rep.bytes_deleted);
    counts(&objects, &uploads);
    cr_assert_eq(objects, 2);
    cr_assert_eq(t_count_segments(ldir), 0);
    cr_assert_eq(dstl_storage_close(b), 0);
    dstl_handle_free(h1);
    dstl_handle_free(h2);
}

Test(remote_gc, keeps_what_this_storage_still_uses)
{
    dstl_storage *s = open_at("data", NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(s, "w", 0, NKG - 1, &w), 0);
    t_append_n(w, 2, 30, 0, NKG, 300);
    dstl_handle *h = t_persist(w, 0, 1);
    /* no live set given, min-age 0: the segment is this run's and still referenced */
    dstl_gc_report rep;
    cr_assert_eq(dstl_gc(s, NULL, 0, 0, 0, &rep), 0, "%s", dstl_last_error());
    report_is(&rep, 2, 0, 2, 0, 0);
    size_t objects, uploads;
    counts(&objects, &uploads);
    cr_assert_eq(objects, 1);
    cr_assert_eq(t_verify(s, h, 2, 0, NKG, 0, NKG - 1, 300), 30);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_handle_discard(s, h), 0);
    dstl_handle_free(h);
    cr_assert_eq(dstl_storage_close(s), 0);
    counts(&objects, &uploads);
    cr_assert_eq(objects, 0, "discarded and closed: the pipeline deleted it");
}

/* A bucket that is gone by the time gc lists it (dstl_storage_open already refuses a bucket
 * that does not exist: tests/test_remote_open.c). */
Test(remote_gc, failure_names_the_remote_location)
{
    char bucket[64], uri[100], listing[120];
    snprintf(bucket, sizeof bucket, "%.50s-gone", fx.bucket);
    snprintf(uri, sizeof uri, "s3://%s/p", bucket);
    snprintf(listing, sizeof listing, "%s/", uri);
    s3_result r;
    memset(&r, 0, sizeof r);
    cr_assert_eq(s3_create_bucket_sync(fx.s3, bucket, &r), 0, "%s", r.error);
    dstl_storage *s = open_at("data", uri);
    cr_assert_eq(s3_delete_bucket_sync(fx.s3, bucket, &r), 0, "%s", r.error);
    dstl_gc_report rep;
    int rc = dstl_gc(s, NULL, 0, 0, 1, &rep);
    cr_assert_lt(rc, 0);
    cr_assert_eq(rc, -ENOENT, "%d %s", rc, dstl_last_error());
    cr_assert(strstr(dstl_last_error(), listing) != NULL, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0);
}
