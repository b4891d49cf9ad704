#!/usr/bin/env bash
# install.sh — `make install` into a temporary prefix and a DESTDIR staging tree, then used as
# a user would: the installed deformd started from another directory (its viewer found under
# PREFIX/share), a C program built against the installed libdeformclient with pkg-config and
# run against it, the Python client installed with pip from the checkout, the browser client
# packed with npm and imported by node.
. "$(dirname "$0")/product_common.sh"
B=${B:-build}
P=$T/prefix
if make --no-print-directory -s B="$B" BIN="${BIN#$ROOT/}" install PREFIX="$P" >"$T/install.log" 2>&1; then ok make-install
else cat "$T/install.log"; fail make-install; finish; exit; fi
for f in bin/deformd bin/deform bin/deformctl lib/libdeformclient.a lib/libdeformclient.so \
         include/deformd/deformclient.h include/deformd/df.h lib/pkgconfig/deformclient.pc \
         share/deformd/www/index.html share/deformd/deformd.conf.example lib/systemd/system/deformd.service; do
    [ -e "$P/$f" ] && ok "installed $f" || fail "installed $f"
done
grep -q "^ExecStart=$P/bin/deformd " "$P/lib/systemd/system/deformd.service" && ok systemd-unit-prefix || fail systemd-unit-prefix
# DESTDIR: files staged under DESTDIR, paths inside them say PREFIX
make --no-print-directory -s B="$B" BIN="${BIN#$ROOT/}" install DESTDIR="$T/stage" PREFIX=/usr >"$T/stage.log" 2>&1 \
    && [ -x "$T/stage/usr/bin/deformd" ] && grep -q '^prefix=/usr$' "$T/stage/usr/lib/pkgconfig/deformclient.pc" \
    && ok destdir || { cat "$T/stage.log"; fail destdir; }

# the installed daemon, started from / : serves the demo and its installed viewer
build_demo "$T/demo" || fail demo
BIN_SAVE=$BIN; BIN=$P/bin
cd /
start_daemon "$T/demo" || { fail installed-daemon; finish; exit; }
cd "$ROOT"
BIN=$BIN_SAVE
grep -q "viewer: /viewer/ serves $P/share/deformd/www" "$T/deformd.log" && curl -sf "$URL/viewer/" | grep -qi "<html" \
    && ok installed-viewer || { cat "$T/deformd.log"; fail installed-viewer; }

# a C program against the installed library, through pkg-config
cat >"$T/hello.c" <<'C'
#include <deformclient.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    df_client_t *c = NULL;
    df_error_t err = {0};
    if (df_client_connect(argv[1], &c, &err)) { fprintf(stderr, "connect: %s\n", err.msg); return 1; }
    df_client_request_t q = {.character = "wuson", .n_poses = 1};
    df_client_result_t r;
    if (df_client_infer(c, &q, &r, &err)) { fprintf(stderr, "infer: %s\n", err.msg); return 1; }
    printf("outputs %d first %s shape", r.n_outputs, r.outputs[0].name);
    for (int d = 0; d < r.outputs[0].ndim; d++) printf(" %lld", (long long)r.outputs[0].shape[d]);
    printf("\n");
    df_client_result_free(&r);
    df_client_close(&c);
    (void)argc;
    return 0;
}
C
export PKG_CONFIG_PATH=$P/lib/pkgconfig
if cc -std=c11 -o "$T/hello" "$T/hello.c" $(pkg-config --cflags --libs deformclient) >"$T/cc.log" 2>&1; then ok pkg-config-build
else cat "$T/cc.log"; fail pkg-config-build; fi
out=$(LD_LIBRARY_PATH=$P/lib "$T/hello" "127.0.0.1:$SOCK" 2>&1)
echo "$out"
echo "$out" | grep -q "shape 1 3205 3" && ok pkg-config-program-runs || fail pkg-config-program-runs "$out"
cc -std=c11 -static-libgcc -o "$T/hello_static" "$T/hello.c" $(pkg-config --cflags deformclient) "$P/lib/libdeformclient.a" \
    $(pkg-config --static --libs-only-l deformclient | sed 's/-ldeformclient//') >"$T/cc2.log" 2>&1 \
    && "$T/hello_static" "127.0.0.1:$SOCK" | grep -q "shape 1 3205 3" && ok static-archive || { cat "$T/cc2.log"; fail static-archive; }

# Python: pip from the checkout (standard library only; no index needed)
if "$PY" -m pip --version >/dev/null 2>&1; then
    if "$PY" -m pip install --quiet --no-build-isolation --no-deps --no-index --target "$T/py" clients/python >"$T/pip.log" 2>&1; then
        ok pip-install
        PYTHONPATH=$T/py "$PY" - "$HTTP" <<'PYEOF' && ok pip-installed-client || fail pip-installed-client
import sys, deformd_client
print(deformd_client.__file__)
assert "/py/" in deformd_client.__file__
c = deformd_client.HttpClient("127.0.0.1", int(sys.argv[1]))
r = c.infer("morphcube", {"weights": [1.0, 0.5]})
print(sorted(r))
PYEOF
        [ -x "$T/py/bin/deformd-client" ] && ok pip-console-script || fail pip-console-script
    else cat "$T/pip.log"; fail pip-install; fi
else echo "# pip not available: skipped"; fi

# npm: the browser client packs with no dependencies and imports as an ES module
if command -v npm >/dev/null && command -v node >/dev/null; then
    mkdir -p "$T/npm"
    if (cd clients/js && npm pack --pack-destination "$T/npm" --loglevel=error >"$T/npm.log" 2>&1); then
        tar -xzf "$T"/npm/deformd-client-*.tgz -C "$T/npm"
        files=$(cd "$T/npm/package" && find . -type f | sort | tr '\n' ' ')
        echo "npm package: $files"
        node -e "const p=require('$T/npm/package/package.json'); process.exit(Object.keys(p.dependencies||{}).length ? 1 : 0)" \
            && ok npm-no-dependencies || fail npm-no-dependencies
        node --input-type=module -e "
import { DeformdClient } from '$T/npm/package/deformd.js';
const c = new DeformdClient('$URL');
const r = await c.infer('morphcube', { weights: [1, 0.5] });
const o = r.outputs ? r.outputs : r;
console.log('node infer ok', JSON.stringify(Object.keys(o)).slice(0, 80));
" >"$T/node.log" 2>&1 && ok npm-package-imports || { cat "$T/node.log"; fail npm-package-imports; }
    else cat "$T/npm.log"; fail npm-pack; fi
fi
finish
