#!/usr/bin/env python3
"""perf/report.py REPORT_DIR LINES_FILE — the readable report of one `make perf` run.

perf/run.sh calls it last. It writes into REPORT_DIR:
  lines.txt            this run's `name value unit` lines, as printed
  history/<time>.txt   the same, kept per run (the last 10), for medians across runs
  README.md            every goal with this run's value, the median of the last three runs,
                       and met / missed (judged on that median), then the plots and the lines
  *.png                throughput against writers (local, with the fio disk peers; remote) and
                       persist latency distributions (local, remote), drawn by gnuplot
  data/                the numbers behind each plot, as gnuplot reads them
The latency distributions come from the benchmarks' Prometheus dumps (perf/perf_dump.h,
REPORT_DIR/prom/*.prom: the dstl_persist_latency_seconds histogram of each run). How to read
it: perf/README.md. Standard library only; the plots need gnuplot (scripts/deps.sh --perf),
without it the report says so and has the tables alone. Prints the report's path last.
"""
import datetime
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys

# (line, comparison, target, where the goal comes from)
GOALS = [
    ("local.commits_vs_rocksdb", ">=", 2.0, "issue 14: group commit"),
    ("local.commit_p99_vs_rocksdb", "<=", 1.0, "issue 14: group commit"),
    ("local.rss_vs_budget", "<=", 1.0, "issue 14: memory"),
    ("local.cost_flatness", "<=", 1.2, "issue 14: CPU per byte"),
    ("local.vs_disk", ">=", 0.9, "issue 14: honest disk peer"),
    ("local.p99_vs_budget", "<=", 1.0, "issue 14: latency"),
    ("remote.p99_vs_put", "<=", 1.3, "issue 14: latency"),
    ("wire.encode_vs_memcpy", ">=", 0.3, "issue 14: encoding"),
    ("recovery.w16.vs_raw", ">=", 0.9, "issue 12: recovery"),
    ("recovery.w256.vs_raw", ">=", 0.9, "issue 12: recovery"),
    ("recovery.w1024.vs_raw", ">=", 0.9, "issue 12: recovery"),
    ("recovery.rescale4.bytes_ratio", "<=", 1.3, "issue 12: recovery"),
    ("recovery.w16.requests_vs_objects", "<=", 1.1, "issue 12: recovery"),
    ("recovery.w256.requests_vs_objects", "<=", 1.1, "issue 12: recovery"),
    ("recovery.w1024.requests_vs_objects", "<=", 1.1, "issue 12: recovery"),
    ("recovery.w16.first_record_vs_get", "<=", 2.0, "issue 12: recovery"),
    ("recovery.w256.first_record_vs_get", "<=", 2.0, "issue 12: recovery"),
    ("recovery.w1024.first_record_vs_get", "<=", 2.0, "issue 12: recovery"),
    ("append.vs_memcpy", ">=", 0.3, "design: append"),
    ("s3.vs_rclone", ">=", 1.5, "issue 4: S3 client"),
]
# Lines shown next to the goals, without a target.
INFO = ["local.best_mb_s", "local.paired_mb_s", "local.disk_mb_s", "fio.seg_bytes", "fio.seg_buffered_mb_s", "fio.seg_direct_mb_s",
        "local.direct_vs_buffered", "local.cpu_vs_floor", "remote.requests_flatness", "wire.decode_vs_memcpy",
        "recovery.rescale4.share_skew"]
HISTORY_KEEP = 10
MEDIAN_OF = 3
WRITERS_LOCAL = [1, 16, 256, 1024]
WRITERS_REMOTE = [16, 256, 1024]


def parse_lines(path):
    """name -> (value as float or None, unit); the last line of a name wins."""
    out = {}
    for line in open(path, encoding="utf-8", errors="replace"):
        parts = line.split()
        if len(parts) < 2 or line.startswith("#"):
            continue
        try:
            v = float(parts[1])
        except ValueError:
            v = None
        if v is not None and v != v:   # nan
            v = None
        out[parts[0]] = (v, " ".join(parts[2:]))
    return out


def keep_history(report, lines_path):
    hist = os.path.join(report, "history")
    os.makedirs(hist, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    shutil.copyfile(lines_path, os.path.join(hist, stamp + ".txt"))
    runs = sorted(glob.glob(os.path.join(hist, "*.txt")))
    for old in runs[:-HISTORY_KEEP]:
        os.remove(old)
    return [parse_lines(p) for p in sorted(glob.glob(os.path.join(hist, "*.txt")))[-MEDIAN_OF:]], stamp


def fmt(v):
    if v is None:
        return "—"
    return f"{v:.3f}" if abs(v) < 100 else f"{v:.0f}"


def goal_rows(runs):
    now = runs[-1]
    rows = []
    for name, op, target, src in GOALS:
        vals = [r[name][0] for r in runs if name in r and r[name][0] is not None]
        med = statistics.median(vals) if vals else None
        if med is None:
            verdict = "no data"
        else:
            ok = med >= target if op == ">=" else med <= target
            verdict = "**met**" if ok else "**missed**"
        cur = now.get(name, (None, ""))[0]
        rows.append(f"| `{name}` | {op} {target:g} | {fmt(cur)} | {fmt(med)} ({len(vals)} run{'s' if len(vals) != 1 else ''}) "
                    f"| {verdict} | {src} |")
    return rows


def prom_histogram(path, metric="dstl_persist_latency_seconds"):
    """[(upper bound in seconds, cumulative count)] from a Prometheus text file, +Inf last as None."""
    pts = []
    for line in open(path, encoding="utf-8"):
        m = re.match(metric + r'_bucket\{le="([^"]+)"\} (\d+)', line)
        if m:
            le = None if m.group(1) == "+Inf" else float(m.group(1))
            pts.append((le, int(m.group(2))))
    return pts


def cdf_data(report, prefix):
    """Writes data/<run>.cdf (bound in ms, fraction at or below) per dump; returns [(label, file)]."""
    series = []
    for p in sorted(glob.glob(os.path.join(report, "prom", prefix + "*.prom")),
                    key=lambda p: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", p)]):
        pts = prom_histogram(p)
        total = pts[-1][1] if pts else 0
        if not total:
            continue
        label = os.path.basename(p)[:-5]
        f = os.path.join(report, "data", label + ".cdf")
        with open(f, "w") as o:
            last_zero = None
            for le, c in pts:
                if le is None:
                    break
                if c == 0:
                    last_zero = le   # the curve starts at the last empty bucket
                    continue
                if last_zero is not None:
                    o.write(f"{last_zero * 1000:g} 0\n")
                    last_zero = None
                o.write(f"{le * 1000:g} {c / total:.4f}\n")
                if c == total:
                    break
        series.append((label, f))
    return series


def throughput_data(report, now):
    f = os.path.join(report, "data", "throughput.dat")
    with open(f, "w") as o:
        o.write("# writers local_mb_s remote_mb_s\n")
        for n in sorted(set(WRITERS_LOCAL + WRITERS_REMOTE)):
            loc = now.get(f"local.load.w{n}.mb_s", (None,))[0]
            rem = now.get(f"remote.w{n}.mb_s", (None,))[0]
            o.write(f"{n} {loc if loc is not None else '?'} {rem if rem is not None else '?'}\n")
    return f


def gnuplot(script):
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip())


def plots(report, now):
    """Draws the PNGs; returns [(title, png)] and a note when gnuplot is missing or failed."""
    os.makedirs(os.path.join(report, "data"), exist_ok=True)
    tp = throughput_data(report, now)
    local = cdf_data(report, "local-")
    remote = cdf_data(report, "remote-")
    if not shutil.which("gnuplot"):
        return [], "gnuplot is not installed (scripts/deps.sh --perf installs it): no plots."
    head = 'set terminal pngcairo size 900,540 font ",10" noenhanced\nset grid\nset key outside right\n'
    out = []
    try:
        peers = []
        for name, title in (("fio.seg_buffered_mb_s", "fio, segment-sized writes, buffered"),
                            ("fio.seg_direct_mb_s", "fio, segment-sized writes, O_DIRECT")):
            v = now.get(name, (None,))[0]
            if v is not None:
                peers.append(f'{v} title "{title}" dt 2 lw 2')
        png = os.path.join(report, "throughput.png")
        gnuplot(head + f'set output "{png}"\nset logscale x 2\nset xlabel "writers"\nset ylabel "MB/s"\n'
                'set yrange [0:*]\nset xrange [0.7:1500]\n'
                'set title "Durable throughput against writers (flat out)"\n'
                f'plot "{tp}" using 1:2 with linespoints lw 2 title "DSTL local (fdatasync)", '
                f'"{tp}" using 1:3 with linespoints lw 2 title "DSTL remote (S3 acknowledged)"'
                + "".join(", " + p for p in peers) + "\n")
        out.append(("Throughput against writers", "throughput.png"))
        for series, name, title in ((local, "latency-local.png", "Local persist latency (CDF)"),
                                    (remote, "latency-remote.png", "Remote persist latency (CDF)")):
            if not series:
                continue
            png = os.path.join(report, name)
            lines = ", ".join(f'"{f}" using 1:2 with linespoints lw 2 title "{label}"' for label, f in series)
            gnuplot(head + f'set output "{png}"\nset logscale x 10\nset xlabel "persist latency (ms), '
                    'Prometheus buckets"\nset ylabel "fraction of persists at or below"\nset yrange [0:1.02]\n'
                    f'set title "{title}"\nplot {lines}\n')
            out.append((title, name))
    except (RuntimeError, OSError) as e:
        return out, f"gnuplot failed: {e}"
    return out, ""


def main():
    report, lines_path = sys.argv[1], sys.argv[2]
    os.makedirs(report, exist_ok=True)
    shutil.copyfile(lines_path, os.path.join(report, "lines.txt"))
    runs, stamp = keep_history(report, lines_path)
    now = runs[-1]
    figs, note = plots(report, now)
    md = [f"# DSTL perf report — {stamp}", "",
          "How to read this: [perf/README.md](../perf/README.md). Every ratio compares DSTL with a peer "
          "measured in the same run on the same machine.", "",
          f"## Goals (met or missed on the median of the last {MEDIAN_OF} runs in history/)", "",
          "| line | goal | this run | median | verdict | from |", "|---|---|---|---|---|---|"]
    md += goal_rows(runs)
    md += ["", "## Context", "", "| line | this run | unit |", "|---|---|---|"]
    for name in INFO:
        if name in now:
            md.append(f"| `{name}` | {fmt(now[name][0])} | {now[name][1]} |")
    md += ["", "## Plots", ""]
    if note:
        md += [note, ""]
    for title, png in figs:
        md += [f"### {title}", "", f"![{title}]({png})", ""]
    md += ["## All lines of this run", "", "```"] + [l.rstrip("\n") for l in open(lines_path)] + ["```", ""]
    path = os.path.join(report, "README.md")
    with open(path, "w") as f:
        f.write("\n".join(md))
    print(f"perf report: {os.path.abspath(path)}")


if __name__ == "__main__":
    main()
