/*
 * s3/s3.h — the S3 client of DSTL: SigV4 (ours), libcurl's multi interface, libxml2.
 *
 * What: PutObject (optionally If-None-Match: *), multipart uploads (create, parts in parallel,
 * complete, abort, list parts, list uploads), ranged GET into a caller buffer, HEAD, DELETE,
 * DeleteObjects (split into batches of 1,000), ListObjectsV2, CreateBucket/DeleteBucket, and
 * s3_upload(): one PUT below a threshold, a parallel multipart upload above it. Every request
 * is retried (one classifier, full-jitter backoff, bounded attempts) and hedged (an attempt
 * slower than attempt_timeout_ms gets a parallel twin; the first success wins, the rest are
 * cancelled). Knows nothing of segments; includes only include/dstl.h of DSTL, and takes its
 * CRC32C from the caller (s3_opts.crc32c). This header is the interface; what the sources of
 * s3/ share among themselves (SigV4 stages, retry policy, the request engine) is in
 * s3/s3_int.h, for them and their tests only.
 *
 * Outcomes. Success of a write (PUT, UploadPart, Complete, s3_upload) means the server holds
 * exactly what was sent: every PUT and part is checked against the body (s3_write_check; a
 * copy that differs is never acknowledged but replaced within max_attempts). An ambiguous
 * answer (412 or 409 ConditionalRequestConflict on If-None-Match, NoSuchUpload on Complete)
 * is settled by a HEAD comparing ETags, whatever the number of attempts (libcurl re-sends a
 * request by itself when a reused connection dies before any answer byte; such re-sends are
 * counted as attempts). An outcome reported as success is never cleaned up afterwards.
 *
 * Cancel and cleanup. s3_op_cancel() and a failure after every attempt both complete the
 * operation at once: its callback runs on the next s3_client_run turn, whatever is still
 * hanging. What the operation may have left on the server (a PUT that may have landed, a
 * multipart upload to abort, a completed object that is ours, stray uploads of a retried
 * Create) is removed afterwards by a DETACHED cleanup: an internal operation with one
 * overall deadline (s3_opts.cleanup_timeout_ms), not counted by s3_client_pending but by
 * s3_client_cleanups; at its deadline its requests are cancelled and it is dropped (what is
 * left is for `dstl gc`: ListMultipartUploads + ListObjectsV2). A cleanup never touches the
 * caller's buffers: the caller may free them as soon as the callback has run.
 *
 * Threads: an s3_client is driven by ONE thread (the pipeline's event loop, or whoever calls
 * the *_sync wrappers): every function here is "one thread at a time" on its client, except
 * s3_client_wakeup(), which any thread may call. Operations never run their callback inside
 * the call that started them: callbacks run from s3_client_run() (or a *_sync wrapper, which
 * runs the loop), on the client's thread.
 *
 * Errors: functions return 0 (or a count) or a negative code: -errno or DSTL_E*. Failure
 * detail never goes through dstl_last_error (s3/ cannot see dstl/): it is in s3_result, whose
 * `error` is one line naming the request, e.g.
 *   "PUT s3://b/k: 503 SlowDown: Please reduce your request rate (req-id tx0001, 3 attempts)".
 * Credentials never appear in results, errors or logs. Codes of a finished operation:
 *   0              success
 *   -ENOENT        404 / NoSuchKey / NoSuchBucket / NoSuchUpload
 *   -EEXIST        412 on If-None-Match: * (the key exists and is not ours), BucketAlreadyExists
 *   -EACCES        403 (AccessDenied, SignatureDoesNotMatch, InvalidAccessKeyId, ...)
 *   -ERANGE        416 InvalidRange (GET past the end of the object)
 *   -ETIMEDOUT     the last attempt timed out (connect or transfer)
 *   -ECONNREFUSED  the last attempt could not connect
 *   -EMSGSIZE      a response larger than max_response_bytes (or a 206 longer than the range)
 *   -ECANCELED     s3_op_cancel() was called
 *   -EINVAL        bad arguments (returned by the start call; no callback then)
 *   -ENOMEM        out of memory
 *   DSTL_EREMOTE   any other remote failure after every attempt (5xx, other 4xx, resets,
 *                  truncated or malformed responses, a 206 with another range than asked,
 *                  a written copy that differed from the body every time)
 */
#ifndef DSTL_S3_H
#define DSTL_S3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dstl.h"

/* ---- objects ----------------------------------------------------------------------------- */

typedef struct s3_client s3_client; /* one event loop's S3 client: connections, credentials */
typedef struct s3_op s3_op;         /* an operation in flight; valid until its callback returns */
typedef struct s3_transport s3_transport; /* a test's network (s3_opts.transport): s3/s3_int.h */

/* ---- results ----------------------------------------------------------------------------- */

typedef struct s3_object_info { /* one ListObjectsV2 entry */
    char *key;
    uint64_t size;
    char etag[72];
    int64_t last_modified_ms; /* <LastModified>, Unix ms (UTC); 0 when the server gave none */
} s3_object_info;

typedef struct s3_upload_info { /* one ListMultipartUploads entry */
    char *key;
    char *upload_id;
    int64_t initiated_ms; /* <Initiated>, Unix ms (UTC); 0 when the server gave none */
} s3_upload_info;

typedef struct s3_part_info { /* one part: ListParts entry, or input of Complete */
    int part_number;
    uint64_t size;
    char etag[72]; /* with its quotes, as the server gave it */
} s3_part_info;

/* A listing: the arrays of its kind are filled, the others are empty. Owned by whoever
 * holds it: inside a callback the s3_result's list is the client's (valid during the
 * callback only); a *_sync listing is the caller's, freed by s3_list_clear(). */
typedef struct s3_list {
    s3_object_info *objects;
    size_t n_objects;
    s3_upload_info *uploads;
    size_t n_uploads;
    s3_part_info *parts;
    size_t n_parts;
    char **prefixes; /* CommonPrefixes (ListObjectsV2 with a delimiter) */
    size_t n_prefixes;
    bool truncated;
    char *next_token;            /* ListObjectsV2: NextContinuationToken; ListParts: marker */
    char *next_key_marker;       /* ListMultipartUploads */
    char *next_upload_id_marker; /* ListMultipartUploads */
    int64_t server_date_ms;      /* the server's Date (Unix ms; 0 when absent): of this page in
                                  * a callback; of the FIRST page in a *_all_sync listing (the
                                  * earliest answer: the conservative "now" to judge the
                                  * entries' ages by, on the server's clock) */
} s3_list;

/* Frees what a listing holds and zeroes it. NULL is fine. */
void s3_list_clear(s3_list *l);

/* How the server's copy of a written body was checked (PUT, UploadPart, s3_upload). */
typedef enum s3_write_check {
    S3_CHECK_NONE = 0,   /* not a write, or not checked (a part under S3_VERIFY_READ_BACK) */
    S3_CHECK_CRC32C,     /* the answer's x-amz-checksum-crc32c equals the body's (AWS) */
    S3_CHECK_SHA256,     /* the payload was signed with its SHA-256: the server verified it */
    S3_CHECK_MD5,        /* the ETag equals the hex MD5 of the body (RGW 16, unsigned payload) */
    S3_CHECK_READ_BACK,  /* read back and compared (S3_VERIFY_READ_BACK) */
} s3_write_check;

/* What an operation gave: the code, the detail of its failure, and its outputs. */
typedef struct s3_result {
    int err;             /* 0 or a negative code (see the table above) */
    int http_status;     /* of the last response, 0 when none came */
    int attempts;        /* HTTP attempts made, hedges and retries included */
    char s3_code[64];    /* "SlowDown", "NoSuchKey", ... ("" when none) */
    char message[256];   /* the server's Message, or the transport's reason */
    char request_id[128];
    char error[512];     /* one line: method s3://bucket/key: status code: message (req-id) */
    /* outputs */
    char etag[128];       /* PUT, Complete, UploadPart, HEAD, GET, s3_upload */
    char upload_id[512];  /* CreateMultipartUpload */
    uint64_t bytes;       /* GET: bytes written into the buffer; HEAD: the object size */
    uint64_t object_size; /* GET: the object's whole size (Content-Range); HEAD: same as bytes */
    size_t deleted;       /* DeleteObjects: keys deleted (absent keys count as deleted) */
    size_t delete_errors; /* DeleteObjects: keys the server refused */
    int parts;            /* s3_upload: 0 for a single PUT, else the number of parts */
    const s3_list *list;  /* list operations: valid during the callback only */
    int64_t server_date_ms; /* the Date header of the last answer (Unix ms, the server's clock;
                             * 0 when absent), for every op */
    s3_write_check write_check; /* writes: how the stored copy was checked (a multipart upload:
                                 * S3_CHECK_READ_BACK when read back, else the lowest value
                                 * among its parts') */
} s3_result;

/* The completion of an operation: runs once, from s3_client_run on the client's thread.
 * r and everything it points to is valid during the call only. The op is freed after. */
typedef void (*s3_done_fn)(void *ctx, const s3_result *r);

/* ---- client ------------------------------------------------------------------------------ */

/* How writes are verified when the answer carries no x-amz-checksum-crc32c and the payload was
 * not SHA-256 signed (see s3_write_check and s3/README.md for which servers need what). */
typedef enum s3_verify_mode {
    S3_VERIFY_AUTO = 0,   /* the ETag must be the hex MD5 of the body (computed only then) */
    S3_VERIFY_READ_BACK,  /* servers whose ETag is not an MD5 (SSE-KMS, SSE-C): the object is
                           * read back and compared before success (a multipart upload after
                           * its Complete) */
} s3_verify_mode;

typedef enum s3_payload_mode {
    S3_PAYLOAD_AUTO = 0,        /* SHA-256 below 1 MiB, UNSIGNED + CRC32C from 1 MiB on */
    S3_PAYLOAD_SHA256,          /* x-amz-content-sha256: the body's digest (signed) */
    S3_PAYLOAD_UNSIGNED_CRC32C, /* UNSIGNED-PAYLOAD + x-amz-checksum-crc32c (fast path) */
} s3_payload_mode;

/* Client options: 0/NULL means the default (except crc32c: required); units are in the names.
 * Strings are copied. */
typedef struct s3_opts {
    /* The CRC32C (Castagnoli) of buf continuing crc (0 for a fresh value): the caller's, as s3/
     * keeps none of its own (DSTL gives wire_crc32c). It makes x-amz-checksum-crc32c for
     * unsigned payloads and checks the one an answer echoes. Required: s3_client_new refuses
     * NULL. Called on the client's thread. */
    uint32_t (*crc32c)(uint32_t crc, const void *buf, size_t len);
    const char *endpoint;      /* "http://127.0.0.1:8080"; NULL: https://s3.<region>.amazonaws.com */
    const char *region;        /* NULL: "us-east-1" */
    bool path_style;           /* http://host/bucket/key (RGW, MinIO) vs http://bucket.host/key */
    const char *access_key;    /* NULL: AWS_ACCESS_KEY_ID, then ~/.aws/credentials */
    const char *secret_key;    /* NULL: AWS_SECRET_ACCESS_KEY, then ~/.aws/credentials */
    const char *session_token; /* NULL: AWS_SESSION_TOKEN, then ~/.aws/credentials */
    const char *profile;       /* ~/.aws/credentials section; NULL: AWS_PROFILE or "default" */
    const char *credentials_file; /* NULL: AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials */
    bool tls_no_verify;        /* false (default): verify the server's certificate and name */
    const char *ca_file;       /* PEM bundle; NULL: the system's */
    int connections;           /* parallel connections; 0: 8 */
    uint32_t connect_timeout_ms;  /* 0: 5000 */
    uint32_t attempt_timeout_ms;  /* an attempt slower than this gets a hedged twin; 0: 1000 */
    uint32_t transfer_timeout_ms; /* an attempt is abandoned after this; 0: 3 x attempt timeout
                                   * (at least 10 s) */
    int max_attempts;             /* per request, hedges included; 0: 3 */
    uint32_t next_attempt_delay_ms; /* backoff base after an error (full jitter); 0: 500 */
    uint32_t max_backoff_ms;        /* backoff cap; 0: 20 x next_attempt_delay_ms */
    s3_payload_mode payload;
    s3_verify_mode verify_writes;   /* 0: S3_VERIFY_AUTO */
    uint32_t cleanup_timeout_ms;    /* one deadline for each detached cleanup, and for all of
                                     * them together in s3_client_free; 0: max_attempts x
                                     * attempt_timeout_ms + 1000 */
    size_t max_response_bytes;      /* XML and error bodies; 0: 16 MiB */
    /* seams (tests): 0/NULL uses the real thing */
    uint64_t (*now_ms)(void *seam_ctx);          /* monotonic clock for timers */
    int64_t (*wall_time_s)(void *seam_ctx);      /* Unix time for signatures */
    void (*sleep_ms)(void *seam_ctx, uint32_t ms); /* waits when only timers/fakes are pending */
    uint32_t (*random)(void *seam_ctx);          /* jitter */
    void *seam_ctx;
    const s3_transport *transport;               /* replaces libcurl's network */
} s3_opts;

/* Creates a client. Resolves credentials (opts, then the AWS_* environment, then the
 * credentials file) now. Returns 0, -EINVAL (no opts->crc32c; bad endpoint/options; no
 * credentials found), -ENOMEM; on failure res (if not NULL) says why. Does not touch the
 * network. */
int s3_client_new(const s3_opts *opts, s3_client **out, s3_result *res);

/* Where s3_client_new would take the credentials from, for reports (`dstl config`), never a
 * value: "options" (opts' keys), "environment AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY[,
 * AWS_SESSION_TOKEN]" or "profile [NAME] of PATH". Returns 0, or -ENOENT with buf saying where
 * it looked, -EINVAL when a value is too long. Reads the environment and the file; no network. */
int s3_credentials_source(const s3_opts *opts, char *buf, size_t cap);

/* Cancels every operation still in flight (their callbacks run with -ECANCELED), then runs the
 * loop until the detached cleanups are done, for at most cleanup_timeout_ms in all (one bound,
 * not one per cleanup), abandons the rest (left for dstl gc) and frees the client. NULL is
 * fine. Blocking. */
void s3_client_free(s3_client *c);

/* A descriptor the caller wants s3_client_run to wait on too (POLLIN/POLLPRI/POLLOUT). */
typedef struct s3_waitfd {
    int fd;
    short events;
    short revents; /* set by s3_client_run */
} s3_waitfd;

/* One turn of the event loop: waits up to timeout_ms (less when a timer is due, 0 when work
 * is ready) for network activity, a wakeup, or one of the extra fds; then performs
 * transfers, fires timers (hedges, backoffs), starts queued attempts and runs the
 * completions that are due. Returns the number of operation callbacks it ran (>= 0), or
 * -errno (-ENOMEM, -EIO for a libcurl failure). */
int s3_client_run(s3_client *c, s3_waitfd *extra, size_t n_extra, int timeout_ms);

/* Makes a waiting s3_client_run return early. Thread-safe; async-signal-unsafe. */
void s3_client_wakeup(s3_client *c);

/* Operations started and not yet completed (detached cleanups are not counted). */
size_t s3_client_pending(const s3_client *c);

/* Detached cleanups still running (each ends by its deadline at the latest). */
size_t s3_client_cleanups(const s3_client *c);

/* Whether a write of this client was last shown stored equal by its body's MD5 ETag (the
 * server echoed no checksum: RGW 16 with unsigned payloads, s3_write_check): a caller that
 * builds a body piece by piece may then hash it as it goes (s3_md5) and hand the ETag to
 * s3_upload (s3_upload_opts.body_md5_etag), instead of the client hashing it when the answer
 * comes, on the way to the acknowledgement. The client's thread. */
bool s3_client_md5_checks(const s3_client *c);

/* The MD5 ETag of a body fed in order, piece by piece ("\"hex\"", as a single PUT's ETag).
 * s3_md5_new: NULL when out of memory. s3_md5_end writes the ETag and frees; s3_md5_free
 * frees without one. NULL is fine for add, end ("" then) and free. */
typedef struct s3_md5 s3_md5;
s3_md5 *s3_md5_new(void);
void s3_md5_add(s3_md5 *m, const void *p, size_t n);
void s3_md5_end(s3_md5 *m, char out[72]);
void s3_md5_free(s3_md5 *m);

/* Counters since the client was made (for stats and cost accounting). */
typedef struct s3_stats {
    uint64_t requests;  /* HTTP attempts started */
    uint64_t retries;   /* attempts after a failed one */
    uint64_t hedges;    /* attempts started because another was slow */
    uint64_t bytes_sent;     /* request bodies */
    uint64_t bytes_received; /* response bodies */
    uint64_t resends;        /* requests libcurl sent again by itself (a reused connection died
                              * before any answer byte); counted in requests too */
    uint64_t corrupt_writes; /* written copies that differed from the body (then replaced) */
    uint64_t cleanups;       /* detached cleanups started */
    uint64_t cleanups_incomplete; /* of which a step failed or the deadline passed: what they
                                   * were removing is left for dstl gc */
} s3_stats;
void s3_client_stats(const s3_client *c, s3_stats *out);

/* Cancels an operation: its requests stop now and its callback runs with -ECANCELED on the
 * next s3_client_run turn — never inside this call, and never later than that turn. What it
 * may have created remotely is removed by a detached cleanup afterwards (a started multipart
 * upload is aborted; an object that may have landed is deleted when its ETag shows it is
 * ours). An op whose success is already queued stays a success. No effect once the callback
 * has run (the pointer is invalid then: do not call). */
void s3_op_cancel(s3_op *op);

/* ---- asynchronous operations --------------------------------------------------------------
 * Each returns 0 after starting (and then its callback runs exactly once), or -EINVAL /
 * -ENOMEM without starting (no callback). op_out, when not NULL, receives the operation for
 * s3_op_cancel. Buffers passed in (bodies, GET buffers, key arrays, parts) must stay valid
 * and unchanged until the callback; strings (bucket, key, ids, tokens) are copied. Keys are
 * raw (not URL-encoded). */

/* r->etag; r->write_check says how the stored copy was checked (a copy that differs from the
 * body is replaced: with if_none_match the corrupt object, recognised by the ETag it came
 * back with, is deleted first). A 412 (if_none_match) or 409 ConditionalRequestConflict is
 * settled by a HEAD: our ETag (the body's MD5) -> success, another -> -EEXIST. On failure or
 * cancel, an object that may have landed is deleted by a detached cleanup when it is ours. */
int s3_put_object(s3_client *c, const char *bucket, const char *key, const void *body,
                  size_t len, bool if_none_match, s3_op **op_out, s3_done_fn cb, void *ctx);

/* Reads [offset, offset + len) of the object into buf (fewer bytes when the object ends
 * sooner: r->bytes says how many; r->object_size gives the whole size). len 0 reads nothing
 * but still checks the object exists. -ERANGE when offset is at or past the end. */
int s3_get_object(s3_client *c, const char *bucket, const char *key, uint64_t offset,
                  void *buf, size_t len, s3_op **op_out, s3_done_fn cb, void *ctx);

/* As s3_get_object, and the body is handed over as it arrives: progress(pctx, n, size) runs
 * on the client's thread (inside s3_client_run) each time more of buf is final, [0, n) of it:
 * those bytes are the object's and are never written again by this operation — a retry or a
 * hedged twin that wins only fills what follows them. size is the whole object's size the
 * answer names (Content-Range, or the length of a 200 that ignored Range). progress must not
 * call into the client. The callback cb still ends the operation as for s3_get_object (and
 * may report a failure after some bytes were handed over: they stay valid). */
typedef void (*s3_progress_fn)(void *pctx, size_t final_bytes, uint64_t object_size);
int s3_get_object_stream(s3_client *c, const char *bucket, const char *key, uint64_t offset,
                         void *buf, size_t len, s3_progress_fn progress, void *pctx,
                         s3_op **op_out, s3_done_fn cb, void *ctx);

/* r->bytes = r->object_size = the size; r->etag. */
int s3_head_object(s3_client *c, const char *bucket, const char *key, s3_op **op_out,
                   s3_done_fn cb, void *ctx);

/* Deleting an absent key succeeds (S3 semantics). */
int s3_delete_object(s3_client *c, const char *bucket, const char *key, s3_op **op_out,
                     s3_done_fn cb, void *ctx);

/* Deletes n keys in batches of at most 1,000 (sent in parallel). Fails (DSTL_EREMOTE, the
 * first refused key in r->error) when the server refused any key; r->deleted and
 * r->delete_errors count. The keys array must stay valid until the callback. */
int s3_delete_objects(s3_client *c, const char *bucket, const char *const *keys, size_t n,
                      s3_op **op_out, s3_done_fn cb, void *ctx);

/* One ListObjectsV2 page: prefix and delimiter may be NULL; continuation is NULL for the
 * first page, then r->list->next_token; max_keys 0 means the server's default (1,000). */
int s3_list_objects(s3_client *c, const char *bucket, const char *prefix, const char *delimiter,
                    const char *continuation, int max_keys, s3_op **op_out, s3_done_fn cb,
                    void *ctx);

/* One ListMultipartUploads page (markers NULL for the first page). */
int s3_list_multipart_uploads(s3_client *c, const char *bucket, const char *prefix,
                              const char *key_marker, const char *upload_id_marker,
                              s3_op **op_out, s3_done_fn cb, void *ctx);

/* r->upload_id. Never hedged (a twin would create a second upload); retried after errors. */
int s3_create_multipart_upload(s3_client *c, const char *bucket, const char *key,
                               s3_op **op_out, s3_done_fn cb, void *ctx);

/* part_number 1..10000; r->etag is the part's ETag (keep it for Complete). The stored part is
 * checked like a PUT (a differing copy is re-uploaded under the same number); under
 * S3_VERIFY_READ_BACK without a checksum in the answer r->write_check is S3_CHECK_NONE (a part
 * cannot be read before its Complete: s3_upload reads the object back then). */
int s3_upload_part(s3_client *c, const char *bucket, const char *key, const char *upload_id,
                   int part_number, const void *body, size_t len, s3_op **op_out,
                   s3_done_fn cb, void *ctx);

/* parts in ascending part_number order, with their ETags. if_none_match sends
 * If-None-Match: * (servers that support it refuse to overwrite). A NoSuchUpload or 412 (an
 * earlier attempt, or a re-send by libcurl, may have completed it) is settled by a HEAD that
 * compares the multipart ETag. XML answers may start with whitespace (AWS sends some while it
 * works); a 200 whose body is an <Error> is that error. No cleanup at this level. */
int s3_complete_multipart_upload(s3_client *c, const char *bucket, const char *key,
                                 const char *upload_id, const s3_part_info *parts, size_t n,
                                 bool if_none_match, s3_op **op_out, s3_done_fn cb, void *ctx);

/* Aborting an upload that is gone (aborted or completed) succeeds. */
int s3_abort_multipart_upload(s3_client *c, const char *bucket, const char *key,
                              const char *upload_id, s3_op **op_out, s3_done_fn cb, void *ctx);

/* One ListParts page (part_marker 0 for the first; then atoi of r->list->next_token). */
int s3_list_parts(s3_client *c, const char *bucket, const char *key, const char *upload_id,
                  int part_marker, s3_op **op_out, s3_done_fn cb, void *ctx);

/* BucketAlreadyOwnedByYou counts as success. */
int s3_create_bucket(s3_client *c, const char *bucket, s3_op **op_out, s3_done_fn cb,
                     void *ctx);
int s3_delete_bucket(s3_client *c, const char *bucket, s3_op **op_out, s3_done_fn cb,
                     void *ctx);

/* The high-level upload: a single PUT when len < multipart_threshold, else a multipart
 * upload with parts of part_size sent in parallel (each part retried and hedged on its own,
 * with the same upload id). A failure (the first part or Complete that fails after every
 * attempt) or a cancel is reported at once; a detached cleanup then aborts the multipart
 * upload, deletes an object that may have landed when its ETag is ours, and aborts stray
 * uploads of a retried Create (best effort within cleanup_timeout_ms; s3_stats counts the
 * ones that did not finish; dstl gc removes what they leave). After a success only strays
 * are removed. Under S3_VERIFY_READ_BACK a multipart object whose parts were not checked is
 * read back after its Complete; a differing copy is deleted and the upload fails.
 * r->etag is the object's ETag; r->parts the number of parts (0 for a single PUT). */
typedef struct s3_upload_opts {
    size_t part_size;           /* 0: 8 MiB; S3 needs >= 5 MiB for every part but the last */
    size_t multipart_threshold; /* 0: 16 MiB */
    bool if_none_match;         /* never overwrite an existing object (412 -> -EEXIST) */
    /* Optional: the MD5 ETag of exactly buf[0, len) (s3_md5's form), when the caller hashed
     * it already: a single PUT checks an MD5 ETag against it instead of hashing the body when
     * the answer comes. A wrong one can only fail the write (-EBADMSG), never pass it. */
    const char *body_md5_etag;
} s3_upload_opts;
int s3_upload(s3_client *c, const char *bucket, const char *key, const void *buf, size_t len,
              const s3_upload_opts *opts, s3_op **op_out, s3_done_fn cb, void *ctx);

/* ---- blocking wrappers ---------------------------------------------------------------------
 * The same operations, run to completion by running the client's loop on the calling thread
 * (other operations of the client progress meanwhile, and their callbacks run). Return the
 * operation's code; res (may be NULL) receives its result (res->list is NULL: listings go to
 * *out). The *_all listings follow continuations to the end (at most max_items entries; 0 =
 * no limit) and hand the caller an s3_list to free with s3_list_clear. */

int s3_put_object_sync(s3_client *c, const char *bucket, const char *key, const void *body,
                       size_t len, bool if_none_match, s3_result *res);
int s3_get_object_sync(s3_client *c, const char *bucket, const char *key, uint64_t offset,
                       void *buf, size_t len, s3_result *res);
int s3_head_object_sync(s3_client *c, const char *bucket, const char *key, s3_result *res);
int s3_delete_object_sync(s3_client *c, const char *bucket, const char *key, s3_result *res);
int s3_delete_objects_sync(s3_client *c, const char *bucket, const char *const *keys, size_t n,
                           s3_result *res);
int s3_list_objects_all_sync(s3_client *c, const char *bucket, const char *prefix,
                             size_t max_items, s3_list *out, s3_result *res);
int s3_list_multipart_uploads_all_sync(s3_client *c, const char *bucket, const char *prefix,
                                       size_t max_items, s3_list *out, s3_result *res);
int s3_list_parts_all_sync(s3_client *c, const char *bucket, const char *key,
                           const char *upload_id, s3_list *out, s3_result *res);
int s3_create_multipart_upload_sync(s3_client *c, const char *bucket, const char *key,
                                    s3_result *res);
int s3_upload_part_sync(s3_client *c, const char *bucket, const char *key,
                        const char *upload_id, int part_number, const void *body, size_t len,
                        s3_result *res);
int s3_complete_multipart_upload_sync(s3_client *c, const char *bucket, const char *key,
                                      const char *upload_id, const s3_part_info *parts,
                                      size_t n, bool if_none_match, s3_result *res);
int s3_abort_multipart_upload_sync(s3_client *c, const char *bucket, const char *key,
                                   const char *upload_id, s3_result *res);
int s3_create_bucket_sync(s3_client *c, const char *bucket, s3_result *res);
int s3_delete_bucket_sync(s3_client *c, const char *bucket, s3_result *res);
int s3_upload_sync(s3_client *c, const char *bucket, const char *key, const void *buf,
                   size_t len, const s3_upload_opts *opts, s3_result *res);

#endif /* DSTL_S3_H */
