/*
 * Configuration: the key table, value parsing, files with file:line errors, the
 * environment, precedence, and agreement of configs/ and the README with the table.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstl.h"
#include "dstl/config.h"
#include "tests/helpers.h"

static dstl_config *new_config(void)
{
    dstl_config *c = NULL;
    cr_assert_eq(dstl_config_new(&c), 0, "%s", dstl_last_error());
    return c;
}

Test(dstl_config, defaults_match_design)
{
    dstl_config *c = new_config();
    cr_expect_str_eq(dstl_config_get(c, "dstl.local.dir"), "./dstl-data");
    cr_expect_str_eq(dstl_config_get(c, "dstl.batch.persist-delay"), "10ms");
    cr_expect_str_eq(dstl_config_get(c, "dstl.upload.max-in-flight"), "100mb");
    cr_expect_str_eq(dstl_config_get(c, "dstl.durability"), "local");
    cr_expect_null(dstl_config_get(c, "dstl.no-such-key"));
    config_values v;
    cr_assert_eq(config_resolve(c, &v), 0);
    cr_expect_eq(v.persist_delay_us, 10000);
    cr_expect_eq(v.persist_size_threshold_bytes, 10ull << 20);
    cr_expect_eq(v.preemptive_persist_threshold_bytes, 5ull << 20);
    cr_expect_eq(v.max_in_flight_bytes, 100ull << 20);
    cr_expect_eq(v.upload_timeout_ms, 1000);
    cr_expect_eq(v.upload_max_attempts, 3);
    cr_expect_eq(v.upload_next_attempt_delay_ms, 500);
    cr_expect_eq(v.upload_connections, 8);
    cr_expect_eq(v.cache_idle_timeout_ms, 600000);
    cr_expect_eq(v.cache_max_size_bytes, 1ull << 30);
    cr_expect_eq(v.durability, CFG_DURABILITY_LOCAL);
    cr_expect_eq(v.io_engine, CFG_IO_URING);
    cr_expect_eq(v.io_direct, CFG_BOOL_AUTO);   /* measured: perf/README.md, dstl.io.direct */
    cr_expect_eq(v.s3_tls_verify, 1);
    dstl_config_free(c);
}

Test(dstl_config, durability_follows_remote_unless_set)
{
    dstl_config *c = new_config();
    cr_assert_eq(dstl_config_set(c, "dstl.remote.uri", "s3://b/p"), 0);
    cr_expect_str_eq(dstl_config_get(c, "dstl.durability"), "remote");
    cr_assert_eq(dstl_config_set(c, "dstl.durability", "local"), 0);
    cr_expect_str_eq(dstl_config_get(c, "dstl.durability"), "local");
    dstl_config_free(c);
}

Test(dstl_config, units)
{
    static const struct { const char *key, *value; uint64_t want; size_t off; } cases[] = {
        {"dstl.batch.persist-delay", "0", 0, offsetof(config_values, persist_delay_us)},
        {"dstl.batch.persist-delay", "250us", 250, offsetof(config_values, persist_delay_us)},
        {"dstl.batch.persist-delay", "15", 15000, offsetof(config_values, persist_delay_us)},
        {"dstl.batch.persist-delay", "2s", 2000000, offsetof(config_values, persist_delay_us)},
        {"dstl.upload.timeout", "1min", 60000, offsetof(config_values, upload_timeout_ms)},
        {"dstl.upload.timeout", "1h", 3600000, offsetof(config_values, upload_timeout_ms)},
        {"dstl.upload.max-in-flight", "512kb", 512 << 10, offsetof(config_values, max_in_flight_bytes)},
        {"dstl.upload.max-in-flight", "2GB", 2ull << 30, offsetof(config_values, max_in_flight_bytes)},
        {"dstl.upload.max-in-flight", "1048576", 1 << 20, offsetof(config_values, max_in_flight_bytes)},
        {"dstl.batch.persist-size-threshold", "3 mb", 3 << 20, offsetof(config_values, persist_size_threshold_bytes)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dstl_config *c = new_config();
        cr_assert_eq(dstl_config_set(c, cases[i].key, cases[i].value), 0, "%s=%s: %s", cases[i].key,
                     cases[i].value, dstl_last_error());
        config_values v;
        cr_assert_eq(config_resolve(c, &v), 0);
        uint64_t got = *(uint64_t *)((char *)&v + cases[i].off);
        cr_expect_eq(got, cases[i].want, "%s=%s gave %lu", cases[i].key, cases[i].value, (unsigned long)got);
        dstl_config_free(c);
    }
}

Test(dstl_config, bad_values_name_the_key)
{
    static const char *bad[][2] = {
        {"dstl.batch.persist-delay", "10 parsecs"}, {"dstl.batch.persist-delay", "-5ms"},
        {"dstl.batch.persist-delay", ""}, {"dstl.batch.persist-delay", "99999999999999999999999"},
        {"dstl.upload.max-in-flight", "lots"}, {"dstl.upload.max-in-flight", "1kb"},
        {"dstl.upload.part-size", "1mb"}, {"dstl.upload.max-attempts", "0"},
        {"dstl.upload.max-attempts", "3x"}, {"dstl.s3.path-style", "maybe"},
        {"dstl.io.engine", "epoll"}, {"dstl.compression", "snappy"}, {"dstl.durability", "cloud"},
        {"dstl.batch.persist-size-threshold", "99999999999999999999tb"}, {"dstl.io.direct", "sometimes"},
        {"dstl.io.direct", ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dstl_config *c = new_config();
        cr_expect_eq(dstl_config_set(c, bad[i][0], bad[i][1]), DSTL_ECONFIG, "%s=%s accepted", bad[i][0], bad[i][1]);
        cr_expect(strstr(dstl_last_error(), bad[i][0]) != NULL, "detail '%s' lacks the key", dstl_last_error());
        cr_expect(strstr(dstl_last_error(), "expected") != NULL, "detail '%s' lacks what is expected",
                  dstl_last_error());
        dstl_config_free(c);
    }
}

Test(dstl_config, io_direct_takes_a_bool_or_auto)
{
    static const struct { const char *value; int want; } ok[] = {
        {"auto", CFG_BOOL_AUTO}, {"true", 1}, {"false", 0}, {"on", 1}, {"no", 0}, {"1", 1},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        dstl_config *c = new_config();
        cr_assert_eq(dstl_config_set(c, "dstl.io.direct", ok[i].value), 0, "%s: %s", ok[i].value, dstl_last_error());
        config_values v;
        cr_assert_eq(config_resolve(c, &v), 0);
        cr_expect_eq(v.io_direct, ok[i].want, "dstl.io.direct=%s", ok[i].value);
        dstl_config_free(c);
    }
    dstl_config *c = new_config();
    cr_expect_eq(dstl_config_set(c, "dstl.io.direct", "Auto"), DSTL_ECONFIG);
    cr_expect(strstr(dstl_last_error(), "true, false or auto") != NULL, "%s", dstl_last_error());
    /* auto is for this key only */
    cr_expect_eq(dstl_config_set(c, "dstl.s3.path-style", "auto"), DSTL_ECONFIG);
    dstl_config_free(c);
}

Test(dstl_config, unknown_key_rejected)
{
    dstl_config *c = new_config();
    cr_expect_eq(dstl_config_set(c, "dstl.batch.persist-dealy", "5ms"), DSTL_ECONFIG);
    cr_expect(strstr(dstl_last_error(), "dstl.batch.persist-dealy") != NULL, "%s", dstl_last_error());
    cr_expect_eq(dstl_config_set(c, NULL, "x"), -EINVAL);
    dstl_config_free(c);
}

Test(dstl_config, secrets_never_echoed)
{
    dstl_config *c = new_config();
    cr_expect_eq(dstl_config_set(c, "dstl.s3.secret-key", "line1\nline2-TOPSECRET"), DSTL_ECONFIG);
    cr_expect(strstr(dstl_last_error(), "TOPSECRET") == NULL, "%s", dstl_last_error());
    dstl_config_free(c);
}

Test(dstl_config, malformed_input_never_repeats_a_secret)
{
    dstl_config *c = new_config();
    /* a key that is no key may be a value in the wrong place: not repeated */
    static const char *const not_keys[] = {"dstl.s3.secret-key=TOPSECRET", "dstl.s3.secret-key TOPSECRET",
                                           "TOPSECRET/+abc", "TOPSECRET"};
    for (size_t i = 0; i < sizeof not_keys / sizeof not_keys[0]; i++) {
        cr_expect_eq(dstl_config_set(c, not_keys[i], "x"), DSTL_ECONFIG);
        cr_expect(strstr(dstl_last_error(), "TOPSECRET") == NULL, "'%s': %s", not_keys[i], dstl_last_error());
        cr_expect(strstr(dstl_last_error(), "not a configuration key") != NULL, "%s", dstl_last_error());
    }
    /* a key-like unknown key is named; its value never is */
    cr_expect_eq(dstl_config_set(c, "dstl.s3.secret_key", "TOPSECRET"), DSTL_ECONFIG);
    cr_expect(strstr(dstl_last_error(), "unknown configuration key 'dstl.s3.secret_key'") != NULL, "%s",
              dstl_last_error());
    cr_expect(strstr(dstl_last_error(), "TOPSECRET") == NULL, "%s", dstl_last_error());
    /* every secret key's bad value is hidden */
    for (size_t i = 0; i < config_nkeys(); i++) {
        if (!config_key(i)->secret) continue;
        cr_expect_eq(dstl_config_set(c, config_key(i)->key, "a\nTOPSECRET"), DSTL_ECONFIG, "%s", config_key(i)->key);
        cr_expect(strstr(dstl_last_error(), config_key(i)->key) != NULL, "%s", dstl_last_error());
        cr_expect(strstr(dstl_last_error(), "TOPSECRET") == NULL, "%s", dstl_last_error());
    }
    dstl_config_free(c);
    /* the same from the environment, named by the variable */
    static const char *const envs[] = {"DSTL_S3_ACCESS_KEY", "DSTL_S3_SECRET_KEY", "DSTL_S3_SESSION_TOKEN"};
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        setenv(envs[i], "a\nTOPSECRET", 1);
        dstl_config *bad = NULL;
        cr_expect_eq(dstl_config_new(&bad), DSTL_ECONFIG);
        cr_expect(strstr(dstl_last_error(), envs[i]) != NULL, "%s", dstl_last_error());
        cr_expect(strstr(dstl_last_error(), "TOPSECRET") == NULL, "%s", dstl_last_error());
        unsetenv(envs[i]);
    }
}

static char *write_conf(const char *dir, const char *text)
{
    char *path = malloc(4200);
    snprintf(path, 4200, "%s/test.conf", dir);
    cr_assert_eq(t_write_file(path, text, strlen(text)), 0);
    return path;
}

Test(dstl_config, file_loads_with_comments)
{
    char *dir = t_mkdtemp("cfg");
    char *path = write_conf(dir, "# a comment\n\n  dstl.batch.persist-delay : 20ms   # trailing\n"
                                 "dstl.local.dir: /var/lib/dstl#1\n");
    dstl_config *c = new_config();
    cr_assert_eq(dstl_config_load(c, path), 0, "%s", dstl_last_error());
    cr_expect_str_eq(dstl_config_get(c, "dstl.batch.persist-delay"), "20ms");
    cr_expect_str_eq(dstl_config_get(c, "dstl.local.dir"), "/var/lib/dstl#1");
    dstl_config_free(c);
    t_rm_rf(dir);
    free(dir);
    free(path);
}

Test(dstl_config, file_errors_name_file_line_and_key)
{
    static const char *cases[][2] = {
        {"dstl.local.dir: /x\n\ndstl.batch.persist-delay: soon\n", ":3: key 'dstl.batch.persist-delay'"},
        {"# c\ndstl.no.such: 1\n", ":2: unknown configuration key 'dstl.no.such'"},
        {"dstl.local.dir /x\n", ":1: expected 'key: value'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *dir = t_mkdtemp("cfg");
        char *path = write_conf(dir, cases[i][0]);
        dstl_config *c = new_config();
        cr_expect_eq(dstl_config_load(c, path), DSTL_ECONFIG);
        cr_expect(strstr(dstl_last_error(), path) != NULL, "'%s' lacks the path", dstl_last_error());
        cr_expect(strstr(dstl_last_error(), cases[i][1]) != NULL, "'%s' lacks '%s'", dstl_last_error(), cases[i][1]);
        /* a failed load leaves the config unchanged */
        cr_expect_str_eq(dstl_config_get(c, "dstl.local.dir"), "./dstl-data");
        dstl_config_free(c);
        t_rm_rf(dir);
        free(dir);
        free(path);
    }
    dstl_config *c = new_config();
    cr_expect_eq(dstl_config_load(c, "/nonexistent/dstl.conf"), -ENOENT);
    cr_expect(strstr(dstl_last_error(), "/nonexistent/dstl.conf") != NULL);
    dstl_config_free(c);
}

Test(dstl_config, file_errors_never_repeat_a_line)
{
    /* a line without ':' may be "key value" or "key=value" with a secret: named by file:line
     * and at most the key it starts with */
    static const char *cases[][2] = {
        {"dstl.s3.secret-key TOPSECRET\n", ":1: expected 'key: value': key 'dstl.s3.secret-key' is not followed by ':'"},
        {"dstl.s3.secret-key=TOPSECRET\n", ":1: expected 'key: value': key 'dstl.s3.secret-key' is not followed by ':'"},
        {"dstl.local.dir: /x\nTOPSECRET\n", ":2: expected 'key: value', found no ':'"},
        {"dstl.s3.secret-keyTOPSECRET\n", ":1: expected 'key: value', found no ':'"},
        {"dstl.s3.secret-key=TOPSECRET:x\n", ":1: not a configuration key"},
        {"aws_secret_access_key = TOPSECRET:x\n", ":1: not a configuration key"},
        {"dstl.s3.secret_key: TOPSECRET\n", ":1: unknown configuration key 'dstl.s3.secret_key'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *dir = t_mkdtemp("cfg");
        char *path = write_conf(dir, cases[i][0]);
        dstl_config *c = new_config();
        cr_expect_eq(dstl_config_load(c, path), DSTL_ECONFIG, "'%s' loaded", cases[i][0]);
        cr_expect(strstr(dstl_last_error(), "TOPSECRET") == NULL, "'%s': %s", cases[i][0], dstl_last_error());
        cr_expect(strstr(dstl_last_error(), path) != NULL, "'%s' lacks the path", dstl_last_error());
        cr_expect(strstr(dstl_last_error(), cases[i][1]) != NULL, "'%s' lacks '%s'", dstl_last_error(), cases[i][1]);
        dstl_config_free(c);
        t_rm_rf(dir);
        free(dir);
        free(path);
    }
}

Test(dstl_config, precedence_default_file_env_set)
{
    char *dir = t_mkdtemp("cfg");
    char *path = write_conf(dir, "dstl.batch.persist-delay: 20ms\ndstl.upload.connections: 4\n");
    setenv("DSTL_BATCH_PERSIST_DELAY", "30ms", 1);
    dstl_config *c = new_config();
    cr_assert_eq(dstl_config_load(c, path), 0, "%s", dstl_last_error());
    cr_expect_str_eq(dstl_config_get(c, "dstl.batch.persist-delay"), "30ms");   /* env beats file */
    cr_expect_str_eq(dstl_config_get(c, "dstl.upload.connections"), "4");        /* file beats default */
    cr_assert_eq(dstl_config_set(c, "dstl.batch.persist-delay", "40ms"), 0);
    cr_expect_str_eq(dstl_config_get(c, "dstl.batch.persist-delay"), "40ms");   /* set beats env */
    dstl_config_free(c);
    setenv("DSTL_BATCH_PERSIST_DELAY", "fortnight", 1);
    dstl_config *bad = NULL;
    cr_expect_eq(dstl_config_new(&bad), DSTL_ECONFIG);
    cr_expect_null(bad);
    cr_expect(strstr(dstl_last_error(), "DSTL_BATCH_PERSIST_DELAY") != NULL, "%s", dstl_last_error());
    unsetenv("DSTL_BATCH_PERSIST_DELAY");
    t_rm_rf(dir);
    free(dir);
    free(path);
}

/* The repository root, from tests/data. */
static void repo_path(char *buf, size_t cap, const char *rel)
{
    snprintf(buf, cap, "%s/../../%s", t_data_dir(), rel);
}

/* Every table key appears in text as "key:" (configs) or "`key`" (README), and every
 * "dstl.xxx" token in text is a table key. */
static void check_keys_agree(const char *rel, int readme)
{
    char path[4096];
    repo_path(path, sizeof path, rel);
    size_t len = 0;
    char *text = t_read_file(path, &len);
    cr_assert_not_null(text, "cannot read %s", path);
    text = realloc(text, len + 1);
    text[len] = '\0';
    for (size_t i = 0; i < config_nkeys(); i++) {
        char needle[128];
        snprintf(needle, sizeof needle, readme ? "`%s`" : "\n%s:", config_key(i)->key);
        cr_expect(strstr(text, needle) != NULL, "%s does not list %s", rel, config_key(i)->key);
    }
    for (char *p = strstr(text, "dstl."); p; p = strstr(p + 1, "dstl.")) {
        if (p > text && (p[-1] == '/' || p[-1] == '_' || p[-1] == '.' || isalnum((unsigned char)p[-1]))) continue;
        size_t n = 0;
        while (p[n] && (isalnum((unsigned char)p[n]) || p[n] == '.' || p[n] == '-')) n++;
        while (n && (p[n - 1] == '.' || p[n - 1] == '-')) n--;
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        if (!strcmp(key, "dstl.h") || !strcmp(key, "dstl.pc") || !strcmp(key, "dstl.proto")) continue;
        int known = 0;
        for (size_t i = 0; i < config_nkeys(); i++) known |= !strcmp(config_key(i)->key, key);
        cr_expect(known, "%s mentions '%s', which is not a configuration key", rel, key);
    }
    free(text);
}

Test(dstl_config, configs_and_readme_agree_with_the_table)
{
    check_keys_agree("configs/local.conf", 0);
    check_keys_agree("configs/s3.conf", 0);
    check_keys_agree("README.md", 1);
    /* and both files load */
    char path[4096];
    repo_path(path, sizeof path, "configs/local.conf");
    dstl_config *c = new_config();
    cr_expect_eq(dstl_config_load(c, path), 0, "%s", dstl_last_error());
    repo_path(path, sizeof path, "configs/s3.conf");
    cr_expect_eq(dstl_config_load(c, path), 0, "%s", dstl_last_error());
    dstl_config_free(c);
}
