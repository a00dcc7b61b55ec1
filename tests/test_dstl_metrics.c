/*
 * tests/test_dstl_metrics.c — the Prometheus text of a storage (dstl_storage_metrics and
 * dstl.metrics.file), read by a strict parser of the text exposition format: every line is a
 * HELP/TYPE comment or a sample; `le` labels and values are exact decimals (no exponent, no
 * rounding: le="1048576", not "1.04858e+06"); the histograms' _sum and _count are exact (the
 * segment-size histogram's _sum equals the segment-bytes counter); the file a storage leaves
 * at close holds its final totals and passes `promtool check metrics` (Debian's prometheus
 * package, installed by scripts/deps.sh).
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstl.h"
#include "tests/helpers.h"
#include "tests/helpers_dstl.h"

static char *dir;

static void setup(void) { dir = t_mkdtemp("metrics"); }

static void teardown(void)
{
    t_rm_rf(dir);
    free(dir);
}

TestSuite(dstl_metrics, .init = setup, .fini = teardown, .timeout = 60);

/* An exact decimal: digits, optionally '.' and digits (no sign, exponent or "inf"). */
static int exact_decimal(const char *v)
{
    const char *p = v;
    if (!isdigit((unsigned char)*p)) return 0;
    while (isdigit((unsigned char)*p)) p++;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p)) return 0;
        while (isdigit((unsigned char)*p)) p++;
    }
    return *p == '\0';
}

/* Checks every line of text; returns the value text of sample `want` (name with labels, as
 * written) in out, "" when absent. */
static void check_text(const char *text, const char *want, char *out, size_t cap)
{
    out[0] = '\0';
    char *copy = strdup(text), *save = NULL;
    cr_assert_not_null(copy);
    int lineno = 0;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        if (line[0] == '#') {
            cr_expect(!strncmp(line, "# HELP dstl_", 12) || !strncmp(line, "# TYPE dstl_", 12), "line %d: %s", lineno,
                      line);
            continue;
        }
        char *sp = strrchr(line, ' ');
        cr_assert_not_null(sp, "line %d has no value: %s", lineno, line);
        *sp = '\0';
        const char *value = sp + 1;
        cr_expect(exact_decimal(value), "line %d: value '%s' of %s is not an exact decimal", lineno, value, line);
        char *brace = strchr(line, '{');
        for (const char *p = line; p < (brace ? brace : line + strlen(line)); p++)
            cr_expect(isalnum((unsigned char)*p) || *p == '_', "line %d: bad metric name %s", lineno, line);
        if (brace) {
            cr_expect(!strncmp(brace, "{le=\"", 5) && line[strlen(line) - 1] == '}', "line %d: labels %s", lineno,
                      brace);
            char le[64];
            size_t n = strlen(brace) - 7;           /* {le=" ... "} */
            cr_assert_lt(n, sizeof le);
            memcpy(le, brace + 5, n);
            le[n] = '\0';
            cr_expect(!strcmp(le, "+Inf") || exact_decimal(le), "line %d: le=\"%s\" is not exact", lineno, le);
        }
        if (!strcmp(line, want)) snprintf(out, cap, "%s", value);
    }
    free(copy);
}

static unsigned long long sample(const char *text, const char *name)
{
    char v[64];
    check_text(text, name, v, sizeof v);
    cr_assert(*v, "no sample %s", name);
    cr_assert(strchr(v, '.') == NULL, "%s is not an integer: %s", name, v);
    return strtoull(v, NULL, 10);
}

Test(dstl_metrics, values_and_bounds_are_exact)
{
    dstl_storage *s = t_storage_open(dir, "dstl.batch.persist-delay", "0", NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
    for (int cp = 1; cp <= 6; cp++) {
        t_append_n(w, 1, 37u * (unsigned)cp, 0, 8, 300 * (size_t)cp);
        dstl_handle_free(t_persist(w, 0, (uint64_t)cp));
    }
    char *text = NULL;
    cr_assert_eq(dstl_storage_metrics(s, &text), 0);
    char v[64];
    check_text(text, "dstl_upload_size_bytes_bucket{le=\"1048576\"}", v, sizeof v);
    cr_expect(*v, "no le=\"1048576\" bucket: %s", text);
    check_text(text, "dstl_persist_latency_seconds_bucket{le=\"0.001\"}", v, sizeof v);
    cr_expect(*v, "no le=\"0.001\" bucket");
    /* exact sums: the size histogram's sum is the segment-bytes counter, its count the segments */
    dstl_stats st;
    cr_assert_eq(dstl_storage_stats(s, &st), 0);
    cr_expect_eq(sample(text, "dstl_upload_size_bytes_sum"), sample(text, "dstl_segment_bytes_total"));
    cr_expect_eq(sample(text, "dstl_upload_size_bytes_sum"), st.segment_bytes);
    cr_expect_eq(sample(text, "dstl_upload_size_bytes_count"), st.segments_written);
    cr_expect_eq(sample(text, "dstl_upload_batch_writers_sum"), st.segments_written, "one writer: one section each");
    /* the latency sum is seconds with microseconds: a decimal, not rounded to whole seconds */
    check_text(text, "dstl_persist_latency_seconds_sum", v, sizeof v);
    cr_expect(*v && strtod(v, NULL) > 0, "persist latency sum '%s'", v);
    cr_expect_eq(sample(text, "dstl_persist_latency_seconds_count"), 6);
    free(text);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
}

Test(dstl_metrics, the_file_at_close_holds_the_totals_and_passes_promtool)
{
    char file[4200], data[4200];
    snprintf(file, sizeof file, "%s/dstl.prom", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    dstl_storage *s = t_storage_open(data, "dstl.metrics.file", file, "dstl.batch.persist-delay", "0", NULL);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
    t_append_n(w, 1, 123, 0, 8, 500);
    dstl_handle_free(t_persist(w, 0, 1));
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    char *t = t_read_text(file);
    cr_assert_not_null(t, "%s was not written", file);
    cr_expect_eq(sample(t, "dstl_appends_total"), 123, "the file does not hold the run's final totals");
    cr_expect_eq(sample(t, "dstl_persists_total"), 1);
    free(t);
    cr_assert_eq(system("command -v promtool > /dev/null"), 0,
                 "promtool is missing: scripts/deps.sh installs Debian's prometheus package, which has it");
    char cmd[8600];
    snprintf(cmd, sizeof cmd, "promtool check metrics < '%s' > '%s/promtool.log' 2>&1", file, dir);
    int rc = system(cmd);
    snprintf(cmd, sizeof cmd, "%s/promtool.log", dir);
    char *log = t_read_text(cmd);
    cr_expect_eq(rc, 0, "promtool check metrics failed: %s", log ? log : "");
    free(log);
}
