/*
 * tests/helpers_remote.h — the one fixture of every test that needs S3 (t_remote_ prefix):
 * tests/test_remote_*.c, test_s3_rgw.c, test_s3_faults.c, and the remote mode of t_config
 * (helpers_dstl.h).
 *
 * t_remote_init, from a suite's or test's .init, locates the server (DSTL_T_S3_*, exported by
 * tests/run.sh for the RGW it started or for DSTL_TEST_S3_*; missing = the test FAILS, naming
 * the variable and `make test`), opens a client straight to it, creates a fresh bucket and
 * picks a prefix unique to the test, so no two tests — in one run or in runs sharing an
 * endpoint — ever see each other's objects. t_remote_fini, from .fini, deletes every object
 * and multipart upload of the bucket, the bucket, the client and the scratch dir; it accepts a
 * fixture that init left half made (a failed assert) or never touched.
 *
 * Storages of the fixture: t_remote_config / t_remote_open (durability remote, the fixture's
 * URI and server); t_remote_set_s3 for a storage that only reads from S3; t_remote_write_conf
 * for the `dstl` command. Counting and listing are under the fixture's prefix.
 * Threads: a test's own thread. Failures end the test (Criterion asserts).
 */
#ifndef DSTL_TESTS_HELPERS_REMOTE_H
#define DSTL_TESTS_HELPERS_REMOTE_H

#include <stddef.h>

#include "dstl.h"
#include "tests/helpers_s3.h"

typedef struct t_remote {
    t_s3_env env;           /* the server: endpoint, keys, region                       */
    s3_client *s3;          /* a client straight to it (t_s3_opts): checks and cleanup */
    char bucket[64];        /* fresh for this test; gone after t_remote_fini            */
    char prefix[64];        /* unique to this test (p<pid>-<n>), no '/' at either end   */
    char prefix_dir[72];    /* prefix + "/": what every key of the fixture starts with  */
    char uri[160];          /* s3://bucket/prefix, for dstl.remote.uri                  */
    char *dir;              /* a fresh local scratch dir; removed by t_remote_fini      */
} t_remote;

/* The fixture for a test tagged tag (a short word: it goes into the bucket, prefix and dir
 * names). Asserts: a missing server environment or a failed bucket creation fails the test. */
void t_remote_init(t_remote *f, const char *tag);
/* Removes everything t_remote_init made; a failure to clean up is reported on stderr only.
 * Accepts a zeroed or half-made fixture; idempotent. */
void t_remote_fini(t_remote *f);

/* Sets what makes c a storage of the fixture: dstl.remote.uri = f->uri, dstl.durability
 * remote and t_remote_set_s3. Asserts. */
void t_remote_set(const t_remote *f, dstl_config *c);
/* Sets the server's dstl.s3.* keys on c: endpoint, region, keys and path-style (RGW needs
 * it); everything else (payload signing, timeouts) stays at the default unless a test sets
 * it. Asserts. */
void t_remote_set_s3(const t_remote *f, dstl_config *c);
/* A config of a storage on local_dir that uploads under the fixture's prefix: dstl.local.dir,
 * and t_remote_set; then the key/value
 * pairs (NULL-terminated), which override (a proxy's dstl.s3.endpoint, another
 * dstl.remote.uri, dstl.durability local). Asserts. */
dstl_config *t_remote_config(const t_remote *f, const char *local_dir, ...);
/* The same, opened (dstl_storage_open). Asserts. */
dstl_storage *t_remote_open(const t_remote *f, const char *local_dir, ...);
/* Writes the settings of t_remote_set, then the key/value pairs (NULL-terminated), as a
 * config file for the `dstl` command (--config path). Asserts. */
void t_remote_write_conf(const t_remote *f, const char *path, ...);

/* Objects (leases left out) and incomplete multipart uploads under the fixture's prefix.
 * Asserts that the listing works. */
void t_remote_count(const t_remote *f, size_t *objects, size_t *uploads);
/* Lease objects under the fixture's prefix. Asserts. */
size_t t_remote_leases(const t_remote *f);

#endif
