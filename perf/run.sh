#!/usr/bin/env bash
# perf/run.sh BUILD_DIR — the benchmark suite (`make perf`). Prints `name value unit` lines.
#
# Every ratio compares against a peer measured in this same run on this same disk (the
# machine is shared and noisy; absolute numbers drift): memcpy for the append path, fio for
# durable sequential writes and fdatasync latency, RocksDB's WAL group commit for durable
# commits, rclone and curl for S3. Data goes to a temp dir on the work tree's disk.
# Nothing here asserts: goals are read off the ratio lines.
set -uo pipefail
B=${1:?usage: perf/run.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/dstl-perf.XXXXXX")
trap 'rm -rf "$T"' EXIT
SECS=${DSTL_PERF_SECONDS:-5}
out="$T/lines"
: > "$out"
emit() { tee -a "$out"; }
val() { awk -v k="$1" '$1 == k { v = $2 } END { print v }' "$out"; }
ratio() { python3 -c "import sys; a,b=float(sys.argv[1] or 0),float(sys.argv[2] or 0); print(f'{a/b:.3f}' if b else 'nan')" "$1" "$2"; }

echo "# wire"
"$B/perf/bench_wire" | emit

echo "# local durability (dstl.durability: local)"
rm -rf "$T/d"; "$B/perf/bench_local" append "$T/d" | emit
for n in 1 16 256 1024; do
  rm -rf "$T/d"; "$B/perf/bench_local" load "$T/d" "$n" "$SECS" | emit
done
rm -rf "$T/d"; "$B/perf/bench_local" load-enc "$T/d" 16 "$((SECS * 2))" | emit
rm -rf "$T/d"; "$B/perf/bench_local" light "$T/d" 16 "$SECS" | emit
rm -rf "$T/d"; "$B/perf/bench_local" commits "$T/d" 64 "$SECS" | emit

echo "# peers on the same disk"
mkdir -p "$T/fio"
fio --name=seq --directory="$T/fio" --ioengine=io_uring --rw=write --bs=1m --size=512m --fdatasync=1 \
    --output-format=json 2>/dev/null > "$T/fio-seq.json"
python3 - "$T/fio-seq.json" <<'EOF' | emit
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
print(f"fio.seq_fdatasync_mb_s {j['write']['bw_bytes'] / 1e6:.1f} MB/s")
EOF
rm -rf "$T/fio"; mkdir -p "$T/fio"
fio --name=lat --directory="$T/fio" --ioengine=io_uring --rw=write --bs=4k --size=16m --fdatasync=1 \
    --output-format=json 2>/dev/null > "$T/fio-lat.json"
python3 - "$T/fio-lat.json" <<'EOF' | emit
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
p = j["sync"]["lat_ns"]["percentile"]
print(f"fio.fdatasync_4k_p50_us {p['50.000000'] / 1000:.0f} us")
print(f"fio.fdatasync_4k_p99_us {p['99.000000'] / 1000:.0f} us")
EOF
rm -rf "$T/fio"
db_bench --benchmarks=fillrandom --sync=1 --threads=64 --value_size=100 --num=1000000 --duration="$SECS" \
    --histogram=1 --db="$T/rocks" > "$T/rocks.txt" 2>&1
python3 - "$T/rocks.txt" <<'EOF' | emit
import re, sys
t = open(sys.argv[1]).read()
ops = re.search(r"fillrandom\s*:\s*[\d.]+ micros/op (\d+) ops/sec", t)
p99 = re.search(r"P99: ([\d.]+)", t)
print(f"rocksdb.sync_commits_s {ops.group(1) if ops else 'nan'} commits/s")
print(f"rocksdb.sync_p99_us {float(p99.group(1)):.0f} us" if p99 else "rocksdb.sync_p99_us nan us")
EOF
rm -rf "$T/rocks"

echo "# local ratios"
best=0
for n in 1 16 256 1024; do
  v=$(val "local.load.w$n.mb_s"); best=$(python3 -c "print(max($best, ${v:-0}))")
done
echo "local.best_mb_s $best MB/s" | emit
echo "local.vs_fio $(ratio "$best" "$(val fio.seq_fdatasync_mb_s)") x" | emit
budget=$(python3 -c "print(10000 + 1.5 * float('$(val fio.fdatasync_4k_p99_us)' or 0))")
echo "local.p99_budget_us $budget us" | emit
echo "local.p99_vs_budget $(ratio "$(val local.light.w16.persist_p99_us)" "$budget") x" | emit
echo "local.commits_vs_rocksdb $(ratio "$(val local.commits_s_w64)" "$(val rocksdb.sync_commits_s)") x" | emit
echo "local.commit_p99_vs_rocksdb $(ratio "$(val local.commit_p99_us_w64)" "$(val rocksdb.sync_p99_us)") x" | emit
rss=$(val local.load.w1024.rss_peak_mb)
echo "local.rss_peak_mb $rss MB" | emit
echo "local.rss_vs_budget $(ratio "$rss" $((100 + 64))) x" | emit
echo "local.cost_flatness $(ratio "$(val local.load.w1024.cpu_us_per_mb)" "$(val local.load.w16.cpu_us_per_mb)") x" | emit

echo "# S3 client and remote durability (Ceph RGW, BlueStore, started for this run, unless"
echo "# DSTL_PERF_S3_ENDPOINT and its keys name your own endpoint)"
{
  if [ -n "${DSTL_PERF_S3_ENDPOINT:-}" ]; then
    export S3_ENDPOINT=$DSTL_PERF_S3_ENDPOINT S3_ACCESS_KEY=${DSTL_PERF_S3_ACCESS_KEY:?} \
           S3_SECRET_KEY=${DSTL_PERF_S3_SECRET_KEY:?} S3_REGION=${DSTL_PERF_S3_REGION:-us-east-1}
    "$here/s3.sh" "$B" | emit
    "$here/remote.sh" "$B" | emit
  else
    port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()')
    if "$here/../tests/s3/rgw-up.sh" "$T/rgw" "$port" bluestore > "$T/rgw.log" 2>&1; then
      trap '"$here/../tests/s3/s3-down.sh" "$T/rgw" >/dev/null 2>&1; rm -rf "$T"' EXIT
      set -a; . "$T/rgw/env"; set +a
      "$here/s3.sh" "$B" | emit
      "$here/remote.sh" "$B" | emit
    else
      echo "perf: the S3 server did not start; s3.* lines missing (see its log below)" >&2
      tail -n 20 "$T/rgw.log" >&2
    fi
  fi
}
# checkpoints of the reference state backend (issue 15), against the S3 server above
[ -n "${S3_ENDPOINT:-}" ] && "$here/ckpt.sh" "$B" | emit
