#!/usr/bin/env bash
# tests/e2e/decompose_normals.sh — the normals deformd serves for a decomposition of
# Testwuson's walk (16 bones): affine bones (shear, non-uniform scale, reflection) and
# rigid ones, every key of the clip requested over HTTP.
#
# References, computed here in numpy from the written model file (independent of the
# code under test):
#  - the normal-matrix blend normalise(Σ w_j cof(L_j)/|det L_j|^(1/3) n), n the rest
#    normal (area-weighted, from the rest positions): the served normals must be it
#    (affine: non-rigid joints take that path; rigid: it equals the blended rotation);
#  - the blended linear part normalise(Σ w_j L_j n) (what the rigged kind served for
#    affine joints before), reported beside it;
#  - normals recomputed from the served positions (area-weighted): the 99th percentile
#    angle of each to them is printed (docs/decompose.md quotes it).
. "$(dirname "$0")/product_common.sh"
D="$BIN/deform"
REPO=$T/repo
WUSON=/usr/share/assimp/models/X/Testwuson.X
if [ ! -f "$WUSON" ]; then echo "skip: $WUSON missing (assimp-testmodels)"; ok dec-normals-skipped; finish; exit; fi
"$D" import "$WUSON" --repository "$REPO" --name wuson >"$T/import.log" 2>&1 \
    && ok dec-normals-import || { cat "$T/import.log"; fail dec-normals-import; finish; exit 1; }
for tm in affine rigid; do
    "$D" decompose "$REPO/wuson" --clip Wuson_Walk --fps 24 --bones 16 --transforms $tm \
        --repository "$REPO" --name walk_$tm >"$T/fit_$tm.log" 2>&1 \
        && ok dec-normals-fit-$tm || { cat "$T/fit_$tm.log"; fail dec-normals-fit-$tm; }
done
start_daemon "$REPO" || { fail dec-normals-daemon; finish; exit 1; }
ok dec-normals-daemon
for tm in affine rigid; do
"$PY" - "$URL" "$REPO/walk_$tm/1/model.safetensors" "walk_$tm" <<'EOF' && ok dec-normals-served-$tm || fail dec-normals-served-$tm
import json, struct, sys, urllib.request
import numpy as np
url, path, name = sys.argv[1:4]
b = open(path, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
hdr = json.loads(b[8:8 + n])
def t(k):
    v = hdr[k]; o0, o1 = v["data_offsets"]
    dt = {"F32": np.float32, "I32": np.int32}[v["dtype"]]
    return np.frombuffer(b[8 + n + o0:8 + n + o1], dt).reshape(v["shape"])
P = t("positions").astype(np.float64); T = t("triangles")
J = t("skin_joints"); W = t("skin_weights").astype(np.float64)
W = W / W.sum(1, keepdims=True)
times = t("clip/0/times")
par = t("joint_parents"); ibm = t("inverse_bind_matrices").astype(np.float64)
def vnormals(x):
    a, bb, c = x[T[:, 0]], x[T[:, 1]], x[T[:, 2]]
    f = np.cross(bb - a, c - a); nn = np.zeros_like(x)
    for k in range(3): np.add.at(nn, T[:, k], f)
    return nn
def unit(v):
    l = np.linalg.norm(v, axis=-1, keepdims=True); return v / np.where(l > 0, l, 1)
def ang(a, c):
    return np.degrees(np.arccos(np.clip((unit(a) * unit(c)).sum(-1), -1, 1)))
rn = unit(vnormals(P))
def quat(q):
    x, y, z, w = q / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
def world(f):  # [J,4,4] joint world matrices of key f
    nj = len(par); out = np.zeros((nj, 4, 4))
    if "clip/0/matrices" in hdr:
        m = t("clip/0/matrices")[f].astype(np.float64).reshape(nj, 3, 4)
        out[:, :3] = m; out[:, 3, 3] = 1; return out
    R = t("clip/0/rotations")[f].astype(np.float64); Tr = t("clip/0/translations")[f].astype(np.float64)
    S = t("joint_rest_scales").astype(np.float64)
    for j in range(nj):
        loc = np.eye(4); loc[:3, :3] = quat(R[j]) * S[j][None, :]; loc[:3, 3] = Tr[j]
        out[j] = loc if par[j] < 0 else out[par[j]] @ loc
    return out
rows = {"served": [], "normal matrices (numpy)": [], "blended linear part": []}
worst_ref, diff_old = 0.0, []
for f in range(len(times)):
    req = {"parameters": {"clip": "Wuson_Walk", "time": float(times[f])},
           "outputs": [{"name": "positions"}, {"name": "normals"}]}
    r = urllib.request.urlopen(urllib.request.Request(url + "/v2/models/%s/infer" % name,
        data=json.dumps(req).encode(), headers={"Content-Type": "application/json"}), timeout=30)
    out = {o["name"]: np.array(o["data"], np.float64).reshape(-1, 3) for o in json.load(r)["outputs"]}
    pos, nrm = out["positions"], out["normals"]
    S = np.einsum("jab,jbc->jac", world(f), ibm)[:, :3]
    L = S[:, :, :3]
    det = np.linalg.det(L)
    cof = np.transpose(np.linalg.inv(L), (0, 2, 1)) * det[:, None, None]
    Nm = cof / np.cbrt(np.abs(det))[:, None, None]
    ref = unit(np.einsum("vk,vkab,vb->va", W, Nm[J], rn))
    old = unit(np.einsum("vk,vkab,vb->va", W, L[J], rn))
    rec = vnormals(pos)
    ok = np.linalg.norm(rec, axis=1) > 0
    worst_ref = max(worst_ref, ang(nrm, ref).max())
    diff_old.append(ang(ref, old))
    rows["served"].append(ang(nrm, rec)[ok])
    rows["normal matrices (numpy)"].append(ang(ref, rec)[ok])
    rows["blended linear part"].append(ang(old, rec)[ok])
d = np.concatenate(diff_old)
print("%s, %d keys: served vs numpy's normal-matrix blend: max %.3g deg; "
      "normal matrices vs blended linear part: p50 %.3g p99 %.3g max %.3g deg" %
      (name, len(times), worst_ref, np.percentile(d, 50), np.percentile(d, 99), d.max()))
for k, v in rows.items():
    v = np.concatenate(v)
    print("  %-26s vs recomputed from the served positions: mean %.3f p50 %.3f p99 %.2f deg" %
          (k, v.mean(), np.percentile(v, 50), np.percentile(v, 99)))
good = worst_ref < 0.05
if name == "walk_affine":
    good = good and np.percentile(d, 99) > 1.0   # the fit has sheared bones: the paths differ
else:
    good = good and d.max() < 0.05               # rotations: both are the blended rotation
sys.exit(0 if good else 1)
EOF
done
finish
