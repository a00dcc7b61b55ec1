/*
 * dstl/remote/remote.c — the remote layout and S3 clients from the configuration (remote.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "dstl/err.h"
#include "dstl/remote/remote.h"
#include "wire/wire.h"

static int bucket_ok(const char *b, size_t n)
{
    if (n < 3 || n > 63) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) return 0;
    }
    return b[0] != '-' && b[0] != '.' && b[n - 1] != '-' && b[n - 1] != '.';
}

int remote_parse_uri(const char *uri, const char *what, remote_loc *out)
{
    if (!uri || strncmp(uri, "s3://", 5) != 0)
        return err_fail(DSTL_ECONFIG, "%s: '%s' is not an s3://bucket/prefix URI", what, uri ? uri : "");
    const char *b = uri + 5, *slash = strchr(b, '/');
    size_t blen = slash ? (size_t)(slash - b) : strlen(b);
    if (!bucket_ok(b, blen))
        return err_fail(DSTL_ECONFIG, "%s: '%.*s' is not a valid bucket name (3-63 of a-z 0-9 . -)", what,
                        (int)blen, b);
    const char *p = slash ? slash + 1 : "";
    size_t plen = strlen(p);
    while (plen && p[plen - 1] == '/') plen--;
    if (plen >= sizeof out->prefix)
        return err_fail(DSTL_ECONFIG, "%s: prefix longer than %zu bytes", what, sizeof out->prefix - 1);
    memcpy(out->bucket, b, blen);
    out->bucket[blen] = '\0';
    memcpy(out->prefix, p, plen);
    out->prefix[plen] = '\0';
    return 0;
}

static unsigned name_hash(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return (h ^ (h >> 16)) & 0xff;
}

/* "[prefix/]hh/name", by hand: a restore makes one per piece it reads (~25 K at 1,024
 * writers), and snprintf was ~3 % of its CPU. */
int remote_key(const remote_loc *loc, const char *name, char *buf, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t lp = strlen(loc->prefix), ln = strlen(name), at = 0;
    if ((lp ? lp + 1 : 0) + 3 + ln >= cap) {
        if (cap) buf[0] = '\0';
        return -ENAMETOOLONG;
    }
    if (lp) {
        memcpy(buf, loc->prefix, lp);
        buf[lp] = '/';
        at = lp + 1;
    }
    unsigned h = name_hash(name);
    buf[at++] = hex[h >> 4];
    buf[at++] = hex[h & 15];
    buf[at++] = '/';
    memcpy(buf + at, name, ln + 1);
    return 0;
}

void remote_list_prefix(const remote_loc *loc, char *buf, size_t cap)
{
    if (*loc->prefix) snprintf(buf, cap, "%s/", loc->prefix);
    else if (cap) buf[0] = '\0';
}

#define LEASE_DIR "_leases"

void remote_lease_prefix(const remote_loc *loc, char *buf, size_t cap)
{
    if (*loc->prefix) snprintf(buf, cap, "%s/" LEASE_DIR "/", loc->prefix);
    else snprintf(buf, cap, LEASE_DIR "/");
}

int remote_lease_key(const remote_loc *loc, const char *run_id, uint64_t timeout_ms, char *buf, size_t cap)
{
    char pre[600];
    remote_lease_prefix(loc, pre, sizeof pre);
    int n = snprintf(buf, cap, "%s%s-t%llu.lease", pre, run_id, (unsigned long long)timeout_ms);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int remote_lease_parse(const remote_loc *loc, const char *key, char *run_id, size_t cap, uint64_t *timeout_ms)
{
    char pre[600];
    remote_lease_prefix(loc, pre, sizeof pre);
    size_t pl = strlen(pre);
    if (strncmp(key, pre, pl) != 0) return -EINVAL;
    const char *name = key + pl, *t = strstr(name, "-t");
    if (!t || t == name || (size_t)(t - name) >= cap) return -EINVAL;
    for (const char *q = name; q < t; q++)
        if (!((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f'))) return -EINVAL;
    uint64_t ms = 0;
    const char *p = t + 2;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 19; p++, digits++) ms = ms * 10 + (uint64_t)(*p - '0');
    if (!digits || strcmp(p, ".lease") != 0) return -EINVAL;
    memcpy(run_id, name, (size_t)(t - name));
    run_id[t - name] = '\0';
    *timeout_ms = ms;
    return 0;
}

/* The client options of the dstl.s3.* and dstl.upload.* keys. */
static s3_opts client_opts(const config_values *cv)
{
    s3_opts o = {
        .endpoint = *cv->s3_endpoint ? cv->s3_endpoint : NULL,
        .region = cv->s3_region,
        .path_style = cv->s3_path_style != 0,
        .access_key = *cv->s3_access_key ? cv->s3_access_key : NULL,
        .secret_key = *cv->s3_secret_key ? cv->s3_secret_key : NULL,
        .session_token = *cv->s3_session_token ? cv->s3_session_token : NULL,
        .tls_no_verify = !cv->s3_tls_verify,
        .ca_file = *cv->s3_ca_file ? cv->s3_ca_file : NULL,
        .connections = (int)cv->upload_connections,
        .attempt_timeout_ms = (uint32_t)cv->upload_timeout_ms,
        .max_attempts = (int)cv->upload_max_attempts,
        .next_attempt_delay_ms = (uint32_t)cv->upload_next_attempt_delay_ms,
        .payload = cv->s3_payload == CFG_PAYLOAD_SHA256 ? S3_PAYLOAD_SHA256 : S3_PAYLOAD_UNSIGNED_CRC32C,
        .verify_writes = cv->s3_verify_writes == CFG_VERIFY_READ_BACK ? S3_VERIFY_READ_BACK : S3_VERIFY_AUTO,
        .crc32c = wire_crc32c,
    };
    return o;
}

int remote_credentials_source(const config_values *cv, char *buf, size_t cap)
{
    s3_opts o = client_opts(cv);
    return s3_credentials_source(&o, buf, cap);
}

int remote_client_new(const config_values *cv, s3_client **out)
{
    s3_opts o = client_opts(cv);
    s3_result r;
    memset(&r, 0, sizeof r);
    int rc = s3_client_new(&o, out, &r);
    if (rc < 0)
        return err_fail(rc, "S3 client for %s: %s", *cv->s3_endpoint ? cv->s3_endpoint : "AWS",
                        *r.error ? r.error : dstl_strerror(rc));
    return 0;
}
