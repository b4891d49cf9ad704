#!/usr/bin/env bash
# tools/run_demo.sh — start deformd on the demo repository, in the foreground.
#
#   DF_HTTP_PORT=8000 DF_SOCKET_PORT=8001 tools/run_demo.sh [REPO]
#
# Starts bin/deformd on 127.0.0.1, waits for GET /v2/health/ready, prints the
# HTTP and socket ports, the viewer URL and three copy-paste example queries
# (each one is run once here first, so what is printed is known to work),
# then waits; Ctrl-C (or SIGTERM) stops the daemon, which drains in-flight
# requests and exits.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/bin}
case "$BIN" in /*) ;; *) BIN=$ROOT/$BIN ;; esac
REPO=${1:-${DF_DEMO_REPO:-$ROOT/demo-repo}}
HTTP=${DF_HTTP_PORT:-8000}
SOCK=${DF_SOCKET_PORT:-8001}
HOST=127.0.0.1
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

[ -x "$BIN/deformd" ] || { echo "run_demo: $BIN/deformd is not built (run make)" >&2; exit 1; }
[ -d "$REPO" ] || { echo "run_demo: no repository at $REPO (run tools/make_demo.sh)" >&2; exit 1; }
for p in "$HTTP" "$SOCK"; do
    if (exec 3<>"/dev/tcp/$HOST/$p") 2>/dev/null; then
        echo "run_demo: port $p is already in use; choose others with DF_HTTP_PORT / DF_SOCKET_PORT" >&2
        exit 1
    fi
done

"$BIN/deformd" --repository "$REPO" --host "$HOST" --http-port "$HTTP" \
    --socket-port "$SOCK" &
PID=$!
stop() { kill -TERM "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; exit 0; }
trap stop INT TERM

ready=0
for _ in $(seq 1 300); do
    if ! kill -0 "$PID" 2>/dev/null; then
        wait "$PID" || true
        echo "run_demo: deformd exited before becoming ready (see its messages above)" >&2
        exit 1
    fi
    if curl -sf "http://$HOST:$HTTP/v2/health/ready" >/dev/null 2>&1; then ready=1; break; fi
    sleep 0.1
done
if [ "$ready" -ne 1 ]; then
    echo "run_demo: deformd not ready after 30 s" >&2
    stop
fi

URL=http://$HOST:$HTTP
EX1="curl -s $URL/v2/models/wuson"
EX2="curl -s $URL/v2/models/morphcube/infer -d '{\"inputs\":[{\"name\":\"weights\",\"shape\":[2],\"datatype\":\"FP32\",\"data\":[1.0,0.5]}]}'"
EX3="curl -s $URL/v2/models/wuson/infer -d @$REPO/requests/wuson_pose.json"
for ex in "$EX1" "$EX2" "$EX3"; do
    if ! out=$(eval "$ex -f" 2>&1); then
        echo "run_demo: warning: example failed: $ex" >&2
        echo "$out" | head -c 300 >&2; echo >&2
    fi
done

cat <<EOF

$("$BIN/deformd" --version 2>/dev/null | head -1) is serving the demo repository $REPO
  HTTP (KServe v2):  $URL          viewer: $URL/viewer/
  in the viewer:     $URL/viewer/?character=shirt      (a body wearing a shirt: shape sliders, clip 01_01)
                     $URL/viewer/?character=ict_to_t1  (a face retargeted: source and target side by side)
  binary socket:     $HOST:$SOCK   (docs/protocol.md; bin/deformctl, clients/python)
  characters:        $(curl -s "$URL/v2/repository/index" | "$PY" -c 'import json,sys
print("; ".join("%s (model %s)" % (", ".join(m.get("characters") or [m["name"]]), m["name"])
                for m in json.load(sys.stdin) if m.get("state") == "READY"))' 2>/dev/null)

Try (copy-paste; infer answers are long JSON — append | head -c 400 to peek):
  $EX1
  $EX2
  $EX3

Ctrl-C stops the daemon.
EOF
wait "$PID"
