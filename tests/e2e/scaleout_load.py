"""scaleout_load.py — clients and log analysis of tests/e2e/scaleout.sh (not run alone).

  scaleout_load.py chars REPO
      declares the test's 48 characters in REPO's config.json files: w00..w23 on
      the Wuson model (even: linear blend, odd: dual-quaternion skinning) and
      m00..m23 on the morph cube (default weights [i/23, 1 - i/23]).
  scaleout_load.py ref --http PORT --out REFS
      the reference: every request the clients will send (8 per character),
      asked of ONE daemon directly (HTTP binary, float32), saved with numpy.
  scaleout_load.py run --http PORT --sock PORT --refs REFS --seconds S --out RES
      64 client threads through the router for S seconds with the project's
      Python client (deformd_client, whose one retry of an idempotent request
      is part of what is tested): clients 0..31 over HTTP (binary), 32..63 over
      the socket; client i asks for character i % 48 (characters 0..15 get
      both protocols), request k = n % 8 of its n-th request; a socket client
      opens a new connection every 25 requests (one job each), so a connection
      stays on one daemon while new ones follow the ring. Every answer is
      compared with the reference: max |a - ref| <= 1e-5 x max |ref| (a batch
      may sum in another order than the reference's lone request; a wrong
      character, pose or skinning is off by far more). Records per request:
      protocol, character, start, end, ok, mismatch, error.
  scaleout_load.py analyze --res RES --events EV --http-log L --stream-log L
                           --http-ports A,B,C --sock-ports A,B,C
      reads nginx's access logs (which daemon served each request or
      connection, in the log_format of deploy/nginx) and the events of the run
      (kill, restart, ready, term), and prints "ok NAME" / "FAIL NAME" lines
      and figures: share per daemon, characters moved when a daemon died
      (must be exactly the dead daemon's: no other character may move), time
      to recover after its restart, failed requests (0: the router retries a
      request whose daemon died under it, the client library retries once a
      request whose connection was lost), wrong answers (0).
"""
import json
import os
import re
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
from deformd_client import HttpClient, SocketClient, DeformdError  # noqa: E402

NW = NM = 24
CHARS = ["w%02d" % i for i in range(NW)] + ["m%02d" % i for i in range(NM)]
NREQ = 8          # distinct requests per character
N_CLIENTS = 64
N_HTTP = 32
CONN_REQUESTS = 25  # socket: requests per connection
TOL = 1e-5


def arg(name, default=None):
    a = sys.argv
    return a[a.index(name) + 1] if name in a else default


def request(char, k):
    """(inputs, parameters for HTTP, clip, time) of request k of char."""
    if char[0] == "w":
        t = 0.05 + 0.11 * k
        return None, {"clip": "Wuson_Walk", "time": t}, "Wuson_Walk", t
    if k % 2 == 0:
        return None, None, None, None  # the character's default weights
    return {"weights": [k / 8.0, 0.3]}, None, None, None


def http_infer(c, char, k):
    ins, params, _, _ = request(char, k)
    out = c.infer(char, ins, outputs=["positions"], encoding="float32", parameters=params)
    return np.frombuffer(out["positions"].data, dtype=np.float32).reshape(out["positions"].shape)


def sock_infer(c, char, k):
    ins, _, clip, t = request(char, k)
    out = c.infer(char, ins, outputs=["positions"], clip=clip, times=t)
    return np.frombuffer(out["positions"].data, dtype=np.float32).reshape(out["positions"].shape)


# ------------------------------------------------------------------ chars
def cmd_chars():
    repo = sys.argv[2]
    for model, chars in (("wuson", {("w%02d" % i): {"skinning": "lbs" if i % 2 == 0 else "dqs"}
                                    for i in range(NW)}),
                         ("morphcube", {("m%02d" % i): {"defaults": {"weights": [
                             i / (NM - 1.0), 1 - i / (NM - 1.0)]}} for i in range(NM)})):
        p = os.path.join(repo, model, "config.json")
        with open(p) as f:
            cfg = json.load(f)
        cfg["characters"] = chars
        with open(p, "w") as f:
            json.dump(cfg, f, indent=1)


# -------------------------------------------------------------------- ref
def cmd_ref():
    c = HttpClient("127.0.0.1", int(arg("--http")))
    refs = {}
    for ch in CHARS:
        for k in range(NREQ):
            refs["%s/%d" % (ch, k)] = http_infer(c, ch, k)
    c.close()
    # the characters must differ from each other where the test relies on it
    assert not np.array_equal(refs["w00/1"], refs["w01/1"]), "lbs and dqs characters agree"
    assert not np.array_equal(refs["m00/0"], refs["m05/0"]), "morph characters agree"
    np.savez(arg("--out"), **{k.replace("/", "_"): v for k, v in refs.items()})
    print("# reference: %d answers from one daemon" % len(refs))


# -------------------------------------------------------------------- run
def cmd_run():
    hp, sp = int(arg("--http")), int(arg("--sock"))
    secs = float(arg("--seconds"))
    z = np.load(arg("--refs"))
    refs = {k: z[k] for k in z.files}
    records = [[] for _ in range(N_CLIENTS)]
    retries = [0] * N_CLIENTS
    t_end = time.time() + secs

    def client(i):
        char = CHARS[i % len(CHARS)]
        http = i < N_HTTP
        c = None
        n = 0
        while time.time() < t_end:
            k = n % NREQ
            t0 = time.time()
            ok, bad, err = False, False, ""
            try:
                if c is None:
                    c = HttpClient("127.0.0.1", hp, timeout=30) if http else \
                        SocketClient("127.0.0.1", sp, timeout=30)
                a = (http_infer if http else sock_infer)(c, char, k)
                ref = refs["%s_%d" % (char, k)]
                bad = a.shape != ref.shape or \
                    float(np.max(np.abs(a - ref))) > TOL * float(np.max(np.abs(ref)))
                ok = not bad
            except (DeformdError, OSError) as e:
                err = str(e)[:200]
                if c is not None:
                    retries[i] += c.retries
                    c.close()
                    c = None
            records[i].append(("http" if http else "sock", char, t0, time.time(), ok, bad, err))
            n += 1
            if c is not None and not http and n % CONN_REQUESTS == 0:
                retries[i] += c.retries
                c.close()
                c = None
        if c is not None:
            retries[i] += c.retries
            c.close()

    th = [threading.Thread(target=client, args=(i,)) for i in range(N_CLIENTS)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    flat = [r for rs in records for r in rs]
    with open(arg("--out"), "w") as f:
        json.dump({"records": flat, "retries": {"http": sum(retries[:N_HTTP]),
                                                "sock": sum(retries[N_HTTP:])}}, f)
    print("# %d requests in %.0f s from %d clients" % (len(flat), secs, N_CLIENTS))


# ---------------------------------------------------------------- analyze
fails = 0


def check(name, cond, detail=""):
    global fails
    print(("ok %s" % name) if cond else ("FAIL %s %s" % (name, detail)))
    fails += 0 if cond else 1


def parse_log(path, ports):
    """[(t, key, daemon index of the final upstream or None, status)]; t is when
    the request ended (HTTP) or when the connection began (stream lines carry
    the session's length t=, the line is written when it ends); the last field
    is when it ended."""
    port_ix = {p: i for i, p in enumerate(ports)}
    out = []
    with open(path) as f:
        for line in f:
            fld = line.split()
            kv = dict(x.split("=", 1) for x in fld[1:] if "=" in x and not x.startswith('"'))
            m = re.search(r" up=(.*?) (?:ust|st)=", line)  # "A, B" after a retry: B answered
            up = m.group(1).split(",")[-1].strip() if m else "-"
            d = None
            if ":" in up:
                d = port_ix.get(int(up.rsplit(":", 1)[1]))
            t = float(fld[0]) - (float(kv["t"]) if "t" in kv else 0.0)
            out.append((t, kv.get("key", ""), d, kv.get("st", ""), float(fld[0])))
    return out


def owner(lines, t0, t1):
    """key -> set of daemons that served it (final upstream, status 200) in [t0, t1)."""
    m = {}
    for t, key, d, st, _ in lines:
        if t0 <= t < t1 and key and d is not None and st == "200":
            m.setdefault(key, set()).add(d)
    return m


def cmd_analyze():
    with open(arg("--res")) as f:
        res = json.load(f)
    recs = res["records"]
    ev = {}
    with open(arg("--events")) as f:
        for line in f:
            k, v = line.split()
            ev[k] = float(v)
    hports = [int(p) for p in arg("--http-ports").split(",")]
    sports = [int(p) for p in arg("--sock-ports").split(",")]
    logs = {"http": parse_log(arg("--http-log"), hports),
            "sock": parse_log(arg("--stream-log"), sports)}
    dead = int(arg("--killed"))
    n = len(recs)
    failed = [r for r in recs if not r[4] and not r[5]]
    wrong = [r for r in recs if r[5]]
    print("# requests: %d (http %d, socket %d); library retries: http %d, socket %d" % (
        n, sum(r[0] == "http" for r in recs), sum(r[0] == "sock" for r in recs),
        res["retries"]["http"], res["retries"]["sock"]))
    check("scaleout-load-ran", n >= 1000, "only %d requests" % n)
    check("scaleout-answers-equal-single-daemon", not wrong,
          "%d answers differ from the single daemon's, e.g. %s" % (len(wrong), wrong[:1]))
    # Failed requests. Only requests in flight on the dead daemon could fail, and
    # the router's and the library's retries leave none.
    inflight = [r for r in recs if r[2] <= ev["kill"] <= r[3]]
    print("# failed requests: %d (requests in flight on all daemons when one was killed: %d; "
          "failed around the SIGTERM: %d)" % (len(failed), len(inflight),
                            sum(1 for r in failed if abs(r[2] - ev["term"]) < 5)))
    for r in failed[:5]:
        print("#   %s %s at +%.2f s: %s" % (r[0], r[1], r[2] - ev["start"], r[6]))
    check("scaleout-no-failed-request", not failed, "%d failed" % len(failed))

    owners = {}
    for proto in ("http", "sock"):
        L = logs[proto]
        pn = "HTTP" if proto == "http" else "socket"
        # phase 1: all three daemons up, from the start to the kill (less 0.1 s:
        # the start of a connection is its end less its length, as nginx's
        # cached clock gives them)
        before = owner(L, ev["start"], ev["kill"] - 0.1)
        multi = {k: v for k, v in before.items() if len(v) > 1}
        check("scaleout-%s-character-stays-on-one-daemon" % proto, before and not multi,
              "%d characters served by several daemons: %s" % (len(multi), list(multi.items())[:3]))
        own = {k: min(v) for k, v in before.items()}
        owners[proto] = own
        if not own:
            check("scaleout-%s-routed-by-character" % proto, False,
                  "no %s request or connection carried a routing key" % pn)
            continue
        share = [sum(1 for d in own.values() if d == i) for i in range(3)]
        reqs = [sum(1 for t, k, d, st, _ in L if d == i and t < ev["kill"]) for i in range(3)]
        print("# %s share before the kill: characters per daemon %s of %d (max/mean %.2f); "
              "%s per daemon %s" % (pn, share, len(own), max(share) / (len(own) / 3.0),
                                    "requests" if proto == "http" else "connections", reqs))
        check("scaleout-%s-every-daemon-serves" % proto, min(share) > 0, str(share))
        # phase 2: the killed daemon is down (from the kill until its restart)
        during = owner(L, ev["kill"] + 0.3, ev["restart"])
        served_by_dead = sum(1 for t, k, d, st, _ in L
                             if d == dead and ev["kill"] + 0.3 <= t < ev["restart"])
        check("scaleout-%s-dead-daemon-gets-nothing" % proto, served_by_dead == 0,
              "%d answers from the dead daemon" % served_by_dead)
        moved = sorted(k for k in during if k in own and during[k] != {own[k]})
        its = sorted(k for k in own if own[k] == dead)
        wrongly = [k for k in moved if own[k] != dead]
        print("# %s: daemon %d killed: characters moved %d = its share %d of %d (%.2f; ideal "
              "1/3 = 0.33); other characters moved: %d" % (
                  pn, dead, len(moved), len(its), len(own), len(its) / max(1, len(own)),
                  len(wrongly)))
        check("scaleout-%s-only-dead-share-moves" % proto, not wrongly,
              "moved although their daemon lived: %s" % wrongly)
        seen_its = [k for k in its if k in during]
        check("scaleout-%s-dead-share-moved" % proto,
              seen_its and all(dead not in during[k] for k in seen_its),
              "its characters seen %d" % len(seen_its))
        # phase 3: restarted; time to the first answer it served again
        back = [(t, e) for t, k, d, st, e in L if d == dead and t >= ev["ready"] and st == "200"]
        back.sort()
        if back:
            print("# %s: daemon %d ready again %.2f s after the kill; first answer from it "
                  "%.2f s after it was ready" % (pn, dead, ev["ready"] - ev["kill"],
                                                 back[0][0] - ev["ready"]))
        check("scaleout-%s-daemon-back" % proto, bool(back), "no answer from it after its restart")
        if back and proto == "http":
            after = owner(L, back[0][0] + 0.5, ev["term"])
            home = [k for k in after if k in own and after[k] != {own[k]}]
            check("scaleout-http-characters-return", not home,
                  "%d characters not on their daemon again: %s" % (len(home), home[:5]))
        elif back:
            # A connection stays where it was opened; connections opened after
            # the recovery must follow the ring again. nginx lets one connection
            # probe a failed daemon and counts it live again once that probe
            # ends; its failure clock ticks in whole seconds. So the window
            # opens 1.1 s after the first connection to the restarted daemon
            # ended.
            # It closes 0.1 s before the SIGTERM (nginx's cached clock).
            t0 = back[0][1] + 1.1
            after = owner(L, t0, ev["term"] - 0.1)
            home = [k for k in after if k in own and after[k] != {own[k]}]
            seen = [k for k in after if own.get(k) == dead]
            print("# socket: connections opened from %.2f s after the restart was ready to "
                  "the SIGTERM: characters %d, of the restarted daemon's %d" % (
                      t0 - ev["ready"], len(after), len(seen)))
            check("scaleout-sock-new-connections-return", seen and not home,
                  "%d characters not on their daemon again: %s (its characters seen: %d)" % (
                      len(home), home[:5], len(seen)))
    both = [k for k in owners["http"] if k in owners["sock"]]
    same = sum(1 for k in both if owners["http"][k] == owners["sock"][k])
    print("# characters asked over both protocols: %d, on the same daemon for both: %d" %
          (len(both), same))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    {"chars": cmd_chars, "ref": cmd_ref, "run": cmd_run, "analyze": cmd_analyze}[sys.argv[1]]()
