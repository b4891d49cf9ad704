# stfile.py — safetensors files from numpy (write and read), for the garment
# tools. The format is the one docs/model-format.md describes: u64 header
# length, JSON header (tensors with dtype/shape/data_offsets, __metadata__ of
# strings), data area; tensors laid out without gaps in insertion order, the
# header padded with spaces so the data area starts 8-aligned. The loader in
# core/ validates everything it reads; this writer only keeps files
# well-formed (and writes <path>.tmp, then renames).
import json
import os
import struct

import numpy as np

_DT = {np.dtype('float32'): 'F32', np.dtype('int32'): 'I32', np.dtype('float64'): 'F64',
       np.dtype('uint8'): 'U8', np.dtype('int64'): 'I64'}
_NP = {v: k for k, v in _DT.items()}


def write(path, tensors, metadata=None):
    """tensors: dict name -> numpy array (float32/int32/...); metadata: dict of strings."""
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr)
        if a.dtype not in _DT:
            raise ValueError('tensor %s: dtype %s not supported' % (name, a.dtype))
        b = a.tobytes()
        header[name] = dict(dtype=_DT[a.dtype], shape=list(a.shape), data_offsets=[off, off + len(b)])
        blobs.append(b)
        off += len(b)
    if metadata:
        header['__metadata__'] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(',', ':')).encode()
    h += b' ' * ((8 - (8 + len(h)) % 8) % 8)
    tmp = path + '.tmp'
    with open(tmp, 'wb') as f:
        f.write(struct.pack('<Q', len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read(path):
    """(dict name -> array, metadata dict)."""
    with open(path, 'rb') as f:
        data = f.read()
    n = struct.unpack('<Q', data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop('__metadata__', {})
    base = 8 + n
    out = {}
    for name, d in header.items():
        b0, b1 = d['data_offsets']
        out[name] = np.frombuffer(data[base + b0:base + b1], _NP[d['dtype']]).reshape(d['shape'])
    return out, meta
