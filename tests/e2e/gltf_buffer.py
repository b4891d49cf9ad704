"""gltf_buffer.py — the binary buffer of a glTF written by the e2e tests' generators
(tests/e2e/avatar_gltf.py, the multi-mesh character of tests/e2e/import_assets.sh): arrays
become accessors over views of one embedded buffer."""
import base64, struct
import numpy as np


class Buffer:
    def __init__(self):
        self.blob, self.views, self.accessors = bytearray(), [], []

    def add(self, arr, fmt, typ, ctype):
        """arr (rows of typ: SCALAR, VEC3, VEC4, MAT4) packed as struct format fmt with glTF
        componentType ctype; float accessors carry min/max. Returns the accessor index."""
        arr = np.asarray(arr)
        data = struct.pack("<%d%s" % (arr.size, fmt), *arr.ravel().tolist())
        while len(self.blob) % 4:
            self.blob.append(0)
        self.views.append({"buffer": 0, "byteOffset": len(self.blob), "byteLength": len(data)})
        self.blob.extend(data)
        a = {"bufferView": len(self.views) - 1, "componentType": ctype,
             "count": int(arr.shape[0]), "type": typ}
        if typ == "VEC3" and ctype == 5126:
            a["min"] = arr.min(0).tolist(); a["max"] = arr.max(0).tolist()
        if typ == "SCALAR" and ctype == 5126:
            a["min"] = [float(arr.min())]; a["max"] = [float(arr.max())]
        self.accessors.append(a)
        return len(self.accessors) - 1

    def gltf_fields(self):
        """the glTF's accessors, bufferViews and buffers (embedded as a data URI)"""
        return {"accessors": self.accessors, "bufferViews": self.views,
                "buffers": [{"byteLength": len(self.blob), "uri": "data:application/octet-stream;base64,"
                             + base64.b64encode(bytes(self.blob)).decode()}]}
