/*
 * s3/response.c — what an attempt received, and whether it wins: the body as it arrives, the
 * checks a 2xx must pass, and the reply the attempt gives its request.
 *
 * Bodies. A GET's 2xx goes into its destination (the caller's buffer, or a private one for a
 * hedged twin: copied over only when it wins), never past the length asked for; a 200 to a
 * ranged GET (a server that ignored Range) is the whole object, from which the range asked
 * for is cut as it streams. Every other body (XML, error documents) is kept up to
 * max_response_bytes.
 *
 * Checks before an attempt wins: a written body (verify_write) must be what the server stored
 * (its x-amz-checksum-crc32c, else the signed SHA-256, else an MD5 ETag); a GET's 206 must be
 * the range asked for; then the op's own check hook (XML answers). A copy that differs fails
 * the attempt with -EBADMSG (transient: sent again), a wrong range or a malformed answer with
 * -EPROTO.
 *
 * Threads: the client's thread only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3/engine.h"

static bool body_append(s3_attempt *a, const char *p, size_t len)
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

/* Bytes [at, at + n) of the range asked for into the attempt's destination; in the caller's
 * buffer, bytes already handed over (a streamed GET's get_final) are never written again. */
static void dst_put(s3_attempt *a, size_t at, const char *p, size_t n)
{
    size_t fin = a->dst_private ? 0 : a->req->get_final;
    if (at < fin) {
        size_t skip = fin - at < n ? fin - at : n;
        at += skip, p += skip, n -= skip;
    }
    if (n) memcpy(a->dst + at, p, n);
}

/* A streamed GET: what the caller's buffer holds from byte 0 on is handed over. Only an
 * attempt writing there, and only when its answer is the range asked for (a 206's
 * Content-Range starts at the offset; a 200 is the whole object, cut as it streams). */
static void stream_progress(s3_attempt *a)
{
    s3_req *r = a->req;
    if (!r->progress || a->dst_private || a->dst_got <= r->get_final) return;
    uint64_t size = a->have_length ? a->content_length : 0;
    if (a->status == 206) {
        /* checked once per answer (its headers are in before its first byte), not per
         * delivery: a restore's fetch thread called snprintf for every 16-256 KiB */
        if (a->range_state == 0) {
            const char *slash = strchr(a->content_range, '/');
            char first[32];
            int k = snprintf(first, sizeof first, "bytes %llu-", (unsigned long long)r->get_offset);
            a->range_state = slash && strncmp(a->content_range, first, (size_t)k) == 0 ? 1 : -1;
            if (a->range_state == 1) a->range_total = strtoull(slash + 1, NULL, 10);
        }
        if (a->range_state < 0) return;
        size = a->range_total;
    }
    r->get_final = a->dst_got;
    r->progress(r->progress_ctx, r->get_final, size);
}

bool s3_attempt_deliver(s3_attempt *a, const char *p, size_t len)
{
    s3_req *r = a->req;
    r->c->stats.bytes_received += len;
    if (r->get_buf && a->status == 200) {
        /* the server ignored Range and sends the whole object: keep [offset, offset + len) */
        uint64_t pos = a->stream_pos, lo = r->get_offset, hi = r->get_offset + r->get_len;
        a->stream_pos += len;
        if (pos + len > lo && pos < hi) {
            uint64_t from = pos > lo ? pos : lo, to = pos + len < hi ? pos + len : hi;
            dst_put(a, (size_t)(from - lo), p + (from - pos), (size_t)(to - from));
            if (to - lo > a->dst_got) a->dst_got = (size_t)(to - lo);
            stream_progress(a);
        }
        return true;
    }
    if (r->get_buf && a->status >= 200 && a->status < 300) {
        if (a->dst_got + len > r->get_len) {
            a->dst_overflow = true;
            return false;
        }
        dst_put(a, a->dst_got, p, len);
        a->dst_got += len;
        stream_progress(a);
        return true;
    }
    return body_append(a, p, len);
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
static int verify_write(s3_attempt *a, s3_reply *rep, char *why, size_t cap)
{
    s3_req *r = a->req;
    if (a->checksum[0]) {
        r->c->md5_checks = false;       /* the server echoes checksums: no MD5 needed */
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
    r->c->md5_checks = true;            /* an unsigned write the ETag had to check */
    if (s3_etag_eq(a->etag, r->md5_etag)) {
        rep->write_check = S3_CHECK_MD5;
        return 0;
    }
    snprintf(why, cap, "the stored copy differs from what was sent: ETag %.72s, the body's MD5 %s",
             a->etag[0] ? a->etag : "(none)", r->md5_etag);
    return -EBADMSG;
}

/* rep from what the attempt received: status, headers, body, sizes. */
static void reply_fill(const s3_attempt *a, int net_err, s3_reply *rep)
{
    memset(rep, 0, sizeof *rep);
    rep->net_err = net_err;
    rep->status = net_err ? 0 : a->status;
    s3_copy_str(rep->etag, sizeof rep->etag, a->etag);
    s3_copy_str(rep->request_id, sizeof rep->request_id, a->request_id);
    rep->server_date_ms = a->date_ms;
    rep->body = a->body ? a->body : "";
    rep->body_len = a->body_len;
    rep->got = a->dst_got;
    rep->object_size = a->content_length;
    const char *slash = strchr(a->content_range, '/');
    if (slash && slash[1] != '*') rep->object_size = strtoull(slash + 1, NULL, 10);
    if (a->req->get_buf && rep->status == 200) /* Range ignored: the whole object came */
        rep->object_size = a->have_length ? a->content_length : a->stream_pos;
}

/* The checks of a 2xx, in order: a GET's 206 range, the written copy, the op's hook. 0 wins;
 * -EPROTO or -EBADMSG (*corrupt set) with why[]; 1 from the hook (an error document). */
static int check_success(s3_attempt *a, s3_reply *rep, char *why, size_t cap, bool *corrupt)
{
    s3_req *r = a->req;
    int rc = 0;
    uint64_t total;
    if (r->get_buf && rep->status == 206) {
        if (check_content_range(a->content_range, r->get_offset, a->dst_got, &total) == 0) {
            rep->object_size = total;
        } else {
            rc = -EPROTO;
            snprintf(why, cap,
                     "206 with Content-Range '%.60s' for %zu bytes at offset %llu asked for",
                     a->content_range, a->dst_got, (unsigned long long)r->get_offset);
        }
    }
    if (!rc && r->verify) {
        rc = verify_write(a, rep, why, cap);
        *corrupt = rc != 0;
    }
    if (!rc && r->check) rc = r->check(r->ctx, rep);
    return rc;
}

int s3_attempt_reply(s3_attempt *a, int net_err, const char *net_msg, s3_reply *rep,
                     bool *corrupt)
{
    s3_req *r = a->req;
    if (a->too_big) {
        net_err = -EMSGSIZE;
        net_msg = "response larger than max_response_bytes";
    } else if (a->dst_overflow) {
        net_err = -EMSGSIZE;
        net_msg = "response longer than the range asked for";
    }
    reply_fill(a, net_err, rep);
    *corrupt = false;
    if (!net_err && rep->status >= 200 && rep->status < 300) {
        char why[256] = "";
        int rc = check_success(a, rep, why, sizeof why, corrupt);
        if (rc == 0) {
            /* a twin's bytes, after what a streamed GET handed over already */
            if (a->dst_private && a->dst_got > r->get_final)
                memcpy((uint8_t *)r->get_buf + r->get_final, a->dst + r->get_final,
                       a->dst_got - r->get_final);
            rep->err = 0;
            rep->s3_code[0] = rep->message[0] = '\0';
            return 0;
        }
        if (rc < 0) {
            rep->net_err = *corrupt ? -EBADMSG : -EPROTO;
            s3_copy_str(rep->message, sizeof rep->message, why[0] ? why : "malformed response");
            if (*corrupt) r->c->stats.corrupt_writes++;
        }
    } else if (!net_err) {
        char rid[128] = "";
        if (s3_xml_parse_error(rep->body, rep->body_len, rep->s3_code, sizeof rep->s3_code,
                               rep->message, sizeof rep->message, rid, sizeof rid) != 0) {
            rep->s3_code[0] = '\0';
            s3_copy_str(rep->message, sizeof rep->message,
                        rep->status == 404 ? "Not Found" : "no error document");
        }
        if (!rep->request_id[0]) s3_copy_str(rep->request_id, sizeof rep->request_id, rid);
    } else {
        s3_copy_str(rep->message, sizeof rep->message, net_msg);
    }
    rep->body = "";
    rep->body_len = 0;
    return 1;
}
