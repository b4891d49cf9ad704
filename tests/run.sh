#!/usr/bin/env bash
# tests/run.sh — runs every test suite and prints "N passed, N failed".
#
# Suites: each unit-test binary under $B/tests (one per tests/unit/**/test_*.c)
# and each executable tests/e2e/*.sh (end-to-end: real daemon, real sockets).
# A suite prints "ok NAME" / "FAIL NAME" lines; they are counted. A suite that
# exits non-zero or times out without printing a FAIL line counts as one failure.
# Output of each suite goes to $B/test-logs/<suite>.log; failures are shown.
# DF_UNIT_FILTER=core/ runs only the unit suites under tests/unit/core/;
# DF_UNIT_ONLY=1 stops after the unit suites (no end-to-end suites).
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
BIN=${BIN:-bin}
export B BIN
export DF_TEST_OUT=${DF_TEST_OUT:-$PWD/$B/test-out}
LOGS=$B/test-logs
mkdir -p "$LOGS" "$DF_TEST_OUT"
TIMEOUT=${DF_TEST_TIMEOUT:-600}
passed=0
failed=0
failed_names=()

# logs of unit suites whose source moved or went away: removed (a stale FAIL
# line must not be read as today's)
suites=()
for src in $(find tests/unit -name 'test_*.c'); do
    rel=${src#tests/unit/}
    rel=${rel%.c}
    suites+=("${rel//\//-}")
done
for log in "$LOGS"/unit-*.log; do
    [ -e "$log" ] || continue
    n=${log##*/unit-}
    n=${n%.log}
    found=0
    for r in "${suites[@]}"; do
        case "$n" in "$r" | *-"$r") found=1; break ;; esac
    done
    [ "$found" -eq 1 ] || rm -f "$log"
done

run_suite() {
    local name=$1; shift
    local log=$LOGS/$name.log
    local start=$(date +%s)
    timeout -k 10 "$TIMEOUT" "$@" >"$log" 2>&1
    local rc=$?
    local p f
    p=$(grep -c '^ok ' "$log")
    f=$(grep -c '^FAIL ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        echo "FAIL $name (exit $rc)" >>"$log"
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    local secs=$(( $(date +%s) - start ))
    if [ "$f" -gt 0 ]; then
        failed_names+=("$name")
        printf '%-40s %4d passed %4d FAILED (%ds)\n' "$name" "$p" "$f" "$secs"
        grep -E '^FAIL |check failed|error|ERROR|Sanitizer' "$log" | head -20 | sed 's/^/    /'
    else
        printf '%-40s %4d passed (%ds)\n' "$name" "$p" "$secs"
    fi
}

# one binary per source (tests/unit/core/rigged/test_rigged.c -> $B/tests/core/rigged/test_rigged,
# suite unit-core-rigged-test_rigged); a stale binary whose source moved is not run
UNIT_FILTER=${DF_UNIT_FILTER:-}
for src in $(find tests/unit -name 'test_*.c' | sort); do
    rel=${src#tests/unit/}
    rel=${rel%.c}
    case "$rel" in $UNIT_FILTER*) ;; *) continue ;; esac
    run_suite "unit-${rel//\//-}" "$B/tests/$rel"
done
# DF_ALT_BUILDS="DIR:FILTER:TAG ...": the unit suites under FILTER again from
# another build (make test: build/noavx512:core/:noavx512)
for alt in ${DF_ALT_BUILDS:-}; do
    IFS=: read -r adir afilter atag <<<"$alt"
    for src in $(find tests/unit -name 'test_*.c' | sort); do
        rel=${src#tests/unit/}
        rel=${rel%.c}
        case "$rel" in $afilter*) ;; *) continue ;; esac
        run_suite "unit-$atag-${rel//\//-}" "$adir/tests/$rel"
    done
done
[ -n "${DF_UNIT_ONLY:-}" ] && { echo; echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }
for t in tests/e2e/*.sh tests/e2e/*.py; do
    [ -x "$t" ] || continue
    run_suite "e2e-$(basename "$t")" "$t"
done

echo
[ ${#failed_names[@]} -gt 0 ] && echo "failed suites: ${failed_names[*]} (logs in $LOGS)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
