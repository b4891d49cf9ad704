#!/usr/bin/env bash
# tests/e2e/scaleout.sh — three deformd daemons behind the nginx router of
# deploy/nginx (Debian's nginx, stream module and njs), all on 127.0.0.1, on
# free ports picked now; nginx runs with its own prefix and temp directories
# under the test's temporary directory. Bounded: about 35 s.
#
# The router's configuration is deploy/nginx/nginx.conf with only its site
# lines replaced (daemon addresses, listen ports, pid and log paths: each
# replacement must match, so a reshaped file fails here); the included rule
# files (deformd-http*.conf, deformd-stream*.conf, deformd_route.js) are used
# as shipped.
#
# Repository: Testwuson.X and the glTF AnimatedMorphCube from Debian's
# assimp-testmodels, imported with bin/deform, 48 characters
# (tests/e2e/scaleout_load.py chars). Then:
#  - router basics: its own health, a character's metadata through it, the
#    repository API refused (403), deploy/deformd-fanout unloads and loads a
#    model on every daemon (each daemon's index checked);
#  - reference: every request of the run asked of daemon 0 directly;
#  - 64 clients (deformd_client: 32 HTTP, 32 socket) for 17 s through the
#    router; daemon 1 is killed (SIGKILL) at 4 s and restarted on its ports at
#    7 s; daemon 2 gets SIGTERM (drain) 6.5 s after daemon 1 is ready again;
#  - analysis (scaleout_load.py analyze) from nginx's access logs: each
#    character on one daemon, share per daemon, characters moved when daemon 1
#    died (exactly its share), time until it served again, failed requests
#    (none), answers equal to the single daemon's.
# Also runs clients/python/tests/test_retry.py (the client's retry rules).
# The logs the analysis read are copied to $DF_TEST_OUT/scaleout/.
# Prints "ok NAME" / "FAIL NAME" lines for tests/run.sh.
. "$(dirname "$0")/product_common.sh"
NGINX=${NGINX:-/usr/sbin/nginx}
MODS=/usr/lib/nginx/modules
PIDS=()
NGPID=

stop_all() {
    [ -n "$NGPID" ] && kill -TERM "$NGPID" 2>/dev/null
    for p in "${PIDS[@]}"; do [ -n "$p" ] && kill -KILL "$p" 2>/dev/null; done
    [ -n "$NGPID" ] && { for _ in $(seq 1 30); do kill -0 "$NGPID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$NGPID" 2>/dev/null; }
    wait 2>/dev/null
    cleanup
}
trap stop_all EXIT

"$PY" clients/python/tests/test_retry.py || NFAIL=$((NFAIL + 1))

for f in "$NGINX" "$MODS/ngx_stream_module.so" "$MODS/ngx_stream_js_module.so"; do
    if [ ! -e "$f" ]; then
        fail scaleout-nginx "missing $f (tools/deps.sh --test installs nginx, libnginx-mod-stream, libnginx-mod-stream-js)"
        exit 1
    fi
done
MODELS=/usr/share/assimp/models
WUSON=$MODELS/X/Testwuson.X
MORPH=$MODELS/glTF2/glTF-Sample-Models/AnimatedMorphCube-glTF/AnimatedMorphCube.gltf
REPO=$T/repo
if "$BIN/deform" import "$WUSON" --repository "$REPO" --name wuson >"$T/import.log" 2>&1 &&
   "$BIN/deform" import "$MORPH" --repository "$REPO" --name morphcube >>"$T/import.log" 2>&1 &&
   "$PY" tests/e2e/scaleout_load.py chars "$REPO"; then
    ok scaleout-repository
else
    cat "$T/import.log"; fail scaleout-repository; exit 1
fi
printf 'scaleout-token-0123456789\n' >"$T/token"

# ---------------------------------------------------------------- daemons
HP=() SP=()
for i in 0 1 2; do
    HP[$i]=$(free_port); SP[$i]=$(free_port)
done
ports="${HP[*]} ${SP[*]}"
if [ "$(tr ' ' '\n' <<<"$ports" | sort -u | wc -l)" -ne 6 ]; then
    fail scaleout-ports "free_port gave a port twice: $ports"; exit 1
fi
start_d() { # start_d I: daemon I on its ports, in the background
    "$BIN/deformd" --repository "$REPO" --host 127.0.0.1 --http-port "${HP[$1]}" \
        --socket-port "${SP[$1]}" --token-file "$T/token" --set drain_timeout_ms=5000 \
        >>"$T/deformd$1.log" 2>&1 &
    PIDS[$1]=$!
}
wait_ready() { # wait_ready I: until /v2/health/ready answers 200 (10 s at most)
    for _ in $(seq 1 100); do
        curl -sf "http://127.0.0.1:${HP[$1]}/v2/health/ready" >/dev/null 2>&1 && return 0
        kill -0 "${PIDS[$1]}" 2>/dev/null || break
        sleep 0.1
    done
    echo "daemon $1 not ready:"; tail -5 "$T/deformd$1.log"; return 1
}
for i in 0 1 2; do start_d $i; done
ready=1
for i in 0 1 2; do wait_ready $i || ready=0; done
[ $ready = 1 ] && ok scaleout-daemons-ready || { fail scaleout-daemons-ready; exit 1; }

# ------------------------------------------------------------------ router
NG=$T/nginx
mkdir -p "$NG/logs"
cp deploy/nginx/deformd-http.conf deploy/nginx/deformd-http-server.conf deploy/nginx/deformd-stream.conf \
   deploy/nginx/deformd-stream-server.conf deploy/nginx/deformd_route.js "$NG/"
RHTTP=$(free_port); RSOCK=$(free_port)
while [ "$RSOCK" = "$RHTTP" ]; do RSOCK=$(free_port); done
if "$PY" - deploy/nginx/nginx.conf "$NG/nginx.conf" "$NG" "$RHTTP" "$RSOCK" "${HP[*]}" "${SP[*]}" <<'EOF'
import sys
src, dst, ng, rh, rs, hp, sp = sys.argv[1:8]
hp, sp = hp.split(), sp.split()
s = open(src).read()
subs = [("pid /tmp/nginx.pid;", "pid %s/nginx.pid;" % ng),
        ("error_log stderr warn;", "error_log %s/logs/error.log warn;" % ng),
        ("access_log /dev/stdout deformd;", "access_log %s/logs/http.log deformd;" % ng),
        ("access_log /dev/stdout deformd_stream;", "access_log %s/logs/stream.log deformd_stream;" % ng),
        ("listen 8000;", "listen 127.0.0.1:%s;" % rh),
        ("listen 8001;", "listen 127.0.0.1:%s;" % rs),
        ("worker_processes auto;", "worker_processes 1;")]
for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
    subs.append(("/tmp/nginx-%s;" % d, "%s/tmp-%s;" % (ng, d)))
for i in range(3):
    subs.append(("server deformd-%d:8000 " % i, "server 127.0.0.1:%s " % hp[i]))
    subs.append(("server deformd-%d:8001 " % i, "server 127.0.0.1:%s " % sp[i]))
for a, b in subs:
    if s.count(a) != 1:
        sys.exit("deploy/nginx/nginx.conf: %r found %d times, expected once" % (a, s.count(a)))
    s = s.replace(a, b)
open(dst, "w").write(s)
EOF
then ok scaleout-router-config; else fail scaleout-router-config; exit 1; fi
if "$NGINX" -t -p "$NG" -c "$NG/nginx.conf" -e "$NG/logs/error.log" >"$T/nginx-t.log" 2>&1; then
    ok scaleout-router-config-test
else
    cat "$T/nginx-t.log"; fail scaleout-router-config-test; exit 1
fi
"$NGINX" -p "$NG" -c "$NG/nginx.conf" -e "$NG/logs/error.log" -g 'daemon off;' >"$T/nginx.out" 2>&1 &
NGPID=$!
R=http://127.0.0.1:$RHTTP
for _ in $(seq 1 50); do curl -sf "$R/router/health" >/dev/null 2>&1 && break; sleep 0.1; done
check scaleout-router-health curl -sf "$R/router/health" -o /dev/null
meta=$(curl -s "$R/v2/models/w03")
grep -q '"name":"w03"' <<<"$meta" && ok scaleout-router-metadata || fail scaleout-router-metadata "$meta"
st=$(curl -s -o "$T/repo403.json" -w '%{http_code}' -XPOST -H "Authorization: Bearer $(cat "$T/token")" \
    "$R/v2/repository/models/wuson/unload")
[ "$st" = 403 ] && grep -q fanout "$T/repo403.json" && ok scaleout-router-refuses-repository-api \
    || fail scaleout-router-refuses-repository-api "status $st"
# ... and answers it when the upstream is the router's own: unknown paths go to a daemon
st=$(curl -s -o /dev/null -w '%{http_code}' "$R/v2/health/ready")
[ "$st" = 200 ] && ok scaleout-router-passes-health || fail scaleout-router-passes-health "status $st"

# --------------------------------------------------- repository API fan-out
FAN=(deploy/deformd-fanout --daemon "127.0.0.1:${HP[0]},127.0.0.1:${HP[1]}" --daemon "127.0.0.1:${HP[2]}"
     --token-file "$T/token")
states() { # the morphcube state on every daemon
    for i in 0 1 2; do
        curl -s "http://127.0.0.1:${HP[$i]}/v2/repository/index" |
            "$PY" -c 'import json,sys; print(next((e["state"] for e in json.load(sys.stdin) if e["name"]=="morphcube"), "absent"))'
    done | tr '\n' ' '
}
if "${FAN[@]}" unload morphcube >"$T/fan.log" 2>&1 && [ "$(states)" = "UNAVAILABLE UNAVAILABLE UNAVAILABLE " ]; then
    ok scaleout-fanout-unload
else
    cat "$T/fan.log"; fail scaleout-fanout-unload "states: $(states)"
fi
"${FAN[@]}" index >"$T/fan-index.log" 2>&1
grep -c 'morphcube version .* UNAVAILABLE' "$T/fan-index.log" | grep -qx 3 && ok scaleout-fanout-index \
    || { cat "$T/fan-index.log"; fail scaleout-fanout-index; }
if "${FAN[@]}" load morphcube >"$T/fan.log" 2>&1 && [ "$(states)" = "READY READY READY " ]; then
    ok scaleout-fanout-load
else
    cat "$T/fan.log"; fail scaleout-fanout-load "states: $(states)"
fi
# a daemon that does not answer makes it fail (and say which)
if deploy/deformd-fanout --daemon "127.0.0.1:$(free_port)" --daemon "127.0.0.1:${HP[0]}" \
        --token-file "$T/token" load morphcube >"$T/fan-bad.log" 2>&1; then
    fail scaleout-fanout-reports-failure "exit 0 with a dead daemon"
else
    grep -q FAILED "$T/fan-bad.log" && ok scaleout-fanout-reports-failure || fail scaleout-fanout-reports-failure
fi

# -------------------------------------------------------------- reference
if "$PY" tests/e2e/scaleout_load.py ref --http "${HP[0]}" --out "$T/refs.npz"; then
    ok scaleout-reference
else
    fail scaleout-reference; exit 1
fi

# ------------------------------------------------------- run, kill, restart
now() { date +%s.%N; }
: >"$NG/logs/http.log"; : >"$NG/logs/stream.log"
kill -USR1 "$NGPID" # reopen the (truncated) logs
sleep 0.2
EV=$T/events
echo "start $(now)" >"$EV"
"$PY" tests/e2e/scaleout_load.py run --http "$RHTTP" --sock "$RSOCK" --refs "$T/refs.npz" \
    --seconds 17 --out "$T/res.json" >"$T/load.log" 2>&1 &
LPID=$!
PIDS[3]=$LPID
sleep 4
echo "kill $(now)" >>"$EV"
kill -KILL "${PIDS[1]}"
wait "${PIDS[1]}" 2>/dev/null
sleep 3
echo "restart $(now)" >>"$EV"
start_d 1
wait_ready 1 && echo "ready $(now)" >>"$EV" || echo "ready $(now)" >>"$EV"
sleep 6.5
echo "term $(now)" >>"$EV"
kill -TERM "${PIDS[2]}"
wait "$LPID"; lrc=$?
cat "$T/load.log"
[ $lrc = 0 ] && ok scaleout-clients-finished || fail scaleout-clients-finished "exit $lrc"
wait "${PIDS[2]}"; trc=$?
[ $trc = 0 ] && ok scaleout-sigterm-drain-exit-0 || fail scaleout-sigterm-drain-exit-0 "exit $trc"
PIDS[2]=
sleep 0.3
"$PY" tests/e2e/scaleout_load.py analyze --res "$T/res.json" --events "$EV" \
    --http-log "$NG/logs/http.log" --stream-log "$NG/logs/stream.log" \
    --http-ports "$(tr ' ' , <<<"${HP[*]}")" --sock-ports "$(tr ' ' , <<<"${SP[*]}")" --killed 1 \
    || NFAIL=$((NFAIL + 1))
# keep what the analysis read, for a look after a failure
mkdir -p "$OUT/scaleout" && cp "$NG/logs/"*.log "$EV" "$T/res.json" "$T"/deformd*.log "$OUT/scaleout/" 2>/dev/null
if [ -s "$NG/logs/error.log" ]; then
    echo "# nginx error log (last lines):"; tail -5 "$NG/logs/error.log" | sed 's/^/#   /'
fi
finish
