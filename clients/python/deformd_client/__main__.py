"""__main__.py — `python3 -m deformd_client VERB ...`, the verbs of bin/deformctl.

    list                                   servable characters
    info NAME                              inputs, outputs, joints, clips (JSON)
    infer NAME --input name=FILE.npy|JSON [--output positions] [--encoding E]
               [--skinning lbs|dqs] [--transport http|socket] [--json] --out OUT.npy
    play NAME --clip C [--fps R] --out frames.npy    (socket, pipelined)
    mesh NAME --out rest.glb|rest.json

Common options: --host (127.0.0.1) --http-port (8000) --socket-port (8001)
--unix PATH --token-file FILE (its first line that is not blank or a #
comment; else the environment's DEFORMD_TOKEN), sent on HTTP as
Authorization: Bearer and on the socket as an AUTH frame. Exit status 0 success, 1 failure (message on stderr), 2 usage.
"""
import argparse
import json
import os
import sys

from . import npy
from .http import HttpClient, DeformdError
from .sock import SocketClient
from .tensor import as_tensor


def _parse_input(spec):
    if "=" not in spec:
        raise SystemExit("--input expects name=FILE.npy or name=JSON, got %r" % spec)
    name, val = spec.split("=", 1)
    if os.path.exists(val) and val.endswith(".npy"):
        return name, npy.read(val)
    try:
        return name, as_tensor(json.loads(val), name)
    except ValueError as e:
        raise SystemExit("--input %s: neither a .npy file nor a JSON array (%s)" % (name, e))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m deformd_client",
                                 description="deformd client (HTTP and binary socket)")
    ap.add_argument("--host", default=os.environ.get("DF_HOST", "127.0.0.1"))
    ap.add_argument("--http-port", type=int, default=int(os.environ.get("DF_HTTP_PORT", 8000)))
    ap.add_argument("--socket-port", type=int,
                    default=int(os.environ.get("DF_SOCKET_PORT", 8001)))
    ap.add_argument("--unix", default=None, help="Unix socket path of the binary protocol")
    ap.add_argument("--token-file", default=None,
                    help="bearer token file (else $DEFORMD_TOKEN)")
    sub = ap.add_subparsers(dest="verb", required=True)
    sub.add_parser("list")
    p = sub.add_parser("info")
    p.add_argument("name")
    p = sub.add_parser("infer")
    p.add_argument("name")
    p.add_argument("--input", action="append", default=[])
    p.add_argument("--output", action="append", default=None)
    p.add_argument("--encoding", default="float32", choices=["float32", "float16", "int16"])
    p.add_argument("--skinning", default=None, choices=["lbs", "dqs"])
    p.add_argument("--transport", default="http", choices=["http", "socket"])
    p.add_argument("--json", action="store_true", help="plain JSON instead of binary data")
    p.add_argument("--out", required=True)
    p = sub.add_parser("play")
    p.add_argument("name")
    p.add_argument("--clip", required=True)
    p.add_argument("--fps", type=float, default=None)
    p.add_argument("--out", required=True)
    p = sub.add_parser("mesh")
    p.add_argument("name")
    p.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    token = os.environ.get("DEFORMD_TOKEN") or None
    if a.token_file:
        try:
            with open(a.token_file) as f:
                token = next((ln.strip() for ln in f
                              if ln.strip() and not ln.strip().startswith("#")), None)
        except OSError as e:
            sys.stderr.write("deformd_client: --token-file: %s\n" % e)
            return 2
        if not token:
            sys.stderr.write("deformd_client: --token-file %s: no token in it\n" % a.token_file)
            return 2

    def http():
        return HttpClient(a.host, a.http_port, token=token)

    def sock():
        return SocketClient(a.host, a.socket_port, unix=a.unix, token=token)

    try:
        if a.verb == "list":
            with http() as c:
                for n in c.list():
                    print(n)
        elif a.verb == "info":
            with http() as c:
                print(json.dumps(c.info(a.name), indent=2))
        elif a.verb == "infer":
            inputs = dict(_parse_input(s) for s in a.input)
            if a.transport == "socket":
                with sock() as s:
                    out = s.infer(a.name, inputs, outputs=a.output, encoding=a.encoding,
                                  skinning=a.skinning)
            else:
                with http() as c:
                    out = c.infer(a.name, inputs, outputs=a.output, binary=not a.json,
                                  encoding=a.encoding,
                                  skinning=a.skinning)
            first = (a.output or ["positions"])[0]
            if first not in out:
                first = next(iter(out))
            npy.write(a.out, out[first])
            print("%s: %s %s -> %s" % (a.name, first, list(out[first].shape), a.out))
        elif a.verb == "play":
            def bar(done, total):
                w = 40
                k = w * done // max(total, 1)
                sys.stderr.write("\r[%s%s] %d/%d" % ("#" * k, "." * (w - k), done, total))
                if done == total:
                    sys.stderr.write("\n")
            with sock() as s:
                out = s.play(a.name, a.clip, fps=a.fps,
                             progress=bar if sys.stderr.isatty() else None)
            npy.write(a.out, out["positions"])
            print("%s/%s: %d frames -> %s" % (a.name, a.clip, out["positions"].shape[0], a.out))
        elif a.verb == "mesh":
            with http() as c:
                if a.out.endswith(".json"):
                    with open(a.out, "w") as f:
                        json.dump(c.mesh(a.name), f)
                else:
                    with open(a.out, "wb") as f:
                        f.write(c.mesh(a.name, "glb"))
            print("%s: rest mesh -> %s" % (a.name, a.out))
    except (DeformdError, OSError, ValueError) as e:
        sys.stderr.write("deformd_client: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
