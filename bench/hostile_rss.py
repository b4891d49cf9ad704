#!/usr/bin/env python3
"""hostile_rss.py — deformd's peak memory under hostile clients against the
bound docs/server.md ("Limits and memory") states, and its answers checked.

    python3 bench/hostile_rss.py [--secs 20] [--repo demo-repo] [--bin bin]

Starts bin/deformd on free ports with small limits (below), then for --secs
seconds runs at once:
  * honest clients: HTTP and socket requests of wuson whose every answer is
    compared with the first one (same pose, same bytes);
  * JSON floods: 4 MB bodies of nested tiny arrays and of 1M-number data
    with a wrong shape (read, refused);
  * amplification: {"parameters":{"batch_size":4096}} (refused before work)
    and 200-pose answers on connections that never read;
  * holders: bodies and frames declared at max_body_bytes, trickled;
  * slowloris: 100 connections sending a header byte every 2 s.
It prints the limits, the bound of the formula without `base` and
`evaluation`, the daemon's RSS before the attack (base) and its peak
(VmHWM), the requests refused by status, and the wrong answers (must be 0).
Not a test (it asserts nothing); docs/server.md quotes a run.

    python3 bench/hostile_rss.py --soak [--secs 600] [--warmup 60]   (make soak)

Soak: first measures the honest clients' capacity alone (5 s, closed
loop), then runs the hostile mix for --secs with the honest clients paced
to 80 % of it, sampling the daemon's RSS every 10 s into a table (lowest
and highest of each window). Passes (exit 0) with 0 wrong answers, the
daemon alive, and the least-squares trend of every window's lowest RSS
after the warm-up within 5 % over the run: the memory the daemon keeps
does not grow (the windows themselves vary with the answers in flight).
"""
import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

LIMITS = {
    "max_body_bytes": 16 << 20,
    "max_frame_bytes": 16 << 20,
    "max_input_buffered_bytes": 64 << 20,
    "max_output_bytes": 32 << 20,
    "max_output_inflight_bytes": 96 << 20,
    "pool_keep_bytes": 16 << 20,
    "max_connections": 512,
    "http_connection_memory": 16384,
    "header_timeout_s": 5,
    "body_timeout_s": 5,
    "idle_timeout_s": 5,
    "max_connections_per_peer": 400,
}


def rss(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.status = {}
        self.wrong = 0
        self.ok = 0

    def add(self, what):
        with self.lock:
            self.status[what] = self.status.get(what, 0) + 1


def http_raw(port, method, path, body=b"", headers=None, read=True, timeout=30):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    h = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
    for k, v in (headers or {}).items():
        h += f"{k}: {v}\r\n"
    s.sendall(h.encode() + b"\r\n" + body)
    if not read:
        return s, None
    data = b""
    try:
        while True:
            c = s.recv(1 << 20)
            if not c:
                break
            data += c
    except OSError:
        pass
    s.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1") else -1
    return status, payload


def frame(ftype, rid, payload):
    return struct.pack("<IHHIQI", 0x4D524644, 1, ftype, 0, rid, len(payload)) + payload


def infer_payload(character, n_poses):
    name = character.encode()
    p = struct.pack("<IIBBHH", n_poses, 0, 0, 0, 0, 0) + struct.pack("<H", len(name)) + name
    p += struct.pack("<H", 0)  # no clip
    return p


def recv_frame(s):
    hdr = b""
    while len(hdr) < 24:
        c = s.recv(24 - len(hdr))
        if not c:
            return None, None
        hdr += c
    _, _, ftype, _, rid, n = struct.unpack("<IHHIQI", hdr)
    body = b""
    while len(body) < n:
        c = s.recv(min(1 << 20, n - len(body)))
        if not c:
            return None, None
        body += c
    return ftype, body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--secs", type=float, default=20)
    ap.add_argument("--repo", default="demo-repo")
    ap.add_argument("--bin", default="bin")
    ap.add_argument("--soak", action="store_true")
    ap.add_argument("--warmup", type=float, default=60)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="hostile_rss.")
    ready = os.path.join(tmp, "ready")
    args = [os.path.join(a.bin, "deformd"), "--repository", a.repo, "--http-port", "0",
            "--socket-port", "0", "--ready-file", ready]
    for k, v in LIMITS.items():
        args += ["--set", f"{k}={v}"]
    log = open(os.path.join(tmp, "deformd.log"), "w")
    d = subprocess.Popen(args, stderr=log)
    for _ in range(300):
        if os.path.exists(ready):
            break
        time.sleep(0.05)
    hp, sp = [int(x.split("=")[1]) for x in open(ready).read().split()[:2]]
    st = Stats()
    stop = time.time() + a.secs
    ref = {}

    good_body = json.dumps({"parameters": {"clip": "Wuson_Walk", "time": 0.5, "binary_data_output": True}}).encode()
    status, ref["http"] = http_raw(hp, "POST", "/v2/models/wuson/infer", good_body)
    ref["http"] = ref["http"][ref["http"].find(b"}]}") + 3:]  # the binary part
    s = socket.create_connection(("127.0.0.1", sp))
    s.sendall(frame(0x10, 1, infer_payload("wuson", 2)))
    _, ref["sock"] = recv_frame(s)
    s.close()
    time.sleep(0.5)
    base = rss(d.pid, "VmRSS:")
    pace = {"gap": 0.0}  # seconds between an honest client's requests

    def honest_http():
        while time.time() < stop:
            if pace["gap"]:
                time.sleep(pace["gap"])
            try:
                status, body = http_raw(hp, "POST", "/v2/models/wuson/infer", good_body)
            except OSError:
                st.add("honest http: connection error")
                continue
            if status != 200:
                st.add(f"honest http: {status}")
                continue
            with st.lock:
                if body[body.find(b"}]}") + 3:] == ref["http"]:
                    st.ok += 1
                else:
                    st.wrong += 1

    def honest_sock():
        while time.time() < stop:
            try:
                s = socket.create_connection(("127.0.0.1", sp), timeout=30)
                for i in range(20):
                    if pace["gap"]:
                        time.sleep(pace["gap"])
                    s.sendall(frame(0x10, 7, infer_payload("wuson", 2)))
                    ftype, body = recv_frame(s)
                    if ftype != 0x11:
                        st.add(f"honest socket: frame {ftype}")
                        continue
                    with st.lock:
                        if body == ref["sock"]:
                            st.ok += 1
                        else:
                            st.wrong += 1
                s.close()
            except OSError:
                st.add("honest socket: connection error")

    def flood_json():
        tiny = b'{"inputs":[{"name":"joint_rotations","datatype":"FP32","shape":[1],"data":[' + \
            b",".join([b"[]"] * (1 << 20)) + b"]}]}"
        flat = b'{"inputs":[{"name":"joint_rotations","datatype":"FP32","shape":[7],"data":[' + \
            b",".join([b"0"] * (1 << 20)) + b"]}]}"
        k = 0
        while time.time() < stop:
            try:
                status, _ = http_raw(hp, "POST", "/v2/models/wuson/infer", tiny if k % 2 else flat)
                st.add(f"json flood: {status}")
            except OSError:
                st.add("json flood: connection error")
            k += 1

    def amplify():
        while time.time() < stop:
            try:
                status, _ = http_raw(hp, "POST", "/v2/models/wuson/infer",
                                     b'{"parameters":{"batch_size":4096}}')
                st.add(f"4096 poses: {status}")
                s, _ = http_raw(hp, "POST", "/v2/models/wuson/infer",
                                b'{"parameters":{"batch_size":200}}', read=False)
                time.sleep(1.0)  # never read: the answer stays in flight
                s.close()
            except OSError:
                st.add("amplify: connection error")

    def holders():
        while time.time() < stop:
            conns = []
            try:
                for _ in range(3):
                    s = socket.create_connection(("127.0.0.1", hp))
                    s.sendall(f"POST /v2/models/wuson/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {16 << 20}\r\n\r\n".encode())
                    conns.append(s)
                    f = socket.create_connection(("127.0.0.1", sp))
                    f.sendall(struct.pack("<IHHIQI", 0x4D524644, 1, 0x10, 0, 1, 16 << 20) + b"\0" * 1024)
                    conns.append(f)
                for _ in range(10):
                    time.sleep(0.5)
                    for c in conns:
                        c.send(b"\0")
            except OSError:
                pass
            for c in conns:
                c.close()
            st.add("holder round")

    def slowloris():
        conns = []
        for _ in range(100):
            try:
                c = socket.create_connection(("127.0.0.1", hp))
                c.sendall(b"POST /v2/models/wuson/infer HTTP/1.1\r\n")
                conns.append(c)
            except OSError:
                st.add("slowloris: refused")
        closed = 0
        while time.time() < stop:
            time.sleep(2)
            for c in conns:
                try:
                    c.send(b"X")
                except OSError:
                    closed += 1
        st.add(f"slowloris: {closed} sends failed (closed by the daemon)")
        for c in conns:
            c.close()

    honest = [honest_http, honest_http, honest_sock]
    if a.soak:  # capacity of the honest clients alone, then 80 % of it
        stop = time.time() + 5
        ts = [threading.Thread(target=f) for f in honest]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        cap = st.ok / 5.0
        per_client = 0.8 * cap / len(honest)
        service = len(honest) / cap  # seconds one request took at capacity
        pace["gap"] = max(0.0, 1.0 / per_client - service)
        print(f"capacity {cap:.0f} honest answers/s alone; paced to {0.8 * cap:.0f}/s with the hostile mix")
        st.ok = 0
        stop = time.time() + a.secs
    threads = [threading.Thread(target=f) for f in
               honest + [flood_json, flood_json, amplify, amplify, holders, slowloris]]
    t0 = time.time()
    for t in threads:
        t.start()
    peak_seen = 0
    windows = []  # (end s, lowest RSS, highest RSS, right, wrong)
    wlo, whi, wend = 1 << 62, 0, t0 + 10
    while any(t.is_alive() for t in threads):
        r = rss(d.pid, "VmRSS:")
        peak_seen = max(peak_seen, r)
        wlo, whi = min(wlo, r), max(whi, r)
        if time.time() >= wend:
            windows.append((wend - t0, wlo, whi, st.ok, st.wrong))
            wlo, whi, wend = 1 << 62, 0, wend + 10
        time.sleep(0.1)
    peak = rss(d.pid, "VmHWM:")
    alive = d.poll() is None
    d.terminate()
    d.wait(timeout=30)
    L = LIMITS
    bound = (2 * L["max_input_buffered_bytes"] + L["max_output_inflight_bytes"] + 3 * L["pool_keep_bytes"]
             + L["max_connections"] * (L["http_connection_memory"] + 65536))
    mib = lambda x: x / 1048576
    print("limits: " + ", ".join(f"{k}={v}" for k, v in L.items()))
    print(f"| base RSS (before) | bound - base - evaluation | peak RSS (VmHWM) | peak - base |")
    print(f"| {mib(base):.1f} MiB | {mib(bound):.1f} MiB | {mib(peak):.1f} MiB | {mib(peak - base):.1f} MiB |")
    print(f"honest answers: {st.ok} right, {st.wrong} wrong; daemon {'alive' if alive else 'DEAD'} after {a.secs:.0f} s")
    for k in sorted(st.status):
        print(f"  {k}: {st.status[k]}")
    flat = True
    if a.soak:
        print("| t (s) | lowest RSS (MiB) | highest RSS (MiB) | honest right | wrong |")
        print("|---|---|---|---|---|")
        for end, lo, hi, ok, wrong in windows:
            print(f"| {end:.0f} | {mib(lo):.1f} | {mib(hi):.1f} | {ok} | {wrong} |")
        pts = [(end, lo) for end, lo, hi, ok, wrong in windows if end > a.warmup]
        if len(pts) >= 2:
            n = len(pts)
            mt = sum(t for t, _ in pts) / n
            mv = sum(v for _, v in pts) / n
            slope = sum((t - mt) * (v - mv) for t, v in pts) / sum((t - mt) ** 2 for t, _ in pts)
            drift = slope * (pts[-1][0] - pts[0][0]) / mv
            dev = max(abs(v - mv) / mv for _, v in pts)
            flat = abs(drift) <= 0.05
            print(f"after the {a.warmup:.0f} s warm-up: lowest RSS per window "
                  f"{mib(min(v for _, v in pts)):.1f}-{mib(max(v for _, v in pts)):.1f} MiB (at most "
                  f"{100 * dev:.1f} % from their mean, the answers in flight at the sample); "
                  f"least-squares trend over the run {100 * drift:+.1f} % "
                  f"({'flat' if flat else 'GROWING'}: within 5 %)")
    return 0 if alive and st.wrong == 0 and flat else 1


if __name__ == "__main__":
    sys.exit(main())
