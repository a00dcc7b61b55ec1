/*
 * dstl/cmd/cmd_stats.c — `dstl stats`: the metrics a running storage writes to
 * dstl.metrics.file (every second), as Prometheus text (--prometheus) or as a table of the
 * samples, each value exactly as written. Warns (stderr) when the file is stale — its
 * storage stopped, or the path names another file — or is not Prometheus text (the first bad
 * line, by file:line).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "dstl/cmd/cmd.h"
#include "dstl/tools.h"

/* A storage rewrites the file every second: five missed rewrites mean it stopped (a loop
 * turn may be late by a slow fdatasync, never by seconds). */
#define STATS_STALE_S 5

static int name_start(int c) { return isalpha(c) || c == '_' || c == ':'; }
static int name_char(int c) { return isalnum(c) || c == '_' || c == ':'; }

/* Skips a metric (or label) name; NULL when there is none. */
static const char *skip_name(const char *p, int metric)
{
    if (!(metric ? name_start((unsigned char)*p) : (isalpha((unsigned char)*p) || *p == '_'))) return NULL;
    while (metric ? name_char((unsigned char)*p) : (isalnum((unsigned char)*p) || *p == '_')) p++;
    return p;
}

/* Skips {name="value",...}; NULL when malformed. */
static const char *skip_labels(const char *p)
{
    p++;                                         /* '{' */
    while (*p != '}') {
        if (!(p = skip_name(p, 0)) || *p++ != '=' || *p++ != '"') return NULL;
        while (*p && *p != '"') {
            if (*p == '\\') {
                if (p[1] != '\\' && p[1] != '"' && p[1] != 'n') return NULL;
                p++;
            }
            p++;
        }
        if (*p++ != '"') return NULL;
        if (*p == ',') p++;
        else if (*p != '}') return NULL;
    }
    return p + 1;
}

/* Whether text is a Prometheus sample value (a float, +Inf, -Inf, NaN) ending at end. */
static int is_value(const char *text, size_t len)
{
    char v[64];
    if (len == 0 || len >= sizeof v) return 0;
    memcpy(v, text, len);
    v[len] = '\0';
    if (!strcmp(v, "+Inf") || !strcmp(v, "-Inf") || !strcmp(v, "NaN")) return 1;
    char *e;
    strtod(v, &e);
    return *e == '\0' && !isspace((unsigned char)v[0]);
}

/* Checks one line of the text exposition format. 0, or -1 with why. Sets *sample when it is
 * a sample line (name, labels, value [timestamp]). */
static int check_line(const char *line, int *sample, const char **why)
{
    *sample = 0;
    if (!*line) return 0;
    if (line[0] == '#') {
        const char *p = line + 1;
        int help = !strncmp(p, " HELP ", 6), type = !strncmp(p, " TYPE ", 6);
        if (!help && !type) return 0;            /* any other comment */
        if (!(p = skip_name(p + 6, 1)) || (*p && *p != ' ')) return *why = "a # HELP/TYPE line without a metric name", -1;
        if (type) {
            static const char *const types[] = {"counter", "gauge", "histogram", "summary", "untyped"};
            for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
                if (*p == ' ' && !strcmp(p + 1, types[i])) return 0;
            return *why = "a # TYPE line with an unknown type", -1;
        }
        return 0;
    }
    const char *p = skip_name(line, 1);
    if (!p) return *why = "not a metric name at the start of the line", -1;
    if (*p == '{' && !(p = skip_labels(p))) return *why = "malformed labels", -1;
    if (*p++ != ' ') return *why = "no space between the metric and its value", -1;
    const char *v = p;
    while (*p && *p != ' ') p++;
    if (!is_value(v, (size_t)(p - v))) return *why = "the value is not a number", -1;
    if (*p == ' ') {
        char *e;
        strtoll(p + 1, &e, 10);
        if (e == p + 1 || *e) return *why = "what follows the value is not a timestamp", -1;
    }
    *sample = 1;
    return 0;
}

static void warn_stale(const char *file, FILE *f)
{
    struct stat st;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (fstat(fileno(f), &st) < 0) return;
    long age = (long)(now.tv_sec - st.st_mtim.tv_sec);
    if (age > STATS_STALE_S)
        fprintf(stderr, "dstl stats: warning: %s was last written %ld s ago; a running storage rewrites it every "
                        "second: its storage has stopped, or dstl.metrics.file names another file\n", file, age);
}

/* Prints the file (or its samples); warns once about the first line that is not Prometheus
 * text. */
static void print_metrics(const char *file, FILE *f, int prom)
{
    char line[4096];
    int lineno = 0, warned = 0, samples = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (prom) fputs(line, stdout);
        size_t n = strlen(line);
        int whole = n && line[n - 1] == '\n';
        if (whole) line[--n] = '\0';
        int sample = 0;
        const char *why = NULL;
        if (!whole && !feof(f)) why = "line longer than 4095 bytes";
        if (!why && check_line(line, &sample, &why) == 0 && sample) samples++;
        if (why && !warned++)
            fprintf(stderr, "dstl stats: warning: %s:%d: not Prometheus text (%s)\n", file, lineno, why);
        if (why || !sample || prom || strstr(line, "_bucket{")) continue;
        char *sp = strrchr(line, ' ');
        if (!sp) continue;
        *sp = '\0';
        /* the value as written: exact (no %g, no rounding to integers) */
        printf("%-40s %s\n", line, sp + 1);
    }
    if (!samples && !warned)
        fprintf(stderr, "dstl stats: warning: %s holds no metric samples: not Prometheus text\n", file);
}

int cmd_stats(const cmd_globals *g, int argc, char **argv)
{
    int prom = 0;
    const char *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--prometheus")) prom = 1;
        else if (!file && argv[i][0] != '-') file = argv[i];
        else {
            fprintf(stderr, "usage: dstl stats [--prometheus] [METRICS_FILE]   (dstl stats --help)\n");
            return 2;
        }
    }
    dstl_config *c = NULL;
    if (!file) {
        if (!(c = cmd_config(g, NULL))) return 1;
        file = dstl_config_get(c, "dstl.metrics.file");
        if (!*file) {
            fprintf(stderr, "dstl stats: no metrics file: give one, or set dstl.metrics.file (the running storage "
                            "writes it every second)\n");
            dstl_config_free(c);
            return 1;
        }
    }
    FILE *f = fopen(file, "r");
    if (!f) {
        fprintf(stderr, "dstl stats: %s: %s\n", file, strerror(errno));
        dstl_config_free(c);
        return 1;
    }
    warn_stale(file, f);
    print_metrics(file, f, prom);
    fclose(f);
    dstl_config_free(c);
    return 0;
}
