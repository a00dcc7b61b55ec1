/*
 * dstl/remote/remote.h — where segments live in the object store, and S3 clients from the config.
 *
 * Layout: dstl.remote.uri = s3://BUCKET/PREFIX. A segment named N (local file
 * <dstl.local.dir>/N, "<run id>-<no>.seg") is the object
 *     PREFIX/<hh>/N        hh = two hex digits of a hash of N
 * The hash spreads a run's segments over 256 key prefixes, so S3's per-prefix request rate
 * (about 3,500 PUT/s per prefix) is never the limit; the name alone gives the key, so a
 * handle needs to carry only the bucket and prefix (its remote_uri) and segment names.
 * Objects are written once with If-None-Match: * and never overwritten.
 *
 * Threads: an s3_client is used by one thread at a time (s3/s3.h): the pipeline has its own,
 * and each remote reader or gc call makes its own.
 */
#ifndef DSTL_REMOTE_H
#define DSTL_REMOTE_H

#include <stddef.h>

#include "dstl/config.h"
#include "s3/s3.h"

typedef struct {
    char bucket[64];            /* S3 bucket names are at most 63 bytes */
    char prefix[512];           /* without leading or trailing '/'; may be "" */
} remote_loc;

/* Parses "s3://bucket/prefix". DSTL_ECONFIG naming `what` (the key, or "handle") when it is
 * not an s3:// URI with a valid bucket name. */
int remote_parse_uri(const char *uri, const char *what, remote_loc *out);

/* The object key of segment `name`: "<prefix>/<hh>/<name>" (no leading '/' when the prefix
 * is empty). Returns 0 or -ENAMETOOLONG. */
int remote_key(const remote_loc *loc, const char *name, char *buf, size_t cap);

/* The key prefix every segment of loc lives under ("<prefix>/" or ""), for listings. */
void remote_list_prefix(const remote_loc *loc, char *buf, size_t cap);

/* Leases (dstl/README.md, "Who may delete what"): each run that uploads keeps the object
 *     PREFIX/_leases/<run id>-t<lease timeout in ms>.lease
 * fresh (rewritten every dstl.remote.lease-refresh); gc on any machine leaves a run alone
 * while its lease is younger than its timeout (the one in the key, or gc's own if larger),
 * judged on the server's clock. The key is not of a segment's shape: gc never takes it for one.
 * remote_lease_key writes a run's key (0 or -ENAMETOOLONG); remote_lease_parse reads the run
 * id and timeout back from a key of that shape (0, or -EINVAL for any other key);
 * remote_lease_prefix gives the prefix every lease key starts with, for listings. */
int remote_lease_key(const remote_loc *loc, const char *run_id, uint64_t timeout_ms, char *buf, size_t cap);
int remote_lease_parse(const remote_loc *loc, const char *key, char *run_id, size_t cap, uint64_t *timeout_ms);
void remote_lease_prefix(const remote_loc *loc, char *buf, size_t cap);

/* An S3 client configured from the dstl.s3.* and dstl.upload.* keys. Returns 0, or the
 * client's error with a detail naming the endpoint (credentials never appear). */
int remote_client_new(const config_values *cv, s3_client **out);

/* Where such a client takes its credentials from (s3_credentials_source): "options" when the
 * dstl.s3.access-key/secret-key keys are set, the AWS_* environment, or a profile of the
 * credentials file; never a value. 0, or -ENOENT with buf saying where it looked. */
int remote_credentials_source(const config_values *cv, char *buf, size_t cap);

/* The open-time check of a remote storage (check.c): one ListObjectsV2 of at most one key
 * under loc's prefix, on a client of its own, cancelled after bound_ms. Returns 0 when the
 * server answered; -ENOENT (404 NoSuchBucket) or -EACCES (403 SignatureDoesNotMatch,
 * InvalidAccessKeyId) with a detail naming s3://bucket/prefix when the answer settles that
 * the storage cannot work; 1 with warn[] filled ("warning: ...") for anything else (no answer
 * in time, refused connections, 5xx, AccessDenied): an outage, the storage opens anyway.
 * Blocking (at most bound_ms plus one loop turn); creates nothing. */
int remote_check(const config_values *cv, const remote_loc *loc, uint64_t bound_ms, char *warn, size_t cap);

#endif
