#!/usr/bin/env bash
# tests/e2e/socket.sh — bin/deformctl against a real bin/deformd over the
# binary socket (TCP and Unix), on a real asset (X/Testwuson.X from Debian's
# assimp-testmodels, imported with bin/deform import).
#
# References, independent of the socket path under test:
#  - core: `bin/deform eval` evaluates the same clip times in-process (no
#    server); `deformctl play` must match it within 1e-6 x bbox diagonal
#    (`deform compare --tol`; batch composition may change summation order);
#  - HTTP: `deformctl infer --http` (JSON) and `--http-binary` give the same
#    pose bit for bit (compare --tol 0);
#  - float16 play within 1e-3 of the float32 one (2^-11 relative per value);
#  - the .glb from `deformctl mesh` starts with the glTF magic and its
#    declared length equals the file size.
# Prints "ok NAME" / "FAIL NAME" lines for tests/run.sh.
. "$(dirname "$0")/product_common.sh"
# check NAME CMD...: as product_common's, but the command's output goes to a log
# (shown on failure) instead of the suite's output.
check() {
    local name=$1; shift
    if "$@" >>"$T/cmd.log" 2>&1; then ok "$name"; else fail "$name" "$*"; tail -5 "$T/cmd.log"; fi
}

ASSET=/usr/share/assimp/models/X/Testwuson.X
if [ ! -r "$ASSET" ]; then echo "ok socket-skipped-no-asset"; exit 0; fi
REPO=$T/repo
"$BIN/deform" import "$ASSET" --repository "$REPO" --name wuson >"$T/import.log" 2>&1 \
    && ok socket-import || { cat "$T/import.log"; fail socket-import; exit 1; }

"$BIN/deformd" --repository "$REPO" --http-port 0 --socket-port 0 --unix "$T/d.sock" \
    --ready-file "$T/ready" >"$T/deformd.log" 2>&1 &
DPID=$!
for _ in $(seq 1 300); do [ -s "$T/ready" ] && break; sleep 0.1; done
if [ ! -s "$T/ready" ]; then cat "$T/deformd.log"; fail socket-daemon-ready; exit 1; fi
HTTP=$(sed -n 's/.*http=\([0-9]*\).*/\1/p' "$T/ready")
SOCK=$(sed -n 's/.*socket=\([0-9]*\).*/\1/p' "$T/ready")
ok socket-daemon-ready
CTL="$BIN/deformctl --socket-port $SOCK --http-port $HTTP"

# list / info
$CTL list >"$T/list.txt" 2>>"$T/cmd.log" && grep -qx wuson "$T/list.txt" \
    && ok socket-ctl-list || fail socket-ctl-list "$(cat "$T/list.txt")"
$CTL info wuson >"$T/info.json" 2>>"$T/cmd.log" \
    && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["vertices"]>1000 and any(c["name"]=="Wuson_Walk" for c in d["clips"])' "$T/info.json" \
    && ok socket-ctl-info || fail socket-ctl-info

# play vs bin/deform eval (key times, then a 24 fps grid), TCP then Unix
check socket-play-keys $CTL play wuson --clip Wuson_Walk --out "$T/play.npy"
check socket-eval-keys "$BIN/deform" eval "$REPO/wuson" --clip Wuson_Walk --out "$T/eval.npy"
check socket-play-equals-eval "$BIN/deform" compare "$T/play.npy" "$T/eval.npy" --rest "$REPO/wuson" --tol 1e-6
check socket-play-fps "$BIN/deformctl" --unix "$T/d.sock" play wuson --clip Wuson_Run --fps 24 \
    --chunk 3 --window 5 --out "$T/play24.npy"
check socket-eval-fps "$BIN/deform" eval "$REPO/wuson" --clip Wuson_Run --fps 24 --out "$T/eval24.npy"
check socket-play-fps-equals-eval "$BIN/deform" compare "$T/play24.npy" "$T/eval24.npy" --rest "$REPO/wuson" --tol 1e-6
check socket-play-dqs $CTL play wuson --clip Wuson_Walk --skinning dqs --out "$T/play_dqs.npy"
check socket-eval-dqs "$BIN/deform" eval "$REPO/wuson" --clip Wuson_Walk --skinning dqs --out "$T/eval_dqs.npy"
check socket-play-dqs-equals-eval "$BIN/deform" compare "$T/play_dqs.npy" "$T/eval_dqs.npy" --rest "$REPO/wuson" --tol 1e-6
check socket-play-f16 $CTL play wuson --clip Wuson_Walk --encoding float16 --out "$T/play16.npy"
check socket-play-f16-close "$BIN/deform" compare "$T/play16.npy" "$T/play.npy" --rest "$REPO/wuson" --tol 1e-3

# one pose: socket vs HTTP JSON vs HTTP binary, bit for bit
ROT=$(python3 -c '
import json, math
J = 39
q = [[0, 0, 0, 1] for _ in range(J)]
for j in (2, 5, 9):
    a = 0.3 * j
    q[j] = [math.sin(a / 2), 0, 0, math.cos(a / 2)]
print(json.dumps(q))')
check socket-infer $CTL infer wuson --input "joint_rotations=$ROT" --out "$T/pose_sock.npy"
check socket-infer-http $CTL infer wuson --input "joint_rotations=$ROT" --http --out "$T/pose_json.npy"
check socket-infer-http-binary $CTL infer wuson --input "joint_rotations=$ROT" --http-binary --out "$T/pose_bin.npy"
check socket-equals-http-json "$BIN/deform" compare "$T/pose_sock.npy" "$T/pose_json.npy" --tol 0
check socket-equals-http-binary "$BIN/deform" compare "$T/pose_sock.npy" "$T/pose_bin.npy" --tol 0
cmp -s "$T/pose_sock.npy" "$T/pose_bin.npy" && ok socket-npy-bytes-identical || fail socket-npy-bytes-identical
# the pose is really posed (differs from the rest pose)
check socket-infer-rest $CTL infer wuson --out "$T/rest_sock.npy"
if "$BIN/deform" compare "$T/pose_sock.npy" "$T/rest_sock.npy" --tol 1e-3 >>"$T/cmd.log" 2>&1; then
    fail socket-infer-posed "posed == rest"
else ok socket-infer-posed; fi
# an .npy input file (per-pose shape, batch dimension added by deformctl)
python3 -c '
import json, struct, sys
q = json.loads(sys.argv[1]); n = len(q)
hdr = "{\x27descr\x27: \x27<f4\x27, \x27fortran_order\x27: False, \x27shape\x27: (%d, 4), }" % n
hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
with open(sys.argv[2], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
    f.write(struct.pack("<%df" % (4 * n), *[x for r in q for x in r]))' "$ROT" "$T/rot.npy"
check socket-infer-npy-input $CTL infer wuson --input "joint_rotations=$T/rot.npy" --out "$T/pose_npy.npy"
check socket-npy-input-equals-json "$BIN/deform" compare "$T/pose_npy.npy" "$T/pose_sock.npy" --tol 0

# errors name what is wrong and exit non-zero
if $CTL infer nobody --out "$T/x.npy" 2>"$T/err.txt"; then fail socket-ctl-unknown-character
elif grep -q nobody "$T/err.txt"; then ok socket-ctl-unknown-character
else fail socket-ctl-unknown-character "$(cat "$T/err.txt")"; fi
if $CTL infer wuson --input 'joint_rotations=[[0,0,0,1]]' --out "$T/x.npy" 2>"$T/err.txt"; then
    fail socket-ctl-bad-shape
elif grep -q joint_rotations "$T/err.txt"; then ok socket-ctl-bad-shape
else fail socket-ctl-bad-shape "$(cat "$T/err.txt")"; fi
if $CTL play wuson --clip Nope --out "$T/x.npy" 2>"$T/err.txt"; then fail socket-ctl-unknown-clip
elif grep -q Nope "$T/err.txt"; then ok socket-ctl-unknown-clip
else fail socket-ctl-unknown-clip "$(cat "$T/err.txt")"; fi

# mesh as glb
check socket-ctl-mesh $CTL mesh wuson --out "$T/rest.glb"
python3 -c '
import struct, sys, os
b = open(sys.argv[1], "rb").read()
magic, ver, length = struct.unpack("<4sII", b[:12])
assert magic == b"glTF" and ver == 2 and length == len(b) == os.path.getsize(sys.argv[1]), (magic, ver, length, len(b))' \
    "$T/rest.glb" && ok socket-mesh-glb-valid || fail socket-mesh-glb-valid

# a short bench run (numbers are not asserted)
check socket-ctl-bench $CTL bench --connections 4 --depth 4 --seconds 1 --character wuson

# still alive, clean shutdown
kill -0 "$DPID" 2>/dev/null && ok socket-daemon-alive || fail socket-daemon-alive
kill -TERM "$DPID"
wait "$DPID"
rc=$?
DPID=
[ "$rc" -eq 0 ] && ok socket-daemon-exit-0 || fail socket-daemon-exit-0 "status $rc"
[ ! -e "$T/d.sock" ] && ok socket-unix-path-removed || fail socket-unix-path-removed
[ "$NFAIL" -eq 0 ]
