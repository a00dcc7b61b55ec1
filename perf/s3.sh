#!/usr/bin/env bash
# perf/s3.sh BUILD_DIR — the s3.* benchmark lines: the s3/ client (perf/bench_s3.c) beside
# rclone and plain curl against the same server, same bytes, same part size and concurrency.
# Needs S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY (S3_REGION) in the environment (perf/run.sh
# exports them for the RGW it starts). Prints `name value unit` lines:
#   s3.md5_mb_s s3.crc32c_mb_s s3.sha256_mb_s        (bench_s3: hashing in memory, no server)
#   s3.mpu_mb_s s3.put4k_p50_us s3.put4k_p99_us      (bench_s3)
#   s3.rclone_mb_s s3.vs_rclone                      (rclone copyto, 256 MiB, 8 MiB chunks, 4 at once)
#   s3.raw_mb_s s3.vs_raw                            (curl --parallel-max 4, 32 x 8 MiB PUTs)
#   s3.raw_put4k_p99_us                              (one curl, 1,000 sequential 4 KiB PUTs)
# Goals (issue 4): vs_rclone >= 1.5, vs_raw >= 0.8, put4k_p99 <= 1.2 x raw_put4k_p99.
set -euo pipefail
B=${1:?usage: perf/s3.sh BUILD_DIR}
: "${S3_ENDPOINT:?S3_ENDPOINT must be set}" "${S3_ACCESS_KEY:?}" "${S3_SECRET_KEY:?}"
REGION=${S3_REGION:-us-east-1}
W=$(mktemp -d /tmp/dstl-perf-s3.XXXXXX)
BUCKET=dstl-bench-raw-$$
SIG=(--aws-sigv4 "aws:amz:$REGION:s3" --user "$S3_ACCESS_KEY:$S3_SECRET_KEY")
cleanup() {
  # best effort: remove what the peers wrote, then the bucket
  if [ -f "$W/keys" ]; then
    while read -r k; do curl -s -o /dev/null "${SIG[@]}" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
      -X DELETE "$S3_ENDPOINT/$BUCKET/$k" || true; done < "$W/keys"
  fi
  curl -s -o /dev/null "${SIG[@]}" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X DELETE "$S3_ENDPOINT/$BUCKET" || true
  rm -rf "$W"
}
trap cleanup EXIT

now() { date +%s.%N; }

# ---- the s3/ client ----
out=$("$B/perf/bench_s3")
echo "$out"
mpu=$(awk '$1=="s3.mpu_mb_s"{print $2}' <<<"$out")

# ---- the same bytes for the peers ----
head -c $((256 << 20)) /dev/urandom > "$W/data"
curl -sf -o /dev/null "${SIG[@]}" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X PUT "$S3_ENDPOINT/$BUCKET"

# ---- rclone: 256 MiB, 8 MiB chunks, 4 concurrent, configured by environment only ----
best_rclone=0
for i in 1 2 3; do
  t0=$(now)
  env -u AWS_CA_BUNDLE RCLONE_CONFIG_DSTLBENCH_TYPE=s3 RCLONE_CONFIG_DSTLBENCH_PROVIDER=Ceph \
      RCLONE_CONFIG_DSTLBENCH_ACCESS_KEY_ID="$S3_ACCESS_KEY" \
      RCLONE_CONFIG_DSTLBENCH_SECRET_ACCESS_KEY="$S3_SECRET_KEY" \
      RCLONE_CONFIG_DSTLBENCH_ENDPOINT="$S3_ENDPOINT" RCLONE_CONFIG_DSTLBENCH_REGION="$REGION" \
      RCLONE_CONFIG=/dev/null \
      rclone copyto --s3-chunk-size 8M --s3-upload-concurrency 4 --s3-upload-cutoff 16M \
        --s3-disable-checksum "$W/data" "dstlbench:$BUCKET/rclone-$i" 2>"$W/rclone.err" \
    || { echo "perf/s3.sh: rclone failed:" >&2; cat "$W/rclone.err" >&2; exit 1; }
  echo "rclone-$i" >> "$W/keys"
  r=$(awk -v t0="$t0" -v t1="$(now)" 'BEGIN{printf "%.1f", 256/(t1-t0)}')
  best_rclone=$(awk -v a="$best_rclone" -v b="$r" 'BEGIN{print (b>a)?b:a}')
done
echo "s3.rclone_mb_s $best_rclone MiB/s"
awk -v a="$mpu" -v b="$best_rclone" 'BEGIN{printf "s3.vs_rclone %.2f x\n", a/b}'

# ---- raw curl: 32 x 8 MiB PUTs, 4 in parallel ----
split -b $((8 << 20)) -d -a 2 "$W/data" "$W/part."
: > "$W/raw.cfg"
for i in $(seq -w 0 31); do
  printf 'url = "%s/%s/raw-%s"\nupload-file = "%s/part.%s"\n' "$S3_ENDPOINT" "$BUCKET" "$i" "$W" "$i" >> "$W/raw.cfg"
  echo "raw-$i" >> "$W/keys"
done
t0=$(now)
curl -sf --no-progress-meter -o /dev/null --parallel --parallel-max 4 "${SIG[@]}" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -K "$W/raw.cfg"
raw=$(awk -v t0="$t0" -v t1="$(now)" 'BEGIN{printf "%.1f", 256/(t1-t0)}')
echo "s3.raw_mb_s $raw MiB/s"
awk -v a="$mpu" -v b="$raw" 'BEGIN{printf "s3.vs_raw %.2f x\n", a/b}'

# ---- raw curl: 1,000 sequential 4 KiB PUTs on one connection ----
head -c 4096 /dev/urandom > "$W/4k"
: > "$W/p4k.cfg"
for i in $(seq -w 0 999); do
  printf 'url = "%s/%s/rawp4k-%s"\nupload-file = "%s/4k"\n' "$S3_ENDPOINT" "$BUCKET" "$i" "$W" >> "$W/p4k.cfg"
  echo "rawp4k-$i" >> "$W/keys"
done
curl -s -o /dev/null -w '%{time_total}\n' "${SIG[@]}" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
  -K "$W/p4k.cfg" > "$W/p4k.times"
sort -g "$W/p4k.times" | awk '{a[NR]=$1} END{printf "s3.raw_put4k_p99_us %.0f us\n", a[int(NR*0.99)]*1e6}'
