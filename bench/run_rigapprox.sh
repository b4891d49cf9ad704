#!/usr/bin/env bash
# bench/run_rigapprox.sh — `make bench-rigapprox`: rigapprox served throughput
# vs PyTorch on the same weights and thread count, the batch-1 weight
# streaming floor, and sparse vs dense reconstruction, in one run.
#
# Models (built once under $OUT, timings do not depend on training quality):
#   wuson-3x256  : Testwuson (3205 vertices, 39 joints) dataset from the C
#                  reference rig, default widths, 1 epoch;
#   wuson-5x2048 : the paper's 5 x 2048 differential network (0 epochs).
# They are rebuilt when bin/deform is newer than the dataset, so the bench
# always runs models made with the current training defaults (anchor count,
# features...). Set RA_MODEL=path/model.safetensors to bench another model.
set -eu
cd "$(dirname "$0")/.."
B=${B:-build}
BIN=${BIN:-bin}
OUT=${OUT:-$B/bench-rigapprox}
mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=1
if [ -z "${RA_MODEL:-}" ]; then
    if [ -f "$OUT/data.st" ] && [ "$BIN/deform" -nt "$OUT/data.st" ]; then
        echo "bin/deform changed since the bench models were made: rebuilding them"
        rm -rf "$OUT/data.st" "$OUT/repo/w3x256" "$OUT/repo/w5x2048"
    fi
    [ -f "$OUT/repo/wuson/1/model.safetensors" ] ||
        "$BIN/deform" import /usr/share/assimp/models/X/Testwuson.X --repository "$OUT/repo" --name wuson >/dev/null
    [ -f "$OUT/data.st" ] ||
        "$BIN/deform" rigdata --rigged "$OUT/repo/wuson/1/model.safetensors" --out "$OUT/data.st" \
            --samples 400 --influence-poses 10
    [ -f "$OUT/repo/w3x256/1/model.safetensors" ] ||
        "$BIN/deform" train "$OUT/data.st" --out "$OUT/repo/w3x256" --epochs 1 --quiet
    [ -f "$OUT/repo/w5x2048/1/model.safetensors" ] ||
        "$BIN/deform" train "$OUT/data.st" --out "$OUT/repo/w5x2048" --epochs 0 --layers 5 --width 2048 --quiet
    MODELS="$OUT/repo/w3x256/1/model.safetensors $OUT/repo/w5x2048/1/model.safetensors"
else
    MODELS=$RA_MODEL
fi
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
HAVE_TORCH=0
"$PY" -c "import torch" 2>/dev/null && HAVE_TORCH=1
# the PyTorch anchor: Debian's python3-torch, installed when missing (as root or through sudo)
if [ "$HAVE_TORCH" = 0 ]; then
    SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
    echo "bench-rigapprox: installing python3-torch (the PyTorch side of the comparison)"
    if $SUDO apt-get install -y -q --no-install-recommends python3-torch >/dev/null ||
        { $SUDO apt-get update -qq && $SUDO apt-get install -y -q --no-install-recommends python3-torch >/dev/null; }; then
        "$PY" -c "import torch" 2>/dev/null && HAVE_TORCH=1
    fi
fi
for M in $MODELS; do
    echo "=================================================================="
    "$B/bench/bench_rigapprox" "$M" --dump "$OUT/folded.st" | tee "$OUT/c.txt"
    if [ "$HAVE_TORCH" = 1 ]; then
        "$PY" bench/bench_rigapprox_torch.py "$M" "$OUT/folded.st" | tee "$OUT/torch.txt"
        # ours and PyTorch again, in alternation, RA_REPEAT times in all: each side's best,
        # so that a busy moment of a shared machine does not fall on one side only
        for _ in $(seq 2 "${RA_REPEAT:-3}"); do
            "$B/bench/bench_rigapprox" "$M" --served-only >>"$OUT/c.txt"
            "$PY" bench/bench_rigapprox_torch.py "$M" "$OUT/folded.st" >>"$OUT/torch.txt"
        done
        echo
        echo "served poses/s, 1 thread, same weights: ours (C, dense) vs PyTorch $("$PY" -c 'import torch; print(torch.__version__)')"
        echo "(torch: anchor networks batched, padded inputs + one bmm per layer; loop: one network at a time;"
        echo " each side's best of ${RA_REPEAT:-3} alternating runs)"
        for b in 1 8 32 128; do
            best() { awk -v k="$1" '$1==k && $2>m{m=$2} END{print m}' "$2"; }
            o=$(best "OURS_B$b" "$OUT/c.txt")
            t=$(best "TORCH_B$b" "$OUT/torch.txt")
            l=$(best "TORCH_LOOP_B$b" "$OUT/torch.txt")
            awk -v b="$b" -v o="$o" -v t="$t" -v l="$l" 'BEGIN{printf "  batch %4d  ours %8.0f  torch %8.0f  ratio %.2fx   (loop %8.0f)\n", b, o, t, o/t, l}'
        done
    else
        echo "(python3-torch could not be installed: no PyTorch column)"
    fi
done
