/*
 * s3/request.c — requests and their attempts: queued for a connection slot, signed and
 * launched on a transport, retried after a backoff, hedged when slow, and ended.
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
 * max_response_bytes, GET bodies <= the caller's buffer (s3/response.c); every attempt is
 * abandoned after transfer_timeout_ms (by the transport).
 *
 * Signing: every attempt is signed afresh (its own x-amz-date); the payload (SHA-256, or
 * UNSIGNED-PAYLOAD with the caller's CRC32C) is hashed once, at the first launch.
 *
 * Threads: the client's thread only. Request callbacks run from the loop, never inside
 * s3_req_start.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

#include "s3/engine.h"

static const char EMPTY_SHA256[] =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/* SHA-256 of a body costs ~1 ms per MiB here; above this size AUTO sends UNSIGNED-PAYLOAD
 * with a CRC32C (~20 GB/s) instead: small requests keep the signed digest. */
#define AUTO_UNSIGNED_MIN_BYTES (1u << 20)
/* Below this body size Expect: 100-continue costs a round trip and saves nothing. */
#define EXPECT_MIN_BYTES (1u << 20)

/* ---- the queue of attempts waiting for a connection slot ---- */

static void queue_remove(s3_client *c, s3_attempt *a)
{
    if (a->prev_q) a->prev_q->next_q = a->next_q;
    else c->queue_head = a->next_q;
    if (a->next_q) a->next_q->prev_q = a->prev_q;
    else c->queue_tail = a->prev_q;
    a->next_q = a->prev_q = NULL;
}

static void queue_push(s3_client *c, s3_attempt *a, bool front)
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

static bool in_queue(const s3_client *c, const s3_attempt *a)
{
    return a->prev_q || a->next_q || c->queue_head == a;
}

/* ---- attempts and requests ---- */

/* Stops an attempt wherever it is and frees it (no outcome recorded). */
static void attempt_free(s3_attempt *a)
{
    s3_req *r = a->req;
    s3_client *c = r->c;
    s3_timer_disarm(&c->timers, &a->hedge_timer);
    if (a->running) {
        if (a->fake) s3_fake_stop(a);
        else s3_curl_stop(a);
        c->n_running--;
        a->running = false;
    } else if (in_queue(c, a)) {
        queue_remove(c, a);
    }
    s3_curl_release(a);
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

static s3_attempt *attempt_new(s3_req *r, bool hedge)
{
    s3_client *c = r->c;
    s3_attempt *a = calloc(1, sizeof *a);
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
    s3_timer_disarm(&c->timers, &r->retry_timer);
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

int s3_req_launched(const s3_req *r)
{
    return r->n_launched + r->n_resends;
}

static void req_finish(s3_req *r, s3_reply *rep)
{
    while (r->attempts) attempt_free(r->attempts);
    s3_timer_disarm(&r->c->timers, &r->retry_timer);
    rep->attempts = req_attempts(r);
    rep->maybe_applied = r->maybe_applied;
    r->cb(r->ctx, r, rep);
    req_free(r);
}

static void on_retry_timer(s3_timer *t)
{
    s3_req *r = s3_container_of(t, s3_req, retry_timer);
    if (attempt_new(r, false)) r->c->stats.retries++;
    else {
        s3_reply rep = r->last;
        rep.err = -ENOMEM;
        req_finish(r, &rep);
    }
}

static void on_hedge_timer(s3_timer *t)
{
    s3_attempt *a = s3_container_of(t, s3_attempt, hedge_timer);
    s3_req *r = a->req;
    if (req_attempts(r) < r->max_attempts && attempt_new(r, true)) r->c->stats.hedges++;
}

/* ---- the end of an attempt ---- */

/* A failed attempt (rep says why): what the server may have carried out, then the request
 * retries after a backoff, waits for a twin still running, or ends. */
static void attempt_failed(s3_attempt *a, s3_reply *rep, bool corrupt)
{
    s3_req *r = a->req;
    s3_client *c = r->c;
    int net_err = rep->net_err;
    s3_retry_class cls = s3_retry_classify(net_err, rep->status, rep->s3_code);
    /* What a server may have carried out although we saw a failure: anything that got past
     * connecting without a 4xx answer (a corrupt copy was carried out too). */
    if ((net_err && net_err != -ECONNREFUSED && net_err != -EHOSTUNREACH && net_err != -EACCES) ||
        rep->status >= 500)
        r->maybe_applied = true;
    rep->err = s3_error_code(net_err, rep->status, rep->s3_code);
    r->last = *rep;
    r->n_failed++;
    attempt_free(a);
    if (cls == S3_RETRY_NO || (corrupt && r->end_on_corrupt)) {
        req_finish(r, rep);
    } else if (r->n_live > 0) {
        /* a twin is still running: it decides */
    } else if (cls == S3_RETRY_TWIN) {
        req_finish(r, rep); /* ambiguous, no twin left: the op settles it */
    } else if (req_attempts(r) < r->max_attempts) {
        uint32_t d = s3_backoff_ms(r->n_failed, c->o.next_attempt_delay_ms, c->o.max_backoff_ms,
                                   s3_client_random(c));
        s3_timer_arm(&c->timers, &r->retry_timer, s3_client_now_ms(c) + d, on_retry_timer);
    } else {
        req_finish(r, rep);
    }
}

void s3_attempt_end(s3_attempt *a, int net_err, const char *net_msg)
{
    s3_reply rep;
    bool corrupt;
    if (s3_attempt_reply(a, net_err, net_msg, &rep, &corrupt) == 0) req_finish(a->req, &rep);
    else attempt_failed(a, &rep, corrupt);
}

/* ---- signing and launching ---- */

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

/* Signs the attempt (a fresh x-amz-date each time) and builds its header list (a curl_slist,
 * which both transports read). */
static int build_headers(s3_attempt *a)
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

static int launch(s3_attempt *a)
{
    s3_req *r = a->req;
    s3_client *c = r->c;
    if (!r->payload_ready) {
        payload_setup(r); /* hashed at the first launch, not at start: keeps starts cheap */
        r->payload_ready = true;
    }
    a->url = s3_target_url(c->scheme, r->host, r->path, r->query);
    if (!a->url) return -ENOMEM;
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
        s3_timer_arm(&c->timers, &a->hedge_timer, s3_client_now_ms(c) + c->o.attempt_timeout_ms,
                     on_hedge_timer);
    return c->o.transport ? s3_fake_start(a) : s3_curl_start(a);
}

void s3_launch_queued(s3_client *c)
{
    s3_attempt *a;
    while ((a = c->queue_head)) {
        int limit = a->hedge ? 2 * c->o.connections : c->o.connections;
        if (c->n_running >= limit) break;
        queue_remove(c, a);
        int rc = launch(a);
        if (rc) s3_attempt_end(a, rc, "could not start the request");
    }
}

/* ---- starting a request ---- */

static char *dup_or_empty(const char *s)
{
    return strdup(s ? s : "");
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
    r->progress = spec->progress;
    r->progress_ctx = spec->progress_ctx;
    r->verify = spec->verify_write;
    if (spec->body_md5_etag) snprintf(r->md5_etag, sizeof r->md5_etag, "%s", spec->body_md5_etag);
    r->end_on_corrupt = spec->end_on_corrupt;
    r->method = strdup(spec->method);
    r->bucket = strdup(spec->bucket);
    r->key = dup_or_empty(spec->key);
    r->content_type = spec->content_type ? strdup(spec->content_type) : NULL;
    int rc = (!r->method || !r->bucket || !r->key)
                 ? -ENOMEM
                 : s3_target_build(c->authority, c->o.path_style, spec->bucket, spec->key,
                                   spec->query, spec->n_query, &r->path, &r->host, &r->query);
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
