/*
 * s3/transport_curl.c — the network: one libcurl multi handle per client, an easy handle per
 * running attempt (kept in a small cache for reuse), and the callbacks that turn a transfer
 * into the attempt's response fields and body.
 *
 * Re-sends. libcurl sends a request again by itself, on a fresh connection, when a reused
 * connection dies before any answer byte; the server may have carried out the first.
 * CURLOPT_PREREQFUNCTION runs once per request actually sent (checked on libcurl 7.88 with
 * s3proxy's drop-reused), so every run after an attempt's first counts as another attempt.
 *
 * Bounds: connections per host and in all <= 2 x connections (hedges may add one per slot;
 * the cache keeps them alive for reuse); every transfer is abandoned after
 * transfer_timeout_ms (CURLOPT_TIMEOUT_MS); body bytes go through s3_attempt_deliver, which
 * stops a transfer that does not fit.
 *
 * Threads: the client's thread only, except s3_curl_wakeup (curl_multi_wakeup: any thread).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "s3/engine.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

int s3_curl_open(s3_client *c, int connections, s3_result *res)
{
    pthread_once(&curl_once, curl_init_once);
    c->multi = curl_multi_init();
    if (!c->multi) {
        s3_result_fail(res, -ENOMEM, "S3 client: curl_multi_init failed");
        return -ENOMEM;
    }
    /* Hedges may add one connection per slot; the cache keeps them all for reuse. */
    curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)(2 * connections));
    curl_multi_setopt(c->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)(2 * connections));
    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, (long)(2 * connections));
    return 0;
}

void s3_curl_close(s3_client *c)
{
    for (int i = 0; i < c->n_idle_easy; i++) curl_easy_cleanup(c->idle_easy[i]);
    curl_multi_cleanup(c->multi);
}

void s3_curl_wakeup(s3_client *c)
{
    curl_multi_wakeup(c->multi);
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

/* ---- callbacks ---- */

static size_t on_header(char *p, size_t sz, size_t n, void *ud)
{
    s3_attempt *a = ud;
    size_t len = sz * n;
    if (len > 5 && strncmp(p, "HTTP/", 5) == 0) {
        const char *sp = memchr(p, ' ', len);
        a->status = sp ? atoi(sp + 1) : 0;
        a->etag[0] = a->content_range[0] = a->checksum[0] = '\0';
        a->date_ms = 0;
        a->have_length = false;
        a->content_length = 0;
        a->range_state = 0;
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

static size_t on_write(char *p, size_t sz, size_t n, void *ud)
{
    return s3_attempt_deliver(ud, p, sz * n) ? sz * n : 0;
}

/* Runs once per request libcurl actually sends: again when it re-sends the request on a fresh
 * connection by itself (a reused connection died before any answer byte). The server may
 * have carried out the first one: every send is an attempt. */
static int on_prereq(void *ud, char *primary_ip, char *local_ip, int primary_port, int local_port)
{
    (void)primary_ip, (void)local_ip, (void)primary_port, (void)local_port;
    s3_attempt *a = ud;
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

/* ---- transfers ---- */

static int setup_easy(s3_attempt *a)
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

int s3_curl_start(s3_attempt *a)
{
    int rc = setup_easy(a);
    if (rc) return rc;
    if (curl_multi_add_handle(a->req->c->multi, a->easy) != CURLM_OK) return -ENOMEM;
    return 0;
}

void s3_curl_stop(s3_attempt *a)
{
    if (a->easy) curl_multi_remove_handle(a->req->c->multi, a->easy);
}

void s3_curl_release(s3_attempt *a)
{
    s3_client *c = a->req->c;
    CURL *e = a->easy;
    if (!e) return;
    if (c->n_idle_easy < (int)(sizeof c->idle_easy / sizeof c->idle_easy[0])) {
        curl_easy_reset(e);
        c->idle_easy[c->n_idle_easy++] = e;
    } else {
        curl_easy_cleanup(e);
    }
}

int s3_curl_poll(s3_client *c, s3_waitfd *extra, size_t n_extra, int wait_ms)
{
    struct curl_waitfd wfd[16];
    size_t n = n_extra < 16 ? n_extra : 16;
    for (size_t i = 0; i < n; i++) {
        wfd[i].fd = extra[i].fd;
        wfd[i].events = (short)(((extra[i].events & 0x001) ? CURL_WAIT_POLLIN : 0) |
                                ((extra[i].events & 0x002) ? CURL_WAIT_POLLPRI : 0) |
                                ((extra[i].events & 0x004) ? CURL_WAIT_POLLOUT : 0));
        wfd[i].revents = 0;
    }
    int rc = curl_multi_poll(c->multi, wfd, (unsigned)n, wait_ms, NULL) != CURLM_OK ? -EIO : 0;
    for (size_t i = 0; i < n; i++)
        extra[i].revents = (short)(((wfd[i].revents & CURL_WAIT_POLLIN) ? 0x001 : 0) |
                                   ((wfd[i].revents & CURL_WAIT_POLLPRI) ? 0x002 : 0) |
                                   ((wfd[i].revents & CURL_WAIT_POLLOUT) ? 0x004 : 0));
    return rc;
}

void s3_curl_perform(s3_client *c)
{
    int running = 0;
    curl_multi_perform(c->multi, &running);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(c->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        s3_attempt *a = NULL;
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
        a->req->c->attempt_end(a, err, msg);
    }
}
