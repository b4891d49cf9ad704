"""npy.py — read and write float32 .npy files without numpy.

The NumPy format (version 1.0): magic "\\x93NUMPY", version, a little-endian
u16 header length, a Python-literal dict header padded with spaces to a
multiple of 64 bytes and ending in a newline, then the C-order data. Only
'<f4' is written; reading also accepts '<f8' and '<f2' (converted).
"""
import ast
import struct

from .tensor import Tensor, numel

_MAGIC = b"\x93NUMPY"


def write(path, t):
    """Write Tensor t to path as '<f4', C order."""
    shape = tuple(t.shape)
    shp = "(%s)" % ("".join("%d," % d for d in shape) if len(shape) == 1
                    else ", ".join(str(d) for d in shape))
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shp
    pad = 64 - (len(_MAGIC) + 4 + len(header) + 1) % 64
    header = header + " " * (pad % 64) + "\n"
    with open(path, "wb") as f:
        f.write(_MAGIC + b"\x01\x00" + struct.pack("<H", len(header)))
        f.write(header.encode("latin1"))
        f.write(t.to_bytes())


def read(path):
    """Read a float .npy file into a Tensor (float32)."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:6] != _MAGIC:
        raise ValueError("%s: not a .npy file (bad magic)" % path)
    major = raw[6]
    if major == 1:
        hlen = struct.unpack("<H", raw[8:10])[0]
        off = 10
    elif major in (2, 3):
        hlen = struct.unpack("<I", raw[8:12])[0]
        off = 12
    else:
        raise ValueError("%s: unsupported .npy version %d" % (path, major))
    try:
        h = ast.literal_eval(raw[off:off + hlen].decode("latin1"))
    except (ValueError, SyntaxError) as e:
        raise ValueError("%s: bad .npy header (%s)" % (path, e))
    if h.get("fortran_order"):
        raise ValueError("%s: Fortran-order arrays are not supported" % path)
    shape = tuple(h["shape"])
    data = raw[off + hlen:]
    n = numel(shape)
    descr = h["descr"]
    if descr in ("<f4", "=f4"):
        return Tensor.from_bytes(shape, data[:4 * n])
    if descr == "<f8":
        return Tensor(shape, struct.unpack("<%dd" % n, data[:8 * n]))
    if descr == "<f2":
        return Tensor(shape, struct.unpack("<%de" % n, data[:2 * n]))
    raise ValueError("%s: dtype %s not supported (float32 expected)" % (path, descr))
