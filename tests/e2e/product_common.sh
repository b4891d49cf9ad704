# tests/e2e/product_common.sh — the shared harness of the e2e suites (readme_examples,
# python_client, viewer, docker_steps, socket, rigapprox). Sourced, not run (not executable).
#
# Gives: ROOT, BIN, OUT (test output dir), PY (Debian's python3, with numpy),
# T (a temp dir removed at exit), ok/fail/check (the "ok NAME"/"FAIL NAME"
# lines tests/run.sh counts), free_port, build_demo DIR, start_daemon REPO
# (sets HTTP, SOCK, URL, DPID; the daemon is stopped at exit).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BIN=${BIN:-bin}
case "$BIN" in /*) ;; *) BIN=$ROOT/$BIN ;; esac
export BIN
OUT=${DF_TEST_OUT:-$ROOT/build/test-out}
mkdir -p "$OUT"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
T=$(mktemp -d "${TMPDIR:-/tmp}/df-product.XXXXXX")
DPID=
NFAIL=0

cleanup() {
    if [ -n "$DPID" ]; then
        kill -TERM "$DPID" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$DPID" 2>/dev/null
    fi
    rm -rf "$T"
}
trap cleanup EXIT

ok() { echo "ok $1"; }
fail() { echo "FAIL $1${2:+: $2}"; NFAIL=$((NFAIL + 1)); }
# check NAME CMD...: ok when CMD succeeds; its output goes to the log.
check() {
    local name=$1; shift
    if "$@"; then ok "$name"; else fail "$name" "command failed: $*"; fi
}

free_port() {
    "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# build_demo DIR: the demo repository, built by the same script `make run` uses.
build_demo() {
    BIN=$BIN "$ROOT/tools/make_demo.sh" "$1" >"$T/make_demo.log" 2>&1 || {
        cat "$T/make_demo.log"
        return 1
    }
}

# start_daemon REPO [extra deformd args]: on free ports; waits for ready.
start_daemon() {
    local repo=$1; shift
    HTTP=$(free_port)
    SOCK=$(free_port)
    while [ "$SOCK" = "$HTTP" ]; do SOCK=$(free_port); done
    URL=http://127.0.0.1:$HTTP
    "$BIN/deformd" --repository "$repo" --host 127.0.0.1 --http-port "$HTTP" \
        --socket-port "$SOCK" "$@" >"$T/deformd.log" 2>&1 &
    DPID=$!
    for _ in $(seq 1 300); do
        if ! kill -0 "$DPID" 2>/dev/null; then
            echo "deformd exited:"; cat "$T/deformd.log"; DPID=; return 1
        fi
        curl -sf "$URL/v2/health/ready" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "deformd not ready after 30 s:"; cat "$T/deformd.log"
    return 1
}

# finish: exit status for tests/run.sh (non-zero when something failed).
finish() { [ "$NFAIL" -eq 0 ]; }
