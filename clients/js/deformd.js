// deformd.js — browser (and Node ≥ 18) ES module client for deformd's HTTP API.
//
// DESIGN
// deformd speaks the KServe v2 inference protocol. This module wraps it with
// `fetch` and typed arrays only (no dependencies): requests go out either as
// plain JSON or with the binary-data extension (a JSON header of
// `Inference-Header-Content-Length` bytes followed by raw little-endian
// float32 tensors), and binary outputs come back as Float32Array views (no
// copy for float32; float16 and int16 — quantised in the model's bounding
// box, scale/offset in the output's "deformd" object — are decoded to Float32Array).
// A tensor is `{shape: number[], data: Float32Array}`. Inputs may also be
// given as a plain (nested) array, a Float32Array (shape from the metadata
// is then the caller's job: pass {shape, data}).
//
//   import { DeformdClient } from './deformd.js';
//   const c = new DeformdClient('http://127.0.0.1:8000');
//   const out = await c.infer('morphcube', { weights: [1.0, 0.5] });
//   out.positions.data  // Float32Array, out.positions.shape = [N, 3]
//
// Errors: a non-2xx answer throws DeformdError with .status and the server's
// message ({"error": "..."}).

export class DeformdError extends Error {
  constructor(message, status) {
    super(message);
    this.name = 'DeformdError';
    this.status = status;
  }
}

const LITTLE = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

function numel(shape) {
  return shape.reduce((a, b) => a * b, 1);
}

function nestedShape(v) {
  const s = [];
  while (Array.isArray(v)) {
    s.push(v.length);
    if (v.length === 0) break;
    v = v[0];
  }
  return s;
}

/** {shape, data: Float32Array} from a tensor, nested array, number or typed array. */
export function asTensor(v, name = 'input') {
  if (v && v.shape && v.data) {
    const data = v.data instanceof Float32Array ? v.data : Float32Array.from(v.data);
    if (data.length !== numel(v.shape)) {
      throw new DeformdError(`${name}: ${data.length} values for shape [${v.shape}]`);
    }
    return { shape: Array.from(v.shape), data };
  }
  if (typeof v === 'number') return { shape: [], data: Float32Array.of(v) };
  if (ArrayBuffer.isView(v)) return { shape: [v.length], data: Float32Array.from(v) };
  if (Array.isArray(v)) {
    const shape = nestedShape(v);
    const data = Float32Array.from(v.flat(Infinity));
    if (data.length !== numel(shape)) throw new DeformdError(`${name}: ragged nested array`);
    return { shape, data };
  }
  throw new DeformdError(`${name}: expected {shape, data}, an array or a number`);
}

function f32le(data) {
  if (LITTLE) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const out = new Uint8Array(data.byteLength);
  const dv = new DataView(out.buffer);
  data.forEach((x, i) => dv.setFloat32(4 * i, x, true));
  return out;
}

/** IEEE binary16 -> number. */
export function f16ToF32(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

function decodeOutput(o, bytes) {
  const p = o.parameters || {};
  const shape = o.shape || [];
  const n = numel(shape);
  const enc = p.encoding || (o.datatype === 'FP16' ? 'float16' : o.datatype === 'INT16' ? 'int16' : 'float32');
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (enc === 'float32') {
    if (bytes.byteLength !== 4 * n) throw new DeformdError(`output ${o.name}: ${bytes.byteLength} bytes for shape [${shape}]`);
    if (LITTLE && bytes.byteOffset % 4 === 0) return { shape, data: new Float32Array(bytes.buffer, bytes.byteOffset, n) };
    const d = new Float32Array(n);
    for (let i = 0; i < n; i++) d[i] = dv.getFloat32(4 * i, true);
    return { shape, data: d };
  }
  if (bytes.byteLength !== 2 * n) throw new DeformdError(`output ${o.name}: ${bytes.byteLength} bytes for ${n} ${enc} values`);
  const d = new Float32Array(n);
  if (enc === 'float16') {
    for (let i = 0; i < n; i++) d[i] = f16ToF32(dv.getUint16(2 * i, true));
  } else if (enc === 'int16') {
    // the int16 box: the output's "deformd" extension object (daemons before
    // it sent it in "parameters")
    const box = o.deformd || p;
    let sc = box.scale ?? 1;
    let of = box.offset ?? 0;
    sc = (Array.isArray(sc) ? sc : [sc]).map(Math.fround);
    of = (Array.isArray(of) ? of : [of]).map(Math.fround);
    const c = shape[shape.length - 1] === 3 ? Math.max(sc.length, of.length) : 1;
    // float32 arithmetic (product rounded, then sum), like the C and Python clients
    for (let i = 0; i < n; i++) {
      const k = i % c;
      d[i] = Math.fround(Math.fround((sc[k] ?? sc[0]) * dv.getInt16(2 * i, true)) + (of[k] ?? of[0]));
    }
  } else {
    throw new DeformdError(`output ${o.name}: unknown encoding ${enc}`);
  }
  return { shape, data: d };
}

/** Build a KServe v2 request: {body, headers}. */
export function encodeInferRequest(inputs, opts = {}) {
  const binary = opts.binary !== false;
  const ins = [];
  const blobs = [];
  for (const [name, v] of Object.entries(inputs || {})) {
    const t = asTensor(v, name);
    const d = { name, shape: t.shape, datatype: 'FP32' };
    if (binary) {
      const b = f32le(t.data);
      d.parameters = { binary_data_size: b.byteLength };
      blobs.push(b);
    } else {
      d.data = Array.from(t.data);
    }
    ins.push(d);
  }
  const req = { inputs: ins };
  const params = Object.assign({}, opts.parameters || {});
  if (opts.encoding) params.encoding = opts.encoding;
  if (opts.skinning) params.skinning = opts.skinning;
  if (opts.sequence) { // {id, start, end}: a frame of a sequence (docs/http-api.md "Sequences")
    const q = opts.sequence;
    if (q.id == null || q.id === 0 || q.id === '') throw new DeformdError('sequence: an id (number > 0 or string) is required');
    params.sequence_id = q.id;
    if (q.start) params.sequence_start = true;
    if (q.end) params.sequence_end = true;
  }
  if (opts.outputs && opts.outputs.length) {
    req.outputs = opts.outputs.map((name) => ({ name, parameters: { binary_data: binary } }));
  } else if (binary) {
    params.binary_data_output = true;
  }
  if (Object.keys(params).length) req.parameters = params;
  const header = new TextEncoder().encode(JSON.stringify(req));
  if (!binary) return { body: header, headers: { 'Content-Type': 'application/json' } };
  const total = header.byteLength + blobs.reduce((a, b) => a + b.byteLength, 0);
  const body = new Uint8Array(total);
  body.set(header, 0);
  let off = header.byteLength;
  for (const b of blobs) { body.set(b, off); off += b.byteLength; }
  return {
    body,
    headers: {
      'Content-Type': 'application/octet-stream',
      'Inference-Header-Content-Length': String(header.byteLength),
    },
  };
}

/** Decode a KServe v2 response (JSON, or JSON header + binary) -> {name: tensor}. */
export function decodeInferResponse(buffer, headerLength) {
  const bytes = new Uint8Array(buffer);
  const hlen = headerLength == null ? bytes.byteLength : Number(headerLength);
  if (!(hlen <= bytes.byteLength)) throw new DeformdError(`response header length ${hlen} > body ${bytes.byteLength}`);
  const doc = JSON.parse(new TextDecoder().decode(bytes.subarray(0, hlen)));
  const out = {};
  let off = hlen;
  for (const o of doc.outputs || []) {
    const p = o.parameters || {};
    if (p.binary_data_size != null) {
      const size = Number(p.binary_data_size);
      if (off + size > bytes.byteLength) throw new DeformdError(`output ${o.name}: truncated binary data`);
      // copy into an aligned buffer so the Float32Array view is valid
      const chunk = bytes.slice(off, off + size);
      out[o.name] = decodeOutput(o, chunk);
      off += size;
    } else {
      const data = Float32Array.from((o.data || []).flat(Infinity));
      out[o.name] = { shape: o.shape || [data.length], data };
    }
  }
  Object.defineProperty(out, '$response', { value: doc, enumerable: false });
  return out;
}

export class DeformdClient {
  /** baseUrl: '' (same origin, e.g. the viewer) or 'http://host:port'. */
  constructor(baseUrl = '', options = {}) {
    this.base = baseUrl.replace(/\/$/, '');
    this.token = options.token || null;
    this.fetch = options.fetch || globalThis.fetch.bind(globalThis);
  }

  async _req(method, path, body, headers = {}) {
    const h = Object.assign({}, headers);
    if (this.token) h.Authorization = `Bearer ${this.token}`;
    const r = await this.fetch(this.base + path, { method, body, headers: h });
    if (!r.ok) {
      let msg = `HTTP ${r.status}`;
      try { const j = await r.json(); if (j && j.error) msg += `: ${j.error}`; } catch (_) { /* not JSON */ }
      throw new DeformdError(msg, r.status);
    }
    return r;
  }

  async _json(path) {
    return (await this._req('GET', path)).json();
  }

  /** GET /v2: server name, version, extensions. */
  server() { return this._json('/v2'); }

  async ready() {
    try { await this._req('GET', '/v2/health/ready'); return true; } catch (_) { return false; }
  }

  /** GET /v2/repository/index as the server returns it. */
  index() { return this._json('/v2/repository/index'); }

  /** Servable names: characters of every ready model (or the model itself). */
  async list() {
    const idx = await this.index();
    const entries = Array.isArray(idx) ? idx : (idx.models || []);
    const names = [];
    for (const e of entries) {
      if (typeof e === 'string') { names.push(e); continue; }
      if (e.state && e.state !== 'READY') continue;
      if (Array.isArray(e.characters) && e.characters.length) {
        for (const c of e.characters) names.push(typeof c === 'string' ? c : c.name);
      } else if (e.name) {
        names.push(e.name);
      }
    }
    return names;
  }

  /** GET /v2/models/{name}: KServe metadata (inputs, outputs, parameters). */
  info(name) { return this._json(`/v2/models/${encodeURIComponent(name)}`); }

  /** GET /v2/models/{name}/mesh: rest mesh as JSON. */
  mesh(name) { return this._json(`/v2/models/${encodeURIComponent(name)}/mesh`); }

  /**
   * POST /v2/models/{name}/infer.
   * inputs: {name: tensor-like}; opts: {outputs, binary (default true),
   * encoding 'float32'|'float16'|'int16', skinning 'lbs'|'dqs', parameters,
   * sequence: {id, start, end} (a frame of a sequence: run in order, a
   * model's `state` carried from the frame before)}.
   * Returns {outputName: {shape, data: Float32Array}}.
   */
  async infer(name, inputs = {}, opts = {}) {
    const { body, headers } = encodeInferRequest(inputs, opts);
    const r = await this._req('POST', `/v2/models/${encodeURIComponent(name)}/infer`, body, headers);
    const buf = await r.arrayBuffer();
    return decodeInferResponse(buf, r.headers.get('Inference-Header-Content-Length'));
  }
}

export default DeformdClient;
