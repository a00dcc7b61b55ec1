/*
 * s3/client.c — the request engine: one libcurl multi handle driven by s3_client_run on the
 * client's thread, attempts with retries and hedges, timers, the completion queue.
 *
 * Model. An op (what a caller waits on) owns requests; a request (one logical HTTP request)
 * owns attempts (HTTP exchanges). An attempt is queued, then running (on a connection, or in
 * the test transport), then ended. A request ends at its first successful attempt (the
 * others are cancelled), at a fatal failure, or when its last live attempt fails and
 * max_attempts are used up. Between failures a timer waits a full-jitter backoff; a running
 * attempt older than attempt_timeout_ms gets a hedged twin (unless the request forbids it).
 *
 * Bounds: attempts per request <= max_attempts (libcurl's own re-sends of a request on a fresh
 * connection count: CURLOPT_PREREQFUNCTION runs once per request actually sent); running
 * attempts <= connections for first tries and retries, <= 2 x connections with hedges (a hedge
 * exists because a connection is stuck: it must not wait behind it); response bodies <=
 * max_response_bytes, GET bodies <= the caller's buffer; every attempt is abandoned after
 * transfer_timeout_ms; every detached cleanup is dropped at its deadline (cleanup_timeout_ms).
 *
 * Checks before an attempt wins: a written body (verify_write) must be what the server stored
 * (its x-amz-checksum-crc32c, else the signed SHA-256, else an MD5 ETag); a GET's 206 must be
 * the range asked for, and a 200 (a server that ignored Range) has the range taken out of it;
 * then the op's own check hook (XML answers).
 *
 * Ops: a finished op waits in the completion queue for its callback (the next turn at the
 * latest); a parent that no longer wants a child drops it (s3_op_drop: no callback). Detached
 * ops (cleanups) are kept on their own list with a deadline.
 *
 * Threads: everything runs on the client's thread; only s3_client_wakeup (curl_multi_wakeup)
 * is called from others. Callbacks of ops run from s3_client_run's completion queue, never
 * inside a start call; request callbacks (internal) run from the loop too.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <pthread.h>

#include <curl/curl.h>
#include <openssl/crypto.h>

#include "s3/s3_int.h"

/* ---- timers ---- */

typedef struct s3_timer s3_timer;
struct s3_timer {
    uint64_t due_ms;
    void (*fire)(s3_timer *t);
    bool armed;
    s3_timer *prev, *next;
};

typedef struct attempt attempt;

struct s3_client {
    s3_opts o;           /* defaults applied; strings point into the owned copies below */
    char *endpoint, *region, *ca_file;
    char scheme[8];
    char authority[256]; /* host[:port] of the endpoint */
    s3_credentials cred;
    CURLM *multi;
    s3_timer *timers;    /* sorted by due_ms */
    attempt *queue_head, *queue_tail; /* attempts waiting for a connection slot */
    attempt *fake_ready;              /* test-transport attempts with an answer */
    int n_running;
    s3_op *ops;                       /* live ops */
    s3_op *done_head, *done_tail;     /* ops whose callback is due */
    s3_op *detached;                  /* detached cleanups (also on ops) */
    s3_req *reqs;                     /* live requests */
    CURL *idle_easy[32];
    int n_idle_easy;
    uint64_t rng;
    bool in_run;
    s3_stats stats;
};

struct attempt {
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
    attempt *next_in_req, *prev_in_req;
    attempt *next_q, *prev_q;
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
    attempt *direct_owner; /* the attempt writing into get_buf, if any */
    bool no_hedge;
    int (*check)(void *ctx, s3_reply *rep);
    int max_attempts;
    uint64_t get_offset;
    bool verify, end_on_corrupt;
    char payload_hash[65];
    char crc_b64[16];    /* sent as x-amz-checksum-crc32c ("" when not) */
    char crc_check[16];  /* the body's, to compare with an answer's (computed when needed) */
    char md5_etag[72];   /* the body's MD5 ETag (computed when needed) */
    attempt *attempts;
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

#define container_of(p, type, member) ((type *)((char *)(p) - offsetof(type, member)))

static const char EMPTY_SHA256[] =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/* SHA-256 of a body costs ~1 ms per MiB here; above this size AUTO sends UNSIGNED-PAYLOAD
 * with a CRC32C (~20 GB/s) instead: small requests keep the signed digest. */
#define AUTO_UNSIGNED_MIN_BYTES (1u << 20)
/* Below this body size Expect: 100-continue costs a round trip and saves nothing. */
#define EXPECT_MIN_BYTES (1u << 20)

/* ---- clock, random ---- */

static uint64_t now_ms(const s3_client *c)
{
    if (c->o.now_ms) return c->o.now_ms(c->o.seam_ctx);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint32_t rnd(s3_client *c)
{
    if (c->o.random) return c->o.random(c->o.seam_ctx);
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return (uint32_t)(c->rng >> 32);
}

static void timer_arm(s3_client *c, s3_timer *t, uint64_t due_ms, void (*fire)(s3_timer *))
{
    t->due_ms = due_ms;
    t->fire = fire;
    t->armed = true;
    s3_timer **pp = &c->timers, *prev = NULL;
    while (*pp && (*pp)->due_ms <= due_ms) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    t->next = *pp;
    t->prev = prev;
    if (*pp) (*pp)->prev = t;
    *pp = t;
}

static void timer_disarm(s3_client *c, s3_timer *t)
{
    if (!t->armed) return;
    if (t->prev) t->prev->next = t->next;
    else c->timers = t->next;
    if (t->next) t->next->prev = t->prev;
    t->armed = false;
    t->prev = t->next = NULL;
}

/* ---- ops ---- */

s3_op *s3_op_new(s3_client *c, size_t size, s3_done_fn cb, void *ctx)
{
    s3_op *op = calloc(1, size);
    if (!op) return NULL;
    op->c = c;
    op->cb = cb;
    op->ctx = ctx;
    op->next = c->ops;
    if (c->ops) c->ops->prev = op;
    c->ops = op;
    return op;
}

static void op_unlink(s3_op *op)
{
    s3_client *c = op->c;
    if (op->prev) op->prev->next = op->next;
    else c->ops = op->next;
    if (op->next) op->next->prev = op->prev;
}

void s3_op_discard(s3_op *op)
{
    if (!op) return;
    op_unlink(op);
    if (op->destroy) op->destroy(op);
    free(op);
}

static void done_remove(s3_client *c, s3_op *op)
{
    if (op->prev_done) op->prev_done->next_done = op->next_done;
    else c->done_head = op->next_done;
    if (op->next_done) op->next_done->prev_done = op->prev_done;
    else c->done_tail = op->prev_done;
    op->next_done = op->prev_done = NULL;
}

static void detached_remove(s3_client *c, s3_op *op)
{
    if (op->prev_det) op->prev_det->next_det = op->next_det;
    else c->detached = op->next_det;
    if (op->next_det) op->next_det->prev_det = op->prev_det;
    op->next_det = op->prev_det = NULL;
}

void s3_op_finish(s3_op *op)
{
    if (op->finished) return;
    op->finished = true;
    s3_client *c = op->c;
    op->next_done = NULL;
    op->prev_done = c->done_tail;
    if (c->done_tail) c->done_tail->next_done = op;
    else c->done_head = op;
    c->done_tail = op;
}

void s3_op_drop(s3_op *op)
{
    if (!op) return;
    s3_client *c = op->c;
    if (op->finished) done_remove(c, op);
    if (op->detached) {
        detached_remove(c, op);
        if (!op->finished || op->res.err) c->stats.cleanups_incomplete++;
    }
    op_unlink(op);
    op->finished = true; /* nothing may queue it any more */
    if (op->destroy) op->destroy(op);
    free(op);
}

void s3_op_detach(s3_op *op)
{
    s3_client *c = op->c;
    op->internal = true;
    op->detached = true;
    op->deadline_ms = now_ms(c) + c->o.cleanup_timeout_ms;
    op->next_det = c->detached;
    op->prev_det = NULL;
    if (c->detached) c->detached->prev_det = op;
    c->detached = op;
    c->stats.cleanups++;
}

void s3_op_cancel(s3_op *op)
{
    if (!op || op->finished || op->cancelled) return;
    op->cancelled = true;
    if (op->cancel) op->cancel(op);
}

/* Runs the callbacks of finished ops; returns how many user ops completed. */
static int drain_done(s3_client *c)
{
    int ran = 0;
    s3_op *op;
    while ((op = c->done_head)) {
        done_remove(c, op);
        op_unlink(op);
        if (op->detached) {
            detached_remove(c, op);
            if (op->res.err) c->stats.cleanups_incomplete++;
        }
        if (!op->internal) ran++;
        if (op->cb) op->cb(op->ctx, &op->res);
        if (op->destroy) op->destroy(op);
        free(op);
    }
    return ran;
}

/* Drops the detached cleanups whose deadline has passed (their requests are cancelled). */
static void expire_cleanups(s3_client *c)
{
    if (!c->detached) return;
    uint64_t now = now_ms(c);
    for (s3_op *op = c->detached, *next; op; op = next) {
        next = op->next_det;
        if (!op->finished && now >= op->deadline_ms) {
            s3_op_drop(op);
            next = c->detached; /* dropping may have unlinked others: start over */
        }
    }
}

/* ---- attempts ---- */

static void queue_remove(s3_client *c, attempt *a)
{
    if (a->prev_q) a->prev_q->next_q = a->next_q;
    else c->queue_head = a->next_q;
    if (a->next_q) a->next_q->prev_q = a->prev_q;
    else c->queue_tail = a->prev_q;
    a->next_q = a->prev_q = NULL;
}

static void queue_push(s3_client *c, attempt *a, bool front)
{
    if (front) {
        a->next_q = c->queue_head;
        a->prev_q = NULL;
        if (c->queue_head) c->queue_head->prev_q = a;
        else c->queue_tail = a;
        c->queue_head = a;
    } else {
        a->prev_q = c->queue_tail;
        a->next_q = NULL;
        if (c->queue_tail) c->queue_tail->next_q = a;
        else c->queue_head = a;
        c->queue_tail = a;
    }
}

static bool in_queue(const s3_client *c, const attempt *a)
{
    return a->prev_q || a->next_q || c->queue_head == a;
}

static void fake_ready_remove(s3_client *c, attempt *a)
{
    for (attempt **pp = &c->fake_ready; *pp; pp = &(*pp)->next_q)
        if (*pp == a) {
            *pp = a->next_q;
            a->next_q = NULL;
            return;
        }
}

static void easy_release(s3_client *c, CURL *e)
{
    if (!e) return;
    if (c->n_idle_easy < (int)(sizeof c->idle_easy / sizeof c->idle_easy[0])) {
        curl_easy_reset(e);
        c->idle_easy[c->n_idle_easy++] = e;
    } else {
        curl_easy_cleanup(e);
    }
}

/* Stops an attempt wherever it is and frees it (no outcome recorded). */
static void attempt_free(attempt *a)
{
    s3_req *r = a->req;
    s3_client *c = r->c;
    timer_disarm(c, &a->hedge_timer);
    timer_disarm(c, &a->fake_timer);
    if (a->running) {
        if (a->easy && !a->fake) curl_multi_remove_handle(c->multi, a->easy);
        if (a->fake) fake_ready_remove(c, a);
        c->n_running--;
        a->running = false;
    } else if (in_queue(c, a)) {
        queue_remove(c, a);
    }
    easy_release(c, a->easy);
    curl_slist_free_all(a->hdrs);
    if (a->prev_in_req) a->prev_in_req->next_in_req = a->next_in_req;
    else r->attempts = a->next_in_req;
    if (a->next_in_req) a->next_in_req->prev_in_req = a->prev_in_req;
    if (r->direct_owner == a) r->direct_owner = NULL;
    r->n_live--;
    if (a->dst_private) free(a->dst);
    free(a->body);
    free(a->url);
    free(a);
}

static attempt *attempt_new(s3_req *r, bool hedge)
{
    s3_client *c = r->c;
    attempt *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->req = r;
    a->hedge = hedge;
    a->no = ++r->n_started;
    a->next_in_req = r->attempts;
    if (r->attempts) r->attempts->prev_in_req = a;
    r->attempts = a;
    r->n_live++;
    queue_push(c, a, hedge || r->n_failed > 0);
    return a;
}

static void req_free(s3_req *r)
{
    s3_client *c = r->c;
    while (r->attempts) attempt_free(r->attempts);
    timer_disarm(c, &r->retry_timer);
    if (r->prev) r->prev->next = r->next;
    else c->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    for (size_t i = 0; i < r->n_headers; i++) {
        free((char *)r->headers[i].name);
        free((char *)r->headers[i].value);
    }
    free(r->headers);
    free(r->method);
    free(r->bucket);
    free(r->key);
    free(r->path);
    free(r->query);
    free(r->host);
    free(r->content_type);
    free(r);
}

void s3_req_cancel(s3_req *r)
{
    if (r) req_free(r);
}

/* Attempts made so far: started ones and libcurl's re-sends. */
static int req_attempts(const s3_req *r)
{
    return r->n_started + r->n_resends;
}

static void req_finish(s3_req *r, s3_reply *rep)
{
    while (r->attempts) attempt_free(r->attempts);
    timer_disarm(r->c, &r->retry_timer);
    rep->attempts = req_attempts(r);
    rep->maybe_applied = r->maybe_applied;
    r->cb(r->ctx, r, rep);
    req_free(r);
}

static void on_retry_timer(s3_timer *t)
{
    s3_req *r = container_of(t, s3_req, retry_timer);
    if (attempt_new(r, false)) r->c->stats.retries++;
    else {
        s3_reply rep = r->last;
        rep.err = -ENOMEM;
        req_finish(r, &rep);
    }
}

static void on_hedge_timer(s3_timer *t)
{
    attempt *a = container_of(t, attempt, hedge_timer);
    s3_req *r = a->req;
    if (req_attempts(r) < r->max_attempts && attempt_new(r, true)) r->c->stats.hedges++;
}

static int curl_to_errno(CURLcode cc)
{
    switch (cc) {
    case CURLE_OK: return 0;
    case CURLE_OPERATION_TIMEDOUT: return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT: return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return -EHOSTUNREACH;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING: return -ECONNRESET;
    case CURLE_PARTIAL_FILE: return -EPROTO;
    case CURLE_WRITE_ERROR: return -EMSGSIZE;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM: return -EACCES;
    case CURLE_OUT_OF_MEMORY: return -ENOMEM;
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL: return -EINVAL;
    default: return -EIO;
    }
}

/* A 206's Content-Range must be the range asked for: "bytes FIRST-LAST/TOTAL" with FIRST the
 * offset asked for, LAST - FIRST + 1 the bytes that came, LAST < TOTAL. 0 with *total set, or
 * -EPROTO. */
static int check_content_range(const char *cr, uint64_t off, uint64_t got, uint64_t *total)
{
    if (strncmp(cr, "bytes ", 6) != 0) return -EPROTO;
    const char *p = cr + 6;
    uint64_t v[3];
    for (int i = 0; i < 3; i++) {
        if (*p < '0' || *p > '9') return -EPROTO;
        char *end;
        errno = 0;
        v[i] = strtoull(p, &end, 10);
        if (errno) return -EPROTO;
        p = end;
        if (i == 0 && *p++ != '-') return -EPROTO;
        if (i == 1 && *p++ != '/') return -EPROTO;
    }
    if (*p || v[0] != off || v[1] < v[0] || v[1] - v[0] + 1 != got || v[1] >= v[2]) return -EPROTO;
    *total = v[2];
    return 0;
}

/* Checks what the server stored for a written body (verify_write): its x-amz-checksum-crc32c
 * when the answer has one; else a SHA-256 signed payload (the server verified it); else, under
 * S3_VERIFY_AUTO, the ETag must be the body's MD5 (computed here, once per request). Under
 * S3_VERIFY_READ_BACK the last case is left to the op (S3_CHECK_NONE). 0, or -EBADMSG with
 * why[] saying what differed. */
static int verify_write(attempt *a, s3_reply *rep, char *why, size_t cap)
{
    s3_req *r = a->req;
    if (a->checksum[0]) {
        const char *mine = r->crc_b64[0] ? r->crc_b64 : r->crc_check;
        if (!mine[0]) {
            s3_crc32c_b64(r->c->o.crc32c(0, r->body, r->body_len), r->crc_check);
            mine = r->crc_check;
        }
        if (strcmp(a->checksum, mine) == 0) {
            rep->write_check = S3_CHECK_CRC32C;
            return 0;
        }
        snprintf(why, cap, "the stored copy differs from what was sent: x-amz-checksum-crc32c %s, "
                 "the body's %s", a->checksum, mine);
        return -EBADMSG;
    }
    if (strcmp(r->payload_hash, "UNSIGNED-PAYLOAD") != 0) {
        rep->write_check = S3_CHECK_SHA256;
        return 0;
    }
    if (r->c->o.verify_writes == S3_VERIFY_READ_BACK) {
        rep->write_check = S3_CHECK_NONE;
        return 0;
    }
    if (!r->md5_etag[0]) s3_md5_etag(r->body, r->body_len, r->md5_etag);
    if (s3_etag_eq(a->etag, r->md5_etag)) {
        rep->write_check = S3_CHECK_MD5;
        return 0;
    }
    snprintf(why, cap, "the stored copy differs from what was sent: ETag %.72s, the body's MD5 %s",
             a->etag[0] ? a->etag : "(none)", r->md5_etag);
    return -EBADMSG;
}

/* The outcome of an ended attempt. net_err is 0 when a whole response came. */
static void attempt_end(attempt *a, int net_err, const char *net_msg)
{
    s3_req *r = a->req;
    s3_client *c = r->c;
    s3_reply rep;
    memset(&rep, 0, sizeof rep);
    if (a->too_big) {
        net_err = -EMSGSIZE;
        net_msg = "response larger than max_response_bytes";
    } else if (a->dst_overflow) {
        net_err = -EMSGSIZE;
        net_msg = "response longer than the range asked for";
    }
    rep.net_err = net_err;
    rep.status = net_err ? 0 : a->status;
    s3_copy_str(rep.etag, sizeof rep.etag, a->etag);
    s3_copy_str(rep.request_id, sizeof rep.request_id, a->request_id);
    rep.server_date_ms = a->date_ms;
    rep.body = a->body ? a->body : "";
    rep.body_len = a->body_len;
    rep.got = a->dst_got;
    rep.object_size = a->content_length;
    const char *slash = strchr(a->content_range, '/');
    if (slash && slash[1] != '*') rep.object_size = strtoull(slash + 1, NULL, 10);
    if (r->get_buf && rep.status == 200) /* Range ignored: the whole object came */
        rep.object_size = a->have_length ? a->content_length : a->stream_pos;

    bool corrupt = false;
    if (!net_err && rep.status >= 200 && rep.status < 300) {
        char why[256] = "";
        int rc = 0;
        uint64_t total;
        if (r->get_buf && rep.status == 206) {
            if (check_content_range(a->content_range, r->get_offset, a->dst_got, &total) == 0) {
                rep.object_size = total;
            } else {
                rc = -EPROTO;
                snprintf(why, sizeof why,
                         "206 with Content-Range '%.60s' for %zu bytes at offset %llu asked for",
                         a->content_range, a->dst_got, (unsigned long long)r->get_offset);
            }
        }
        if (!rc && r->verify) {
            rc = verify_write(a, &rep, why, sizeof why);
            corrupt = rc != 0;
        }
        if (!rc && r->check) rc = r->check(r->ctx, &rep);
        if (rc == 0) {
            if (a->dst_private && a->dst_got) memcpy(r->get_buf, a->dst, a->dst_got);
            rep.err = 0;
            rep.s3_code[0] = rep.message[0] = '\0';
            req_finish(r, &rep);
            return;
        }
        if (rc < 0) {
            rep.net_err = net_err = corrupt ? -EBADMSG : -EPROTO;
            s3_copy_str(rep.message, sizeof rep.message, why[0] ? why : "malformed response");
            if (corrupt) c->stats.corrupt_writes++;
        }
    } else if (!net_err) {
        char rid[128] = "";
        if (s3_xml_parse_error(rep.body, rep.body_len, rep.s3_code, sizeof rep.s3_code,
                               rep.message, sizeof rep.message, rid, sizeof rid) != 0) {
            rep.s3_code[0] = '\0';
            s3_copy_str(rep.message, sizeof rep.message,
                     rep.status == 404 ? "Not Found" : "no error document");
        }
        if (!rep.request_id[0]) s3_copy_str(rep.request_id, sizeof rep.request_id, rid);
    } else {
        s3_copy_str(rep.message, sizeof rep.message, net_msg);
    }
    rep.body = "";
    rep.body_len = 0;

    s3_retry_class cls = s3_retry_classify(net_err, rep.status, rep.s3_code);
    /* What a server may have carried out although we saw a failure: anything that got past
     * connecting without a 4xx answer (a corrupt copy was carried out too). */
    if ((net_err && net_err != -ECONNREFUSED && net_err != -EHOSTUNREACH && net_err != -EACCES) ||
        rep.status >= 500)
        r->maybe_applied = true;
    rep.err = s3_error_code(net_err, rep.status, rep.s3_code);
    r->last = rep;
    r->n_failed++;
    attempt_free(a);
    if (cls == S3_RETRY_NO || (corrupt && r->end_on_corrupt)) {
        req_finish(r, &rep);
    } else if (r->n_live > 0) {
        /* a twin is still running: it decides */
    } else if (cls == S3_RETRY_TWIN) {
        req_finish(r, &rep); /* ambiguous, no twin left: the op settles it */
    } else if (req_attempts(r) < r->max_attempts) {
        uint32_t d = s3_backoff_ms(r->n_failed, c->o.next_attempt_delay_ms, c->o.max_backoff_ms,
                                   rnd(c));
        timer_arm(c, &r->retry_timer, now_ms(c) + d, on_retry_timer);
    } else {
        req_finish(r, &rep);
    }
}

/* ---- curl callbacks ---- */

static size_t on_header(char *p, size_t sz, size_t n, void *ud)
{
    attempt *a = ud;
    size_t len = sz * n;
    if (len > 5 && strncmp(p, "HTTP/", 5) == 0) {
        const char *sp = memchr(p, ' ', len);
        a->status = sp ? atoi(sp + 1) : 0;
        a->etag[0] = a->content_range[0] = a->checksum[0] = '\0';
        a->date_ms = 0;
        a->have_length = false;
        a->content_length = 0;
        return len;
    }
    const char *colon = memchr(p, ':', len);
    if (!colon) return len;
    size_t nl = (size_t)(colon - p);
    const char *v = colon + 1;
    size_t vl = len - nl - 1;
    while (vl && (*v == ' ' || *v == '\t')) v++, vl--;
    while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' ')) vl--;
    char *dst = NULL;
    size_t cap = 0;
    if (nl == 4 && strncasecmp(p, "etag", 4) == 0) dst = a->etag, cap = sizeof a->etag;
    else if (nl == 16 && strncasecmp(p, "x-amz-request-id", 16) == 0)
        dst = a->request_id, cap = sizeof a->request_id;
    else if (nl == 13 && strncasecmp(p, "content-range", 13) == 0)
        dst = a->content_range, cap = sizeof a->content_range;
    else if (nl == 21 && strncasecmp(p, "x-amz-checksum-crc32c", 21) == 0)
        dst = a->checksum, cap = sizeof a->checksum;
    else if (nl == 4 && strncasecmp(p, "date", 4) == 0) {
        char d[64];
        size_t dl = vl < sizeof d ? vl : sizeof d - 1;
        memcpy(d, v, dl);
        d[dl] = '\0';
        if (s3_http_parse_date(d, &a->date_ms)) a->date_ms = 0;
    } else if (nl == 14 && strncasecmp(p, "content-length", 14) == 0) {
        a->content_length = strtoull(v, NULL, 10);
        a->have_length = true;
    }
    if (dst) {
        if (vl >= cap) vl = cap - 1;
        memcpy(dst, v, vl);
        dst[vl] = '\0';
    }
    return len;
}

static bool body_append(attempt *a, const char *p, size_t len)
{
    size_t max = a->req->c->o.max_response_bytes;
    if (a->body_len + len > max) {
        a->too_big = true;
        return false;
    }
    if (a->body_len + len + 1 > a->body_cap) {
        size_t nc = a->body_cap ? a->body_cap : 4096;
        while (nc < a->body_len + len + 1) nc *= 2;
        char *nb = realloc(a->body, nc);
        if (!nb) return false;
        a->body = nb;
        a->body_cap = nc;
    }
    memcpy(a->body + a->body_len, p, len);
    a->body_len += len;
    a->body[a->body_len] = '\0';
    return true;
}

static bool deliver(attempt *a, const char *p, size_t len)
{
    s3_req *r = a->req;
    r->c->stats.bytes_received += len;
    if (r->get_buf && a->status == 200) {
        /* the server ignored Range and sends the whole object: keep [offset, offset + len) */
        uint64_t pos = a->stream_pos, lo = r->get_offset, hi = r->get_offset + r->get_len;
        a->stream_pos += len;
        if (pos + len > lo && pos < hi) {
            uint64_t from = pos > lo ? pos : lo, to = pos + len < hi ? pos + len : hi;
            memcpy(a->dst + (from - lo), p + (from - pos), (size_t)(to - from));
            if (to - lo > a->dst_got) a->dst_got = (size_t)(to - lo);
        }
        return true;
    }
    if (r->get_buf && a->status >= 200 && a->status < 300) {
        if (a->dst_got + len > r->get_len) {
            a->dst_overflow = true;
            return false;
        }
        memcpy(a->dst + a->dst_got, p, len);
        a->dst_got += len;
        return true;
    }
    return body_append(a, p, len);
}

static size_t on_write(char *p, size_t sz, size_t n, void *ud)
{
    return deliver(ud, p, sz * n) ? sz * n : 0;
}

/* Runs once per request libcurl actually sends: again when it re-sends the request on a fresh
 * connection by itself (a reused connection died before any answer byte). The server may
 * have carried out the first one: every send is an attempt. */
static int on_prereq(void *ud, char *primary_ip, char *local_ip, int primary_port, int local_port)
{
    (void)primary_ip, (void)local_ip, (void)primary_port, (void)local_port;
    attempt *a = ud;
    if (++a->sends > 1) {
        s3_req *r = a->req;
        r->n_resends++;
        r->maybe_applied = true;
        r->c->stats.resends++;
        r->c->stats.requests++;
        r->c->stats.bytes_sent += r->body_len;
        /* the retried answer starts afresh (a 200-for-a-range counts from byte 0 again) */
        a->stream_pos = 0;
        a->dst_got = 0;
    }
    return CURL_PREREQFUNC_OK;
}

/* ---- launching ---- */

static int add_header(struct curl_slist **l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int add_header(struct curl_slist **l, const char *fmt, ...)
{
    char line[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line) return -EINVAL;
    struct curl_slist *nl = curl_slist_append(*l, line);
    if (!nl) return -ENOMEM;
    *l = nl;
    return 0;
}

/* Signs the attempt (a fresh x-amz-date each time) and builds its header list. */
static int build_headers(attempt *a)
{
    s3_req *r = a->req;
    s3_client *c = r->c;
    int64_t t = c->o.wall_time_s ? c->o.wall_time_s(c->o.seam_ctx) : (int64_t)time(NULL);
    char amz_date[17];
    s3_sigv4_amz_date(t, amz_date);
    s3_kv h[16];
    size_t n = 0;
    h[n++] = (s3_kv){"host", r->host};
    h[n++] = (s3_kv){"x-amz-date", amz_date};
    h[n++] = (s3_kv){"x-amz-content-sha256", r->payload_hash};
    if (c->cred.session_token[0]) h[n++] = (s3_kv){"x-amz-security-token", c->cred.session_token};
    if (r->crc_b64[0]) h[n++] = (s3_kv){"x-amz-checksum-crc32c", r->crc_b64};
    for (size_t i = 0; i < r->n_headers && n < 16; i++) h[n++] = r->headers[i];
    char auth[1024];
    int rc = s3_sigv4_authorization(c->cred.access_key, c->cred.secret_key, c->o.region,
                                    amz_date, r->method, r->path, r->query, h, n,
                                    r->payload_hash, auth, sizeof auth);
    if (rc < 0) return rc;
    for (size_t i = 0; i < n && rc >= 0; i++) rc = add_header(&a->hdrs, "%s: %s", h[i].name, h[i].value);
    if (rc >= 0) rc = add_header(&a->hdrs, "Authorization: %s", auth);
    OPENSSL_cleanse(auth, sizeof auth);
    bool has_body = strcmp(r->method, "PUT") == 0 || strcmp(r->method, "POST") == 0;
    if (rc >= 0 && has_body)
        rc = r->content_type ? add_header(&a->hdrs, "Content-Type: %s", r->content_type)
                             : add_header(&a->hdrs, "Content-Type:");
    if (rc >= 0 && has_body && r->body_len < EXPECT_MIN_BYTES) rc = add_header(&a->hdrs, "Expect:");
    if (rc >= 0) rc = add_header(&a->hdrs, "Accept:");
    return rc < 0 ? rc : 0;
}

static int setup_easy(attempt *a)
{
    s3_req *r = a->req;
    s3_client *c = r->c;
    CURL *e = c->n_idle_easy ? c->idle_easy[--c->n_idle_easy] : curl_easy_init();
    if (!e) return -ENOMEM;
    a->easy = e;
    curl_easy_setopt(e, CURLOPT_URL, a->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, a);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, a->hdrs);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, a->errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)c->o.connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)c->o.transfer_timeout_ms);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, a);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    /* Larger socket reads/writes for 8 MiB parts and ranged GETs (defaults: 16/64 KiB). */
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, c->o.tls_no_verify ? 0L : 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, c->o.tls_no_verify ? 0L : 2L);
    if (c->ca_file) curl_easy_setopt(e, CURLOPT_CAINFO, c->ca_file);
    if (strcmp(r->method, "HEAD") == 0) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (strcmp(r->method, "PUT") == 0 || strcmp(r->method, "POST") == 0) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body ? (const char *)r->body : "");
        if (strcmp(r->method, "PUT") == 0) curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
    } else if (strcmp(r->method, "GET") != 0) {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
    }
    return 0;
}

static void on_fake_timeout(s3_timer *t)
{
    attempt *a = container_of(t, attempt, fake_timer);
    attempt_end(a, -ETIMEDOUT, "operation timed out (test transport)");
}

/* A delayed test answer is due: it is processed like one that came at once. */
static void on_fake_delayed(s3_timer *t)
{
    attempt *a = container_of(t, attempt, fake_timer);
    a->next_q = a->req->c->fake_ready;
    a->req->c->fake_ready = a;
}

static int launch_fake(attempt *a)
{
    s3_req *r = a->req;
    s3_client *c = r->c;
    const char *lines[24];
    size_t n = 0;
    for (struct curl_slist *l = a->hdrs; l && n < 24; l = l->next) lines[n++] = l->data;
    s3_http_request hr = {.method = r->method, .url = a->url, .headers = lines, .n_headers = n,
                          .body = r->body, .body_len = r->body_len, .attempt = a->no};
    s3_http_response resp;
    memset(&resp, 0, sizeof resp);
    a->fake = true;
    int rc = c->o.transport->exchange(c->o.transport->ctx, &hr, &resp);
    if (rc == 1) {
        timer_arm(c, &a->fake_timer, now_ms(c) + c->o.transfer_timeout_ms, on_fake_timeout);
        return 0;
    }
    if (rc == 0 && resp.delay_ms >= c->o.transfer_timeout_ms) {
        timer_arm(c, &a->fake_timer, now_ms(c) + c->o.transfer_timeout_ms, on_fake_timeout);
        return 0;
    }
    if (rc == 0) {
        a->status = resp.status;
        s3_copy_str(a->etag, sizeof a->etag, resp.etag);
        s3_copy_str(a->request_id, sizeof a->request_id, resp.request_id);
        s3_copy_str(a->content_range, sizeof a->content_range, resp.content_range);
        s3_copy_str(a->checksum, sizeof a->checksum, resp.checksum_crc32c);
        if (!resp.date || s3_http_parse_date(resp.date, &a->date_ms)) a->date_ms = 0;
        a->content_length = resp.body_len;
        a->have_length = true;
        if (resp.body_len && !deliver(a, resp.body, resp.body_len)) a->fake_rc = 0;
        if (resp.delay_ms) {
            timer_arm(c, &a->fake_timer, now_ms(c) + resp.delay_ms, on_fake_delayed);
            return 0;
        }
    } else {
        a->fake_rc = rc < 0 ? rc : -EIO;
    }
    a->next_q = c->fake_ready;
    c->fake_ready = a;
    return 0;
}

static void payload_setup(s3_req *r);

static int launch(attempt *a)
{
    s3_req *r = a->req;
    s3_client *c = r->c;
    if (!r->payload_ready) {
        payload_setup(r); /* hashed at the first launch, not at start: keeps starts cheap */
        r->payload_ready = true;
    }
    size_t ul = strlen(c->scheme) + strlen(r->host) + strlen(r->path) + strlen(r->query) + 8;
    a->url = malloc(ul);
    if (!a->url) return -ENOMEM;
    snprintf(a->url, ul, "%s://%s%s%s%s", c->scheme, r->host, r->path, r->query[0] ? "?" : "",
             r->query);
    int rc = build_headers(a);
    if (rc) return rc;
    if (r->get_buf) {
        if (!r->direct_owner) {
            r->direct_owner = a;
            a->dst = r->get_buf;
        } else {
            a->dst = malloc(r->get_len ? r->get_len : 1);
            if (!a->dst) return -ENOMEM;
            a->dst_private = true;
        }
    }
    a->running = true;
    r->n_launched++;
    c->n_running++;
    c->stats.requests++;
    c->stats.bytes_sent += r->body_len;
    if (!r->no_hedge && req_attempts(r) < r->max_attempts)
        timer_arm(c, &a->hedge_timer, now_ms(c) + c->o.attempt_timeout_ms, on_hedge_timer);
    if (c->o.transport) return launch_fake(a);
    rc = setup_easy(a);
    if (rc) return rc;
    if (curl_multi_add_handle(c->multi, a->easy) != CURLM_OK) return -ENOMEM;
    return 0;
}

/* Starts queued attempts while connection slots are free. */
static void launch_queued(s3_client *c)
{
    attempt *a;
    while ((a = c->queue_head)) {
        int limit = a->hedge ? 2 * c->o.connections : c->o.connections;
        if (c->n_running >= limit) break;
        queue_remove(c, a);
        int rc = launch(a);
        if (rc) attempt_end(a, rc, "could not start the request");
    }
}

static void fire_timers(s3_client *c)
{
    uint64_t now = now_ms(c);
    s3_timer *t;
    while ((t = c->timers) && t->due_ms <= now) {
        timer_disarm(c, t);
        t->fire(t);
    }
}

static void process_fake(s3_client *c)
{
    attempt *a;
    while ((a = c->fake_ready)) {
        c->fake_ready = a->next_q;
        a->next_q = NULL;
        /* not in the list anymore: attempt_end -> attempt_free must not look for it */
        a->fake = false;
        char msg[96];
        snprintf(msg, sizeof msg, "%s (test transport)",
                 a->fake_rc ? strerrordesc_np(-a->fake_rc) : "");
        attempt_end(a, a->fake_rc, msg);
    }
}

static void process_curl(s3_client *c)
{
    int running = 0;
    curl_multi_perform(c->multi, &running);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(c->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        attempt *a = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&a);
        CURLcode cc = m->data.result;
        if (!a) continue;
        int err = curl_to_errno(cc);
        char msg[CURL_ERROR_SIZE + 64];
        if (cc != CURLE_OK)
            snprintf(msg, sizeof msg, "%s (curl %d: %s)", strerrordesc_np(-err), (int)cc,
                     a->errbuf[0] ? a->errbuf : curl_easy_strerror(cc));
        else
            msg[0] = '\0';
        attempt_end(a, err, msg);
    }
}

/* Everything that needs no waiting: completions, timers, queued launches, fake answers.
 * Completions due run before anything is launched: an op that was cancelled or failed (and
 * queued the cleanup it needs) has its callback run before any cleanup request goes out. */
static int step(s3_client *c)
{
    int ran = 0;
    for (int round = 0; round < 8; round++) {
        ran += drain_done(c);
        fire_timers(c);
        expire_cleanups(c);
        launch_queued(c);
        process_fake(c);
        int n = drain_done(c);
        ran += n;
        bool more = c->fake_ready || c->done_head ||
                    (c->queue_head && c->n_running < c->o.connections);
        if (!more) break;
    }
    return ran;
}

int s3_client_run(s3_client *c, s3_waitfd *extra, size_t n_extra, int timeout_ms)
{
    if (c->in_run) return -EDEADLK;
    c->in_run = true;
    int ran = step(c);
    /* a negative timeout waits for activity (an hour at most per turn) */
    long wait = ran || c->fake_ready || c->done_head ? 0 : timeout_ms < 0 ? 3600000 : timeout_ms;
    if (c->timers) {
        uint64_t now = now_ms(c);
        long until = c->timers->due_ms <= now ? 0 : (long)(c->timers->due_ms - now);
        if (until < wait) wait = until;
    }
    for (const s3_op *op = c->detached; op; op = op->next_det) {
        uint64_t now = now_ms(c);
        long until = op->deadline_ms <= now ? 0 : (long)(op->deadline_ms - now);
        if (until < wait) wait = until;
    }
    int rc = 0;
    bool net_active = c->n_running > 0 && !c->o.transport;
    if (!net_active && n_extra == 0 && c->o.sleep_ms) {
        if (wait > 0) c->o.sleep_ms(c->o.seam_ctx, (uint32_t)wait);
    } else {
        struct curl_waitfd wfd[16];
        size_t n = n_extra < 16 ? n_extra : 16;
        for (size_t i = 0; i < n; i++) {
            wfd[i].fd = extra[i].fd;
            wfd[i].events = (short)(((extra[i].events & 0x001) ? CURL_WAIT_POLLIN : 0) |
                                    ((extra[i].events & 0x002) ? CURL_WAIT_POLLPRI : 0) |
                                    ((extra[i].events & 0x004) ? CURL_WAIT_POLLOUT : 0));
            wfd[i].revents = 0;
        }
        if (curl_multi_poll(c->multi, wfd, (unsigned)n, (int)wait, NULL) != CURLM_OK) rc = -EIO;
        for (size_t i = 0; i < n; i++)
            extra[i].revents = (short)(((wfd[i].revents & CURL_WAIT_POLLIN) ? 0x001 : 0) |
                                       ((wfd[i].revents & CURL_WAIT_POLLPRI) ? 0x002 : 0) |
                                       ((wfd[i].revents & CURL_WAIT_POLLOUT) ? 0x004 : 0));
    }
    process_curl(c);
    ran += step(c);
    c->in_run = false;
    return rc ? rc : ran;
}

void s3_client_wakeup(s3_client *c)
{
    curl_multi_wakeup(c->multi);
}

size_t s3_client_pending(const s3_client *c)
{
    size_t n = 0;
    for (const s3_op *op = c->ops; op; op = op->next) n += !op->internal;
    return n;
}

size_t s3_client_cleanups(const s3_client *c)
{
    size_t n = 0;
    for (const s3_op *op = c->detached; op; op = op->next_det) n += !op->finished;
    return n;
}

int s3_req_launched(const s3_req *r)
{
    return r->n_launched + r->n_resends;
}

void s3_client_stats(const s3_client *c, s3_stats *out)
{
    *out = c->stats;
}

const s3_opts *s3_client_opts(const s3_client *c)
{
    return &c->o;
}

/* ---- requests ---- */

static char *dup_or_empty(const char *s)
{
    return strdup(s ? s : "");
}

static int req_paths(s3_req *r, const s3_req_spec *spec)
{
    s3_client *c = r->c;
    const char *key = spec->key ? spec->key : "";
    size_t kcap = 3 * strlen(key) + 1, bl = strlen(spec->bucket);
    char *ekey = malloc(kcap);
    if (!ekey) return -ENOMEM;
    if (s3_uri_encode(key, true, ekey, kcap) < 0) {
        free(ekey);
        return -EINVAL;
    }
    size_t pcap = bl + strlen(ekey) + 4;
    r->path = malloc(pcap);
    r->host = malloc(strlen(c->authority) + bl + 2);
    if (!r->path || !r->host) {
        free(ekey);
        return -ENOMEM;
    }
    if (c->o.path_style) {
        snprintf(r->path, pcap, "/%s%s%s", spec->bucket, key[0] ? "/" : "", ekey);
        strcpy(r->host, c->authority);
    } else {
        snprintf(r->path, pcap, "/%s", ekey);
        sprintf(r->host, "%s.%s", spec->bucket, c->authority);
    }
    free(ekey);
    /* the query, canonical: sorted and encoded; also what is sent */
    size_t qcap = 1;
    for (size_t i = 0; i < spec->n_query; i++)
        qcap += 3 * (strlen(spec->query[i].name) +
                     strlen(spec->query[i].value ? spec->query[i].value : "")) + 2;
    r->query = malloc(qcap);
    if (!r->query) return -ENOMEM;
    int rc = s3_sigv4_canonical_query(spec->query, spec->n_query, r->query, qcap);
    return rc < 0 ? rc : 0;
}

static void payload_setup(s3_req *r)
{
    s3_client *c = r->c;
    if (r->body_len == 0) {
        memcpy(r->payload_hash, EMPTY_SHA256, sizeof EMPTY_SHA256);
        return;
    }
    s3_payload_mode m = c->o.payload;
    if (m == S3_PAYLOAD_AUTO)
        m = r->body_len < AUTO_UNSIGNED_MIN_BYTES ? S3_PAYLOAD_SHA256 : S3_PAYLOAD_UNSIGNED_CRC32C;
    if (m == S3_PAYLOAD_SHA256) {
        s3_sha256_hex(r->body, r->body_len, r->payload_hash);
        return;
    }
    strcpy(r->payload_hash, "UNSIGNED-PAYLOAD");
    s3_crc32c_b64(c->o.crc32c(0, r->body, r->body_len), r->crc_b64);
}

int s3_req_start(s3_client *c, const s3_req_spec *spec, s3_req_done_fn cb, void *ctx,
                 s3_req **out)
{
    if (!spec->bucket || !spec->bucket[0] || !spec->method || spec->n_headers > 8) return -EINVAL;
    s3_req *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    r->c = c;
    r->next = c->reqs;
    if (c->reqs) c->reqs->prev = r;
    c->reqs = r;
    r->cb = cb;
    r->ctx = ctx;
    r->body = spec->body;
    r->body_len = spec->body_len;
    r->get_buf = spec->get_buf;
    r->get_len = spec->get_len;
    r->no_hedge = spec->no_hedge;
    r->check = spec->check;
    r->max_attempts = spec->max_attempts > 0 && spec->max_attempts < c->o.max_attempts
                          ? spec->max_attempts : c->o.max_attempts;
    r->get_offset = spec->get_offset;
    r->verify = spec->verify_write;
    r->end_on_corrupt = spec->end_on_corrupt;
    r->method = strdup(spec->method);
    r->bucket = strdup(spec->bucket);
    r->key = dup_or_empty(spec->key);
    r->content_type = spec->content_type ? strdup(spec->content_type) : NULL;
    int rc = (!r->method || !r->bucket || !r->key) ? -ENOMEM : req_paths(r, spec);
    if (!rc && spec->n_headers) {
        r->headers = calloc(spec->n_headers, sizeof *r->headers);
        if (!r->headers) rc = -ENOMEM;
        for (size_t i = 0; !rc && i < spec->n_headers; i++) {
            r->headers[i].name = strdup(spec->headers[i].name);
            r->headers[i].value = strdup(spec->headers[i].value);
            r->n_headers++;
            if (!r->headers[i].name || !r->headers[i].value) rc = -ENOMEM;
        }
    }
    if (!rc && !attempt_new(r, false)) rc = -ENOMEM;
    if (rc) {
        req_free(r);
        return rc;
    }
    if (out) *out = r;
    return 0;
}

/* ---- client ---- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int parse_endpoint(s3_client *c, s3_result *res)
{
    const char *e = c->endpoint;
    const char *sep = strstr(e, "://");
    if (!sep || (size_t)(sep - e) >= sizeof c->scheme) {
        s3_result_fail(res, -EINVAL, "S3 endpoint '%s': expected http://host[:port] or https://host",
                       e);
        return -EINVAL;
    }
    memcpy(c->scheme, e, (size_t)(sep - e));
    c->scheme[sep - e] = '\0';
    if (strcmp(c->scheme, "http") && strcmp(c->scheme, "https")) {
        s3_result_fail(res, -EINVAL, "S3 endpoint '%s': scheme must be http or https", e);
        return -EINVAL;
    }
    const char *h = sep + 3;
    size_t hl = strcspn(h, "/?#");
    if (hl == 0 || hl >= sizeof c->authority || strchr(h + hl, '?') || strchr(h, '@')) {
        s3_result_fail(res, -EINVAL, "S3 endpoint '%s': bad host", e);
        return -EINVAL;
    }
    memcpy(c->authority, h, hl);
    c->authority[hl] = '\0';
    return 0;
}

int s3_client_new(const s3_opts *opts, s3_client **out, s3_result *res)
{
    s3_result scratch;
    if (!res) res = &scratch;
    memset(res, 0, sizeof *res);
    s3_opts o = opts ? *opts : (s3_opts){0};
    if (!o.crc32c) {
        s3_result_fail(res, -EINVAL, "S3 client: s3_opts.crc32c is NULL (the caller must give "
                       "the CRC32C function for x-amz-checksum-crc32c)");
        return -EINVAL;
    }
    if (!o.region || !*o.region) o.region = "us-east-1";
    if (o.connections <= 0) o.connections = 8;
    if (o.connections > 64) o.connections = 64;
    if (!o.connect_timeout_ms) o.connect_timeout_ms = 5000;
    if (!o.attempt_timeout_ms) o.attempt_timeout_ms = 1000;
    if (!o.transfer_timeout_ms) {
        o.transfer_timeout_ms = 3 * o.attempt_timeout_ms;
        if (o.transfer_timeout_ms < 10000) o.transfer_timeout_ms = 10000;
    }
    if (o.max_attempts <= 0) o.max_attempts = 3;
    if (!o.next_attempt_delay_ms) o.next_attempt_delay_ms = 500;
    if (!o.max_backoff_ms) o.max_backoff_ms = 20 * o.next_attempt_delay_ms;
    if (!o.max_response_bytes) o.max_response_bytes = 16u << 20;
    if (!o.cleanup_timeout_ms) {
        uint64_t t = (uint64_t)o.max_attempts * o.attempt_timeout_ms + 1000;
        o.cleanup_timeout_ms = t > UINT32_MAX ? UINT32_MAX : (uint32_t)t;
    }

    s3_client *c = calloc(1, sizeof *c);
    if (!c) return s3_result_fail(res, -ENOMEM, "S3 client: out of memory"), -ENOMEM;
    char ep[300];
    if (!o.endpoint || !*o.endpoint) {
        if (strcmp(o.region, "us-east-1") == 0) snprintf(ep, sizeof ep, "https://s3.amazonaws.com");
        else snprintf(ep, sizeof ep, "https://s3.%s.amazonaws.com", o.region);
        o.endpoint = ep;
    }
    c->endpoint = strdup(o.endpoint);
    c->region = strdup(o.region);
    c->ca_file = o.ca_file && *o.ca_file ? strdup(o.ca_file) : NULL;
    int rc = (!c->endpoint || !c->region) ? -ENOMEM : 0;
    if (rc) s3_result_fail(res, rc, "S3 client: out of memory");
    if (!rc) rc = parse_endpoint(c, res);
    if (!rc) {
        char why[512];
        rc = s3_credentials_resolve(o.access_key, o.secret_key, o.session_token,
                                    o.credentials_file, o.profile, &c->cred, why, sizeof why);
        if (rc) {
            rc = -EINVAL;
            s3_result_fail(res, rc, "S3 client for %s: %s", c->endpoint,
                           why[0] ? why : "credential value too long");
        }
    }
    if (!rc) {
        pthread_once(&curl_once, curl_init_once);
        c->multi = curl_multi_init();
        if (!c->multi) rc = -ENOMEM, s3_result_fail(res, rc, "S3 client: curl_multi_init failed");
    }
    if (rc) {
        OPENSSL_cleanse(&c->cred, sizeof c->cred);
        free(c->endpoint);
        free(c->region);
        free(c->ca_file);
        free(c);
        return rc;
    }
    o.endpoint = c->endpoint;
    o.region = c->region;
    o.ca_file = c->ca_file;
    o.access_key = o.secret_key = o.session_token = NULL; /* kept in c->cred only */
    o.profile = o.credentials_file = NULL;
    c->o = o;
    c->rng = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() ^ (uintptr_t)c;
    if (!c->rng) c->rng = 1;
    /* Hedges may add one connection per slot; the cache keeps them all for reuse. */
    curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)(2 * o.connections));
    curl_multi_setopt(c->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)(2 * o.connections));
    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, (long)(2 * o.connections));
    *out = c;
    return 0;
}

/* Waiting turns of s3_client_free: short, so that its one bound is kept closely. */
#define FREE_TURN_MS 50

void s3_client_free(s3_client *c)
{
    if (!c) return;
    /* cancel every user op: their callbacks run on the first turn below */
    for (;;) {
        s3_op *op = c->ops;
        while (op && (op->internal || op->finished || op->cancelled)) op = op->next;
        if (!op) break;
        s3_op_cancel(op);
    }
    /* then the detached cleanups (aborts, deletes) get cleanup_timeout_ms in all */
    uint64_t deadline = now_ms(c) + c->o.cleanup_timeout_ms;
    bool first = true;
    while (first || c->done_head || s3_client_cleanups(c) > 0) {
        uint64_t now = now_ms(c);
        if (!first && now >= deadline) break;
        long left = (long)(deadline > now ? deadline - now : 0);
        first = false;
        if (s3_client_run(c, NULL, 0, left < FREE_TURN_MS ? (int)left : FREE_TURN_MS) < 0) break;
    }
    /* what is left is abandoned (dstl gc removes it): dropped without callbacks */
    while (c->detached) s3_op_drop(c->detached);
    while (c->ops) s3_op_drop(c->ops); /* their requests go with them */
    while (c->reqs) req_free(c->reqs);
    for (int i = 0; i < c->n_idle_easy; i++) curl_easy_cleanup(c->idle_easy[i]);
    curl_multi_cleanup(c->multi);
    OPENSSL_cleanse(&c->cred, sizeof c->cred);
    free(c->endpoint);
    free(c->region);
    free(c->ca_file);
    free(c);
}
