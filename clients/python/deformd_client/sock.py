"""sock.py — deformd's binary socket protocol (docs/protocol.md, version 1).

DESIGN
`SocketClient` owns one TCP or Unix stream socket. Frames are a 24-byte
little-endian header (magic "DFRM", version 1, type, flags 0, request id u64,
payload length u32) and a payload whose tensor data is 8-byte aligned
relative to the payload start. Requests are pipelined: `submit()` sends an
INFER and returns its request id without waiting; `collect()` reads answers,
which may arrive in any order, and files them by id. `infer()` is submit +
wait for that id; `play()` streams a whole clip (INFER with a clip name and
key times, `window` requests in flight at once) and returns frames in clip
order. The encoder/decoder functions are pure (bytes in, values out) so the
tests can check them against hand-written frames.

Retry: every request of the protocol is idempotent, so `ping()`, `info()` and
`infer()`, when they were the only request on the connection and lost it (closed
or reset before the answer: a daemon killed, a router that lost its upstream)
or were answered DF_ESHUTDOWN (a draining daemon), connect again to the same
address and send the request once more (`retries` counts these). Behind a
router the new connection reaches a live daemon. Pipelined requests
(`submit`) are not resent: `reconnect()` lets the caller do it.

Authentication: `SocketClient(token=...)` sends an AUTH frame with the token
first on every connection it opens (a daemon with `auth = all` refuses
anything but PING before it). It does not wait for AUTH_OK: the first
request follows at once (the nginx router of deploy/ holds a connection
until it has read the first request's character), and the AUTH's answer is
read with the others. A wrong token raises DeformdError with code DF_EAUTH
from whichever call reads it (the server closes the connection).
"""
import array
import json
import socket
import struct

from .tensor import Tensor, as_tensor, decode_f16, decode_i16, numel
from .http import DeformdError
from .names import by_name

MAGIC = 0x4D524644
VERSION = 1
PING, PONG, INFER, RESULT, ERROR, INFO, INFO_RESULT, AUTH, AUTH_OK = (
    0x0001, 0x0002, 0x0010, 0x0011, 0x0012, 0x0020, 0x0021, 0x0030, 0x0031)
ENCODINGS = {"float32": 0, "float16": 1, "int16": 2}
POSE_FLAGS = {None: 0, "lbs": 1, "dqs": 2}
ERROR_NAMES = {-1: "DF_EINVAL", -2: "DF_ENOMEM", -3: "DF_EIO", -4: "DF_EFORMAT",
               -5: "DF_ELIMIT", -6: "DF_ENOTFOUND", -7: "DF_EUNSUPPORTED",
               -8: "DF_EOVERLOAD", -9: "DF_ETIMEDOUT", -10: "DF_ESHUTDOWN",
               -11: "DF_EINTERNAL", -12: "DF_ENUMERIC", -13: "DF_EAUTH"}
_HDR = struct.Struct("<IHHIQI")
MAX_PAYLOAD = 64 << 20


# ------------------------------------------------------------ pure codec
def _string(s):
    b = s.encode()
    if len(b) > 63 or b"\0" in b:
        raise ValueError("name %r: 0..63 bytes without NUL expected" % s)
    return struct.pack("<H", len(b)) + b


def _pad8(buf):
    n = (-len(buf)) % 8
    if n:
        buf += b"\0" * n


def frame(ftype, req_id, payload=b""):
    return _HDR.pack(MAGIC, VERSION, ftype, 0, req_id, len(payload)) + payload


def encode_auth(req_id, token):
    """An AUTH frame: u16 length + the token's bytes (1..255)."""
    b = token.encode() if isinstance(token, str) else bytes(token)
    if not 1 <= len(b) <= 255 or b"\0" in b:
        raise ValueError("token: 1..255 bytes without NUL expected")
    return frame(AUTH, req_id, struct.pack("<H", len(b)) + b)


def encode_infer(req_id, name, inputs=None, batch=1, outputs=None,
                 encoding="float32", skinning=None, clip=None, times=None,
                 sequence_id=None, sequence_start=False, sequence_end=False):
    """An INFER frame. inputs: name -> tensor-like with leading dim `batch`.
    sequence_id (an int > 0 or a non-empty string) makes it a frame of that
    sequence (the sequence block, docs/protocol.md), with its START / END
    flags."""
    if encoding not in ENCODINGS:
        raise ValueError("encoding must be one of %s" % sorted(ENCODINGS))
    if skinning not in POSE_FLAGS:
        raise ValueError("skinning must be 'lbs', 'dqs' or None")
    ins = [(k, as_tensor(v, k)) for k, v in (inputs or {}).items()]
    outs = list(outputs or [])
    seq = sequence_id not in (None, 0, "")
    if (sequence_start or sequence_end) and not seq:
        raise ValueError("sequence_start / sequence_end need a sequence_id")
    p = bytearray(struct.pack("<IIBBHH", batch, POSE_FLAGS[skinning],
                              ENCODINGS[encoding], 1 if seq else 0, len(ins), len(outs)))
    p += _string(name)
    p += _string(clip or "")
    if clip:
        if times is None or len(times) != batch:
            raise ValueError("clip %r needs one time per pose (%d)" % (clip, batch))
        _pad8(p)
        p += struct.pack("<%dd" % batch, *times)
    if seq:
        p += struct.pack("<B", (1 if sequence_start else 0) | (2 if sequence_end else 0))
        if isinstance(sequence_id, str):
            p += b"\x01" + _string(sequence_id)
        else:
            p += b"\x00" + struct.pack("<Q", int(sequence_id))
    for o in outs:
        p += _string(o)
    for k, t in ins:
        if not t.shape or t.shape[0] != batch:
            raise ValueError("input %s: leading dimension %s, expected the batch size %d"
                             % (k, t.shape[:1], batch))
        p += _string(k)
        p += struct.pack("<BB", 0, len(t.shape))
        p += struct.pack("<%dI" % len(t.shape), *t.shape)
        _pad8(p)
        p += t.to_bytes()
    return frame(INFER, req_id, bytes(p))


class _Reader:
    def __init__(self, buf):
        self.b = buf
        self.o = 0

    def take(self, n):
        if self.o + n > len(self.b):
            raise DeformdError("truncated frame payload")
        v = self.b[self.o:self.o + n]
        self.o += n
        return v

    def unpack(self, fmt):
        s = struct.Struct(fmt)
        return s.unpack(self.take(s.size))

    def string(self):
        (n,) = self.unpack("<H")
        return bytes(self.take(n)).decode()

    def pad8(self):
        self.take((-self.o) % 8)


def decode_result(payload):
    """RESULT payload -> {name: Tensor} (compact encodings decoded to float32)."""
    r = _Reader(payload)
    _nposes, nout, _ = r.unpack("<IHH")
    out = {}
    for _ in range(nout):
        name = r.string()
        enc, ndim = r.unpack("<BB")
        dims = r.unpack("<%dI" % ndim)
        scale = offset = None
        if enc == 2:
            scale = list(r.unpack("<3f"))
            offset = list(r.unpack("<3f"))
        r.pad8()
        n = numel(dims)
        if enc == 0:
            out[name] = Tensor.from_bytes(dims, r.take(4 * n))
        elif enc == 1:
            out[name] = decode_f16(dims, r.take(2 * n))
        elif enc == 2:
            out[name] = decode_i16(dims, r.take(2 * n), scale, offset)
        else:
            raise DeformdError("output %s: unknown encoding %d" % (name, enc))
    if r.o != len(payload):
        raise DeformdError("RESULT: %d trailing bytes" % (len(payload) - r.o))
    return out


def decode_error(payload):
    r = _Reader(payload)
    (code,) = r.unpack("<i")
    msg = r.string()
    return DeformdError("%s: %s" % (ERROR_NAMES.get(code, "DF_EINTERNAL"), msg), code=code)


# ------------------------------------------------------------ the client
DF_EIO, DF_ESHUTDOWN, DF_EAUTH = -3, -10, -13


class SocketClient:
    def __init__(self, host="127.0.0.1", port=8001, unix=None, timeout=60.0, token=None):
        self._where = (host, port, unix, timeout)
        self._token = token
        self.sock = None
        self._next = 1
        self._done = {}  # request id -> (type, payload)
        self._sent = set()  # request ids sent, not answered yet
        self.retries = 0  # requests sent a second time on a new connection
        self._connect()

    def _connect(self):
        host, port, unix, timeout = self._where
        if unix:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            try:
                s.connect(unix)
            except OSError:
                s.close()
                raise
        else:
            s = socket.create_connection((host, int(port)), timeout=timeout)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = s
        self._auth_rid = None
        if self._token:
            rid = self._id()
            try:
                s.sendall(encode_auth(rid, self._token))
            except BaseException:
                self.close()
                raise
            self._auth_rid = rid

    def reconnect(self):
        """Close the connection and connect again to the same address;
        requests in flight are forgotten (resubmit them)."""
        self.close()
        self._done = {}
        self._sent = set()
        self._connect()

    def _once_more(self, fn):
        """fn() sends one request and waits for it; on a lost connection or
        DF_ESHUTDOWN, when nothing else was in flight, reconnect and call it
        once more."""
        alone = not self._sent and not self._done
        try:
            return fn()
        except (OSError, DeformdError) as e:
            code = getattr(e, "code", None)
            lost = isinstance(e, OSError) and not isinstance(e, socket.timeout)
            if not alone or not (lost or code in (DF_EIO, DF_ESHUTDOWN)):
                raise
            try:
                self.reconnect()
            except OSError:
                raise e
            self.retries += 1
            return fn()

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _id(self):
        i = self._next
        self._next += 1
        return i

    def _recv_exact(self, n):
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if k == 0:
                raise DeformdError("connection closed by the server", code=DF_EIO)
            got += k
        return buf

    def _read_frame(self):
        magic, ver, ftype, _flags, rid, length = _HDR.unpack(self._recv_exact(_HDR.size))
        if magic != MAGIC or ver != VERSION:
            raise DeformdError("bad frame from server (magic %#x version %d)" % (magic, ver))
        if length > MAX_PAYLOAD:
            raise DeformdError("frame of %d bytes exceeds the limit" % length)
        return ftype, rid, self._recv_exact(length) if length else bytearray()

    def _wait(self, rid):
        while rid not in self._done:
            ftype, r, payload = self._read_frame()
            if r == self._auth_rid and r is not None:
                self._auth_rid = None
                if ftype == ERROR:  # the server closes the connection after it
                    raise decode_error(payload)
                if ftype != AUTH_OK:
                    raise DeformdError("unexpected frame type %#x for AUTH" % ftype)
                continue
            self._done[r] = (ftype, payload)
            self._sent.discard(r)
        return self._done.pop(rid)

    @staticmethod
    def _answer(ftype, payload, expect):
        if ftype == ERROR:
            raise decode_error(payload)
        if ftype != expect:
            raise DeformdError("unexpected frame type %#x" % ftype)
        return payload

    # ------------------------------------------------------------- verbs
    def _call(self, ftype, payload, expect):
        rid = self._id()
        self._sent.add(rid)
        self.sock.sendall(frame(ftype, rid, payload))
        return self._answer(*self._wait(rid), expect)

    def ping(self, data=b"ping"):
        return bytes(self._once_more(lambda: self._call(PING, data, PONG)))

    def info(self, name=""):
        """INFO: server description (name "") or a character's (inputs, clips...)."""
        p = self._once_more(lambda: self._call(INFO, _string(name), INFO_RESULT))
        (n,) = struct.unpack_from("<I", p)
        return json.loads(bytes(p[4:4 + n]).decode())

    def list(self):
        return list(self.info("").get("characters", []))

    def submit(self, name, inputs=None, batch=1, outputs=None, encoding="float32",
               skinning=None, clip=None, times=None, sequence_id=None, sequence_start=False,
               sequence_end=False):
        """Send an INFER without waiting; returns its request id. With
        sequence_id the request is the next frame of that sequence (the
        daemon runs a sequence's frames in the order sent and carries a
        model's `state` from one to the next)."""
        rid = self._id()
        data = encode_infer(rid, name, inputs, batch, outputs, encoding, skinning, clip, times,
                            sequence_id, sequence_start, sequence_end)
        self._sent.add(rid)
        self.sock.sendall(data)
        return rid

    def result(self, rid):
        """Wait for request rid: {name: Tensor} with the batch dimension first."""
        return decode_result(self._answer(*self._wait(rid), RESULT))

    def infer(self, name, inputs=None, outputs=None, batch=None, encoding="float32",
              skinning=None, clip=None, times=None, sequence_id=None, sequence_start=False,
              sequence_end=False):
        """One request. batch=None: inputs are per pose and outputs come back
        without the batch dimension; batch=B: leading dimension B both ways.
        A one-axis input may be given by name as in HttpClient.infer.
        sequence_id / sequence_start / sequence_end: see submit()."""
        ins = {k: by_name(self, name, k, v) for k, v in (inputs or {}).items()}
        if batch is None:
            ins = {k: _add_batch(as_tensor(v, k)) for k, v in ins.items()}
            if times is not None and not isinstance(times, (list, tuple)):
                times = [times]
        send = lambda: self.result(self.submit(  # noqa: E731
            name, ins, batch or 1, outputs, encoding, skinning, clip, times,
            sequence_id, sequence_start, sequence_end))
        # a sequence's frame is not sent twice: the first may have run
        res = send() if sequence_id not in (None, 0, "") else self._once_more(send)
        if batch is None:
            res = {k: Tensor(t.shape[1:], t.data) for k, t in res.items()}
        return res

    def play(self, name, clip, times=None, fps=None, outputs=("positions",),
             chunk=16, window=8, encoding="float32", progress=None):
        """Evaluate a clip: frames at `times` (default: the stored key times,
        or a uniform `fps` grid over the clip's duration). Requests of `chunk`
        poses each, `window` in flight. Returns {output: Tensor [F, ...]}.
        clip: a clip's name, in any case, or a unique part of one ("walk")."""
        c = _find_clip(self.info(name), clip, name)
        clip = c["name"]
        if times is None:
            if fps:
                dur = float(c.get("duration", c["times"][-1] if c.get("times") else 0.0))
                nf = int(dur * fps + 1e-3) + 1  # k/fps, k = 0..floor(duration*fps + 1e-3), as deform eval
                times = [i / float(fps) for i in range(nf)]
            else:
                times = list(c["times"])
        times = [float(t) for t in times]
        pending = []  # (rid, first frame)
        parts = {}
        sent = 0
        done = 0
        while done < len(times):
            while sent < len(times) and len(pending) < window:
                ts = times[sent:sent + chunk]
                pending.append((self.submit(name, None, len(ts), list(outputs), encoding,
                                            None, clip, ts), sent))
                sent += len(ts)
            rid, first = pending.pop(0)
            parts[first] = self.result(rid)
            done += len(parts[first][outputs[0]])
            if progress:
                progress(done, len(times))
        res = {}
        for o in outputs:
            chunks = [parts[k][o] for k in sorted(parts)]
            data = array.array("f")
            for c2 in chunks:  # amortised appends: linear in the frame count
                data.extend(c2.data)
            res[o] = Tensor((len(times),) + chunks[0].shape[1:], data)
        return res


def _add_batch(t):
    return Tensor((1,) + t.shape, t.data)


def _find_clip(info, clip, character=None):
    """The INFO clip entry `clip` designates (clips.match_clip: any case, or a
    unique part of a name); DeformdError listing the clips otherwise."""
    from .clips import match_clip, clip_names
    name = match_clip(clip_names(info), clip, character or info.get("name"))
    return next(c for c in info.get("clips", []) if isinstance(c, dict) and c.get("name") == name)
