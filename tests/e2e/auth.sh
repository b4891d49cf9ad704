#!/usr/bin/env bash
# tests/e2e/auth.sh — tokens on every endpoint (auth = all) against the real
# daemon, with real clients: curl, the Python client (HTTP and socket),
# bin/deformctl (socket and HTTP), a raw socket, and headless Chromium on the
# viewer. The model is the committed garment (tests/data/garment).
#
#  - configuration: auth = all without token_file, an unknown auth value and
#    a token file with a short token stop the daemon (exit 2), the message
#    names the line and never the token;
#  - auth = repository (the default) with a token file: inference, metadata,
#    /metrics and the socket answer without a token; the repository API
#    wants the header (401 without);
#  - auth = all: /v2/health/live and /ready and OPTIONS preflights open;
#    every other endpoint 401 with WWW-Authenticate: Bearer without a token
#    or with a wrong one, 200 with each of the two tokens of the file; the
#    answers equal the open daemon's bit for bit; a request declaring a
#    50 MB body is refused before its body is read;
#  - the viewer: /viewer/ without a token is the login page (401); the
#    token in the query (or the page's form) becomes an HttpOnly cookie and
#    a redirect that drops the token and keeps the page's own arguments; the
#    cookie opens the API but not the repository API; in Chromium, the form
#    leads to the viewer drawing the garment;
#  - the socket: INFO and INFER before AUTH are ERROR DF_EAUTH and the
#    connection is closed (the payload of a 10 MB frame is never read); PING
#    is answered; a wrong token is refused and closed; each right token opens
#    the connection (deformctl --token-file / DEFORMD_TOKEN, the Python
#    client), and its answers equal HTTP's;
#  - the router's preread (deploy/nginx/deformd_route.js) keys a connection
#    that starts with AUTH by the request after it;
#  - deformd_auth_refused_total counts exactly the HTTP refusals made;
#  - neither token appears in either daemon's log (log_requests on).
# Prints "ok NAME" / "FAIL NAME" lines for tests/run.sh.
. "$(dirname "$0")/product_common.sh"

SHIRT=$ROOT/tests/data/garment/shirt.safetensors
REPO=$T/repo
mkdir -p "$REPO/shirt/1"
cp "$SHIRT" "$REPO/shirt/1/model.safetensors"
echo '{"kind": "garment"}' >"$REPO/shirt/config.json"
TOK1=alpha-4f9c2e17d08b
TOK2='bravo;%2b/=7a31c6'   # characters a cookie value may not hold
printf '# deformd tokens, one per line\n\n%s\n  # the render farm\n%s\n' "$TOK1" "$TOK2" >"$T/tokens"
export PYTHONPATH=$ROOT/clients/python

# ------------------------------------------------------------ configuration
"$BIN/deformd" --repository "$REPO" --auth all --http-port 0 --socket-port -1 >"$T/c1.log" 2>&1
[ $? -eq 2 ] && grep -q "auth = all needs token_file" "$T/c1.log" \
    && ok auth-config-all-needs-tokens || fail auth-config-all-needs-tokens "$(cat "$T/c1.log")"
"$BIN/deformd" --repository "$REPO" --set auth=everything --http-port 0 --socket-port -1 >"$T/c2.log" 2>&1
[ $? -eq 2 ] && grep -q "auth: expected 'repository'" "$T/c2.log" \
    && ok auth-config-bad-value || fail auth-config-bad-value "$(cat "$T/c2.log")"
printf '%s\n# x\nshort12\n' "$TOK1" >"$T/bad_tokens"
"$BIN/deformd" --repository "$REPO" --token-file "$T/bad_tokens" --http-port 0 --socket-port -1 >"$T/c3.log" 2>&1
[ $? -eq 2 ] && grep -q "bad_tokens:3: a token must be at least 8 characters" "$T/c3.log" \
    && ! grep -qF short12 "$T/c3.log" && ! grep -qF "$TOK1" "$T/c3.log" \
    && ok auth-config-short-token || fail auth-config-short-token "$(cat "$T/c3.log")"

# start_on VAR_PREFIX LOG ARGS...: a daemon on free ports (sets ${P}HTTP, ${P}SOCK, ${P}PID)
start_on() {
    local p=$1 log=$2; shift 2
    rm -f "$T/ready_$p"
    "$BIN/deformd" --repository "$REPO" --http-port 0 --socket-port 0 --ready-file "$T/ready_$p" \
        --www "$ROOT/server/www" \
        "$@" >"$log" 2>&1 &
    eval "${p}PID=$!"
    for _ in $(seq 1 300); do [ -s "$T/ready_$p" ] && break; sleep 0.05; done
    [ -s "$T/ready_$p" ] || { cat "$log"; return 1; }
    eval "${p}HTTP=$(sed -n 's/.*http=\([0-9]*\).*/\1/p' "$T/ready_$p")"
    eval "${p}SOCK=$(sed -n 's/.*socket=\([0-9]*\).*/\1/p' "$T/ready_$p")"
}
stop_pid() {
    kill -TERM "$1" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done
    kill -KILL "$1" 2>/dev/null
}
OPID=; APID=
trap 'stop_pid "$OPID"; stop_pid "$APID"; cleanup' EXIT

# ------------------------------------------------------------ auth = repository
start_on O "$T/open.log" --token-file "$T/tokens" --set log_requests=true \
    && ok auth-open-daemon || { fail auth-open-daemon; finish; exit 1; }
O=http://127.0.0.1:$OHTTP
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
POSE='{"inputs":[{"name":"joint_rotations","datatype":"FP32","shape":[19,4],"data":[0,0,0,1, 0,0,0.3,0.95393920141, 0,0,0,1, 0,0,0,1, 0,0,0,1, 0,0,0,1, 0,0,0,1, 0,0,0,1, 0,0,0,1, 0,0,0,1, 0,0,0,1, 0,0,0,1, 0,0,0,1, 0,0,0,1, 0,0,0,1, 0,0,0,1, 0,0,0,1, 0,0,0,1, 0,0,0,1]},{"name":"shape","datatype":"FP32","shape":[4],"data":[0.5,1,0,0]}],"outputs":[{"name":"positions"}]}'
curl -s "$O/v2/models/shirt/infer" -d "$POSE" >"$T/open_infer.json"
[ "$(code "$O/v2/models/shirt/infer" -d "$POSE")" = 200 ] && [ "$(code "$O/metrics")" = 200 ] \
    && [ "$(code "$O/v2/models/shirt")" = 200 ] && ok auth-repository-mode-inference-open \
    || fail auth-repository-mode-inference-open
[ "$(code -XPOST "$O/v2/repository/models/shirt/load")" = 401 ] \
    && [ "$(code -XPOST -H "Authorization: Bearer $TOK2" "$O/v2/repository/models/shirt/load")" = 200 ] \
    && ok auth-repository-mode-repo-api-token || fail auth-repository-mode-repo-api-token
"$BIN/deformctl" --socket-port "$OSOCK" list >"$T/open_list.txt" 2>"$T/open_list.err" \
    && grep -qx shirt "$T/open_list.txt" && ok auth-repository-mode-socket-open \
    || fail auth-repository-mode-socket-open "$(cat "$T/open_list.err")"
"$PY" - "$OSOCK" <<'EOF' && ok auth-repository-mode-auth-frame-accepted || fail auth-repository-mode-auth-frame-accepted
import sys
from deformd_client import SocketClient
# AUTH is answered AUTH_OK without a check when the socket needs no token
assert SocketClient(port=int(sys.argv[1]), token="not-a-configured-token").list() == ["shirt"]
EOF

# ------------------------------------------------------------ auth = all
start_on A "$T/all.log" --token-file "$T/tokens" --auth all --cors-origin http://example.test \
    --set log_requests=true && ok auth-all-daemon || { fail auth-all-daemon; finish; exit 1; }
A=http://127.0.0.1:$AHTTP
REFUSED=0   # HTTP refusals made here, to compare with deformd_auth_refused_total
for u in /v2/health/live /v2/health/ready; do
    [ "$(code "$A$u")" = 200 ] || fail "auth-health-open $u"
done
ok auth-health-open
[ "$(code -X OPTIONS -H 'Origin: http://example.test' -H 'Access-Control-Request-Method: POST' \
    "$A/v2/models/shirt/infer")" = 204 ] && ok auth-preflight-open || fail auth-preflight-open

# every other endpoint: 401 without or with a wrong token, 200 with each token
# (curl on inference, http.client on every endpoint)
h=$(curl -s -D - -o /dev/null "$A/v2/models/shirt/infer" -d "$POSE" | tr -d '\r')
echo "$h" | head -1 | grep -q ' 401' && echo "$h" | grep -qi '^WWW-Authenticate: Bearer' \
    && [ "$(code -H "Authorization: Bearer wrong-$TOK1" "$A/v2/models/shirt/infer" -d "$POSE")" = 401 ] \
    && [ "$(code -H "Authorization: Bearer $TOK1" "$A/v2/models/shirt/infer" -d "$POSE")" = 200 ] \
    && [ "$(code -H "Authorization: Bearer $TOK2" "$A/v2/models/shirt/infer" -d "$POSE")" = 200 ] \
    && ok auth-all-curl-infer || fail auth-all-curl-infer "$h"
REFUSED=$((REFUSED + 2))
n=$("$PY" - "$AHTTP" "$TOK1" "$TOK2" "$POSE" <<'EOF'
import http.client, sys
port, t1, t2, pose = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
eps = [("GET", "/v2"), ("GET", "/v2/models"), ("GET", "/v2/models/shirt"),
       ("GET", "/v2/models/shirt/ready"), ("GET", "/v2/models/shirt/mesh"),
       ("GET", "/v2/models/shirt/mesh?format=glb"), ("GET", "/v2/repository/index"),
       ("POST", "/v2/repository/index"), ("GET", "/metrics"), ("GET", "/viewer/"),
       ("GET", "/viewer/viewer.js"), ("GET", "/"), ("POST", "/v2/models/shirt/infer"),
       ("GET", "/v2/models/shirt/pose.glb"), ("GET", "/v2/no/such/endpoint")]
bad, refused = [], 0
def ask(m, u, tok):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    h = {"Authorization": "Bearer " + tok} if tok is not None else {}
    c.request(m, u, body=pose if m == "POST" and "infer" in u else None, headers=h)
    r = c.getresponse()
    r.read()
    c.close()
    return r.status, r.getheader("WWW-Authenticate") or ""
for m, u in eps:
    for tok in (None, "wrong-" + t1, t1 + "x", t1[:-1], ""):
        st, wa = ask(m, u, tok)
        refused += 1
        if st != 401 or not wa.startswith("Bearer"):
            bad.append("%s %s token %r: %d %r" % (m, u, tok and tok[:3], st, wa))
    want = 404 if "no/such" in u else 302 if u == "/" else 200
    for tok in (t1, t2):
        st, _ = ask(m, u, tok)
        if st != want:
            bad.append("%s %s token %s: %d, want %d" % (m, u, tok[:5], st, want))
if bad:
    sys.stderr.write("\n".join(bad) + "\n")
    sys.exit(1)
print(refused)
EOF
) && ok auth-all-endpoints-401-and-200 || fail auth-all-endpoints-401-and-200
REFUSED=$((REFUSED + ${n:-0}))
curl -s -H "Authorization: Bearer $TOK2" "$A/v2/models/shirt/infer" -d "$POSE" >"$T/all_infer.json"
"$PY" - "$T/open_infer.json" "$T/all_infer.json" <<'EOF' && ok auth-all-answer-equals-open || fail auth-all-answer-equals-open
import json, sys
a, b = (json.load(open(p))["outputs"] for p in sys.argv[1:3])
assert a == b and len(a[0]["data"]) == 1290 * 3, (len(a), len(b))
EOF
# a request declaring a 50 MB body: refused at once, its body never sent
"$PY" - "$AHTTP" <<'EOF' && ok auth-all-refused-before-body || fail auth-all-refused-before-body
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"POST /v2/models/shirt/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000\r\n\r\n")
t0 = time.time()
data = b""
while b"\r\n\r\n" not in data:
    chunk = s.recv(4096)
    assert chunk, "closed without an answer"
    data += chunk
assert data.startswith(b"HTTP/1.1 401"), data[:60]
assert time.time() - t0 < 5
EOF
REFUSED=$((REFUSED + 1))

# ------------------------------------------------------------ the viewer
JAR=$T/jar
h=$(curl -s -D - -o "$T/login.html" "$A/viewer/" | tr -d '\r')
echo "$h" | head -1 | grep -q ' 401' && grep -q '<form' "$T/login.html" && grep -q 'name="token"' "$T/login.html" \
    && echo "$h" | grep -qi '^Content-Type: text/html' && ok auth-viewer-login-page || fail auth-viewer-login-page
[ "$(code "$A/viewer/?token=wrong-token-1234")" = 401 ] && ok auth-viewer-wrong-token || fail auth-viewer-wrong-token
REFUSED=$((REFUSED + 2))
TOK2Q=$("$PY" -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$TOK2")
h=$(curl -s -D - -o /dev/null -c "$JAR" "$A/viewer/index.html?character=shirt&token=$TOK2Q&up=y" | tr -d '\r')
loc=$(echo "$h" | sed -n 's/^Location: //Ip')
cookie=$(echo "$h" | sed -n 's/^Set-Cookie: //Ip')
echo "$h" | head -1 | grep -q ' 302' && [ "$loc" = "/viewer/index.html?character=shirt&up=y" ] \
    && echo "$cookie" | grep -q '^deformd_token=' && echo "$cookie" | grep -q 'HttpOnly' \
    && echo "$cookie" | grep -q 'SameSite=Strict' && ! echo "$loc$cookie" | grep -qF "$TOK2" \
    && ok auth-viewer-token-to-cookie || fail auth-viewer-token-to-cookie "$h"
[ "$(code -b "$JAR" "$A/viewer/")" = 200 ] && [ "$(code -b "$JAR" "$A/v2/models/shirt")" = 200 ] \
    && [ "$(code -b "$JAR" "$A/v2/models/shirt/infer" -d "$POSE")" = 200 ] \
    && ok auth-viewer-cookie-opens-api || fail auth-viewer-cookie-opens-api
[ "$(code -b "$JAR" -XPOST "$A/v2/repository/models/shirt/load")" = 401 ] \
    && [ "$(code -XPOST -H "Authorization: Bearer $TOK1" "$A/v2/repository/models/shirt/load")" = 200 ] \
    && ok auth-viewer-cookie-not-repository-api || fail auth-viewer-cookie-not-repository-api
[ "$(code -b 'deformd_token=alpha-4f9c2e17d08c' "$A/v2/models/shirt")" = 401 ] \
    && ok auth-viewer-wrong-cookie || fail auth-viewer-wrong-cookie
REFUSED=$((REFUSED + 1))

# ------------------------------------------------------------ clients over HTTP
"$PY" - "$AHTTP" "$TOK1" "$TOK2" "$T/all_infer.json" <<'EOF' && ok auth-python-http || fail auth-python-http
import array, json, sys
from deformd_client import HttpClient, DeformdError
port, t1, t2, ref = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
try:
    HttpClient(port=port).info("shirt")
    raise SystemExit("no token: answered")
except DeformdError as e:
    assert e.status == 401, e
doc = json.load(open(ref))
want = doc["outputs"][0]["data"]
for t in (t1, t2):
    c = HttpClient(port=port, token=t)
    assert c.info("shirt")["name"] == "shirt"
    rot = [[0, 0, 0, 1]] * 19
    rot[1] = [0, 0, 0.3, 0.95393920141]
    out = c.infer("shirt", {"joint_rotations": rot, "shape": [0.5, 1, 0, 0]}, outputs=["positions"])
    assert list(out["positions"].shape) == [1290, 3]
    assert out["positions"].data == array.array("f", want), "HTTP answer with a token differs"
EOF
REFUSED=$((REFUSED + 1))
"$BIN/deformctl" --http-port "$AHTTP" --socket-port "$ASOCK" --token-file "$T/tokens" mesh shirt \
    --out "$T/rest.glb" >/dev/null 2>"$T/mesh.err" && [ "$(head -c 4 "$T/rest.glb")" = glTF ] \
    && ok auth-deformctl-http-token-file || fail auth-deformctl-http-token-file "$(cat "$T/mesh.err")"
"$BIN/deformctl" --http-port "$AHTTP" --socket-port "$ASOCK" mesh shirt --out "$T/rest2.glb" \
    >/dev/null 2>"$T/mesh2.err"
[ $? -eq 1 ] && grep -q "HTTP 401" "$T/mesh2.err" && ok auth-deformctl-http-no-token \
    || fail auth-deformctl-http-no-token "$(cat "$T/mesh2.err")"
REFUSED=$((REFUSED + 1))

# ------------------------------------------------------------ the socket
"$BIN/deformctl" --socket-port "$ASOCK" list >/dev/null 2>"$T/l1.err"
[ $? -eq 1 ] && grep -q "authentication required" "$T/l1.err" && grep -q unauthorized "$T/l1.err" \
    && ok auth-socket-refused-without-token || fail auth-socket-refused-without-token "$(cat "$T/l1.err")"
DEFORMD_TOKEN=nope-nope-nope "$BIN/deformctl" --socket-port "$ASOCK" list >/dev/null 2>"$T/l2.err"
[ $? -eq 1 ] && grep -q "wrong token" "$T/l2.err" && ok auth-socket-wrong-token \
    || fail auth-socket-wrong-token "$(cat "$T/l2.err")"
"$BIN/deformctl" --socket-port "$ASOCK" --token-file "$T/tokens" list >"$T/l3.txt" 2>&1 \
    && grep -qx shirt "$T/l3.txt" && DEFORMD_TOKEN=$TOK2 "$BIN/deformctl" --socket-port "$ASOCK" \
    infer shirt --input 'shape=[0.5,1,0,0]' --output positions --out "$T/sock.npy" >/dev/null 2>&1 \
    && ok auth-socket-deformctl-tokens || fail auth-socket-deformctl-tokens "$(cat "$T/l3.txt")"
"$PY" - "$ASOCK" "$TOK1" "$TOK2" "$T/sock.npy" <<'EOF' && ok auth-socket-python || fail auth-socket-python
import struct, sys, socket
sys.path.insert(0, ".")
from deformd_client import SocketClient, DeformdError
from deformd_client import npy
from deformd_client.sock import frame, INFER, PING, PONG, ERROR, _HDR, decode_error
port, t1, t2, ref = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
# PING needs no token (the socket's liveness)
assert SocketClient(port=port).ping(b"hi") == b"hi"
# INFO before AUTH: DF_EAUTH
try:
    SocketClient(port=port).info("")
    raise SystemExit("INFO without a token answered")
except DeformdError as e:
    assert e.code == -13, e
try:
    SocketClient(port=port, token=t1 + "x").list()
    raise SystemExit("wrong token accepted")
except DeformdError as e:
    assert e.code == -13 and "wrong token" in str(e), e
# an INFER header announcing 10 MB before AUTH: ERROR, closed, payload never read
s = socket.create_connection(("127.0.0.1", port), timeout=5)
s.sendall(_HDR.pack(0x4D524644, 1, INFER, 0, 77, 10 << 20))
hdr = s.recv(_HDR.size, socket.MSG_WAITALL)
magic, ver, ftype, flags, rid, length = _HDR.unpack(hdr)
payload = s.recv(length, socket.MSG_WAITALL)
assert ftype == ERROR and rid == 77, (ftype, rid)
err = decode_error(payload)
assert err.code == -13 and "authentication required" in str(err), err
assert s.recv(1) == b"", "connection not closed"
# each token opens the connection; the answer equals deformctl's (DEFORMD_TOKEN)
want = npy.read(ref)
for t in (t1, t2):
    c = SocketClient(port=port, token=t)
    assert c.list() == ["shirt"]
    out = c.infer("shirt", {"shape": [0.5, 1, 0, 0]}, outputs=["positions"])
    assert list(out["positions"].shape) == list(want.shape)[-2:]
    assert list(out["positions"].data) == list(want.data), "socket answer differs"
EOF
"$PY" -m deformd_client --http-port "$AHTTP" --socket-port "$ASOCK" --token-file "$T/tokens" \
    infer shirt --transport socket --output positions --out "$T/py_sock.npy" >/dev/null 2>&1 \
    && DEFORMD_TOKEN=$TOK2 "$PY" -m deformd_client --http-port "$AHTTP" infer shirt --output positions \
    --out "$T/py_http.npy" >/dev/null 2>&1 && cmp -s "$T/py_sock.npy" "$T/py_http.npy" \
    && ok auth-python-cli-tokens || fail auth-python-cli-tokens

# the router (deploy/nginx/deformd_route.js) keys a connection by its first
# request's character: an AUTH frame before it is skipped
if command -v node >/dev/null; then
    "$PY" - "$TOK2" >"$T/frames.hex" <<'EOF'
import sys
from deformd_client.sock import encode_auth, encode_infer, frame, PING
print((encode_auth(1, sys.argv[1]) + encode_infer(2, "shirt", {"shape": [[0.5, 1, 0, 0]]})).hex())
print(encode_auth(1, sys.argv[1]).hex())
print(frame(PING, 1, b"x").hex())
EOF
    node - "$ROOT/deploy/nginx/deformd_route.js" "$T/frames.hex" >"$T/route.log" 2>&1 <<'EOF'
const fs = require('fs');
const src = fs.readFileSync(process.argv[2], 'utf8').replace(/export default[^;]*;/, '');
const key_of = new Function(src + '; return key_of;')();
const [both, authOnly, ping] = fs.readFileSync(process.argv[3], 'utf8').trim().split('\n')
  .map((h) => Buffer.from(h, 'hex'));
const want = [[both, 'shirt'], [both.subarray(0, 50), null], [both.subarray(0, 85), null], [authOnly, null], [ping, '']];
for (const [b, k] of want) {
  const got = key_of(b);
  if (got !== k) { console.log(`key ${JSON.stringify(got)}, want ${JSON.stringify(k)}`); process.exit(1); }
}
EOF
    [ $? -eq 0 ] && ok auth-router-key-after-auth || fail auth-router-key-after-auth "$(cat "$T/route.log")"
else
    fail auth-router-key-after-auth "needs node"
fi

# ------------------------------------------------------------ count and logs
n=$(curl -s -H "Authorization: Bearer $TOK1" "$A/metrics" \
    | sed -n 's/^deformd_auth_refused_total{front="http"} \([0-9]*\)$/\1/p')
[ "$n" = "$REFUSED" ] && ok auth-metrics-refused-count \
    || fail auth-metrics-refused-count "deformd_auth_refused_total $n, made $REFUSED"
# the viewer in a browser: the login form, then the viewer drawing (after
# the count above: a browser also asks for /favicon.ico)
if [ -x /usr/bin/chromium ] && [ -f clients/js/node_modules/playwright-core/package.json ] \
    && command -v node >/dev/null; then
    if node - "$A" "$TOK1" "$ROOT/clients/js/node_modules" >"$T/browser.log" 2>&1 <<'EOF'
const path = require('path');
const [base, token, nm] = process.argv.slice(2);
const { chromium } = require(path.join(nm, 'playwright-core'));
(async () => {
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
  try {
    const page = await browser.newPage();
    const r = await page.goto(base + '/viewer/?character=shirt');
    if (r.status() !== 401) throw new Error('login page status ' + r.status());
    await page.fill('input[name=token]', token);
    await Promise.all([page.waitForNavigation(), page.click('button')]);
    if (page.url().includes('token')) throw new Error('token left in the address: ' + page.url());
    // the viewer lists the character and draws frames (each an infer with the cookie)
    await page.waitForFunction(() => {
      const o = [...document.querySelectorAll('#character option')].map((e) => e.value);
      const lat = document.querySelector('#st-latency .v');
      return o.includes('shirt') && lat && / ms$/.test(lat.textContent);
    }, null, { timeout: 15000 });
    console.log('viewer drew', await page.$eval('#st-latency .v', (e) => e.textContent));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
EOF
    then ok auth-viewer-browser-login; else fail auth-viewer-browser-login "$(tail -5 "$T/browser.log")"; fi
else
    fail auth-viewer-browser-login "needs /usr/bin/chromium, node and playwright-core (tools/deps.sh --test)"
fi

stop_pid "$APID"; APID=
stop_pid "$OPID"; OPID=
grep -q "http GET /viewer/index.html -> 302" "$T/all.log" && grep -q "http POST /v2/models/shirt/infer -> 401" "$T/all.log" \
    && ok auth-log-requests-on || fail auth-log-requests-on "$(tail -3 "$T/all.log")"
leak=
for t in "$TOK1" "$TOK2" "$TOK2Q"; do
    grep -qF -- "$t" "$T/all.log" "$T/open.log" "$T"/c*.log && leak="$leak ${t:0:5}"
done
[ -z "$leak" ] && ok auth-tokens-never-logged || fail auth-tokens-never-logged "$leak"
finish
