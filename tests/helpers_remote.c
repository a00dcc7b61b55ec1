/*
 * tests/helpers_remote.c — the S3 fixture. See helpers_remote.h.
 */
#include "tests/helpers_remote.h"

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/helpers.h"

void t_remote_init(t_remote *f, const char *tag)
{
    static unsigned n;                  /* fixtures made by this process (a test's) */
    memset(f, 0, sizeof *f);
    char why[512] = "";
    if (t_s3_setup(&f->env, &f->s3, f->bucket, sizeof f->bucket, tag, why, sizeof why))
        cr_assert_fail("S3 fixture '%s': %s", tag, why);
    /* "p<pid in base 36>-<n>": unique to the test (its process) and short, since the prefix is in
     * the details of errors, which the library cuts at a few hundred bytes (the lease-fencing
     * detail test_remote_lease checks ends near that limit). */
    char pid36[16];
    size_t k = sizeof pid36;
    pid36[--k] = '\0';
    for (unsigned long v = (unsigned long)getpid(); v || k == sizeof pid36 - 1; v /= 36)
        pid36[--k] = "0123456789abcdefghijklmnopqrstuvwxyz"[v % 36];
    snprintf(f->prefix, sizeof f->prefix, "p%s-%u", pid36 + k, n++);
    snprintf(f->prefix_dir, sizeof f->prefix_dir, "%s/", f->prefix);
    snprintf(f->uri, sizeof f->uri, "s3://%s/%s", f->bucket, f->prefix);
    f->dir = t_mkdtemp(tag);
    cr_assert_not_null(f->dir, "S3 fixture '%s': no scratch dir", tag);
}

void t_remote_fini(t_remote *f)
{
    char why[512] = "";
    if (f->s3 && f->bucket[0] && t_s3_drop_bucket(f->s3, f->bucket, why, sizeof why))
        fprintf(stderr, "S3 fixture teardown: bucket %s: %s\n", f->bucket, why);
    s3_client_free(f->s3);
    f->s3 = NULL;
    f->bucket[0] = '\0';
    if (f->dir) t_rm_rf(f->dir);
    free(f->dir);
    f->dir = NULL;
}

/* The settings of a storage of the fixture except dstl.local.dir; from FIRST_S3 on, the
 * dstl.s3.* keys. */
typedef struct {
    const char *key, *value;
} setting;
#define N_SETTINGS 7
#define FIRST_S3   2

static void settings(const t_remote *f, setting out[N_SETTINGS])
{
    const setting s[N_SETTINGS] = {
        {"dstl.remote.uri", f->uri},
        {"dstl.durability", "remote"},
        {"dstl.s3.endpoint", f->env.endpoint},
        {"dstl.s3.region", f->env.region},
        {"dstl.s3.access-key", f->env.access_key},
        {"dstl.s3.secret-key", f->env.secret_key},
        {"dstl.s3.path-style", "true"},
    };
    memcpy(out, s, sizeof s);
}

static void set(dstl_config *c, const char *k, const char *v)
{
    cr_assert_eq(dstl_config_set(c, k, v), 0, "config %s: %s", k, dstl_last_error());
}

void t_remote_set_s3(const t_remote *f, dstl_config *c)
{
    setting kv[N_SETTINGS];
    settings(f, kv);
    for (size_t i = FIRST_S3; i < N_SETTINGS; i++) set(c, kv[i].key, kv[i].value);
}

void t_remote_set(const t_remote *f, dstl_config *c)
{
    setting kv[N_SETTINGS];
    settings(f, kv);
    for (size_t i = 0; i < N_SETTINGS; i++) set(c, kv[i].key, kv[i].value);
}

static dstl_config *config_va(const t_remote *f, const char *local_dir, va_list ap)
{
    dstl_config *c = NULL;
    cr_assert_eq(dstl_config_new(&c), 0, "%s", dstl_last_error());
    set(c, "dstl.local.dir", local_dir);
    t_remote_set(f, c);
    const char *k;
    while ((k = va_arg(ap, const char *))) set(c, k, va_arg(ap, const char *));
    return c;
}

dstl_config *t_remote_config(const t_remote *f, const char *local_dir, ...)
{
    va_list ap;
    va_start(ap, local_dir);
    dstl_config *c = config_va(f, local_dir, ap);
    va_end(ap);
    return c;
}

dstl_storage *t_remote_open(const t_remote *f, const char *local_dir, ...)
{
    va_list ap;
    va_start(ap, local_dir);
    dstl_config *c = config_va(f, local_dir, ap);
    va_end(ap);
    dstl_storage *s = NULL;
    cr_assert_eq(dstl_storage_open(c, &s), 0, "open on %s: %s", local_dir, dstl_last_error());
    dstl_config_free(c);
    return s;
}

static void conf_line(char *text, size_t cap, size_t *off, const char *key, const char *value)
{
    int w = snprintf(text + *off, cap - *off, "%s: %s\n", key, value);
    cr_assert(w > 0 && (size_t)w < cap - *off, "config text too long");
    *off += (size_t)w;
}

void t_remote_write_conf(const t_remote *f, const char *path, ...)
{
    setting kv[N_SETTINGS];
    settings(f, kv);
    char text[4096];
    size_t off = 0;
    for (size_t i = 0; i < N_SETTINGS; i++) conf_line(text, sizeof text, &off, kv[i].key, kv[i].value);
    va_list ap;
    va_start(ap, path);
    const char *k;
    while ((k = va_arg(ap, const char *))) conf_line(text, sizeof text, &off, k, va_arg(ap, const char *));
    va_end(ap);
    cr_assert_eq(t_write_file(path, text, off), 0, "writing %s", path);
}

void t_remote_count(const t_remote *f, size_t *objects, size_t *uploads)
{
    cr_assert_eq(t_s3_count(f->s3, f->bucket, f->prefix_dir, objects, uploads), 0, "listing s3://%s/%s",
                 f->bucket, f->prefix_dir);
}

size_t t_remote_leases(const t_remote *f)
{
    size_t n = 0;
    cr_assert_eq(t_s3_count_leases(f->s3, f->bucket, f->prefix_dir, &n), 0, "listing s3://%s/%s", f->bucket,
                 f->prefix_dir);
    return n;
}
