#!/usr/bin/env python3
"""render_clip.py — what a render-farm node does: evaluate a clip of N frames
(default 500, evenly spaced over the clip's duration) of one character through
deformd's binary socket, pipelined, and write the vertex buffers as one
float32 .npy [N, V, 3].

    python3 clients/python/examples/render_clip.py wuson --frames 500 --out walk.npy
        [--clip NAME] [--host 127.0.0.1] [--socket-port 8001] [--unix PATH]
        [--encoding float32|float16|int16]

--clip takes a clip's name in any case, or a unique part of one ("run" plays
Wuson_Run); without --clip the clip whose name contains "walk" is rendered
(any case), else the character's first clip. Only the standard library is
needed (numpy is not).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from deformd_client import SocketClient, DeformdError, npy  # noqa: E402
from deformd_client.clips import match_clip, default_clip  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("character")
    ap.add_argument("--clip", default=None,
                    help="clip name, any case, or a unique part of one "
                         "(default: the clip named like *walk*, else the first)")
    ap.add_argument("--frames", type=int, default=500)
    ap.add_argument("--out", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--socket-port", type=int, default=int(os.environ.get("DF_SOCKET_PORT", 8001)))
    ap.add_argument("--unix", default=None)
    ap.add_argument("--encoding", default="float32", choices=["float32", "float16", "int16"])
    a = ap.parse_args()
    if not 1 <= a.frames <= 1000000:
        ap.error("--frames must be within 1..1000000")
    try:
        with SocketClient(a.host, a.socket_port, unix=a.unix) as s:
            info = s.info(a.character)
            clips = info.get("clips", [])
            if not clips:
                raise DeformdError("%s has no clips" % a.character)
            names = [c["name"] for c in clips]
            want = match_clip(names, a.clip, a.character) if a.clip else default_clip(names)
            clip = next(c for c in clips if c["name"] == want)
            dur = float(clip.get("duration", clip["times"][-1]))
            n = a.frames
            times = [dur * i / (n - 1) if n > 1 else 0.0 for i in range(n)]
            t0 = time.time()
            frames = s.play(a.character, clip["name"], times=times, encoding=a.encoding,
                            chunk=8, window=8)["positions"]
            dt = time.time() - t0
        npy.write(a.out, frames)
        print("%s/%s: %d frames x %d vertices in %.2f s (%.0f frames/s) -> %s"
              % (a.character, clip["name"], frames.shape[0], frames.shape[1], dt,
                 frames.shape[0] / max(dt, 1e-9), a.out))
    except (DeformdError, OSError) as e:
        sys.stderr.write("render_clip: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
