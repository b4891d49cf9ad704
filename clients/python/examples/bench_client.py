#!/usr/bin/env python3
"""bench_client.py — how fast the Python client is against a running deformd.

    python3 clients/python/examples/bench_client.py [--character wuson] [--n 200]
        [--http-port 8000] [--socket-port 8001]

Measures, one client, one pose per request unless said: HTTP binary, HTTP
JSON, socket blocking, socket with 16 requests in flight, and clip streaming
(500 frames) with several chunk/window settings. Prints one line per mode.
A measurement, not a test: nothing is asserted (docs/clients.md has figures).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from deformd_client import HttpClient, SocketClient, Tensor  # noqa: E402


def rate(fn, n):
    fn()  # warm up
    t = time.time()
    for _ in range(n):
        fn()
    dt = time.time() - t
    return n / dt, 1000.0 * dt / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--character", default="wuson")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--http-port", type=int, default=8000)
    ap.add_argument("--socket-port", type=int, default=8001)
    a = ap.parse_args()
    ch = a.character
    with HttpClient(a.host, a.http_port) as c, SocketClient(a.host, a.socket_port) as s:
        meta = s.info(ch)
        inp = meta["inputs"][0]
        shape = inp["shape"]
        n = 1
        for d in shape:
            n *= d
        # a valid pose: the identity quaternion for rotation inputs, zeros otherwise
        if shape and shape[-1] == 4:
            data = [0.0, 0.0, 0.0, 1.0] * (n // 4)
        else:
            data = [0.0] * n
        pose = {inp["name"]: Tensor(shape, data)}
        nv = meta.get("vertices")
        print("character %s: %s vertices, input %s %s" % (ch, nv, inp["name"], shape))
        for label, fn, k in (
                ("HTTP binary", lambda: c.infer(ch, pose, outputs=["positions"]), a.n),
                ("HTTP JSON", lambda: c.infer(ch, pose, outputs=["positions"], binary=False),
                 max(a.n // 4, 1)),
                ("socket blocking", lambda: s.infer(ch, pose, outputs=["positions"]), a.n)):
            r, ms = rate(fn, k)
            print("%-34s %8.0f req/s  %7.2f ms/req" % (label, r, ms))
        batch = {k: Tensor((1,) + t.shape, t.data) for k, t in pose.items()}
        t0 = time.time()
        ids = [s.submit(ch, batch, 1, ["positions"]) for _ in range(16)]
        done = 0
        while done < a.n:
            s.result(ids.pop(0))
            done += 1
            ids.append(s.submit(ch, batch, 1, ["positions"]))
        for i in ids:
            s.result(i)
        dt = time.time() - t0
        print("%-34s %8.0f req/s" % ("socket, 16 in flight", (a.n + 16) / dt))
        clips = meta.get("clips") or []
        if clips:
            cl = max(clips, key=lambda x: x.get("duration", 0))
            times = [cl.get("duration", 0) * i / 499 for i in range(500)]
            for chunk, window in ((1, 1), (1, 16), (8, 8), (25, 8)):
                t0 = time.time()
                s.play(ch, cl["name"], times=times, chunk=chunk, window=window)
                dt = time.time() - t0
                print("%-34s %8.0f frames/s" % ("play %s 500 fr, %d x %d in flight"
                                                % (cl["name"], chunk, window), 500 / dt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
