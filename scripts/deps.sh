#!/usr/bin/env bash
# The one list of what DSTL needs from Debian 12, and the one place that installs it.
# The Makefile runs this when its stamp file is missing; .ci/run runs it on a fresh machine.
#
#   scripts/deps.sh            install what is missing (root, or sudo when not root)
#   scripts/deps.sh --check    exit 0 when everything is present, 1 (and list) when not
#   scripts/deps.sh --list     print the package names
set -euo pipefail

# Build and library dependencies.
BUILD_PKGS=(
  build-essential pkg-config
  libcurl4-openssl-dev   # HTTP for s3/
  libssl-dev             # SHA-256, HMAC, AES-GCM, TLS
  protobuf-c-compiler libprotobuf-c-dev   # wire/dstl.proto
  liburing-dev libaio-dev                 # local store engines
  libcriterion-dev                        # tests
  libxml2-dev                             # S3 XML responses
  libisal-dev                             # (optional fast CRC32C; SSE4.2 path is built in)
  liblz4-dev libzstd-dev                  # section compression
  clang libclang-rt-14-dev                # libFuzzer targets (make fuzz)
  libfuse3-dev fuse3                      # tests: the power-cut simulator (tests/tools/powercut_fs.c)
  prometheus                              # tests: promtool checks the metrics file (tests/test_dstl_stats.c)
  curl python3
)
# The S3 server the tests and the perf suite start (Ceph RGW; see tests/s3/README.md).
S3_PKGS=(ceph-mon ceph-osd radosgw)
# Peers the perf suite compares against (make perf only; installed on demand).
PERF_PKGS=(fio rocksdb-tools rclone gnuplot-nox)   # gnuplot: the report's plots (perf/report.py, perf/ckpt.sh)

want=("${BUILD_PKGS[@]}" "${S3_PKGS[@]}")
case "${1:-}" in
  --list) printf '%s\n' "${want[@]}" "${PERF_PKGS[@]}"; exit 0 ;;
  --perf) want+=("${PERF_PKGS[@]}") ;;
  --check|"") ;;
  *) echo "usage: $0 [--check|--list|--perf]" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "${1:-}" = "--check" ]; then printf 'missing: %s\n' "${missing[*]}"; exit 1; fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else
    echo "deps.sh: not root and no sudo; install these Debian packages yourself:" >&2
    echo "  apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
fi
echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# One update per install: a fresh machine's package lists may be empty or stale.
"${SUDO[@]}" apt-get update -qq
if ! "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
  echo "deps.sh: apt-get install failed; the packages needed are: ${missing[*]}" >&2
  exit 1
fi
