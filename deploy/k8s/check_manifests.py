#!/usr/bin/env python3
"""check_manifests.py — check deploy/k8s offline: the Kubernetes API schema and
the references between the objects, the daemon's configuration and the router's.

usage:
  check_manifests.py [--dir DIR] [--nginx DIR] [--deformd BIN]
  check_manifests.py --write-router-config [--dir DIR] [--nginx DIR]

`kubectl apply --dry-run=client` needs an API server even to map a kind to its
resource, so it cannot check anything offline. This script does it with the
Kubernetes API models of the official Python client (Debian's
python3-kubernetes: every field's name and type, and which are required):

 schema (every object of every DIR/*.yaml): apiVersion/kind known; every field
   a field of its type (a misspelt key is an error, not silently ignored);
   types (string, integer, boolean, list, map; resource quantities may be
   numbers); required fields present; the values of a few enumerations the
   API server checks (Service type, protocols, imagePullPolicy, ...).
 references:
   - a workload's selector matches its pod template's labels;
   - a Service's selector matches the pods of a workload (a StatefulSet pod's
     statefulset.kubernetes.io/pod-name = <name>-<i>, i < replicas); each
     targetPort is a port of those pods' container (by name or number);
   - a StatefulSet's serviceName is a headless Service (clusterIP: None);
   - a PodDisruptionBudget selects a workload and leaves a pod of it running
     (maxUnavailable < replicas, minAvailable < replicas);
   - volumes name an existing ConfigMap / PersistentVolumeClaim, mounts name a
     volume of the pod;
   - probes' ports are container ports.
 the daemon (the container running `deformd`):
   - --config FILE is a key of a mounted ConfigMap; that deformd.conf is read by
     the real daemon (--deformd BIN: it must start on it, with its ports and
     repository replaced by test ones, and stop on SIGTERM with status 0);
   - the container ports http/socket are the config's http_port/socket_port,
     readiness on /v2/health/ready and liveness on /v2/health/live of http,
     the repository directory is a mounted volume, CPU and memory requests,
     a preStop hook, terminationGracePeriodSeconds >= preStop sleep +
     drain_timeout_ms + 1 s.
 the router:
   - the ConfigMap deformd-router holds deploy/nginx's files byte for byte
     (--write-router-config rewrites DIR/router-config.yaml from them);
   - every upstream server of nginx.conf is <Service>:<port> of a Service of
     these manifests selecting one daemon, http upstreams on the daemon's HTTP
     port, socket upstreams on its socket port, one per daemon replica;
   - the router container mounts that ConfigMap where its -c path points.
Exit status 0 when all holds; 1 with one line per problem; 2 on usage errors.
"""
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import yaml

try:
    import kubernetes.client as K
except ImportError:  # Debian: python3-kubernetes (tools/deps.sh --test)
    sys.exit("check_manifests: needs the Kubernetes Python client (apt-get install python3-kubernetes)")

HERE = os.path.dirname(os.path.abspath(__file__))
ROUTER_FILES = ["nginx.conf", "deformd-http.conf", "deformd-http-server.conf",
                "deformd-stream.conf", "deformd-stream-server.conf", "deformd_route.js"]
problems = []


def bad(where, msg):
    problems.append("%s: %s" % (where, msg))


# ------------------------------------------------------------------ schema
def _check_type(v, typ, path, under_quantity=False):
    if typ == "object":
        return
    if typ == "str":
        if not isinstance(v, str) and not (under_quantity and isinstance(v, (int, float))
                                           and not isinstance(v, bool)):
            bad(path, "expected a string, got %r" % (v,))
        return
    if typ == "int":
        if not isinstance(v, int) or isinstance(v, bool):
            bad(path, "expected an integer, got %r" % (v,))
        return
    if typ == "float":
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            bad(path, "expected a number, got %r" % (v,))
        return
    if typ == "bool":
        if not isinstance(v, bool):
            bad(path, "expected true/false, got %r" % (v,))
        return
    if typ == "datetime":
        return
    m = re.match(r"list\[(.*)\]$", typ)
    if m:
        if not isinstance(v, list):
            bad(path, "expected a list, got %r" % (v,))
            return
        for i, x in enumerate(v):
            _check_type(x, m.group(1), "%s[%d]" % (path, i), under_quantity)
        return
    m = re.match(r"dict\((\w+), (.*)\)$", typ)
    if m:
        if not isinstance(v, dict):
            bad(path, "expected a map, got %r" % (v,))
            return
        for k, x in v.items():
            if not isinstance(k, str):
                bad(path, "map key %r is not a string" % (k,))
            _check_type(x, m.group(2), "%s.%s" % (path, k), under_quantity)
        return
    _check_model(v, typ, path)


# Enumerations the API server enforces but the client models do not check.
ENUMS = {("V1ServiceSpec", "type"): ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"),
         ("V1ServicePort", "protocol"): ("TCP", "UDP", "SCTP"),
         ("V1ContainerPort", "protocol"): ("TCP", "UDP", "SCTP"),
         ("V1Container", "imagePullPolicy"): ("Always", "IfNotPresent", "Never"),
         ("V1StatefulSetSpec", "podManagementPolicy"): ("OrderedReady", "Parallel"),
         ("V1PodSpec", "restartPolicy"): ("Always", "OnFailure", "Never"),
         ("V1HTTPGetAction", "scheme"): ("HTTP", "HTTPS")}


def _check_model(v, typ, path):
    cls = getattr(K, typ, None)
    if cls is None:
        bad(path, "no API type %s" % typ)
        return
    if not isinstance(v, dict):
        bad(path, "expected an object (%s), got %r" % (typ, v))
        return
    inv = {j: a for a, j in cls.attribute_map.items()}
    kwargs = {}
    for key, val in v.items():
        if key not in inv:
            bad("%s.%s" % (path, key), "unknown field (not a field of %s)" % typ)
            continue
        attr = inv[key]
        allowed = ENUMS.get((typ, key))
        if allowed and val not in allowed:
            bad("%s.%s" % (path, key), "%r must be one of %s" % (val, ", ".join(allowed)))
        # resource quantities ("2", 2, "1Gi") are strings or numbers
        _check_type(val, cls.openapi_types[attr], "%s.%s" % (path, key),
                    typ == "V1ResourceRequirements")
        kwargs[attr] = val
    # required fields (and enumerations): the generated models refuse them
    try:
        cls(**kwargs)
    except ValueError as e:
        bad(path, str(e).replace("Invalid value for", "required field").replace(
            ", must not be `None`", " missing"))
    except TypeError:
        pass


def api_class(doc):
    av, kind = doc.get("apiVersion"), doc.get("kind")
    if not isinstance(av, str) or not isinstance(kind, str):
        return None
    ver = av.split("/")[-1]
    return ver[0].upper() + ver[1:] + kind


def load(dirpath):
    docs = []
    for f in sorted(glob.glob(os.path.join(dirpath, "*.yaml"))):
        try:
            with open(f) as fh:
                for i, d in enumerate(yaml.safe_load_all(fh)):
                    if d is not None:
                        docs.append((os.path.basename(f), i, d))
        except yaml.YAMLError as e:
            bad(os.path.basename(f), "not YAML: %s" % e)
    if not docs:
        bad(dirpath, "no manifests (*.yaml)")
    return docs


def check_schema(docs):
    for f, i, d in docs:
        where = "%s[%d] %s/%s" % (f, i, d.get("kind"), (d.get("metadata") or {}).get("name"))
        cls = api_class(d)
        if not cls or not hasattr(K, cls):
            bad(where, "unknown apiVersion/kind %s %s" % (d.get("apiVersion"), d.get("kind")))
            continue
        _check_model(d, cls, where)
        if not (d.get("metadata") or {}).get("name"):
            bad(where, "metadata.name missing")


# -------------------------------------------------------------- references
def objs(docs, kind):
    return [(d["metadata"]["name"], d) for _, _, d in docs
            if d.get("kind") == kind and isinstance(d.get("metadata"), dict)
            and d["metadata"].get("name")]


def selects(sel, labels):
    return isinstance(sel, dict) and sel and all(labels.get(k) == v for k, v in sel.items())


def workloads(docs):
    """[(kind, name, replicas, pod labels (list per pod), pod spec)]."""
    out = []
    for kind in ("StatefulSet", "Deployment"):
        for name, d in objs(docs, kind):
            spec = d.get("spec") or {}
            tpl = spec.get("template") or {}
            labels = (tpl.get("metadata") or {}).get("labels") or {}
            n = spec.get("replicas", 1)
            n = n if isinstance(n, int) else 1
            pods = []
            for i in range(n):
                lab = dict(labels)
                if kind == "StatefulSet":
                    lab["statefulset.kubernetes.io/pod-name"] = "%s-%d" % (name, i)
                pods.append(lab)
            out.append((kind, name, n, pods, tpl.get("spec") or {}, d))
    return out


def container_ports(pod):
    ports = {}
    for c in pod.get("containers") or []:
        for p in c.get("ports") or []:
            if isinstance(p, dict):
                ports[p.get("containerPort")] = p
                if p.get("name"):
                    ports[p["name"]] = p
    return ports


def port_number(ports, ref):
    p = ports.get(ref)
    return p.get("containerPort") if p else None


def check_refs(docs):
    wl = workloads(docs)
    cms = dict(objs(docs, "ConfigMap"))
    pvcs = dict(objs(docs, "PersistentVolumeClaim"))
    svcs = dict(objs(docs, "Service"))
    for kind, name, n, pods, pod, d in wl:
        where = "%s/%s" % (kind, name)
        sel = ((d.get("spec") or {}).get("selector") or {}).get("matchLabels")
        if not pods or not selects(sel, pods[0]):
            bad(where, "selector %s does not match the pod template's labels" % (sel,))
        ports = container_ports(pod)
        vols = {}
        for v in pod.get("volumes") or []:
            vols[v.get("name")] = v
            cm = (v.get("configMap") or {}).get("name")
            if cm is not None and cm not in cms:
                bad(where, "volume %s: no ConfigMap %s" % (v.get("name"), cm))
            pv = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if pv is not None and pv not in pvcs:
                bad(where, "volume %s: no PersistentVolumeClaim %s" % (v.get("name"), pv))
        for c in pod.get("containers") or []:
            for m in c.get("volumeMounts") or []:
                if m.get("name") not in vols:
                    bad(where, "container %s mounts %s: no such volume" % (c.get("name"), m.get("name")))
            for pn in ("readinessProbe", "livenessProbe", "startupProbe"):
                pr = c.get(pn) or {}
                for act in ("httpGet", "tcpSocket"):
                    if act in pr and port_number(ports, pr[act].get("port")) is None:
                        bad(where, "%s port %r is not a container port" % (pn, pr[act].get("port")))
        if kind == "StatefulSet":
            sn = (d.get("spec") or {}).get("serviceName")
            s = svcs.get(sn)
            if not s or (s.get("spec") or {}).get("clusterIP") != "None":
                bad(where, "serviceName %r is not a headless Service (clusterIP: None)" % sn)
    for name, s in svcs.items():
        sel = (s.get("spec") or {}).get("selector")
        hit = [(k, nm, pod) for k, nm, n, pods, pod, _ in wl for lab in pods if selects(sel, lab)]
        if not hit:
            bad("Service/%s" % name, "selector %s matches no pod of these manifests" % (sel,))
            continue
        ports = container_ports(hit[0][2])
        for p in (s.get("spec") or {}).get("ports") or []:
            tp = p.get("targetPort", p.get("port"))
            if port_number(ports, tp) is None:
                bad("Service/%s" % name, "targetPort %r is not a port of %s/%s" % (tp, hit[0][0], hit[0][1]))
    for name, pdb in objs(docs, "PodDisruptionBudget"):
        spec = pdb.get("spec") or {}
        sel = (spec.get("selector") or {}).get("matchLabels")
        hit = [(k, nm, n) for k, nm, n, pods, _, _ in wl if pods and selects(sel, pods[0])]
        if not hit:
            bad("PodDisruptionBudget/%s" % name, "selector %s matches no workload" % (sel,))
            continue
        n = hit[0][2]
        mu, ma = spec.get("maxUnavailable"), spec.get("minAvailable")
        if isinstance(mu, int) and not 0 < mu < n:
            bad("PodDisruptionBudget/%s" % name, "maxUnavailable %d of %d replicas" % (mu, n))
        if isinstance(ma, int) and not ma < n:
            bad("PodDisruptionBudget/%s" % name, "minAvailable %d of %d replicas blocks every "
                "voluntary disruption" % (ma, n))
        if mu is None and ma is None:
            bad("PodDisruptionBudget/%s" % name, "neither maxUnavailable nor minAvailable")
    return wl, cms, svcs


# --------------------------------------------------------------- deformd
def parse_conf(text):
    kv = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            k, v = line.split("=", 1)
            kv[k.strip()] = v.strip().strip('"\'')
    return kv


def mounted_file(pod, container, cms, path):
    """(ConfigMap name, key) that provides path in container, or None."""
    vols = {v.get("name"): v for v in pod.get("volumes") or []}
    for m in container.get("volumeMounts") or []:
        mp = m.get("mountPath", "").rstrip("/")
        if path.startswith(mp + "/"):
            cm = (vols.get(m.get("name")) or {}).get("configMap")
            if cm:
                return cm.get("name"), path[len(mp) + 1:]
    return None


def sleep_seconds(hook):
    cmd = ((hook or {}).get("exec") or {}).get("command") or []
    text = " ".join(str(x) for x in cmd)
    return sum(float(x) for x in re.findall(r"sleep\s+([0-9.]+)", text))


def run_daemon(binary, conf_text):
    """Start the real daemon on conf_text (ports and repository replaced);
    returns None or the problem."""
    tmp = tempfile.mkdtemp(prefix="df-k8s-")
    try:
        conf = os.path.join(tmp, "deformd.conf")
        with open(conf, "w") as f:
            f.write(conf_text)
        repo = os.path.join(tmp, "repo")
        os.mkdir(repo)
        ready = os.path.join(tmp, "ready")
        log = open(os.path.join(tmp, "log"), "w+")
        p = subprocess.Popen([binary, "--config", conf, "--repository", repo, "--host", "127.0.0.1",
                              "--http-port", "0", "--socket-port", "0", "--www", tmp,
                              "--ready-file", ready], stdout=log, stderr=log)
        t0 = time.time()
        while time.time() - t0 < 20 and p.poll() is None and not os.path.exists(ready):
            time.sleep(0.05)
        if p.poll() is not None:
            log.seek(0)
            return "the daemon refuses it: %s" % log.read().strip().splitlines()[-1:]
        if not os.path.exists(ready):
            p.kill()
            p.wait()
            return "the daemon did not start on it within 20 s"
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return "the daemon did not stop on SIGTERM"
        return None if rc == 0 else "the daemon exited %d on SIGTERM" % rc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_deformd(wl, cms, deformd_bin):
    found = False
    for kind, name, n, pods, pod, d in wl:
        for c in pod.get("containers") or []:
            argv = [str(x) for x in (c.get("command") or []) + (c.get("args") or [])]
            if not argv or os.path.basename(argv[0]) != "deformd":
                continue
            found = True
            where = "%s/%s container %s" % (kind, name, c.get("name"))
            if "--config" not in argv or argv.index("--config") + 1 >= len(argv):
                bad(where, "deformd without --config FILE")
                continue
            cpath = argv[argv.index("--config") + 1]
            src = mounted_file(pod, c, cms, cpath)
            if not src or src[0] not in cms or src[1] not in (cms[src[0]].get("data") or {}):
                bad(where, "--config %s is not a key of a mounted ConfigMap" % cpath)
                continue
            text = cms[src[0]]["data"][src[1]]
            conf = parse_conf(text)
            ports = container_ports(pod)
            for key, pname, default in (("http_port", "http", 8000), ("socket_port", "socket", 8001)):
                want = int(conf.get(key, default))
                got = port_number(ports, pname)
                if got != want:
                    bad(where, "container port %s is %r, deformd.conf %s = %d" % (pname, got, key, want))
            if conf.get("host", "127.0.0.1") in ("127.0.0.1", "::1", "localhost"):
                bad(where, "deformd.conf host = %s: unreachable from other pods (0.0.0.0)" %
                    conf.get("host", "127.0.0.1 (default)"))
            for pn, path in (("readinessProbe", "/v2/health/ready"), ("livenessProbe", "/v2/health/live")):
                hg = (c.get(pn) or {}).get("httpGet") or {}
                if hg.get("path") != path or port_number(ports, hg.get("port")) != int(conf.get("http_port", 8000)):
                    bad(where, "%s must be GET %s on the HTTP port (has %s on %r)" %
                        (pn, path, hg.get("path"), hg.get("port")))
            repo = conf.get("repository")
            if "--repository" in argv:
                repo = argv[argv.index("--repository") + 1]
            mounts = [m.get("mountPath", "").rstrip("/") for m in c.get("volumeMounts") or []]
            if not repo or not any(repo.rstrip("/") == m or repo.startswith(m + "/") for m in mounts):
                bad(where, "the repository %s is not on a mounted volume" % repo)
            req = (c.get("resources") or {}).get("requests") or {}
            for r in ("cpu", "memory"):
                if r not in req:
                    bad(where, "no resources.requests.%s" % r)
            pre = (c.get("lifecycle") or {}).get("preStop")
            if not pre:
                bad(where, "no lifecycle.preStop (the pod must leave its Service before SIGTERM)")
            grace = pod.get("terminationGracePeriodSeconds", 30)
            need = sleep_seconds(pre) + int(conf.get("drain_timeout_ms", 10000)) / 1000.0 + 1
            if grace < need:
                bad(where, "terminationGracePeriodSeconds %s < preStop %.0f s + drain_timeout_ms "
                    "%s + 1 s: the drain would be cut short" % (grace, sleep_seconds(pre),
                                                                 conf.get("drain_timeout_ms", 10000)))
            if deformd_bin:
                err = run_daemon(deformd_bin, text)
                if err:
                    bad("ConfigMap/%s %s" % src, err)
    if not found:
        bad("manifests", "no container runs deformd")


# ---------------------------------------------------------------- router
def router_configmap(nginx_dir):
    data = {}
    for f in ROUTER_FILES:
        with open(os.path.join(nginx_dir, f)) as fh:
            data[f] = fh.read()
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "deformd-router",
                         "labels": {"app.kubernetes.io/name": "deformd-router"}},
            "data": data}


def write_router_config(dirpath, nginx_dir):
    class Lit(str):
        pass

    def lit(dumper, s):
        return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|")
    yaml.add_representer(Lit, lit)
    cm = router_configmap(nginx_dir)
    cm["data"] = {k: Lit(v) for k, v in cm["data"].items()}
    out = os.path.join(dirpath, "router-config.yaml")
    with open(out, "w") as f:
        f.write("# router-config.yaml — GENERATED from deploy/nginx by\n"
                "#   python3 deploy/k8s/check_manifests.py --write-router-config\n"
                "# Do not edit: edit deploy/nginx/*, then run that (the check fails while\n"
                "# this file and deploy/nginx differ).\n---\n")
        yaml.dump(cm, f, sort_keys=False, width=1000, allow_unicode=True)
    print("wrote %s" % out)


def check_router(wl, cms, svcs, nginx_dir):
    cm = cms.get("deformd-router")
    if not cm:
        bad("manifests", "no ConfigMap deformd-router (the router's configuration)")
        return
    want = router_configmap(nginx_dir)["data"]
    have = cm.get("data") or {}
    for f in ROUTER_FILES:
        if have.get(f) != want[f]:
            bad("ConfigMap/deformd-router", "%s differs from deploy/nginx/%s (run "
                "check_manifests.py --write-router-config)" % (f, f))
    for f in have:
        if f not in want:
            bad("ConfigMap/deformd-router", "%s is not a file of deploy/nginx" % f)
    conf = have.get("nginx.conf", "")
    # the router container mounts it where -c points
    ok = False
    for kind, name, n, pods, pod, d in wl:
        for c in pod.get("containers") or []:
            argv = [str(x) for x in (c.get("command") or []) + (c.get("args") or [])]
            if "-c" in argv and argv[0].endswith("nginx"):
                src = mounted_file(pod, c, cms, argv[argv.index("-c") + 1])
                ok = ok or (src == ("deformd-router", "nginx.conf"))
    if not ok:
        bad("manifests", "no nginx container runs -c <mount of ConfigMap deformd-router>/nginx.conf")
    # upstream servers: Services selecting one deformd pod, on the right port
    daemon = [(name, n, pods, pod) for kind, name, n, pods, pod, d in wl
              if any(os.path.basename(str(((c.get("command") or []) + (c.get("args") or []) or [""])[0]))
                     == "deformd" for c in pod.get("containers") or [])]
    for up, pname in (("deformd_http", "http"), ("deformd_socket", "socket")):
        m = re.search(r"upstream\s+%s\s*\{(.*?)\}" % up, conf, re.S)
        if not m:
            bad("nginx.conf", "no upstream %s" % up)
            continue
        body = m.group(1)
        if not re.search(r"^\s*hash\s+\$deformd_key\s+consistent\s*;", body, re.M):
            bad("nginx.conf", "upstream %s: no 'hash $deformd_key consistent;'" % up)
        pods_hit = []
        for host, port in re.findall(r"^\s*server\s+([\w.-]+):(\d+)", body, re.M):
            svc = svcs.get(host.split(".")[0])
            if not svc:
                bad("nginx.conf", "upstream %s: server %s:%s is no Service of these manifests"
                    % (up, host, port))
                continue
            sp = [p for p in (svc.get("spec") or {}).get("ports") or [] if str(p.get("port")) == port]
            sel = (svc.get("spec") or {}).get("selector")
            hit = [(nm, i, pod) for nm, n, pods, pod in daemon for i, lab in enumerate(pods)
                   if selects(sel, lab)]
            if len(hit) != 1:
                bad("nginx.conf", "upstream %s: Service %s selects %d daemon pods (one expected)"
                    % (up, host, len(hit)))
                continue
            if not sp or port_number(container_ports(hit[0][2]), sp[0].get("targetPort", sp[0].get("port"))) \
                    != port_number(container_ports(hit[0][2]), pname):
                bad("nginx.conf", "upstream %s: %s:%s does not reach the daemon's %s port"
                    % (up, host, port, pname))
                continue
            pods_hit.append(hit[0][:2])
        total = sum(n for _, n, _, _ in daemon)
        if len(set(pods_hit)) != total or len(pods_hit) != total:
            bad("nginx.conf", "upstream %s lists %d distinct daemons of %d replicas"
                % (up, len(set(pods_hit)), total))


def main():
    a = sys.argv[1:]
    if "-h" in a or "--help" in a:
        print(__doc__)
        return 0

    def opt(name, default):
        if name in a:
            i = a.index(name)
            if i + 1 >= len(a):
                sys.exit("check_manifests: %s needs a value" % name)
            return a[i + 1]
        return default
    known = {"--dir", "--nginx", "--deformd", "--write-router-config"}
    for i, x in enumerate(a):
        if x.startswith("--") and x not in known:
            print("check_manifests: unknown option %s" % x, file=sys.stderr)
            return 2
    d = opt("--dir", HERE)
    ng = opt("--nginx", os.path.join(HERE, "..", "nginx"))
    if "--write-router-config" in a:
        write_router_config(d, ng)
        return 0
    docs = load(d)
    check_schema(docs)
    try:
        wl, cms, svcs = check_refs(docs)
        check_deformd(wl, cms, opt("--deformd", None))
        check_router(wl, cms, svcs, ng)
    except (AttributeError, TypeError, KeyError, ValueError) as e:
        bad("manifests", "malformed beyond checking: %s: %s" % (type(e).__name__, e))
    for p in problems:
        print(p)
    print("%s: %d objects, %d problems" % (d, len(docs), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
