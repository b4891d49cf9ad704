#!/usr/bin/env bash
# tests/e2e/readme_examples.sh — every curl line of README.md, executed and its
# answer checked.
#
# Builds the demo repository with tools/make_demo.sh (as `make run` does) in a
# temp dir, starts bin/deformd on it on free ports, then takes each line that
# starts with "curl " inside the README's ```sh blocks, rewrites the host/port
# (localhost:8000 -> 127.0.0.1:<port>) and the demo-repo path, and runs it in
# a scratch directory with --fail and -D (the response headers) added. Every
# answer is checked (one "ok/FAIL readme-example-N-<what>" per line):
#  - status 200, content type, nothing on curl's stderr, `-w %{http_code}` 200;
#  - /v2: name, version (= `deformd --version`), extensions;
#  - /v2/repository/index: every model of the demo repository READY, version
#    1, with its config.json characters;
#  - /v2/models/NAME: against the model file itself (safetensors header and
#    tensors): output shapes, input shapes, vertices, triangles, joints, clips
#    with their key counts and durations; skinning, encoding and defaults
#    against config.json;
#  - every infer answer: model, version, character, the outputs asked (all
#    when "outputs" is omitted), each output's datatype for its encoding
#    (the float16 example: FP16), shape, binary_data_size and the byte count
#    of the binary body; the values against `bin/deform eval` of the same
#    request in-process (character defaults and skinning from config.json,
#    the clip sampled by core): float32 within 1e-6 x bbox diagonal,
#    float16 / int16 within their documented bounds;
#  - the .glb: magic, version 2, length, indices = the model file's
#    triangles, positions = the rest pose (`deform eval --rest`);
#  - /metrics: Prometheus text syntax, every model loaded, request counts per
#    model equal to the infer lines run before it, no failures.
# A README curl line this script has no check for fails (add one here), and
# so does a README that loses one of the tour's kinds of lines. Also checks
# that the README keeps its two commands and that the examples
# tools/run_demo.sh prints (the same kind of lines) work.
. "$(dirname "$0")/product_common.sh"

grep -qx 'make run' README.md && grep -qx 'make test' README.md \
    && ok readme-two-commands || fail readme-two-commands "README must show 'make run' and 'make test'"

build_demo "$T/demo-repo" && ok readme-demo-repo || { fail readme-demo-repo; finish; exit 1; }
start_daemon "$T/demo-repo" && ok readme-daemon-ready || { fail readme-daemon-ready; finish; exit 1; }

mapfile -t lines < <(awk '/^```sh/{s=1;next} /^```/{s=0} s && /^curl /' README.md)
[ ${#lines[@]} -ge 5 ] && ok "readme-has-curl-examples-${#lines[@]}" \
    || fail readme-has-curl-examples "only ${#lines[@]} curl lines found"

mkdir -p "$T/cwd"
: >"$T/manifest.tsv"
i=0
for line in "${lines[@]}"; do
    i=$((i + 1))
    cmd=${line//localhost:8000/127.0.0.1:$HTTP}
    cmd=${cmd//@demo-repo\//@$T/demo-repo/}
    cmd="curl --fail --max-time 30 -D $T/ex$i.hdr ${cmd#curl }"
    outfile=$(sed -n 's/.* -o \([^ ]*\).*/\1/p' <<<"$cmd")
    (cd "$T/cwd" && eval "$cmd") >"$T/ex$i.out" 2>"$T/ex$i.err"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "example $i failed (curl exit $rc): $line"; head -c 400 "$T/ex$i.err" "$T/ex$i.out"; echo
    fi
    if [ -n "$outfile" ] && [ "$outfile" != /dev/null ] && [ -f "$T/cwd/$outfile" ]; then
        cp "$T/cwd/$outfile" "$OUT/readme-$outfile"
    fi
    printf '%s\t%s\t%s\t%s\n' "$i" "$rc" "$outfile" "$line" >>"$T/manifest.tsv"
done

"$PY" - "$T" "$HTTP" "$BIN" "$("$BIN/deformd" --version)" <<'PYEOF' || NFAIL=$((NFAIL + 1))
import json, os, re, shlex, struct, subprocess, sys, urllib.request
import numpy as np

T, HTTP, BIN, VERSION = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split()[-1]
REPO, CWD = os.path.join(T, "demo-repo"), os.path.join(T, "cwd")
fails = 0


class Fail(Exception):
    pass


def need(cond, msg):
    if not cond:
        raise Fail(msg)


def safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        raw = f.read()
    meta = hdr.pop("__metadata__", {})

    def tensor(name):
        e = hdr[name]
        a, b = e["data_offsets"]
        return np.frombuffer(raw[a:b], dtype={"F32": "<f4", "I32": "<i4"}[e["dtype"]]).reshape(e["shape"])
    return hdr, meta, tensor


# The demo repository as written on disk: models, characters, model files.
MODELS, CHAR = {}, {}
for d in sorted(os.listdir(REPO)):
    cfgp = os.path.join(REPO, d, "config.json")
    if not os.path.isfile(cfgp):
        continue
    cfg = json.load(open(cfgp))
    hdr, meta, tensor = safetensors(os.path.join(REPO, d, "1", "model.safetensors"))
    chars = list(cfg.get("characters") or {d: {}})
    MODELS[d] = {"cfg": cfg, "hdr": hdr, "meta": meta, "tensor": tensor, "chars": chars}
    for c in chars:
        CHAR[c] = d


def model_dims(model):
    h = MODELS[model]["hdr"]
    J = h["joint_parents"]["shape"][0] if "joint_parents" in h else 0
    M = h["morph_deltas"]["shape"][0] if "morph_deltas" in h else 0
    return h["positions"]["shape"][0], h["triangles"]["shape"][0], J, M


def diag(model):
    p = MODELS[model]["tensor"]("positions")
    return float(np.linalg.norm(p.max(0) - p.min(0)))


def char_cfg(name):
    return (MODELS[CHAR[name]]["cfg"].get("characters") or {}).get(name, {})


def headers(i):
    txt = open(os.path.join(T, "ex%d.hdr" % i), "rb").read().decode("latin-1")
    blocks = [b for b in re.split(r"\r?\n\r?\n", txt) if b.strip()]
    lines = blocks[-1].splitlines()  # the last response (after any 100 Continue)
    h = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        h[k.strip().lower()] = v.strip()
    return int(lines[0].split()[1]), h


def metadata(name):
    with urllib.request.urlopen("http://127.0.0.1:%d/v2/models/%s" % (HTTP, name), timeout=30) as r:
        return json.loads(r.read())


def scalars(params):
    """KServe: a $parameters value is a string, a number or a boolean."""
    return isinstance(params, dict) and all(isinstance(v, (str, int, float, bool)) for v in params.values())


def flat(v):
    return [x for e in v for x in flat(e)] if isinstance(v, list) else [v]


DT = {"float32": "FP32", "float16": "FP16", "int16": "INT16"}
WIRE = {"float32": "<f4", "float16": "<f2", "int16": "<i2"}


def deform_eval(model, name, req, B, per, i):
    """bin/deform eval of the same request, in-process (no server): the
    character's defaults and skinning from config.json, the clip sampled by
    core. {output: float32 values}."""
    params = req.get("parameters") or {}
    cc = char_cfg(name)
    args = [os.path.join(BIN, "deform"), "eval", os.path.join(REPO, model)]
    given = {inp["name"]: np.array(flat(inp["data"]), dtype=np.float32)
             for inp in req.get("inputs") or []}
    for k, v in (cc.get("defaults") or {}).items():
        given.setdefault(k, np.tile(np.array(v, dtype=np.float32), B))
    for k, v in given.items():
        f = os.path.join(T, "ref%d_%s.npy" % (i, k))
        np.save(f, v.reshape([B] + per[k]))
        args += ["--input", "%s=%s" % (k, f)]
    if params.get("clip"):
        t0, dt = float(params.get("time", 0.0)), float(params.get("dt", 0.0))
        args += ["--clip", params["clip"], "--times", ",".join(repr(t0 + b * dt) for b in range(B))]
    skin = params.get("skinning") or cc.get("skinning")
    if skin:
        args += ["--skinning", skin]
    pos, nrm = os.path.join(T, "ref%d_pos.npy" % i), os.path.join(T, "ref%d_nrm.npy" % i)
    args += ["--normals", nrm, "--out", pos]
    r = subprocess.run(args, capture_output=True, text=True)
    need(r.returncode == 0, "bin/deform eval failed: %s: %s" % (" ".join(args), r.stderr[-300:]))
    return {"positions": np.load(pos).reshape(-1), "normals": np.load(nrm).reshape(-1)}


def check_infer(i, name, req, h, body):
    need(name in CHAR, "no character %s in the demo repository" % name)
    model = CHAR[name]
    N = model_dims(model)[0]
    params = req.get("parameters") or {}
    meta = metadata(name)
    per = {x["name"]: x["shape"][1:] for x in meta["inputs"]}
    B = params.get("batch_size") or 1
    for inp in req.get("inputs") or []:
        B = len(flat(inp["data"])) // int(np.prod(per[inp["name"]]))
    cc = char_cfg(name)
    if req.get("outputs"):
        want = [(o["name"], o.get("parameters") or {}) for o in req["outputs"]]
    else:  # omitted: every output of the model
        want = [(o["name"], {}) for o in meta["outputs"]]
    # docs/http-api.md: an output's own encoding, else the request's, else the character's
    enc = {n: p.get("encoding") or params.get("encoding") or cc.get("encoding") or "float32"
           for n, p in want}
    binary = {n: bool(p.get("binary_data", params.get("binary_data_output", False))) for n, p in want}
    if any(binary.values()):
        need(h.get("content-type") == "application/octet-stream", "content-type %s" % h.get("content-type"))
        need("inference-header-content-length" in h, "no Inference-Header-Content-Length header")
        hl = int(h["inference-header-content-length"])
        need(0 < hl <= len(body), "Inference-Header-Content-Length %d of a %d-byte body" % (hl, len(body)))
    else:
        need(h.get("content-type", "").startswith("application/json"), "content-type %s" % h.get("content-type"))
        need("inference-header-content-length" not in h, "Inference-Header-Content-Length on a JSON answer")
        hl = len(body)
    doc = json.loads(body[:hl].decode())
    need(doc.get("model_name") == model, "model_name %s, want %s" % (doc.get("model_name"), model))
    need(doc.get("model_version") == "1", "model_version %s" % doc.get("model_version"))
    rp = doc.get("parameters") or {}
    need(rp.get("character") == name, "parameters.character %s" % rp.get("character"))
    need(rp.get("batch_poses", 0) >= B and rp.get("batch_requests", 0) >= 1, "batch parameters %s" % rp)
    if "id" in req:
        need(doc.get("id") == req["id"], "id %s" % doc.get("id"))
    outs = doc.get("outputs") or []
    need([o["name"] for o in outs] == [n for n, _ in want],
         "outputs %s, want %s" % ([o["name"] for o in outs], [n for n, _ in want]))
    ref = deform_eval(model, name, req, B, per, i)
    off, summary = hl, []
    for o in outs:
        n_, e = o["name"], enc[o["name"]]
        p = o.get("parameters") or {}
        need(o.get("datatype") == DT[e], "%s: datatype %s, want %s (%s)" % (n_, o.get("datatype"), DT[e], e))
        need(p.get("encoding") == e, "%s: parameters.encoding %s, want %s" % (n_, p.get("encoding"), e))
        need(scalars(p), "%s: parameters hold a list or an object: %s" % (n_, p))
        need(o.get("shape") == [B, N, 3], "%s: shape %s, want %s" % (n_, o.get("shape"), [B, N, 3]))
        n = B * N * 3
        if binary[n_]:
            need("data" not in o, "%s: a binary output with \"data\" too" % n_)
            size = p.get("binary_data_size")
            need(size == n * np.dtype(WIRE[e]).itemsize,
                 "%s: binary_data_size %s, want %d" % (n_, size, n * np.dtype(WIRE[e]).itemsize))
            raw = body[off:off + size]
            need(len(raw) == size, "%s: %d bytes present, %d announced" % (n_, len(raw), size))
            off += size
            q = np.frombuffer(raw, dtype=WIRE[e]).astype(np.float32)
        else:
            need("binary_data_size" not in p, "%s: binary_data_size on a JSON output" % n_)
            d = flat(o.get("data"))
            need(len(d) == n, "%s: %d values, want %d" % (n_, len(d), n))
            if e == "int16":
                need(all(isinstance(x, int) and -32768 <= x <= 32767 for x in d), "%s: int16 data not integers" % n_)
            q = np.array(d, dtype=np.float32)
        r = ref[n_].astype(np.float64)
        if e == "int16":
            box = o.get("deformd") or {}
            sc, of = np.array(box["scale"], dtype=np.float32), np.array(box["offset"], dtype=np.float32)
            v = (q.reshape(-1, 3) * sc + of).reshape(-1)
            bound = np.tile(sc.astype(np.float64) / 2 * 1.001, n // 3)
        else:
            v = q
            bound = np.abs(r) * 2.0 ** -11 + 2.0 ** -25 if e == "float16" else np.zeros(n)
        v = v.astype(np.float64)
        need(np.isfinite(v).all(), "%s: non-finite values" % n_)
        tol = 1e-6 * diag(model) if n_ == "positions" else 1e-5
        excess = (np.abs(v - r) - bound).max()
        need(excess <= tol, "%s (%s): differs from bin/deform eval by %g beyond the %s bound (tolerance %g)"
             % (n_, e, excess, e, tol))
        summary.append("%s %s %s max|d| %.3g" % (n_, DT[e], "binary %d B" % p["binary_data_size"]
                                                  if binary[n_] else "JSON", np.abs(v - r).max()))
    need(off == len(body), "%d bytes after the last output" % (len(body) - off))
    return "%s: %s" % (name, "; ".join(summary))


def rest_positions(model, i):
    out = os.path.join(T, "rest%d.npy" % i)
    r = subprocess.run([os.path.join(BIN, "deform"), "eval", os.path.join(REPO, model), "--rest",
                        "--out", out], capture_output=True, text=True)
    need(r.returncode == 0, "bin/deform eval --rest: %s" % r.stderr[-300:])
    return np.load(out).reshape(-1).astype(np.float64)


def check_glb(model, body, rest):
    need(body[:4] == b"glTF", "not a glb (magic %r)" % body[:4])
    _, version, length = struct.unpack_from("<4sII", body, 0)
    need(version == 2 and length == len(body), "glb version %d, length %d of %d bytes" % (version, length, len(body)))
    jl, jt = struct.unpack_from("<I4s", body, 12)
    need(jt == b"JSON", "first chunk %r" % jt)
    g = json.loads(body[20:20 + jl].decode())
    bl, bt = struct.unpack_from("<I4s", body, 20 + jl)
    need(bt == b"BIN\0", "second chunk %r" % bt)
    need(20 + jl + 8 + bl == len(body), "chunks do not fill the file")
    blob = body[20 + jl + 8:20 + jl + 8 + bl]
    prim = g["meshes"][0]["primitives"][0]

    def acc(k, dt, comps):
        a = g["accessors"][k]
        v = g["bufferViews"][a["bufferView"]]
        start = v.get("byteOffset", 0) + a.get("byteOffset", 0)
        return np.frombuffer(blob[start:start + a["count"] * comps * np.dtype(dt).itemsize], dtype=dt), a
    N, T_, _, _ = model_dims(model)
    pos, pa = acc(prim["attributes"]["POSITION"], "<f4", 3)
    need(pa["count"] == N and pa["componentType"] == 5126 and pa["type"] == "VEC3",
         "POSITION accessor %s, want %d float VEC3" % (pa, N))
    idx, ia = acc(prim["indices"], "<u4", 1)
    need(ia["count"] == 3 * T_ and ia["componentType"] == 5125, "indices accessor %s, want %d uint32" % (ia, 3 * T_))
    tri = MODELS[model]["tensor"]("triangles").reshape(-1).astype(np.int64)
    need((idx.astype(np.int64) == tri).all(), "indices differ from the model file's triangles")
    d = np.abs(pos.astype(np.float64) - rest).max()
    need(d <= 1e-6 * diag(model), "positions differ from the rest pose by %g" % d)
    p3 = pos.reshape(-1, 3)
    need(np.allclose(pa.get("min"), p3.min(0)) and np.allclose(pa.get("max"), p3.max(0)),
         "POSITION min/max %s/%s do not bound the positions" % (pa.get("min"), pa.get("max")))
    return "glb 2.0 of %d bytes: %d vertices (the rest pose, max|d| %.3g), %d triangles (the file's)" % (
        len(body), N, d, T_)


def check_metrics(text, done):
    typed, samples = {}, {}
    for l in text.splitlines():
        if not l.strip():
            continue
        if l.startswith("# TYPE "):
            _, _, nm, kind = l.split(None, 3)
            need(kind in ("counter", "gauge", "histogram", "summary", "untyped"), "TYPE %r" % l)
            typed[nm] = kind
            continue
        if l.startswith("#"):
            need(l.startswith("# HELP "), "comment line %r" % l)
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? '
                     r'(-?[0-9.]+(e[+-]?[0-9]+)?|NaN|\+Inf|-Inf)$', l)
        need(m, "not a Prometheus sample line: %r" % l)
        base = re.sub(r"_(bucket|sum|count)$", "", m.group(1))
        need(m.group(1) in typed or typed.get(base) == "histogram", "%s has no # TYPE line before it" % m.group(1))
        samples[m.group(1) + (m.group(2) or "")] = float(m.group(4))

    def val(k):
        need(k in samples, "no sample %s" % k)
        return samples[k]
    need(val("deformd_up") == 1, "deformd_up %s" % samples.get("deformd_up"))
    need(val("deformd_models_loaded") == len(MODELS), "deformd_models_loaded %s" % samples.get("deformd_models_loaded"))
    need(val("deformd_inflight_requests") == 0, "deformd_inflight_requests %s" % samples.get("deformd_inflight_requests"))
    for model in MODELS:
        need(val('deformd_model_loaded{model="%s",version="1"}' % model) == 1, "%s not loaded" % model)
        good = val('deformd_requests_total{model="%s",status="success"}' % model)
        bad = val('deformd_requests_total{model="%s",status="failure"}' % model)
        need(good == done.get(model, 0) and bad == 0, "%s: %d successes, %d failures; the README ran %d infer lines on it"
             % (model, good, bad, done.get(model, 0)))
        nb = val('deformd_batches_total{model="%s"}' % model)
        need((1 if good else 0) <= nb <= good, "%s: %d batches for %d requests" % (model, nb, good))
        need(val('deformd_batch_size_count{model="%s"}' % model) == nb, "%s: deformd_batch_size_count != batches" % model)
        need(val('deformd_queue_length{model="%s"}' % model) == 0, "%s: queue not empty" % model)
    return "%d samples; infer requests per model %s, as run" % (len(samples), {m: done.get(m, 0) for m in MODELS})


def check_metadata(c, body):
    model = CHAR[c]
    N, T_, J, M = model_dims(model)
    mm = MODELS[model]["meta"]
    d = json.loads(body)
    need(d.get("name") == c and d.get("versions") == ["1"] and d.get("platform") == "deformd",
         "name/versions/platform %s %s %s" % (d.get("name"), d.get("versions"), d.get("platform")))
    need([(o["name"], o["datatype"], o["shape"]) for o in d["outputs"]] ==
         [("positions", "FP32", [-1, N, 3]), ("normals", "FP32", [-1, N, 3])], "outputs %s" % d["outputs"])
    ins = {x["name"]: x for x in d["inputs"]}
    need(all(x["datatype"] == "FP32" and x["shape"][0] == -1 for x in d["inputs"]), "inputs %s" % d["inputs"])
    if J:
        need(ins["joint_rotations"]["shape"] == [-1, J, 4], "joint_rotations %s, the file has %d joints"
             % (ins["joint_rotations"]["shape"], J))
    if M:
        need(ins["weights"]["shape"] == [-1, M], "weights %s, the file has %d morphs" % (ins["weights"]["shape"], M))
    # KServe's $parameters hold scalars only; the lists are in "deformd"
    need(scalars(d["parameters"]) and all(scalars(x.get("parameters") or {}) for x in d["inputs"] + d["outputs"]),
         "metadata parameters hold a list or an object")
    p, cc = dict(d["parameters"], **d.get("deformd", {})), char_cfg(c)
    need(p.get("model") == model and p.get("kind") == MODELS[model]["cfg"]["kind"],
         "model/kind %s/%s" % (p.get("model"), p.get("kind")))
    need(sorted(p.get("characters") or []) == sorted(MODELS[model]["chars"]), "characters %s" % p.get("characters"))
    need(p.get("vertices") == N and p.get("triangles") == T_,
         "vertices/triangles %s/%s, the file has %d/%d" % (p.get("vertices"), p.get("triangles"), N, T_))
    need(list(p.get("joints") or []) == json.loads(mm.get("joint_names", "[]")) and len(p.get("joints") or []) == J,
         "joints differ from the file's %d joint_names" % J)
    clips = p.get("clips") or []
    need([x["name"] for x in clips] == json.loads(mm.get("clips", "[]")), "clips %s" % [x.get("name") for x in clips])
    for k, x in enumerate(clips):
        times = MODELS[model]["tensor"]("clip/%d/times" % k)
        need(x["keys"] == len(times) and abs(x["duration"] - float(times[-1] - times[0])) <= 1e-5,
             "clip %s: %s keys over %s s, the file has %d over %g" % (x["name"], x["keys"], x["duration"], len(times),
                                                                     times[-1] - times[0]))
    need(p.get("skinning") == cc.get("skinning", mm.get("skinning")), "skinning %s" % p.get("skinning"))
    need(p.get("encoding") == cc.get("encoding", "float32"), "encoding %s" % p.get("encoding"))
    for k, v in (cc.get("defaults") or {}).items():
        need((p.get("defaults") or {}).get(k) == v,
             "%s default %s, config.json says %s" % (k, (p.get("defaults") or {}).get(k), v))
    return "%s: %d vertices, %d triangles, %d joints, %d morphs, clips %s" % (
        c, N, T_, J, M, [x["name"] for x in clips])


rows = [l.rstrip("\n").split("\t", 3) for l in open(os.path.join(T, "manifest.tsv"))]
done, seen = {}, set()
for idx, rc, outfile, line in rows:
    i = int(idx)
    args = shlex.split(line)
    url = next(a for a in args if "localhost:8000" in a)
    route, _, query = url.split("localhost:8000", 1)[1].partition("?")
    name = "readme-example-%d" % i
    try:
        need(rc == "0", "curl exit %s" % rc)
        st, h = headers(i)
        need(st == 200, "HTTP status %d, want 200" % st)
        stdout = open(os.path.join(T, "ex%d.out" % i), "rb").read()
        err = open(os.path.join(T, "ex%d.err" % i), "rb").read()
        need(not err.strip(), "curl printed on stderr: %r" % err[:200])
        to_file = outfile and outfile != "/dev/null"
        body = open(os.path.join(CWD, outfile), "rb").read() if to_file else stdout
        if to_file:
            need(not stdout, "stdout not empty with -o")
        data = args[args.index("-d") + 1] if "-d" in args else None
        if data and data.startswith("@"):
            data = open(os.path.join(T, data[1:])).read()
        if "-w" in args and "%{http_code}" in args[args.index("-w") + 1]:
            need(stdout.decode().strip() == "200", "-w printed %r, want 200" % stdout)
        m_infer = re.fullmatch(r"/v2/models/([^/]+)/infer", route)
        m_meta = re.fullmatch(r"/v2/models/([^/]+)", route)
        m_mesh = re.fullmatch(r"/v2/models/([^/]+)/mesh", route)
        info = ""
        if route in ("/v2/health/ready", "/v2/health/live") and not query:
            if outfile != "/dev/null":
                key = route.rsplit("/", 1)[1]
                need(json.loads(body) == {key: True}, "answer %r" % body[:200])
            what = "health-200"
        elif route == "/v2" and not query:
            d = json.loads(body)
            need(h.get("content-type", "").startswith("application/json"), "content-type %s" % h.get("content-type"))
            need(d.get("name") == "deformd" and d.get("version") == VERSION,
                 "name/version %s/%s, want deformd/%s" % (d.get("name"), d.get("version"), VERSION))
            miss = {"binary_tensor_data", "model_repository", "output_encodings", "glb", "clips",
                    "metrics"} - set(d.get("extensions") or [])
            need(not miss, "extensions lack %s" % sorted(miss))
            what = "server-metadata"
        elif route == "/v2/repository/index" and not query:
            d = json.loads(body)
            need(sorted(e["name"] for e in d) == sorted(MODELS),
                 "models %s, want %s" % ([e.get("name") for e in d], sorted(MODELS)))
            for e in d:
                need(e.get("state") == "READY" and e.get("version") == "1" and e.get("reason") == "",
                     "%s: state %s version %s reason %r" % (e["name"], e.get("state"), e.get("version"), e.get("reason")))
                need(sorted(e.get("characters") or []) == sorted(MODELS[e["name"]]["chars"]),
                     "%s: characters %s, config.json has %s" % (e["name"], e.get("characters"), MODELS[e["name"]]["chars"]))
            what = "index-%d-models-ready" % len(d)
        elif m_infer and not query:
            c = m_infer.group(1)
            if c in CHAR:  # answered 200: the daemon counts it, whatever the check below says
                done[CHAR[c]] = done.get(CHAR[c], 0) + 1
            info = check_infer(i, c, json.loads(data) if data else {}, h, body)
            what = "infer-%s" % c
        elif m_mesh and query == "format=glb":
            c = m_mesh.group(1)
            need(h.get("content-type") == "model/gltf-binary", "content-type %s" % h.get("content-type"))
            info = check_glb(CHAR[c], body, rest_positions(CHAR[c], i))
            what = "mesh-glb-%s" % c
        elif m_meta and not query:
            need(h.get("content-type", "").startswith("application/json"), "content-type %s" % h.get("content-type"))
            info = check_metadata(m_meta.group(1), body)
            what = "metadata-%s" % m_meta.group(1)
        elif route == "/metrics" and not query:
            need(h.get("content-type", "").startswith("text/plain"), "content-type %s" % h.get("content-type"))
            info = check_metrics(body.decode(), done)
            what = "metrics"
        else:
            raise Fail("no check for this README line in tests/e2e/readme_examples.sh: add one")
        if info:
            print("# example %d: %s" % (i, info))
        print("ok %s-%s" % (name, what))
        seen.add(what.split("-")[0])
    except Exception as e:  # a Fail, or an answer not even of the right form
        fails += 1
        print("FAIL %s: %s%s\n    line: %s" % (name, "" if isinstance(e, Fail) else type(e).__name__ + ": ", e, line))
# the tour keeps each kind of line (a README edit cannot drop one unnoticed)
for k in ("health", "server", "index", "metadata", "infer", "mesh", "metrics"):
    if k not in seen:
        fails += 1
        print("FAIL readme-tour-has-%s: no README %s line ran and passed its check" % (k, k))
sys.exit(1 if fails else 0)
PYEOF

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
