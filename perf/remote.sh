#!/usr/bin/env bash
# perf/remote.sh BUILD_DIR — remote-durability lines (issue 5) against S3_ENDPOINT (perf/run.sh
# exports the RGW it starts, or the user's endpoint from DSTL_PERF_S3_*):
#   remote.wN.mb_s                              N = 16, 256, 1024, appending flat out
#   remote.wN.{requests_s,persist_p99_us}       the same writers offering 20 MB/s in all
#                                               (DSTL_PERF_REMOTE_RATE_MB_S)
#   remote.requests_flatness                    w1024 requests/s / w16 requests/s
#   remote.wN.peer_put_{p50,p99}_us             the rate runs' PUT peer: a PUT of the run's mean
#                                               segment size every 100 ms on its own connection,
#                                               during the run (perf/put_peer.h)
#   remote.p99_vs_put                           (w256 persist p99 - persist-delay) / w256 peer p99
#   remote.put_p99_us, remote.p99_vs_idle_put   50 bare PUTs of that size after the runs, to
#                                               the idle server, and the ratio against them
#   recovery.wN.{mb_s,requests,first_record_ms}  the flat-out runs' last handles restored from
#                                               S3 alone by one restore plan, every task at once,
#                                               in DSTL_PERF_RECOVERY_ROUNDS rounds (default 3)
#                                               alternating with the raw GETs below; the median
#                                               round's lines (recovery.wN.roundK.* each round's)
#   recovery.wN.{ms,plan_ms,fetch_done_ms,cpu_ms}  where that restore's time goes: in all, in
#                                               dstl_restore_plan, until its last byte came, and
#                                               the bench's CPU time (the RGW shares the cores);
#                                               recovery.wN.roundK.{plan_ms,plan_cpu_ms} the
#                                               plan's wall and thread CPU time in each round
#   recovery.wN.raw_get_mb_s, recovery.wN.vs_raw  curl GETs (8 at a time) of the same objects,
#                                               one before or after each restore round (rawget.sh,
#                                               run by bench_remote); vs_raw = the restores' median
#                                               fetched MB/s / the raw GETs' median MB/s
#   recovery.wN.requests_vs_objects             GETs / objects needed (all key groups read)
#   recovery.small_get_p99_ms                   sequential GETs of a 4 KiB object
#   recovery.wN.first_record_vs_get             first_record_ms / small_get_p99_ms
#   recovery.rescale4.bytes_ratio               (w256) four quarter-key-group tasks, each in its
#                                               own storage: the largest bytes fetched / (full / 4)
#   recovery.rescale4.share_skew                the largest of those tasks' share of the records
#                                               / 0.25: the workload's balance (1.0 even)
#   recovery.mb_s, recovery.raw_get_mb_s, recovery.vs_raw   the w256 values (earlier names)
#   remote.w256.enc_mb_s, recovery.w256.enc_mb_s, recovery.enc_vs_plain
#                                               the flat-out w256 run and its recovery with
#                                               encryption at rest, against a plain run made
#                                               just before it
# DSTL_PERF_RECOVERY_ONLY=1 runs just the flat-out runs and the recovery lines;
# DSTL_PERF_RECOVERY_NS="16" (default "16 256 1024") picks the writer counts run.
set -euo pipefail
B=${1:?usage: perf/remote.sh BUILD_DIR}
: "${S3_ENDPOINT:?}" "${S3_ACCESS_KEY:?}" "${S3_SECRET_KEY:?}"
REGION=${S3_REGION:-us-east-1}
SECS=${DSTL_PERF_SECONDS:-5}
W=$(mktemp -d /tmp/dstl-perf-remote.XXXXXX)
BUCKET=${DSTL_PERF_S3_BUCKET:-dstl-bench-$$}
SIG=(--aws-sigv4 "aws:amz:$REGION:s3" --user "$S3_ACCESS_KEY:$S3_SECRET_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
# The bucket this script made is emptied and removed at exit: the runs leave every segment
# their last handles name, a few GB per make perf, and repeated runs against one server filled
# a 20 GiB BlueStore OSD until its PUTs hung. A bucket the user named (DSTL_PERF_S3_BUCKET), or
# one that existed before, is left as it is: it may hold what others still need.
empty_bucket() {
  local body i
  for i in $(seq 1 2000); do           # 1,000 keys a round: at most 2 M objects
    body=$(curl -sf "${SIG[@]}" "$S3_ENDPOINT/$BUCKET?list-type=2&max-keys=1000" | python3 -c '
import re, sys
keys = re.findall(r"<Key>(.*?)</Key>", sys.stdin.read())   # still XML-escaped: reused as is
if keys:
    print("<Delete><Quiet>true</Quiet>" + "".join(f"<Object><Key>{k}</Key></Object>" for k in keys) + "</Delete>")
') || return 1
    [ -n "$body" ] || return 0
    printf '%s' "$body" > "$W/delete.xml"      # DeleteObjects ("delete=": curl signs it so)
    curl -sf -o /dev/null "${SIG[@]}" -H "Content-Type: application/xml" \
      -H "Content-MD5: $(openssl dgst -md5 -binary "$W/delete.xml" | base64)" \
      -X POST --data-binary @"$W/delete.xml" "$S3_ENDPOINT/$BUCKET?delete=" || return 1
  done
  return 1
}
cleanup() {
  if [ "$MADE_BUCKET" = 1 ]; then
    if ! empty_bucket || ! curl -sf -o /dev/null "${SIG[@]}" -X DELETE "$S3_ENDPOINT/$BUCKET"; then
      echo "perf/remote.sh: could not empty and remove bucket $BUCKET at $S3_ENDPOINT; remove it by hand" >&2
    fi
  fi
  rm -rf "$W"
}
# Made here only when it did not exist before (a HEAD answered 404): a bucket that happens to
# carry the name already is someone's, and is never emptied.
MADE_BUCKET=0
trap cleanup EXIT
if [ -z "${DSTL_PERF_S3_BUCKET:-}" ] &&
   [ "$(curl -s -o /dev/null -w '%{http_code}' "${SIG[@]}" -I "$S3_ENDPOINT/$BUCKET")" = 404 ] &&
   curl -sf -o /dev/null "${SIG[@]}" -X PUT "$S3_ENDPOINT/$BUCKET"; then
  MADE_BUCKET=1
else
  curl -s -o /dev/null "${SIG[@]}" -X PUT "$S3_ENDPOINT/$BUCKET" || true
fi
out="$W/lines"; : > "$out"
emit() { tee -a "$out"; }
val() { awk -v k="$1" '$1 == k { v = $2 } END { print v }' "$out"; }
RATE=${DSTL_PERF_REMOTE_RATE_MB_S:-20}   # offered load for the rate and latency lines
ONLY=${DSTL_PERF_RECOVERY_ONLY:-0}
# The raw-GET peer: every object of KEYS_FILE ("key size" lines), 8 at a time (the plan's
# connections); prints the seconds the GETs took. bench_remote runs it between restore rounds.
cat > "$W/rawget.sh" <<RAW
#!/usr/bin/env bash
set -euo pipefail
cfg="\$1.cfg"; (umask 077; printf 'user = "%s:%s"\n' "\$S3_ACCESS_KEY" "\$S3_SECRET_KEY" > "\$cfg")
while read -r key size; do
  printf 'url = "%s/%s/%s"\noutput = "/dev/null"\n' "$S3_ENDPOINT" "$BUCKET" "\$key" >> "\$cfg"
done < "\$1"
t0=\$(date +%s.%N)
curl -sf --parallel --parallel-max 8 --aws-sigv4 "aws:amz:$REGION:s3" \\
  -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -K "\$cfg" 2>/dev/null
t1=\$(date +%s.%N)
awk -v a="\$t0" -v z="\$t1" 'BEGIN { printf "%.6f\n", z - a }'
RAW
chmod +x "$W/rawget.sh"
export DSTL_PERF_RAW_GET="$W/rawget.sh"
for n in ${DSTL_PERF_RECOVERY_NS:-16 256 1024}; do
  extra=(); [ "$n" = 256 ] && extra=(rescale)
  "$B/perf/bench_remote" load "$W/d$n" "$BUCKET" "$n" "$SECS" 0 "$W/keys$n" "${extra[@]}" | emit
  [ "$ONLY" = 1 ] || "$B/perf/bench_remote" load "$W/r$n" "$BUCKET" "$n" "$SECS" "$RATE" "" | emit
done
if [ "$ONLY" != 1 ]; then
seg=$(val remote.w256.segment_mean_bytes); seg=${seg%.*}; seg=${seg:-1048576}
"$B/perf/bench_remote" put "$W/p" "$BUCKET" "$seg" 50 | emit
python3 - "$(val remote.w1024.requests_s)" "$(val remote.w16.requests_s)" "$(val remote.w256.persist_p99_us)" \
  "$(val remote.w256.peer_put_p99_us)" "$(val remote.put_p99_us)" <<'PY' | emit
import sys
r1024, r16, p99, peer, idle = (float(x or 'nan') for x in sys.argv[1:6])
print(f"remote.requests_flatness {r1024 / r16:.3f} x")
print(f"remote.p99_vs_put {(p99 - 10000) / peer:.3f} x")
print(f"remote.p99_vs_idle_put {(p99 - 10000) / idle:.3f} x")
PY
fi
# the latency of a small GET: 50 sequential GETs of a 4 KiB object, p99 (the 50th of 50: the max)
head -c 4096 /dev/urandom > "$W/small"
curl -sf -o /dev/null "${SIG[@]}" -T "$W/small" "$S3_ENDPOINT/$BUCKET/perf-small-$$"
for i in $(seq 50); do
  curl -sf -o /dev/null -w '%{time_total}\n' "${SIG[@]}" "$S3_ENDPOINT/$BUCKET/perf-small-$$"
done | sort -n | awk '{v[NR] = $1} END {i = int(NR * 0.99); if (i < 1) i = 1; printf "recovery.small_get_p99_ms %.2f ms\n", v[i] * 1000}' | emit
curl -sf -o /dev/null "${SIG[@]}" -X DELETE "$S3_ENDPOINT/$BUCKET/perf-small-$$" || true
for n in ${DSTL_PERF_RECOVERY_NS:-16 256 1024}; do
  awk -v a="$(val recovery.w$n.first_record_ms)" -v b="$(val recovery.small_get_p99_ms)" -v n="$n" \
    'BEGIN{printf "recovery.w%d.first_record_vs_get %.2f x\n", n, b ? a/b : 0}' | emit
done
echo "recovery.mb_s $(val recovery.w256.mb_s) MB/s" | emit
echo "recovery.raw_get_mb_s $(val recovery.w256.raw_get_mb_s) MB/s" | emit
echo "recovery.vs_raw $(val recovery.w256.vs_raw) x" | emit
# encryption at rest: a plain w256 run, then the same with a key file, one after the other
(umask 077; printf 'bench: %s\n' "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" > "$W/enc.keys")
"$B/perf/bench_remote" load "$W/pe" "$BUCKET" 256 "$SECS" 0 "" > "$W/plain.txt"
DSTL_ENCRYPTION_KEY_FILE="$W/enc.keys" "$B/perf/bench_remote" load "$W/ee" "$BUCKET" 256 "$SECS" 0 "" > "$W/enc.txt"
python3 - "$W/plain.txt" "$W/enc.txt" <<'PY' | emit
import sys
def lines(p):
    return {l.split()[0]: float(l.split()[1]) for l in open(p) if len(l.split()) >= 2}
p, e = lines(sys.argv[1]), lines(sys.argv[2])
w, r = e.get("remote.w256.mb_s", float("nan")), e.get("recovery.w256.mb_s", float("nan"))
pw, pr = p.get("remote.w256.mb_s", float("nan")), p.get("recovery.w256.mb_s", float("nan"))
print(f"remote.w256.enc_mb_s {w:.1f} MB/s")
print(f"remote.enc_vs_plain {w / pw:.3f} x")
print(f"recovery.w256.enc_mb_s {r:.1f} MB/s")
print(f"recovery.enc_vs_plain {r / pr:.3f} x")
PY
