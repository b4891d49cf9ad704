// viewer_png.cjs — screenshot analysis for tests/e2e/viewer_check.cjs.
//
// decodePng(buffer): the PNG files Chromium writes (8-bit greyscale, RGB,
// grey+alpha or RGBA, not interlaced) -> {width, height, rgba: Uint8Array},
// with node's zlib only. Anything else is refused with an error, never
// guessed at.
//
// meshStats(img, rect, kind): inside rect (the canvas, in image pixels) the
// pixels of a mesh — the viewer draws the first mesh in a warm clay colour
// and a second one (a garment on its body, a retarget target beside its
// source) in blue, on a neutral background, grid and shadow
// (server/www/scene.js COLORS), so a pixel of the first mesh (kind 'warm',
// the default) is one whose red exceeds its blue by WARM or more, and one of
// the second (kind 'cool') one whose blue exceeds its red by COOL or more —
// their fraction of the rect and their bounding box relative to the rect.
'use strict';
const zlib = require('zlib');

const WARM = 30;
const COOL = 40;

function decodePng(buf) {
  const sig = [137, 80, 78, 71, 13, 10, 26, 10];
  if (buf.length < 8 || sig.some((b, i) => buf[i] !== b)) throw new Error('not a PNG file');
  let off = 8;
  let ihdr = null;
  const idat = [];
  while (off + 8 <= buf.length) {
    const len = buf.readUInt32BE(off);
    const type = buf.toString('latin1', off + 4, off + 8);
    const body = buf.subarray(off + 8, off + 8 + len);
    if (type === 'IHDR') {
      ihdr = { width: body.readUInt32BE(0), height: body.readUInt32BE(4), depth: body[8], color: body[9], interlace: body[12] };
    } else if (type === 'IDAT') {
      idat.push(body);
    } else if (type === 'IEND') {
      break;
    }
    off += 12 + len;
  }
  if (!ihdr) throw new Error('PNG without IHDR');
  const channels = { 0: 1, 2: 3, 4: 2, 6: 4 }[ihdr.color];
  if (ihdr.depth !== 8 || !channels || ihdr.interlace) {
    throw new Error(`unsupported PNG: depth ${ihdr.depth}, colour type ${ihdr.color}, interlace ${ihdr.interlace}`);
  }
  const { width: w, height: h } = ihdr;
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = w * channels;
  if (raw.length !== h * (stride + 1)) throw new Error(`PNG data: ${raw.length} bytes for ${w}x${h}x${channels}`);
  const px = new Uint8Array(h * stride);
  for (let y = 0; y < h; y++) {
    const f = raw[y * (stride + 1)];
    const src = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    const row = px.subarray(y * stride, (y + 1) * stride);
    const prev = y ? px.subarray((y - 1) * stride, y * stride) : new Uint8Array(stride);
    const C = channels;
    switch (f) {
      case 0: row.set(src); break;
      case 1: for (let x = 0; x < stride; x++) row[x] = (src[x] + (x >= C ? row[x - C] : 0)) & 255; break;
      case 2: for (let x = 0; x < stride; x++) row[x] = (src[x] + prev[x]) & 255; break;
      case 3: for (let x = 0; x < stride; x++) row[x] = (src[x] + (((x >= C ? row[x - C] : 0) + prev[x]) >> 1)) & 255; break;
      case 4:
        for (let x = 0; x < stride; x++) {
          const l = x >= C ? row[x - C] : 0, u = prev[x], ul = x >= C ? prev[x - C] : 0;
          const p = l + u - ul, pa = Math.abs(p - l), pb = Math.abs(p - u), pc = Math.abs(p - ul);
          row[x] = (src[x] + (pa <= pb && pa <= pc ? l : pb <= pc ? u : ul)) & 255;
        }
        break;
      default: throw new Error(`PNG filter ${f} on row ${y}`);
    }
  }
  const rgba = new Uint8Array(w * h * 4);
  for (let i = 0, j = 0; i < w * h; i++, j += channels) {
    const grey = channels < 3;
    rgba[4 * i] = px[j];
    rgba[4 * i + 1] = grey ? px[j] : px[j + 1];
    rgba[4 * i + 2] = grey ? px[j] : px[j + 2];
    rgba[4 * i + 3] = channels === 2 ? px[j + 1] : channels === 4 ? px[j + 3] : 255;
  }
  return { width: w, height: h, rgba };
}

// rect: {x, y, width, height} in image pixels (rounded inwards)
function meshStats(img, rect, kind = 'warm') {
  if (kind !== 'warm' && kind !== 'cool') throw new Error(`meshStats: kind ${kind}`);
  const cool = kind === 'cool';
  const x0 = Math.ceil(rect.x), y0 = Math.ceil(rect.y);
  const x1 = Math.min(img.width, Math.floor(rect.x + rect.width));
  const y1 = Math.min(img.height, Math.floor(rect.y + rect.height));
  const w = x1 - x0, h = y1 - y0;
  let n = 0, bx0 = Infinity, by0 = Infinity, bx1 = -1, by1 = -1;
  for (let y = y0; y < y1; y++) {
    for (let x = x0; x < x1; x++) {
      const i = (y * img.width + x) * 4;
      if (cool ? img.rgba[i + 2] - img.rgba[i] >= COOL : img.rgba[i] - img.rgba[i + 2] >= WARM) {
        n++;
        if (x < bx0) bx0 = x;
        if (x > bx1) bx1 = x;
        if (y < by0) by0 = y;
        if (y > by1) by1 = y;
      }
    }
  }
  if (!n) return { w, h, frac: 0, box: null };
  return { w, h, frac: n / (w * h), box: { left: bx0 - x0, top: by0 - y0, right: x1 - 1 - bx1, bottom: y1 - 1 - by1, width: bx1 - bx0 + 1, height: by1 - by0 + 1 } };
}

// The mesh is "in frame": present (at least minFrac of the canvas), its
// bounding box at least margin pixels from every edge of the canvas, and
// framed (spanning at least minSpan of the canvas's width or height).
function inFrame(s, { minFrac = 0.02, margin = 3, minSpan = 0.3 } = {}) {
  if (!s.box) return { ok: false, why: 'no mesh pixels' };
  const b = s.box;
  const why = [];
  if (s.frac < minFrac) why.push(`mesh covers ${(100 * s.frac).toFixed(2)}% < ${100 * minFrac}%`);
  for (const e of ['left', 'top', 'right', 'bottom']) if (b[e] < margin) why.push(`touches the ${e} edge (${b[e]} px)`);
  if (b.width < minSpan * s.w && b.height < minSpan * s.h) why.push(`too small: ${b.width}x${b.height} in ${s.w}x${s.h}`);
  return { ok: why.length === 0, why: why.join(', ') };
}

// fraction of pixels (inside rect) whose grey level changed by more than 8
function changedFraction(a, b, rect) {
  if (a.width !== b.width || a.height !== b.height) return 1;
  const x0 = Math.ceil(rect.x), y0 = Math.ceil(rect.y);
  const x1 = Math.floor(rect.x + rect.width), y1 = Math.floor(rect.y + rect.height);
  let n = 0;
  for (let y = y0; y < y1; y++) {
    for (let x = x0; x < x1; x++) {
      const i = (y * a.width + x) * 4;
      const ga = a.rgba[i] + a.rgba[i + 1] + a.rgba[i + 2], gb = b.rgba[i] + b.rgba[i + 1] + b.rgba[i + 2];
      if (Math.abs(ga - gb) > 24) n++;
    }
  }
  return n / ((x1 - x0) * (y1 - y0));
}

module.exports = { decodePng, meshStats, inFrame, changedFraction, WARM, COOL };
