// viewer_check.cjs — driven by tests/e2e/viewer.sh (not run on its own).
//
// Headless Chromium (Debian's, through playwright-core) loads the viewer the
// daemon serves at /viewer/ and checks it as a user sees it, in screenshots
// (decoded by viewer_png.cjs; the mesh is the warm pixels of the canvas):
//   - it opens on the rigged character (wuson), not on the first listed
//     (morphcube), with the mesh in frame: present, its bounding box clear of
//     every canvas edge, spanning at least 30 % of the canvas;
//   - the status bar is on screen and not covered, with "connected", frames
//     per second, the request's latency and bytes; every control is labelled;
//   - a clip's frames differ, play streams frames (fps shown while playing);
//   - the time slider goes back to 0 when the character changes;
//   - on another character (morphcube, a tiny rigapprox model) and after a
//     pose change (a joint slider turning the root) the mesh is in frame
//     again; sliders change the canvas; a joint slider sends rest ⊗
//     axis-angle and draws what a plain HTTP infer of that joint_rotations
//     gives, bit for bit;
//   - two meshes (the first in clay: warm pixels; the second in blue: blue
//     pixels): the garment model "shirt" draws its body and the shirt from
//     one request, both in frame, the shirt on the body; a shape slider, the
//     clip and damping (the state sent back) change both, equal to plain
//     HTTP infers bit for bit; the retarget model "ict_to_t1" is drawn
//     beside its source "ict_face", driven by the same 0..1 sliders (two
//     requests), jawOpen moving both faces as HTTP gives them;
//   - at 420 px wide: nothing overflows sideways, the mesh (and the retarget
//     pair) is in frame, the status bar on screen;
//   - with the daemon stopped (STOP_CMD) the page says "daemon unreachable"
//     in the status bar and over the view; restarted (RESTART_CMD), it
//     recovers by itself and draws again.
// In the same page the browser module (vendor/deformd.js) evaluates the
// README's wuson pose, binary and JSON, equal to curl's answer bit for bit;
// its float16/int16 decodings equal the Python client's (PY_DIR/python_*.json,
// written by viewer.sh). With OTHER_ORIGIN, a page from that origin (the
// daemon's --cors-origin) calls the daemon through the module. Screenshots go
// to OUTDIR/viewer-*.png. Prints "ok NAME"/"FAIL NAME".
//
// usage: STOP_CMD=... RESTART_CMD=... PY_DIR=... node viewer_check.cjs URL OUTDIR
//        POSE_REQUEST.json CURL_ANSWER.json PLAYWRIGHT_DIR [OTHER_ORIGIN]
'use strict';
const path = require('path');
const fs = require('fs');
const { execFileSync } = require('child_process');
const { decodePng, meshStats, inFrame, changedFraction } = require('./viewer_png.cjs');
const [url, outDir, poseFile, curlFile, pwDir, otherOrigin] = process.argv.slice(2);
const { chromium } = require(path.join(pwDir, 'playwright-core'));

const DESKTOP = { width: 1280, height: 800 };
const NARROW = { width: 420, height: 860 };

let fails = 0;
function check(name, cond, detail) {
  console.log((cond ? 'ok ' : 'FAIL ') + name + (cond || detail === undefined ? '' : ' ' + detail));
  if (!cond) fails++;
}

// A screenshot of the page (saved when file is given), decoded, with the
// canvas's rectangle and the mesh statistics inside it.
async function shot(page, file) {
  const buf = await page.screenshot(file ? { path: path.join(outDir, file) } : {});
  const img = decodePng(buf);
  const rect = await page.$eval('#view canvas', (c) => {
    const r = c.getBoundingClientRect();
    return { x: r.x, y: r.y, width: r.width, height: r.height };
  });
  const mesh = meshStats(img, rect);
  return { img, rect, mesh, frame: inFrame(mesh) };
}

const boxText = (s) => (s.mesh.box ? `${(100 * s.mesh.frac).toFixed(1)}% of ${s.mesh.w}x${s.mesh.h}, margins l${s.mesh.box.left} t${s.mesh.box.top} r${s.mesh.box.right} b${s.mesh.box.bottom}` : 'no mesh');

function checkInFrame(name, s) {
  check(name, s.frame.ok, `${s.frame.why} (${boxText(s)})`);
  console.log(`${name}: mesh ${boxText(s)}`);
}

// The status bar: inside the viewport, not covered (the element at its
// centre and near both ends is the bar), and its text.
async function statusBar(page) {
  return page.evaluate(() => {
    const s = document.getElementById('status');
    const r = s.getBoundingClientRect();
    const vw = document.documentElement.clientWidth, vh = document.documentElement.clientHeight;
    const inside = r.width > 0 && r.height > 0 && r.left >= 0 && r.top >= 0 && r.right <= vw + 0.5 && r.bottom <= vh + 0.5;
    const on = (x, y) => { const e = document.elementFromPoint(x, y); return !!e && s.contains(e); };
    const cy = r.top + r.height / 2;
    const uncovered = inside && on(r.left + 4, cy) && on(r.left + r.width / 2, cy) && on(r.right - 4, cy);
    const vis = getComputedStyle(s);
    return {
      inside, uncovered, visible: vis.visibility !== 'hidden' && vis.display !== 'none' && Number(vis.opacity) > 0.5,
      text: s.innerText.replace(/\s+/g, ' ').trim(), state: s.dataset.state, rect: [r.left, r.top, r.width, r.height], vw, vh,
    };
  });
}

function checkStatus(name, sb) {
  const t = sb.text;
  const ok = sb.inside && sb.uncovered && sb.visible && /connected/.test(t) && sb.state === 'connected'
    && /fps \S+/.test(t) && /latency \d+(\.\d+)? ms/.test(t) && /↓ \d+(\.\d+)? (B|KiB|MiB) ↑ \d+(\.\d+)? (B|KiB|MiB)/.test(t);
  check(name, ok, JSON.stringify(sb));
}

// The second (blue) mesh of a shot: {mesh, frame} like shot()'s first.
function coolShot(s, opts = { minSpan: 0.15 }) {
  const mesh = meshStats(s.img, s.rect, 'cool');
  return { img: s.img, rect: s.rect, mesh, frame: inFrame(mesh, opts) };
}

// the canvas rectangle (image pixels) of the second mesh's box
function boxRect(s, c) {
  const b = c.mesh.box;
  return { x: Math.ceil(s.rect.x) + b.left, y: Math.ceil(s.rect.y) + b.top, width: b.width, height: b.height };
}

function maxDiff(a, b) {
  if (!a || !b || a.length !== b.length) return Infinity;
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
  return d;
}
const sameValues = (a, b) => !!a && !!b && a.length === b.length && a.length > 0 && a.every((v, i) => v === b[i]);

// a plain HTTP infer (node's fetch, JSON): {output name: Float32Array}
async function inferJson(name, inputs, outputs, parameters) {
  const body = {
    inputs: inputs.map((i) => ({ name: i.name, datatype: 'FP32', shape: i.shape, data: Array.from(i.data) })),
    outputs: outputs.map((n) => ({ name: n })),
  };
  if (parameters) body.parameters = parameters;
  const r = await fetch(`${url}/v2/models/${name}/infer`, { method: 'POST', body: JSON.stringify(body) });
  const j = await r.json();
  if (!r.ok) throw new Error(`${name}: HTTP ${r.status}: ${JSON.stringify(j)}`);
  const out = {};
  for (const o of j.outputs) out[o.name] = Float32Array.from(o.data.flat(Infinity));
  return out;
}

const waitShown = (page, name) => page.waitForFunction((n) => window.viewer.state.shown === n && !window.viewer.state.inflight, name, { timeout: 30000 });

(async () => {
  const userDir = fs.mkdtempSync(path.join(require('os').tmpdir(), 'df-chromium-'));
  // a fresh --user-data-dir (playwright passes it from the first argument)
  const browser = await chromium.launchPersistentContext(userDir, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    viewport: DESKTOP,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--use-angle=swiftshader', '--enable-unsafe-swiftshader'],
  });
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    await page.goto(url + '/viewer/', { waitUntil: 'load' });
    await page.waitForFunction(() => window.viewer && (window.viewer.ready || window.viewer.error), null, { timeout: 60000 });
    const err0 = await page.evaluate(() => window.viewer.error || null);
    check('viewer-loads', !err0, err0);
    const options = await page.$$eval('#character option', (os) => os.map((o) => o.value));
    check('viewer-lists-characters', ['wuson', 'wuson_dqs', 'morphcube', 'shirt', 'body', 'ict_face', 'ict_to_t1']
      .every((n) => options.includes(n)), JSON.stringify(options));
    // the garment model's sizes, from its metadata (node's fetch)
    const gmeta = await (async () => {
      const m = await (await fetch(url + '/v2/models/shirt')).json();
      const dim = (list, n) => (list.find((x) => x.name === n) || { shape: [] }).shape;
      return { shirt: dim(m.outputs, 'positions')[1], body: dim(m.outputs, 'body_positions')[1],
        shapes: dim(m.inputs, 'shape')[1], state: dim(m.inputs, 'state')[1] };
    })();

    // ---------------------------------------------------------- first view
    // the repository index lists morphcube first; the viewer must open on
    // the character with a skeleton
    const opened = await page.evaluate(() => window.viewer.state.shown);
    check('viewer-opens-on-rigged-character', opened === 'wuson' && options[0] !== 'wuson',
      `opened ${opened}, listed ${JSON.stringify(options)}`);
    const d0 = await shot(page, 'viewer-desktop-open.png');
    checkInFrame('viewer-desktop-mesh-in-frame', d0);
    checkStatus('viewer-desktop-status-bar', await statusBar(page));
    const unlabelled = await page.evaluate(() => {
      const bad = [];
      for (const el of document.querySelectorAll('input, select, button, textarea')) {
        if (el.closest('[hidden]')) continue;
        const named = (el.getAttribute('aria-label') || '').trim()
          || Array.from(el.labels || []).map((l) => l.textContent.trim()).join('')
          || (el.getAttribute('aria-labelledby') || '').split(/\s+/).map((id) => (document.getElementById(id) || {}).textContent || '').join('').trim()
          || (el.tagName === 'BUTTON' ? el.textContent.trim() : '');
        if (!named) bad.push(el.id || el.outerHTML.slice(0, 60));
      }
      return { bad, n: document.querySelectorAll('input, select, button').length };
    });
    check('viewer-controls-labelled', unlabelled.bad.length === 0 && unlabelled.n >= 10, JSON.stringify(unlabelled));

    // ------------------------------------------------------------- a clip
    await page.selectOption('#character', 'wuson');
    await waitShown(page, 'wuson');
    const clips = await page.$$eval('#clip option', (os) => os.map((o) => o.value));
    check('viewer-shows-clips', clips.includes('Wuson_Walk'), JSON.stringify(clips));
    await page.selectOption('#clip', 'Wuson_Walk');
    await page.evaluate(() => window.viewer.show({ clip: 'Wuson_Walk', time: 0.3 }));
    const a = await shot(page, 'viewer-wuson-walk-0.3s.png');
    await page.evaluate(() => window.viewer.show({ clip: 'Wuson_Walk', time: 1.5 }));
    const b = await shot(page, 'viewer-wuson-walk-1.5s.png');
    check('viewer-character-visible', a.mesh.frac > 0.01 && b.mesh.frac > 0.01, `mesh ${a.mesh.frac} ${b.mesh.frac}`);
    const ch = changedFraction(a.img, b.img, a.rect);
    check('viewer-canvas-changed-between-frames', ch > 0.001, `changed ${ch}`);
    console.log(`frames: mesh ${(100 * a.mesh.frac).toFixed(2)}% / ${(100 * b.mesh.frac).toFixed(2)}% of the canvas, ${(100 * ch).toFixed(2)}% of pixels changed`);
    { // the decoder reads what the canvas holds: mesh fraction from the page's own pixels
      const inPage = await page.evaluate((warm) => {
        const src = document.querySelector('#view canvas');
        const c = document.createElement('canvas');
        c.width = src.width; c.height = src.height;
        const g = c.getContext('2d');
        g.drawImage(src, 0, 0);
        const d = g.getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i] - d[i + 2] >= warm) n++;
        return n / (d.length / 4);
      }, 30);
      check('viewer-screenshot-decoder-agrees-with-canvas', Math.abs(inPage - b.mesh.frac) < 0.01 && inPage > 0.01,
        `canvas ${inPage}, screenshot ${b.mesh.frac}`);
    }

    // play streams frames (one request in flight, time advancing); the
    // status bar shows a frame rate while it plays
    const f0 = await page.evaluate(() => ({ n: window.viewer.state.frames, t: window.viewer.state.time }));
    await page.click('#play');
    await page.waitForFunction((n0) => window.viewer.state.frames >= n0 + 4, f0.n, { timeout: 30000 });
    await page.waitForFunction(() => /fps \d+\.\d/.test(document.getElementById('status').innerText.replace(/\s+/g, ' ')), null, { timeout: 5000 })
      .catch(() => {});
    const fpsText = await page.$eval('#st-fps', (e) => e.innerText.replace(/\s+/g, ' '));
    await page.click('#play');
    await page.waitForFunction(() => !window.viewer.state.inflight, null, { timeout: 30000 });
    const f1 = await page.evaluate(() => ({ n: window.viewer.state.frames, t: window.viewer.state.time, playing: window.viewer.state.playing }));
    check('viewer-play-button-streams-frames', f1.n >= f0.n + 4 && f1.t !== f0.t && !f1.playing, JSON.stringify([f0, f1]));
    check('viewer-status-fps-while-playing', /^fps \d+\.\d$/.test(fpsText) && parseFloat(fpsText.slice(4)) > 0, fpsText);

    // the time slider goes back to 0 when the character changes (through
    // the UI: drag the slider, then pick another character)
    await page.$eval('#time', (el) => { el.value = '0.5'; el.dispatchEvent(new Event('input', { bubbles: true })); });
    await page.waitForFunction(() => !window.viewer.state.inflight && window.viewer.state.time > 1, null, { timeout: 30000 });
    const t0 = await page.evaluate(() => ({ v: document.getElementById('time').value, t: window.viewer.state.time }));
    await page.selectOption('#character', 'wuson_dqs');
    await waitShown(page, 'wuson_dqs');
    const t1 = await page.evaluate(() => ({
      v: Number(document.getElementById('time').value), t: window.viewer.state.time,
      label: document.getElementById('timeval').textContent, clip: document.getElementById('clip').value,
      first: window.viewer.state.clips[0].name,
    }));
    check('viewer-time-slider-reset-on-character-change',
      Number(t0.v) === 0.5 && t0.t > 1 && t1.v === 0 && t1.t === 0 && /^0\.00 /.test(t1.label) && t1.clip === t1.first,
      JSON.stringify([t0, t1]));

    // ----------------------------------------------- other characters: refit
    await page.selectOption('#character', 'morphcube');
    await waitShown(page, 'morphcube');
    const c0 = await shot(page, 'viewer-morphcube.png');
    checkInFrame('viewer-morphcube-in-frame', c0);
    await page.evaluate(() => window.viewer.show({ clip: '', weights: [1.0, 0.0] }));
    const c1 = await shot(page);
    check('viewer-morph-weights-change-canvas', changedFraction(c0.img, c1.img, c0.rect) > 0.001 && c1.mesh.frac > 0.01);

    // a model of another kind (rigapprox): its "controls" get sliders too
    await page.selectOption('#character', 'tinyra');
    await waitShown(page, 'tinyra');
    const nctl = await page.$$eval('#morphs .slider[data-input="controls"]', (d) => d.length);
    await page.evaluate(() => window.viewer.show({ inputs: { controls: [-1, -1, -1, -1, -1, -1, -1, -1] } }));
    const r0 = await shot(page);
    await page.evaluate(() => window.viewer.show({ inputs: { controls: [1, 1, 1, 1, 1, 1, 1, 1] } }));
    const r1 = await shot(page, 'viewer-tinyra.png');
    const rch = changedFraction(r0.img, r1.img, r0.rect);
    check('viewer-rigapprox-control-sliders', nctl === 8 && r1.mesh.frac > 0.01 && rch > 0.0005,
      `sliders ${nctl}, mesh ${r1.mesh.frac}, changed ${rch}`);
    checkInFrame('viewer-rigapprox-in-frame', r1);

    // ------------------------------------------ a body wearing a garment
    // shirt (a garment model): every frame is ONE request asking for the
    // shirt's positions and its body's body_positions, drawn together (the
    // body in clay, the shirt in blue), both in frame; the shape sliders
    // (β, -2..2) and the clip drive both; the positions on screen equal a
    // plain HTTP infer of the same shape, clip and time, bit for bit.
    await page.selectOption('#character', 'shirt');
    await waitShown(page, 'shirt');
    await page.evaluate(() => window.viewer.show({ clip: '01_01', time: 4.0 }));
    const g0 = await shot(page, 'viewer-shirt.png');
    checkInFrame('viewer-garment-body-in-frame', g0);
    const g0c = coolShot(g0);
    checkInFrame('viewer-garment-shirt-in-frame', g0c);
    { // the shirt is on the body: its box inside the body's, in the upper half
      const b = g0.mesh.box, s = g0c.mesh.box;
      const inside = b && s && s.left >= b.left && s.right >= b.right && s.top >= b.top && s.bottom >= b.bottom
        && s.top + s.height / 2 < b.top + b.height / 2;
      check('viewer-garment-shirt-on-body', inside, `body ${boxText(g0)}; shirt ${boxText(g0c)}`);
    }
    const gs = await page.evaluate(() => {
      const v = window.viewer.state;
      return {
        requests: v.plan.requests.map((r) => ({ name: r.name, outputs: r.outputs })),
        parts: v.parts.map((p) => p.length),
        meshes: window.viewer.view.meshes.length,
        sliders: Array.from(document.querySelectorAll('#morphs .slider[data-input="shape"] input')).map((i) => [i.id, i.min, i.max]),
        pos: Array.from(v.positions), body: Array.from(v.parts[0]),
      };
    });
    check('viewer-garment-one-request-two-meshes', gs.requests.length === 1 && gs.requests[0].name === 'shirt'
      && gs.requests[0].outputs.includes('positions') && gs.requests[0].outputs.includes('body_positions')
      && gs.meshes === 2 && gs.parts[0] === gmeta.body * 3 && gs.parts[1] === gmeta.shirt * 3,
      JSON.stringify({ requests: gs.requests, parts: gs.parts, meshes: gs.meshes, want: gmeta }));
    check('viewer-shape-sliders-range', gs.sliders.length === gmeta.shapes && gs.sliders.every((x) => x[1] === '-2' && x[2] === '2'),
      JSON.stringify(gs.sliders));
    // a shape slider moved through the page
    let nf0 = await page.evaluate(() => window.viewer.state.frames);
    await page.$eval('#in-shape-1', (el) => { el.value = '1.5'; el.dispatchEvent(new Event('input', { bubbles: true })); });
    await page.waitForFunction((n0) => window.viewer.state.frames > n0 && !window.viewer.state.inflight, nf0, { timeout: 30000 });
    const g1 = await shot(page, 'viewer-shirt-shape.png');
    const g1v = await page.evaluate(() => ({ pos: Array.from(window.viewer.state.positions), body: Array.from(window.viewer.state.parts[0]) }));
    const shape = Array.from({ length: gmeta.shapes }, (_, k) => (k === 1 ? 1.5 : 0));
    const gref = await inferJson('shirt', [{ name: 'shape', shape: [shape.length], data: shape }],
      ['positions', 'body_positions'], { clip: '01_01', time: 4.0 });
    const gmoved = maxDiff(g1v.pos, gs.pos), bmoved = maxDiff(g1v.body, gs.body);
    check('viewer-garment-shape-slider-moves-shirt-and-body', gmoved > 0.01 && bmoved > 0.01
      && sameValues(g1v.pos, gref.positions) && sameValues(g1v.body, gref.body_positions)
      && changedFraction(g0.img, g1.img, g0.rect) > 0.001,
      `shirt moved ${gmoved}, body moved ${bmoved}, equal to HTTP: ${sameValues(g1v.pos, gref.positions)} / ${sameValues(g1v.body, gref.body_positions)}`);
    console.log(`garment: body ${boxText(g0)}; shirt ${boxText(g0c)}; shape[1] = 1.5 moved the shirt ${gmoved.toFixed(4)} m, the body ${bmoved.toFixed(4)} m`);
    checkInFrame('viewer-garment-shirt-in-frame-after-shape', coolShot(g1));
    // the clip drives both: another time, another pose of body and shirt
    await page.evaluate(() => window.viewer.show({ time: 9.0 }));
    const g2v = await page.evaluate(() => ({ pos: Array.from(window.viewer.state.positions), body: Array.from(window.viewer.state.parts[0]) }));
    check('viewer-garment-clip-moves-both', maxDiff(g2v.pos, g1v.pos) > 0.01 && maxDiff(g2v.body, g1v.body) > 0.01,
      `shirt ${maxDiff(g2v.pos, g1v.pos)}, body ${maxDiff(g2v.body, g1v.body)}`);
    // damping: with it on, the first frame is undamped and each next frame
    // sends the previous answer's state; the page draws what HTTP gives for
    // that state, which differs from the undamped frame
    await page.evaluate(() => window.viewer.show({ damping: true, time: 4.0 }));
    const dm0 = await page.evaluate(() => ({ pos: Array.from(window.viewer.state.positions), state: Array.from(window.viewer.state.carried || []) }));
    await page.evaluate(() => window.viewer.show({ time: 9.0 }));
    const dm1 = await page.evaluate(() => Array.from(window.viewer.state.positions));
    await page.evaluate(() => window.viewer.show({ damping: false }));
    const dref = dm0.state.length !== gmeta.state ? {} : await inferJson('shirt', [{ name: 'shape', shape: [shape.length], data: shape },
      { name: 'state', shape: [dm0.state.length], data: dm0.state }], ['positions'], { clip: '01_01', time: 9.0 });
    check('viewer-garment-damping-sends-state', dm0.state.length === gmeta.state && sameValues(dm0.pos, g1v.pos)
      && sameValues(dm1, dref.positions) && maxDiff(dm1, g2v.pos) > 1e-4,
      `state ${dm0.state.length}/${gmeta.state}, first frame undamped ${sameValues(dm0.pos, g1v.pos)}, damped equals HTTP ${sameValues(dm1, dref.positions)}, damped vs undamped ${maxDiff(dm1, g2v.pos)}`);
    checkStatus('viewer-garment-status-bar', await statusBar(page));

    // --------------------------------------- retarget: source beside target
    // ict_to_t1 (a retarget model) is drawn beside its source rig ict_face:
    // the source in clay on the left, the target in blue on the right, both
    // in frame; the source_weights sliders range 0..1; each frame asks both
    // models for the same weights, and moving jawOpen through the page moves
    // both faces, each equal to a plain HTTP infer, bit for bit.
    await page.selectOption('#character', 'ict_to_t1');
    await waitShown(page, 'ict_to_t1');
    const rt0 = await shot(page, 'viewer-retarget-side-by-side.png');
    const rt0c = coolShot(rt0);
    checkInFrame('viewer-retarget-source-in-frame', rt0);
    checkInFrame('viewer-retarget-target-in-frame', rt0c);
    check('viewer-retarget-side-by-side', rt0.mesh.box && rt0c.mesh.box && rt0.mesh.w - 1 - rt0.mesh.box.right < rt0c.mesh.box.left,
      `source ${boxText(rt0)}; target ${boxText(rt0c)}`);
    const fs0 = await page.evaluate(() => {
      const v = window.viewer.state;
      const sl = Array.from(document.querySelectorAll('#morphs .slider[data-input="source_weights"]'));
      return {
        requests: v.plan.requests.map((r) => r.name),
        names: sl.map((d) => d.querySelector('label').textContent),
        ranges: sl.map((d) => [d.querySelector('input').min, d.querySelector('input').max]),
        src: Array.from(v.parts[0]), tgt: Array.from(v.parts[1]), pos: Array.from(v.positions),
      };
    });
    const jaw = fs0.names.indexOf('jawOpen');
    check('viewer-retarget-two-requests-weights-0-1', fs0.requests.join() === 'ict_face,ict_to_t1' && fs0.names.length === 55
      && jaw >= 0 && fs0.ranges.every((r) => r[0] === '0' && r[1] === '1') && sameValues(fs0.tgt, fs0.pos),
      JSON.stringify({ requests: fs0.requests, n: fs0.names.length, jaw, ranges: fs0.ranges.slice(0, 3) }));
    nf0 = await page.evaluate(() => window.viewer.state.frames);
    await page.$eval(`#in-source_weights-${jaw}`, (el) => { el.value = '1'; el.dispatchEvent(new Event('input', { bubbles: true })); });
    await page.waitForFunction((n0) => window.viewer.state.frames > n0 && !window.viewer.state.inflight, nf0, { timeout: 30000 });
    const rt1 = await shot(page, 'viewer-retarget-jaw-open.png');
    const fs1 = await page.evaluate(() => ({ src: Array.from(window.viewer.state.parts[0]), tgt: Array.from(window.viewer.state.parts[1]) }));
    const w = Array.from({ length: 55 }, (_, k) => (k === jaw ? 1 : 0));
    const sref = await inferJson('ict_face', [{ name: 'weights', shape: [55], data: w }], ['positions']);
    const tref = await inferJson('ict_to_t1', [{ name: 'source_weights', shape: [55], data: w }], ['positions']);
    const smoved = maxDiff(fs1.src, fs0.src), tmoved = maxDiff(fs1.tgt, fs0.tgt);
    const tch = changedFraction(rt0.img, rt1.img, boxRect(rt0, rt0c));
    check('viewer-retarget-slider-moves-target', smoved > 0.5 && tmoved > 0.5 && sameValues(fs1.src, sref.positions)
      && sameValues(fs1.tgt, tref.positions) && tch > 0.001,
      `source moved ${smoved}, target ${tmoved}, equal to HTTP ${sameValues(fs1.src, sref.positions)} / ${sameValues(fs1.tgt, tref.positions)}, target's pixels changed ${tch}`);
    console.log(`retarget: source ${boxText(rt0)}; target ${boxText(rt0c)}; jawOpen = 1 moved the source ${smoved.toFixed(3)}, the target ${tmoved.toFixed(3)} (cm), ${(100 * tch).toFixed(2)}% of the target's pixels changed`);

    // joint sliders on the rigged wuson: moving one (through the UI) turns
    // the joint about its axis after its rest local rotation; the viewer's
    // joint_rotations equal that quaternion product computed here from the
    // metadata default, and its positions equal a plain HTTP infer (node's
    // fetch, JSON) with the same joint_rotations, bit for bit. Row 0 is the
    // root: turned 90° about z the character stands on its head, taller than
    // the view it was fitted to, and must be in frame again.
    await page.selectOption('#character', 'wuson');
    await waitShown(page, 'wuson');
    await page.selectOption('#clip', '');
    await page.waitForFunction(() => !window.viewer.state.inflight && window.viewer.state.clip === '', null, { timeout: 30000 });
    const nrows = await page.$$eval('#joints .slider.joint', (d) => d.length);
    const jrest = await page.evaluate(() => Array.from(window.viewer.state.positions));
    const j0 = await shot(page);
    await page.selectOption('#axis-0', 'z');
    await page.waitForFunction(() => !window.viewer.state.inflight, null, { timeout: 30000 });
    const nf = await page.evaluate(() => window.viewer.state.frames);
    await page.$eval('#joints .slider.joint[data-row="0"] input', (el) => {
      el.value = '90';
      el.dispatchEvent(new Event('input', { bubbles: true }));
    });
    await page.waitForFunction((n0) => window.viewer.state.frames > n0 && !window.viewer.state.inflight, nf, { timeout: 30000 });
    const j1 = await shot(page, 'viewer-wuson-joint-slider.png');
    const jch = changedFraction(j0.img, j1.img, j0.rect);
    check('viewer-joint-slider-changes-canvas', nrows >= 1 && nrows <= 6 && j1.mesh.frac > 0.01 && jch > 0.001,
      `rows ${nrows}, mesh ${j1.mesh.frac}, changed ${jch}`);
    checkInFrame('viewer-pose-change-in-frame', j1);
    const jv = await page.evaluate(() => ({
      q: Array.from(window.viewer.jointRotations()),
      pos: Array.from(window.viewer.state.positions),
      row: window.viewer.state.joints.rows[0],
    }));
    const meta = await (await fetch(url + '/v2/models/wuson')).json();
    const jin = meta.inputs.find((i) => i.name === 'joint_rotations');
    const qdef = meta.deformd.defaults.joint_rotations;
    const J = jin.shape[1];
    const want = Float32Array.from(qdef);
    { // rest ⊗ (axis z, 90°): Hamilton product, x,y,z,w
      const j = jv.row.joint * 4, [x1, y1, z1, w1] = qdef.slice(j, j + 4);
      const [x2, y2, z2, w2] = [0, 0, Math.SQRT1_2, Math.SQRT1_2];
      want.set([w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2, w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2, w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2], j);
    }
    const qerr = Math.max(...jv.q.map((v, k) => Math.abs(v - want[k])));
    check('viewer-joint-rotation-is-rest-times-axis-angle',
      jv.row.axis === 'z' && jv.row.angle === 90 && qdef.length === J * 4 && jv.q.length === J * 4 && qerr <= 1e-6,
      `row ${JSON.stringify(jv.row)}, ${jv.q.length} vs ${J * 4} values, max diff ${qerr}`);
    const ans = await (await fetch(url + '/v2/models/wuson/infer', {
      method: 'POST',
      body: JSON.stringify({ inputs: [{ name: 'joint_rotations', datatype: 'FP32', shape: [J, 4], data: jv.q }],
        outputs: [{ name: 'positions' }] }),
    })).json();
    const ref2 = Float32Array.from(ans.outputs.find((o) => o.name === 'positions').data.flat(Infinity));
    const same = ref2.length === jv.pos.length && ref2.every((v, k) => v === jv.pos[k]);
    let moved = 0;
    for (let k = 0; k < jrest.length && k < jv.pos.length; k++) moved = Math.max(moved, Math.abs(jv.pos[k] - jrest[k]));
    check('viewer-joint-slider-positions-equal-http-infer', same && moved > 1e-3,
      `${jv.pos.length} vs ${ref2.length} values, moved ${moved}`);
    console.log(`joint slider: row 0 = ${meta.deformd.joints[jv.row.joint]} z 90°, ${(100 * jch).toFixed(2)}% of pixels changed, max vertex move ${moved.toFixed(4)}`);

    // ---------------------------------------------------- the browser module
    // equals curl for the same pose, binary and JSON
    const pose = JSON.parse(fs.readFileSync(poseFile, 'utf8')).inputs[0];
    const curl = JSON.parse(fs.readFileSync(curlFile, 'utf8')).outputs.find((o) => o.name === 'positions');
    const ref = Float32Array.from(curl.data.flat(Infinity));
    for (const binary of [true, false]) {
      const got = await page.evaluate(async ({ pose, binary }) => {
        const m = await import('./vendor/deformd.js');
        const c = new m.DeformdClient('');
        const r = await c.infer('wuson', { joint_rotations: { shape: pose.shape, data: pose.data } },
          { outputs: ['positions'], binary });
        return { shape: r.positions.shape, data: Array.from(r.positions.data) };
      }, { pose, binary });
      const g = Float32Array.from(got.data);
      let eq = g.length === ref.length && JSON.stringify(got.shape) === JSON.stringify(curl.shape);
      let maxd = 0;
      for (let i = 0; eq && i < g.length; i++) {
        maxd = Math.max(maxd, Math.abs(g[i] - ref[i]));
        if (g[i] !== ref[i]) eq = false;
      }
      check(`browser-module-${binary ? 'binary' : 'json'}-equals-curl`, eq, `shape ${got.shape} vs ${curl.shape}, max diff ${maxd}`);
    }
    // compact encodings decoded by the browser module == by the Python client
    for (const encoding of ['float16', 'int16']) {
      const got = await page.evaluate(async ({ pose, encoding }) => {
        const m = await import('./vendor/deformd.js');
        const r = await new m.DeformdClient('').infer('wuson', { joint_rotations: { shape: pose.shape, data: pose.data } },
          { outputs: ['positions'], encoding });
        return Array.from(r.positions.data);
      }, { pose, encoding });
      const py = JSON.parse(fs.readFileSync(path.join(process.env.PY_DIR, `python_${encoding}.json`), 'utf8'));
      const br = Float32Array.from(got);
      check(`browser-module-${encoding}-equals-python-client`, py.length === br.length && py.length > 0 && br.every((v, i) => v === Math.fround(py[i])),
        `${br.length} vs ${py.length} values`);
    }
    if (otherOrigin) {
      const p2 = await browser.newPage();
      await p2.goto(otherOrigin + '/index.html');
      const got = await p2.evaluate(async ({ pose, url }) => {
        const m = await import('./deformd.js');
        const r = await new m.DeformdClient(url).infer('wuson', { joint_rotations: { shape: pose.shape, data: pose.data } },
          { outputs: ['positions'] });
        return Array.from(r.positions.data);
      }, { pose, url });
      const g = Float32Array.from(got);
      check('browser-module-cross-origin-cors-equals-curl', g.length === ref.length && g.every((v, i) => v === ref[i]));
      await p2.close();
    }
    check('viewer-no-page-errors', errors.length === 0, JSON.stringify(errors.slice(0, 5)));

    // ------------------------------------------------------- 420 px wide
    // (back to the rest pose first, with the page's button)
    const nr = await page.evaluate(() => window.viewer.state.frames);
    await page.click('#resetpose');
    await page.waitForFunction((n0) => window.viewer.state.frames > n0 && !window.viewer.state.inflight, nr, { timeout: 30000 });
    await page.setViewportSize(NARROW);
    await page.waitForFunction(() => { // the drawing buffer follows the canvas's new size
      const c = document.querySelector('#view canvas');
      return c.width === Math.round(c.getBoundingClientRect().width * devicePixelRatio);
    }, null, { timeout: 10000 });
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    const n0 = await shot(page, 'viewer-narrow-wuson.png');
    checkInFrame('viewer-narrow-mesh-in-frame', n0);
    checkStatus('viewer-narrow-status-bar', await statusBar(page));
    const overflow = await page.evaluate(() => {
      const vw = document.documentElement.clientWidth;
      const wide = [];
      for (const el of document.querySelectorAll('#app *')) {
        const r = el.getBoundingClientRect();
        if (r.width && (r.right > vw + 0.5 || r.left < -0.5) && !el.closest('.sr')) wide.push(`${el.tagName}#${el.id}.${el.className} ${r.left.toFixed(0)}..${r.right.toFixed(0)}`);
      }
      const sel = document.getElementById('character').getBoundingClientRect();
      const cv = document.querySelector('#view canvas').getBoundingClientRect();
      return { vw, scroll: document.documentElement.scrollWidth, wide: wide.slice(0, 5), selectOnScreen: sel.top >= 0 && sel.bottom <= innerHeight,
        selectWidth: sel.width, canvas: [cv.width, cv.height] };
    });
    // nothing wider than the screen; the view spans the width (at least 200
    // px high) and the character picker is on screen at a usable width
    check('viewer-narrow-layout', overflow.vw === NARROW.width && overflow.scroll <= NARROW.width && !overflow.wide.length
      && overflow.canvas[0] >= 0.95 * NARROW.width && overflow.canvas[1] >= 200 && overflow.selectOnScreen && overflow.selectWidth >= 200,
      JSON.stringify(overflow));
    await page.selectOption('#character', 'morphcube');
    await waitShown(page, 'morphcube');
    const nm = await shot(page, 'viewer-narrow-morphcube.png');
    checkInFrame('viewer-narrow-morphcube-in-frame', nm);
    { // the camera is refitted on a character change: morphcube after wuson
      // looks as morphcube opened directly (a fresh page, ?character=)
      const p3 = await browser.newPage({ viewport: NARROW });
      await p3.setViewportSize(NARROW);
      await p3.goto(url + '/viewer/?character=morphcube', { waitUntil: 'load' });
      await p3.waitForFunction(() => window.viewer && window.viewer.state.shown === 'morphcube' && !window.viewer.state.inflight, null, { timeout: 60000 });
      const fresh = await shot(p3);
      await p3.close();
      const diff = changedFraction(nm.img, fresh.img, nm.rect);
      console.log(`character change: ${(100 * diff).toFixed(3)}% of the canvas differs from a fresh page`);
      check('viewer-character-change-refits-camera', fresh.frame.ok && diff < 0.005,
        `${(100 * diff).toFixed(2)}% of the canvas differs from a fresh page on the character (${boxText(fresh)})`);
    }
    // the retarget pair at 420 px: both faces in frame, side by side
    await page.selectOption('#character', 'ict_to_t1');
    await waitShown(page, 'ict_to_t1');
    const np = await shot(page, 'viewer-narrow-retarget.png');
    const npc = coolShot(np);
    checkInFrame('viewer-narrow-retarget-source-in-frame', np);
    checkInFrame('viewer-narrow-retarget-target-in-frame', npc);
    check('viewer-narrow-retarget-side-by-side', np.mesh.box && npc.mesh.box && np.mesh.w - 1 - np.mesh.box.right < npc.mesh.box.left,
      `source ${boxText(np)}; target ${boxText(npc)}`);
    await page.selectOption('#character', 'wuson');
    await waitShown(page, 'wuson');

    // ------------------------------------------- the daemon stops and comes back
    const beforeStop = await page.evaluate(() => window.viewer.state.frames);
    execFileSync(process.env.STOP_CMD, { stdio: 'inherit' });
    let down = true;
    await page.waitForFunction(() => document.getElementById('status').dataset.state === 'unreachable', null, { timeout: 10000 })
      .catch(() => { down = false; });
    const sbDown = await statusBar(page);
    const card = await page.evaluate(() => {
      const c = document.getElementById('offline');
      const r = c.getBoundingClientRect();
      const v = document.getElementById('view').getBoundingClientRect();
      return { shown: !c.hidden && r.width > 0 && r.left >= v.left && r.right <= v.right && r.top >= v.top && r.bottom <= v.bottom, text: c.innerText };
    });
    await shot(page, 'viewer-narrow-daemon-unreachable.png');
    check('viewer-daemon-unreachable-shown', down && sbDown.inside && sbDown.uncovered && /daemon unreachable/.test(sbDown.text)
      && card.shown && /unreachable/i.test(card.text), JSON.stringify({ down, sbDown, card }));
    execFileSync(process.env.RESTART_CMD, { stdio: 'inherit' });
    let back = true;
    await page.waitForFunction((n0) => document.getElementById('status').dataset.state === 'connected'
      && window.viewer.state.frames > n0 && !window.viewer.state.inflight, beforeStop, { timeout: 15000 }).catch(() => { back = false; });
    const sbBack = await statusBar(page);
    const cardGone = await page.evaluate(() => document.getElementById('offline').hidden);
    check('viewer-recovers-when-daemon-back', back && cardGone && /connected/.test(sbBack.text), JSON.stringify({ back, cardGone, sbBack }));
    const pageErrors = errors.filter((e) => !/Failed to load resource|ERR_CONNECTION_REFUSED/.test(e));
    check('viewer-no-page-errors-while-daemon-down', pageErrors.length === 0, JSON.stringify(pageErrors.slice(0, 5)));
  } catch (e) {
    check('viewer-run', false, String(e && e.stack || e));
  } finally {
    await browser.close();
    fs.rmSync(userDir, { recursive: true, force: true });
  }
  process.exit(fails ? 1 : 0);
})();
