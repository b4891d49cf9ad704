#!/usr/bin/env bash
# tests/e2e/docker_steps.sh — docker/Dockerfile and docker/compose.yml, tested
# without a docker engine: the steps the image build runs are run here.
#
#  1. every package the build and runtime stages install exists in Debian
#     (apt-cache show) — the base images are Debian 12 like this machine;
#  2. bin/deformd needs only shared libraries that the runtime stage's
#     packages (and their dependencies) provide: ldd, dpkg -S, apt-cache depends;
#  3. the build stage's make command, run as written (into a temp build dir),
#     builds bin/deformd; tools/make_demo.sh builds the repository;
#  4. the runtime CMD, run as written (paths and ports mapped to this
#     machine), serves, and the HEALTHCHECK command succeeds against it;
#  5. compose.yml points at that Dockerfile, publishes the EXPOSEd ports on
#     loopback and checks the same health endpoint.
. "$(dirname "$0")/product_common.sh"
DF=docker/Dockerfile
CF=docker/compose.yml

# Stage bodies: lines from "FROM ... AS build" up to the next FROM, and after.
build_stage=$(awk '/^FROM .* AS build/{s=1;next} /^FROM /{s=0} s' "$DF")
run_stage=$(awk '/^FROM /{n++} n==2' "$DF")
grep -q '^FROM debian:bookworm-slim' "$DF" && grep -q '^FROM debian:bookworm AS build' "$DF" \
    && ok docker-multistage-bookworm || fail docker-multistage-bookworm

pkgs_of() { # apt-get install line of a stage -> package names
    sed -n 's/.*apt-get install -y --no-install-recommends \(.*\) && rm -rf.*/\1/p' | tr ' ' '\n' | grep -v '^$'
}
BUILD_PKGS=$(echo "$build_stage" | pkgs_of)
RUN_PKGS=$(echo "$run_stage" | pkgs_of)
[ -n "$BUILD_PKGS" ] && [ -n "$RUN_PKGS" ] && ok docker-package-lists-parsed \
    || fail docker-package-lists-parsed "no apt-get install line found"

bad=
for p in $BUILD_PKGS $RUN_PKGS; do
    apt-cache show "$p" >/dev/null 2>&1 || bad="$bad $p"
done
[ -z "$bad" ] && ok docker-packages-resolve || fail docker-packages-resolve "unknown:$bad"

# The build stage must install at least what tools/deps.sh checks (so its deps
# step installs nothing behind the Dockerfile's back).
DEPS_PKGS=$(sed -n '/^PKGS="/,/"$/p' tools/deps.sh | tr -d '"' | sed 's/^PKGS=//; s/\${[^}]*}//g' | tr ' ' '\n' | grep -v '^$')
bad=
for p in $DEPS_PKGS; do echo "$BUILD_PKGS" | grep -qx "$p" || bad="$bad $p"; done
[ -z "$bad" ] && ok docker-build-stage-has-deps || fail docker-build-stage-has-deps "missing:$bad"

# 3. the build stage's commands (make into a temp build dir; demo repository).
MAKE_CMD=$(echo "$build_stage" | sed -n 's/^RUN \(make .* all\)$/\1/p' | head -1)
DEMO_CMD=$(echo "$build_stage" | sed -n 's/^RUN \(tools\/make_demo.sh\) .*/\1/p' | head -1)
if [ -z "$MAKE_CMD" ] || [ -z "$DEMO_CMD" ]; then
    fail docker-build-commands-found "make / make_demo RUN lines not found"
else
    ok docker-build-commands-found
    # nproc → 2 here (shared machine); B/BIN point into the temp dir. The
    # image ships only bin/deformd (and bin/deform builds its demo repository),
    # so by default only those targets are built
    # with the Dockerfile's flags (DF_DOCKER_FULL=1: every target, as in the
    # image build).
    cmd=${MAKE_CMD//\$(nproc)/2}
    [ "${DF_DOCKER_FULL:-0}" = 1 ] || cmd="${cmd% all} $T/bin/deformd $T/bin/deform"
    # The image builds in a clean environment: drop variables a parent make
    # (e.g. `make asan`, whose SAN/OPT reach sub-makes through MAKEFLAGS) passes down.
    # (make also exports command-line variables such as SAN/OPT to the
    # environment of recipes, where `SAN ?=` would pick them up again)
    if (unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES SAN OPT CFLAGS; eval "nice $cmd B=$T/build BIN=$T/bin" >"$T/build.log" 2>&1) && [ -x "$T/bin/deformd" ]; then
        ok docker-build-make
    else
        tail -20 "$T/build.log"; fail docker-build-make "$cmd"
    fi
fi
DBIN=$T/bin
[ -x "$DBIN/deformd" ] || DBIN=$BIN
if BIN=$DBIN "$ROOT/$DEMO_CMD" "$T/demo-repo" >"$T/demo.log" 2>&1 && [ -f "$T/demo-repo/wuson/config.json" ]; then
    ok docker-build-demo-repo
else
    cat "$T/demo.log"; fail docker-build-demo-repo
fi

# 2. shared libraries of the binary the image ships vs the runtime packages.
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances $RUN_PKGS 2>/dev/null | grep -v '^ ' | sed 's/:.*//' | sort -u)
# both binaries the image ships (deformd, and deform for imports inside the container)
libs=$(for b in deformd deform; do ldd "$DBIN/$b"; done | awk '/=>/{print $1" "$3} !/=>/{print $1" "$1}' | grep -v linux-vdso | sort -u)
bad=
nf=$(for b in deformd deform; do ldd "$DBIN/$b"; done | grep -c 'not found')
while read -r soname path; do
    [ -e "$path" ] || continue
    real=$(readlink -f "$path")
    pkg=$(dpkg -S "$real" 2>/dev/null | head -1 | sed 's/:.*//')
    [ -n "$pkg" ] || pkg=$(dpkg -S "$path" 2>/dev/null | head -1 | sed 's/:.*//')
    # merged /usr: libc files may be registered under /lib
    [ -n "$pkg" ] || pkg=$(dpkg -S "${real#/usr}" 2>/dev/null | head -1 | sed 's/:.*//')
    if [ -z "$pkg" ] || ! echo "$closure" | grep -qx "$pkg"; then bad="$bad $soname(${pkg:-?})"; fi
done <<<"$libs"
if [ "$nf" -eq 0 ] && [ -z "$bad" ]; then
    ok docker-runtime-libs-covered
else
    fail docker-runtime-libs-covered "not provided by runtime packages:$bad (not found: $nf)"
fi
echo "deformd and deform need: $(echo "$libs" | awk '{print $1}' | tr '\n' ' ')"
# the build context: .dockerignore keeps host builds, git history and node_modules out
for x in .git build bin clients/js/node_modules server/www/vendor; do
    grep -qx "$x" .dockerignore || bad="$bad dockerignore:$x"
done
[ -z "$bad" ] && ok dockerignore || fail dockerignore "$bad"
grep -q 'docker-compose -f docker/compose.yml' "$CF" && grep -q 'docker compose -f docker/compose.yml' "$CF" \
    && ok compose-both-spellings || fail compose-both-spellings

# 4. the runtime CMD and HEALTHCHECK, with the image's paths mapped here.
CMD_JSON=$(echo "$run_stage" | sed -n 's/^CMD \(\[.*\]\)$/\1/p')
HC=$(echo "$run_stage" | sed -n 's/^HEALTHCHECK .* CMD \(.*\)$/\1/p')
if [ -n "$CMD_JSON" ] && [ -n "$HC" ]; then
    HTTP=$(free_port); SOCK=$(free_port)
    mapfile -t argv < <("$PY" - "$CMD_JSON" "$DBIN/deformd" "$T/demo-repo" "$ROOT/server/www" "$HTTP" "$SOCK" <<'EOF'
import json, sys
cmd, deformd, repo, www, http, sock = sys.argv[1:]
a = json.loads(cmd)
m = {"deformd": deformd, "/srv/deformd/models": repo, "/usr/share/deformd/www": www,
     "8000": http, "8001": sock, "0.0.0.0": "127.0.0.1"}
for x in a:
    print(m.get(x, x))
EOF
)
    "${argv[@]}" >"$T/deformd.log" 2>&1 &
    DPID=$!
    hc=${HC//8000/$HTTP}
    up=0
    for _ in $(seq 1 300); do
        kill -0 "$DPID" 2>/dev/null || break
        if (eval "$hc") >/dev/null 2>&1; then up=1; break; fi
        sleep 0.1
    done
    [ "$up" -eq 1 ] && ok docker-cmd-healthcheck || { cat "$T/deformd.log"; fail docker-cmd-healthcheck "$hc"; }
    if [ "$up" -eq 1 ] && curl -sf "http://127.0.0.1:$HTTP/viewer/" | grep -q 'deformd viewer'; then
        ok docker-cmd-serves-viewer
    else
        fail docker-cmd-serves-viewer
    fi
else
    fail docker-cmd-healthcheck "CMD or HEALTHCHECK not found"
fi

# COPY --from=build sources must exist after the build steps.
bad=
while read -r src; do
    s=${src#/src/}
    case "$s" in
        bin/*) [ -e "$DBIN/${s#bin/}" ] || bad="$bad $src" ;;
        demo-repo) [ -d "$T/demo-repo" ] || bad="$bad $src" ;;
        *) [ -e "$ROOT/$s" ] || bad="$bad $src" ;;
    esac
done < <(echo "$run_stage" | sed -n 's/^COPY --from=build \([^ ]*\) .*/\1/p')
[ -z "$bad" ] && ok docker-copy-sources-exist || fail docker-copy-sources-exist "$bad"

# 5. compose.yml
c1=$(grep -c 'dockerfile: docker/Dockerfile' "$CF")
c2=$(grep -c '/v2/health/ready' "$CF")
ports_ok=1
for p in $(echo "$run_stage" | sed -n 's/^EXPOSE //p'); do
    grep -q "\"127.0.0.1:$p:$p\"" "$CF" || ports_ok=0
done
[ "$c1" -eq 1 ] && [ "$c2" -ge 1 ] && [ "$ports_ok" -eq 1 ] && ok docker-compose-consistent \
    || fail docker-compose-consistent "dockerfile=$c1 health=$c2 ports=$ports_ok"
finish
