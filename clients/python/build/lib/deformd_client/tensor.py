"""tensor.py — a float32 tensor that needs nothing but the standard library.

DESIGN
The client must work on a bare Python (standard library only) and use numpy
when it is installed. Every tensor that crosses the client API is a `Tensor`:
a shape and an `array.array('f')` in C order (little-endian on the wire).
`Tensor.numpy()` gives a numpy view when numpy is importable; inputs may be
given as numpy arrays, nested lists or Tensors (see `as_tensor`).

Decoders for the compact output encodings (float16, int16 quantised in a
bounding box) live here too so the HTTP and socket transports share them.
Setting DEFORMD_NO_NUMPY=1 hides numpy (the tests use it to run the pure path).
"""
import array
import os
import struct
import sys

try:
    if os.environ.get("DEFORMD_NO_NUMPY"):
        raise ImportError("disabled by DEFORMD_NO_NUMPY")
    import numpy as _np  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    _np = None

HAVE_NUMPY = _np is not None
_LITTLE = sys.byteorder == "little"


def numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


class Tensor:
    """A float32 tensor: `shape` (tuple of ints) and `data` (array('f'))."""

    __slots__ = ("shape", "data")

    def __init__(self, shape, data):
        self.shape = tuple(int(d) for d in shape)
        if not isinstance(data, array.array) or data.typecode != "f":
            data = array.array("f", data)
        if len(data) != numel(self.shape):
            raise ValueError("tensor data has %d values but shape %s needs %d"
                             % (len(data), list(self.shape), numel(self.shape)))
        self.data = data

    @classmethod
    def from_bytes(cls, shape, raw):
        """raw: little-endian float32 bytes (copied)."""
        a = array.array("f")
        a.frombytes(bytes(raw))
        if not _LITTLE:
            a.byteswap()
        return cls(shape, a)

    def to_bytes(self):
        """Little-endian float32 bytes."""
        if _LITTLE:
            return self.data.tobytes()
        b = array.array("f", self.data)
        b.byteswap()
        return b.tobytes()

    def tolist(self):
        """Nested lists, like numpy's tolist()."""
        flat = self.data.tolist()

        def build(off, dims):
            if not dims:
                return flat[off]
            step = numel(dims[1:])
            return [build(off + i * step, dims[1:]) for i in range(dims[0])]
        if not self.shape:
            return flat[0]
        return build(0, list(self.shape))

    def numpy(self):
        if _np is None:
            raise RuntimeError("numpy is not installed")
        return _np.frombuffer(self.to_bytes(), dtype="<f4").reshape(self.shape).copy()

    def __len__(self):
        return self.shape[0] if self.shape else 1

    def __eq__(self, other):
        return (isinstance(other, Tensor) and self.shape == other.shape
                and self.to_bytes() == other.to_bytes())

    def __repr__(self):
        return "Tensor(shape=%s)" % (list(self.shape),)


def _nested_shape(v):
    shape = []
    while isinstance(v, (list, tuple)):
        shape.append(len(v))
        if not v:
            break
        v = v[0]
    return shape


def _flatten(v, out):
    if isinstance(v, (list, tuple)):
        for x in v:
            _flatten(x, out)
    else:
        out.append(float(v))


def as_tensor(value, name="input"):
    """Tensor from a Tensor, a numpy array, or (nested) lists of numbers."""
    if isinstance(value, Tensor):
        return value
    if _np is not None and isinstance(value, _np.ndarray):
        a = _np.ascontiguousarray(value, dtype="<f4")
        return Tensor.from_bytes(a.shape, a.tobytes())
    if isinstance(value, (int, float)):
        return Tensor((), [float(value)])
    if isinstance(value, (list, tuple)):
        shape = _nested_shape(value)
        flat = []
        _flatten(value, flat)
        if len(flat) != numel(shape):
            raise ValueError("%s: ragged nested list (shape %s expected)" % (name, shape))
        return Tensor(shape, flat)
    raise TypeError("%s: expected a Tensor, numpy array or list, not %s"
                    % (name, type(value).__name__))


def decode_f16(shape, raw):
    """IEEE binary16 little-endian -> Tensor (float32)."""
    n = numel(shape)
    if len(raw) != 2 * n:
        raise ValueError("float16 output: %d bytes for %d values" % (len(raw), n))
    if _np is not None:
        a = _np.frombuffer(bytes(raw), dtype="<f2").astype("<f4")
        return Tensor.from_bytes(shape, a.tobytes())
    return Tensor(shape, struct.unpack("<%de" % n, bytes(raw)))


def _f32(x):
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def decode_i16(shape, raw, scale, offset):
    """int16 quantised: value[i] = offset[c] + scale[c] * q[i], c = i % 3.

    scale/offset: per component (x, y, z) lists, or single numbers. Computed in
    float32 arithmetic (product rounded, then sum rounded) like the C client,
    so every client decodes the same bits."""
    n = numel(shape)
    if len(raw) != 2 * n:
        raise ValueError("int16 output: %d bytes for %d values" % (len(raw), n))
    if not isinstance(scale, (list, tuple)):
        scale = [scale]
    if not isinstance(offset, (list, tuple)):
        offset = [offset]
    c = max(len(scale), len(offset))
    if not shape or shape[-1] != c:  # one channel unless the last axis is x, y, z
        c, scale, offset = 1, scale[:1], offset[:1]
    scale = [_f32(x) for x in (list(scale) * c if len(scale) == 1 else scale)]
    offset = [_f32(x) for x in (list(offset) * c if len(offset) == 1 else offset)]
    if _np is not None:
        q = _np.frombuffer(bytes(raw), dtype="<i2").astype("<f4").reshape(-1, c)
        v = q * _np.array(scale, dtype="<f4") + _np.array(offset, dtype="<f4")
        return Tensor.from_bytes(shape, v.astype("<f4").tobytes())
    q = struct.unpack("<%dh" % n, bytes(raw))
    out = array.array("f", bytes(4 * n))
    for i in range(n):
        k = i % c
        out[i] = _f32(_f32(scale[k] * q[i]) + offset[k])
    return Tensor(shape, out)
