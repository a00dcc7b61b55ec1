/*
 * s3/s3_int.h — the internals of s3/, shared by its sources and by the tests of s3/ (not part of
 * s3.h; dstl/ never includes this): the transport seam, SigV4 stages, the retry policy, ETags
 * and checksums, credentials, XML, the request engine the operations are built on, and the
 * detached cleanups.
 *
 * Threads: the pure functions are thread-safe; everything that takes an s3_client (or an op or
 * a request of one) runs on the client's thread only.
 */
#ifndef DSTL_S3_INT_H
#define DSTL_S3_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "s3/s3.h"

/* ---- the transport seam (s3_opts.transport) ---- */

/* One HTTP exchange as the transport seam sees it (test only). */
typedef struct s3_http_request {
    const char *method;
    const char *url;
    const char *const *headers; /* "Name: value" lines as sent (Authorization included) */
    size_t n_headers;
    const uint8_t *body;
    size_t body_len;
    int attempt; /* 1-based, per request (hedges and retries count) */
} s3_http_request;

typedef struct s3_http_response {
    int status;         /* HTTP status */
    const char *body;   /* copied by the client */
    size_t body_len;
    const char *etag;   /* optional response headers */
    const char *request_id;
    const char *content_range;
    const char *checksum_crc32c; /* x-amz-checksum-crc32c (base64) */
    const char *date;            /* Date (IMF-fixdate) */
    uint32_t delay_ms;  /* deliver the answer this long after the attempt started (the
                         * client's clock); at or past transfer_timeout_ms it times out */
} s3_http_response;

/* Replaces the network (test only). exchange() is called when an attempt starts (from
 * s3_client_run, never from a start call) and returns:
 *   0         answer with *resp (delivered on the next loop iteration),
 *   1         leave the attempt hanging: it ends only by hedge/cancel or transfer timeout,
 *   -errno    fail the attempt as a network error (-ECONNRESET, -ETIMEDOUT, ...). */
typedef struct s3_transport {
    int (*exchange)(void *ctx, const s3_http_request *req, s3_http_response *resp);
    void *ctx;
} s3_transport;

/* ---- SigV4 stages (s3/sigv4.c) ---- */

typedef struct s3_kv {
    const char *name;
    const char *value;
} s3_kv;

/* RFC 3986 encoding as SigV4 wants it: unreserved A-Z a-z 0-9 - _ . ~ kept, every other
 * byte %XX (upper case); '/' kept when keep_slash. Returns the length written (NUL not
 * counted), or -ENOSPC when cap is too small. */
int s3_uri_encode(const char *s, bool keep_slash, char *out, size_t cap);

/* The canonical query string: each name and value encoded, a bare name as "name=", sorted
 * by encoded name then value, joined by '&'. It is also what the client sends. Returns the
 * length or -ENOSPC. */
int s3_sigv4_canonical_query(const s3_kv *params, size_t n, char *out, size_t cap);

/* "20130524T000000Z" for Unix time t (UTC); out has >= 17 bytes. */
void s3_sigv4_amz_date(int64_t t, char out[17]);

/* The canonical request. canonical_uri is already encoded; query is canonical; headers are
 * the ones to sign (names any case: lower-cased, values trimmed and inner runs of spaces
 * folded, sorted by name). signed_headers (may be NULL) receives "host;x-amz-date;...".
 * Returns the length or -ENOSPC/-EINVAL. */
int s3_sigv4_canonical_request(const char *method, const char *canonical_uri, const char *query,
                               const s3_kv *headers, size_t n_headers, const char *payload_hash,
                               char *out, size_t cap, char *signed_headers, size_t sh_cap);

/* "AWS4-HMAC-SHA256\n<amz_date>\n<date>/<region>/<service>/aws4_request\n<hex sha256(creq)>".
 * Returns the length or -ENOSPC. */
int s3_sigv4_string_to_sign(const char *amz_date, const char *region, const char *service,
                            const char *canonical_request, char *out, size_t cap);

/* HMAC chain "AWS4"+secret -> date (yyyymmdd) -> region -> service -> "aws4_request". */
void s3_sigv4_signing_key(const char *secret, const char *date8, const char *region,
                          const char *service, uint8_t key[32]);

/* hex(HMAC-SHA256(key, string_to_sign)) into hex (65 bytes with NUL). */
void s3_sigv4_signature(const uint8_t key[32], const char *string_to_sign, char hex[65]);

/* The whole Authorization header value ("AWS4-HMAC-SHA256 Credential=..., SignedHeaders=...,
 * Signature=..."). Returns the length or -ENOSPC/-EINVAL. */
int s3_sigv4_authorization(const char *access_key, const char *secret_key, const char *region,
                           const char *amz_date, const char *method, const char *canonical_uri,
                           const char *query, const s3_kv *headers, size_t n_headers,
                           const char *payload_hash, char *out, size_t cap);

/* Lower-case hex SHA-256 of buf (65 bytes with NUL). */
void s3_sha256_hex(const void *buf, size_t len, char hex[65]);

/* ---- retry policy (s3/retry.c) ---- */

typedef enum s3_retry_class {
    S3_RETRY_NO = 0,   /* fatal: fail now */
    S3_RETRY_TRANSIENT, /* network errors, 5xx, RequestTimeout, truncated/malformed answers,
                         * a written copy that differs from the body */
    S3_RETRY_THROTTLED, /* 503 SlowDown, 429, Throttling */
    S3_RETRY_TWIN,      /* ambiguous, not worth a retry: 409 ConditionalRequestConflict (an
                         * upload of the key is in flight — maybe our own twin). A live twin
                         * decides; with none left the request ends and its op settles it */
} s3_retry_class;

/* One classifier for every request. net_err is 0 when an HTTP response came, else a
 * negative errno of the transport (-ECONNRESET, -ETIMEDOUT, -ECONNREFUSED, -EPROTO for a
 * truncated or malformed answer, -EMSGSIZE for an oversized one, -EACCES for TLS trust
 * errors, -EBADMSG for a written copy that differs from what was sent). status is the HTTP
 * status, s3_code the S3 error code ("" or NULL if none). */
s3_retry_class s3_retry_classify(int net_err, int status, const char *s3_code);

/* Full-jitter exponential backoff before attempt number `failures + 1`: a uniform value
 * in [0, min(cap_ms, base_ms * 2^(failures-1))] from the 32-bit random r. */
uint32_t s3_backoff_ms(int failures, uint32_t base_ms, uint32_t cap_ms, uint32_t r);

/* ---- part math (s3/upload.c) ---- */

/* Number of parts for len bytes in part_size parts (len > 0, part_size > 0), and the
 * offset/length of part i (0-based). */
size_t s3_part_count(uint64_t len, uint64_t part_size);
void s3_part_range(uint64_t len, uint64_t part_size, size_t i, uint64_t *off, uint64_t *n);

/* ---- ETags and the CRC32C header (s3/checksum.c) ---- */

/* The multipart ETag S3 computes: "\"hex(md5(md5(part1)||...||md5(partN)))-N\"" from the
 * parts' ETags (hex MD5s in quotes). Returns 0, or -EINVAL when an ETag is not an MD5. */
int s3_multipart_etag(const s3_part_info *parts, size_t n, char out[72]);

/* "\"hex(md5(buf))\"" — the ETag of a single PUT of buf. */
void s3_md5_etag(const void *buf, size_t len, char out[72]);

/* s3_put_object with the body's MD5 ETag known (NULL: as s3_put_object): s3_upload's single
 * PUT with s3_upload_opts.body_md5_etag. */
int s3_put_object_md5(s3_client *c, const char *bucket, const char *key, const void *body, size_t len,
                      bool if_none_match, const char *body_md5_etag, s3_op **op_out, s3_done_fn cb, void *ctx);

/* ETags equal, ignoring surrounding quotes (servers differ) and hex case; "" equals nothing. */
bool s3_etag_eq(const char *a, const char *b);

/* The base64 of the big-endian CRC32C, as x-amz-checksum-crc32c carries it ("yZRlqg=="). */
void s3_crc32c_b64(uint32_t crc, char out[9]);

/* ---- credentials (s3/creds.c) ---- */

typedef struct s3_credentials {
    char access_key[256];
    char secret_key[256];
    char session_token[4096];
    char source[64]; /* "options", "environment", "file <path> [profile]": for messages */
} s3_credentials;

/* Resolves credentials: explicit (non-empty access and secret), then the environment, then
 * the credentials file (path NULL: AWS_SHARED_CREDENTIALS_FILE or $HOME/.aws/credentials;
 * profile NULL: AWS_PROFILE or "default"). Returns 0, or -ENOENT with why[] saying where it
 * looked (never a secret), or -EINVAL when a value is too long. Reads the environment. */
int s3_credentials_resolve(const char *access_key, const char *secret_key,
                           const char *session_token, const char *path, const char *profile,
                           s3_credentials *out, char *why, size_t why_cap);

/* ---- XML (s3/xml.c): libxml2, no network, bounded by the caller's max size ---- */

/* Parses an <Error> document: code, message, request id (each may be NULL). Returns 0 when
 * the root element is Error, -EPROTO otherwise (not XML, or another document). */
int s3_xml_parse_error(const char *xml, size_t len, char *code, size_t code_cap, char *message,
                       size_t message_cap, char *request_id, size_t request_id_cap);

/* InitiateMultipartUploadResult: the UploadId. -EPROTO when missing or malformed. */
int s3_xml_parse_initiate(const char *xml, size_t len, char *upload_id, size_t cap);

/* CompleteMultipartUploadResult (root name not checked): the ETag ("" when the server left
 * it empty, as RGW does). -EPROTO when malformed; 1 when the document is an <Error> (the
 * server reported a failure inside a 200: code and message are filled). */
int s3_xml_parse_complete(const char *xml, size_t len, char *etag, size_t etag_cap, char *code,
                          size_t code_cap, char *message, size_t message_cap);

/* ListObjectsV2 / ListMultipartUploads / ListParts pages into out (zeroed first; s3_list_clear
 * frees). Timestamps (LastModified, Initiated) are ISO 8601 UTC as S3 writes them
 * ("2026-11-30T12:00:00.000Z"; fraction optional): an absent one is 0, a malformed one makes
 * the page -EPROTO. -EPROTO when malformed, -ENOMEM. */
int s3_xml_parse_list_objects(const char *xml, size_t len, s3_list *out);
int s3_xml_parse_list_uploads(const char *xml, size_t len, s3_list *out);
int s3_xml_parse_list_parts(const char *xml, size_t len, s3_list *out);

/* "2026-11-30T12:00:00.000Z" (ISO 8601, UTC: 'Z' or "+00:00"; fraction of any length, optional)
 * to Unix milliseconds. Returns 0, or -EPROTO when s is not such a time. */
int s3_xml_parse_time(const char *s, int64_t *ms);

/* An HTTP Date header in RFC 7231 IMF-fixdate ("Tue, 01 Dec 2026 19:56:58 GMT": exactly that
 * shape, the weekday matching the date) to Unix milliseconds. Returns 0, or -EPROTO (the
 * obsolete RFC 850 and asctime forms are refused too). */
int s3_http_parse_date(const char *s, int64_t *ms);

/* DeleteResult: the number of <Error> entries and the first one's key and code. */
int s3_xml_parse_delete_result(const char *xml, size_t len, size_t *n_errors, char *first_key,
                               size_t key_cap, char *first_code, size_t code_cap);

/* Request bodies: <Delete><Quiet>true</Quiet><Object><Key>..</Key></Object>...</Delete> and
 * <CompleteMultipartUpload><Part><PartNumber>..</PartNumber><ETag>..</ETag></Part>...
 * Returns a malloc'ed body (*len set) or NULL (-ENOMEM, or a key XML cannot carry). */
char *s3_xml_build_delete(const char *const *keys, size_t n, size_t *len);
char *s3_xml_build_complete(const s3_part_info *parts, size_t n, size_t *len);

/* ---- the request engine (s3/request.c, s3/client.c; its own objects: s3/engine.h) ----
 * Requests are started by s3/ops.c and s3/put.c; ops are made by those and s3/upload.c,
 * s3/cleanup.c.
 * Client's thread only. A request is one logical HTTP request with its attempts (retries
 * after errors, hedges after attempt_timeout_ms); an op is what a caller (or a parent op)
 * waits on. */

typedef struct s3_req s3_req;

/* What a request's callback (and its check hook) sees: the winning attempt's response on
 * success, the last failure otherwise. */
typedef struct s3_reply {
    int err;            /* 0, or the final code (s3_error_code) */
    int net_err;        /* the last attempt's transport error (0 when a response came) */
    int status;         /* HTTP status of the last response */
    const char *body;   /* response body (XML; error bodies included), NUL-terminated;
                         * valid in the check hook only ("" in a failure's callback) */
    size_t body_len;
    size_t got;         /* GET: bytes placed in the caller's buffer */
    uint64_t object_size; /* GET: total from Content-Range, else Content-Length */
    char etag[128];
    char request_id[128];
    char s3_code[64];
    char message[256];
    int attempts;       /* attempts made, hedges, retries and libcurl's own re-sends included */
    bool maybe_applied; /* a failed attempt may have been carried out by the server */
    int64_t server_date_ms; /* Date of this response (0: none) */
    s3_write_check write_check; /* verify_write requests: how the stored copy was checked */
} s3_reply;

typedef struct s3_req_spec {
    const char *method;     /* "GET", "PUT", "POST", "DELETE", "HEAD" */
    const char *bucket;
    const char *key;        /* NULL or "": a bucket-level request */
    const s3_kv *query;     /* raw (unencoded) names and values */
    size_t n_query;
    const s3_kv *headers;   /* extra signed headers (range, if-none-match, content-md5) */
    size_t n_headers;
    const void *body;       /* not copied: valid until the callback */
    size_t body_len;
    const char *content_type; /* NULL: none sent */
    void *get_buf;          /* GET: the caller's buffer (2xx bodies go there) */
    size_t get_len;
    bool no_hedge;          /* retries only (CreateMultipartUpload) */
    int max_attempts;       /* 0: the client's; else fewer (an op that restarts a request
                             * gives it what is left of its budget) */
    uint64_t get_offset;    /* GET: the offset asked for (a 200 gives the whole object: the
                             * range is taken out of it) */
    void (*progress)(void *pctx, size_t final_bytes, uint64_t object_size);
    void *progress_ctx;     /* GET: s3_get_object_stream's hand-over of what arrived */
    bool verify_write;      /* PUT bodies: the stored copy is checked against the body (see
                             * s3_write_check); a differing copy fails the attempt, -EBADMSG */
    bool end_on_corrupt;    /* with verify_write: a differing copy ends the request at once
                             * (its op must remove it before a retry: If-None-Match) */
    const char *body_md5_etag; /* with verify_write: the body's MD5 ETag, when known (NULL:
                             * hashed if the answer needs it) */
    /* Checks a 2xx reply before it wins: 0 accepts; -EPROTO (malformed: transient, retried);
     * 1 when the body is an error document (rep->s3_code/message filled by the hook:
     * classified like an HTTP error). May keep what it parsed in ctx. */
    int (*check)(void *ctx, s3_reply *rep);
} s3_req_spec;

typedef void (*s3_req_done_fn)(void *ctx, s3_req *req, const s3_reply *rep);

/* Starts a request (its attempts start from s3_client_run). cb runs once, from the loop,
 * after which the request is freed. Returns 0, -EINVAL, -ENOMEM (no callback then). */
int s3_req_start(s3_client *c, const s3_req_spec *spec, s3_req_done_fn cb, void *ctx,
                 s3_req **out);

/* Stops a request before its callback: attempts removed, no callback, freed. */
void s3_req_cancel(s3_req *r);

/* Attempts of r that were sent (started on a connection) so far. */
int s3_req_launched(const s3_req *r);

/* An operation. Kinds embed it first and set the hooks; the engine queues its completion
 * and frees it (destroy, then free) after the callback. */
struct s3_op {
    s3_client *c;
    s3_done_fn cb;
    void *ctx;
    s3_result res;
    void (*cancel)(s3_op *op);  /* must lead to s3_op_finish (with -ECANCELED) */
    void (*destroy)(s3_op *op); /* frees what the kind owns (may be NULL) */
    bool internal;              /* a child of another op: not counted by s3_client_pending */
    bool detached;              /* a cleanup: counted by s3_client_cleanups, dropped at its
                                 * deadline */
    bool finished;
    bool cancelled;
    uint64_t deadline_ms;       /* detached: the client's clock */
    s3_op *next, *prev;         /* the client's live ops */
    s3_op *next_done, *prev_done; /* the completion queue */
    s3_op *next_det, *prev_det;   /* the client's detached ops */
};

/* Allocates an op of size bytes (>= sizeof(s3_op)) zeroed, linked to the client. */
s3_op *s3_op_new(s3_client *c, size_t size, s3_done_fn cb, void *ctx);

/* Queues the op's completion with op->res (callback from the loop, then freed). Once. */
void s3_op_finish(s3_op *op);

/* Frees an op that was never started (its start failed). */
void s3_op_discard(s3_op *op);

/* Stops op without its callback, finished or not: its destroy hook drops what it runs
 * (requests, children), it leaves the completion queue, and it is freed. For parents that no
 * longer want a child's outcome (they have reported, or are dropped themselves). */
void s3_op_drop(s3_op *op);

/* Starts a child op: call is an s3_* start returning 0 or -errno, with &slot as its op_out;
 * on success the child is marked internal (its callback is the parent's handler, it is not
 * counted by s3_client_pending), else slot is NULL. Sets rc (in scope) to the call's code. */
#define S3_CHILD(call, slot)                                                                      \
    do {                                                                                          \
        int crc_ = (call);                                                                        \
        if (crc_ == 0) (slot)->internal = true;                                                   \
        else (slot) = NULL;                                                                       \
        rc = crc_;                                                                                \
    } while (0)

/* Makes op a detached cleanup (internal, counted by s3_client_cleanups) whose deadline is
 * cleanup_timeout_ms from now: past it the op is dropped and counted as incomplete. Its
 * callback, if any, sees no caller. A detached op that finishes with res.err != 0 counts as
 * incomplete too. */
void s3_op_detach(s3_op *op);

/* ---- results (s3/result.c): pure ---- */

/* The code an operation returns for a final failure (see the table at the top of s3.h). */
int s3_error_code(int net_err, int status, const char *s3_code);

/* Fills res from a request's reply: code, detail and the one-line error
 * "METHOD s3://bucket/key: ..." (what is e.g. "PUT", "UploadPart 3 of"). */
void s3_result_set(s3_result *res, const char *what, const char *bucket, const char *key,
                   const s3_reply *rep);

/* Sets res->err and a one-line error for a failure that has no reply. */
void s3_result_fail(s3_result *res, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Appends to res->error (cut to fit): what happened after the failure it names. */
void s3_result_append(s3_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Copies src (NULL: "") into dst, cut to cap - 1 bytes. */
void s3_copy_str(char *dst, size_t cap, const char *src);

/* ---- detached cleanups (s3/cleanup.c) ---- */

/* What a failed or cancelled write may have left, removed in this order: the multipart upload
 * upload_id is aborted; the object is HEADed and deleted when its ETag is one of etags (ours:
 * the body's MD5 or the multipart ETag; or a corrupt copy's ETag we were given back); the
 * uploads of the key are listed and every one but keep_upload_id is aborted (strays of a
 * retried Create). Steps that are not asked for are skipped. Everything is copied. */
typedef struct s3_cleanup_spec {
    const char *bucket, *key;
    const char *abort_upload_id;   /* NULL or "": none */
    const char *const *etags;      /* delete the object when its ETag is one of these */
    size_t n_etags;
    bool abort_strays;             /* list the key's uploads and abort all but keep_upload_id */
    const char *keep_upload_id;    /* NULL: abort every upload of the key */
} s3_cleanup_spec;

/* Starts a detached cleanup (nothing to do: nothing started). 0, or -ENOMEM (then nothing
 * is cleaned: gc will). */
int s3_cleanup_start(s3_client *c, const s3_cleanup_spec *spec);

/* The client's effective options (defaults applied). */
const s3_opts *s3_client_opts(const s3_client *c);

#endif /* DSTL_S3_INT_H */
