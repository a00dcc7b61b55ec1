/*
 * s3/result.c — what an operation reports: the code of a final failure (s3_error_code, for the
 * table at the top of s3.h) and the one-line error naming the request (s3_result_set from a
 * request's reply, s3_result_fail without one, s3_result_append for what came after).
 *
 * Why apart from the retry policy: the classifier decides whether to try again; this decides
 * what the caller is told once no attempt is left. Credentials never reach a result: a reply
 * carries the server's code, message and request id, never a request's headers.
 * Threads: pure (on the result given), thread-safe.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "s3/s3_int.h"

static bool code_is(const char *code, const char *want)
{
    return code && strcmp(code, want) == 0;
}

int s3_error_code(int net_err, int status, const char *s3_code)
{
    if (net_err) {
        switch (net_err) {
        case -ETIMEDOUT:
        case -ECONNREFUSED:
        case -EHOSTUNREACH:
        case -EMSGSIZE:
        case -ENOMEM:
        case -ECANCELED:
        case -EINVAL:
        case -EACCES:
            return net_err;
        default:
            return DSTL_EREMOTE;
        }
    }
    if (code_is(s3_code, "NoSuchKey") || code_is(s3_code, "NoSuchBucket") ||
        code_is(s3_code, "NoSuchUpload") || status == 404)
        return -ENOENT;
    if (status == 412 || code_is(s3_code, "BucketAlreadyExists")) return -EEXIST;
    if (status == 403) return -EACCES;
    if (status == 416 || code_is(s3_code, "InvalidRange")) return -ERANGE;
    return DSTL_EREMOTE;
}

void s3_result_fail(s3_result *res, int err, const char *fmt, ...)
{
    res->err = err;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->error, sizeof res->error, fmt, ap);
    va_end(ap);
}

void s3_copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = src ? strlen(src) : 0;
    if (n >= cap) n = cap - 1;
    if (n) memcpy(dst, src, n);
    dst[n] = '\0';
}

void s3_result_set(s3_result *res, const char *what, const char *bucket, const char *key,
                   const s3_reply *rep)
{
    res->err = rep->err;
    res->http_status = rep->status;
    res->attempts = rep->attempts;
    res->server_date_ms = rep->server_date_ms;
    res->write_check = rep->write_check;
    s3_copy_str(res->s3_code, sizeof res->s3_code, rep->s3_code);
    s3_copy_str(res->message, sizeof res->message, rep->message);
    s3_copy_str(res->request_id, sizeof res->request_id, rep->request_id);
    if (rep->etag[0]) s3_copy_str(res->etag, sizeof res->etag, rep->etag);
    if (!rep->err) {
        res->error[0] = '\0';
        return;
    }
    char rid[160] = "", line[1024];
    if (rep->request_id[0]) snprintf(rid, sizeof rid, "req-id %.120s, ", rep->request_id);
    const char *b = bucket ? bucket : "", *k = key ? key : "";
    const char *s = rep->attempts == 1 ? "" : "s";
    if (!rep->net_err && rep->status)
        /* "503 SlowDown: Please reduce...", "403 SignatureDoesNotMatch", "404 Not Found" */
        snprintf(line, sizeof line, "%.40s s3://%.63s/%.200s: %d %.63s%s%.180s (%s%d attempt%s)",
                 what, b, k, rep->status, rep->s3_code[0] ? rep->s3_code : rep->message,
                 rep->s3_code[0] && rep->message[0] ? ": " : "",
                 rep->s3_code[0] ? rep->message : "", rid, rep->attempts, s);
    else
        snprintf(line, sizeof line, "%.40s s3://%.63s/%.200s: %.250s (%s%d attempt%s)", what, b, k,
                 rep->message[0] ? rep->message : "transport failure", rid, rep->attempts, s);
    s3_copy_str(res->error, sizeof res->error, line);
}

void s3_result_append(s3_result *res, const char *fmt, ...)
{
    size_t el = strlen(res->error);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->error + el, sizeof res->error - el, fmt, ap);
    va_end(ap);
}
