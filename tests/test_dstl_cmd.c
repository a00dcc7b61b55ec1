/*
 * The dstl command on a local dir: cat renders canonical state changes as JSON lines (with a
 * key-group filter), ls lists segments with their writers, verify checks every byte and
 * names a corrupt file, gc keeps what live handles need and refuses to run without a live
 * set, --dry-run changes nothing, demos clean up only after themselves, and errors neither
 * garble their detail nor repeat a secret.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>

#include "dstl.h"
#include "dstl/err.h"
#include "tests/helpers.h"
#include "tests/helpers_cmd.h"
#include "tests/helpers_dstl.h"
#include "wire/wire.h"

static char *dir;
static char data[4200], hfile[4200];

static const char *bin(void) { return t_cmd_bin(); }

#define run(status, ...) t_cmd_run(dir, status, __VA_ARGS__)
#define count t_cmd_count

static void setup(void)
{
    dir = t_mkdtemp("cmd");
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(hfile, sizeof hfile, "%s/w.handle", dir);
    dstl_storage *s = t_storage_open(data, NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "operator-7", 0, 7, &w), 0);
    uint8_t buf[256];
    wire_state_change meta = {.op = WIRE_SC_METADATA, .state_name = "counts", .state_name_len = 6};
    int n = wire_sc_encode(&meta, buf, sizeof buf);
    cr_assert(n > 0);
    cr_assert_eq(dstl_append_meta(w, buf, (size_t)n), 0);
    for (int i = 0; i < 40; i++) {
        char key[16], val[16];
        snprintf(key, sizeof key, "k%d", i);
        snprintf(val, sizeof val, "v%d", i);
        wire_state_change sc = {.op = WIRE_SC_PUT, .state_id = 1, .state_name = "counts", .state_name_len = 6,
                                .key = key, .key_len = strlen(key), .ns = "w", .ns_len = 1,
                                .value = val, .value_len = strlen(val)};
        n = wire_sc_encode(&sc, buf, sizeof buf);
        cr_assert(n > 0);
        cr_assert_eq(dstl_append(w, (uint32_t)(i % 8), buf, (size_t)n), 0);
    }
    dstl_handle *h = t_persist(w, 0, 3);
    void *hb;
    size_t hl;
    cr_assert_eq(dstl_handle_serialize(h, &hb, &hl), 0);
    cr_assert_eq(t_write_file(hfile, hb, hl), 0);
    free(hb);
    dstl_handle_free(h);
    dstl_writer_close(w);
    cr_assert_eq(dstl_storage_close(s), 0);
}

static void teardown(void)
{
    t_rm_rf(dir);
    free(dir);
}

TestSuite(dstl_cmd, .init = setup, .fini = teardown, .timeout = 60);

Test(dstl_cmd, cat_prints_state_changes_as_json)
{
    int st;
    char *out = run(&st, "'%s' cat '%s' --dir '%s'", bin(), hfile, data);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect_eq(count(out, "\n"), 41, "%s", out);
    cr_expect(strstr(out, "{\"seq\":0,\"meta\":true,\"op\":\"METADATA\"") != NULL, "%s", out);
    cr_expect(strstr(out, "{\"seq\":1,\"key_group\":0,\"op\":\"PUT\",\"state_id\":1,\"state\":\"counts\",\"key\":\"k0\","
                          "\"namespace\":\"w\",\"value\":\"v0\"}") != NULL, "%s", out);
    free(out);
    out = run(&st, "'%s' cat '%s' --dir '%s' --key-groups 2-3", bin(), hfile, data);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect_eq(count(out, "\"op\":\"PUT\""), 10, "%s", out);   /* i % 8 in {2,3} for 40 records */
    cr_expect_eq(count(out, "\"meta\":true"), 1);
    cr_expect_eq(count(out, "\"key_group\":5"), 0);
    free(out);
}

Test(dstl_cmd, ls_and_verify_report_segments)
{
    int st;
    char *out = run(&st, "'%s' ls '%s'", bin(), data);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "operator-7") != NULL, "%s", out);
    cr_expect(strstr(out, "seqs [0, 41)") != NULL, "%s", out);
    free(out);
    out = run(&st, "'%s' verify '%s'", bin(), data);
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "41 records checked") != NULL, "%s", out);
    free(out);
    /* flip one byte in the middle of the segment: verify names the file and fails */
    out = run(&st, "f=$(ls '%s'/*.seg | head -1); printf '\\x5a' | dd of=\"$f\" bs=1 seek=100 conv=notrunc 2>/dev/null;"
                   " '%s' verify '%s'", data, bin(), data);
    cr_expect_eq(st, 1, "%s", out);
    cr_expect(strstr(out, "CORRUPT") != NULL && strstr(out, ".seg") != NULL, "%s", out);
    free(out);
    out = run(&st, "'%s' cat '%s' --dir '%s'", bin(), hfile, data);
    cr_expect_neq(st, 0, "cat of a corrupt segment succeeded: %s", out);
    cr_expect(strstr(out, "offset") != NULL, "the error names no offset: %s", out);
    free(out);
}

/* A file whose segment is not the one its name says — what a crash can leave of a deleted
 * segment's file recycled for a reservation — fails verify by name. */
Test(dstl_cmd, verify_fails_a_segment_under_another_segments_name)
{
    int st;
    char *out = run(&st, "f=$(ls '%s'/*.seg | head -1); cp \"$f\" \"${f%%-*}-000000000777.seg\"; '%s' verify '%s'",
                    data, bin(), data);
    cr_expect_eq(st, 1, "%s", out);
    cr_expect(strstr(out, "-000000000777.seg") && strstr(out, "MISNAMED") && strstr(out, "holds segment"), "%s", out);
    free(out);
}

Test(dstl_cmd, bad_config_names_the_key)
{
    int st;
    char *out = run(&st, "'%s' --set dstl.batch.persist-delay=soon demo --duration 1", bin());
    cr_expect_neq(st, 0);
    cr_expect(strstr(out, "dstl.batch.persist-delay") != NULL, "%s", out);
    free(out);
}

/* ---- helpers for gc and demo tests ---- */

/* Sets the mtime of every entry of d (not recursing) to ago_s seconds in the past. */
static void age_entries(const char *d, int ago_s)
{
    DIR *dd = opendir(d);
    cr_assert_not_null(dd, "%s: %s", d, strerror(errno));
    struct dirent *e;
    struct timeval tv[2];
    gettimeofday(&tv[0], NULL);
    tv[0].tv_sec -= ago_s;
    tv[1] = tv[0];
    while ((e = readdir(dd))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[4600];
        snprintf(p, sizeof p, "%s/%s", d, e->d_name);
        cr_assert_eq(utimes(p, tv), 0, "%s: %s", p, strerror(errno));
    }
    closedir(dd);
}

/* A second writer's segment in data that no saved handle references: an orphan. */
static void add_orphan(void)
{
    dstl_storage *s = t_storage_open(data, NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "operator-8", 0, 7, &w), 0);
    t_append_n(w, 8, 10, 0, 8, 64);
    dstl_handle *h = t_persist(w, 0, 1);
    dstl_handle_free(h);
    dstl_writer_close(w);
    cr_assert_eq(dstl_storage_close(s), 0);
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

Test(dstl_cmd, gc_refuses_without_a_live_set)
{
    age_entries(data, 7200);
    static const char *const forms[] = {"", "--min-age 0", "--live", "--dry-run --min-age 0", "--live --min-age 0"};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        int st;
        char *out = run(&st, "'%s' gc '%s' %s", bin(), data, forms[i]);
        cr_expect_eq(st, 2, "gc %s: exit %d: %s", forms[i], st, out);
        cr_expect(strstr(out, "refusing to run without a live set") != NULL, "gc %s: %s", forms[i], out);
        cr_expect(strstr(out, "--no-live-handles") != NULL && strstr(out, "--live HANDLE_FILE") != NULL,
                  "gc %s: the message names neither way out: %s", forms[i], out);
        cr_expect(strstr(out, "every segment of a dead run older than --min-age") != NULL,
                  "gc %s: the message does not say what --no-live-handles means: %s", forms[i], out);
        free(out);
        cr_expect_eq(t_count_segments(data), 1, "gc %s deleted something", forms[i]);
    }
    int st;
    char *out = run(&st, "'%s' gc '%s' --live '%s' --no-live-handles --min-age 0", bin(), data, hfile);
    cr_expect_eq(st, 2, "%s", out);
    cr_expect(strstr(out, "contradict") != NULL, "%s", out);
    free(out);
    cr_expect_eq(t_count_segments(data), 1);
}

Test(dstl_cmd, gc_no_live_handles_deletes_old_segments)
{
    add_orphan();
    age_entries(data, 7200);
    int st;
    char *out = run(&st, "'%s' gc '%s' --no-live-handles", bin(), data);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "2 scanned, 2 deleted") != NULL, "%s", out);
    free(out);
    cr_expect_eq(t_count_segments(data), 0);
}

Test(dstl_cmd, gc_default_min_age_keeps_young_orphans)
{
    add_orphan();
    int st;
    char *out = run(&st, "'%s' gc '%s' --no-live-handles", bin(), data);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "min-age 1h") != NULL, "%s", out);
    cr_expect(strstr(out, "0 deleted") != NULL && strstr(out, "2 kept young") != NULL, "%s", out);
    free(out);
    cr_expect_eq(t_count_segments(data), 2);
    /* an explicit --min-age below their age lets them go */
    age_entries(data, 3600 + 600);
    out = run(&st, "'%s' gc '%s' --no-live-handles --min-age 30min", bin(), data);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "2 deleted") != NULL, "%s", out);
    free(out);
    cr_expect_eq(t_count_segments(data), 0);
}

Test(dstl_cmd, gc_keeps_what_live_handles_reference)
{
    add_orphan();
    age_entries(data, 7200);
    int st;
    char *out = run(&st, "'%s' gc '%s' --live '%s' --dry-run", bin(), data, hfile);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "2 scanned, 1 would be deleted") != NULL && strstr(out, "1 kept live") != NULL, "%s", out);
    free(out);
    cr_expect_eq(t_count_segments(data), 2, "a dry run deleted something");
    out = run(&st, "'%s' gc '%s' --live '%s'", bin(), data, hfile);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "2 scanned, 1 deleted") != NULL && strstr(out, "1 kept live") != NULL, "%s", out);
    free(out);
    cr_expect_eq(t_count_segments(data), 1);
    out = run(&st, "'%s' cat '%s' --dir '%s'", bin(), hfile, data);
    cr_expect_eq(st, 0, "the live handle no longer reads: %s", out);
    free(out);
}

Test(dstl_cmd, gc_unreadable_handle_is_an_error)
{
    age_entries(data, 7200);
    char bad[4300], sub[4300];
    snprintf(bad, sizeof bad, "%s/bad.handle", dir);
    snprintf(sub, sizeof sub, "%s/adir.handle", dir);
    cr_assert_eq(t_write_file(bad, "not a handle", 12), 0);
    cr_assert_eq(mkdir(sub, 0755), 0);
    const char *const files[] = {"/nonexistent.handle", bad, sub};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        int st;
        /* with a good handle before it: the bad one must not just be left out */
        char *out = run(&st, "'%s' gc '%s' --live '%s' '%s' --min-age 0", bin(), data, hfile, files[i]);
        cr_expect_neq(st, 0, "%s: %s", files[i], out);
        cr_expect(strstr(out, files[i]) != NULL, "the error does not name %s: %s", files[i], out);
        free(out);
        out = run(&st, "'%s' gc '%s' --live '%s' --min-age 0", bin(), data, files[i]);
        cr_expect_neq(st, 0, "%s: %s", files[i], out);
        free(out);
        cr_expect_eq(t_count_segments(data), 1, "gc with the unreadable %s deleted something", files[i]);
    }
}

Test(dstl_cmd, gc_dry_run_changes_nothing)
{
    add_orphan();
    char p[4300];
    snprintf(p, sizeof p, "%s/0123456789abcdef.lock", data);
    cr_assert_eq(t_write_file(p, "", 0), 0);
    age_entries(data, 7200);
    char *before = t_cmd_tree(data);
    cr_assert_not_null(before);
    static const char *const forms[] = {"--no-live-handles", "--no-live-handles --min-age 0", "--live '%s'",
                                        "--live '%s' --min-age 0"};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char args[4400];
        snprintf(args, sizeof args, forms[i], hfile);
        int st;
        char *out = run(&st, "'%s' gc '%s' %s --dry-run", bin(), data, args);
        cr_expect_eq(st, 0, "%s", out);
        cr_expect(strstr(out, "dry run: nothing was changed") != NULL, "%s", out);
        cr_expect(strstr(out, i < 2 ? "2 would be deleted" : "1 would be deleted") != NULL, "gc %s: %s", args, out);
        free(out);
        char *after = t_cmd_tree(data);
        cr_assert_not_null(after);
        cr_expect_str_eq(after, before, "gc %s --dry-run changed the tree", args);
        free(after);
    }
    free(before);
}

Test(dstl_cmd, gc_on_a_missing_dir_creates_nothing)
{
    char missing[4400], parent[4300], file[4300];
    snprintf(parent, sizeof parent, "%s/missing", dir);
    snprintf(missing, sizeof missing, "%s/sub", parent);
    snprintf(file, sizeof file, "%s/plain", dir);
    cr_assert_eq(t_write_file(file, "x", 1), 0);
    static const char *const forms[] = {"--no-live-handles --dry-run", "--no-live-handles --min-age 0",
                                        "--live '%s' --dry-run", "--live '%s' --min-age 0"};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char args[4400];
        snprintf(args, sizeof args, forms[i], hfile);
        int st;
        char *out = run(&st, "'%s' gc '%s' %s", bin(), missing, args);
        cr_expect_eq(st, 1, "gc %s: %s", args, out);
        cr_expect(strstr(out, missing) != NULL && strstr(out, "No such file or directory") != NULL,
                  "gc %s: the error does not name the dir: %s", args, out);
        free(out);
        cr_expect(!exists(parent), "gc %s created %s", args, parent);
        out = run(&st, "'%s' gc '%s' %s", bin(), file, args);
        cr_expect_eq(st, 1, "gc %s: %s", args, out);
        cr_expect(strstr(out, file) != NULL && strstr(out, "not a directory") != NULL, "%s", out);
        free(out);
    }
}

Test(dstl_cmd, ls_verify_gc_count_only_segment_files)
{
    /* what shares a local dir: run locks, the reader cache, handle dirs, stray files */
    static const char *const files[] = {"0123456789abcdef.lock", "fedcba9876543210.lock", "notes.txt",
                                        "x.seg.tmp", "handles/h.handle"};
    static const char *const dirs[] = {"z.seg", "handles", "cache"};
    char p[4400];
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", data, dirs[i]);
        cr_assert_eq(mkdir(p, 0755), 0, "%s: %s", p, strerror(errno));
    }
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", data, files[i]);
        cr_assert_eq(t_write_file(p, "abc", 3), 0);
    }
    age_entries(data, 7200);
    int st;
    char *out = run(&st, "'%s' ls '%s'", bin(), data);
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "\n1 segment files") != NULL && strstr(out, "0 empty, 0 corrupt") != NULL, "%s", out);
    cr_expect(strstr(out, ".lock") == NULL && strstr(out, "notes") == NULL, "%s", out);
    free(out);
    out = run(&st, "'%s' verify '%s'", bin(), data);
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "\n1 segment files") != NULL && strstr(out, "0 empty, 0 corrupt") != NULL, "%s", out);
    free(out);
    out = run(&st, "'%s' gc '%s' --no-live-handles --min-age 0", bin(), data);
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "1 scanned, 1 deleted") != NULL, "%s", out);
    free(out);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", data, files[i]);
        /* a lock file nobody holds is a dead run's; with no file of that run left, gc removes
         * it (under its lock); everything else that is not a segment stays */
        if (strstr(files[i], ".lock")) cr_expect(!exists(p), "gc left the dead run's lock %s", p);
        else cr_expect(exists(p), "gc removed %s", p);
    }
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", data, dirs[i]);
        cr_expect(exists(p), "gc removed %s", p);
    }
}

/* ---- error details ---- */

/* The detail of a local dir that is a regular file, from the API and from the command. */
static void expect_not_a_directory(const char *detail, const char *path)
{
    static const char phrase[] = "exists and is not a directory";
    cr_expect_eq(count(detail, phrase), 1, "garbled detail: '%s'", detail);
    const char *end = strstr(detail, phrase);
    cr_expect(end && (end[sizeof phrase - 1] == '\0' || end[sizeof phrase - 1] == '\n'),
              "the detail does not end with what is wrong: '%s'", detail);
    size_t n = count(detail, path);
    cr_expect(n >= 1 && n <= 2, "the path appears %zu times (once per layer expected): '%s'", n, detail);
    cr_expect_leq(count(detail, "dstl.local.dir"), 1, "garbled detail: '%s'", detail);
}

Test(dstl_cmd, local_dir_that_is_a_file_gives_a_clean_detail)
{
    char file[4300];
    snprintf(file, sizeof file, "%s/a-regular-file", dir);
    cr_assert_eq(t_write_file(file, "x", 1), 0);
    dstl_config *c = NULL;
    cr_assert_eq(dstl_config_new(&c), 0);
    cr_assert_eq(dstl_config_set(c, "dstl.local.dir", file), 0);
    dstl_storage *s = NULL;
    cr_expect_eq(dstl_storage_open(c, &s), -ENOTDIR, "%s", dstl_last_error());
    cr_expect_null(s);
    char detail[2048];
    snprintf(detail, sizeof detail, "%s", dstl_last_error());
    expect_not_a_directory(detail, file);
    dstl_config_free(c);
    int st;
    char *out = run(&st, "'%s' cat '%s' --dir '%s'", bin(), hfile, file);
    cr_expect_eq(st, 1, "%s", out);
    expect_not_a_directory(out, file);
    free(out);
}

Test(dstl_error, a_detail_may_carry_the_previous_one)
{
    char inner[300];
    memset(inner, 'i', sizeof inner - 1);
    inner[sizeof inner - 1] = '\0';
    cr_expect_eq(err_fail(-5, "inner %s", inner), -5);
    cr_expect_eq(err_fail(-6, "outer %s: %s", "x", dstl_last_error()), -6);
    char want[400];
    snprintf(want, sizeof want, "outer x: inner %s", inner);
    cr_expect_str_eq(dstl_last_error(), want);
    /* a detail that fills the buffer, wrapped again: cut, never garbled */
    char big[2000];
    memset(big, 'b', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    err_fail(-1, "%s", big);
    err_fail(-1, "wrap: %s", dstl_last_error());
    const char *d = dstl_last_error();
    cr_expect(strncmp(d, "wrap: bbbb", 10) == 0, "'%.40s'", d);
    cr_expect_eq(strspn(d + 6, "b"), strlen(d) - 6, "garbled: '%.80s'", d);
    cr_expect_geq(strlen(d), 1000);
}

/* ---- secrets ---- */

Test(dstl_cmd, set_errors_never_repeat_the_value)
{
    static const struct { const char *arg, *want, *key; } cases[] = {
        {"dstl.s3.secret-key:TOPSECRET", "--set argument 1: expected key=value", "dstl.s3.secret-key"},
        {"dstl.s3.secret-key TOPSECRET", "--set argument 1: expected key=value", "dstl.s3.secret-key"},
        {"TOPSECRET", "--set argument 1: expected key=value", NULL},
        {"dstl.s3.secret-key:TOPSECRET=x", "--set argument 1: not a configuration key", NULL},
        {"dstl.s3.secret-key", "--set argument 1: key 'dstl.s3.secret-key' has no value", NULL},
        {"dstl.s3.secret-kye=TOPSECRET", "--set argument 1: unknown configuration key 'dstl.s3.secret-kye'", NULL},
        {"dstl.s3.secret-key=a\nTOPSECRET", "--set argument 1: key 'dstl.s3.secret-key': bad value '<secret>'", NULL},
        {"dstl.s3.session-token=a\nTOPSECRET", "--set argument 1: key 'dstl.s3.session-token'", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int st;
        char *out = run(&st, "'%s' --set \"$(printf '%%b' '%s')\" config", bin(), cases[i].arg);
        cr_expect_eq(st, 1, "--set %s: exit %d: %s", cases[i].arg, st, out);
        cr_expect(strstr(out, "TOPSECRET") == NULL, "--set %s: the error repeats the value: %s", cases[i].arg, out);
        cr_expect(strstr(out, cases[i].want) != NULL, "--set %s: '%s' lacks '%s'", cases[i].arg, out, cases[i].want);
        if (cases[i].key) cr_expect(strstr(out, cases[i].key) != NULL, "--set %s: key not named: %s", cases[i].arg, out);
        free(out);
    }
    int st;
    char *out = run(&st, "'%s' --set dstl.s3.region=eu-west-1 --set TOPSECRET config", bin());
    cr_expect_eq(st, 1, "%s", out);
    cr_expect(strstr(out, "--set argument 2") != NULL && strstr(out, "TOPSECRET") == NULL, "%s", out);
    free(out);
}

Test(dstl_cmd, config_file_and_environment_errors_never_repeat_a_secret)
{
    static const struct { const char *text, *want; } cases[] = {
        {"dstl.s3.secret-key TOPSECRET\n", ":1: expected 'key: value': key 'dstl.s3.secret-key'"},
        {"# x\n\nTOPSECRET\n", ":3: expected 'key: value'"},
        {"dstl.s3.secret-key=TOPSECRET\n", ":1: expected 'key: value': key 'dstl.s3.secret-key'"},
        {"dstl.s3.secret-key=TOPSECRET:x\n", ":1: not a configuration key"},
        {"aws_secret_access_key = TOPSECRET:x\n", ":1: not a configuration key"},
    };
    char conf[4300];
    snprintf(conf, sizeof conf, "%s/bad.conf", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(t_write_file(conf, cases[i].text, strlen(cases[i].text)), 0);
        int st;
        char *out = run(&st, "'%s' --config '%s' config", bin(), conf);
        cr_expect_eq(st, 1, "%s", out);
        cr_expect(strstr(out, "TOPSECRET") == NULL, "'%s': the error repeats the secret: %s", cases[i].text, out);
        cr_expect(strstr(out, conf) != NULL && strstr(out, cases[i].want) != NULL, "'%s': '%s' lacks '%s'",
                  cases[i].text, out, cases[i].want);
        free(out);
    }
    static const char *const envs[] = {"DSTL_S3_SECRET_KEY", "DSTL_S3_ACCESS_KEY", "DSTL_S3_SESSION_TOKEN"};
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        int st;
        char *out = run(&st, "%s=\"$(printf 'a\\nTOPSECRET')\" '%s' config", envs[i], bin());
        cr_expect_eq(st, 1, "%s", out);
        cr_expect(strstr(out, "TOPSECRET") == NULL && strstr(out, envs[i]) != NULL, "%s: %s", envs[i], out);
        free(out);
    }
}

Test(dstl_cmd, config_hides_secrets_from_every_source)
{
    char conf[4300];
    snprintf(conf, sizeof conf, "%s/s.conf", dir);
    const char *text = "dstl.s3.secret-key: TOPSECRET-FILE\n";
    cr_assert_eq(t_write_file(conf, text, strlen(text)), 0);
    int st;
    char *out = run(&st, "DSTL_S3_SESSION_TOKEN=TOPSECRET-ENV '%s' --config '%s' --set dstl.s3.access-key=TOPSECRET-SET "
                         "config", bin(), conf);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "TOPSECRET") == NULL, "%s", out);
    cr_expect(strstr(out, "dstl.s3.access-key: <set, hidden>\n") != NULL, "%s", out);
    cr_expect(strstr(out, "dstl.s3.secret-key: <set, hidden>\n") != NULL, "%s", out);
    cr_expect(strstr(out, "dstl.s3.session-token: <set, hidden>\n") != NULL, "%s", out);
    free(out);
}

Test(dstl_cmd, long_set_values_are_kept_whole)
{
    char v[3000];
    int n = snprintf(v, sizeof v, "/tmp/");
    while (n < 2000) n += snprintf(v + n, sizeof v - (size_t)n, "abcdefghij");
    int st;
    char *out = run(&st, "'%s' --set 'dstl.metrics.file=%s' config", bin(), v);
    cr_assert_eq(st, 0, "%s", out);
    char want[3100];
    snprintf(want, sizeof want, "dstl.metrics.file: %s\n", v);
    cr_expect(strstr(out, want) != NULL, "the value was cut: %.200s", out);
    free(out);
}

/* ---- demo ---- */

/* The handle dir a demo's output names (the "last handles: " line), malloc'd, or NULL. */
static char *handle_dir(const char *out)
{
    const char *p = strstr(out, "last handles: ");
    if (!p) return NULL;
    p += strlen("last handles: ");
    const char *e = strstr(p, "/*.handle");
    return e ? strndup(p, (size_t)(e - p)) : NULL;
}

/* cats every handle in hdir through --dir ldir; returns how many read back. */
static int cat_all(const char *hdir, const char *ldir, const char *extra)
{
    DIR *d = opendir(hdir);
    cr_assert_not_null(d, "%s: %s", hdir, strerror(errno));
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 8 || strcmp(e->d_name + l - 7, ".handle") != 0) continue;
        int st;
        char *out = run(&st, "'%s' %s cat '%s/%s' --dir '%s'", bin(), extra, hdir, e->d_name, ldir);
        cr_expect_eq(st, 0, "cat %s/%s: %s", hdir, e->d_name, out);
        cr_expect(strstr(out, "\"meta\":true") != NULL, "cat %s/%s: %.300s", hdir, e->d_name, out);
        if (st == 0) n++;
        free(out);
    }
    closedir(d);
    return n;
}

Test(dstl_cmd, demo_leaves_exactly_what_its_last_handles_need)
{
    char ldir[4300];
    snprintf(ldir, sizeof ldir, "%s/demo", dir);
    int st;
    char *out = run(&st, "'%s' --set 'dstl.local.dir=%s' demo --writers 2 --duration 3 --rate 500 "
                         "--materialize-every 1", bin(), ldir);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "exactly the ones its last handles reference") != NULL, "%s", out);
    cr_expect(strstr(out, "recovery: 2 writers") != NULL && strstr(out, ": OK") != NULL, "%s", out);
    cr_expect(strstr(out, "gc:") == NULL, "the demo still sweeps: %s", out);
    unsigned long long wrote = 0, deleted = 0;
    const char *f = strstr(out, "footprint:");
    cr_assert_not_null(f, "%s", out);
    f = strstr(f, ") wrote ");
    cr_assert(f && sscanf(f, ") wrote %llu segments and deleted %llu", &wrote, &deleted) == 2, "%s", out);
    /* materialized each second: the segments below the truncation point went */
    cr_expect_geq(deleted, 1, "%s", out);
    cr_expect_eq(t_count_segments(ldir), wrote - deleted, "%s", out);
    char *hdir = handle_dir(out);
    cr_assert_not_null(hdir, "%s", out);
    cr_expect_eq(cat_all(hdir, ldir, ""), 2);
    free(hdir);
    free(out);
}

Test(dstl_cmd, two_demos_at_once_on_one_dir_both_recover)
{
    char ldir[4300], o1[4300], o2[4300];
    snprintf(ldir, sizeof ldir, "%s/shared", dir);
    snprintf(o1, sizeof o1, "%s/demo1.txt", dir);
    snprintf(o2, sizeof o2, "%s/demo2.txt", dir);
    int st;
    char *out = run(&st,
                    "B='%s'; D='%s'; "
                    "(\"$B\" --set dstl.local.dir=\"$D\" demo --writers 2 --duration 2 --rate 500 --materialize-every 1 "
                    "> '%s' 2>&1; echo \"demo1 exit $?\") & "
                    "(\"$B\" --set dstl.local.dir=\"$D\" demo --writers 2 --duration 2 --rate 500 --materialize-every 1 "
                    "> '%s' 2>&1; echo \"demo2 exit $?\") & wait",
                    bin(), ldir, o1, o2);
    cr_assert_eq(st, 0, "%s", out);
    size_t l1 = 0, l2 = 0;
    char *t1 = t_read_file(o1, &l1), *t2 = t_read_file(o2, &l2);
    cr_assert(t1 && t2);
    t1 = realloc(t1, l1 + 1);
    t2 = realloc(t2, l2 + 1);
    t1[l1] = t2[l2] = '\0';
    cr_expect(strstr(out, "demo1 exit 0") != NULL, "%s\n--- demo 1:\n%s", out, t1);
    cr_expect(strstr(out, "demo2 exit 0") != NULL, "%s\n--- demo 2:\n%s", out, t2);
    char *h1 = handle_dir(t1), *h2 = handle_dir(t2);
    cr_assert(h1 && h2, "--- demo 1:\n%s\n--- demo 2:\n%s", t1, t2);
    cr_expect_str_neq(h1, h2, "both demos kept their handles in one place");
    /* both runs' last handles read back, after both ended */
    cr_expect_eq(cat_all(h1, ldir, ""), 2);
    cr_expect_eq(cat_all(h2, ldir, ""), 2);
    free(out);
    out = run(&st, "'%s' verify '%s'", bin(), ldir);
    cr_expect_eq(st, 0, "%s", out);
    free(out);
    free(h1);
    free(h2);
    free(t1);
    free(t2);
}

/* ---- help and version ---- */

/* The version in the Makefile (VERSION := x.y.z): the one place it is set. */
static void make_version(char *buf, size_t cap)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/../../Makefile", t_data_dir());
    char *mk = t_read_text(path);
    cr_assert_not_null(mk, "%s", path);
    const char *v = strstr(mk, "\nVERSION");
    cr_assert_not_null(v, "no VERSION in %s", path);
    v = strstr(v, ":=");
    cr_assert_not_null(v);
    v += 2;
    while (*v == ' ') v++;
    size_t n = strcspn(v, " \n");
    cr_assert_lt(n, cap);
    memcpy(buf, v, n);
    buf[n] = '\0';
    free(mk);
}

Test(dstl_cmd, every_command_has_help_and_the_version_comes_from_the_makefile)
{
    static const char *const cmds[] = {"demo", "cat", "ls", "verify", "gc", "stats", "config", "version", "help"};
    int st;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "usage: dstl %s", cmds[i]);
        static const char *const forms[] = {"'%s' %s --help", "'%s' help %s", "'%s' %s -h"};
        for (size_t k = 0; k < 3; k++) {
            char fmt[64];
            snprintf(fmt, sizeof fmt, "%s 2>/dev/null", forms[k]);   /* help goes to stdout */
            char *out = run(&st, fmt, bin(), cmds[i]);
            cr_expect_eq(st, 0, "%s (%s): exit %d: %s", cmds[i], forms[k], st, out);
            cr_expect(strstr(out, want) != NULL, "%s (%s): %s", cmds[i], forms[k], out);
            cr_expect(strstr(out, "example") != NULL, "%s (%s) shows no example: %s", cmds[i], forms[k], out);
            free(out);
        }
    }
    /* ls --help lists no directory named --help; demo --help runs no demo */
    char *out = run(&st, "cd '%s' && '%s' ls --help && '%s' demo --help", dir, bin(), bin());
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "segment files") == NULL && strstr(out, "recovery:") == NULL, "%s", out);
    free(out);
    static const char *const overview[] = {"'%s' --help", "'%s' help", "'%s' -h"};
    for (size_t k = 0; k < 3; k++) {
        out = run(&st, overview[k], bin());
        cr_expect_eq(st, 0, "%s", out);
        for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
            char line[64];
            snprintf(line, sizeof line, "\n  %s ", cmds[i]);
            cr_expect(strstr(out, line) != NULL, "the overview lacks %s: %s", cmds[i], out);
        }
        free(out);
    }
    char version[64], want[96];
    make_version(version, sizeof version);
    snprintf(want, sizeof want, "dstl %s\n", version);
    out = run(&st, "'%s' --version", bin());
    cr_expect_eq(st, 0);
    cr_expect_str_eq(out, want);
    free(out);
    out = run(&st, "'%s' version", bin());
    cr_expect_str_eq(out, want);
    free(out);
    cr_expect_str_eq(dstl_version(), version);
    /* unknown ones still fail, with the overview */
    out = run(&st, "'%s' --frobnicate", bin());
    cr_expect_eq(st, 2, "%s", out);
    free(out);
    out = run(&st, "'%s' help frobnicate", bin());
    cr_expect_eq(st, 2, "%s", out);
    free(out);
}

/* ---- ls, verify, cat over a mirror ---- */

static size_t pos(const char *text, const char *needle)
{
    const char *p = strstr(text, needle);
    cr_assert_not_null(p, "'%s' missing in:\n%s", needle, text);
    return (size_t)(p - text);
}

/* A mirror of two runs' segments in hh/ sub-folders (as rclone or `aws s3 sync` leave a
 * prefix): ls groups by run (older run first) and sorts by segment number, with human sizes
 * (--bytes: exact) and relative ages; verify and cat walk it too. */
Test(dstl_cmd, ls_verify_cat_walk_a_mirror_sorted_by_run_and_number)
{
    char first[4400] = "";                        /* setup's segment: the older run's */
    DIR *d0 = opendir(data);
    cr_assert_not_null(d0);
    for (struct dirent *e0; (e0 = readdir(d0));)
        if (strstr(e0->d_name, ".seg")) snprintf(first, sizeof first, "%s", e0->d_name);
    closedir(d0);
    add_orphan();                                 /* a second run in data */
    char mirror[4300], sub[4400];
    snprintf(mirror, sizeof mirror, "%s/mirror", dir);
    DIR *d = opendir(data);
    cr_assert_not_null(d);
    struct dirent *e;
    char names[4][128];
    int n = 0;
    cr_assert_eq(mkdir(mirror, 0755), 0);
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".seg")) continue;
        char src[4600], dst[4600];
        /* segments of the same run in different folders, in reverse folder order */
        snprintf(sub, sizeof sub, "%s/%02x", mirror, 0xff - n);
        cr_assert_eq(mkdir(sub, 0755), 0);
        snprintf(src, sizeof src, "%s/%s", data, e->d_name);
        snprintf(dst, sizeof dst, "%s/%s", sub, e->d_name);
        char *text;
        size_t len;
        cr_assert_not_null(text = t_read_file(src, &len));
        cr_assert_eq(t_write_file(dst, text, len), 0);
        free(text);
        cr_assert_lt(n, 4);
        snprintf(names[n++], sizeof names[0], "%.100s", e->d_name);
    }
    closedir(d);
    cr_assert_eq(n, 2, "expected the segments of two runs");
    /* the operator-7 run (setup's) wrote first: in the mirror too */
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i], first) != 0) continue;
        snprintf(sub, sizeof sub, "%s/%02x", mirror, 0xff - i);
        age_entries(sub, 60);
    }
    int st;
    char *out = run(&st, "'%s' ls '%s'", bin(), mirror);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect_eq(count(out, "\nrun ") + (strncmp(out, "run ", 4) == 0), 2, "%s", out);
    cr_expect(pos(out, "operator-7") < pos(out, "operator-8"), "runs not in the order they wrote:\n%s", out);
    cr_expect(strstr(out, "fe/") != NULL && strstr(out, "ff/") != NULL, "sub-folders not shown:\n%s", out);
    cr_expect(strstr(out, " s ago") != NULL, "no relative age:\n%s", out);
    cr_expect(strstr(out, "\n2 segment files") != NULL, "%s", out);
    free(out);
    /* exact sizes with --bytes: each segment's size as a byte count */
    out = run(&st, "'%s' ls --bytes '%s'", bin(), mirror);
    cr_assert_eq(st, 0, "%s", out);
    for (int i = 0; i < n; i++) {
        char p[4800], want[700];
        snprintf(p, sizeof p, "%s/%s", data, names[i]);
        struct stat sb;
        cr_assert_eq(stat(p, &sb), 0);
        snprintf(want, sizeof want, "%s  %lld B  ", names[i], (long long)sb.st_size);
        cr_expect(strstr(out, want) != NULL, "'%s' missing:\n%s", want, out);
    }
    free(out);
    out = run(&st, "'%s' verify '%s'", bin(), mirror);
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "51 records checked") != NULL, "%s", out);    /* 41 + 10 */
    free(out);
    out = run(&st, "'%s' cat '%s' 2>/dev/null", bin(), mirror);
    cr_expect_eq(st, 0, "%s", out);
    cr_expect_eq(count(out, "\n"), 51, "%s", out);
    cr_expect_eq(count(out, "\"writer\":\"operator-8\""), 10, "%s", out);
    free(out);
    out = run(&st, "'%s' cat '%s' --key-groups 2-3 2>/dev/null", bin(), mirror);
    cr_expect_eq(count(out, "\"writer\":\"operator-7\",\"seq\""), 10 + 1, "%s", out);  /* 10 PUTs + meta */
    free(out);
}

Test(dstl_cmd, human_sizes_and_ages)
{
    /* a segment file of 5000 bytes of garbage: ls shows 4.9 KiB, --bytes 5000 B */
    char big[4300];
    snprintf(big, sizeof big, "%s/ffffffffffffffff-000000000001.seg", data);
    char junk[5000];
    memset(junk, 'x', sizeof junk);
    cr_assert_eq(t_write_file(big, junk, sizeof junk), 0);
    int st;
    char *out = run(&st, "'%s' ls '%s'", bin(), data);
    cr_expect(strstr(out, "4.9 KiB") != NULL, "%s", out);
    free(out);
    out = run(&st, "'%s' verify --bytes '%s'", bin(), data);
    cr_expect_eq(st, 1, "%s", out);
    cr_expect(strstr(out, "5000 B  CORRUPT") != NULL, "%s", out);
    free(out);
    age_entries(data, 3 * 3600);
    out = run(&st, "'%s' ls '%s'", bin(), data);
    cr_expect(strstr(out, "3 h ago") != NULL, "%s", out);
    free(out);
}

/* ---- stats ---- */

Test(dstl_cmd, stats_prints_values_exactly_and_warns_about_stale_or_foreign_files)
{
    char f[4300];
    snprintf(f, sizeof f, "%s/m.prom", dir);
    const char *text = "# HELP dstl_x_seconds Example.\n# TYPE dstl_x_seconds histogram\n"
                       "dstl_x_seconds_bucket{le=\"1048576\"} 3\ndstl_x_seconds_bucket{le=\"+Inf\"} 3\n"
                       "dstl_x_seconds_sum 4.187\ndstl_x_seconds_count 3\n"
                       "# TYPE dstl_big_total counter\ndstl_big_total 123456789012\n";
    cr_assert_eq(t_write_file(f, text, strlen(text)), 0);
    int st;
    char *out = run(&st, "'%s' stats '%s'", bin(), f);
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "dstl_x_seconds_sum                       4.187\n") != NULL, "%s", out);
    cr_expect(strstr(out, "dstl_big_total                           123456789012\n") != NULL, "%s", out);
    cr_expect(strstr(out, "warning") == NULL, "a fresh, valid file got a warning: %s", out);
    free(out);
    out = run(&st, "'%s' stats --prometheus '%s'", bin(), f);
    cr_expect_str_eq(out, text);
    free(out);
    /* an old file: its storage stopped */
    age_entries(dir, 600);
    out = run(&st, "'%s' stats '%s'", bin(), f);
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "warning: ") != NULL && strstr(out, "last written") != NULL, "%s", out);
    free(out);
    /* not Prometheus text: the first bad line, by file:line */
    const char *other = "dstl.local.dir: ./x\n";
    cr_assert_eq(t_write_file(f, other, strlen(other)), 0);
    out = run(&st, "'%s' stats '%s'", bin(), f);
    char where[4400];
    snprintf(where, sizeof where, "%s:1: not Prometheus text", f);
    cr_expect(strstr(out, where) != NULL, "%s", out);
    free(out);
}

/* The demo's metrics file ends with the run's totals: the recovery storage at the end used to
 * rewrite it with its own zeros. */
Test(dstl_cmd, demo_metrics_file_keeps_the_runs_totals)
{
    char ldir[4300], f[4300];
    snprintf(ldir, sizeof ldir, "%s/demo", dir);
    snprintf(f, sizeof f, "%s/demo.prom", dir);
    int st;
    char *out = run(&st, "'%s' --set 'dstl.local.dir=%s' --set 'dstl.metrics.file=%s' demo --writers 2 --duration 2 "
                         "--rate 300", bin(), ldir, f);
    cr_assert_eq(st, 0, "%s", out);
    free(out);
    out = run(&st, "'%s' stats '%s'", bin(), f);
    cr_assert_eq(st, 0, "%s", out);
    const char *p = strstr(out, "dstl_appends_total");
    cr_assert_not_null(p, "%s", out);
    unsigned long long appends = strtoull(p + strlen("dstl_appends_total"), NULL, 10);
    cr_expect_geq(appends, 2 * 300, "the metrics file lost the run's totals: %s", out);
    free(out);
}

/* ---- demo: plan, bounds, early stop ---- */

static int closed_port(void)
{
    int st;
    char *out = run(&st, "python3 -c 'import socket;s=socket.socket();s.bind((\"127.0.0.1\",0));"
                         "print(s.getsockname()[1]);s.close()'");
    cr_assert_eq(st, 0, "%s", out);
    int port = atoi(out);
    free(out);
    cr_assert_gt(port, 0);
    return port;
}

/* Against a refused endpoint the demo prints its plan, opens (an outage: it warns), and stops
 * with one message a few seconds after persists start failing, instead of printing zeros until
 * --duration ends. */
Test(dstl_cmd, demo_stops_early_when_every_persist_fails, .timeout = 90)
{
    char ldir[4300];
    snprintf(ldir, sizeof ldir, "%s/demo", dir);
    int port = closed_port(), st;
    char *out = run(&st, "'%s' --set 'dstl.local.dir=%s' --set dstl.remote.uri=s3://bucket/p "
                         "--set dstl.s3.endpoint=http://127.0.0.1:%d --set dstl.s3.path-style=true "
                         "--set dstl.s3.access-key=AK --set dstl.s3.secret-key=SECRETVALUE demo --writers 2 "
                         "--duration 40 --rate 100", bin(), ldir, port);
    cr_expect_eq(st, 1, "%s", out);
    cr_expect_lt(pos(out, "dstl demo plan: 2 writers"), pos(out, " sec "), "the plan is not first:\n%s", out);
    char ep[64];
    snprintf(ep, sizeof ep, "remote s3://bucket/p at http://127.0.0.1:%d", port);
    cr_expect(strstr(out, ep) != NULL, "%s", out);
    cr_expect(strstr(out, "p99<=ms") != NULL && strstr(out, "p99 <= ") != NULL, "latencies not labelled as bounds: %s",
              out);
    cr_expect_eq(count(out, "stopping early"), 1, "%s", out);
    cr_expect(strstr(out, "every persist of the last") != NULL && strstr(out, "onnect") != NULL, "%s", out);
    cr_expect_eq(count(out, "dstl demo: writer"), 0, "one message, not one per writer: %s", out);
    cr_expect(strstr(out, "SECRETVALUE") == NULL, "%s", out);
    /* progress lines: far fewer than the 40 of --duration (the bound of the first failures is
     * a few seconds, the stop window 3 s) */
    size_t lines = count(out, "\n   ") + count(out, "\n  1") + count(out, "\n  2") + count(out, "\n  3");
    cr_expect_lt(lines, 25, "the demo did not stop early:\n%s", out);
    free(out);
}

/* ---- config: where credentials come from ---- */

Test(dstl_cmd, config_says_where_the_credentials_come_from)
{
    int st;
    char *out = run(&st, "env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY HOME='%s' '%s' --set dstl.s3.access-key=AKVAL "
                         "--set dstl.s3.secret-key=SKVAL config", dir, bin());
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "# S3 credentials: config keys dstl.s3.access-key (--set) and dstl.s3.secret-key (--set)")
              != NULL, "%s", out);
    cr_expect(strstr(out, "AKVAL") == NULL && strstr(out, "SKVAL") == NULL, "%s", out);
    free(out);
    out = run(&st, "AWS_ACCESS_KEY_ID=AKENV AWS_SECRET_ACCESS_KEY=SKENV HOME='%s' '%s' config", dir, bin());
    cr_expect(strstr(out, "# S3 credentials: environment AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY;") != NULL, "%s",
              out);
    cr_expect(strstr(out, "AKENV") == NULL && strstr(out, "SKENV") == NULL, "%s", out);
    free(out);
    char aws[4300], cred[4400];
    snprintf(aws, sizeof aws, "%s/.aws", dir);
    cr_assert_eq(mkdir(aws, 0700), 0);
    snprintf(cred, sizeof cred, "%s/credentials", aws);
    const char *ini = "[work]\naws_access_key_id = AKFILE\naws_secret_access_key = SKFILE\n";
    cr_assert_eq(t_write_file(cred, ini, strlen(ini)), 0);
    out = run(&st, "env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SHARED_CREDENTIALS_FILE HOME='%s' "
                   "AWS_PROFILE=work '%s' config", dir, bin());
    char want[4600];
    snprintf(want, sizeof want, "# S3 credentials: profile [work] of %s;", cred);
    cr_expect(strstr(out, want) != NULL, "%s", out);
    cr_expect(strstr(out, "AKFILE") == NULL && strstr(out, "SKFILE") == NULL, "%s", out);
    free(out);
    out = run(&st, "env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_PROFILE -u AWS_SHARED_CREDENTIALS_FILE "
                   "HOME='%s/none' '%s' config", dir, bin());
    cr_expect(strstr(out, "# S3 credentials: none found") != NULL, "%s", out);
    free(out);
}

Test(dstl_cmd, a_misspelt_environment_variable_is_reported)
{
    int st;
    char *out = run(&st, "DSTL_BATCH_PERSIST_DELAYY=0 DSTL_UPLOAD_TIMEOUT=2s DSTL_TESTING_SOMETHING=1 '%s' config", bin());
    cr_assert_eq(st, 0, "%s", out);
    cr_expect_eq(count(out, "warning: environment variable"), 1, "%s", out);
    cr_expect(strstr(out, "DSTL_BATCH_PERSIST_DELAYY is no configuration key's") != NULL &&
              strstr(out, "did you mean DSTL_BATCH_PERSIST_DELAY") != NULL, "%s", out);
    cr_expect(strstr(out, "# from the environment: dstl.upload.timeout (DSTL_UPLOAD_TIMEOUT)") != NULL, "%s", out);
    free(out);
    /* every command says it, not only config */
    out = run(&st, "DSTL_LOCAL_DIRR=x '%s' ls '%s'", bin(), data);
    cr_expect(strstr(out, "DSTL_LOCAL_DIRR") != NULL, "%s", out);
    free(out);
}
