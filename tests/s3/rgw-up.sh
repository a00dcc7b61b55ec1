#!/bin/bash
# Copied into the project from the S3 server notes it was written with; started by tests/run.sh
# and perf/run.sh, never needed from outside the repository.
# Minimal single-node Ceph (1 mon, 1 osd, no mgr) + radosgw on 127.0.0.1, all state under $1.
# usage: rgw-up.sh DIR RGW_PORT [memstore|bluestore]   (needs: apt-get install --no-install-recommends ceph-mon ceph-osd radosgw)
# DSTL_RGW_BLOCK_BYTES: the BlueStore block file's size (sparse; default 20 GiB). RGW frees a deleted
# object's space only when its garbage collector removes the object's RADOS tails; its defaults wait 2 h
# (rgw gc obj min wait) and run once an hour, so a long benchmark that rewrites big objects (perf's
# checkpoint benchmark writes ~150 GB) filled BlueStore and failed late. The [client.rgw.a] section below
# makes the collector take deleted objects after 5 s, run every 10 s, and trim in bigger chunks.
# Writes DIR/env with S3 endpoint/keys, and DIR/pids with the daemon PIDs (stop with s3-down.sh DIR).
set -euo pipefail
D=$(realpath -m "$1"); RGW_PORT=$2; STORE=${3:-memstore}
AK=${S3_ACCESS_KEY:-testak0123456789}; SK=${S3_SECRET_KEY:-testsecret0123456789abcdefghijklmnopqrstu}
freeport() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()'; }
t0=$(date +%s%N)
cleanup_on_error() { echo "rgw-up failed; stopping what was started (logs in $D/log)" >&2; [ -f "$D/pids" ] && for p in $(tac "$D/pids"); do kill "$p" 2>/dev/null; done; }
trap cleanup_on_error ERR
rm -rf "$D"; mkdir -p "$D"/{mon,osd0,run,log,rgw}
FSID=$(uuidgen); P2=$(freeport); P1=$(freeport)
cat > "$D/ceph.conf" <<EOF
[global]
fsid = $FSID
mon host = [v2:127.0.0.1:$P2,v1:127.0.0.1:$P1]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
run dir = $D/run
admin socket = $D/run/\$cluster-\$name.asok
log file = $D/log/\$cluster-\$name.log
pid file = $D/run/\$cluster-\$name.pid
keyring = $D/keyring
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
mon data avail warn = 1
mon data avail crit = 0
ms bind ipv6 = false
[mon.a]
mon data = $D/mon
[osd.0]
osd data = $D/osd0
osd objectstore = $STORE
memstore device bytes = 4294967296
bluestore block path = $D/osd0.block
bluestore block create = true
bluestore block size = ${DSTL_RGW_BLOCK_BYTES:-21474836480}
bluestore fsck on mount = false
osd memory target = 1073741824
bluestore cache autotune = false
bluestore cache size = 268435456
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT tcp_nodelay=1
rgw data = $D/rgw
rgw dns name = localhost
rgw enable apis = s3, admin
rgw thread pool size = 64
rgw gc obj min wait = 5
rgw gc processor period = 10
rgw gc processor max time = 10
rgw gc max concurrent io = 16
rgw gc max trim chunk = 64
EOF
C=(-c "$D/ceph.conf")
ceph-authtool --create-keyring "$D/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool "$D/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
ceph-authtool "$D/keyring" --gen-key -n osd.0 --cap mon 'allow profile osd' --cap osd 'allow *' --cap mgr 'allow profile osd' >/dev/null
ceph-authtool "$D/keyring" --gen-key -n client.rgw.a --cap mon 'allow rw' --cap osd 'allow rwx' --cap mgr 'allow rw' >/dev/null
monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$P2,v1:127.0.0.1:$P1]" "$D/monmap" >/dev/null
ceph-mon "${C[@]}" --mkfs -i a --monmap "$D/monmap" --keyring "$D/keyring"
ceph-mon "${C[@]}" -f -i a >>"$D/log/mon.out" 2>&1 &
echo $! >> "$D/pids"
OSD_UUID=$(uuidgen)
ID=$(ceph "${C[@]}" --connect-timeout 30 osd new "$OSD_UUID")
ceph-osd "${C[@]}" -i "$ID" --mkfs --osd-uuid "$OSD_UUID" >"$D/log/osd-mkfs.out" 2>&1 || { cat "$D/log/osd-mkfs.out" >&2; false; }
ceph-osd "${C[@]}" -f -i "$ID" >>"$D/log/osd.out" 2>&1 &
echo $! >> "$D/pids"
radosgw "${C[@]}" -f -n client.rgw.a >>"$D/log/rgw.out" 2>&1 &
echo $! >> "$D/pids"
# wait for the gateway to answer
for i in $(seq 1 600); do curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$RGW_PORT/" && break; sleep 0.2; done
curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$RGW_PORT/" || { echo "radosgw did not come up; see $D/log" >&2; false; }
radosgw-admin "${C[@]}" user create --uid=ci --display-name=ci --access-key="$AK" --secret-key="$SK" >/dev/null
# warm-up: the first bucket/object/multipart operations create the RGW pools (index, data, non-ec),
# which takes a few seconds each; do it here so tests and benchmarks do not see 2 s stalls.
sig=(--aws-sigv4 "aws:amz:us-east-1:s3" --user "$AK:$SK" -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
W="http://127.0.0.1:$RGW_PORT/rgw-warmup-$$"
curl -sf "${sig[@]}" -X PUT "$W" -o /dev/null
curl -sf "${sig[@]}" -X PUT --data-binary "" "$W/obj" -o /dev/null
UID_=$(curl -sf "${sig[@]}" -X POST "$W/mpu?uploads=" | sed -n 's:.*<UploadId>\(.*\)</UploadId>.*:\1:p')
curl -sf "${sig[@]}" -X PUT --data-binary "" "$W/mpu?partNumber=1&uploadId=$UID_" -o /dev/null
curl -sf "${sig[@]}" -X DELETE "$W/mpu?uploadId=$UID_" -o /dev/null
curl -sf "${sig[@]}" -X DELETE "$W/obj" -o /dev/null
curl -sf "${sig[@]}" -X DELETE "$W" -o /dev/null
cat > "$D/env" <<EOF
S3_ENDPOINT=http://127.0.0.1:$RGW_PORT
S3_ACCESS_KEY=$AK
S3_SECRET_KEY=$SK
S3_REGION=us-east-1
EOF
echo "ceph+rgw up in $(( ($(date +%s%N) - t0) / 1000000 )) ms: $(grep -v "^S3_SECRET_KEY=" "$D/env" | tr "\n" " ")(secret key in $D/env)"
