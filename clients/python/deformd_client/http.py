"""http.py — deformd's KServe v2 HTTP API from the standard library (http.client).

DESIGN
One `HttpClient` holds one keep-alive `http.client.HTTPConnection` (reconnected
once if the server closed it between requests). Idempotent requests (GET, and
POST .../infer: a pure function of its inputs) are sent once more when the
first try lost its connection (refused, reset, closed before the answer) or got
502 / 503: what a router answers when a daemon died under the request and what
a draining daemon answers; behind a router the second try reaches another
daemon. `retries` counts those second tries. Inference speaks either plain
KServe v2 JSON or its binary-data extension (the default: JSON header of
`Inference-Header-Content-Length` bytes followed by raw little-endian float32
tensors, both ways), so a vertex buffer is never printed as decimal text.
Errors from the server (JSON `{"error": "..."}` with a 4xx/5xx status) raise
`DeformdError` carrying the status and the server's message.

Inputs: dict name -> Tensor | numpy array | nested list, *per pose* (shape as
in the model metadata) or with a leading batch dimension B (then pass
batch=B). Outputs: dict name -> Tensor with the server's shape (B first when
a batch dimension was sent).
"""
import array
import http.client
import json
import struct

from .names import by_name
from .tensor import Tensor, as_tensor, decode_f16, decode_i16, numel


ENCODINGS = ("float32", "float16", "int16")
_DATATYPE_ENCODING = {"FP32": "float32", "FP16": "float16", "INT16": "int16"}


class DeformdError(Exception):
    """An error answered by deformd (HTTP status or socket DF_E* code)."""

    def __init__(self, message, status=None, code=None):
        Exception.__init__(self, message)
        self.status = status
        self.code = code


class HttpClient:
    def __init__(self, host="127.0.0.1", port=8000, timeout=60.0, token=None):
        self.host = host
        self.port = int(port)
        self.timeout = timeout
        self.token = token
        self._conn = None
        self.retries = 0  # idempotent requests sent a second time
        # JSON header of the last infer answer (model_version, queue_us,
        # compute_us, each output's parameters such as int16 scale/offset)
        self.last_response = None

    # ------------------------------------------------------------ plumbing
    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _request(self, method, path, body=None, headers=None):
        """Returns (status, headers dict lower-cased, body bytes)."""
        hdrs = dict(headers or {})
        if self.token:
            hdrs["Authorization"] = "Bearer " + self.token
        idempotent = method == "GET" or (path.endswith("/infer") and
                                         b'"sequence_id"' not in (body or b"")[:4096])
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port,
                                                        timeout=self.timeout)
            try:
                self._conn.request(method, path, body=body, headers=hdrs)
                resp = self._conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError):
                # keep-alive connection closed by the server (or lost under
                # the request): retry once
                self.close()
                if attempt:
                    raise
                self.retries += 1
                continue
            except (ConnectionRefusedError, ConnectionAbortedError,
                    http.client.IncompleteRead):
                self.close()
                if attempt or not idempotent:
                    raise
                self.retries += 1
                continue
            rh = {k.lower(): v for k, v in resp.getheaders()}
            if rh.get("connection", "").lower() == "close":
                self.close()
            if resp.status in (502, 503) and idempotent and not attempt:
                self.close()
                self.retries += 1
                continue
            return resp.status, rh, data
        raise AssertionError("unreachable")

    def _json(self, method, path, body=None):
        hdrs = {}
        if body is not None:
            body = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        status, _, data = self._request(method, path, body, hdrs)
        if status >= 400:
            raise _error(status, data)
        return json.loads(data.decode()) if data else None

    # ------------------------------------------------------------- verbs
    def server(self):
        """GET /v2: name, version, extensions."""
        return self._json("GET", "/v2")

    def ready(self):
        status, _, _ = self._request("GET", "/v2/health/ready")
        return status == 200

    def list(self):
        """Servable names: the characters of every ready model (a model
        without declared characters is served under its own name)."""
        idx = self._json("GET", "/v2/repository/index")
        names = []
        for e in idx if isinstance(idx, list) else idx.get("models", []):
            if isinstance(e, str):
                names.append(e)
            elif isinstance(e, dict):
                if e.get("state", "READY") != "READY":
                    continue
                chars = e.get("characters") or []
                names.extend(c if isinstance(c, str) else c["name"] for c in chars)
                if not chars and "name" in e:
                    names.append(e["name"])
        return names

    def index(self):
        """GET /v2/repository/index as the server returns it."""
        return self._json("GET", "/v2/repository/index")

    def info(self, name):
        """GET /v2/models/{name}: KServe metadata (inputs, outputs, parameters)."""
        return self._json("GET", "/v2/models/" + _quote(name))

    def mesh(self, name, fmt="json"):
        """Rest mesh. fmt="json": dict (positions, triangles); "glb": bytes."""
        path = "/v2/models/%s/mesh" % _quote(name)
        if fmt == "glb":
            status, _, data = self._request("GET", path + "?format=glb")
            if status >= 400:
                raise _error(status, data)
            return data
        return self._json("GET", path)

    def play(self, name, clip, fps=None, chunk=16, outputs=("positions",), encoding=None):
        """Evaluate a clip over HTTP; the daemon samples it (request parameters
        clip / time / dt / batch_size: pose b at time + b*dt). Frames on a
        uniform grid, k/fps for k = 0..floor(duration*fps) (fps default 30,
        as `deform eval --fps`), `chunk` poses per request. Returns
        {output: Tensor [F, ...]}. For arbitrary times and pipelining use
        SocketClient.play."""
        from .clips import match_clip, clip_names, model_lists
        meta = self.info(name)
        clip = match_clip(clip_names(meta), clip, name)  # any case, or a unique part
        cl = next(c for c in model_lists(meta).get("clips", [])
                  if isinstance(c, dict) and c.get("name") == clip)
        fps = float(fps or 30.0)
        nf = int(cl.get("duration", 0.0) * fps + 1e-3) + 1  # as deform eval (float key times)
        parts = []
        for k0 in range(0, nf, chunk):
            b = min(chunk, nf - k0)
            parts.append(self.infer(name, None, outputs=list(outputs), batch=b,
                                    encoding=encoding,
                                    parameters={"clip": clip, "time": k0 / fps,
                                                "dt": 1.0 / fps, "batch_size": b}))
        res = {}
        for o in outputs:
            data = array.array("f")
            for p in parts:
                data.extend(p[o].data)
            res[o] = Tensor((nf,) + tuple(parts[0][o].shape[1:]), data)
        return res

    def infer(self, name, inputs=None, outputs=None, batch=None, binary=True,
              encoding=None, skinning=None, parameters=None, sequence_id=None,
              sequence_start=False, sequence_end=False):
        """Evaluate poses of `name`.

        inputs: dict name -> tensor-like, or for a one-axis input a dict of
        values by name ({"source_weights": {"jawOpen": 0.7}}; with batch, a
        list of such dicts): the model's metadata names them (named_input;
        fetched once per model), the others keep their defaults. batch: None for one pose given per
        pose (outputs then come back without the batch dimension, as from
        SocketClient.infer), or B when every input has a leading dimension B
        (outputs [B, ...]). outputs: names wanted (None: all).
        binary: use the binary-data extension both ways (default) or plain
        JSON. encoding: "float32" | "float16" | "int16" for every output
        (None: the character's), sent as the request's parameters.encoding
        and, when `outputs` are named, as each output's own encoding too;
        the answer is decoded to float32 either way (int16 JSON integers with
        the output's scale/offset). An answer in another encoding than the
        one asked raises DeformdError (never a silent float32).
        skinning: "lbs" | "dqs" (None: the character's).
        parameters: extra request parameters passed as they are.
        sequence_id (an int > 0 or a string), sequence_start, sequence_end:
        Triton's sequence parameters; the request is the next frame of that
        sequence (run in order, a model's `state` carried from frame to
        frame). A sequence's frame is never sent twice.
        """
        if encoding is not None and encoding not in ENCODINGS:
            raise ValueError("encoding must be one of %s" % ", ".join(ENCODINGS))
        ins = []
        blobs = []
        for iname, v in (inputs or {}).items():
            v = by_name(self, name, iname, v)
            t = as_tensor(v, iname)
            d = {"name": iname, "shape": list(t.shape), "datatype": "FP32"}
            if binary:
                raw = t.to_bytes()
                d["parameters"] = {"binary_data_size": len(raw)}
                blobs.append(raw)
            else:
                d["data"] = t.data.tolist()
            ins.append(d)
        req = {"inputs": ins}
        params = dict(parameters or {})
        if encoding:
            params["encoding"] = encoding
        if skinning:
            params["skinning"] = skinning
        if sequence_id not in (None, 0, ""):
            params["sequence_id"] = sequence_id
            if sequence_start:
                params["sequence_start"] = True
            if sequence_end:
                params["sequence_end"] = True
        elif sequence_start or sequence_end:
            raise ValueError("sequence_start / sequence_end need a sequence_id")
        if outputs:
            req["outputs"] = []
            for o in outputs:
                op = {"binary_data": bool(binary)}
                if encoding:
                    op["encoding"] = encoding
                req["outputs"].append({"name": o, "parameters": op})
        elif binary:
            params["binary_data_output"] = True
        if params:
            req["parameters"] = params
        header = json.dumps(req).encode()
        path = "/v2/models/%s/infer" % _quote(name)
        if binary:
            body = header + b"".join(blobs)
            hdrs = {"Content-Type": "application/octet-stream",
                    "Inference-Header-Content-Length": str(len(header))}
        else:
            body = header
            hdrs = {"Content-Type": "application/json"}
        status, rh, data = self._request("POST", path, body, hdrs)
        if status >= 400:
            raise _error(status, data)
        hl = rh.get("inference-header-content-length")
        self.last_response = json.loads(data[:int(hl) if hl is not None else len(data)].decode())
        out = parse_infer_response(data, hl)
        if encoding:
            for o in self.last_response.get("outputs", []):
                got = (o.get("parameters") or {}).get("encoding") or \
                    _DATATYPE_ENCODING.get(o.get("datatype"), "float32")
                if got != encoding:
                    raise DeformdError("output %s: asked %s, the server answered %s (%s)"
                                       % (o.get("name"), encoding, got, o.get("datatype")))
        if batch is None:  # one pose: drop the batch dimension the server adds
            out = {k: (Tensor(t.shape[1:], t.data) if len(t.shape) > 1 and t.shape[0] == 1 else t)
                   for k, t in out.items()}
        return out


def parse_infer_response(data, header_len=None):
    """KServe v2 response bytes (JSON, or JSON header + binary) -> {name: Tensor}."""
    hlen = int(header_len) if header_len is not None else len(data)
    if hlen > len(data):
        raise DeformdError("response header length %d > body %d" % (hlen, len(data)))
    doc = json.loads(data[:hlen].decode())
    off = hlen
    out = {}
    for o in doc.get("outputs", []):
        shape = o.get("shape", [])
        p = o.get("parameters") or {}
        # the int16 box: the output's "deformd" extension object (daemons
        # before it sent it in "parameters")
        box = o.get("deformd") or p
        if "binary_data_size" in p:
            size = int(p["binary_data_size"])
            raw = data[off:off + size]
            if len(raw) != size:
                raise DeformdError("output %s: %d binary bytes announced, %d present"
                                   % (o["name"], size, len(raw)))
            off += size
            enc = p.get("encoding", "float32")
            dt = o.get("datatype", "FP32")
            if enc == "float16" or dt == "FP16":
                out[o["name"]] = decode_f16(shape, raw)
            elif enc == "int16" or dt == "INT16":
                out[o["name"]] = decode_i16(shape, raw, box.get("scale", 1.0),
                                            box.get("offset", 0.0))
            else:
                if size != 4 * numel(shape):
                    raise DeformdError("output %s: %d bytes for shape %s"
                                       % (o["name"], size, shape))
                out[o["name"]] = Tensor.from_bytes(shape, raw)
        else:
            flat = []
            _flat(o.get("data", []), flat)
            if o.get("datatype") == "INT16" or p.get("encoding") == "int16":
                # JSON int16: the quantised integers; decoded like the binary ones
                try:
                    if len(flat) != numel(shape) or not all(isinstance(q, int) for q in flat):
                        raise struct.error("not integers")
                    raw = struct.pack("<%dh" % len(flat), *flat)
                except struct.error:
                    raise DeformdError("output %s: int16 data is not %d integers in -32768..32767"
                                       % (o["name"], numel(shape)))
                out[o["name"]] = decode_i16(shape, raw, box.get("scale", 1.0),
                                            box.get("offset", 0.0))
            else:
                out[o["name"]] = Tensor(shape, flat)
    return out


def _flat(v, acc):
    if isinstance(v, list):
        for x in v:
            _flat(x, acc)
    else:
        acc.append(v)


def _quote(name):
    from urllib.parse import quote
    return quote(name, safe="")


def _error(status, data):
    msg = None
    try:
        msg = json.loads(data.decode()).get("error")
    except (ValueError, AttributeError, UnicodeDecodeError):
        pass
    if not msg:
        msg = data.decode("utf-8", "replace")[:300] or "HTTP %d" % status
    return DeformdError("HTTP %d: %s" % (status, msg), status=status)


__all__ = ["HttpClient", "DeformdError", "parse_infer_response"]
