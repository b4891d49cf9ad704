#!/usr/bin/env bash
# tests/e2e/garment_db.sh — the garment tool chain end to end on a tiny plan, with the real
# tools (Blender 3.4 headless, tools/garment/garment.py, bin/deform, bin/deformd):
#  build (body from HUMAN.blend, the ~1.3k-vertex shirt, CMU 01_01 every 40th frame), plan
#  (1 anchor x 2 training shapes + 1 held-out pair: 3 short simulations, 6 frames at cloth
#  quality 4), the local pool (resumes: a finished job is not simulated again, a deleted result
#  is), status, the Kubernetes Indexed Job (one completion index per job), fit (refuses a
#  database with a missing simulation and names it; --allow-missing proceeds), evaluate (the C
#  runtime equals a numpy reading of Eq. 4 to 1e-4 m; ours beats LBS of the rest garment on the
#  held-out pair), the model served by deformd over HTTP (positions of the garment; a wrong
#  shape length and a truncated file refused with a clear message).
# Skipped (no lines) when blender is not installed. About 40 s of CPU.
. "$(dirname "$0")/product_common.sh"
command -v blender >/dev/null || { echo "blender not installed: skipped"; exit 0; }
G="$PY $ROOT/tools/garment/garment.py"
D=$T/db
$G build "$D" --cuts 0 --stride 40 >"$T/build.log" 2>&1 \
    && grep -q "^build_garment: 1290 vertices" "$T/build.log" && ok gdb-build \
    || { cat "$T/build.log"; fail gdb-build; finish; exit 1; }
$G plan "$D" --anchors 1 --pose-set 0 --shape-axes 1 --test 1 --quality 4 --rest 1 --ramp 4 --hold 1 \
    >"$T/plan.log" 2>&1 && grep -q "3 jobs (1 anchors x 2 shapes, 0 template poses, 1 tests)" "$T/plan.log" \
    && ok gdb-plan || { cat "$T/plan.log"; fail gdb-plan; finish; exit 1; }
$G plan "$D" >"$T/plan2.log" 2>&1 && fail gdb-plan-no-overwrite || ok gdb-plan-no-overwrite
$G run "$D" --batch 3 >"$T/run.log" 2>&1 && grep -q "3 ok, 0 failed, 0 pending" "$T/run.log" \
    && grep -q "ETA" "$D/progress.log" && ok gdb-run || { cat "$T/run.log"; tail -30 "$D"/sims/*.log; fail gdb-run; finish; exit 1; }
# resume: nothing to do; then a deleted result is simulated again, alone
$G run "$D" >"$T/run2.log" 2>&1 && grep -q "0 to run" "$T/run2.log" && ok gdb-resume-nothing \
    || { cat "$T/run2.log"; fail gdb-resume-nothing; }
rm "$D/sims/a000_s01.json"
$G status "$D" >"$T/status.log" 2>&1; grep -q "2 ok, 0 failed, 1 pending" "$T/status.log" && ok gdb-status \
    || { cat "$T/status.log"; fail gdb-status; }
# the fit names what is missing, and proceeds only when told
if $G fit "$D" --out "$T/m.safetensors" >"$T/fit0.log" 2>&1; then fail gdb-fit-refuses-missing
else grep -q "a000_s01 (not simulated)" "$T/fit0.log" && ok gdb-fit-refuses-missing \
    || { cat "$T/fit0.log"; fail gdb-fit-refuses-missing; }; fi
$G fit "$D" --out "$T/m.safetensors" --allow-missing >"$T/fit1.log" 2>&1 && grep -q "left out a000_s01" "$T/fit1.log" \
    && ok gdb-fit-allow-missing || { cat "$T/fit1.log"; fail gdb-fit-allow-missing; }
$G run "$D" >"$T/run3.log" 2>&1 && grep -q "1 to run" "$T/run3.log" && grep -q "3 ok" "$T/run3.log" \
    && ok gdb-resume-one || { cat "$T/run3.log"; fail gdb-resume-one; }
$G sim "$D" 0 >"$T/sim.log" 2>&1 && grep -q "already finished" "$T/sim.log" && ok gdb-sim-skips \
    || { cat "$T/sim.log"; fail gdb-sim-skips; }
# Kubernetes Indexed Job: one completion per job, the index handed to the simulation
$G k8s "$D" --image registry.example/deformd-garment:1 --parallelism 8 >"$T/job.yaml" 2>"$T/k8s.err" \
    && "$PY" - "$T/job.yaml" <<'PYEOF' && ok gdb-k8s || { cat "$T/job.yaml" "$T/k8s.err"; fail gdb-k8s; }
import sys, re
y = open(sys.argv[1]).read()
assert re.search(r'^kind: Job$', y, re.M) and re.search(r'^  completionMode: Indexed$', y, re.M)
assert re.search(r'^  completions: 3$', y, re.M) and re.search(r'^  parallelism: 8$', y, re.M)
assert 'garment.py sim /data/db "$JOB_COMPLETION_INDEX"' in y and 'claimName: garment-db' in y
PYEOF
# fit, serve, evaluate
mkdir -p "$T/repo"
$G fit "$D" --repository "$T/repo" --name shirt >"$T/fit.log" 2>&1 && [ -f "$T/repo/shirt/1/model.safetensors" ] \
    && ok gdb-fit || { cat "$T/fit.log"; fail gdb-fit; finish; exit 1; }
M=$T/repo/shirt/1/model.safetensors
"$BIN/deform" info "$M" >"$T/info.log" 2>&1 && grep -q "model: kind garment" "$T/info.log" \
    && grep -q "joint_rotations" "$T/info.log" && ok gdb-info || { cat "$T/info.log"; fail gdb-info; }
$G evaluate "$D" --model "$M" --json "$T/eval.json" >"$T/eval.log" 2>&1 \
    && "$PY" - "$T/eval.json" <<'PYEOF' && ok gdb-evaluate || { cat "$T/eval.log"; fail gdb-evaluate; }
import sys, json
r = json.load(open(sys.argv[1]))
m = {x['method']: x for x in r['methods']}
print('C vs numpy %.2e m; ours %.2f cm, LBS of the rest garment %.2f cm (mean)'
      % (r['c_vs_numpy_m'], m['ours']['mean_cm'], m['LBS of the rest garment']['mean_cm']))
assert r['pairs'] == 1 and r['c_vs_numpy_m'] < 1e-4
assert m['ours']['mean_cm'] < m['LBS of the rest garment']['mean_cm']
assert r['inside_pct']['ours'] <= r['inside_pct']['ours, no penetration resolution']
PYEOF
head -c 1000 "$M" >"$T/trunc.safetensors"
if "$BIN/deform" info "$T/trunc.safetensors" >"$T/trunc.log" 2>&1; then :; fi
grep -qi "truncated\|shorter\|header" "$T/trunc.log" && ok gdb-truncated || { cat "$T/trunc.log"; fail gdb-truncated; }
start_daemon "$T/repo" || { fail gdb-serve; finish; exit 1; }
"$PY" - "$URL" <<'PYEOF' && ok gdb-serve || fail gdb-serve
import sys, json, urllib.request, urllib.error
url = sys.argv[1] + '/v2/models/shirt/infer'
meta = json.load(urllib.request.urlopen(sys.argv[1] + '/v2/models/shirt'))
outs = {o['name']: o['shape'] for o in meta['outputs']}
ins = {i['name']: i['shape'] for i in meta['inputs']}
assert outs['positions'][-2:] == [1290, 3] and ins['shape'][-1:] == [4], (ins, outs)
q = [[0, 0, 0, 1]] * 19
q[6] = [0, 0.3826834, 0, 0.9238795]  # left upper arm 45 degrees about y
def infer(shape):
    body = {'inputs': [{'name': 'shape', 'shape': [len(shape)], 'datatype': 'FP32', 'data': shape},
                       {'name': 'joint_rotations', 'shape': [19, 4], 'datatype': 'FP32', 'data': sum(q, [])}],
            'outputs': [{'name': 'positions'}]}
    req = urllib.request.Request(url, json.dumps(body).encode(), {'Content-Type': 'application/json'})
    return json.load(urllib.request.urlopen(req))
r = infer([0.5, 0, 0, 0])
p = r['outputs'][0]
assert p['name'] == 'positions' and p['shape'][-2:] == [1290, 3] and len(p['data']) == 1290 * 3
try:
    infer([0.5, 0, 0])
    raise SystemExit('a 3-value shape was accepted')
except urllib.error.HTTPError as e:
    msg = e.read().decode()
    assert e.code == 400 and 'shape' in msg, (e.code, msg)
    print('wrong shape length:', e.code, msg[:160])
PYEOF
finish
