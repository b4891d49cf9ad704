"""test_http_encoding.py — HttpClient's `encoding=` against a stand-in server
(http.server on 127.0.0.1, no deformd): what the client sends and how it reads
what comes back, for every way of asking (issue 14.1).

Run by tests/e2e/python_client.sh (prints "ok NAME" / "FAIL NAME"); the same
requests against a real deformd are checked there.
  - outputs omitted: the request's parameters.encoding is sent (the server
    applies it to every output);
  - outputs named: each output also carries its own parameters.encoding;
  - float16 / int16 answers (binary and JSON) decode to float32: int16 JSON
    integers with the output's scale/offset, in float32 arithmetic, equal to
    the binary decoding of the same integers;
  - an answer in another encoding than the one asked (an older server that
    ignored it) raises DeformdError instead of passing for the asked one.
usage: python3 test_http_encoding.py
"""
import json
import os
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from deformd_client import HttpClient, DeformdError  # noqa: E402

fails = 0


def check(name, cond, detail=""):
    global fails
    if cond:
        print("ok " + name)
    else:
        fails += 1
        print("FAIL %s %s" % (name, detail))


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


# The stand-in's answers: 2 vertices, outputs positions and normals.
Q = [-32767, 0, 32767, 100, -100, 5]            # int16 integers
SCALE, OFFSET = [0.5, 0.25, 2.0], [1.0, -1.0, 0.0]
F16 = [1.0, 0.5, -2.0, 0.333251953125, 65504.0, 0.0]   # exact float16 values
F32 = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]


def i16_decoded():
    return [f32(f32(SCALE[i % 3] * q) + f32(OFFSET[i % 3])) for i, q in enumerate(Q)]


class Stand(BaseHTTPRequestHandler):
    requests = []
    answer_encoding = None   # None: the encoding asked; else always this one

    def log_message(self, *a):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(n)
        hl = self.headers.get("Inference-Header-Content-Length")
        req = json.loads(body[:int(hl) if hl else len(body)].decode())
        Stand.requests.append(req)
        rp = req.get("parameters") or {}
        outs = req.get("outputs") or [{"name": "positions"}, {"name": "normals"}]
        binary_all = bool(rp.get("binary_data_output"))
        encs = {"float32", "float16", "int16"}
        if any(e not in encs for e in [rp.get("encoding", "float32")] +
               [(o.get("parameters") or {}).get("encoding", "float32") for o in outs]):
            err = b'{"error":"request: parameters.encoding must be \\"float32\\", ..."}'
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(err)))
            self.end_headers()
            self.wfile.write(err)
            return
        doc = {"model_name": "m", "model_version": "1", "outputs": []}
        blobs = []
        for o in outs:
            op = o.get("parameters") or {}
            enc = Stand.answer_encoding or op.get("encoding") or rp.get("encoding") or "float32"
            binary = op.get("binary_data", binary_all)
            d = {"name": o["name"], "shape": [1, 2, 3],
                 "datatype": {"float32": "FP32", "float16": "FP16", "int16": "INT16"}[enc],
                 "parameters": {"encoding": enc}}
            if enc == "int16":
                d["parameters"]["clamped"] = 0
                d["deformd"] = {"scale": SCALE, "offset": OFFSET}  # the daemon's int16 box
                raw, vals = struct.pack("<6h", *Q), Q
            elif enc == "float16":
                raw, vals = struct.pack("<6e", *F16), F16
            else:
                raw, vals = struct.pack("<6f", *F32), F32
            if binary:
                d["parameters"]["binary_data_size"] = len(raw)
                blobs.append(raw)
            else:
                d["data"] = vals
            doc["outputs"].append(d)
        header = json.dumps(doc).encode()
        self.send_response(200)
        if blobs:
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Inference-Header-Content-Length", str(len(header)))
        else:
            self.send_header("Content-Type", "application/json")
        payload = header + b"".join(blobs)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def main():
    srv = HTTPServer(("127.0.0.1", 0), Stand)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    port = srv.server_address[1]
    try:
        with HttpClient("127.0.0.1", port) as c:
            # outputs omitted: the request-level encoding, both transports' forms
            for binary in (True, False):
                tag = "binary" if binary else "json"
                Stand.requests.clear()
                out = c.infer("m", {}, encoding="float16", binary=binary)
                req = Stand.requests[-1]
                check("py-enc-%s-omitted-request-level" % tag,
                      (req.get("parameters") or {}).get("encoding") == "float16"
                      and "outputs" not in req, req)
                check("py-enc-%s-omitted-float16-decoded" % tag,
                      sorted(out) == ["normals", "positions"]
                      and all(out[k].data.tolist() == F16 for k in out),
                      {k: out[k].data.tolist() for k in out})
                out = c.infer("m", {}, encoding="int16", binary=binary)
                want = i16_decoded()
                check("py-enc-%s-omitted-int16-decoded" % tag,
                      all(out[k].data.tolist() == want for k in out),
                      ({k: out[k].data.tolist() for k in out}, want))
            # outputs named: each carries the encoding itself
            Stand.requests.clear()
            out = c.infer("m", {}, outputs=["positions", "normals"], encoding="int16", batch=1)
            req = Stand.requests[-1]
            check("py-enc-per-output-sent",
                  [((o.get("parameters") or {}).get("encoding")) for o in req.get("outputs", [])]
                  == ["int16", "int16"], req)
            check("py-enc-per-output-int16-decoded",
                  out["positions"].shape == (1, 2, 3)
                  and out["positions"].data.tolist() == i16_decoded())
            # JSON int16 == binary int16, bit for bit
            oj = c.infer("m", {}, outputs=["positions"], encoding="int16", binary=False)
            ob = c.infer("m", {}, outputs=["positions"], encoding="int16", binary=True)
            check("py-enc-int16-json-equals-binary", oj["positions"] == ob["positions"],
                  (oj["positions"].data.tolist(), ob["positions"].data.tolist()))
            # no encoding asked: nothing sent, float32 read
            Stand.requests.clear()
            out = c.infer("m", {}, outputs=["positions"])
            req = Stand.requests[-1]
            check("py-enc-none-sends-none",
                  "encoding" not in (req.get("parameters") or {})
                  and "encoding" not in req["outputs"][0]["parameters"]
                  and out["positions"].data.tolist() == [f32(x) for x in F32], req)
            # a server answering float32 when float16 was asked: an error
            Stand.answer_encoding = "float32"
            for outputs in (None, ["positions"]):
                try:
                    c.infer("m", {}, outputs=outputs, encoding="float16")
                    check("py-enc-mismatch-raises-%s" % ("named" if outputs else "omitted"), False,
                          "no error")
                except DeformdError as e:
                    check("py-enc-mismatch-raises-%s" % ("named" if outputs else "omitted"),
                          "float16" in str(e) and "float32" in str(e), e)
            Stand.answer_encoding = None
            try:
                c.infer("m", {}, encoding="float64")
                check("py-enc-unknown-refused", False, "no error")
            except (ValueError, DeformdError) as e:
                # refused by the client itself, before sending anything
                check("py-enc-unknown-refused", isinstance(e, ValueError) and "float16" in str(e), e)
    finally:
        srv.shutdown()
        srv.server_close()
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
