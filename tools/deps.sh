#!/usr/bin/env bash
# tools/deps.sh — install the Debian packages deformd needs, only those missing.
# Idempotent: checks each package with dpkg-query and calls apt-get only when
# something is missing (as root, or through sudo when available).
set -eu
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
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing missing Debian packages: ${missing[*]}" >&2
SUDO=
[ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || true
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
