#!/usr/bin/env bash
# tools/deps.sh — install what deformd needs, only what is missing.
#
#   tools/deps.sh          build + run needs: Debian packages, node/npm and
#                          three.js (copied into server/www/vendor/ for the viewer)
#   tools/deps.sh --test   the above, plus what the test suites need:
#                          chromium (headless viewer test), blender (the
#                          exporter's reference bake), playwright-core, nginx
#                          with the stream module and njs (the scale-out router
#                          test) and python3-kubernetes (manifest check)
#
# Idempotent and fast when nothing is missing: each Debian package is checked
# with dpkg-query, commands with `command -v`, npm packages by their files;
# apt-get / npm run only for what is missing (as root, or through sudo).
# `make run` calls the first form (it stays light: no browser); `make test`
# calls both.
set -eu
cd "$(dirname "$0")/.."
MODE=${1:-run}

PKGS="build-essential pkg-config libopenblas-dev libsuitesparse-dev libjansson-dev
libmicrohttpd-dev libuv1-dev libcurl4-openssl-dev libassimp-dev assimp-utils
assimp-testmodels python3 python3-numpy curl ca-certificates
${DF_EXTRA_PKGS:-}"

missing=()
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
# node and npm: any installation will do (Debian's nodejs+npm, or nodesource's
# nodejs which bundles npm — asking dpkg for "npm" would wrongly call it missing).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    missing+=(nodejs npm)
fi
if [ "$MODE" = "--test" ] && ! command -v chromium >/dev/null 2>&1; then
    missing+=(chromium)
fi
# tests/e2e/install.sh: the Python client installed with pip from the checkout
if [ "$MODE" = "--test" ]; then
    for p in python3-pip python3-setuptools; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
fi
# Blender: the independent reference of tests/e2e/rigapprox_blender.sh (the
# dataset exporter's bake against our LBS); ~25 s to install, no recommends.
if [ "$MODE" = "--test" ] && ! command -v blender >/dev/null 2>&1; then
    missing+=(blender)
fi

# The scale-out router (deploy/nginx, tests/e2e/scaleout.sh): nginx with its
# stream module and njs; the Kubernetes API models that deploy/k8s is checked
# against (tests/e2e/deploy_manifests.sh). A service the nginx package would
# start is not used: the test runs its own nginx on free loopback ports.
if [ "$MODE" = "--test" ]; then
    for p in nginx libnginx-mod-stream libnginx-mod-stream-js python3-kubernetes; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$p")
        fi
    done
fi

if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: installing missing Debian packages: ${missing[*]}" >&2
    SUDO=
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq || true
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm packages, pinned in clients/js/package.json (node_modules is gitignored).
JS=clients/js
need_npm=0
[ -f "$JS/node_modules/three/build/three.module.js" ] || need_npm=1
if [ "$MODE" = "--test" ] && [ ! -f "$JS/node_modules/playwright-core/package.json" ]; then
    need_npm=1
fi
if [ "$need_npm" -eq 1 ]; then
    echo "deps: npm install in $JS" >&2
    # three.js (the viewer) and playwright-core (its test) are devDependencies: the
    # published browser client has no dependencies; both are plain JS (no browser download)
    (cd "$JS" && npm install --no-audit --no-fund --loglevel=error)
fi

# The viewer's copies of three.js and of our browser client (served by
# deformd at /viewer/vendor/, no CDN; vendor/ is gitignored).
V=server/www/vendor
if ! cmp -s "$JS/deformd.js" "$V/deformd.js" 2>/dev/null; then
    mkdir -p "$V"
    cp "$JS/deformd.js" "$V/deformd.js"
fi
for f in three.module.js three.core.js; do
    src=$JS/node_modules/three/build/$f
    [ -f "$src" ] || continue
    if ! cmp -s "$src" "$V/$f" 2>/dev/null; then
        mkdir -p "$V"
        cp "$src" "$V/$f"
    fi
done
if [ -f "$JS/node_modules/three/examples/jsm/controls/OrbitControls.js" ] &&
   ! cmp -s "$JS/node_modules/three/examples/jsm/controls/OrbitControls.js" "$V/OrbitControls.js" 2>/dev/null; then
    mkdir -p "$V"
    cp "$JS/node_modules/three/examples/jsm/controls/OrbitControls.js" "$V/OrbitControls.js"
fi
exit 0
