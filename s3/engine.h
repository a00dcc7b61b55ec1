/*
 * s3/engine.h — the request engine's own objects, shared by the files that make it up and by
 * nothing else (the operations use the s3_req_* and s3_op_* calls of s3/s3_int.h):
 *
 *   client.c          the client: options, new/free, the loop (s3_client_run), the ops and
 *                     their completion queue, the deadlines of detached cleanups
 *   request.c         requests and their attempts: connection slots, signing, retries after a
 *                     backoff, hedges, what ends a request
 *   response.c        what an attempt received: bodies (a GET's into the caller's buffer, the
 *                     rest bounded), the checks before an attempt wins, the reply it gives
 *   transport_curl.c  the network: libcurl's multi handle, its callbacks, re-send counting
 *   transport_fake.c  the test transport (s3_opts.transport) in its place
 *   timer.c           the client's timer list
 *   endpoint.c        the endpoint, and each request's path, host and URL
 *
 * An attempt runs on one of the two transports: the engine starts it (s3_curl_start or
 * s3_fake_start), a transport ends it with s3_attempt_end (through c->attempt_end), and the
 * engine stops one it no longer wants (s3_curl_stop or s3_fake_stop). Both fill the same response fields and pass
 * body bytes through s3_attempt_deliver, so everything after them is shared.
 *
 * Threads: the client's thread only, except s3_curl_wakeup (any thread).
 */
#ifndef DSTL_S3_ENGINE_H
#define DSTL_S3_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "s3/s3_int.h"

#define s3_container_of(p, type, member) ((type *)((char *)(p) - offsetof(type, member)))

/* ---- timers (timer.c): a list sorted by due time ---- */

typedef struct s3_timer s3_timer;
struct s3_timer {
    uint64_t due_ms;
    void (*fire)(s3_timer *t);
    bool armed;
    s3_timer *prev, *next;
};

/* Arms t to fire at due_ms (after the timers due at or before then). t must be disarmed. */
void s3_timer_arm(s3_timer **list, s3_timer *t, uint64_t due_ms, void (*fire)(s3_timer *t));
/* Disarms t; no effect when it is not armed. */
void s3_timer_disarm(s3_timer **list, s3_timer *t);
/* Fires, in order, every timer due at or before now_ms (each is disarmed before it fires and
 * may arm or disarm others). */
void s3_timers_fire(s3_timer **list, uint64_t now_ms);

/* ---- the objects ---- */

typedef struct s3_attempt s3_attempt;

#define S3_SCHEME_CAP    8   /* "https" and its NUL, with room */
#define S3_AUTHORITY_CAP 256 /* host[:port] of the endpoint */

struct s3_client {
    /* s3_attempt_end (request.c), called by the transports through this pointer: they sit
     * below the engine and call nothing of it directly */
    void (*attempt_end)(s3_attempt *a, int net_err, const char *net_msg);
    s3_opts o;           /* defaults applied; strings point into the owned copies below */
    char *endpoint, *region, *ca_file;
    char scheme[S3_SCHEME_CAP];
    char authority[S3_AUTHORITY_CAP];
    s3_credentials cred;
    s3_timer *timers;    /* sorted by due_ms */
    /* requests and attempts (request.c) */
    s3_attempt *queue_head, *queue_tail; /* attempts waiting for a connection slot */
    int n_running;
    s3_req *reqs;                     /* live requests */
    /* ops (client.c) */
    s3_op *ops;                       /* live ops */
    s3_op *done_head, *done_tail;     /* ops whose callback is due */
    s3_op *detached;                  /* detached cleanups (also on ops) */
    /* the network (transport_curl.c) */
    CURLM *multi;
    CURL *idle_easy[32];
    int n_idle_easy;
    /* the test transport (transport_fake.c) */
    s3_attempt *fake_ready;           /* test-transport attempts with an answer */
    uint64_t rng;
    bool in_run;
    bool md5_checks;                  /* the last checked write was checked by its MD5 ETag */
    s3_stats stats;
};

struct s3_attempt {
    s3_req *req;
    int no;
    bool hedge, running, fake;
    CURL *easy;
    struct curl_slist *hdrs;
    char *url;
    s3_timer hedge_timer, fake_timer;
    /* response */
    int status;
    char etag[128], request_id[128], content_range[160];
    char checksum[16];   /* x-amz-checksum-crc32c of the answer */
    int64_t date_ms;     /* Date of the answer, 0 when none or malformed */
    uint64_t content_length;
    bool have_length;
    int range_state;     /* a 206's Content-Range against the range asked for: 0 not yet
                          * checked, 1 it starts there (range_total: the object's size), -1 not */
    uint64_t range_total;
    int sends;           /* times libcurl sent this attempt's request (re-sends after the
                          * first count as attempts) */
    uint64_t stream_pos; /* GET answered 200: bytes of the whole object seen so far */
    char *body;
    size_t body_len, body_cap;
    bool too_big;
    uint8_t *dst;
    size_t dst_got;
    bool dst_private, dst_overflow;
    int fake_rc;
    char errbuf[CURL_ERROR_SIZE];
    s3_attempt *next_in_req, *prev_in_req;
    s3_attempt *next_q, *prev_q;
};

struct s3_req {
    s3_client *c;
    char *method, *bucket, *key, *path, *query, *host, *content_type;
    s3_kv *headers;
    size_t n_headers;
    const void *body;
    size_t body_len;
    void *get_buf;
    size_t get_len;
    s3_attempt *direct_owner; /* the attempt writing into get_buf, if any */
    bool no_hedge;
    int (*check)(void *ctx, s3_reply *rep);
    int max_attempts;
    uint64_t get_offset;
    void (*progress)(void *pctx, size_t final_bytes, uint64_t object_size);
    void *progress_ctx;
    size_t get_final;         /* streamed GET: [0, get_final) of get_buf was handed over (final) */
    bool verify, end_on_corrupt;
    char payload_hash[65];
    char crc_b64[16];    /* sent as x-amz-checksum-crc32c ("" when not) */
    char crc_check[16];  /* the body's, to compare with an answer's (computed when needed) */
    char md5_etag[72];   /* the body's MD5 ETag (computed when needed) */
    s3_attempt *attempts;
    int n_started, n_failed, n_live, n_launched;
    int n_resends;       /* libcurl's own re-sends: attempts too */
    bool payload_ready;
    s3_timer retry_timer;
    s3_reply last;
    bool maybe_applied;
    s3_req_done_fn cb;
    void *ctx;
    s3_req *next, *prev;
};

/* ---- the client (client.c) ---- */

/* The client's monotonic clock (s3_opts.now_ms, else CLOCK_MONOTONIC), in ms. */
uint64_t s3_client_now_ms(const s3_client *c);
/* 32 random bits for jitter (s3_opts.random, else the client's xorshift). */
uint32_t s3_client_random(s3_client *c);

/* ---- requests and attempts (request.c) ---- */

/* Ends a running attempt: net_err is 0 when a whole response came, else the transport's
 * -errno with net_msg its reason. The attempt either wins (its request ends with success) or
 * has failed: it is freed, and its request retries, waits for a twin, or ends. */
void s3_attempt_end(s3_attempt *a, int net_err, const char *net_msg);

/* Starts queued attempts while connection slots are free (hedges may use twice as many). */
void s3_launch_queued(s3_client *c);

/* ---- what an attempt received (response.c) ---- */

/* Body bytes of the answer as they arrive: a GET's 2xx into its destination (a 200 to a
 * ranged GET has the range cut out of the whole object), other bodies kept up to
 * max_response_bytes. false when the bytes do not fit (too_big or dst_overflow is set, or
 * out of memory): the transport stops the transfer. */
bool s3_attempt_deliver(s3_attempt *a, const char *p, size_t len);

/* The reply an ended attempt gives (net_err, net_msg as for s3_attempt_end). 0 when it wins:
 * its checks passed (a 206's Content-Range, the written copy, the op's check hook) and a
 * hedged GET's private bytes are in the caller's buffer; rep->body is the answer's (valid
 * while the attempt lives). 1 when it failed: rep says why (rep->err not set yet), with no
 * body; *corrupt tells a written copy that differs from the body (s3_stats counts it). */
int s3_attempt_reply(s3_attempt *a, int net_err, const char *net_msg, s3_reply *rep,
                     bool *corrupt);

/* ---- the network (transport_curl.c) ---- */

/* Makes the client's multi handle (curl_global_init once per process), sized for
 * 2 x connections (hedges). 0, or -ENOMEM with res saying why. */
int s3_curl_open(s3_client *c, int connections, s3_result *res);
/* Frees the cached easy handles and the multi handle (no transfer may be running). */
void s3_curl_close(s3_client *c);
/* Starts a launched attempt on a connection (a->url, a->hdrs made). 0 or -errno. */
int s3_curl_start(s3_attempt *a);
/* Takes a running attempt off its connection (no outcome). */
void s3_curl_stop(s3_attempt *a);
/* Gives the attempt's easy handle (if any) back to the cache, for reuse by a later attempt. */
void s3_curl_release(s3_attempt *a);
/* Waits up to wait_ms on the client's sockets, its wakeup and the extra fds (revents set).
 * 0, or -EIO when libcurl fails. */
int s3_curl_poll(s3_client *c, s3_waitfd *extra, size_t n_extra, int wait_ms);
/* Moves transfers on and ends the attempts libcurl has finished (s3_attempt_end). */
void s3_curl_perform(s3_client *c);
/* Makes a waiting s3_curl_poll return. Thread-safe. */
void s3_curl_wakeup(s3_client *c);

/* ---- the test transport (transport_fake.c) ---- */

/* Hands a launched attempt to s3_opts.transport: its answer is delivered by s3_fake_deliver
 * (at once, or after the answer's delay), or it hangs until transfer_timeout_ms. 0. */
int s3_fake_start(s3_attempt *a);
/* Takes a running test attempt back (no outcome). */
void s3_fake_stop(s3_attempt *a);
/* Ends the test attempts whose answer is due (c->fake_ready). */
void s3_fake_deliver(s3_client *c);

/* ---- where requests go (endpoint.c): pure ---- */

/* Splits an endpoint "http[s]://host[:port][/]" into scheme and authority. 0, or -EINVAL with
 * res saying why. */
int s3_endpoint_parse(const char *endpoint, char scheme[S3_SCHEME_CAP],
                      char authority[S3_AUTHORITY_CAP], s3_result *res);

/* The AWS endpoint of region (https://s3.amazonaws.com for us-east-1) into out. */
void s3_endpoint_default(const char *region, char *out, size_t cap);

/* A request's target: *path (the encoded key, after the bucket when path_style), *host (the
 * authority, after "bucket." when virtual-hosted) and *query (canonical: sorted and encoded;
 * also what is sent). Each is malloc'd into its pointer as it is made: the caller frees all
 * three, also on failure. 0, -EINVAL (a key or query that cannot be encoded), -ENOMEM. */
int s3_target_build(const char *authority, bool path_style, const char *bucket,
                    const char *key, const s3_kv *query, size_t n_query, char **path,
                    char **host, char **query_out);

/* "scheme://host/path[?query]", malloc'd; NULL when out of memory. */
char *s3_target_url(const char *scheme, const char *host, const char *path, const char *query);

#endif /* DSTL_S3_ENGINE_H */
