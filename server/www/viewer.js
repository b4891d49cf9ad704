// viewer.js — deformd's web viewer (served at /viewer/ by the daemon).
//
// DESIGN
// The page is a thin client: every vertex it draws was computed by deformd.
// It lists the servable characters (GET /v2/repository/index), reads a
// character's metadata (GET /v2/models/{name}: inputs, morphs, clips) and
// rest mesh (GET /v2/models/{name}/mesh: positions + triangles, once), then
// for each frame sends one infer request through ../vendor/deformd.js (binary
// data extension, float32/float16/int16 as chosen) and copies the returned
// positions into a three.js BufferGeometry. Clips play by asking the daemon
// to sample the clip at a time (request parameters "clip" and "time"),
// sliders send small vector inputs (morph "weights", rig "controls", any
// one-axis input of at most 64 values, whatever the model kind; they start
// at the input's default from the metadata), and the "joints" section turns
// a few joints: each row picks a joint and an axis, and its angle is composed
// with the joint's rest local rotation (metadata default of joint_rotations:
// q = rest ⊗ axis-angle, x,y,z,w); the whole [J,4] joint_rotations is sent,
// defaults for the other joints. At most one
// request is in flight: a frame
// that arrives late is simply followed by the newest state (no queue).
//
// For tests and scripting, window.viewer exposes select(name) and
// show({clip, time, weights, inputs: {name: values}, joints: [{joint, axis,
// angle}]}) which resolve once the frame is drawn; jointRotations() is the
// [J,4] array the joint sliders send.
import * as THREE from 'three';
import { OrbitControls } from './vendor/OrbitControls.js';
import { DeformdClient } from './vendor/deformd.js';

const client = new DeformdClient('');
const $ = (id) => document.getElementById(id);

// ------------------------------------------------------------------ scene
const view = $('view');
const renderer = new THREE.WebGLRenderer({ antialias: true, preserveDrawingBuffer: true });
renderer.setPixelRatio(window.devicePixelRatio || 1);
view.appendChild(renderer.domElement);
const scene = new THREE.Scene();
scene.background = new THREE.Color(0x30353d);
const camera = new THREE.PerspectiveCamera(40, 1, 0.01, 1000);
const controls = new OrbitControls(camera, renderer.domElement);
scene.add(new THREE.HemisphereLight(0xffffff, 0x444455, 1.6));
const sun = new THREE.DirectionalLight(0xffffff, 1.8);
sun.position.set(1, 2, 1.5);
scene.add(sun);
const material = new THREE.MeshStandardMaterial({ color: 0xd9a066, roughness: 0.65, metalness: 0.0, side: THREE.DoubleSide });
let mesh = null;

function resize() {
  const w = view.clientWidth || 640;
  const h = view.clientHeight || 480;
  renderer.setSize(w, h, false);
  camera.aspect = w / h;
  camera.updateProjectionMatrix();
}
window.addEventListener('resize', () => { resize(); render(); });
controls.addEventListener('change', () => render());
function render() { renderer.render(scene, camera); }

// ------------------------------------------------------------------ state
const st = {
  name: null, shown: null, meta: null, clips: [], nverts: 0,
  groups: [], // slider groups: {input, names, values: Float32Array, lo, hi}
  joints: null, // {names, rest: Float32Array(J*4), rows: [{joint, axis, angle (degrees)}]}
  clip: '', time: 0, playing: false,
  inflight: null, dirty: false, frames: 0, lastMs: 0, lastBytes: 0,
};

function showError(e) { $('error').textContent = e ? String(e.message || e) : ''; }

function flatten(v) { return Array.isArray(v) ? v.flat(Infinity) : Array.from(v || []); }

function paramList(meta, key) {
  const p = (meta && meta.parameters) || {};
  let v = p[key];
  if (v && typeof v === 'object' && 'string_param' in v) v = v.string_param;
  if (typeof v === 'string') { try { v = JSON.parse(v); } catch (_) { v = v.split(','); } }
  return Array.isArray(v) ? v : [];
}

function clipDuration(c) {
  if (c.duration != null) return Number(c.duration);
  if (Array.isArray(c.times) && c.times.length) return Number(c.times[c.times.length - 1]);
  return 1.0;
}

// ------------------------------------------------------------- characters
async function loadCharacters() {
  const names = await client.list();
  const sel = $('character');
  sel.innerHTML = '';
  for (const n of names) sel.add(new Option(n, n));
  return names;
}

async function select(name) {
  showError('');
  st.playing = false;
  $('play').textContent = 'play';
  st.name = name;
  $('character').value = name;
  const meta = await client.info(name);
  const rest = await client.mesh(name);
  st.meta = meta;
  st.clips = paramList(meta, 'clips').map((c) => (typeof c === 'string' ? { name: c } : c));
  st.groups = sliderGroups(meta);
  st.joints = jointRig(meta);
  buildMesh(rest);
  buildClipUI();
  buildMorphUI();
  buildJointUI();
  st.clip = st.clips.length ? st.clips[0].name : '';
  st.time = 0;
  $('clip').value = st.clip;
  await requestFrame();
  st.shown = name; // the character on screen (select() is done)
}

function buildMesh(rest) {
  const r = rest.mesh || rest;
  const pos = Float32Array.from(flatten(r.positions));
  // triangles: {"indices": [...]} (with "triangles" the count), or "triangles": [[a,b,c],...]
  const tri = flatten(Array.isArray(r.indices) ? r.indices : r.triangles);
  st.nverts = pos.length / 3;
  const g = new THREE.BufferGeometry();
  g.setAttribute('position', new THREE.BufferAttribute(pos, 3).setUsage(THREE.DynamicDrawUsage));
  g.setIndex(st.nverts > 65535 ? new THREE.Uint32BufferAttribute(tri, 1) : new THREE.Uint16BufferAttribute(tri, 1));
  g.computeVertexNormals();
  g.computeBoundingBox();
  if (mesh) { scene.remove(mesh); mesh.geometry.dispose(); }
  mesh = new THREE.Mesh(g, material);
  scene.add(mesh);
  frameCamera(g.boundingBox);
  st.needFraming = true; // again on the first evaluated frame: a model's output
                         // space may differ from its rest mesh's (e.g. scene vs bind space)
}

function frameCamera(box) {
  const c = box.getCenter(new THREE.Vector3());
  const s = box.getSize(new THREE.Vector3());
  const r = Math.max(s.length() / 2, 1e-3);
  // look along the bbox's thinnest axis, with the next-thinnest as "up" so
  // that the longest extent spans the screen (assets differ in up axis).
  const axes = [0, 1, 2].sort((a, b) => s.getComponent(a) - s.getComponent(b));
  const dir = new THREE.Vector3(); dir.setComponent(axes[0], 1);
  const up = new THREE.Vector3(); up.setComponent(axes[1], 1);
  dir.add(up.clone().multiplyScalar(0.35)).add(new THREE.Vector3().setComponent(axes[2], 0.35)).normalize();
  camera.up.copy(up);
  camera.position.copy(c).addScaledVector(dir, r * 3.0);
  camera.near = r / 100; camera.far = r * 100;
  camera.updateProjectionMatrix();
  controls.target.copy(c);
  controls.update();
}

function buildClipUI() {
  const sel = $('clip');
  sel.innerHTML = '';
  sel.add(new Option('(rest / sliders)', ''));
  for (const c of st.clips) sel.add(new Option(c.name, c.name));
  $('clipbox').style.display = st.clips.length ? '' : 'none';
}

// One slider group per one-axis input of at most 64 values. Names come from
// the metadata list of the same length ("morphs" for weights, "controls" for
// rig controls); weights range over [0, 1], other inputs over [-1, 1].
function sliderGroups(meta) {
  const groups = [];
  for (const i of meta.inputs || []) {
    const shape = (i.shape || []).filter((d, k) => !(k === 0 && d === -1));
    if (shape.length !== 1 || shape[0] < 1 || shape[0] > 64) continue;
    const n = shape[0];
    let names = [];
    for (const list of i.name === 'weights' ? ['morphs'] : ['controls', 'morphs']) {
      const l = paramList(meta, list).map((m) => (typeof m === 'string' ? m : m.name));
      if (l.length === n) { names = l; break; }
    }
    if (names.length !== n) names = Array.from({ length: n }, (_, k) => `${i.name}[${k}]`);
    const lo = i.name === 'weights' ? 0 : -1;
    const def = inputDefault(i, n);
    const values = def ? Float32Array.from(def) : new Float32Array(n);
    groups.push({ input: i.name, names, values, lo, hi: 1, touched: false });
  }
  return groups;
}

// An input's default from the metadata (parameters.default, flat), if it
// has n values.
function inputDefault(i, n) {
  const d = i.parameters && i.parameters.default;
  return Array.isArray(d) && d.length === n ? d.map(Number) : null;
}

// ----------------------------------------------------------------- joints
const JOINT_ROWS = 6;

// The joint rig of a model with a joint_rotations [J,4] input: joint names
// and rest local rotations (identity when the server gives no default), and
// up to JOINT_ROWS slider rows on joints spread over the list (joints are
// listed parents first, so row 0 is the first real joint, a root); each
// row's joint and axis can be changed in the page.
function jointRig(meta) {
  const i = (meta.inputs || []).find((x) => x.name === 'joint_rotations');
  if (!i) return null;
  const shape = (i.shape || []).filter((d, k) => !(k === 0 && d === -1));
  if (shape.length !== 2 || shape[1] !== 4 || shape[0] < 1) return null;
  const J = shape[0];
  let names = paramList(meta, 'joints').map((m) => (typeof m === 'string' ? m : m.name));
  if (names.length !== J) names = Array.from({ length: J }, (_, k) => `joint ${k}`);
  const def = inputDefault(i, J * 4);
  const rest = new Float32Array(J * 4);
  for (let j = 0; j < J; j++) rest[j * 4 + 3] = 1;
  if (def) rest.set(def);
  // skip importer helper nodes ("$dummy_root", "..._$AssimpFbx$_...") when
  // there are real joints to show
  let pick = names.map((n, j) => j).filter((j) => !names[j].includes('$'));
  if (!pick.length) pick = names.map((n, j) => j);
  const rows = [];
  const nr = Math.min(JOINT_ROWS, pick.length);
  for (let k = 0; k < nr; k++) rows.push({ joint: pick[Math.floor((k * pick.length) / nr)], axis: 'x', angle: 0 });
  return { names, rest, rows, touched: false };
}

// Hamilton product a ⊗ b of x,y,z,w quaternions.
function qmul(a, b) {
  return [
    a[3] * b[0] + a[0] * b[3] + a[1] * b[2] - a[2] * b[1],
    a[3] * b[1] - a[0] * b[2] + a[1] * b[3] + a[2] * b[0],
    a[3] * b[2] + a[0] * b[1] - a[1] * b[0] + a[2] * b[3],
    a[3] * b[3] - a[0] * b[0] - a[1] * b[1] - a[2] * b[2],
  ];
}

// joint_rotations [J*4] for the joint rows: rest ⊗ rotation(axis, angle),
// rows on the same joint composed in row order.
function jointRotations() {
  const jr = st.joints;
  if (!jr) return null;
  const q = Float32Array.from(jr.rest);
  for (const r of jr.rows) {
    if (!r.angle) continue;
    const h = (r.angle * Math.PI) / 360;
    const a = [0, 0, 0, Math.cos(h)];
    a['xyz'.indexOf(r.axis)] = Math.sin(h);
    const j = r.joint * 4;
    q.set(qmul([q[j], q[j + 1], q[j + 2], q[j + 3]], a), j);
  }
  return q;
}

function buildJointUI() {
  const box = $('joints');
  box.innerHTML = '';
  const jr = st.joints;
  $('jointbox').style.display = jr ? '' : 'none';
  if (!jr) return;
  jr.rows.forEach((r, k) => {
    const d = document.createElement('div');
    d.className = 'slider joint';
    d.dataset.row = k;
    d.innerHTML = '<div class="row"><select class="jname"></select><select class="jaxis">'
      + '<option>x</option><option>y</option><option>z</option></select></div>'
      + '<label>angle <span>0°</span></label><input type="range" min="-180" max="180" step="1" value="0">';
    const js = d.querySelector('.jname');
    jr.names.forEach((n, j) => js.add(new Option(n, String(j))));
    js.value = String(r.joint);
    const ax = d.querySelector('.jaxis');
    ax.value = r.axis;
    const inp = d.querySelector('input');
    const changed = () => {
      r.joint = Number(js.value);
      r.axis = ax.value;
      r.angle = Number(inp.value);
      jr.touched = true;
      d.querySelector('span').textContent = `${r.angle}°`;
      requestFrame();
    };
    js.addEventListener('change', changed);
    ax.addEventListener('change', changed);
    inp.addEventListener('input', changed);
    box.appendChild(d);
  });
}

function syncJointUI() {
  const jr = st.joints;
  if (!jr) return;
  $('joints').querySelectorAll('.slider.joint').forEach((d, k) => {
    const r = jr.rows[k];
    d.querySelector('.jname').value = String(r.joint);
    d.querySelector('.jaxis').value = r.axis;
    d.querySelector('input').value = r.angle;
    d.querySelector('span').textContent = `${r.angle}°`;
  });
}

function buildMorphUI() {
  const box = $('morphs');
  box.innerHTML = '';
  $('morphbox').style.display = st.groups.length ? '' : 'none';
  for (const g of st.groups) {
    const h = document.createElement('label');
    h.textContent = g.input === 'weights' ? 'morph weights' : g.input;
    box.appendChild(h);
    g.names.forEach((m, i) => {
      const d = document.createElement('div');
      d.className = 'slider';
      d.dataset.input = g.input;
      const v0 = g.values[i];
      d.innerHTML = `<label>${m} <span>${v0.toFixed(2)}</span></label><input type="range" min="${g.lo}" max="${g.hi}" step="0.01" value="${v0}">`;
      const inp = d.querySelector('input');
      inp.addEventListener('input', () => {
        g.values[i] = Number(inp.value);
        g.touched = true;
        d.querySelector('span').textContent = Number(inp.value).toFixed(2);
        requestFrame();
      });
      box.appendChild(d);
    });
  }
}

// ----------------------------------------------------------------- frames
function requestBody() {
  const inputs = {};
  const parameters = {};
  if (st.clip) {
    parameters.clip = st.clip;
    parameters.time = st.time;
  }
  // a group is sent once a slider moved (before that the character's
  // defaults, or the clip, provide the input); with a clip playing, only
  // groups with a non-zero value override what the clip gives
  for (const g of st.groups) {
    if (!g.touched) continue;
    if (st.clip && !g.values.some((w) => w !== 0)) continue;
    inputs[g.input] = { shape: [g.values.length], data: g.values };
  }
  // the joint rows likewise: sent once moved; over a clip only when turned
  const jr = st.joints;
  if (jr && jr.touched && !(st.clip && !jr.rows.some((r) => r.angle !== 0))) {
    inputs.joint_rotations = { shape: [jr.rest.length / 4, 4], data: jointRotations() };
  }
  return {
    inputs,
    opts: {
      outputs: ['positions'],
      encoding: $('encoding').value === 'float32' ? undefined : $('encoding').value,
      skinning: $('skinning').value || undefined,
      parameters,
    },
  };
}

// Ask for the current state; resolves when it is drawn. Coalesces: while a
// request is in flight, later calls wait for one more request with the
// newest state.
function requestFrame() {
  if (st.inflight) { st.dirty = true; return st.inflight.then(() => (st.dirty ? requestFrame() : undefined)); }
  st.dirty = false;
  const { inputs, opts } = requestBody();
  const t0 = performance.now();
  st.inflight = client.infer(st.name, inputs, opts).then((out) => {
    const p = out.positions;
    if (!p || p.data.length !== st.nverts * 3) throw new Error(`positions: got ${p ? p.data.length : 0} values, mesh has ${st.nverts * 3}`);
    const attr = mesh.geometry.getAttribute('position');
    attr.array.set(p.data);
    st.positions = p.data; // the last answer (tests compare it)
    attr.needsUpdate = true;
    mesh.geometry.computeVertexNormals();
    if (st.needFraming) {
      mesh.geometry.computeBoundingBox();
      frameCamera(mesh.geometry.boundingBox);
      st.needFraming = false;
    }
    render();
    st.frames++;
    st.lastMs = performance.now() - t0;
    st.lastBytes = p.data.length * ($('encoding').value === 'float32' ? 4 : 2);
    status();
  }).catch((e) => { showError(e); throw e; }).finally(() => { st.inflight = null; });
  return st.inflight;
}

function status() {
  const m = st.meta || {};
  const p = m.parameters || {};
  $('status').textContent = [
    `character ${st.name}` + (p.model ? ` (model ${p.model.string_param || p.model})` : ''),
    `vertices  ${st.nverts}`,
    `clip      ${st.clip || '-'} @ ${st.time.toFixed(3)} s`,
    `frames    ${st.frames}`,
    `last      ${st.lastMs.toFixed(1)} ms, ${(st.lastBytes / 1024).toFixed(0)} KiB positions`,
  ].join('\n');
  $('timeval').textContent = `${st.time.toFixed(2)} s`;
}

// ---------------------------------------------------------------- playing
function currentClip() { return st.clips.find((c) => c.name === st.clip); }

let lastTick = 0;
async function tick(now) {
  if (!st.playing) return;
  const c = currentClip();
  if (c && !st.inflight) {
    const dt = lastTick ? (now - lastTick) / 1000 : 0;
    const dur = clipDuration(c);
    st.time = dur > 0 ? (st.time + dt) % dur : 0;
    $('time').value = dur > 0 ? st.time / dur : 0;
    lastTick = now;
    requestFrame().catch(() => { st.playing = false; });
  }
  requestAnimationFrame(tick);
}

$('play').addEventListener('click', () => {
  st.playing = !st.playing && !!st.clip;
  $('play').textContent = st.playing ? 'pause' : 'play';
  lastTick = 0;
  if (st.playing) requestAnimationFrame(tick);
});
$('time').addEventListener('input', () => {
  const c = currentClip();
  st.time = c ? Number($('time').value) * clipDuration(c) : 0;
  requestFrame();
});
$('clip').addEventListener('change', () => { st.clip = $('clip').value; st.time = 0; requestFrame(); });
$('character').addEventListener('change', () => select($('character').value).catch(showError));
$('skinning').addEventListener('change', () => requestFrame());
$('encoding').addEventListener('change', () => requestFrame());

// reflect st in the controls (after scripted changes)
function syncUI() {
  $('clip').value = st.clip;
  const c = currentClip();
  $('time').value = c && clipDuration(c) > 0 ? st.time / clipDuration(c) : 0;
  for (const g of st.groups) {
    $('morphs').querySelectorAll(`.slider[data-input="${g.input}"]`).forEach((d, i) => {
      d.querySelector('input').value = g.values[i];
      d.querySelector('span').textContent = g.values[i].toFixed(2);
    });
  }
  syncJointUI();
}

// ------------------------------------------------------------ scripting API
window.viewer = {
  client,
  state: st,
  select,
  jointRotations,
  // show({clip, time, weights, inputs, joints}): set the state, resolve once drawn
  async show(o = {}) {
    if (o.clip !== undefined) st.clip = o.clip;
    if (o.time !== undefined) st.time = o.time;
    const set = Object.assign({}, o.inputs || {}, o.weights ? { weights: o.weights } : {});
    for (const [name, v] of Object.entries(set)) {
      const g = st.groups.find((x) => x.input === name);
      if (!g) throw new Error(`${st.name} has no slider input ${name}`);
      g.values.set(v);
      g.touched = true;
    }
    if (o.joints) {
      if (!st.joints) throw new Error(`${st.name} has no joint_rotations input`);
      o.joints.forEach((x, k) => {
        const r = st.joints.rows[k];
        if (!r) throw new Error(`at most ${st.joints.rows.length} joint rows`);
        if (x.joint !== undefined) {
          r.joint = typeof x.joint === 'number' ? x.joint : st.joints.names.indexOf(x.joint);
          if (r.joint < 0 || r.joint >= st.joints.names.length) throw new Error(`no joint ${x.joint}`);
        }
        if (x.axis !== undefined) r.axis = x.axis;
        if (x.angle !== undefined) r.angle = Number(x.angle);
      });
      st.joints.touched = true;
    }
    syncUI();
    await requestFrame();
    return st.frames;
  },
};

async function main() {
  resize();
  render();
  try {
    const names = await loadCharacters();
    const want = new URLSearchParams(location.search).get('character');
    if (names.length) await select(want && names.includes(want) ? want : names[0]);
    window.viewer.ready = true;
  } catch (e) {
    showError(e);
    window.viewer.error = String(e.message || e);
  }
}
main();
