#!/usr/bin/env bash
# tests/e2e/readme_examples.sh — every curl line of README.md, executed.
#
# Builds the demo repository with tools/make_demo.sh (as `make run` does) in a
# temp dir, starts bin/deformd on it on free ports, then takes each line that
# starts with "curl " inside the README's ```sh blocks, rewrites the host/port
# (localhost:8000 -> 127.0.0.1:<port>) and the demo-repo path, runs it in a
# scratch directory with --fail added and checks: exit status 0, and a
# non-empty answer (stdout, or the -o file). JSON answers must parse. Also
# checks that the README keeps its two commands and tools/run_demo.sh's
# printed examples (the same kind of lines) work.
. "$(dirname "$0")/product_common.sh"

grep -qx 'make run' README.md && grep -qx 'make test' README.md \
    && ok readme-two-commands || fail readme-two-commands "README must show 'make run' and 'make test'"

build_demo "$T/demo-repo" && ok readme-demo-repo || { fail readme-demo-repo; finish; exit 1; }
start_daemon "$T/demo-repo" && ok readme-daemon-ready || { fail readme-daemon-ready; finish; exit 1; }

mapfile -t lines < <(awk '/^```sh/{s=1;next} /^```/{s=0} s && /^curl /' README.md)
[ ${#lines[@]} -ge 5 ] && ok "readme-has-curl-examples-${#lines[@]}" \
    || fail readme-has-curl-examples "only ${#lines[@]} curl lines found"

mkdir -p "$T/cwd"
i=0
for line in "${lines[@]}"; do
    i=$((i + 1))
    cmd=${line//localhost:8000/127.0.0.1:$HTTP}
    cmd=${cmd//@demo-repo\//@$T/demo-repo/}
    cmd="curl --fail --max-time 30 ${cmd#curl }"
    outfile=$(sed -n 's/.* -o \([^ ]*\).*/\1/p' <<<"$cmd")
    (cd "$T/cwd" && eval "$cmd") >"$T/ex$i.out" 2>"$T/ex$i.err"
    rc=$?
    name="readme-example-$i"
    if [ "$rc" -ne 0 ]; then
        echo "example $i failed (curl exit $rc): $line"; head -c 400 "$T/ex$i.err" "$T/ex$i.out"; echo
        fail "$name" "curl exit $rc"
        continue
    fi
    if [ -n "$outfile" ] && [ "$outfile" != /dev/null ]; then
        f=$T/cwd/$outfile
        [ -s "$f" ] || { fail "$name" "empty $outfile"; continue; }
        case "$outfile" in
            *.glb) [ "$(head -c 4 "$f")" = glTF ] || { fail "$name" "$outfile is not glb"; continue; } ;;
        esac
        cp "$f" "$OUT/readme-$outfile"
    else
        [ -s "$T/ex$i.out" ] || { fail "$name" "empty answer"; continue; }
        if head -c 1 "$T/ex$i.out" | grep -q '[{[]'; then
            "$PY" -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/ex$i.out" \
                || { fail "$name" "answer is not JSON"; continue; }
        fi
    fi
    ok "$name"
done

# Infer answers carry positions of the right size (the README claims it).
"$PY" - "$T" <<'EOF' && ok readme-infer-answers-sane || fail readme-infer-answers-sane
import json, glob, sys, os
t = sys.argv[1]
n = 0
for f in sorted(glob.glob(os.path.join(t, "ex*.out"))):
    try:
        d = json.load(open(f))
    except Exception:
        continue
    for o in d.get("outputs", []) if isinstance(d, dict) else []:
        if o.get("name") == "positions" and "data" in o:
            flat = o["data"]
            while flat and isinstance(flat[0], list):
                flat = [x for r in flat for x in r]
            shape = o["shape"]
            size = 1
            for s in shape:
                size *= s
            assert len(flat) == size and shape[-1] == 3, (f, shape, len(flat))
            assert all(isinstance(x, (int, float)) for x in flat)
            n += 1
assert n >= 3, "expected >= 3 JSON answers with positions, got %d" % n
EOF

# The examples tools/run_demo.sh prints are the same kind of lines: run them too.
stop_daemon() { kill -TERM "$DPID" 2>/dev/null; wait "$DPID" 2>/dev/null; DPID=; }
stop_daemon
RH=$(free_port); RS=$(free_port)
DF_HTTP_PORT=$RH DF_SOCKET_PORT=$RS BIN=$BIN tools/run_demo.sh "$T/demo-repo" >"$T/run_demo.out" 2>&1 &
RPID=$!
for _ in $(seq 1 300); do grep -q 'Ctrl-C stops' "$T/run_demo.out" 2>/dev/null && break; sleep 0.1; done
mapfile -t rex < <(sed -n 's/^  \(curl .*\)$/\1/p' "$T/run_demo.out")
good=0
for c in "${rex[@]}"; do
    c=${c% | head*}
    if (eval "curl --fail --max-time 30 ${c#curl }") >/dev/null 2>&1; then good=$((good + 1)); fi
done
[ ${#rex[@]} -eq 3 ] && [ "$good" -eq 3 ] && ok run-demo-prints-3-working-examples \
    || { cat "$T/run_demo.out"; fail run-demo-prints-3-working-examples "${good}/${#rex[@]} worked"; }
grep -q "$RH" "$T/run_demo.out" && grep -q "$RS" "$T/run_demo.out" \
    && ok run-demo-prints-ports || fail run-demo-prints-ports
# (a background job of a script ignores SIGINT, so stop it the other way its
# trap handles: SIGTERM; an interactive Ctrl-C reaches the same trap)
kill -TERM "$RPID" 2>/dev/null
wait "$RPID"
rc=$?
[ "$rc" -eq 0 ] && ok run-demo-stops-cleanly || fail run-demo-stops-cleanly "exit $rc"
finish
