#!/usr/bin/env bash
# perf/ckpt.sh BUILD_DIR [OUT_DIR] — FLIP-158's checkpoint benchmark (perf/bench_ckpt.c) against
# S3_ENDPOINT (perf/run.sh exports the RGW it starts). Prints, besides bench_ckpt's lines:
#   ckpt.changelog.p99_budget_ms     persist-delay (10 ms) + 1.3 x ckpt.changelog.peer_put_p99_ms:
#                                    bench_ckpt's PUT peer, one PUT of the changelog's mean segment
#                                    size per checkpoint interval during the changelog mode, on its
#                                    own S3 connection (the same bytes, the same run, the same load)
#   ckpt.changelog.p99_vs_budget     ckpt.changelog.p99_ms / the budget (goal <= 1)
#   ckpt.changelog.idle_put_p99_ms   100 bare PUTs of that size to the idle RGW after the run
#   ckpt.changelog.p99_vs_idle_budget  the ratio against a budget from those (for comparison)
# and draws OUT_DIR/ckpt-durations.png (gnuplot): both modes' checkpoint durations over the run.
# OUT_DIR defaults to BUILD_DIR/perf-out. The knobs are bench_ckpt's DSTL_CKPT_* (a short local
# run: DSTL_CKPT_CHECKPOINTS=30 DSTL_CKPT_STATE_MB=100).
set -euo pipefail
B=${1:?usage: perf/ckpt.sh BUILD_DIR [OUT_DIR]}
OUT=${2:-$B/perf-out}
: "${S3_ENDPOINT:?}" "${S3_ACCESS_KEY:?}" "${S3_SECRET_KEY:?}"
REGION=${S3_REGION:-us-east-1}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/dstl-perf-ckpt.XXXXXX)
trap 'rm -rf "$W"' EXIT
BUCKET=dstl-ckpt-$$
SIG=(--aws-sigv4 "aws:amz:$REGION:s3" --user "$S3_ACCESS_KEY:$S3_SECRET_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
curl -s -o /dev/null "${SIG[@]}" -X PUT "$S3_ENDPOINT/$BUCKET" || true
out="$W/lines"; : > "$out"
emit() { tee -a "$out"; }
val() { awk -v k="$1" '$1 == k { v = $2 } END { print v }' "$out"; }
echo "# checkpoints of the reference state backend (FLIP-158's benchmark shape), changelog then full"
"$B/perf/bench_ckpt" "$W/d" "$BUCKET" "$OUT" | emit || echo "perf/ckpt.sh: bench_ckpt failed (see above)" >&2
# the issue's sizing: a full snapshot takes >= 5 s (the full mode's p50), >= 300 checkpoints a mode
python3 - "$(val ckpt.state_mb)" "$(val ckpt.full.p50_ms)" "$(val ckpt.changelog.checkpoints)" "$(val ckpt.full.checkpoints)" <<'PY' | emit
import sys
mb, p50, ncl, nfull = (float(x) if x else float("nan") for x in sys.argv[1:])
ok = p50 >= 5000 and ncl >= 300 and nfull >= 300
print(f"ckpt.sizing {'ok' if ok else 'SHORT'} (state {mb:.0f} MB, full p50 {p50:.0f} ms >= 5000, "
      f"checkpoints {ncl:.0f} changelog / {nfull:.0f} full >= 300)")
PY
seg=$(val ckpt.changelog.segment_bytes); seg=${seg%.*}
if [ -n "$seg" ] && [ "$seg" -gt 0 ]; then
  "$B/perf/bench_remote" put "$W/p" "$BUCKET" "$seg" 100 > "$W/put.txt"
  python3 - "$W/put.txt" "$(val ckpt.changelog.p99_ms)" "$(val ckpt.changelog.peer_put_p99_ms)" <<'PY' | emit
import sys
put = {l.split()[0]: float(l.split()[1]) for l in open(sys.argv[1]) if len(l.split()) >= 2}
p99 = float(sys.argv[2] or 'nan')
peer_ms = float(sys.argv[3] or 'nan')
idle_ms = put.get("remote.put_p99_us", float("nan")) / 1000
# the budget: the PUT peer's p99 (the same bytes, PUT during the changelog mode, same RGW load)
budget = 10 + 1.3 * peer_ms
print(f"ckpt.changelog.p99_budget_ms {budget:.1f} ms")
print(f"ckpt.changelog.p99_vs_budget {p99 / budget:.3f} x")
# for comparison: the same PUTs to an idle RGW after the run (the former peer)
print(f"ckpt.changelog.idle_put_p99_ms {idle_ms:.1f} ms")
print(f"ckpt.changelog.p99_vs_idle_budget {p99 / (10 + 1.3 * idle_ms):.3f} x")
PY
fi
if command -v gnuplot >/dev/null && [ -s "$OUT/ckpt-changelog.dat" ]; then
  full=""; [ -s "$OUT/ckpt-full.dat" ] && full=", '$OUT/ckpt-full.dat' using 1:2 with points pt 7 ps 0.4 lc rgb '#d62728' title 'full snapshot every checkpoint (baseline)'"
  gnuplot <<GP && echo "# plot: $OUT/ckpt-durations.png"
set terminal png size 1100,600
set output '$OUT/ckpt-durations.png'
set title 'Checkpoint duration, P = ${DSTL_CKPT_TASKS:-50} tasks, state $(val ckpt.state_mb) MB, a checkpoint every 1 s (trigger to the last task durable)'
set xlabel 'time into the mode (s)'
set ylabel 'checkpoint duration (ms)'
set logscale y
set grid
set key bottom right
plot '$OUT/ckpt-changelog.dat' using 1:2 with points pt 7 ps 0.4 lc rgb '#1f77b4' title 'changelog (DSTL + materialization)'$full
GP
fi
