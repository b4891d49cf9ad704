// viewer.js — deformd's web viewer (served at /viewer/ by the daemon).
//
// DESIGN
// The page is a thin client: every vertex it draws was computed by deformd.
// It lists the servable characters (GET /v2/repository/index) and reads each
// model's metadata once (GET /v2/models/{first character}: kind, joints,
// clips, size) to group the picker by model and to choose what to open on:
// ?character=NAME, else the character with the richest skeleton (most
// joints whose names have no '$' — nodes importers add —, then clips, then
// vertices), so the page opens on a rigged character, not on a prop. No code
// depends on a model's kind: everything comes from the metadata.
//
// A character's metadata (GET /v2/models/{name}: inputs, morphs, controls,
// clips) builds the controls and its rest mesh (GET /v2/models/{name}/mesh:
// positions + triangles, once) the geometry; then each frame is one infer
// request through vendor/deformd.js (binary data extension, float32/float16/
// int16 as chosen) whose positions are copied into the geometry (scene.js
// draws it and keeps the camera on it). Clips play by asking the daemon to
// sample the clip at a time (request parameters "clip" and "time"); sliders
// send small vector inputs (morph "weights", rig "controls", any one-axis
// input of at most 64 values, whatever the model kind; they start at the
// input's default from the metadata); the "joints" section turns a few
// joints: each row picks a joint and an axis, and its angle is composed with
// the joint's rest local rotation (metadata default of joint_rotations:
// q = rest ⊗ axis-angle, x,y,z,w); the whole [J,4] joint_rotations is sent,
// defaults for the other joints. At most one request is in flight: a frame
// that arrives late is followed by the newest state (no queue); an answer
// for a character no longer shown is dropped.
//
// Two meshes (st.plan, from the metadata only, see planFor):
//   - a character whose answers carry the body it is on (an output
//     "body_positions" [Nb,3] beside "positions", e.g. a garment model) is
//     drawn with that body: each frame's one request asks for both outputs,
//     so body and garment always have the same shape and pose; the body's
//     triangles come from the /mesh of the model in the repository with Nb
//     vertices and the same joint names (the body served on its own), or,
//     without one, the body is drawn as points;
//   - a character with a "source_weights" [n] input (a retarget model)
//     whose controls are the morphs of another model with a "weights" [n]
//     input (its source rig) is drawn beside that source, driven by the
//     same sliders: each frame asks both (weights to the source,
//     source_weights to the target, the same values, always sent) and draws
//     both answers together.
// Sliders range over [0, 1] for "weights" and any "*_weights" input (morph
// and ARKit-style weights), [-2, 2] for "shape" (β, in standard deviations),
// [-1, 1] for the rest.
//
// Status bar (always on screen): connection state, frames per second drawn
// over the last 2 s ("idle" when none for 1.5 s), the last request's
// round-trip latency (the daemon's queue + compute time in its tooltip),
// the bytes of its answer and of its request (Content-Length / body size).
// Reachability: a request that fails without an HTTP answer (connection
// refused, no answer in REQUEST_TIMEOUT_MS) marks the daemon unreachable:
// the status bar turns red, a card covers the view, playing pauses its
// requests, and /v2/health/live is polled every RETRY_MS; when it answers
// the character list is read again and the current frame re-requested (a
// character the restarted daemon no longer serves is replaced by the
// default one). While reachable and idle the same endpoint is polled every
// HEARTBEAT_MS, so a daemon that stops while nobody touches the page shows.
//
// For tests and scripting, window.viewer exposes select(name) and
// show({clip, time, weights, inputs: {name: values}, joints: [{joint, axis,
// angle}], damping}) which resolve once the frame is drawn; jointRotations()
// is the [J,4] array the joint sliders send; state (state.positions: the
// shown character's last "positions"; state.parts: every drawn mesh's
// last positions), view (scene.js) and net.
import { View } from './scene.js';
import { DeformdClient } from './vendor/deformd.js';

const $ = (id) => document.getElementById(id);
const REQUEST_TIMEOUT_MS = 15000;
const HEARTBEAT_MS = 2000;
const RETRY_MS = 1000;
const MAX_MODELS_SCORED = 64; // metadata read at start for at most this many models
const JOINT_ROWS = 6;
const PART_COLORS = ['clay', 'blue']; // scene.js COLORS.parts, in words

// ---------------------------------------------------------------- network
class Unreachable extends Error {
  constructor(message) { super(message); this.name = 'Unreachable'; }
}
const isNetworkError = (e) => e instanceof Unreachable || (e instanceof TypeError && /fetch|network/i.test(e.message));

const net = { state: 'connecting', lastOk: 0, sent: NaN, recv: NaN };

function bodyBytes(b) {
  if (!b) return 0;
  if (typeof b === 'string') return new TextEncoder().encode(b).byteLength;
  return b.byteLength || 0;
}

// fetch for the client module: a timeout, reachability, and the sizes of
// the last infer request and answer
async function netFetch(url, opts = {}) {
  let r;
  try {
    r = await fetch(url, Object.assign({}, opts, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) }));
  } catch (e) {
    setReachable(false);
    throw new Unreachable(e.name === 'TimeoutError' ? `no answer in ${REQUEST_TIMEOUT_MS / 1000} s` : 'daemon unreachable');
  }
  setReachable(true);
  if (/\/infer$/.test(url)) { // summed over the requests of one frame (requestFrame resets)
    net.sent += bodyBytes(opts.body);
    const n = Number(r.headers.get('Content-Length'));
    net.recv += n > 0 ? n : NaN;
  }
  return r;
}

const client = new DeformdClient('', { fetch: netFetch });

let hbTimer = 0;
function scheduleHeartbeat(ms) {
  clearTimeout(hbTimer);
  hbTimer = setTimeout(heartbeat, ms);
}
async function heartbeat() {
  const idle = !st.inflight && performance.now() - net.lastOk >= HEARTBEAT_MS - 50;
  if (net.state !== 'connected' || idle) {
    try { await netFetch('/v2/health/live'); } catch (_) { /* state already set */ }
  }
  scheduleHeartbeat(net.state === 'connected' ? HEARTBEAT_MS : RETRY_MS);
}

function setReachable(ok) {
  if (ok) net.lastOk = performance.now();
  const next = ok ? 'connected' : 'unreachable';
  if (net.state === next) return;
  const was = net.state;
  net.state = next;
  $('offline').hidden = ok;
  $('offlinetext').textContent = `${location.host} is not answering.`;
  document.body.classList.toggle('offline', !ok);
  if (!ok) scheduleHeartbeat(RETRY_MS);
  renderStatus();
  if (ok && was === 'unreachable') reconnected();
}

let starting = null;
async function reconnected() {
  try {
    if (!window.viewer.ready) { await start(); return; }
    const names = await loadCharacters();
    if (names.includes(st.name)) {
      $('character').value = st.name;
      await requestFrame();
    } else if (names.length) {
      await select(defaultCharacter(names));
    }
  } catch (e) {
    if (!isNetworkError(e)) showError(e);
  }
}

// ------------------------------------------------------------------ state
const view = new View($('view'));
const up = new URLSearchParams(location.search).get('up');
if (up) view.setUp(up);

const st = {
  name: null, shown: null, meta: null, clips: [], nverts: 0, gen: 0,
  catalog: [], // [{name (model), characters: [...], meta}]
  groups: [], // slider groups: {input, names, values: Float32Array, def, lo, hi, touched}
  joints: null, // {names, rest: Float32Array(J*4), rows: [{joint, axis, angle (degrees)}], touched}
  clip: '', time: 0, playing: false,
  inflight: null, dirty: false, frames: 0, lastMs: 0, serverMs: NaN, frameTimes: [],
  refit: null, positions: null,
  plan: null, // what a frame asks and draws: see planFor
  parts: [], // per drawn mesh: its last positions
  damping: false, carried: null, // the garment kind's state, sent back (see carriedState)
};

function showError(e) {
  const msg = e ? String(e.message || e) : '';
  $('errortext').textContent = msg;
  $('error').hidden = !msg;
}
$('errorclose').addEventListener('click', () => showError(''));

function setLoading(text) {
  $('loading').hidden = !text;
  if (text) $('loadingtext').textContent = text;
}

function flatten(v) { return Array.isArray(v) ? v.flat(Infinity) : Array.from(v || []); }

// A list of the model's metadata (characters, joints, morphs, controls,
// shapes, clips): in its "deformd" extension object (KServe's parameters hold
// scalars only; daemons before it sent the lists in "parameters").
function paramList(meta, key) {
  const p = (meta && (meta.deformd || meta.parameters)) || {};
  let v = p[key];
  if (v && typeof v === 'object' && 'string_param' in v) v = v.string_param;
  if (typeof v === 'string') { try { v = JSON.parse(v); } catch (_) { v = v.split(','); } }
  return Array.isArray(v) ? v : [];
}
const itemName = (m) => String(typeof m === 'string' ? m : m && m.name);

function clipDuration(c) {
  if (c.duration != null) return Number(c.duration);
  if (Array.isArray(c.times) && c.times.length) return Number(c.times[c.times.length - 1]);
  return 1.0;
}

const fmtInt = (n) => Number(n).toLocaleString('en-US');
function fmtBytes(n) {
  if (!Number.isFinite(n)) return '–';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1048576).toFixed(2)} MiB`;
}

// ------------------------------------------------------------- characters
async function loadCharacters() {
  const idx = await client.index();
  const models = [];
  for (const e of Array.isArray(idx) ? idx : idx.models || []) {
    if (typeof e === 'string') { models.push({ name: e, characters: [e] }); continue; }
    if (e.state && e.state !== 'READY') continue;
    const cs = Array.isArray(e.characters) && e.characters.length ? e.characters.map(itemName) : [e.name];
    models.push({ name: e.name, characters: cs });
  }
  const metas = await Promise.all(models.map((m, i) => (i < MAX_MODELS_SCORED
    ? client.info(m.characters[0]).catch((e) => { if (isNetworkError(e)) throw e; return null; })
    : null)));
  models.forEach((m, i) => { m.meta = metas[i]; });
  st.catalog = models;
  const sel = $('character');
  sel.innerHTML = '';
  for (const m of models) {
    let parent = sel;
    if (models.length > 1) {
      parent = document.createElement('optgroup');
      const kind = m.meta && m.meta.parameters && m.meta.parameters.kind;
      parent.label = kind ? `${m.name} · ${kind}` : m.name;
      sel.appendChild(parent);
    }
    for (const c of m.characters) parent.appendChild(new Option(c, c));
  }
  if (st.name) sel.value = st.name;
  return models.flatMap((m) => m.characters);
}

// how much a model has to show: joints first (a character with a skeleton
// over a prop), then clips, then mesh size
function modelScore(meta) {
  if (!meta) return -1;
  const joints = paramList(meta, 'joints').map(itemName).filter((n) => !n.includes('$')).length;
  const clips = paramList(meta, 'clips').filter((c) => typeof c === 'string' || clipDuration(c) > 0).length;
  const verts = Number(meta.parameters && meta.parameters.vertices) || 0;
  return Math.min(joints, 200) * 10 + (clips ? 50 : 0) + Math.log10(1 + verts);
}

function defaultCharacter(names) {
  const want = new URLSearchParams(location.search).get('character');
  if (want && names.includes(want)) return want;
  let best = null;
  let bs = -Infinity;
  for (const m of st.catalog) {
    const s = modelScore(m.meta);
    if (s > bs && m.characters.length) { bs = s; best = m.characters[0]; }
  }
  return best || names[0];
}

async function select(name) {
  showError('');
  setPlaying(false);
  st.loading = name;
  $('character').value = name;
  setLoading(`Loading ${name}…`);
  try {
    const [meta, rest] = await Promise.all([client.info(name), client.mesh(name)]);
    if (st.loading !== name) return; // another character was picked meanwhile
    const plan = planFor(name, meta);
    const extra = plan.other ? await client.mesh(plan.other) : null;
    if (st.loading !== name) return;
    st.name = name;
    st.meta = meta;
    st.plan = plan;
    st.clips = paramList(meta, 'clips').map((c) => (typeof c === 'string' ? { name: c } : c));
    st.groups = sliderGroups(meta);
    for (const g of st.groups) g.always = g.input === plan.linked;
    st.joints = jointRig(meta);
    st.carried = null;
    buildMeshes(rest, extra);
    buildClipUI();
    buildMorphUI();
    buildJointUI();
    st.clip = st.clips.length ? st.clips[0].name : '';
    st.time = 0;
    $('clip').value = st.clip;
    syncTimeUI();
    charInfo();
    $('dampbox').hidden = !dampable(meta);
    st.refit = 'character';
    const q = new URLSearchParams(location.search);
    q.set('character', name);
    history.replaceState(null, '', `${location.pathname}?${q}`);
    await requestFrame();
    st.shown = name; // the character on screen (select() is done)
  } finally {
    if (st.loading === name) setLoading(null);
  }
}

// A /mesh answer -> {positions: Float32Array, indices}
function restMesh(rest) {
  const r = rest.mesh || rest;
  // triangles: {"indices": [...]} (with "triangles" the count), or "triangles": [[a,b,c],...]
  return {
    positions: Float32Array.from(flatten(r.positions)),
    indices: flatten(Array.isArray(r.indices) ? r.indices : Array.isArray(r.triangles) ? r.triangles : []),
  };
}

// What one frame asks and draws, from the metadata (see DESIGN):
//   requests: [{name, outputs, role: 'main' | 'source'}]
//   parts:    [{req, output, label, nverts}] in drawing (colour) order
//   other:    the character whose /mesh gives the other part's triangles
//   linked:   the slider input sent to both (the retarget pair)
//   layout:   'overlay' | 'row'
function planFor(name, meta) {
  const outs = meta.outputs || [];
  const vcount = (o) => { const s = (o && o.shape) || []; return s.length >= 2 ? Number(s[s.length - 2]) : 0; };
  const main = { name, outputs: ['positions'], role: 'main' };
  const nv = vcount(outs.find((o) => o.name === 'positions')) || Number(meta.parameters && meta.parameters.vertices) || 0;
  const self = { req: 0, output: 'positions', label: name, nverts: nv };
  const body = outs.find((o) => o.name === 'body_positions');
  if (body && vcount(body) > 0) {
    const nb = vcount(body);
    const joints = JSON.stringify(paramList(meta, 'joints').map(itemName));
    const m = st.catalog.find((c) => c.meta && c.characters.length && !c.characters.includes(name)
      && Number(c.meta.parameters && c.meta.parameters.vertices) === nb
      && JSON.stringify(paramList(c.meta, 'joints').map(itemName)) === joints);
    main.outputs.push('body_positions');
    return {
      requests: [main],
      parts: [{ req: 0, output: 'body_positions', label: m ? m.characters[0] : 'body', nverts: nb, points: !m }, self],
      other: m ? m.characters[0] : null,
      linked: null,
      layout: 'overlay',
    };
  }
  const sw = (meta.inputs || []).find((i) => i.name === 'source_weights');
  const n = sw ? (sw.shape || []).filter((d, k) => !(k === 0 && d === -1)) : [];
  if (n.length === 1) {
    const controls = JSON.stringify(paramList(meta, 'controls').map(itemName));
    const m = st.catalog.find((c) => c.meta && c.characters.length && !c.characters.includes(name)
      && (c.meta.inputs || []).some((i) => i.name === 'weights' && (i.shape || []).slice(-1)[0] === n[0])
      && JSON.stringify(paramList(c.meta, 'morphs').map(itemName)) === controls);
    if (m) {
      const src = m.characters[0];
      return {
        requests: [{ name: src, outputs: ['positions'], role: 'source' }, main],
        parts: [{ req: 0, output: 'positions', label: `${src} (source)`, nverts: Number(m.meta.parameters.vertices) || 0 },
          Object.assign(self, { req: 1, label: `${name} (target)` })],
        other: src,
        linked: 'source_weights',
        layout: 'row',
      };
    }
  }
  return { requests: [main], parts: [self], other: null, linked: null, layout: 'overlay' };
}

function buildMeshes(rest, extra) {
  const own = restMesh(rest);
  const parts = st.plan.parts.map((p) => {
    if (p.req === st.plan.requests.findIndex((r) => r.role === 'main') && p.output === 'positions') return own;
    if (p.points || !extra) return { positions: new Float32Array(p.nverts * 3), indices: [] }; // first answer fills it
    return restMesh(extra);
  });
  st.plan.parts.forEach((p, k) => { p.nverts = parts[k].positions.length / 3; });
  st.nverts = parts.reduce((n, p) => n + p.positions.length / 3, 0);
  st.parts = parts.map((p) => p.positions);
  st.gen++;
  view.setMeshes(parts, st.plan.layout);
}

function charInfo() {
  const p = (st.meta && st.meta.parameters) || {};
  const parts = [];
  if (p.kind) parts.push(`<b>${p.kind}</b>`);
  if (p.vertices != null) parts.push(`${fmtInt(p.vertices)} vertices`);
  if (p.triangles != null) parts.push(`${fmtInt(p.triangles)} triangles`);
  const n = (k, word) => { const l = paramList(st.meta, k).length; if (l) parts.push(`${l} ${word}${l === 1 ? '' : 's'}`); };
  n('joints', 'joint');
  n('morphs', 'morph');
  n('controls', 'control');
  n('clips', 'clip');
  if (p.model && p.model !== st.name) parts.push(`model ${p.model}`);
  $('charinfo').innerHTML = parts.join(' · ');
  const pl = st.plan;
  const drawn = $('partsinfo');
  drawn.hidden = pl.parts.length < 2;
  drawn.textContent = '';
  if (pl.parts.length < 2) return;
  drawn.append(pl.layout === 'row' ? 'Side by side, the same sliders: ' : 'Drawn together, one request: ');
  pl.parts.forEach((q, k) => {
    const sw = document.createElement('span');
    sw.className = `swatch ${PART_COLORS[k % PART_COLORS.length]}`;
    sw.setAttribute('aria-hidden', 'true');
    const what = pl.layout === 'overlay' && q.output !== 'positions' ? `${q.label} (${q.output}${q.points ? ', as points' : ''})` : q.label;
    drawn.append(k ? ' · ' : '', sw, ` ${what}`);
  });
}

function buildClipUI() {
  const sel = $('clip');
  sel.innerHTML = '';
  sel.add(new Option('(none: rest pose and sliders)', ''));
  for (const c of st.clips) sel.add(new Option(c.name, c.name));
  $('clipbox').hidden = !st.clips.length;
}

function syncTimeUI() {
  const c = currentClip();
  const dur = c ? clipDuration(c) : 0;
  $('time').value = dur > 0 ? st.time / dur : 0;
  $('time').disabled = !c;
  $('timeval').textContent = c ? `${st.time.toFixed(2)} / ${dur.toFixed(2)} s` : '–';
}

// One slider group per one-axis input of at most 64 values. Names come from
// the metadata list of the same length ("morphs" for weights, "shapes" for
// shape, "controls" for rig controls and a retarget's source_weights);
// ranges: see DESIGN.
function sliderRange(input) {
  if (input === 'weights' || /_weights$/.test(input)) return [0, 1];
  if (input === 'shape') return [-2, 2];
  return [-1, 1];
}

function sliderGroups(meta) {
  const groups = [];
  for (const i of meta.inputs || []) {
    if (i.name === 'state' && hasState(meta)) continue; // recurrent state, not a control
    const shape = (i.shape || []).filter((d, k) => !(k === 0 && d === -1));
    if (shape.length !== 1 || shape[0] < 1 || shape[0] > 64) continue;
    const n = shape[0];
    let names = [];
    const lists = i.name === 'weights' ? ['morphs'] : i.name === 'shape' ? ['shapes'] : ['controls', 'morphs'];
    for (const list of lists) {
      const l = paramList(meta, list).map(itemName);
      if (l.length === n) { names = l; break; }
    }
    if (names.length !== n) names = Array.from({ length: n }, (_, k) => `${i.name}[${k}]`);
    const [lo, hi] = sliderRange(i.name);
    const def = inputDefault(meta, i, n) || new Array(n).fill(0);
    groups.push({ input: i.name, names, def, values: Float32Array.from(def), lo, hi, touched: false });
  }
  return groups;
}

// An input's default from the metadata ("deformd": {"defaults": {name: [...]}},
// flat; daemons before it: the input's parameters.default), if it has n values.
function inputDefault(meta, i, n) {
  const ds = meta && meta.deformd && meta.deformd.defaults;
  const d = ds ? ds[i.name] : i.parameters && i.parameters.default;
  return Array.isArray(d) && d.length === n ? d.map(Number) : null;
}

const safeId = (s) => String(s).replace(/[^\w-]/g, '_');
const TITLES = { weights: 'Morph weights', shape: 'Shape (beta)' };
const title = (s) => TITLES[s] || String(s).replace(/_/g, ' ').replace(/^./, (c) => c.toUpperCase());

function buildMorphUI() {
  const box = $('morphs');
  box.innerHTML = '';
  $('morphbox').hidden = !st.groups.length;
  for (const g of st.groups) {
    const sec = document.createElement('section');
    const h = document.createElement('h2');
    h.textContent = title(g.input);
    sec.appendChild(h);
    g.names.forEach((m, i) => {
      const d = document.createElement('div');
      d.className = 'slider';
      d.dataset.input = g.input;
      const id = `in-${safeId(g.input)}-${i}`;
      d.innerHTML = `<label for="${id}"></label><input id="${id}" type="range" min="${g.lo}" max="${g.hi}" step="0.01"><output for="${id}"></output>`;
      const lab = d.querySelector('label');
      lab.textContent = m;
      lab.title = m;
      const inp = d.querySelector('input');
      inp.value = g.values[i];
      d.querySelector('output').textContent = g.values[i].toFixed(2);
      inp.addEventListener('input', () => {
        g.values[i] = Number(inp.value);
        g.touched = true;
        d.querySelector('output').textContent = Number(inp.value).toFixed(2);
        refresh();
      });
      sec.appendChild(d);
    });
    box.appendChild(sec);
  }
}

// ----------------------------------------------------------------- joints
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
  let names = paramList(meta, 'joints').map(itemName);
  if (names.length !== J) names = Array.from({ length: J }, (_, k) => `joint ${k}`);
  const def = inputDefault(meta, i, J * 4);
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
  $('jointbox').hidden = !jr;
  if (!jr) return;
  jr.rows.forEach((r, k) => {
    const d = document.createElement('div');
    d.className = 'slider joint';
    d.dataset.row = k;
    const n = k + 1;
    d.innerHTML = `<div class="jhead"><label class="sr" for="joint-${k}">Joint, row ${n}</label><select id="joint-${k}" class="jname"></select>`
      + `<label class="sr" for="axis-${k}">Axis, row ${n}</label><select id="axis-${k}" class="jaxis">`
      + '<option>x</option><option>y</option><option>z</option></select></div>'
      + `<div class="jangle"><label for="angle-${k}">angle</label><input id="angle-${k}" type="range" min="-180" max="180" step="1" value="0">`
      + `<output for="angle-${k}">0°</output></div>`;
    const js = d.querySelector('.jname');
    jr.names.forEach((nm, j) => js.add(new Option(nm, String(j))));
    js.value = String(r.joint);
    const ax = d.querySelector('.jaxis');
    ax.value = r.axis;
    const inp = d.querySelector('input');
    const changed = () => {
      r.joint = Number(js.value);
      r.axis = ax.value;
      r.angle = Number(inp.value);
      jr.touched = true;
      d.querySelector('output').textContent = `${r.angle}°`;
      refresh();
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
    d.querySelector('output').textContent = `${r.angle}°`;
  });
}

// ----------------------------------------------------------------- frames
// The character's recurrent state (an input and an output both named
// "state" of one shape, e.g. the garment kind's damping distances): with
// damping on, each answer's state goes out with the next frame, so the
// daemon damps the pose from frame to frame; it is dropped (the next frame
// starts undamped) on a seek, a clip or character change and Reset pose.
// The page carries the state itself rather than opening a daemon-side
// sequence (sequence_id / sequence_start / sequence_end, docs/http-api.md):
// a seek or a dropped frame then needs no sequence restart.
function hasState(meta) {
  const i = (meta.inputs || []).find((x) => x.name === 'state');
  const o = (meta.outputs || []).find((x) => x.name === 'state');
  return !!(i && o && JSON.stringify(i.shape) === JSON.stringify(o.shape));
}
// A retarget model's state only starts its marker solve (the answer is the
// same without it) and the page drives it by source weights: no checkbox.
function dampable(meta) {
  const p = meta.parameters || {};
  return hasState(meta) && p.kind !== 'retarget';
}
function carriedState() {
  if (!st.damping || !dampable(st.meta)) return null;
  return st.carried ? { inputs: { state: { shape: [st.carried.length], data: st.carried } }, output: 'state' } : { inputs: {}, output: 'state' };
}

// request k of the plan: {inputs, opts}
function requestBody(k = st.plan.requests.findIndex((r) => r.role === 'main')) {
  const req = st.plan.requests[k];
  const inputs = {};
  const parameters = {};
  const opts = {
    outputs: req.outputs.slice(),
    encoding: $('encoding').value === 'float32' ? undefined : $('encoding').value,
    skinning: $('skinning').value || undefined,
    parameters,
  };
  if (req.role === 'source') { // the linked sliders, as the source's morph weights
    const g = st.groups.find((x) => x.input === st.plan.linked);
    inputs.weights = { shape: [g.values.length], data: g.values };
    return { inputs, opts };
  }
  if (st.clip) {
    parameters.clip = st.clip;
    parameters.time = st.time;
  }
  // a group is sent once a slider moved (before that the character's
  // defaults, or the clip, provide the input); with a clip playing, only
  // groups with a non-zero value override what the clip gives; a group
  // linked to a source model is always sent (both get the same values)
  for (const g of st.groups) {
    if (!g.always) {
      if (!g.touched) continue;
      if (st.clip && !g.values.some((w) => w !== 0)) continue;
    }
    inputs[g.input] = { shape: [g.values.length], data: g.values };
  }
  // the joint rows likewise: sent once moved; over a clip only when turned
  const jr = st.joints;
  if (jr && jr.touched && !(st.clip && !jr.rows.some((r) => r.angle !== 0))) {
    inputs.joint_rotations = { shape: [jr.rest.length / 4, 4], data: jointRotations() };
  }
  const cs = carriedState();
  if (cs) {
    Object.assign(inputs, cs.inputs);
    opts.outputs.push(cs.output);
  }
  return { inputs, opts };
}

// Ask for the current state; resolves when it is drawn. Coalesces: while a
// request is in flight, later calls wait for one more request with the
// newest state.
function requestFrame() {
  if (!st.name) return Promise.resolve();
  if (st.inflight) {
    st.dirty = true;
    const again = () => (st.dirty ? requestFrame() : undefined);
    return st.inflight.then(again, again);
  }
  st.dirty = false;
  const plan = st.plan;
  const bodies = plan.requests.map((r, k) => requestBody(k));
  const gen = st.gen;
  const t0 = performance.now();
  net.sent = 0;
  net.recv = 0;
  st.inflight = Promise.all(plan.requests.map((r, k) => client.infer(r.name, bodies[k].inputs, bodies[k].opts))).then((outs) => {
    if (gen !== st.gen) return; // an answer for the previous character
    const got = plan.parts.map((q) => {
      const p = outs[q.req][q.output];
      if (!p || p.data.length !== q.nverts * 3) {
        throw new Error(`${plan.requests[q.req].name}: ${q.output}: got ${p ? p.data.length : 0} values, mesh has ${q.nverts * 3}`);
      }
      return p.data;
    });
    got.forEach((d, k) => view.setPositions(d, k));
    st.parts = got;
    const main = outs[plan.requests.findIndex((r) => r.role === 'main')];
    st.positions = main.positions.data; // the last answer (tests compare it)
    if (main.state && st.damping) st.carried = Float32Array.from(main.state.data);
    view.track(st.refit || 'follow');
    st.refit = null;
    view.render();
    const now = performance.now();
    st.frames++;
    st.lastMs = now - t0;
    st.frameTimes.push(now);
    if (st.frameTimes.length > 240) st.frameTimes.shift();
    st.serverMs = outs.reduce((ms, out) => {
      const rp = (out.$response && out.$response.parameters) || {};
      return ms + (rp.compute_us != null ? ((Number(rp.queue_us) || 0) + Number(rp.compute_us)) / 1000 : NaN);
    }, 0);
    st.io = { sent: net.sent, recv: net.recv };
    renderStatus();
  }).catch((e) => {
    if (!isNetworkError(e)) showError(e);
    throw e;
  }).finally(() => { st.inflight = null; });
  return st.inflight;
}

// requestFrame for event handlers: errors are shown, not thrown
function refresh() { requestFrame().catch(() => {}); }

function fps() {
  const t = st.frameTimes;
  const now = performance.now();
  if (t.length < 2 || now - t[t.length - 1] > 1500) return 0;
  let k = t.length - 1;
  while (k > 0 && t[k - 1] > now - 2000) k--;
  const n = t.length - 1 - k;
  return n > 0 ? (n * 1000) / (t[t.length - 1] - t[k]) : 0;
}

function renderStatus() {
  const s = $('status');
  s.dataset.state = net.state;
  $('st-conn-text').textContent = net.state === 'connected' ? 'connected'
    : net.state === 'unreachable' ? 'daemon unreachable — retrying' : 'connecting…';
  const names = st.plan && st.plan.parts.length > 1 ? st.plan.parts.map((q) => q.label.replace(/ \(.*/, '')).join(' + ') : st.name;
  $('st-char').textContent = st.name ? `${names} · ${fmtInt(st.nverts)} vertices` : '';
  const f = fps();
  $('st-fps').querySelector('.v').textContent = f > 0 ? f.toFixed(1) : 'idle';
  const lat = $('st-latency');
  lat.querySelector('.v').textContent = st.frames ? `${st.lastMs.toFixed(1)} ms` : '–';
  const nreq = st.plan ? st.plan.requests.length : 1;
  lat.title = (nreq > 1 ? `round trip of ${nreq} requests in parallel` : 'round trip')
    + (Number.isFinite(st.serverMs) ? `; the daemon's queue + compute${nreq > 1 ? ' (summed)' : ''}: ${st.serverMs.toFixed(2)} ms` : '');
  const io = st.io || {};
  $('st-bytes').querySelector('.v').textContent = fmtBytes(io.recv);
  $('st-bytes').querySelector('.v2').textContent = fmtBytes(io.sent);
  $('st-bytes').title = 'last answer ↓ / request ↑';
  $('st-frames').querySelector('.v').textContent = fmtInt(st.frames);
}
setInterval(renderStatus, 500);

// ---------------------------------------------------------------- playing
function currentClip() { return st.clips.find((c) => c.name === st.clip); }

function setPlaying(on) {
  st.playing = on && !!st.clip;
  $('play').classList.toggle('playing', st.playing);
  $('play').setAttribute('aria-label', st.playing ? 'Pause' : 'Play');
  lastTick = 0;
  if (st.playing) requestAnimationFrame(tick);
}

let lastTick = 0;
function tick(now) {
  if (!st.playing) return;
  const c = currentClip();
  if (c && !st.inflight && net.state === 'connected') {
    const dt = lastTick ? (now - lastTick) / 1000 : 0;
    const dur = clipDuration(c);
    st.time = dur > 0 ? (st.time + dt) % dur : 0;
    syncTimeUI();
    lastTick = now;
    requestFrame().catch((e) => { if (!isNetworkError(e)) setPlaying(false); });
  } else if (net.state !== 'connected') {
    lastTick = 0;
  }
  requestAnimationFrame(tick);
}

$('play').addEventListener('click', () => setPlaying(!st.playing));
$('time').addEventListener('input', () => {
  st.carried = null;
  const c = currentClip();
  st.time = c ? Number($('time').value) * clipDuration(c) : 0;
  syncTimeUI();
  refresh();
});
$('clip').addEventListener('change', () => {
  st.carried = null;
  st.clip = $('clip').value;
  st.time = 0;
  if (!st.clip) setPlaying(false);
  syncTimeUI();
  st.refit = 'pose';
  refresh();
});
$('character').addEventListener('change', () => select($('character').value).catch((e) => { if (!isNetworkError(e)) showError(e); }));
$('skinning').addEventListener('change', refresh);
$('encoding').addEventListener('change', refresh);
$('grid').addEventListener('click', () => {
  const on = $('grid').getAttribute('aria-pressed') !== 'true';
  $('grid').setAttribute('aria-pressed', String(on));
  view.setGrid(on);
});
$('fit').addEventListener('click', () => view.track('view'));
$('damping').addEventListener('change', () => {
  st.damping = $('damping').checked;
  st.carried = null;
  refresh();
});
$('resetpose').addEventListener('click', () => {
  st.carried = null;
  for (const g of st.groups) { g.values.set(g.def); g.touched = false; }
  if (st.joints) { for (const r of st.joints.rows) r.angle = 0; st.joints.touched = false; }
  syncUI();
  st.refit = 'pose';
  refresh();
});
document.addEventListener('keydown', (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey || /^(INPUT|SELECT|BUTTON|TEXTAREA)$/.test(e.target.tagName)) return;
  if (e.key === 'f' || e.key === 'F') view.track('view');
  else if (e.key === ' ') { e.preventDefault(); setPlaying(!st.playing); }
});

// reflect st in the controls (after scripted changes)
function syncUI() {
  $('clip').value = st.clip;
  $('damping').checked = st.damping;
  syncTimeUI();
  for (const g of st.groups) {
    $('morphs').querySelectorAll(`.slider[data-input="${g.input}"]`).forEach((d, i) => {
      d.querySelector('input').value = g.values[i];
      d.querySelector('output').textContent = g.values[i].toFixed(2);
    });
  }
  syncJointUI();
}

// ------------------------------------------------------------ scripting API
window.viewer = {
  client,
  state: st,
  view,
  net,
  select,
  jointRotations,
  // show({clip, time, weights, inputs, joints}): set the state, resolve once drawn
  async show(o = {}) {
    if (o.clip !== undefined && o.clip !== st.clip) { st.clip = o.clip; st.refit = 'pose'; st.carried = null; }
    if (o.time !== undefined) st.time = o.time;
    if (o.damping !== undefined) { st.damping = !!o.damping; st.carried = null; }
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

async function start() {
  if (starting) return starting;
  starting = (async () => {
    setLoading('Connecting to the daemon…');
    client.server().then((s) => { $('version').textContent = `${s.name || 'deformd'} ${s.version || ''}`; }).catch(() => {});
    const names = await loadCharacters();
    if (!names.length) {
      setLoading(null);
      showError('The daemon serves no character yet (its repository is empty or still loading).');
    } else {
      await select(defaultCharacter(names));
    }
    window.viewer.ready = true;
  })();
  try {
    await starting;
  } finally {
    starting = null;
  }
}

async function main() {
  renderStatus();
  scheduleHeartbeat(HEARTBEAT_MS);
  try {
    await start();
  } catch (e) {
    if (isNetworkError(e)) {
      setLoading(null); // the offline card shows; reconnected() starts again
      return;
    }
    setLoading(null);
    showError(e);
    window.viewer.error = String(e.message || e);
  }
}
main();
