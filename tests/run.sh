#!/usr/bin/env bash
# tests/run.sh BUILD_DIR [PATTERN] — runs every Criterion test binary of a build.
#
# Starts the S3 server the tests need (Ceph RGW, memstore) once, on a free loopback port,
# when a selected binary needs it (test_s3_*, test_remote_*), and stops it at the end, also
# on failure or interrupt. With DSTL_TEST_S3_ENDPOINT (+ _ACCESS_KEY, _SECRET_KEY, _REGION)
# set, tests run against that endpoint instead and no server is started.
# Exits non-zero when any test fails or crashes, or when the server cannot start. A test that
# skips (cr_skip_test: e.g. an I/O engine the kernel lacks, t_engine_or_skip) is shown with its
# reason under its binary and counted in the last line; it neither passes nor fails.
set -uo pipefail
B=${1:?usage: tests/run.sh BUILD_DIR [PATTERN]}
PATTERN=${2:-}
here=$(cd "$(dirname "$0")" && pwd)

bins=()
for t in "$B"/tests/test_*; do
  [ -x "$t" ] || continue
  [ -n "$PATTERN" ] && [[ "$(basename "$t")" != *$PATTERN* ]] && continue
  bins+=("$t")
done
[ ${#bins[@]} -gt 0 ] || { echo "run.sh: no test binaries in $B/tests matching '${PATTERN}'" >&2; exit 1; }

needs_s3=0
for t in "${bins[@]}"; do case "$(basename "$t")" in test_s3_*|test_remote_*|test_backend_remote*) needs_s3=1 ;; esac; done

S3DIR=""
stop_s3() { [ -n "$S3DIR" ] && "$here/s3/s3-down.sh" "$S3DIR/rgw" >/dev/null 2>&1; [ -n "$S3DIR" ] && rm -rf "$S3DIR"; S3DIR=""; }
trap stop_s3 EXIT
trap 'exit 130' INT TERM

if [ $needs_s3 = 1 ]; then
  if [ -n "${DSTL_TEST_S3_ENDPOINT:-}" ]; then
    export DSTL_T_S3_ENDPOINT=$DSTL_TEST_S3_ENDPOINT
    export DSTL_T_S3_ACCESS_KEY=${DSTL_TEST_S3_ACCESS_KEY:?DSTL_TEST_S3_ACCESS_KEY is needed with DSTL_TEST_S3_ENDPOINT}
    export DSTL_T_S3_SECRET_KEY=${DSTL_TEST_S3_SECRET_KEY:?DSTL_TEST_S3_SECRET_KEY is needed with DSTL_TEST_S3_ENDPOINT}
    export DSTL_T_S3_REGION=${DSTL_TEST_S3_REGION:-us-east-1}
    echo "run.sh: S3 tests against the external endpoint $DSTL_T_S3_ENDPOINT"
  else
    S3DIR=$(mktemp -d /tmp/dstl-test-s3.XXXXXX)
    port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()')
    if ! "$here/s3/rgw-up.sh" "$S3DIR/rgw" "$port" memstore > "$S3DIR/up.log" 2>&1; then
      echo "run.sh: FAILED to start the S3 test server (Ceph RGW); its output:" >&2
      tail -n 30 "$S3DIR/up.log" >&2
      for f in "$S3DIR"/rgw/log/*; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
      echo "0 passed, 1 failed"
      exit 1
    fi
    set -a; . "$S3DIR/rgw/env"; set +a
    # secrets never appear in output: the server's start-up lines must not hold its secret key
    if grep -qF -- "$S3_SECRET_KEY" "$S3DIR/up.log"; then
      echo "run.sh: FAILED: tests/s3/rgw-up.sh printed the S3 secret key in its output" >&2
      echo "0 passed, 1 failed"
      exit 1
    fi
    tail -n 1 "$S3DIR/up.log"
    export DSTL_T_S3_ENDPOINT=$S3_ENDPOINT DSTL_T_S3_ACCESS_KEY=$S3_ACCESS_KEY \
           DSTL_T_S3_SECRET_KEY=$S3_SECRET_KEY DSTL_T_S3_REGION=$S3_REGION
  fi
fi

export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$here/lsan.supp:print_suppressions=0}
export DSTL_TEST_TOOLS=$(cd "$B" && pwd)/tools DSTL_TEST_BIN=$(cd "$B" && pwd)/dstl
export DSTL_TEST_DATA=$here/data

passed=0; failed=0; skipped=0; bad=()
for t in "${bins[@]}"; do
  name=$(basename "$t")
  log=$(mktemp /tmp/dstl-test-log.XXXXXX)
  echo "== $name"
  # A bound on every binary, so a hang is a failure, not a stuck CI. --verbose: Criterion (and
  # the shim) name skipped tests and their reasons only then.
  timeout --kill-after=10 1200 "$t" --jobs 2 --short-filename --verbose > "$log" 2>&1
  rc=$?
  grep -v '^\[----\] ' "$log" | grep -E 'FAIL|CRASH|Assertion|Synthesis|ERROR|WARNING: ThreadSanitizer|runtime error|^\[SKIP\] ' | head -n 60
  s=$(grep -c '^\[SKIP\] ' "$log")
  skipped=$((skipped + s))
  syn=$(grep 'Synthesis:' "$log" | tail -n 1)
  p=$(sed -n 's/.*Passing: \([0-9]*\).*/\1/p' <<<"$syn"); p=${p:-0}
  f=$(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' <<<"$syn"); f=${f:-0}
  # Criterion counts crashes among the failures already.
  passed=$((passed + p)); failed=$((failed + f))
  if [ $rc -ne 0 ] || [ -z "$syn" ]; then
    if [ "$f" -eq 0 ]; then failed=$((failed + 1)); fi
    bad+=("$name (exit $rc)")
    echo "--- $name exited $rc; last lines:"; tail -n 40 "$log"
  fi
  rm -f "$log"
done

echo
[ ${#bad[@]} -gt 0 ] && printf 'failed binaries: %s\n' "${bad[*]}"
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ] && [ ${#bad[@]} -eq 0 ]
