#!/usr/bin/env bash
# tests/e2e/decompose.sh — `deform decompose` end to end: raw sequences, a
# directory of OBJ frames, a real asset (Testwuson, imported and baked), the
# exported model replayed by `deform eval` and served by a real deformd.
#
# References, independent of the code under test:
#  - a known LBS rig generated here in numpy (the exact answer exists): the
#    fit, evaluated by `deform eval` from the written model, must match the
#    generated frames to ERMS < 1e-4 of the bbox diagonal (computed here);
#  - for Testwuson the source model baked by `deform eval` at the same
#    times; the error is recomputed here in numpy and must agree with the
#    tool's printed metrics;
#  - the daemon's answer for the fitted skeleton's clip at its key times
#    must match `deform eval` of the same frames (<= 1e-6 x diagonal).
# Malformed inputs must exit 1 with a message naming the problem.
. "$(dirname "$0")/product_common.sh"
D="$BIN/deform"
REPO=$T/repo

# ---------------------------------------------------------------- raw rig
"$PY" - "$T" <<'EOF' || { fail dec-generate; finish; exit 1; }
import json, struct, sys, os
import numpy as np
T = sys.argv[1]
rng = np.random.default_rng(7)

def save(path, tensors):
    hdr, off, blobs = {}, 0, []
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        dt = {np.float32: "F32", np.int32: "I32"}[arr.dtype.type]
        hdr[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h)
        for b in blobs: f.write(b)

def rot(axis, ang):
    a = axis / np.linalg.norm(axis); K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + np.sin(ang) * K + (1 - np.cos(ang)) * K @ K

rings, seg, B, F = 36, 12, 5, 20
y = np.repeat(np.linspace(0, 2, rings), seg)
a = np.tile(np.arange(seg) * 2 * np.pi / seg, rings)
rest = np.stack([0.3 * np.cos(a), y, 0.3 * np.sin(a)], 1)
c = 2 * (np.arange(B) + 0.5) / B
W = np.maximum(0, 1 - np.abs(y[:, None] - c[None]) / (1.5 / B)); W /= W.sum(1, keepdims=True)
tris = []
for r in range(rings - 1):
    for k in range(seg):
        p, q = r * seg + k, r * seg + (k + 1) % seg
        tris += [[p, p + seg, q], [q, p + seg, q + seg]]
tris = np.array(tris, np.int32)
frames = np.zeros((F, len(rest), 3))
for f in range(F):
    out = np.zeros_like(rest)
    for j in range(B):
        R = rot(rng.normal(size=3), 0 if f == 0 else 0.8 * rng.random())
        t = 0 if f == 0 else 0.4 * (rng.random(3) - 0.5)
        out += W[:, j:j + 1] * (rest @ R.T + t)
    frames[f] = out
frames = frames.astype(np.float32)
times = (np.arange(F) / 25.0).astype(np.float32)
np.save(f"{T}/rig_frames.npy", frames)
save(f"{T}/rig.safetensors", {"frames": frames, "triangles": tris, "times": times})
# malformed variants
save(f"{T}/one_frame.safetensors", {"frames": frames[:1], "triangles": tris})
bad = frames.copy(); bad[3, 17, 2] = np.nan
save(f"{T}/nan.safetensors", {"frames": bad, "triangles": tris})
bt = tris.copy(); bt[5, 1] = len(rest) + 3
save(f"{T}/badtri.safetensors", {"frames": frames, "triangles": bt})
save(f"{T}/rank2.safetensors", {"frames": frames[:, :, 0].copy(), "triangles": tris})
save(f"{T}/notimes.safetensors", {"frames": frames, "triangles": tris,
                                   "times": times[::-1].copy()})
# per-frame OBJ directory, and one whose frame 7 lost a vertex
for d, drop in (("objseq", False), ("objbad", True)):
    os.makedirs(f"{T}/{d}", exist_ok=True)
    for f in range(F):
        n = len(rest) - (1 if drop and f == 7 else 0)
        with open(f"{T}/{d}/frame{f:03d}.obj", "w") as o:
            for v in frames[f][:n]: o.write("v %.7f %.7f %.7f\n" % tuple(v))
            for t in tris:
                if drop and f == 7 and t.max() >= n: continue
                o.write("f %d %d %d\n" % tuple(t + 1))
EOF
ok dec-generate

# erms(npy_a, npy_b) -> prints ERMS/diag (diag of a's frame 0) and MaxAvgDist/diag
cat >"$T/cmp.py" <<'EOF'
import sys, numpy as np
a, b = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2]).astype(np.float64)
assert a.shape == b.shape, (a.shape, b.shape)
diag = np.linalg.norm(a[0].max(0) - a[0].min(0))
e = np.sqrt(((a - b) ** 2).mean()) / diag
mad = np.linalg.norm(a - b, axis=2).max(1).mean() / diag
print("%.9g %.9g %.9g" % (e, mad, diag))
EOF

"$D" decompose "$T/rig.safetensors" --bones 5 --max-influences 4 --iters 100 --tol 1e-5 \
    --repository "$REPO" --name rig --metrics-json "$T/rig.json" >"$T/rig.log" 2>&1 \
    && ok dec-raw-fit || { cat "$T/rig.log"; fail dec-raw-fit; }
"$D" eval "$REPO/rig" --clip fit --out "$T/rig_fit.npy" >>"$T/rig.log" 2>&1 \
    && ok dec-raw-eval || { cat "$T/rig.log"; fail dec-raw-eval; }
read -r E MAD DIAG < <("$PY" "$T/cmp.py" "$T/rig_frames.npy" "$T/rig_fit.npy" 2>&1)
echo "raw rig: ERMS/diag $E MaxAvgDist/diag $MAD"
"$PY" -c "import sys; sys.exit(0 if float('$E') < 1e-4 else 1)" 2>/dev/null \
    && ok dec-raw-recovered || fail dec-raw-recovered "ERMS/diag $E (want < 1e-4)"
"$PY" - "$T/rig.json" "$E" <<'EOF' && ok dec-raw-metrics-agree || fail dec-raw-metrics-agree
import json, sys
m = json.load(open(sys.argv[1])); e = float(sys.argv[2])
print("tool ERMS %% %g, here %g" % (m["erms_pct"], 100 * e))
sys.exit(0 if abs(m["erms_pct"] - 100 * e) <= 1e-3 * 100 * e + 1e-7 else 1)
EOF
# the written model's clip keeps the input frame times
"$D" info "$REPO/rig" >"$T/rig_info.log" 2>&1
# (rigid bones, the default: a skeleton with a local rotation/translation clip)
grep -q 'clip/0/rotations *F32 *\[20,5,4\]' "$T/rig_info.log" && grep -q 'joint_parents' "$T/rig_info.log" \
    && ok dec-raw-clip-skeleton || { cat "$T/rig_info.log"; fail dec-raw-clip-skeleton; }

# 2 threads give the same fit (only the summation order of reductions differs)
"$D" decompose "$T/rig.safetensors" --bones 5 --max-influences 4 --iters 100 --tol 1e-5 \
    --threads 2 --repository "$REPO" --name rig2 --metrics-json "$T/rig2.json" >"$T/rig2.log" 2>&1 \
    && "$PY" - "$T/rig.json" "$T/rig2.json" <<'EOF' && ok dec-raw-two-threads || { cat "$T/rig2.log"; fail dec-raw-two-threads; }
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print("1 thread %g %%, 2 threads %g %%" % (a["erms_pct"], b["erms_pct"]))
sys.exit(0 if abs(a["erms_pct"] - b["erms_pct"]) <= 1e-6 * a["erms_pct"] and b["erms_pct"] < 0.01 else 1)
EOF

# ---------------------------------------------------------------- OBJ frames
"$D" decompose "$T/objseq" --bones 5 --max-influences 4 --iters 100 --tol 1e-5 \
    --repository "$REPO" --name objseq --metrics-json "$T/obj.json" >"$T/obj.log" 2>&1 \
    && "$PY" -c "
import json,sys; m=json.load(open('$T/obj.json')); print(m['erms_pct'], m['vertices'], m['welded'])
sys.exit(0 if m['erms_pct'] < 0.01 and m['frames'] == 20 else 1)" \
    && ok dec-objdir-fit || { cat "$T/obj.log"; fail dec-objdir-fit; }

# ---------------------------------------------------------------- per-vertex assets
# MD2: every keyframe through assimp (per-corner vertices, welded by us);
# glTF morph animation: imported (morph clip) and baked by the rigged kind.
MD2=/usr/share/assimp/models/MD2/sydney.md2
if [ -f "$MD2" ]; then
    "$D" decompose "$MD2" --bones 16 --repository "$REPO" --name sydney \
        --metrics-json "$T/md2.json" >"$T/md2.log" 2>&1 && "$PY" -c "
import json,sys; m=json.load(open('$T/md2.json'))
print('md2', m['frames'], m['vertices'], m['welded'], m['erms_pct'], m['replay_max_err'])
sys.exit(0 if m['frames'] == 198 and m['welded'] < m['vertices'] and m['erms_pct'] < 0.5
         and 0 <= m['replay_max_err'] <= 1e-5 * m['diag'] else 1)" \
        && ok dec-md2-keyframes || { cat "$T/md2.log"; fail dec-md2-keyframes; }
fi
CUBE=/usr/share/assimp/models/glTF2/glTF-Sample-Models/AnimatedMorphCube-glTF/AnimatedMorphCube.gltf
if [ -f "$CUBE" ]; then
    # 8 distinct corners moved by 2 morph targets: 4 affine bones fit it to
    # rounding (measured 2e-8 % of the diagonal; docs/decompose.md); rigid
    # bones cannot stretch it
    "$D" decompose "$CUBE" --bones 4 --transforms affine --repository "$REPO" --name cube \
        --metrics-json "$T/cube.json" >"$T/cube.log" 2>&1 && "$PY" -c "
import json,sys; m=json.load(open('$T/cube.json')); print('cube', m['erms_pct'])
sys.exit(0 if m['frames'] == 127 and m['erms_pct'] < 1e-3 else 1)" \
        && ok dec-morph-asset || { cat "$T/cube.log"; fail dec-morph-asset; }
fi

# ---------------------------------------------------------------- malformed
refuse() { # NAME PATTERN ARGS...
    local name=$1 pat=$2; shift 2
    "$D" decompose "$@" --repository "$REPO" --name bad >"$T/$name.log" 2>&1
    local rc=$?
    if [ "$rc" -eq 1 ] && grep -q -- "$pat" "$T/$name.log"; then ok "$name"
    else cat "$T/$name.log"; fail "$name" "exit $rc, wanted 1 and '$pat'"; fi
}
refuse dec-refuse-one-frame "1 frame(s); at least 2" "$T/one_frame.safetensors" --bones 2
refuse dec-refuse-nan "frames" "$T/nan.safetensors" --bones 2
refuse dec-refuse-bad-triangle "triangle 5 references vertex" "$T/badtri.safetensors" --bones 2
refuse dec-refuse-rank "frames" "$T/rank2.safetensors" --bones 2
refuse dec-refuse-times "times' not increasing" "$T/notimes.safetensors" --bones 2
refuse dec-refuse-too-many-bones "bones is more than the 432 vertices" "$T/rig.safetensors" --bones 500
refuse dec-refuse-vertex-count "frame 7 has 2511 vertices" "$T/objbad" --bones 2
refuse dec-refuse-missing "No such file" "$T/nothere.safetensors" --bones 2
refuse dec-refuse-influences "max influences 9" "$T/rig.safetensors" --bones 2 --max-influences 9
refuse dec-refuse-bone-limit "exceeds the limit of 256" "$T/objseq" --bones 300
[ ! -e "$REPO/bad" ] && ok dec-refuse-wrote-nothing || fail dec-refuse-wrote-nothing

# ---------------------------------------------------------------- Testwuson
WUSON=/usr/share/assimp/models/X/Testwuson.X
if [ -f "$WUSON" ]; then
    "$D" import "$WUSON" --repository "$REPO" --name wuson >"$T/wuson.log" 2>&1 \
        && ok dec-wuson-import || { cat "$T/wuson.log"; fail dec-wuson-import; }
    "$D" decompose "$REPO/wuson" --clip Wuson_Walk --fps 24 --bones 16 \
        --repository "$REPO" --name walk16 --metrics-json "$T/walk16.json" >"$T/walk16.log" 2>&1 \
        && ok dec-wuson-fit || { cat "$T/walk16.log"; fail dec-wuson-fit; }
    "$PY" - "$T/walk16.json" <<'EOF' && ok dec-wuson-targets || fail dec-wuson-targets
import json, sys
m = json.load(open(sys.argv[1]))
print("walk16: frames %d vertices %d ERMS %.4f%% MaxAvgDist %.4f%% DisPer %.3f NormDistort %.4f" %
      (m["frames"], m["vertices"], m["erms_pct"], m["max_avg_dist_pct"], m["disper"], m["norm_distort"]))
sys.exit(0 if m["frames"] == 87 and m["erms_pct"] <= 0.1 and m["max_avg_dist_pct"] <= 1.0 else 1)
EOF
    # deform eval of the source and of the fit at the same times
    "$D" eval "$REPO/wuson" --clip Wuson_Walk --fps 24 --out "$T/walk_src.npy" >"$T/weval.log" 2>&1 \
        && "$D" eval "$REPO/walk16" --clip Wuson_Walk --out "$T/walk_fit.npy" >>"$T/weval.log" 2>&1 \
        && ok dec-wuson-eval || { cat "$T/weval.log"; fail dec-wuson-eval; }
    read -r WE WMAD WDIAG < <("$PY" "$T/cmp.py" "$T/walk_src.npy" "$T/walk_fit.npy" 2>&1)
    "$PY" - "$T/walk16.json" "$WE" "$WMAD" <<'EOF' && ok dec-wuson-eval-matches-metrics || fail dec-wuson-eval-matches-metrics
import json, sys
m = json.load(open(sys.argv[1])); e, mad = 100 * float(sys.argv[2]), 100 * float(sys.argv[3])
print("eval-based ERMS %.5f%% MaxAvgDist %.5f%%; tool %.5f%% %.5f%%" % (e, mad, m["erms_pct"], m["max_avg_dist_pct"]))
ok = abs(e - m["erms_pct"]) <= 0.01 * m["erms_pct"] and abs(mad - m["max_avg_dist_pct"]) <= 0.01 * m["max_avg_dist_pct"]
sys.exit(0 if ok and e <= 0.1 else 1)
EOF
    # --model-rest: "% of diag" against the model's rest mesh, not frame 0
    "$D" decompose "$REPO/wuson" --clip Wuson_Walk --fps 24 --bones 8 --iters 2 --model-rest \
        --repository "$REPO" --name walkrest --metrics-json "$T/walkrest.json" >"$T/walkrest.log" 2>&1 \
        && "$D" eval "$REPO/wuson" --rest --out "$T/wuson_rest.npy" >>"$T/walkrest.log" 2>&1 \
        && "$PY" - "$T/walkrest.json" "$T/wuson_rest.npy" "$T/walk_src.npy" <<'EOF' \
        && ok dec-model-rest-diag || { cat "$T/walkrest.log"; fail dec-model-rest-diag; }
import json, sys
import numpy as np
m = json.load(open(sys.argv[1]))
rest = np.load(sys.argv[2]).reshape(-1, 3).astype(np.float64)
f0 = np.load(sys.argv[3])[0].astype(np.float64)
d_rest = np.linalg.norm(rest.max(0) - rest.min(0))
d_f0 = np.linalg.norm(f0.max(0) - f0.min(0))
print("diag used %.6g, rest mesh %.6g, frame 0 %.6g" % (m["diag"], d_rest, d_f0))
sys.exit(0 if abs(m["diag"] - d_rest) <= 1e-5 * d_rest and abs(d_rest - d_f0) > 1e-3 * d_rest else 1)
EOF

    # ------------------------------------------------------------ daemon
    if [ -x "$BIN/deformd" ] && command -v curl >/dev/null; then
        if start_daemon "$REPO"; then
            ok dec-daemon-ready
            "$PY" - "$URL" "$T/walk_fit.npy" <<'EOF' && ok dec-daemon-replays || fail dec-daemon-replays
import json, sys, urllib.request
import numpy as np
url, fitp = sys.argv[1:3]
fit = np.load(fitp)
diag = np.linalg.norm(fit[0].max(0) - fit[0].min(0))
worst = 0
for f in (0, 40, fit.shape[0] - 1):   # the clip's keys are at f / 24 s
    req = {"parameters": {"clip": "Wuson_Walk", "time": f / 24.0}, "outputs": [{"name": "positions"}]}
    r = urllib.request.urlopen(urllib.request.Request(url + "/v2/models/walk16/infer",
        data=json.dumps(req).encode(), headers={"Content-Type": "application/json"}), timeout=30)
    out = json.load(r)
    pos = next(o for o in out["outputs"] if o["name"] == "positions")
    p = np.array(pos["data"], dtype=np.float64).reshape(-1, 3)
    worst = max(worst, np.abs(p - fit[f]).max())
print("daemon vs deform eval: max %.3g (diag %.4g)" % (worst, diag))
sys.exit(0 if worst <= 1e-6 * diag else 1)
EOF
        else
            fail dec-daemon-ready
        fi
    fi
fi
finish
