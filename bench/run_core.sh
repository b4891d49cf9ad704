#!/usr/bin/env bash
# bench/run_core.sh — `make bench-core`: skinning and morph-target throughput
# of the rigged kind beside its baselines (triad bandwidth, a plain scalar
# LBS loop, bare cblas_sgemm/sgemv), see bench/bench_core.c.
#
# Real mesh: when bin/deform exists, the largest skinned asset of
# assimp-testmodels (X/Testwuson.X) is imported into a scratch repository
# and benchmarked next to the synthetic 50k-vertex mesh (always included).
#   BENCH_QUICK=1 bench/run_core.sh   shorter repetitions
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
BIN=${BIN:-bin}
out=${DF_BENCH_OUT:-$B/bench-out}
mkdir -p "$out"
export DF_BENCH_OUT=$out
args=()
[ -n "${BENCH_QUICK:-}" ] && args+=(--quick)
asset=/usr/share/assimp/models/X/Testwuson.X
if [ -x "$BIN/deform" ] && [ -f "$asset" ]; then
    rm -rf "$out/repo"
    if "$BIN/deform" import "$asset" --repository "$out/repo" --name wuson >"$out/import.log" 2>&1; then
        m=$(ls "$out"/repo/wuson/*/model.safetensors | head -1)
        args+=(--model "$m")
    else
        echo "bench-core: import of $asset failed (see $out/import.log); synthetic mesh only"
    fi
else
    echo "bench-core: no $BIN/deform or $asset; synthetic mesh only"
fi
echo "bench-core: $(date -u +%FT%TZ) $(uname -m), load $(cut -d' ' -f1-3 /proc/loadavg)"
nice "$B/bench/bench_core" "${args[@]}"
