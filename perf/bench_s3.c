/*
 * perf/bench_s3.c — the s3/ client's own numbers against the server in S3_ENDPOINT
 * (S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION), printed as `name value unit` lines:
 *   s3.mpu_mb_s      256 MiB uploaded by s3_upload as 8 MiB parts over 4 connections (MiB/s,
 *                    median of 3 runs)
 *   s3.put4k_p50_us  1,000 sequential 4 KiB PUTs: median latency
 *   s3.put4k_p99_us  and 99th percentile
 *   s3.md5_mb_s      OpenSSL MD5 over 64 MiB in memory (MiB/s, median of 3): the cost of
 *                    checking an unsigned PUT/part by its ETag (S3_VERIFY_AUTO on RGW 16)
 *   s3.crc32c_mb_s   CRC32C (wire_crc32c, what DSTL gives the client) on the same bytes: the
 *                    UNSIGNED-PAYLOAD checksum
 *   s3.sha256_mb_s   SHA-256 on the same bytes: the signed-payload alternative
 * The three hash lines come first and need no server (`bench_s3 --hash` prints only them).
 * perf/s3.sh runs it beside rclone and curl and prints the ratios. Not a test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "s3/s3.h"
#include "tests/payload.h"
#include "wire/wire.h"

/* Bytes hashed per run by the hash lines: large enough to leave every cache. */
#define HASH_BYTES (64u << 20)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

typedef enum { H_MD5, H_CRC32C, H_SHA256 } hash_kind;

/* MiB/s of one hash over buf (median of 3 runs). */
static double hash_mb_s(hash_kind k, const uint8_t *buf, size_t len)
{
    double runs[3];
    volatile uint32_t sink = 0;
    for (int i = 0; i < 3; i++) {
        double t0 = now_s();
        if (k == H_CRC32C) {
            sink ^= wire_crc32c(0, buf, len);
        } else {
            uint8_t md[32];
            unsigned int n = sizeof md;
            EVP_Digest(buf, len, md, &n, k == H_MD5 ? EVP_md5() : EVP_sha256(), NULL);
            sink ^= md[0];
        }
        runs[i] = (double)len / (1 << 20) / (now_s() - t0);
    }
    (void)sink;
    qsort(runs, 3, sizeof runs[0], cmp_double);
    return runs[1];
}

static void hash_lines(void)
{
    uint8_t *buf = malloc(HASH_BYTES);
    if (!buf) return;
    payload_fill(PAYLOAD_RANDOM, 2, 0, buf, HASH_BYTES);
    printf("s3.md5_mb_s %.0f MiB/s\n", hash_mb_s(H_MD5, buf, HASH_BYTES));
    printf("s3.crc32c_mb_s %.0f MiB/s\n", hash_mb_s(H_CRC32C, buf, HASH_BYTES));
    printf("s3.sha256_mb_s %.0f MiB/s\n", hash_mb_s(H_SHA256, buf, HASH_BYTES));
    fflush(stdout);
    free(buf);
}

int main(int argc, char **argv)
{
    size_t mpu_bytes = 256u << 20;
    int puts_n = 1000;
    hash_lines();
    if (argc > 1 && strcmp(argv[1], "--hash") == 0) return 0;
    if (argc > 1) mpu_bytes = (size_t)atol(argv[1]) << 20;
    if (argc > 2) puts_n = atoi(argv[2]);
    s3_opts o = {
        .endpoint = env_or("S3_ENDPOINT", NULL),
        .region = env_or("S3_REGION", "us-east-1"),
        .path_style = true,
        .access_key = env_or("S3_ACCESS_KEY", NULL),
        .secret_key = env_or("S3_SECRET_KEY", NULL),
        .connections = 4,
        .attempt_timeout_ms = 10000, /* measure the transfers, not hedging */
        .transfer_timeout_ms = 60000,
        .crc32c = wire_crc32c,
    };
    if (!o.endpoint) {
        fprintf(stderr, "bench_s3: S3_ENDPOINT (and keys) must be set\n");
        return 2;
    }
    s3_client *c;
    s3_result r;
    if (s3_client_new(&o, &c, &r)) {
        fprintf(stderr, "bench_s3: %s\n", r.error);
        return 1;
    }
    char bucket[64];
    snprintf(bucket, sizeof bucket, "dstl-bench-s3-%d", (int)getpid());
    if (s3_create_bucket_sync(c, bucket, &r)) {
        fprintf(stderr, "bench_s3: %s\n", r.error);
        return 1;
    }
    uint8_t *data = malloc(mpu_bytes);
    payload_fill(PAYLOAD_RANDOM, 1, 0, data, mpu_bytes);       /* incompressible */

    s3_upload_opts uo = {.part_size = 8u << 20, .multipart_threshold = 16u << 20};
    double runs[3];
    for (int i = 0; i < 3; i++) {
        char key[32];
        snprintf(key, sizeof key, "mpu-%d", i);
        double t0 = now_s();
        if (s3_upload_sync(c, bucket, key, data, mpu_bytes, &uo, &r)) {
            fprintf(stderr, "bench_s3: %s\n", r.error);
            return 1;
        }
        runs[i] = (double)mpu_bytes / (1 << 20) / (now_s() - t0);
        s3_delete_object_sync(c, bucket, key, &r);
    }
    qsort(runs, 3, sizeof runs[0], cmp_double);
    printf("s3.mpu_mb_s %.1f MiB/s\n", runs[1]);

    double *lat = malloc((size_t)puts_n * sizeof *lat);
    char **keys = malloc((size_t)puts_n * sizeof *keys);
    for (int i = 0; i < puts_n; i++) {
        if (asprintf(&keys[i], "p4k-%05d", i) < 0) return 1;
        double t0 = now_s();
        if (s3_put_object_sync(c, bucket, keys[i], data + (size_t)i * 4096 % (mpu_bytes - 4096),
                               4096, false, &r)) {
            fprintf(stderr, "bench_s3: %s\n", r.error);
            return 1;
        }
        lat[i] = (now_s() - t0) * 1e6;
    }
    qsort(lat, (size_t)puts_n, sizeof *lat, cmp_double);
    printf("s3.put4k_p50_us %.0f us\n", lat[puts_n / 2]);
    printf("s3.put4k_p99_us %.0f us\n", lat[(puts_n * 99) / 100]);
    fflush(stdout);

    s3_delete_objects_sync(c, bucket, (const char *const *)keys, (size_t)puts_n, &r);
    s3_delete_bucket_sync(c, bucket, &r);
    for (int i = 0; i < puts_n; i++) free(keys[i]);
    free(keys);
    free(lat);
    free(data);
    s3_client_free(c);
    return 0;
}
