#!/usr/bin/env bash
# tests/e2e/sequences.sh — Triton's sequence parameters against the real
# daemon, through the Python client (HTTP and the socket protocol).
#
# Model: the committed garment (tests/data/garment/shirt.safetensors) served
# as two characters, ann and ben; its `state` input/output carries the
# damped example distances D (docs/garment.md: D <- eta D' + (1 - eta) D,
# eta the file's garment_damping). References are computed here in numpy
# from the daemon's answers to requests that name no sequence:
#  - state carried: frame 2 of a sequence answers state
#    eta S1 + (1 - eta) D(pose 2), S1 frame 1's state, D(pose 2) the same
#    pose without a sequence (which it differs from by far more than
#    rounding); its positions equal a plain request given S1 as `state`;
#  - order kept: 10 frames of ann's sequence and 10 of ben's (same id)
#    pipelined on one socket connection between plain requests: every frame
#    equals the damping chain over the poses in the order sent, and over HTTP
#    each answer's sequence_frame counts 1, 2, ...;
#  - one sequence fed by 4 HTTP connections at once: numbered 1..21 without
#    a gap or a repeat, and the states follow the chain in that order;
#  - restart (sequence_start on a live id) resets the state; sequence_end
#    frees the slot (deformd_sequences_live, _ended_total); a request without
#    start for an unknown or ended sequence is 400 with Triton's wording; a
#    frame of several poses on a model with state is 400; a `state` given by
#    the request overrides the carried one;
#  - max_sequences (3): the fourth start is 429, an end makes room;
#  - sequence_idle_timeout_ms (1500): after 2 s idle every sequence expired
#    (deformd_sequences_expired_total), a late frame is 400 naming the expiry,
#    and a start reuses the slots;
#  - a model without state (the imported Testwuson.X, when assimp-testmodels
#    is installed): sequences of 2-pose frames are accepted, answered as
#    without a sequence, in order;
#  - bin/deformctl (the C library: socket, then HTTP) and the browser module
#    (clients/js/deformd.js under Node) send a sequence's frames.
# Prints "ok NAME" / "FAIL NAME" lines for tests/run.sh.
. "$(dirname "$0")/product_common.sh"

SHIRT=$ROOT/tests/data/garment/shirt.safetensors
REPO=$T/repo
mkdir -p "$REPO/shirt/1"
cp "$SHIRT" "$REPO/shirt/1/model.safetensors"
echo '{"kind": "garment", "characters": {"ann": {}, "ben": {}}}' >"$REPO/shirt/config.json"
WUSON=/usr/share/assimp/models/X/Testwuson.X
HAVE_WUSON=0
if [ -r "$WUSON" ] && "$BIN/deform" import "$WUSON" --repository "$REPO" --name wuson \
    >"$T/import.log" 2>&1; then HAVE_WUSON=1; fi
start_daemon "$REPO" --set sequence_idle_timeout_ms=1500 --set max_sequences=3 \
    && ok seq-daemon || { fail seq-daemon; finish; exit 1; }
export PYTHONPATH=$ROOT/clients/python

"$PY" - "$HTTP" "$SOCK" "$SHIRT" "$HAVE_WUSON" <<'EOF'
import json, struct, sys, time
import numpy as np
from deformd_client import HttpClient, SocketClient, DeformdError

HTTP, SOCK, SHIRT, HAVE_WUSON = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
nfail = 0


def check(name, cond, msg=""):
    global nfail
    print(("ok " if cond else "FAIL ") + name + ("" if cond else ": " + str(msg)), flush=True)
    nfail += not cond


def err_of(fn):
    try:
        fn()
    except DeformdError as e:
        return e
    return None


# the damping ratio, from the model file's own metadata (safetensors header)
with open(SHIRT, "rb") as f:
    (hl,) = struct.unpack("<Q", f.read(8))
    eta = float(json.loads(f.read(hl))["__metadata__"]["garment_damping"])
check("seq-damping-read", 0 < eta < 1, eta)

rng = np.random.default_rng(17)


def pose():
    """19 joint rotations (x, y, z, w): random axes, up to 0.6 rad."""
    ax = rng.normal(size=(19, 3))
    ax /= np.linalg.norm(ax, axis=1, keepdims=True)
    a = rng.uniform(0, 0.6, size=(19, 1))
    return np.hstack([ax * np.sin(a / 2), np.cos(a / 2)]).astype(np.float32)


poses = [pose() for _ in range(10)]
shape = [0.5, 1.0, 0.0, 0.0]
h = HttpClient(port=HTTP)
OUT = ["positions", "state"]


def arr(t):
    return np.asarray(t.data, dtype=np.float32).reshape(t.shape)


def plain(who, p, state=None):
    ins = {"joint_rotations": p, "shape": shape}
    if state is not None:
        ins["state"] = state
    r = h.infer(who, ins, outputs=OUT)
    return arr(r["positions"]), arr(r["state"])


def seq(who, p, sid, **kw):
    r = h.infer(who, {"joint_rotations": p, "shape": shape}, outputs=OUT, sequence_id=sid, **kw)
    return arr(r["positions"]), arr(r["state"]), h.last_response["parameters"]


def close(a, b, rel=1e-6):
    return float(np.max(np.abs(a - b))) <= rel * float(np.max(np.abs(b))) + 1e-12


# independent D of each pose: the state a plain request answers (no previous frame)
ref = [plain("ann", p) for p in poses]
D = [r[1] for r in ref]

# ---- state carried (HTTP)
X1, S1, p1 = seq("ann", poses[0], 101, sequence_start=True)
check("seq-frame1-undamped", np.array_equal(S1, D[0]) and p1["sequence_frame"] == 1
      and p1["sequence_id"] == 101, (p1, float(np.max(np.abs(S1 - D[0])))))
X2, S2, p2 = seq("ann", poses[1], 101)
want = np.float32(eta) * S1 + np.float32(1 - eta) * D[1]
check("seq-frame2-damping-formula", close(S2, want),
      "max |S2 - (eta S1 + (1-eta) D2)| = %g" % float(np.max(np.abs(S2 - want))))
check("seq-frame2-differs-from-plain", float(np.max(np.abs(S2 - D[1]))) > 1e-2 * float(np.max(np.abs(D[1]))),
      float(np.max(np.abs(S2 - D[1]))))
Xs, Ss = plain("ann", poses[1], state=S1)
check("seq-frame2-positions-equal-explicit-state", np.array_equal(X2, Xs) and np.array_equal(S2, Ss),
      float(np.max(np.abs(X2 - Xs))))
check("seq-frame2-positions-moved", float(np.max(np.abs(X2 - ref[1][0]))) > 1e-4,
      float(np.max(np.abs(X2 - ref[1][0]))))
check("seq-frame-count", p2["sequence_frame"] == 2, p2)
# a state the request gives overrides the carried one
r = h.infer("ann", {"joint_rotations": poses[2], "shape": shape, "state": D[5]}, outputs=OUT,
            sequence_id=101)
check("seq-explicit-state-overrides",
      close(arr(r["state"]), np.float32(eta) * D[5] + np.float32(1 - eta) * D[2]), "")
# restart: state reset, frames counted from 1
_, S, p = seq("ann", poses[3], 101, sequence_start=True)
check("seq-restart-resets", np.array_equal(S, D[3]) and p["sequence_frame"] == 1, p)
# several poses in one frame of a model with state
e = err_of(lambda: h.infer("ann", {"joint_rotations": np.stack(poses[:2])}, batch=2,
                           sequence_id=101))
check("seq-several-poses-refused", e is not None and e.status == 400 and "one pose" in str(e), e)

# one sequence fed by 4 threads at once (4 HTTP connections, 5 frames each):
# the daemon serialises them; sorted by sequence_frame, the answers number
# 1..20 and follow the damping chain of the poses in that order
import threading
seq("ann", poses[0], "mt", sequence_start=True)
answers, lock = [], threading.Lock()


def feeder(t):
    c = HttpClient(port=HTTP)
    for j in range(5):
        k = (3 * t + j) % 10
        r = c.infer("ann", {"joint_rotations": poses[k], "shape": shape}, outputs=["state"],
                    sequence_id="mt")
        with lock:
            answers.append((c.last_response["parameters"]["sequence_frame"], k, arr(r["state"])))


ths = [threading.Thread(target=feeder, args=(t,)) for t in range(4)]
for t in ths:
    t.start()
for t in ths:
    t.join()
answers.sort(key=lambda a: a[0])
chain, badmt = D[0], []
for fr, k, st in answers:
    chain = np.float32(eta) * chain + np.float32(1 - eta) * D[k]
    if not close(st, chain):
        badmt.append(fr)
check("seq-concurrent-connections-serialised",
      [a[0] for a in answers] == list(range(2, 22)) and not badmt,
      ([a[0] for a in answers], badmt))
seq("ann", poses[0], "mt", sequence_end=True)

# ---- order: two sequences with the same id (ann, ben) pipelined on one socket
s = SocketClient(port=SOCK)
rids = []
for k in range(10):
    rids.append(("ann", k, s.submit("ann", {"joint_rotations": poses[k][None], "shape": [shape]},
                                     outputs=OUT, sequence_id=7, sequence_start=k == 0)))
    rids.append(("ben", 9 - k, s.submit("ben", {"joint_rotations": poses[9 - k][None],
                                                 "shape": [shape]}, outputs=OUT,
                                         sequence_id=7, sequence_start=k == 0)))
    rids.append(("plain", k, s.submit("ann", {"joint_rotations": poses[k][None],
                                               "shape": [shape]}, outputs=OUT)))
got = {"ann": [], "ben": []}
bad = []
for who, k, rid in rids:
    st = arr(s.result(rid)["state"])[0]
    if who == "plain":
        if not np.array_equal(st, D[k]):
            bad.append("plain %d" % k)
        continue
    got[who].append(st)
for who, order in (("ann", range(10)), ("ben", range(9, -1, -1))):
    chain = None
    for n, k in enumerate(order):
        chain = D[k] if chain is None else np.float32(eta) * chain + np.float32(1 - eta) * D[k]
        if not close(got[who][n], chain):
            bad.append("%s frame %d" % (who, n + 1))
check("seq-socket-order-and-chain", not bad, bad)
# the chain over another order differs: the check can fail
other = None
for k in range(9, -1, -1):
    other = D[k] if other is None else np.float32(eta) * other + np.float32(1 - eta) * D[k]
check("seq-order-matters", not close(got["ann"][-1], other), "")


def metric(name):
    txt = h._request("GET", "/metrics")[2].decode()
    for line in txt.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


# ---- max_sequences: live now: ann 101, ann 7, ben 7 = 3
check("seq-three-live", metric("deformd_sequences_live") == 3, metric("deformd_sequences_live"))
e = err_of(lambda: seq("ann", poses[0], 555, sequence_start=True))
check("seq-cap-429", e is not None and e.status == 429 and "max_sequences" in str(e), e)
check("seq-cap-counted", metric('deformd_sequences_refused_total{reason="max_sequences"}') == 1, "")
live0, ended0 = metric("deformd_sequences_live"), metric("deformd_sequences_ended_total")
seq("ann", poses[4], 101, sequence_end=True)
check("seq-end-frees-slot", metric("deformd_sequences_live") == live0 - 1 and
      metric("deformd_sequences_ended_total") == ended0 + 1,
      (live0, metric("deformd_sequences_live")))
e = err_of(lambda: seq("ann", poses[0], 101))
check("seq-after-end-needs-start", e is not None and e.status == 400 and "sequence_start" in str(e), e)
# frame numbers over HTTP, in the slot the end freed
frames = [seq("ben", poses[k], "take-2", sequence_start=k == 0)[2]["sequence_frame"]
          for k in range(5)]
check("seq-http-frame-numbers", frames == [1, 2, 3, 4, 5], frames)
e = err_of(lambda: seq("ann", poses[0], 999))
check("seq-unknown-400", e is not None and e.status == 400 and
      "must specify sequence_start" in str(e) and "999" in str(e), e)
e = err_of(lambda: h.infer("ann", {}, parameters={"sequence_start": True}))
check("seq-start-without-id-400", e is not None and e.status == 400 and "sequence_id" in str(e), e)
seq("ben", poses[5], "take-2", sequence_end=True)
_, S, _ = seq("ann", poses[0], 555, sequence_start=True)
check("seq-cap-room-after-end", np.array_equal(S, D[0]) and metric("deformd_sequences_live") == 3,
      metric("deformd_sequences_live"))

# ---- expiry: 2 s without a request (sequence_idle_timeout_ms 1500)
exp0 = metric("deformd_sequences_expired_total")
time.sleep(2.0)
check("seq-expired-metric", metric("deformd_sequences_live") == 0 and
      metric("deformd_sequences_expired_total") == exp0 + 3,
      (metric("deformd_sequences_live"), metric("deformd_sequences_expired_total")))
e = err_of(lambda: seq("ann", poses[1], 555))
check("seq-expired-400", e is not None and e.status == 400 and "expired" in str(e) and
      "555" in str(e) and "sequence_idle_timeout_ms" in str(e), e)
e = err_of(lambda: s.infer("ben", {"joint_rotations": poses[1]}, sequence_id=7))
check("seq-expired-socket", e is not None and e.code == -1 and "expired" in str(e), e)
_, S, p = seq("ann", poses[1], 555, sequence_start=True)
check("seq-restart-after-expiry", np.array_equal(S, D[1]) and p["sequence_frame"] == 1, p)

# ---- a model without state: ordering only
if HAVE_WUSON:
    ws = [np.tile(np.array([0, 0, 0, 1], np.float32), (2, 39, 1)) for _ in range(3)]
    for k, w in enumerate(ws):
        w[:, 3 + k] = [np.sin(0.2 * (k + 1)), 0, 0, np.cos(0.2 * (k + 1))]
    okw = True
    for k, w in enumerate(ws):
        a = h.infer("wuson", {"joint_rotations": w}, batch=2, outputs=["positions"],
                    sequence_id=3, sequence_start=k == 0, sequence_end=k == 2)
        fr = h.last_response["parameters"]["sequence_frame"]
        b = h.infer("wuson", {"joint_rotations": w}, batch=2, outputs=["positions"])
        okw &= np.array_equal(arr(a["positions"]), arr(b["positions"])) and fr == k + 1
    check("seq-stateless-model", okw, "")
else:
    print("ok seq-stateless-model-skipped-no-asset")
sys.exit(1 if nfail else 0)
EOF
[ $? -eq 0 ] || NFAIL=$((NFAIL + 1))
# bin/deformctl: two frames of a sequence over the socket, then one over HTTP
# (the C library), against the damping formula on plain answers
ROT='[[0,0,0,1],[0,0,0.3,0.95393920141],[0,0,0,1],[0,0,0,1],[0,0,0,1],[0,0,0,1],[0,0,0,1],[0,0,0,1],[0,0,0,1],[0,0,0,1],[0,0,0,1],[0,0,0,1],[0,0,0,1],[0,0,0,1],[0,0,0,1],[0,0,0,1],[0,0,0,1],[0,0,0,1],[0,0,0,1]]'
CTL="$BIN/deformctl --socket-port $SOCK --http-port $HTTP"
$CTL infer ann --output state --sequence 31 --sequence-start --out "$T/c1.npy" >/dev/null 2>"$T/ctl.err" \
    && $CTL infer ann --input "joint_rotations=$ROT" --output state --sequence 31 --out "$T/c2.npy" >/dev/null 2>>"$T/ctl.err" \
    && $CTL infer ann --input "joint_rotations=$ROT" --output state --sequence 31 --sequence-end --http \
        --out "$T/c3.npy" >/dev/null 2>>"$T/ctl.err" \
    && $CTL infer ann --output state --out "$T/d1.npy" >/dev/null 2>>"$T/ctl.err" \
    && $CTL infer ann --input "joint_rotations=$ROT" --output state --out "$T/d2.npy" >/dev/null 2>>"$T/ctl.err" \
    && "$PY" - "$T" "$SHIRT" <<'EOF' && ok seq-deformctl || fail seq-deformctl "$(cat "$T/ctl.err")"
import json, struct, sys
import numpy as np
t, shirt = sys.argv[1], sys.argv[2]
with open(shirt, "rb") as f:
    (hl,) = struct.unpack("<Q", f.read(8))
    eta = np.float32(json.loads(f.read(hl))["__metadata__"]["garment_damping"])
c1, c2, c3, d1, d2 = (np.load("%s/%s.npy" % (t, n)).reshape(-1) for n in ("c1", "c2", "c3", "d1", "d2"))
assert np.array_equal(c1, d1)
for got, prev in ((c2, c1), (c3, c2)):
    want = eta * prev + (np.float32(1) - eta) * d2
    assert np.max(np.abs(got - want)) <= 1e-6 * np.max(np.abs(want)), np.max(np.abs(got - want))
assert np.max(np.abs(c2 - d2)) > 1e-2 * np.max(np.abs(d2))
EOF
$CTL infer ann --output state --sequence 31 --out "$T/c4.npy" >/dev/null 2>"$T/ctl4.err"
[ $? -eq 1 ] && grep -q "must specify sequence_start" "$T/ctl4.err" && ok seq-deformctl-after-end \
    || fail seq-deformctl-after-end "$(cat "$T/ctl4.err")"
# the browser module (Node's fetch): a sequence's frames through DeformdClient
if command -v node >/dev/null; then
    node - "$URL" "$ROOT/clients/js/deformd.js" >"$T/js.log" 2>&1 <<'EOF'
const [url, mod] = process.argv.slice(2);
import(mod).then(async ({ DeformdClient }) => {
  const c = new DeformdClient(url);
  const frames = [];
  for (let k = 0; k < 3; k++) {
    const out = await c.infer('ann', {}, { outputs: ['state'], sequence: { id: 'js-1', start: k === 0, end: k === 2 } });
    frames.push(out.$response.parameters.sequence_frame);
  }
  if (frames.join() !== '1,2,3') throw new Error('frames ' + frames);
  try {
    await c.infer('ann', {}, { sequence: { id: 'js-1' } });
    throw new Error('a frame after the end was answered');
  } catch (e) { if (e.status !== 400) throw e; }
}).catch((e) => { console.error(e); process.exit(1); });
EOF
    [ $? -eq 0 ] && ok seq-js-module || fail seq-js-module "$(tail -3 "$T/js.log")"
else
    fail seq-js-module "needs node"
fi
grep -q "sequences: 3 slots" "$T/deformd.log" && ok seq-slots-at-start \
    || fail seq-slots-at-start "$(grep sequences "$T/deformd.log")"
finish
