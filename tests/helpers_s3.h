/*
 * tests/helpers_s3.h — S3 test helpers (t_s3_ prefix): the server from the environment,
 * unique buckets, emptying them, and the fault proxy (tests/tools/s3proxy.c). The fixture of
 * the tests that need S3 is built on these: tests/helpers_remote.h.
 *
 * The server comes from DSTL_T_S3_ENDPOINT / _ACCESS_KEY / _SECRET_KEY / _REGION, exported by
 * tests/run.sh (RGW it started, or the external endpoint of DSTL_TEST_S3_*). A test that needs
 * it and finds it missing FAILS: t_s3_env returns -ENOENT with the reason in why.
 * Threads: a test's own thread. No Criterion here (helpers link into every test binary).
 */
#ifndef DSTL_TESTS_HELPERS_S3_H
#define DSTL_TESTS_HELPERS_S3_H

#include <stddef.h>
#include <sys/types.h>

#include "s3/s3.h"

typedef struct t_s3_env {
    char endpoint[256];
    char access_key[256];
    char secret_key[256];
    char region[64];
} t_s3_env;

/* Reads the server's environment. 0, or -ENOENT with why[] naming the missing variable. */
int t_s3_env_get(t_s3_env *e, char *why, size_t why_cap);

/* Client options for e (path-style, as RGW needs; wire_crc32c, as DSTL gives it), with short
 * timeouts for tests. The strings point into e. */
s3_opts t_s3_opts(const t_s3_env *e);

/* A unique bucket name "dstl-t-<tag>-<pid>-<n>" (tag is cut to fit 63 characters). */
void t_s3_bucket_name(char *out, size_t cap, const char *tag);

/* Reads the environment, makes a client (t_s3_opts) and a fresh bucket named after tag. 0, or
 * -errno with why[] saying what failed. Tests use the fixture built on it, t_remote_init
 * (tests/helpers_remote.h). */
int t_s3_setup(t_s3_env *e, s3_client **c, char *bucket, size_t bucket_cap, const char *tag,
               char *why, size_t why_cap);

/* Deletes every object and aborts every multipart upload in bucket, then deletes the bucket.
 * 0 or the first failure's code (why gets its detail). */
int t_s3_drop_bucket(s3_client *c, const char *bucket, char *why, size_t why_cap);

/* Counts objects and incomplete multipart uploads under prefix (NULL: all), leaving out the
 * leases of running storages (keys under .../_leases/). 0 or -errno. */
int t_s3_count(s3_client *c, const char *bucket, const char *prefix, size_t *objects,
               size_t *uploads);
/* Counts the lease objects (keys under .../_leases/) under prefix. 0 or -errno. */
int t_s3_count_leases(s3_client *c, const char *bucket, const char *prefix, size_t *leases);

/* The fault proxy: started on 127.0.0.1 with a free port, forwarding to upstream (an
 * http://host:port URL) and applying the fault script (see tests/tools/s3proxy.c). */
typedef struct t_s3_proxy {
    pid_t pid;
    int port;
    char url[64]; /* http://127.0.0.1:port */
} t_s3_proxy;

/* Starts the proxy (from DSTL_TEST_TOOLS, else the build's tools/ beside this binary).
 * 0 or -errno with why[] saying what failed. */
int t_s3_proxy_start(t_s3_proxy *p, const char *upstream, const char *script, char *why,
                     size_t why_cap);
/* The same on a given port (0: a free one): the proxy again where it was, after a stop
 * (SO_REUSEADDR: the old sockets do not block it). */
int t_s3_proxy_start_on(t_s3_proxy *p, const char *upstream, const char *script, int port, char *why,
                        size_t why_cap);
/* Stops it (SIGTERM, then waits). */
void t_s3_proxy_stop(t_s3_proxy *p);

#endif
