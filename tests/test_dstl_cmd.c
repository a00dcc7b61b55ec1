/*
 * The dstl command on a local dir: cat renders canonical state changes as JSON lines (with a
 * key-group filter), ls lists segments with their writers, verify checks every byte and
 * names a corrupt file, gc keeps what live handles need.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "dstl.h"
#include "tests/helpers.h"
#include "tests/helpers_dstl.h"
#include "wire/wire.h"

static char *dir;
static char data[4200], hfile[4200];

static const char *bin(void)
{
    const char *b = getenv("DSTL_TEST_BIN");
    return b && *b ? b : "build/dstl";
}

/* Runs a shell command; its stdout in a malloc'd string; *status the exit status. */
static char *run(int *status, const char *fmt, ...)
{
    char cmd[16384], out[4300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(out, sizeof out, "%s/out.txt", dir);
    char full[24000];
    snprintf(full, sizeof full, "%s > '%s' 2>&1", cmd, out);
    int st = system(full);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 255;
    size_t len = 0;
    char *text = t_read_file(out, &len);
    text = realloc(text, len + 1);
    text[len] = '\0';
    return text;
}

static size_t count(const char *text, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

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

Test(dstl_cmd, gc_keeps_live_and_deletes_the_rest)
{
    int st;
    char *out = run(&st, "'%s' gc '%s' --live '%s' --dry-run", bin(), data, hfile);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "dry run: 1 scanned, 0 deleted") != NULL, "%s", out);
    free(out);
    out = run(&st, "'%s' gc '%s' --dry-run", bin(), data);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "1 deleted") != NULL, "%s", out);
    free(out);
    cr_expect_eq(t_count_segments(data), 1, "a dry run deleted something");
    out = run(&st, "'%s' gc '%s' --min-age 1h", bin(), data);
    cr_expect(strstr(out, "1 kept young") != NULL, "%s", out);
    free(out);
    out = run(&st, "'%s' gc '%s'", bin(), data);
    cr_expect(strstr(out, "1 deleted") != NULL, "%s", out);
    free(out);
    cr_expect_eq(t_count_segments(data), 0);
    out = run(&st, "'%s' gc '%s' --live /nonexistent.handle", bin(), data);
    cr_expect_neq(st, 0);
    cr_expect(strstr(out, "/nonexistent.handle") != NULL, "%s", out);
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
