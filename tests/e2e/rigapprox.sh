#!/usr/bin/env bash
# tests/e2e/rigapprox.sh — a trained rigapprox model served by the real daemon
# equals the offline evaluation.
#
# Steps: generate a tiny dataset with the C reference rig (`deform rigdata
# --tiny`), train a tiny model (`deform train`, a few epochs), evaluate it
# offline in-process (`deform train --evaluate --positions`, no server),
# start bin/deformd on the repository and send the same poses over HTTP
# (KServe v2 JSON): one pose per request and four poses in one request.
# Reference: the offline positions; tolerance 1e-5 x character height
# (batch composition may change float summation order; the server prints
# float32 with 9 significant digits). Also: a malformed request (wrong
# joint_matrices shape) gets a 4xx answer naming the input; `deform train
# --omega 4` writes omega 4 into the model. And `deform train
# --add-anchors` on the trained model: the second model is served equal to its
# own offline evaluation and differs from the first; without --from: usage.
. "$(dirname "$0")/product_common.sh"

"$BIN/deform" rigdata --tiny 10,8 --out "$T/data.st" --samples 160 --influence-poses 4 >"$T/rigdata.log" 2>&1 \
    && ok ra-rigdata || { cat "$T/rigdata.log"; fail ra-rigdata; finish; exit 1; }
"$BIN/deform" train "$T/data.st" --out "$T/repo/tinyra" --epochs 4 --layers 2 --width 16 \
    --anchor-layers 2 --anchor-width 8 --anchors 0.05 --quiet >"$T/train.log" 2>&1 \
    && ok ra-train || { cat "$T/train.log"; fail ra-train; finish; exit 1; }
# --omega reaches the written model: its anchor weight (metadata 'omega'), in
# a repository of its own (the daemon below does not serve it)
"$BIN/deform" train "$T/data.st" --out "$T/om/tinyra" --epochs 1 --layers 1 --width 8 --anchor-layers 1 \
    --anchor-width 4 --anchors 0.05 --omega 4 --quiet >"$T/train_om.log" 2>&1 \
    && "$PY" -c 'import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
sys.exit(0 if float(h["__metadata__"]["omega"]) == 4 else 1)' "$T/om/tinyra/1/model.safetensors" \
    && ok ra-train-omega || { cat "$T/train_om.log"; fail ra-train-omega; }
"$BIN/deform" train --evaluate "$T/repo/tinyra" "$T/data.st" --positions "$T/offline.npy" >"$T/eval.log" 2>&1 \
    && ok ra-offline-eval || { cat "$T/eval.log"; fail ra-offline-eval; finish; exit 1; }
# error-driven anchors (deform train --add-anchors): a second model in the
# same repository, served and evaluated like the first
"$BIN/deform" train --add-anchors 3 --from "$T/repo/tinyra" "$T/data.st" --out "$T/repo/tinyra_aa" --rounds 1 \
    --epochs 5 >"$T/aa.log" 2>&1 && grep -q "round 1/1: 3 anchors added" "$T/aa.log" && ok ra-add-anchors \
    || { cat "$T/aa.log"; fail ra-add-anchors; }
"$BIN/deform" train --evaluate "$T/repo/tinyra_aa" "$T/data.st" --positions "$T/offline_aa.npy" >"$T/eval_aa.log" 2>&1 \
    && ok ra-add-anchors-eval || { cat "$T/eval_aa.log"; fail ra-add-anchors-eval; }
"$BIN/deform" train --add-anchors 3 "$T/data.st" --out "$T/repo/x" >"$T/aa2.log" 2>&1
[ $? -eq 2 ] && grep -q "add-anchors K --from" "$T/aa2.log" && [ ! -e "$T/repo/x" ] && ok ra-add-anchors-needs-from \
    || { cat "$T/aa2.log"; fail ra-add-anchors-needs-from; }
start_daemon "$T/repo" && ok ra-daemon-ready || { fail ra-daemon-ready; finish; exit 1; }

"$PY" - "$T" "$URL" <<'EOF' || NFAIL=$((NFAIL + 1))
import json, struct, sys, urllib.request, urllib.error
import numpy as np
T, URL = sys.argv[1], sys.argv[2]
fails = 0
def check(name, cond, detail=""):
    global fails
    print(("ok " if cond else "FAIL ") + "ra-" + name + ("" if cond else " " + str(detail)))
    fails += 0 if cond else 1

def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        dt = {"F32": np.float32, "I32": np.int32}[v["dtype"]]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=dt).reshape(v["shape"])
    return out

d = read_st(T + "/data.st")
ref = np.load(T + "/offline.npy")
rest = d["rest_positions"]
height = float((rest.max(0) - rest.min(0)).max())
tol = 1e-5 * height

def infer(body, model="tinyra"):
    req = urllib.request.Request(URL + "/v2/models/" + model + "/infer", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")

def positions(ans):
    o = next(o for o in ans["outputs"] if o["name"] == "positions")
    return np.array(o["data"], dtype=np.float64).reshape(o["shape"])

C = d["controls"].shape[1]
J = d["joint_matrices"].shape[1]
worst = 0.0
for p in (0, 3, 17):
    st, ans = infer({"inputs": [
        {"name": "controls", "shape": [C], "datatype": "FP32", "data": d["controls"][p].tolist()},
        {"name": "joint_matrices", "shape": [J, 12], "datatype": "FP32", "data": d["joint_matrices"][p].ravel().tolist()}]})
    if st != 200:
        check("http-single-%d" % p, False, "status %s %s" % (st, ans))
        continue
    got = positions(ans).reshape(-1, 3)
    worst = max(worst, float(np.abs(got - ref[p]).max()))
check("http-single-equals-offline", worst <= tol, "max diff %g > %g" % (worst, tol))

idx = [5, 6, 7, 8]
st, ans = infer({"inputs": [
    {"name": "controls", "shape": [4, C], "datatype": "FP32", "data": d["controls"][idx].ravel().tolist()},
    {"name": "joint_matrices", "shape": [4, J, 12], "datatype": "FP32", "data": d["joint_matrices"][idx].ravel().tolist()}]})
if st == 200:
    got = positions(ans).reshape(4, -1, 3)
    diff = float(np.abs(got - ref[idx]).max())
    check("http-batch4-equals-offline", diff <= tol, "max diff %g > %g" % (diff, tol))
else:
    check("http-batch4-equals-offline", False, "status %s %s" % (st, ans))

ref_aa = np.load(T + "/offline_aa.npy")
st, ans = infer({"inputs": [
    {"name": "controls", "shape": [4, C], "datatype": "FP32", "data": d["controls"][idx].ravel().tolist()},
    {"name": "joint_matrices", "shape": [4, J, 12], "datatype": "FP32", "data": d["joint_matrices"][idx].ravel().tolist()}]},
    "tinyra_aa")
if st == 200:
    got = positions(ans).reshape(4, -1, 3)
    diff = float(np.abs(got - ref_aa[idx]).max())
    check("http-add-anchors-equals-offline", diff <= tol and float(np.abs(ref_aa - ref).max()) > tol,
          "max diff %g > %g, or the extra anchors changed nothing" % (diff, tol))
else:
    check("http-add-anchors-equals-offline", False, "status %s %s" % (st, ans))

st, ans = infer({"inputs": [{"name": "joint_matrices", "shape": [J, 11], "datatype": "FP32",
                             "data": [0.0] * (J * 11)}]})
check("http-bad-shape-refused", 400 <= st < 500 and "joint_matrices" in str(ans), "status %s %s" % (st, ans))
sys.exit(1 if fails else 0)
EOF
finish
