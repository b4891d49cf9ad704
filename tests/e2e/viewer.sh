#!/usr/bin/env bash
# tests/e2e/viewer.sh — the web viewer and the browser module in headless
# Chromium against a real daemon on the demo repository.
#
# Needs /usr/bin/chromium and clients/js/node_modules/playwright-core (both
# installed by `tools/deps.sh --test`, which `make test` runs) and the viewer's
# vendor copies of three.js / deformd.js (tools/deps.sh). The browser part is
# tests/e2e/viewer_check.cjs (screenshots analysed by viewer_png.cjs) at
# 1280x800 and 420 px wide; it stops and restarts the daemon (same ports and
# arguments) to see the "daemon unreachable" state. Screenshots land in
# $DF_TEST_OUT (viewer-*.png).
. "$(dirname "$0")/product_common.sh"

missing=
[ -x /usr/bin/chromium ] || missing="$missing chromium"
[ -f clients/js/node_modules/playwright-core/package.json ] || missing="$missing playwright-core"
for f in three.module.js OrbitControls.js deformd.js; do
    [ -f "server/www/vendor/$f" ] || missing="$missing server/www/vendor/$f"
done
command -v node >/dev/null || missing="$missing node"
if [ -n "$missing" ]; then
    fail viewer-prerequisites "missing:$missing (run tools/deps.sh --test)"
    finish; exit 1
fi
# the vendored module must be the current clients/js/deformd.js
cmp -s clients/js/deformd.js server/www/vendor/deformd.js && ok viewer-vendor-module-current \
    || fail viewer-vendor-module-current "server/www/vendor/deformd.js is stale (run tools/deps.sh)"

build_demo "$T/demo-repo" && ok viewer-demo-repo || { fail viewer-demo-repo; finish; exit 1; }
# the demo's shirt is the committed garment model turned Y-up (tools/make_demo.sh):
# the same shape and clip times evaluated from both files, R (x,y,z) = (x,z,-y)
"$PY" -c 'import numpy as np; np.save("'"$T"'/shape.npy", np.tile(np.float32([1.2, -0.8, 0.5, 1.0]), (3, 1)))'
for f in committed:tests/data/garment/shirt.safetensors demo:"$T/demo-repo/shirt/1/model.safetensors"; do
    "$BIN/deform" eval "${f#*:}" --clip 01_01 --times 2.5,7.3,11.0 --input shape="$T/shape.npy" \
        --out "$T/shirt_${f%%:*}.npy" >>"$T/shirt.log" 2>&1
done
"$PY" - "$T" <<'PYEOF' && ok viewer-demo-shirt-is-committed-model-y-up || { cat "$T/shirt.log"; fail viewer-demo-shirt-is-committed-model-y-up; }
import sys, numpy as np
t = sys.argv[1]
a, b = np.load(t + "/shirt_committed.npy"), np.load(t + "/shirt_demo.npy")
R = np.array([[1, 0, 0], [0, 0, 1], [0, -1, 0]])
e = np.abs(a @ R.T - b).max()
print("demo shirt vs the committed model turned Y-up: max %.2e m (frames differ by %.3f m)" % (e, np.abs(a[0] - a[2]).max()))
sys.exit(0 if a.shape == b.shape == (3, 1290, 3) and e < 1e-5 and np.abs(a[0] - a[2]).max() > 0.01 else 1)
PYEOF
# another kind in the same repository: a tiny rigapprox model (controls
# sliders), trained in a second from the reference rig (tests/e2e/rigapprox.sh)
"$BIN/deform" rigdata --tiny 10,8 --out "$T/ra.st" --samples 160 --influence-poses 4 >"$T/ra.log" 2>&1 \
    && "$BIN/deform" train "$T/ra.st" --out "$T/demo-repo/tinyra" --epochs 4 --layers 2 --width 16 \
        --anchor-layers 2 --anchor-width 8 --anchors 0.05 --quiet >>"$T/ra.log" 2>&1 \
    && ok viewer-rigapprox-model || { cat "$T/ra.log"; fail viewer-rigapprox-model; }
# A second origin (another port) serving a page with the browser module, for
# the cross-origin (CORS) check; the daemon allows exactly that origin.
XPORT=$(free_port)
mkdir -p "$T/xorigin"
cp clients/js/deformd.js "$T/xorigin/"
echo '<!doctype html><title>other origin</title>' >"$T/xorigin/index.html"
"$PY" -m http.server --bind 127.0.0.1 --directory "$T/xorigin" "$XPORT" >"$T/xorigin.log" 2>&1 &
XPID=$!
trap 'kill $XPID 2>/dev/null; cleanup' EXIT
start_daemon "$T/demo-repo" --www "$ROOT/server/www" --cors-origin "http://127.0.0.1:$XPORT" && ok viewer-daemon-ready \
    || { fail viewer-daemon-ready; finish; exit 1; }

curl -sf "$URL/viewer/" | grep -q 'deformd viewer' && ok viewer-served-at-viewer || fail viewer-served-at-viewer
curl -sf "$URL/viewer/vendor/three.module.js" -o /dev/null && ok viewer-three-served-locally \
    || fail viewer-three-served-locally
grep -Eq 'https?://' server/www/*.html server/www/*.js server/www/*.css \
    && fail viewer-no-remote-urls "server/www/*.html|js|css reference a remote URL" || ok viewer-no-remote-urls

REQ=$T/demo-repo/requests/wuson_pose.json
curl -sf "$URL/v2/models/wuson/infer" -d @"$REQ" -o "$T/curl_wuson.json" || fail viewer-curl-reference

# float16 / int16 answers decoded by the Python client, for viewer_check.cjs
# to compare with the browser module's decoding of the same answers
PYTHONPATH=$ROOT/clients/python "$PY" - "$T" "$HTTP" <<'PYEOF' || fail viewer-python-decodings
import json, sys
from deformd_client import HttpClient, Tensor
T, port = sys.argv[1], int(sys.argv[2])
pose = json.load(open(T + "/demo-repo/requests/wuson_pose.json"))["inputs"][0]
with HttpClient("127.0.0.1", port) as c:
    for enc in ("float16", "int16"):
        py = c.infer("wuson", {"joint_rotations": Tensor(pose["shape"], pose["data"])},
                     outputs=["positions"], encoding=enc)["positions"].data.tolist()
        json.dump(py, open("%s/python_%s.json" % (T, enc), "w"))
PYEOF

# The browser check stops the daemon (STOP_CMD) to see the viewer's
# "daemon unreachable" state, then starts it again (RESTART_CMD) on the same
# ports with the same arguments to see the viewer recover.
cat >"$T/stop.sh" <<STOPEOF
#!/bin/sh
kill -TERM $DPID
for i in \$(seq 1 100); do kill -0 $DPID 2>/dev/null || exit 0; sleep 0.05; done
kill -KILL $DPID
STOPEOF
cat >"$T/restart.sh" <<RESTARTEOF
#!/bin/sh
"$BIN/deformd" --repository "$T/demo-repo" --host 127.0.0.1 --http-port $HTTP --socket-port $SOCK \\
    --www "$ROOT/server/www" --cors-origin "http://127.0.0.1:$XPORT" >"$T/deformd2.log" 2>&1 &
echo \$! >"$T/deformd2.pid"
for i in \$(seq 1 200); do curl -sf "$URL/v2/health/ready" >/dev/null 2>&1 && exit 0; sleep 0.05; done
echo "deformd did not restart:"; cat "$T/deformd2.log"; exit 1
RESTARTEOF
chmod +x "$T/stop.sh" "$T/restart.sh"
trap 'kill $XPID 2>/dev/null; [ -f "$T/deformd2.pid" ] && kill "$(cat "$T/deformd2.pid")" 2>/dev/null; cleanup' EXIT

for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$XPORT/" >/dev/null && break; sleep 0.1; done
STOP_CMD=$T/stop.sh RESTART_CMD=$T/restart.sh PY_DIR=$T \
    timeout 120 node tests/e2e/viewer_check.cjs "$URL" "$OUT" "$REQ" "$T/curl_wuson.json" \
    "$ROOT/clients/js/node_modules" "http://127.0.0.1:$XPORT" || NFAIL=$((NFAIL + 1))
ls "$OUT"/viewer-*.png 2>/dev/null
finish
