/*
 * perf/perf_dump.h — histograms for the perf report: with DSTL_PERF_DUMP=DIR in the
 * environment (perf/run.sh sets it), a benchmark writes a storage's Prometheus text
 * (dstl_storage_metrics: the persist latency histogram dstl_persist_latency_seconds, segment
 * sizes, counters) to DIR/NAME.prom before closing it; perf/report.py plots the latency
 * distributions from them. Without the variable it does nothing. Numbers only: never fails
 * the benchmark (a file that cannot be written is reported on stderr and skipped).
 */
#ifndef DSTL_PERF_DUMP_H
#define DSTL_PERF_DUMP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "dstl.h"

__attribute__((format(printf, 2, 3))) static inline void perf_dump(dstl_storage *s, const char *name_fmt, ...)
{
    const char *dir = getenv("DSTL_PERF_DUMP");
    if (!dir || !*dir) return;
    char name[256], path[4096];
    va_list ap;
    va_start(ap, name_fmt);
    vsnprintf(name, sizeof name, name_fmt, ap);
    va_end(ap);
    snprintf(path, sizeof path, "%s/%s.prom", dir, name);
    char *text = NULL;
    FILE *f = NULL;
    if (dstl_storage_metrics(s, &text) < 0 || !(f = fopen(path, "w")) || fputs(text, f) < 0)
        fprintf(stderr, "perf_dump: %s: not written (%s)\n", path, text ? "write failed" : dstl_last_error());
    if (f) fclose(f);
    free(text);
}

#endif
