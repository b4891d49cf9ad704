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
//   - at 420 px wide: nothing overflows sideways, the mesh is in frame, the
//     status bar on screen;
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
    check('viewer-lists-characters', ['wuson', 'wuson_dqs', 'morphcube'].every((n) => options.includes(n)), JSON.stringify(options));

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
    const qdef = jin.parameters.default;
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
    console.log(`joint slider: row 0 = ${meta.parameters.joints[jv.row.joint]} z 90°, ${(100 * jch).toFixed(2)}% of pixels changed, max vertex move ${moved.toFixed(4)}`);

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
