#!/usr/bin/env bash
# tests/e2e/python_client.sh — the Python client (clients/python) against a real
# deformd on the demo repository, with numpy and without (DEFORMD_NO_NUMPY=1).
#
# References, each independent of the client under test:
#  - curl: the same request sent by curl, JSON parsed by the test (bit-identical:
#    the server prints float32 with 9 significant digits);
#  - core: `bin/deform eval` evaluates the same clip times in-process (no
#    server, no client) — socket play must match it (tolerance below);
#  - a formula: morphcube positions = rest + Σ w_m·delta_m computed here in
#    numpy from the model file's own tensors;
#  - golden frames hand-written from docs/protocol.md (clients/python/tests).
# Tolerances: transports of the same pose are compared bit for bit; server vs
# bin/deform eval ≤ 1e-6 × bbox diagonal (batch composition may change the
# float summation order); float16 / int16 within the bounds of docs/protocol.md.
. "$(dirname "$0")/product_common.sh"
export PYTHONPATH=$ROOT/clients/python

"$PY" clients/python/tests/test_codec.py tests/data/golden_frames || NFAIL=$((NFAIL + 1))
"$PY" clients/python/tests/test_http_encoding.py || NFAIL=$((NFAIL + 1))

build_demo "$T/demo-repo" && ok py-demo-repo || { fail py-demo-repo; finish; exit 1; }
start_daemon "$T/demo-repo" && ok py-daemon-ready || { fail py-daemon-ready; finish; exit 1; }

# curl references
REQ=$T/demo-repo/requests/wuson_pose.json
curl -sf "$URL/v2/models/wuson/infer" -d @"$REQ" -o "$T/curl_wuson.json" \
    && ok py-curl-reference || fail py-curl-reference
curl -sf "$URL/v2/models/morphcube/infer" \
    -d '{"inputs":[{"name":"weights","shape":[2],"datatype":"FP32","data":[0.75,0.25]}]}' \
    -o "$T/curl_cube.json" || fail py-curl-reference-cube

# core reference: bin/deform eval at the clip's key times 0..7 (LBS and DQS)
"$BIN/deform" eval "$T/demo-repo/wuson" --clip Wuson_Walk --frames 0:8 --out "$T/eval_lbs.npy" \
    >"$T/eval.log" 2>&1 && ok py-core-eval-lbs || { cat "$T/eval.log"; fail py-core-eval-lbs; }
"$BIN/deform" eval "$T/demo-repo/wuson" --clip Wuson_Walk --frames 0:8 --skinning dqs \
    --out "$T/eval_dqs.npy" >>"$T/eval.log" 2>&1 && ok py-core-eval-dqs || { cat "$T/eval.log"; fail py-core-eval-dqs; }
"$BIN/deform" eval "$T/demo-repo/wuson" --clip Wuson_Walk --fps 30 --skinning dqs \
    --out "$T/eval_dqs_fps30.npy" >>"$T/eval.log" 2>&1 || { cat "$T/eval.log"; fail py-core-eval-dqs-fps30; }

for mode in numpy stdlib; do
    if [ "$mode" = stdlib ]; then export DEFORMD_NO_NUMPY=1; else unset DEFORMD_NO_NUMPY; fi
    "$PY" - "$T" "$HTTP" "$SOCK" "$mode" <<'EOF' || NFAIL=$((NFAIL + 1))
import json, math, os, struct, sys
from deformd_client import HttpClient, SocketClient, DeformdError, Tensor, npy, HAVE_NUMPY
from deformd_client.names import model_lists
T, HTTP, SOCK, MODE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
fails = 0
def check(name, cond, detail=""):
    global fails
    print(("ok " if cond else "FAIL ") + "py-%s-%s" % (MODE, name) + ("" if cond else " " + str(detail)))
    fails += 0 if cond else 1

assert HAVE_NUMPY == (MODE == "numpy"), "numpy switch"
f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]
def flat(v):
    return [x for r in v for x in flat(r)] if isinstance(v, list) else [v]
def curl_positions(path):
    d = json.load(open(path))
    o = next(o for o in d["outputs"] if o["name"] == "positions")
    return o["shape"], [f32(x) for x in flat(o["data"])]
def maxdiff(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) else float("inf")

req = json.load(open(os.path.join(T, "demo-repo/requests/wuson_pose.json")))
inp = req["inputs"][0]
rot = Tensor(inp["shape"], inp["data"])
shape, ref = curl_positions(os.path.join(T, "curl_wuson.json"))

with HttpClient("127.0.0.1", HTTP) as c:
    check("http-ready", c.ready())
    names = c.list()
    check("http-list", set(names) >= {"wuson", "morphcube"}, names)
    meta = c.info("wuson")
    check("http-info", any(i["name"] == "joint_rotations" for i in meta["inputs"]), meta.get("inputs"))
    pj = c.infer("wuson", {"joint_rotations": rot}, outputs=["positions"], binary=False)["positions"]
    # curl's answer carries the batch dimension the server adds; the client drops it
    check("http-json-equals-curl", [1] + list(pj.shape) == shape and pj.data.tolist() == ref,
          "shape %s vs %s, max diff %g" % (pj.shape, shape, maxdiff(pj.data.tolist(), ref)))
    pb = c.infer("wuson", {"joint_rotations": rot}, outputs=["positions"])["positions"]
    check("http-binary-equals-curl", pb == pj, "max diff %g" % maxdiff(pb.data.tolist(), ref))
    # batch of 3 poses (rest, pose, rest) in one request: pose 1 equals the single answer
    J = rot.shape[0]
    three = Tensor((3, J, 4), list(rot.data) * 3)
    pb3 = c.infer("wuson", {"joint_rotations": three}, outputs=["positions"], batch=3)["positions"]
    n = len(pj.data)
    check("http-batch-3", pb3.shape[0] == 3 and pb3.data[n:2 * n].tolist() == pj.data.tolist())
    # morphcube against the formula rest + sum w*delta (tensors read from the model file)
    cube = c.infer("morphcube", {"weights": [0.75, 0.25]})["positions"]
    _, cref = curl_positions(os.path.join(T, "curl_cube.json"))
    check("http-cube-equals-curl", cube.data.tolist() == cref)
    mdir = os.path.join(T, "demo-repo/morphcube/1/model.safetensors")
    with open(mdir, "rb") as f:
        hn = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(hn))
        base = 8 + hn
        def tensor(name):
            e = hdr[name]
            f.seek(base + e["data_offsets"][0])
            k = (e["data_offsets"][1] - e["data_offsets"][0]) // 4
            return e["shape"], struct.unpack("<%df" % k, f.read(4 * k))
        (N, _), P = tensor("positions")
        (M, _, _), D = tensor("morph_deltas")
    w = [0.75, 0.25]
    formula = [P[i] + sum(w[m] * D[m * N * 3 + i] for m in range(M)) for i in range(N * 3)]
    lo = [min(P[i::3]) for i in range(3)]; hi = [max(P[i::3]) for i in range(3)]
    diag = math.sqrt(sum((h - l) ** 2 for h, l in zip(hi, lo)))
    err = maxdiff(cube.data.tolist(), formula)
    check("http-cube-vs-formula", err <= 1e-6 * diag, "max err %g, diag %g" % (err, diag))
    # the character default (morphcube_half: weights 0.5) is applied
    half = c.infer("morphcube_half", {})["positions"]
    formula_h = [P[i] + sum(0.5 * D[m * N * 3 + i] for m in range(M)) for i in range(N * 3)]
    check("http-character-default", maxdiff(half.data.tolist(), formula_h) <= 1e-6 * diag)
    # values by name (the metadata's lists): equal to the same vector by position; a
    # value not named keeps the character's default; an unknown name is refused
    byname = c.infer("morphcube", {"weights": {"Cube_0": 0.75, "Cube_1": 0.25}})["positions"]
    check("http-named-weights", byname == cube)
    halfn = c.infer("morphcube_half", {"weights": {"Cube_0": 0.75}})["positions"]
    formula_hn = [P[i] + 0.75 * D[i] + 0.5 * D[N * 3 + i] for i in range(N * 3)]
    check("http-named-keeps-default", maxdiff(halfn.data.tolist(), formula_hn) <= 1e-6 * diag)
    rmeta = c.info("ict_to_t1")
    ctl = model_lists(rmeta)["controls"]
    vec = [0.0] * len(ctl); vec[ctl.index("jawOpen")] = 0.7; vec[ctl.index("mouthSmile_L")] = 0.4
    ref_t = c.infer("ict_to_t1", {"source_weights": vec}, outputs=["positions"])["positions"]
    got_t = c.infer("ict_to_t1", {"source_weights": {"jawOpen": 0.7, "mouthSmile_L": 0.4}},
                    outputs=["positions"])["positions"]
    two = c.infer("ict_to_t1", {"source_weights": [{"jawOpen": 0.7, "mouthSmile_L": 0.4}, {}]},
                  outputs=["positions"], batch=2)["positions"]
    # (a batch of two runs the target's product as a GEMM, one pose as a GEMV: rounding)
    check("http-named-source-weights", got_t == ref_t and two.shape[0] == 2
          and maxdiff(two.data[:len(ref_t.data)].tolist(), ref_t.data.tolist()) <= 1e-5,
          "max diff %g" % maxdiff(two.data[:len(ref_t.data)].tolist(), ref_t.data.tolist()))
    try:
        c.infer("ict_to_t1", {"source_weights": {"jawOpn": 1.0}})
        check("http-named-unknown-refused", False, "no error")
    except ValueError as e:
        check("http-named-unknown-refused", "no value named 'jawOpn'" in str(e), e)
    # compact encodings over HTTP: within the documented bounds of float32
    f16 = c.infer("wuson", {"joint_rotations": rot}, outputs=["positions"], encoding="float16")["positions"]
    e16 = max(abs(a - b) / max(abs(b), 6.1e-5) for a, b in zip(f16.data, pj.data))
    check("http-float16-bound", e16 <= 2 ** -11 + 1e-9, "rel err %g" % e16)
    # int16: |error| <= scale/2 where the value is inside the quantisation
    # range offset +- 32767*scale (docs/protocol.md); outside it is clamped
    i16 = c.infer("wuson", {"joint_rotations": rot}, outputs=["positions"], encoding="int16")["positions"]
    qp = c.last_response["outputs"][0]["parameters"]
    box = c.last_response["outputs"][0]["deformd"]  # the int16 box (KServe parameters: scalars)
    sc, of = box["scale"], box["offset"]
    bad = 0; inside = 0
    for k, (q, v) in enumerate(zip(i16.data, pj.data)):
        ch = k % 3
        lo, hi = of[ch] - 32767 * sc[ch], of[ch] + 32767 * sc[ch]
        if lo <= v <= hi:
            inside += 1
            bad += abs(q - v) > sc[ch] / 2 * 1.001 + 1e-7
        else:
            bad += abs(q - (lo if v < lo else hi)) > sc[ch] * 1e-3 + 1e-7
    check("http-int16-bound", bad == 0 and qp["encoding"] == "int16",
          "%d values off (%d inside the range, server says %s clamped)" % (bad, inside, qp.get("clamped")))
    if qp.get("clamped"):
        print("note: int16 clamped %s of %d values (range from the rest bbox)" % (qp["clamped"], len(pj.data)))
    # encoding= without naming outputs (the README's morphcube_half float16
    # line): every output comes back in that encoding, binary and JSON, each
    # within its bound of the float32 answer (issue 14.1)
    ref32 = c.infer("morphcube_half", {}, encoding="float32")
    enc_all = {}
    for enc, dt in (("float16", "FP16"), ("int16", "INT16")):
        for binary in (True, False):
            name = "http-encoding-all-outputs-%s-%s" % (enc, "binary" if binary else "json")
            try:
                got = c.infer("morphcube_half", {}, encoding=enc, binary=binary)
            except DeformdError as e:
                check(name, False, e)
                continue
            outs = c.last_response["outputs"]
            why = []
            if sorted(got) != sorted(ref32) or len(outs) != len(ref32):
                why.append("outputs %s vs %s" % (sorted(got), sorted(ref32)))
            for o in outs:
                p = o.get("parameters") or {}
                if o["datatype"] != dt or p.get("encoding") != enc:
                    why.append("%s is %s/%s" % (o["name"], o["datatype"], p.get("encoding")))
                n = len(ref32[o["name"]].data)
                if binary and p.get("binary_data_size") != 2 * n:
                    why.append("%s: %s bytes, want %d" % (o["name"], p.get("binary_data_size"), 2 * n))
                if not binary and "binary_data_size" in p:
                    why.append("%s sent binary" % o["name"])
                for k, (a, b) in enumerate(zip(got[o["name"]].data, ref32[o["name"]].data)):
                    bound = (abs(b) * 2 ** -11 + 2 ** -25 if enc == "float16"
                             else o["deformd"]["scale"][k % 3] / 2 * 1.001 + 1e-7)
                    if abs(a - b) > bound:
                        why.append("%s[%d] = %r vs %r" % (o["name"], k, a, b))
                        break
            enc_all[(enc, binary)] = got
            check(name, not why, "; ".join(why))
    if len(enc_all) == 4:
        check("http-encoding-all-outputs-json-equals-binary",
              all(enc_all[(e, True)][k] == enc_all[(e, False)][k]
                  for e in ("float16", "int16") for k in ref32))
    # errors are answers with a status and a message naming the problem
    try:
        c.infer("nobody", {}); check("http-404", False)
    except DeformdError as e:
        check("http-404", e.status == 404, e)
    try:
        c.infer("wuson", {"joint_rotations": Tensor((2, 4), [0, 0, 0, 1] * 2)}); check("http-400-shape", False)
    except DeformdError as e:
        check("http-400-shape", e.status == 400 and "joint_rotations" in str(e), e)
    glb = c.mesh("wuson", "glb")
    check("http-mesh-glb", glb[:4] == b"glTF")

with SocketClient("127.0.0.1", SOCK) as s:
    check("sock-ping", s.ping(b"hello") == b"hello")
    check("sock-list", set(s.list()) >= {"wuson", "wuson_dqs"}, s.list())
    ps = s.infer("wuson", {"joint_rotations": rot}, outputs=["positions"])["positions"]
    check("sock-equals-http", ps == pj, "max diff %g" % maxdiff(ps.data.tolist(), pj.data.tolist()))
    # values by name through the socket INFO's lists (controls for source_weights)
    st_named = s.infer("ict_to_t1", {"source_weights": {"jawOpen": 0.7, "mouthSmile_L": 0.4}},
                       outputs=["positions"])["positions"]
    check("sock-named-source-weights", st_named == ref_t, "max diff %g"
          % maxdiff(st_named.data.tolist(), ref_t.data.tolist()))
    # pipelined: 20 requests in flight, answers filed by id
    ids = [s.submit("wuson", {"joint_rotations": Tensor((1,) + rot.shape, rot.data)}, 1, ["positions"])
           for _ in range(20)]
    got = [s.result(i)["positions"] for i in reversed(ids)]
    check("sock-pipelined-20", all(g.data == ps.data for g in got))
    f16s = s.infer("wuson", {"joint_rotations": rot}, outputs=["positions"], encoding="float16")["positions"]
    check("sock-float16-equals-http", f16s == f16)
    i16s = s.infer("wuson", {"joint_rotations": rot}, outputs=["positions"], encoding="int16")["positions"]
    check("sock-int16-equals-http", i16s == i16, "max diff %g" % maxdiff(i16s.data.tolist(), i16.data.tolist()))
    # every output (none named) in the asked encoding: the socket's answer
    # equals HTTP's bit for bit
    for enc in ("float16", "int16"):
        so = s.infer("morphcube_half", {}, encoding=enc)
        ho = enc_all.get((enc, True), {})
        check("sock-%s-all-outputs-equals-http" % enc,
              sorted(so) == sorted(ho) and all(so[k] == ho[k] for k in so),
              "%s vs %s" % (sorted(so), sorted(ho)))
    try:
        s.infer("nobody", {}); check("sock-error-notfound", False)
    except DeformdError as e:
        check("sock-error-notfound", e.code == -6, e)
    # clip streaming vs the core (bin/deform eval, no server involved)
    info = s.info("wuson")
    walk = next(c for c in info["clips"] if c["name"] == "Wuson_Walk")
    times = walk["times"][:8]
    for skin, char in (("lbs", "wuson"), ("dqs", "wuson_dqs")):
        frames = s.play(char, "Wuson_Walk", times=times, chunk=3, window=2)["positions"]
        ref = npy.read(os.path.join(T, "eval_%s.npy" % skin))
        lo = [min(ref.data[i::3]) for i in range(3)]; hi = [max(ref.data[i::3]) for i in range(3)]
        diag = math.sqrt(sum((h - l) ** 2 for h, l in zip(hi, lo)))
        err = maxdiff(frames.data.tolist(), ref.data.tolist())
        check("sock-play-%s-vs-core-eval" % skin, frames.shape == ref.shape and err <= 1e-6 * diag,
              "shape %s vs %s, max err %g (diag %g)" % (frames.shape, ref.shape, err, diag))
    # a 30 fps grid over the whole walk, HTTP (daemon-side clip sampling,
    # batch_size/dt) vs socket vs bin/deform eval --fps 30 (DQS character)
    sp = s.play("wuson_dqs", "Wuson_Walk", fps=30)["positions"]
with HttpClient("127.0.0.1", HTTP) as c:
    hp = c.play("wuson_dqs", "Wuson_Walk", fps=30, chunk=7)["positions"]
ev = npy.read(os.path.join(T, "eval_dqs_fps30.npy"))
lo = [min(ev.data[i::3]) for i in range(3)]; hi = [max(ev.data[i::3]) for i in range(3)]
diag = math.sqrt(sum((h - l) ** 2 for h, l in zip(hi, lo)))
check("http-play-equals-sock-play", hp == sp, "shapes %s %s" % (hp.shape, sp.shape))
err = maxdiff(hp.data.tolist(), ev.data.tolist())
check("http-play-fps30-vs-core-eval", hp.shape == ev.shape and err <= 1e-6 * diag,
      "shape %s vs %s, max err %g" % (hp.shape, ev.shape, err))
sys.exit(1 if fails else 0)
EOF
done
unset DEFORMD_NO_NUMPY

# The command line (deformctl's verbs) and the render-farm example.
pyc() { "$PY" -m deformd_client --http-port "$HTTP" --socket-port "$SOCK" "$@"; }
pyc list >"$T/list.txt" 2>&1 && grep -qx wuson_dqs "$T/list.txt" && ok py-cli-list || fail py-cli-list
pyc info morphcube >"$T/info.json" 2>&1 && "$PY" -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/info.json" \
    && ok py-cli-info || fail py-cli-info
pyc infer wuson --input "joint_rotations=$("$PY" -c 'import json,sys; print(json.dumps([json.load(open(sys.argv[1]))["inputs"][0]["data"][i:i+4] for i in range(0, len(json.load(open(sys.argv[1]))["inputs"][0]["data"]), 4)]))' "$REQ")" \
    --transport socket --out "$T/cli_infer.npy" >/dev/null 2>"$T/cli.err" \
    && "$PY" - "$T" <<'EOF' && ok py-cli-infer-equals-curl || { cat "$T/cli.err"; fail py-cli-infer-equals-curl; }
import json, sys, numpy as np
T = sys.argv[1]
a = np.load(T + "/cli_infer.npy")
o = next(o for o in json.load(open(T + "/curl_wuson.json"))["outputs"] if o["name"] == "positions")
b = np.array(o["data"], dtype=np.float32).reshape(o["shape"])
assert (1,) + a.shape == b.shape and (a == b[0]).all(), (a.shape, b.shape)
EOF
# The C client (bin/deformctl, socket and HTTP) on the same pose: the same bits
# as curl and the Python client (the browser module is compared in viewer.sh).
if [ -x "$BIN/deformctl" ]; then
    ctl() { "$BIN/deformctl" --socket-port "$SOCK" --http-port "$HTTP" "$@"; }
    "$PY" -c 'import json,sys,numpy as np; d=json.load(open(sys.argv[1]))["inputs"][0]; np.save(sys.argv[2], np.array(d["data"],dtype=np.float32).reshape(d["shape"]))' "$REQ" "$T/pose.npy"
    ctl infer wuson --input "joint_rotations=$T/pose.npy" --out "$T/ctl_sock.npy" >/dev/null 2>"$T/ctl.err" \
        && ctl infer wuson --input "joint_rotations=$T/pose.npy" --http-binary --out "$T/ctl_http.npy" >/dev/null 2>>"$T/ctl.err" \
        && "$PY" - "$T" <<'EOF' && ok py-c-client-python-curl-identical || { cat "$T/ctl.err"; fail py-c-client-python-curl-identical; }
import json, sys, numpy as np
T = sys.argv[1]
o = next(o for o in json.load(open(T + "/curl_wuson.json"))["outputs"] if o["name"] == "positions")
curl = np.array(o["data"], dtype=np.float32).reshape(o["shape"])[0]
py = np.load(T + "/cli_infer.npy")
for f in ("ctl_sock", "ctl_http"):
    c = np.load(T + "/%s.npy" % f).reshape(curl.shape)
    assert (c == curl).all() and (c == py).all(), (f, abs(c - curl).max())
EOF
else
    fail py-c-client-python-curl-identical "$BIN/deformctl not built"
fi
pyc play wuson --clip Wuson_Walk --out "$T/cli_play.npy" >/dev/null 2>"$T/cli.err" \
    && "$BIN/deform" eval "$T/demo-repo/wuson" --clip Wuson_Walk --out "$T/eval_all.npy" >/dev/null 2>&1 \
    && "$PY" -c 'import numpy as np,sys; a=np.load(sys.argv[1]); b=np.load(sys.argv[2]); d=np.linalg.norm(b.max((0,1))-b.min((0,1))); e=abs(a-b).max(); print("play vs eval: frames", a.shape, "max err", e); sys.exit(0 if a.shape==b.shape and e<=1e-6*d else 1)' "$T/cli_play.npy" "$T/eval_all.npy" \
    && ok py-cli-play-equals-core-eval || { cat "$T/cli.err"; fail py-cli-play-equals-core-eval; }
pyc mesh wuson --out "$T/rest.glb" >/dev/null 2>&1 && [ "$(head -c 4 "$T/rest.glb")" = glTF ] \
    && ok py-cli-mesh-glb || fail py-cli-mesh-glb
pyc infer nobody --out "$T/x.npy" >/dev/null 2>"$T/cli.err"
[ $? -eq 1 ] && grep -q 404 "$T/cli.err" && ok py-cli-error-exit-1 || { cat "$T/cli.err"; fail py-cli-error-exit-1; }

"$PY" clients/python/examples/render_clip.py wuson --clip Wuson_Run --frames 500 \
    --socket-port "$SOCK" --out "$OUT/render_clip_wuson_run.npy" >"$T/render.log" 2>&1 \
    && "$PY" -c 'import numpy as np,sys; a=np.load(sys.argv[1]); sys.exit(0 if a.shape[0]==500 and a.shape[2]==3 and np.isfinite(a).all() and abs(a[0]-a[250]).max()>0 else 1)' "$OUT/render_clip_wuson_run.npy" \
    && ok py-render-clip-500-frames || { cat "$T/render.log"; fail py-render-clip-500-frames; }
cat "$T/render.log"

# Clip names (issue 14.5): render_clip.py without --clip renders the walk (the
# README's walk.npy), not the first clip (Run); --clip, deformctl's --clip and
# the CLI's take a name in any case or a unique part of it ("walk"); a name
# matching nothing or several fails with the list of the character's clips.
"$PY" clients/python/tests/test_clips.py || NFAIL=$((NFAIL + 1))
rclip() { "$PY" clients/python/examples/render_clip.py wuson --frames 40 --socket-port "$SOCK" "$@"; }
rclip --out "$T/rc_default.npy" >"$T/rc_default.log" 2>&1 \
    && rclip --clip Wuson_Walk --out "$T/rc_walk.npy" >/dev/null 2>&1 \
    && rclip --clip Wuson_Run --out "$T/rc_run.npy" >/dev/null 2>&1 \
    && cmp -s "$T/rc_default.npy" "$T/rc_walk.npy" && ! cmp -s "$T/rc_default.npy" "$T/rc_run.npy" \
    && grep -q "wuson/Wuson_Walk:" "$T/rc_default.log" \
    && ok py-render-clip-default-is-walk || { cat "$T/rc_default.log"; fail py-render-clip-default-is-walk; }
rclip --clip walk --out "$T/rc_walk2.npy" >"$T/rc.log" 2>&1 && cmp -s "$T/rc_walk2.npy" "$T/rc_walk.npy" \
    && rclip --clip RUN --out "$T/rc_run2.npy" >>"$T/rc.log" 2>&1 && cmp -s "$T/rc_run2.npy" "$T/rc_run.npy" \
    && ok py-render-clip-any-case-or-part || { cat "$T/rc.log"; fail py-render-clip-any-case-or-part; }
rclip --clip jump --out "$T/rc_x.npy" >"$T/rc.log" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q "no clip 'jump'" "$T/rc.log" && grep -q "Wuson_Run, Wuson_Walk" "$T/rc.log" \
    && ok py-render-clip-unknown-lists-clips || { cat "$T/rc.log"; fail py-render-clip-unknown-lists-clips "exit $rc"; }
pyc play wuson --clip walk --out "$T/cli_walk.npy" >"$T/cli.err" 2>&1 \
    && pyc play wuson --clip Wuson_Walk --out "$T/cli_walk_full.npy" >>"$T/cli.err" 2>&1 \
    && cmp -s "$T/cli_walk.npy" "$T/cli_walk_full.npy" \
    && ok py-cli-play-clip-part || { cat "$T/cli.err"; fail py-cli-play-clip-part; }
if [ -x "$BIN/deformctl" ]; then
    ctl() { "$BIN/deformctl" --socket-port "$SOCK" --http-port "$HTTP" "$@"; }
    ctl play wuson --clip walk --out "$T/ctl_walk.npy" >"$T/ctl.err" 2>&1 \
        && ctl play wuson --clip Wuson_Walk --out "$T/ctl_walk_full.npy" >>"$T/ctl.err" 2>&1 \
        && cmp -s "$T/ctl_walk.npy" "$T/ctl_walk_full.npy" && grep -q "wuson/Wuson_Walk: " "$T/ctl.err" \
        && ok py-deformctl-play-clip-walk || { cat "$T/ctl.err"; fail py-deformctl-play-clip-walk; }
    ctl play wuson --clip jump --out "$T/ctl_x.npy" >"$T/ctl.err" 2>&1
    rc=$?
    [ "$rc" -eq 1 ] && grep -q 'no clip "jump"' "$T/ctl.err" && grep -q "Wuson_Run, Wuson_Walk" "$T/ctl.err" \
        && ok py-deformctl-play-unknown-lists-clips || { cat "$T/ctl.err"; fail py-deformctl-play-unknown-lists-clips "exit $rc"; }
    ctl play wuson --clip wuson --out "$T/ctl_x.npy" >"$T/ctl.err" 2>&1
    rc=$?
    [ "$rc" -eq 1 ] && grep -q "several clips" "$T/ctl.err" && grep -q "Wuson_Run, Wuson_Walk" "$T/ctl.err" \
        && ok py-deformctl-play-ambiguous-lists-clips || { cat "$T/ctl.err"; fail py-deformctl-play-ambiguous-lists-clips "exit $rc"; }
else
    fail py-deformctl-play-clip-walk "$BIN/deformctl not built"
fi
finish
