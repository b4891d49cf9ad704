#!/usr/bin/env bash
# bench/bench_decompose_init.sh — the decomposition's two initialisers on characters the network
# never saw (docs/decompose.md, "Network initialisation").
#
#   make decompose-init-weights   # dataset + training only: $B/decompose-init/weights.safetensors
#   make eval-decompose-init      # ... then every test sequence x BONES x initialiser
#
# 1. tools/decompose/make_dataset.sh: sequences with the true bone of each vertex, split by
#    character (test: Testwuson's walk and run, BCN_Epileptic; train: the other skinned assets of
#    assimp-testmodels, 200 synthetic characters and, when build/ext/redeclipse holds it, the Red
#    Eclipse male player);
# 2. deform decompose train-init on the training characters (STEPS, SEED), scores of every
#    sequence for the network and for the raw trajectories ($OUT/train.txt);
# 3. deform decompose on each test sequence with --init cluster, --init network and --init
#    network --init-rounds 0 (the network's clusters without rigid reassignment), BONES bone
#    counts, 30 iterations, one thread: ERMS after the initialisation and after the fit (% of the
#    rest bbox diagonal), iterations, seconds. Machine: docs/performance.md (shared; times are
#    indicative).
set -eu
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
B=${B:-build}
OUT=${OUT:-$B/decompose-init}
STEPS=${STEPS:-8000}
SEED=${SEED:-1}
BONES=${BONES:-8 16 32}
export OPENBLAS_NUM_THREADS=1
mkdir -p "$OUT"
if ! ls "$OUT"/seq/test/*.safetensors >/dev/null 2>&1; then
    BIN=$BIN B=$B tools/decompose/make_dataset.sh "$OUT/seq" >"$OUT/dataset.txt"
fi
W=$OUT/weights.safetensors
tests=()
for f in "$OUT"/seq/test/*.safetensors; do tests+=(--test "$f"); done
echo "== training (steps $STEPS, seed $SEED): $OUT/train.txt" >&2
"$BIN/deform" decompose train-init "$OUT"/seq/train/*.safetensors "${tests[@]}" --steps "$STEPS" \
    --seed "$SEED" --out "$W" >"$OUT/train.txt" 2>"$OUT/train.log" || { cat "$OUT/train.log" >&2; exit 1; }
grep -E "^train-init: [0-9]+ training|step $STEPS/" "$OUT/train.log" >&2 || true
grep -E "^(set|mean|test)" "$OUT/train.txt"
[ "${1:-}" = weights ] && { echo "weights: $W"; exit 0; }

R=$OUT/repo
echo
echo "| sequence | bones | initialiser | ERMS after init | ERMS after fit | iterations | init s | total s |"
echo "|---|---|---|---|---|---|---|---|"
for f in "$OUT"/seq/test/*.safetensors; do
    name=$(basename "$f" .safetensors)
    for nb in $BONES; do
        for init in cluster network network0; do
            case $init in
                cluster) args=(--init cluster) ;;
                network) args=(--init network --init-weights "$W") ;;
                network0) args=(--init network --init-weights "$W" --init-rounds 0) ;;
            esac
            "$BIN/deform" decompose "$f" --bones "$nb" "${args[@]}" --repository "$R" --name fit --quiet \
                --metrics-json "$OUT/m.json" >/dev/null 2>"$OUT/fit.log" || { cat "$OUT/fit.log" >&2; exit 1; }
            python3 - "$OUT/m.json" "$name" "$nb" "$init" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
label = {"cluster": "cluster", "network": "network", "network0": "network, 0 rounds"}[sys.argv[4]]
print("| %s | %s | %s | %.4f | %.4f | %d | %.2f | %.2f |" % (sys.argv[2], sys.argv[3], label,
      m["erms_init_pct"], m["erms_pct"], m["iterations"], m["init_seconds"], m["seconds"]))
EOF
        done
    done
done
rm -rf "$R"
