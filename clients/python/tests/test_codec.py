"""test_codec.py — the Python client's pure parts against independent references.

Run by tests/e2e/python_client.sh (prints "ok NAME" / "FAIL NAME"):
  - socket frames against the hand-written golden frames of docs/protocol.md
    (tests/data/golden_frames/*.hex, written by the socket helper, not by us);
  - .npy writer/reader against numpy.save/numpy.load (when numpy is present);
  - float16 decoding against numpy's float16 (all 65536 bit patterns).
usage: python3 test_codec.py GOLDEN_DIR
"""
import os
import struct
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from deformd_client import Tensor, npy, HAVE_NUMPY  # noqa: E402
from deformd_client import sock  # noqa: E402
from deformd_client.tensor import decode_f16  # noqa: E402

fails = 0


def check(name, cond, detail=""):
    global fails
    if cond:
        print("ok " + name)
    else:
        fails += 1
        print("FAIL %s %s" % (name, detail))


def golden(gdir, name):
    out = bytearray()
    with open(os.path.join(gdir, name + ".hex")) as f:
        for line in f:
            line = line.split("#", 1)[0]
            out += bytes.fromhex("".join(line.split()))
    return bytes(out)


def main(gdir):
    # INFER frames, encoded by us, byte for byte equal to the golden ones
    g = golden(gdir, "infer_clip")
    mine = sock.encode_infer(42, "wuson", None, batch=2, encoding="int16", skinning="dqs",
                             clip="Walk", times=[0.0, 0.5])
    check("py-golden-infer-clip", mine == g, "\n%s\n%s" % (mine.hex(), g.hex()))
    g = golden(gdir, "infer_basic")
    mine = sock.encode_infer(0x0102030405060708, "wuson",
                             {"weights": Tensor((1, 2), [0.5, 1.0])}, batch=1,
                             outputs=["positions"], encoding="float16")
    check("py-golden-infer-basic", mine == g, "\n%s\n%s" % (mine.hex(), g.hex()))
    g = golden(gdir, "infer_sequence")
    mine = sock.encode_infer(43, "shirt", None, outputs=["state"], sequence_id="take-2",
                             sequence_start=True)
    check("py-golden-infer-sequence", mine == g, "\n%s\n%s" % (mine.hex(), g.hex()))
    g = golden(gdir, "infer_sequence_end")
    mine = sock.encode_infer(44, "ann", None, sequence_id=7, sequence_end=True)
    check("py-golden-infer-sequence-end", mine == g, "\n%s\n%s" % (mine.hex(), g.hex()))
    g = golden(gdir, "auth")
    check("py-golden-auth", sock.encode_auth(1, "alpha-token-0001") == g)
    g = golden(gdir, "ping")
    check("py-golden-ping", sock.frame(sock.PING, struct.unpack_from("<Q", g, 12)[0], g[24:]) == g)
    g = golden(gdir, "info")
    check("py-golden-info", sock.frame(sock.INFO, 3, sock._string("wuson")) == g)

    # RESULT / ERROR / INFO_RESULT decoding
    r = sock.decode_result(golden(gdir, "result_f32")[24:])
    check("py-golden-result-f32", r["positions"].shape == (1, 2, 3)
          and r["positions"].data.tolist() == [1, 2, 3, -1, 0.5, 0])
    r = sock.decode_result(golden(gdir, "result_f16")[24:])
    check("py-golden-result-f16", r["normals"].shape == (1, 2)
          and r["normals"].data.tolist() == [1.0, -2.0])
    r = sock.decode_result(golden(gdir, "result_i16")[24:])
    check("py-golden-result-i16", r["positions"].data.tolist() == [2.0, -3.0, 100.0],
          str(r["positions"].data.tolist()))
    e = sock.decode_error(golden(gdir, "error")[24:])
    check("py-golden-error", e.code == -6 and "no character bob" in str(e), str(e))
    p = golden(gdir, "info_result")[24:]
    n = struct.unpack_from("<I", p)[0]
    check("py-golden-info-result", p[4:4 + n] == b'{"a":1}')

    # .npy and float16 against numpy
    if HAVE_NUMPY:
        import numpy as np
        d = tempfile.mkdtemp()
        a = (np.arange(2 * 5 * 3, dtype="<f4").reshape(2, 5, 3) - 7.25) / 3
        npy.write(os.path.join(d, "a.npy"), Tensor.from_bytes(a.shape, a.tobytes()))
        b = np.load(os.path.join(d, "a.npy"))
        check("py-npy-write-vs-numpy", b.dtype == np.float32 and (a == b).all())
        np.save(os.path.join(d, "c.npy"), a[1])
        t = npy.read(os.path.join(d, "c.npy"))
        check("py-npy-read-vs-numpy", t.shape == (5, 3) and t.to_bytes() == a[1].tobytes())
        bits = np.arange(65536, dtype="<u2")
        ref = bits.view("<f2").astype("<f4")
        import deformd_client.tensor as tm
        saved = tm._np
        tm._np = None  # the pure-Python path
        mine = np.frombuffer(decode_f16((65536,), bits.tobytes()).to_bytes(), dtype="<f4")
        tm._np = saved
        same = ((mine == ref) | (np.isnan(mine) & np.isnan(ref))).all()
        check("py-f16-decode-all-65536", bool(same))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
