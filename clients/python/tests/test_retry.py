"""test_retry.py — the Python client's one retry of idempotent requests, against
stand-in servers on 127.0.0.1 that fail the first way a router or a dying
daemon does (no deformd here; tests/e2e/scaleout.sh kills real daemons behind
nginx and counts the retries).

  HttpClient:
  - infer answered 502 then 200: one retry, the 200's outputs returned;
  - 502 twice: DeformdError (status 502) after exactly two tries;
  - a connection closed with no answer under an infer, then 200: one retry;
  - a load (POST /v2/repository/.../load, not idempotent) answered 502 is
    not sent again.
  SocketClient:
  - the first connection is closed after the INFER frame arrives (a daemon
    killed mid-request), the second answers: infer() returns the second's
    RESULT after one reconnect; ping() likewise;
  - DF_ESHUTDOWN on the first connection: one reconnect;
  - with another pipelined request in flight the lost call is not resent.
Prints "ok NAME" / "FAIL NAME".  usage: python3 test_retry.py
"""
import json
import os
import socket
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from deformd_client import HttpClient, SocketClient, DeformdError  # noqa: E402
from deformd_client import sock as S  # noqa: E402

fails = 0


def check(name, cond, detail=""):
    global fails
    if cond:
        print("ok " + name)
    else:
        fails += 1
        print("FAIL %s %s" % (name, detail))


# ------------------------------------------------------------------ HTTP
class Http(BaseHTTPRequestHandler):
    script = []  # per request: 502 | 200 | "drop"
    seen = []
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        self.rfile.read(n)
        Http.seen.append(self.path)
        what = Http.script.pop(0) if Http.script else 200
        if what == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if what == 502:
            body = b"<html>502 Bad Gateway</html>"
            self.send_response(502)
        else:
            body = json.dumps({"model_name": "m", "outputs": [
                {"name": "positions", "datatype": "FP32", "shape": [2, 3],
                 "data": [1, 2, 3, 4, 5, 6]}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def http_cases():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Http)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    try:
        for name, script, want_ok, want_tries in [
                ("http-502-then-200", [502, 200], True, 2),
                ("http-502-twice", [502, 502], False, 2),
                ("http-drop-then-200", ["drop", 200], True, 2)]:
            Http.script, Http.seen = list(script), []
            c = HttpClient("127.0.0.1", port)
            try:
                out = c.infer("m", {}, binary=False)
                got = list(out["positions"].data) == [1, 2, 3, 4, 5, 6]
            except DeformdError as e:
                got = False if want_ok else e.status == 502
            check(name, got and len(Http.seen) == want_tries and c.retries == 1,
                  "tries %d retries %d" % (len(Http.seen), c.retries))
            c.close()
        Http.script, Http.seen = [502, 200], []
        c = HttpClient("127.0.0.1", port, token="secret-token")
        try:
            c._request("POST", "/v2/repository/models/m/load", b"{}", {})
        except DeformdError:
            pass
        check("http-load-not-retried", len(Http.seen) == 1 and c.retries == 0,
              "tries %d" % len(Http.seen))
    finally:
        srv.shutdown()


# ---------------------------------------------------------------- socket
def read_frame(conn):
    buf = b""
    while len(buf) < 24:
        k = conn.recv(24 - len(buf))
        if not k:
            return None
        buf += k
    magic, ver, ftype, flags, rid, length = S._HDR.unpack(buf)
    body = b""
    while len(body) < length:
        k = conn.recv(length - len(body))
        if not k:
            return None
        body += k
    return ftype, rid, body


def result_payload():
    # RESULT: 1 pose, 1 output "positions" float32 [1, 2, 3]
    p = bytearray(struct.pack("<IHH", 1, 1, 0) + S._string("positions"))
    p += struct.pack("<BB", 0, 3) + struct.pack("<III", 1, 2, 3)
    S._pad8(p)
    return bytes(p) + struct.pack("<6f", 1, 2, 3, 4, 5, 6)


def sock_server(script):
    """Accepts one connection per script entry: "drop" closes it once a
    frame arrived; "shutdown" answers ERROR DF_ESHUTDOWN; "serve" answers
    every frame (PONG / RESULT)."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    log = []

    def run():
        for what in script:
            conn, _ = ls.accept()
            while True:
                f = read_frame(conn)
                if f is None:
                    break
                ftype, rid, body = f
                log.append((what, ftype))
                if what == "drop":
                    conn.close()
                    break
                if what == "shutdown":
                    p = struct.pack("<i", -10) + S._string("server is shutting down")
                    conn.sendall(S.frame(S.ERROR, rid, p))
                    continue
                if ftype == S.PING:
                    conn.sendall(S.frame(S.PONG, rid, body))
                else:
                    conn.sendall(S.frame(S.RESULT, rid, result_payload()))
            conn.close()
        ls.close()

    threading.Thread(target=run, daemon=True).start()
    return ls.getsockname()[1], log


def sock_cases():
    for name, script in [("sock-infer-after-drop", ["drop", "serve"]),
                         ("sock-infer-after-shutdown", ["shutdown", "serve"])]:
        port, log = sock_server(script)
        c = SocketClient("127.0.0.1", port, timeout=10)
        try:
            out = c.infer("alice")
            ok = list(out["positions"].data) == [1, 2, 3, 4, 5, 6]
        except (DeformdError, OSError) as e:
            ok, out = False, e
        check(name, ok and c.retries == 1 and len(log) == 2, "%r retries %d log %r" %
              (out if not ok else "", c.retries, log))
        c.close()
    port, log = sock_server(["drop", "serve"])
    c = SocketClient("127.0.0.1", port, timeout=10)
    try:
        ok = c.ping(b"hello") == b"hello"
    except (DeformdError, OSError):
        ok = False
    check("sock-ping-after-drop", ok and c.retries == 1)
    c.close()
    # another request in flight: the lost infer is not resent
    port, log = sock_server(["drop", "serve"])
    c = SocketClient("127.0.0.1", port, timeout=10)
    c.submit("alice")
    try:
        c.infer("alice")
        ok = False
    except (DeformdError, OSError):
        ok = True
    check("sock-no-retry-with-others-in-flight", ok and c.retries == 0, "retries %d" % c.retries)
    c.close()


http_cases()
sock_cases()
sys.exit(1 if fails else 0)
