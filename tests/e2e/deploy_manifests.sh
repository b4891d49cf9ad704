#!/usr/bin/env bash
# tests/e2e/deploy_manifests.sh — the Kubernetes manifests of deploy/k8s and the
# router configuration of deploy/nginx, checked offline.
#
# kubectl cannot check anything without an API server (even --dry-run=client
# asks one to map kinds to resources), so deploy/k8s/check_manifests.py checks
# every field against the Kubernetes API models of Debian's python3-kubernetes
# and the references between the objects, the daemon's configuration (run by
# the real bin/deformd) and nginx's. Here:
#  - the shipped manifests pass (with --deformd: deformd.conf from the
#    ConfigMap starts the daemon, which stops with 0 on SIGTERM);
#  - deploy/systemd/deformd.service.in passes systemd-analyze verify (when the
#    machine has it), and a copy with a misspelt key is reported;
#  - nginx -t accepts deploy/nginx/nginx.conf's rule files as shipped (the
#    Kubernetes daemon names do not resolve here, so the upstream servers are
#    replaced by loopback addresses for this syntax check);
#  - each of 17 broken copies is refused, with the problem named: a misspelt
#    field, a missing required field, a wrong type, a wrong enumeration value,
#    probe paths and ports, selectors of a workload / Service / PDB, a PDB
#    that blocks every disruption, a non-headless serviceName, a ConfigMap
#    that does not exist, deformd.conf with an unknown key (the daemon refuses
#    it) or a port that differs from the container's, a grace period shorter
#    than the drain, the router's ConfigMap out of step with deploy/nginx, an
#    upstream that names no Service.
# Prints "ok NAME" / "FAIL NAME" lines for tests/run.sh.
. "$(dirname "$0")/product_common.sh"
CHK=deploy/k8s/check_manifests.py

if ! "$PY" -c 'import kubernetes.client' 2>/dev/null; then
    fail manifests-deps "python3-kubernetes missing (tools/deps.sh --test installs it)"
    exit 1
fi
if "$PY" "$CHK" --deformd "$BIN/deformd" >"$T/good.log" 2>&1; then
    ok manifests-shipped-pass
else
    cat "$T/good.log"; fail manifests-shipped-pass
fi

# nginx -t on the shipped rule files (loopback upstreams, temp paths)
if [ -x /usr/sbin/nginx ]; then
    NG=$T/ng; mkdir -p "$NG"; cp deploy/nginx/*.conf deploy/nginx/*.js "$NG/"
    sed -i -e "s|server deformd-[0-9]:|server 127.0.0.1:|; s|/tmp/nginx|$NG/nginx|; s|listen 800\([01]\);|listen 127.0.0.1:0800\1;|" "$NG/nginx.conf"
    if /usr/sbin/nginx -t -p "$NG" -c "$NG/nginx.conf" -e "$NG/error.log" >"$T/nginx-t.log" 2>&1; then
        ok manifests-nginx-syntax
    else
        cat "$T/nginx-t.log"; fail manifests-nginx-syntax
    fi
else
    fail manifests-nginx-syntax "no /usr/sbin/nginx (tools/deps.sh --test installs it)"
fi

# the systemd unit of make install (one machine): systemd-analyze verify says
# nothing about it (ExecStart pointed at this build's daemon), and names a
# misspelt key
if command -v systemd-analyze >/dev/null 2>&1; then
    mkdir -p "$T/sd/bad"
    sed -e "s|@PREFIX@/bin/deformd|$BIN/deformd|; s|@STATEDIR@|/var/lib|; s|@PREFIX@|/usr/local|; s|@SYSCONFDIR@|/etc|" \
        deploy/systemd/deformd.service.in >"$T/sd/deformd.service"
    sed 's/^KillSignal=/KilSignal=/' "$T/sd/deformd.service" >"$T/sd/bad/deformd.service"
    if systemd-analyze verify "$T/sd/deformd.service" >"$T/sd/out" 2>&1 && [ ! -s "$T/sd/out" ]; then
        ok manifests-systemd-unit
    else
        cat "$T/sd/out"; fail manifests-systemd-unit
    fi
    systemd-analyze verify "$T/sd/bad/deformd.service" >"$T/sd/out" 2>&1
    grep -q "Unknown key 'KilSignal'" "$T/sd/out" && ok manifests-systemd-unit-broken \
        || { cat "$T/sd/out"; fail manifests-systemd-unit-broken "misspelt key not reported"; }
else
    echo "# no systemd-analyze: deploy/systemd/deformd.service not checked"
fi

# broken NAME 'EXPECTED' PYTHON-EDIT: copy deploy/k8s (and deploy/nginx), edit
# the copy (the edit gets the YAML text in s and must leave it in s), run the
# check: it must fail and print EXPECTED.
broken() {
    local name=$1 want=$2 edit=$3 file=${4:-deformd.yaml} extra=${5:-}
    rm -rf "$T/k" "$T/n"; cp -r deploy/k8s "$T/k"; cp -r deploy/nginx "$T/n"
    "$PY" - "$T/k/$file" "$edit" <<'EOF' || { fail "manifests-broken-$name" "edit did not apply"; return; }
import sys
p, edit = sys.argv[1], sys.argv[2]
s = open(p).read()
before = s
exec(edit)
if s == before:
    sys.exit("edit changed nothing")
open(p, "w").write(s)
EOF
    if "$PY" "$CHK" --dir "$T/k" --nginx "$T/n" $extra >"$T/broken.log" 2>&1; then
        fail "manifests-broken-$name" "accepted"
    elif grep -qF -- "$want" "$T/broken.log"; then
        ok "manifests-broken-$name"
    else
        fail "manifests-broken-$name" "refused, but without '$want':"; cat "$T/broken.log"
    fi
}
broken unknown-field "readinessProbe.httpGet.paht: unknown field" \
    's = s.replace("httpGet: {path: /v2/health/ready", "httpGet: {paht: /v2/health/ready", 1)'
broken required-field "required field \`name\` missing" \
    's = s.replace("        - name: deformd\n          image:", "        - image:", 1)'
broken wrong-type "replicas: expected an integer" \
    's = s.replace("replicas: 3", "replicas: three", 1)'
broken enum-value "'Balancer' must be one of ClusterIP" \
    's = s.replace("  clusterIP: None\n", "  clusterIP: None\n  type: Balancer\n", 1)'
broken readiness-path "readinessProbe must be GET /v2/health/ready" \
    's = s.replace("path: /v2/health/ready", "path: /v2/health", 1)'
broken probe-port "livenessProbe port 'admin' is not a container port" \
    's = s.replace("httpGet: {path: /v2/health/live, port: http}\n            periodSeconds: 10", "httpGet: {path: /v2/health/live, port: admin}\n            periodSeconds: 10", 1)'
broken workload-selector "does not match the pod template's labels" \
    's = s.replace("    matchLabels: {app.kubernetes.io/name: deformd}\n  template", "    matchLabels: {app.kubernetes.io/name: deformd-x}\n  template", 1)'
broken service-selector "Service/deformd-1: selector" \
    's = s.replace("pod-name: deformd-1}", "pod-name: deformd-7}", 1)'
broken pdb-selector "PodDisruptionBudget/deformd: selector" \
    's = s.replace("  maxUnavailable: 1\n  selector:\n    matchLabels: {app.kubernetes.io/name: deformd}", "  maxUnavailable: 1\n  selector:\n    matchLabels: {app: deformd}", 1)'
broken pdb-blocks "minAvailable 2 of 2 replicas" \
    's = s.replace("  minAvailable: 1", "  minAvailable: 2", 1)' router.yaml
broken headless "serviceName 'deformd-0' is not a headless Service" \
    's = s.replace("serviceName: deformd-headless", "serviceName: deformd-0", 1)'
broken configmap-missing "no ConfigMap deformd-conf" \
    's = s.replace("configMap: {name: deformd-config}", "configMap: {name: deformd-conf}", 1)'
broken conf-unknown-key "the daemon refuses it" \
    's = s.replace("    workers = 2\n", "    worker = 2\n", 1)' deformd.yaml "--deformd $BIN/deformd"
broken conf-port "container port http is 8000, deformd.conf http_port = 8080" \
    's = s.replace("    http_port = 8000\n", "    http_port = 8080\n", 1)'
broken grace "terminationGracePeriodSeconds 20 < preStop 5 s" \
    's = s.replace("terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds: 20", 1)'
broken router-config-drift "nginx.conf differs from deploy/nginx/nginx.conf" \
    's = s.replace("max_fails=3 fail_timeout=5s;", "max_fails=30 fail_timeout=5s;", 1)' router-config.yaml
# an upstream naming no Service: edit deploy/nginx and regenerate the ConfigMap
rm -rf "$T/k" "$T/n"; cp -r deploy/k8s "$T/k"; cp -r deploy/nginx "$T/n"
sed -i 's|server deformd-2:8001 |server deformd-3:8001 |' "$T/n/nginx.conf"
"$PY" "$CHK" --write-router-config --dir "$T/k" --nginx "$T/n" >/dev/null
if "$PY" "$CHK" --dir "$T/k" --nginx "$T/n" >"$T/broken.log" 2>&1; then
    fail manifests-broken-upstream "accepted"
elif grep -q "server deformd-3:8001 is no Service" "$T/broken.log" &&
     grep -q "upstream deformd_socket lists 2 distinct daemons of 3" "$T/broken.log"; then
    ok manifests-broken-upstream
else
    cat "$T/broken.log"; fail manifests-broken-upstream
fi
finish
