"""bench_scaleout.py — how the router of deploy/nginx spreads characters
(`make bench-scaleout`, bench/bench_scaleout.sh; not run alone).

  bench_scaleout.py conf --dst FILE --ng DIR --listen-http P --listen-sock P
                         --http A,B,.. --sock A,B,.. [--plain]
      deploy/nginx/nginx.conf with its site lines replaced: the upstream
      servers become 127.0.0.1:PORT (one line each, any number; the same port
      may repeat), listen ports, pid, logs and temp paths under DIR, one
      worker; --plain drops "consistent" from both hash lines.
  bench_scaleout.py route --http PORT --sock PORT --n N --tag TAG
      asks the router once for each of N character names c0000.. over HTTP
      (GET /v2/models/NAME/ready, keep-alive: the daemon answers 404 for an
      unknown name, the router has routed it all the same) and once over the
      socket protocol (one connection per name, first frame an INFO naming
      it, as deformd_route.js reads it), and prints the tag line.
  bench_scaleout.py table --http-log L --stream-log L --ports-http A,B,C
                          --ports-sock A,B,C --killed I --n N
      reads nginx's access logs (log formats of deploy/nginx; the tag lines
      delimit the phases: all, killed, removed-consistent, removed-plain) and
      prints per protocol: characters per daemon, max/mean share; characters
      moved when daemon I died (and how many of them were not its own), when it
      was removed from the upstream list (consistent hash vs plain hash), each
      against the ideal 1/N.
"""
import http.client
import re
import socket
import struct
import sys

MAGIC, INFO = 0x4D524644, 0x0020


def arg(name):
    return sys.argv[sys.argv.index(name) + 1]


def cmd_conf():
    import os
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy", "nginx", "nginx.conf")
    s = open(src).read()
    ng = arg("--ng")
    subs = [("pid /tmp/nginx.pid;", "pid %s/nginx.pid;" % ng),
            ("error_log stderr warn;", "error_log %s/error.log warn;" % ng),
            ("access_log /dev/stdout deformd;", "access_log %s/http.log deformd;" % ng),
            ("access_log /dev/stdout deformd_stream;", "access_log %s/stream.log deformd_stream;" % ng),
            ("listen 8000;", "listen 127.0.0.1:%s;" % arg("--listen-http")),
            ("listen 8001;", "listen 127.0.0.1:%s;" % arg("--listen-sock")),
            ("worker_processes auto;", "worker_processes 1;")]
    for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        subs.append(("/tmp/nginx-%s;" % d, "%s/tmp-%s;" % (ng, d)))
    for a, b in subs:
        if s.count(a) != 1:
            sys.exit("nginx.conf: %r found %d times" % (a, s.count(a)))
        s = s.replace(a, b)
    for port, ports in (("8000", arg("--http")), ("8001", arg("--sock"))):
        lines = re.findall(r"^( *)server deformd-\d+:%s (.*)$" % port, s, re.M)
        if not lines:
            sys.exit("nginx.conf: no server line on port %s" % port)
        indent, rest = lines[0]
        new = "\n".join("%sserver 127.0.0.1:%s %s" % (indent, p, rest) for p in ports.split(","))
        s = re.sub(r"(^ *server deformd-\d+:%s .*\n)+" % port, new + "\n", s, count=1, flags=re.M)
    if "--plain" in sys.argv:
        s = s.replace("hash $deformd_key consistent;", "hash $deformd_key;")
    open(arg("--dst"), "w").write(s)


def cmd_route():
    hp, sp, n, tag = int(arg("--http")), int(arg("--sock")), int(arg("--n")), arg("--tag")
    c = http.client.HTTPConnection("127.0.0.1", hp, timeout=30)
    c.request("GET", "/tag/" + tag)  # a marker line in the access log
    c.getresponse().read()
    for i in range(n):
        c.request("GET", "/v2/models/c%04d/ready" % i)
        c.getresponse().read()
    c.close()
    for i in range(n):
        name = ("c%04d" % i).encode()
        payload = struct.pack("<H", len(name)) + name
        f = struct.pack("<IHHIQI", MAGIC, 1, INFO, 0, 1, len(payload)) + payload
        s = socket.create_connection(("127.0.0.1", sp), timeout=30)
        s.sendall(f)
        s.recv(24)  # the answer's header (ERROR: unknown character)
        s.close()
    # the stream log has no request line: a connection keyed by the tag marks it
    name = ("tag-" + tag).encode()
    payload = struct.pack("<H", len(name)) + name
    s = socket.create_connection(("127.0.0.1", sp), timeout=30)
    s.sendall(struct.pack("<IHHIQI", MAGIC, 1, INFO, 0, 1, len(payload)) + payload)
    s.recv(24)
    s.close()


def phases(path, ports, http):
    """{tag: {key: daemon index}} from a log, phases delimited by tag lines."""
    ix = {p: i for i, p in enumerate(ports)}
    out, cur, pending = {}, None, {}
    with open(path) as f:
        for line in f:
            kv = dict(x.split("=", 1) for x in line.split() if "=" in x and not x.startswith('"'))
            key = kv.get("key", "")
            if http and "/tag/" in line:
                cur = line.split("/tag/")[1].split()[0]
                out[cur] = {}
                continue
            if not http and key.startswith("tag-"):
                out[key[4:]] = pending
                pending = {}
                continue
            m = re.search(r" up=(.*?) (?:ust|st)=", line)  # "A, B" after a retry: B answered
            up = m.group(1).split(",")[-1].strip() if m else "-"
            if not key or ":" not in up:
                continue
            d = ix.get(int(up.rsplit(":", 1)[1]))
            if http and cur is not None:
                out[cur][key] = d
            elif not http:
                pending[key] = d
    return out


def cmd_table():
    n = int(arg("--n"))
    dead = int(arg("--killed"))
    for proto, log, ports in (("HTTP", arg("--http-log"), arg("--ports-http")),
                              ("socket", arg("--stream-log"), arg("--ports-sock"))):
        ports = [int(p) for p in ports.split(",")]
        ph = phases(log, ports, proto == "HTTP")
        base = ph.get("all", {})
        N = len(ports)
        share = [sum(1 for d in base.values() if d == i) for i in range(N)]
        print("%s: %d characters over %d daemons: %s per daemon, max/mean share %.2f" % (
            proto, len(base), N, share, max(share) / (len(base) / float(N)) if base else 0))
        for tag, what, b0 in (("killed", "daemon %d killed (max_fails)" % dead, "all"),
                              ("removed-consistent", "daemon %d removed from the list, "
                               "hash consistent" % dead, "all"),
                              ("killed-plain", "plain hash (no consistent), daemon %d killed"
                               % dead, "all-plain"),
                              ("removed-plain", "plain hash (no consistent), daemon %d removed "
                               "from the list" % dead, "all-plain")):
            m, base = ph.get(tag), ph.get(b0, {})
            if not m:
                continue
            moved = [k for k in base if k in m and m[k] != base[k]]
            others = [k for k in moved if base[k] != dead]
            print("%s: %s: %d of %d characters moved (%.3f; ideal 1/%d = %.3f), %d of them "
                  "not the dead daemon's" % (proto, what, len(moved), len(base),
                                             len(moved) / float(max(1, len(base))), N, 1.0 / N,
                                             len(others)))


if __name__ == "__main__":
    {"conf": cmd_conf, "route": cmd_route, "table": cmd_table}[sys.argv[1]]()
