/*
 * s3/transport_fake.c — the test transport: s3_opts.transport in libcurl's place, so that the
 * engine's retries, hedges, timeouts and checks run against scripted answers on the client's
 * injected clock.
 *
 * An attempt's exchange() is called when it is launched (from s3_client_run, never from a
 * start call). Its answer goes on the client's ready list and ends the attempt on the same
 * loop turn (s3_fake_deliver), or after the answer's delay_ms (a timer); an attempt left
 * hanging, or answered at or past transfer_timeout_ms, times out by a timer, as a libcurl
 * transfer would. The answer passes through the same header fields and s3_attempt_deliver as
 * a real one, so everything after the transport is what production runs.
 *
 * Threads: the client's thread only.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "s3/engine.h"

static void on_fake_timeout(s3_timer *t)
{
    s3_attempt *a = s3_container_of(t, s3_attempt, fake_timer);
    a->req->c->attempt_end(a, -ETIMEDOUT, "operation timed out (test transport)");
}

/* A delayed test answer is due: it is processed like one that came at once. */
static void on_fake_delayed(s3_timer *t)
{
    s3_attempt *a = s3_container_of(t, s3_attempt, fake_timer);
    a->next_q = a->req->c->fake_ready;
    a->req->c->fake_ready = a;
}

int s3_fake_start(s3_attempt *a)
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
        s3_timer_arm(&c->timers, &a->fake_timer, s3_client_now_ms(c) + c->o.transfer_timeout_ms,
                     on_fake_timeout);
        return 0;
    }
    if (rc == 0 && resp.delay_ms >= c->o.transfer_timeout_ms) {
        s3_timer_arm(&c->timers, &a->fake_timer, s3_client_now_ms(c) + c->o.transfer_timeout_ms,
                     on_fake_timeout);
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
        if (resp.body_len && !s3_attempt_deliver(a, resp.body, resp.body_len)) a->fake_rc = 0;
        if (resp.delay_ms) {
            s3_timer_arm(&c->timers, &a->fake_timer, s3_client_now_ms(c) + resp.delay_ms,
                         on_fake_delayed);
            return 0;
        }
    } else {
        a->fake_rc = rc < 0 ? rc : -EIO;
    }
    a->next_q = c->fake_ready;
    c->fake_ready = a;
    return 0;
}

void s3_fake_stop(s3_attempt *a)
{
    s3_client *c = a->req->c;
    s3_timer_disarm(&c->timers, &a->fake_timer);
    for (s3_attempt **pp = &c->fake_ready; *pp; pp = &(*pp)->next_q)
        if (*pp == a) {
            *pp = a->next_q;
            a->next_q = NULL;
            return;
        }
}

void s3_fake_deliver(s3_client *c)
{
    s3_attempt *a;
    while ((a = c->fake_ready)) {
        c->fake_ready = a->next_q;
        a->next_q = NULL;
        /* not in the list any more: freeing it must not look for it there (s3_fake_stop) */
        a->fake = false;
        char msg[96];
        snprintf(msg, sizeof msg, "%s (test transport)",
                 a->fake_rc ? strerrordesc_np(-a->fake_rc) : "");
        a->req->c->attempt_end(a, a->fake_rc, msg);
    }
}
