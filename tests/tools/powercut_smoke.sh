#!/usr/bin/env bash
# tests/tools/powercut_smoke.sh POWERCUT_FS — proves that a FUSE mount works on this machine,
# which the power-cut tests (tests/test_dstl_powercut.c) need: mounts the simulator on a temp
# dir, writes + fsyncs a file and its directory, reads it back, cuts power, unmounts, mounts
# again on the same backing dir and reads the file there. .ci/run runs it first; it exits
# non-zero, saying which step failed, when the machine cannot mount FUSE (no /dev/fuse, no
# fuse3, not root, no permission in a container).
set -uo pipefail
fs=${1:?usage: tests/tools/powercut_smoke.sh POWERCUT_FS}
d=$(mktemp -d /tmp/dstl-fuse-smoke.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  rm -rf "$d"
}
trap cleanup EXIT
fail() {
  echo "FUSE smoke test FAILED: $*" >&2
  [ -s "$d/err" ] && { echo "--- powercut_fs stderr:" >&2; cat "$d/err" >&2; }
  exit 1
}

[ -x "$fs" ] || fail "$fs is missing (make $fs)"
[ -c /dev/fuse ] || fail "/dev/fuse is missing (modprobe fuse; in a container: --device /dev/fuse --cap-add SYS_ADMIN)"
mkdir "$d/back" "$d/m1" "$d/m2"

mount_fs() {   # mount_fs MOUNTPOINT
  : > "$d/out"
  "$fs" "$d/back" "$1" > "$d/out" 2>> "$d/err" &
  pid=$!
  for _ in $(seq 100); do
    grep -q '^ready$' "$d/out" && break
    kill -0 "$pid" 2>/dev/null || { wait "$pid"; local rc=$?; pid=""; fail "powercut_fs could not mount $1 (exit $rc)"; }
    sleep 0.1
  done
  grep -q '^ready$' "$d/out" || fail "powercut_fs did not come up on $1 within 10 s"
  [ "$(stat -f -c %t "$1")" = 65735546 ] || fail "$1 is not a FUSE mount"
}
stop_fs() {
  kill -TERM "$pid"
  wait "$pid"
  local rc=$?
  pid=""
  [ $rc -eq 0 ] || fail "powercut_fs exited $rc"
}

mount_fs "$d/m1"
printf 'hello fuse' | dd of="$d/m1/f" conv=fsync status=none || fail "write + fsync of $d/m1/f"
sync "$d/m1" || fail "fsync of the directory $d/m1"
[ "$(cat "$d/m1/f")" = "hello fuse" ] || fail "read back of $d/m1/f"
printf 'lost' > "$d/m1/unsynced" || fail "write of $d/m1/unsynced"
echo -n cut > "$d/m1/.powercut" || fail "the cut"
stop_fs
mount_fs "$d/m2"
[ "$(cat "$d/m2/f" 2>/dev/null)" = "hello fuse" ] || fail "after the remount, $d/m2/f does not hold what was synced"
[ ! -e "$d/m2/unsynced" ] || fail "after the remount, $d/m2/unsynced exists: its name was never synced"
stop_fs
echo "FUSE smoke test: ok (mount, write, fsync, read, cut, unmount, remount)"
