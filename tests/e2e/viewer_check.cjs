// viewer_check.cjs — driven by tests/e2e/viewer.sh (not run on its own).
//
// Headless Chromium (Debian's, through playwright-core) loads the viewer the
// daemon serves at /viewer/, picks a character in the UI, shows two frames of
// a clip and checks that the canvas shows the character (enough non-background
// pixels) and that it changed between the frames; saves screenshots. Then,
// in the same page, the browser module (vendor/deformd.js) evaluates the
// README's wuson pose, binary and JSON, and the result must equal curl's
// answer for the same request bit for bit. A joint slider moved on wuson
// changes the canvas, sends rest ⊗ axis-angle and draws what a plain HTTP
// infer of that joint_rotations gives. Prints "ok NAME"/"FAIL NAME".
//
// With OTHER_ORIGIN, a page from that origin (the daemon's --cors-origin)
// calls the daemon through the module: CORS preflight and the exposed
// Inference-Header-Content-Length header must let the binary answer through.
//
// usage: node viewer_check.cjs URL OUTDIR POSE_REQUEST.json CURL_ANSWER.json PLAYWRIGHT_DIR [OTHER_ORIGIN]
'use strict';
const path = require('path');
const fs = require('fs');
const [url, outDir, poseFile, curlFile, pwDir, otherOrigin] = process.argv.slice(2);
const { chromium } = require(path.join(pwDir, 'playwright-core'));

let fails = 0;
function check(name, cond, detail) {
  console.log((cond ? 'ok ' : 'FAIL ') + name + (cond || detail === undefined ? '' : ' ' + detail));
  if (!cond) fails++;
}

// Canvas statistics computed in the page: fraction of pixels that are not
// the background colour, and a downsampled grey image for frame differences.
async function canvasStats(page) {
  return page.evaluate(() => {
    const src = document.querySelector('#view canvas');
    const c = document.createElement('canvas');
    c.width = src.width; c.height = src.height;
    const g = c.getContext('2d');
    g.drawImage(src, 0, 0);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    const bg = [d[0], d[1], d[2]]; // a corner is background (camera frames the mesh)
    let fg = 0;
    const grey = [];
    for (let i = 0; i < d.length; i += 4) {
      const diff = Math.abs(d[i] - bg[0]) + Math.abs(d[i + 1] - bg[1]) + Math.abs(d[i + 2] - bg[2]);
      if (diff > 24) fg++;
      grey.push((d[i] + d[i + 1] + d[i + 2]) / 3);
    }
    return { w: c.width, h: c.height, fg: fg / (d.length / 4), grey };
  });
}

function changedFraction(a, b) {
  let n = 0;
  for (let i = 0; i < a.grey.length; i++) if (Math.abs(a.grey[i] - b.grey[i]) > 8) n++;
  return n / a.grey.length;
}

(async () => {
  const userDir = fs.mkdtempSync(path.join(require('os').tmpdir(), 'df-chromium-'));
  // a fresh --user-data-dir (playwright passes it from the first argument)
  const browser = await chromium.launchPersistentContext(userDir, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    viewport: { width: 960, height: 640 },
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

    // pick a character through the UI, as a user would
    await page.selectOption('#character', 'wuson');
    await page.waitForFunction(() => window.viewer.state.shown === 'wuson', null, { timeout: 30000 });
    const clips = await page.$$eval('#clip option', (os) => os.map((o) => o.value));
    check('viewer-shows-clips', clips.includes('Wuson_Walk'), JSON.stringify(clips));

    // play two frames of the walk
    await page.selectOption('#clip', 'Wuson_Walk');
    await page.evaluate(() => window.viewer.show({ clip: 'Wuson_Walk', time: 0.3 }));
    const a = await canvasStats(page);
    await page.screenshot({ path: path.join(outDir, 'viewer-wuson-walk-0.3s.png') });
    await page.evaluate(() => window.viewer.show({ clip: 'Wuson_Walk', time: 1.5 }));
    const b = await canvasStats(page);
    await page.screenshot({ path: path.join(outDir, 'viewer-wuson-walk-1.5s.png') });
    check('viewer-character-visible', a.fg > 0.01 && b.fg > 0.01, `foreground ${a.fg.toFixed(4)} ${b.fg.toFixed(4)}`);
    const ch = changedFraction(a, b);
    check('viewer-canvas-changed-between-frames', ch > 0.001, `changed ${ch}`);
    console.log(`frames: foreground ${(100 * a.fg).toFixed(2)}% / ${(100 * b.fg).toFixed(2)}% of the canvas, ${(100 * ch).toFixed(2)}% of pixels changed`);

    // the play button streams frames (one request in flight, time advancing)
    const f0 = await page.evaluate(() => ({ n: window.viewer.state.frames, t: window.viewer.state.time }));
    await page.click('#play');
    await page.waitForFunction((n0) => window.viewer.state.frames >= n0 + 3, f0.n, { timeout: 30000 });
    await page.click('#play');
    await page.waitForFunction(() => !window.viewer.state.inflight, null, { timeout: 30000 });
    const f1 = await page.evaluate(() => ({ n: window.viewer.state.frames, t: window.viewer.state.time, playing: window.viewer.state.playing }));
    check('viewer-play-button-streams-frames', f1.n >= f0.n + 3 && f1.t !== f0.t && !f1.playing, JSON.stringify([f0, f1]));

    // the morph cube with its sliders
    await page.selectOption('#character', 'morphcube');
    await page.waitForFunction(() => window.viewer.state.shown === 'morphcube', null, { timeout: 30000 });
    const c0 = await canvasStats(page);
    await page.evaluate(() => window.viewer.show({ clip: '', weights: [1.0, 0.0] }));
    const c1 = await canvasStats(page);
    await page.screenshot({ path: path.join(outDir, 'viewer-morphcube.png') });
    check('viewer-morph-weights-change-canvas', changedFraction(c0, c1) > 0.001 && c1.fg > 0.01);

    // a model of another kind (rigapprox): its "controls" get sliders too
    await page.selectOption('#character', 'tinyra');
    await page.waitForFunction(() => window.viewer.state.shown === 'tinyra', null, { timeout: 30000 });
    const nctl = await page.$$eval('#morphs .slider[data-input="controls"]', (d) => d.length);
    await page.evaluate(() => window.viewer.show({ inputs: { controls: [-1, -1, -1, -1, -1, -1, -1, -1] } }));
    const r0 = await canvasStats(page);
    await page.evaluate(() => window.viewer.show({ inputs: { controls: [1, 1, 1, 1, 1, 1, 1, 1] } }));
    const r1 = await canvasStats(page);
    await page.screenshot({ path: path.join(outDir, 'viewer-tinyra.png') });
    const rch = changedFraction(r0, r1);
    check('viewer-rigapprox-control-sliders', nctl === 8 && r1.fg > 0.01 && rch > 0.0005,
      `sliders ${nctl}, foreground ${r1.fg}, changed ${rch}`);

    // joint sliders on the rigged wuson: moving one (through the UI) turns
    // the joint about its axis after its rest local rotation; the viewer's
    // joint_rotations equal that quaternion product computed here from the
    // metadata default, and its positions equal a plain HTTP infer (node's
    // fetch, JSON) with the same joint_rotations, bit for bit.
    await page.selectOption('#character', 'wuson');
    await page.waitForFunction(() => window.viewer.state.shown === 'wuson', null, { timeout: 30000 });
    await page.evaluate(() => window.viewer.show({ clip: '', time: 0 }));
    const nrows = await page.$$eval('#joints .slider.joint', (d) => d.length);
    const jrest = await page.evaluate(() => Array.from(window.viewer.state.positions));
    const j0 = await canvasStats(page);
    const nf = await page.evaluate(() => window.viewer.state.frames);
    await page.$eval('#joints .slider.joint[data-row="0"] input', (el) => {
      el.value = '60';
      el.dispatchEvent(new Event('input', { bubbles: true }));
    });
    await page.waitForFunction((n0) => window.viewer.state.frames > n0 && !window.viewer.state.inflight, nf, { timeout: 30000 });
    const j1 = await canvasStats(page);
    await page.screenshot({ path: path.join(outDir, 'viewer-wuson-joint-slider.png') });
    const jch = changedFraction(j0, j1);
    check('viewer-joint-slider-changes-canvas', nrows >= 1 && nrows <= 6 && j1.fg > 0.01 && jch > 0.001,
      `rows ${nrows}, foreground ${j1.fg}, changed ${jch}`);
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
    { // rest ⊗ (axis x, 60°), Hamilton product written out
      const j = jv.row.joint * 4, [x, y, z, w] = qdef.slice(j, j + 4);
      const s = Math.sin(Math.PI / 6), c = Math.cos(Math.PI / 6);
      want.set([w * s + x * c, y * c + z * s, z * c - y * s, w * c - x * s], j);
    }
    const qerr = Math.max(...jv.q.map((v, k) => Math.abs(v - want[k])));
    check('viewer-joint-rotation-is-rest-times-axis-angle',
      jv.row.axis === 'x' && jv.row.angle === 60 && qdef.length === J * 4 && jv.q.length === J * 4 && qerr <= 1e-6,
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
    console.log(`joint slider: row 0 = ${meta.parameters.joints[jv.row.joint]} x 60°, ${(100 * jch).toFixed(2)}% of pixels changed, max vertex move ${moved.toFixed(4)}`);

    // the browser module equals curl for the same pose, binary and JSON
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
      let same = g.length === ref.length && JSON.stringify(got.shape) === JSON.stringify(curl.shape);
      let maxd = 0;
      for (let i = 0; same && i < g.length; i++) {
        maxd = Math.max(maxd, Math.abs(g[i] - ref[i]));
        if (g[i] !== ref[i]) same = false;
      }
      check(`browser-module-${binary ? 'binary' : 'json'}-equals-curl`, same, `shape ${got.shape} vs ${curl.shape}, max diff ${maxd}`);
    }
    // compact encodings decoded by the browser module, saved for viewer.sh to
    // compare with the Python client's decoding of the same answers
    for (const encoding of ['float16', 'int16']) {
      const got = await page.evaluate(async ({ pose, encoding }) => {
        const m = await import('./vendor/deformd.js');
        const r = await new m.DeformdClient('').infer('wuson', { joint_rotations: { shape: pose.shape, data: pose.data } },
          { outputs: ['positions'], encoding });
        return Array.from(r.positions.data);
      }, { pose, encoding });
      fs.writeFileSync(path.join(path.dirname(curlFile), `browser_${encoding}.json`), JSON.stringify(got));
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
  } catch (e) {
    check('viewer-run', false, String(e && e.stack || e));
  } finally {
    await browser.close();
    fs.rmSync(userDir, { recursive: true, force: true });
  }
  process.exit(fails ? 1 : 0);
})();
