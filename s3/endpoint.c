/*
 * s3/endpoint.c — where requests go: the endpoint split into scheme and authority (the AWS
 * one of a region when none is given), and each request's target — path, host and canonical
 * query, the three things SigV4 signs — and URL.
 *
 * Addressing: path-style (http://host/bucket/key) for RGW and MinIO, virtual-hosted
 * (http://bucket.host/key) otherwise. Keys are encoded as SigV4 wants (RFC 3986, '/' kept);
 * the query is sent exactly as it is signed (sorted, encoded, a bare name as "name=").
 * Threads: pure, thread-safe.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3/engine.h"

int s3_endpoint_parse(const char *e, char scheme[S3_SCHEME_CAP], char authority[S3_AUTHORITY_CAP],
                      s3_result *res)
{
    const char *sep = strstr(e, "://");
    if (!sep || (size_t)(sep - e) >= S3_SCHEME_CAP) {
        s3_result_fail(res, -EINVAL, "S3 endpoint '%s': expected http://host[:port] or https://host",
                       e);
        return -EINVAL;
    }
    memcpy(scheme, e, (size_t)(sep - e));
    scheme[sep - e] = '\0';
    if (strcmp(scheme, "http") && strcmp(scheme, "https")) {
        s3_result_fail(res, -EINVAL, "S3 endpoint '%s': scheme must be http or https", e);
        return -EINVAL;
    }
    const char *h = sep + 3;
    size_t hl = strcspn(h, "/?#");
    if (hl == 0 || hl >= S3_AUTHORITY_CAP || strchr(h + hl, '?') || strchr(h, '@')) {
        s3_result_fail(res, -EINVAL, "S3 endpoint '%s': bad host", e);
        return -EINVAL;
    }
    memcpy(authority, h, hl);
    authority[hl] = '\0';
    return 0;
}

void s3_endpoint_default(const char *region, char *out, size_t cap)
{
    if (strcmp(region, "us-east-1") == 0) snprintf(out, cap, "https://s3.amazonaws.com");
    else snprintf(out, cap, "https://s3.%s.amazonaws.com", region);
}

int s3_target_build(const char *authority, bool path_style, const char *bucket,
                    const char *key, const s3_kv *query, size_t n_query, char **path,
                    char **host, char **query_out)
{
    if (!key) key = "";
    size_t kcap = 3 * strlen(key) + 1, bl = strlen(bucket);
    char *ekey = malloc(kcap);
    if (!ekey) return -ENOMEM;
    if (s3_uri_encode(key, true, ekey, kcap) < 0) {
        free(ekey);
        return -EINVAL;
    }
    size_t pcap = bl + strlen(ekey) + 4;
    *path = malloc(pcap);
    *host = malloc(strlen(authority) + bl + 2);
    if (!*path || !*host) {
        free(ekey);
        return -ENOMEM;
    }
    if (path_style) {
        snprintf(*path, pcap, "/%s%s%s", bucket, key[0] ? "/" : "", ekey);
        strcpy(*host, authority);
    } else {
        snprintf(*path, pcap, "/%s", ekey);
        sprintf(*host, "%s.%s", bucket, authority);
    }
    free(ekey);
    /* the query, canonical: sorted and encoded; also what is sent */
    size_t qcap = 1;
    for (size_t i = 0; i < n_query; i++)
        qcap += 3 * (strlen(query[i].name) + strlen(query[i].value ? query[i].value : "")) + 2;
    *query_out = malloc(qcap);
    if (!*query_out) return -ENOMEM;
    int rc = s3_sigv4_canonical_query(query, n_query, *query_out, qcap);
    return rc < 0 ? rc : 0;
}

char *s3_target_url(const char *scheme, const char *host, const char *path, const char *query)
{
    size_t ul = strlen(scheme) + strlen(host) + strlen(path) + strlen(query) + 8;
    char *url = malloc(ul);
    if (url) snprintf(url, ul, "%s://%s%s%s%s", scheme, host, path, query[0] ? "?" : "", query);
    return url;
}
