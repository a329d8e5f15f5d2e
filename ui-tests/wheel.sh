#!/usr/bin/env bash
# The wheel carries the prebuilt labextension: build it (this needs node), install
# it with node masked into a user's environment that already has the oldest supported
# JAX (a fresh venv on Python 3.11 with jax/jaxlib $VJPVIZ_WHEEL_JAX, default 0.6.2),
# check the install left that JAX as it was, that a kernel there runs it and says in one
# line what vjpviz does on it, and `jupyter labextension list`; then run the browser
# tests against a JupyterLab (and its kernel) served from that venv.
#
# "No node" on a machine where node lives in /usr/bin: the install and the server
# get a PATH whose first entry is a directory of shims named node, nodejs, npm,
# npx, jlpm and yarn that log each call and exit 127 (what a shell answers for a
# missing command). Any call during `pip install` fails this script. The server
# gets the same mask (ui-tests/run.sh, VJPVIZ_MASK_NODE=1): JupyterLab probes for
# node there (build status, yarn config), gets 127 and carries on; run.sh lists
# the probes, and anything that needed node would fail a browser test.
#
#   bash ui-tests/wheel.sh     the core browser tests (VJPVIZ_SUITE=all for every one)
# Last line: "N passed, M failed" (from run.sh; a packaging failure prints "0 passed, 1 failed").
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
export PATH="$ROOT/.venv/bin:$PATH"
TMP="$(mktemp -d /tmp/vjpviz-wheel.XXXXXX)"
trap '[ -n "${VJPVIZ_KEEP:-}" ] || rm -rf "$TMP"' EXIT
START=$SECONDS
VERSION="$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' "$ROOT/package.json")"

fail() {
  echo "wheel: $1" >&2
  echo "0 passed, 1 failed"
  exit 1
}
step() { echo "wheel: $1 ($((SECONDS - START)) s)" >&2; }

# 1. Build: a production labextension, then the wheel (the build hook skips
#    npm because the labextension exists).
(cd "$ROOT" && jlpm build:prod >"$TMP/build.log" 2>&1) || { tail -30 "$TMP/build.log" >&2; fail "jlpm build:prod failed"; }
(cd "$ROOT" && python -m pip wheel -q --no-deps -w "$TMP/dist" . >"$TMP/wheel.log" 2>&1) \
  || { tail -30 "$TMP/wheel.log" >&2; fail "pip wheel failed"; }
WHEEL="$(ls "$TMP"/dist/jupyter_vjpviz-*.whl 2>/dev/null | head -1)"
[ -n "$WHEEL" ] || fail "no wheel built"
python - "$WHEEL" "$VERSION" <<'PY' || fail "the wheel does not carry the labextension"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
base = f"jupyter_vjpviz-{sys.argv[2]}.data/data/share/jupyter/labextensions/jupyter-vjpviz/"
need = ["package.json", "install.json", "static/style.js", "schemas/jupyter-vjpviz/plugin.json"]
missing = [n for n in need if base + n not in names]
missing += [n for n in ["jupyter_vjpviz/capture/cpu_kernels.cc"] if n not in names]   # the watch's CPU kernels' source, compiled where installed
entry = [n for n in names if n.startswith(base + "static/remoteEntry.")]
assert not missing and entry, (missing, entry)
print("wheel: labextension files in the wheel:", sum(n.startswith(base) for n in names), file=sys.stderr)
PY
step "built $(basename "$WHEEL")"

# 2. A user's environment: a fresh venv on the oldest Python with the oldest JAX in
#    range already installed (scripts/test.sh passes its oldest); node masked.
JAX_VERSION="${VJPVIZ_WHEEL_JAX:-0.6.2}"
PY311="$(bash "$ROOT/scripts/find-python.sh" 3.11)" || fail "no Python 3.11 or newer"
"$PY311" -m venv "$TMP/v" || fail "could not make a venv"
"$TMP/v/bin/python" -m pip install -q --disable-pip-version-check "jax==$JAX_VERSION" "jaxlib==$JAX_VERSION" \
  >"$TMP/jax.log" 2>&1 || { tail -30 "$TMP/jax.log" >&2; fail "could not install jax $JAX_VERSION"; }
jax_pins() { "$TMP/v/bin/python" -m pip freeze --disable-pip-version-check | grep -E '^jax(lib)?=='; }
JAX_BEFORE="$(jax_pins)"
step "a venv on $("$TMP/v/bin/python" -V) with $(echo $JAX_BEFORE)"
source "$HERE/mask-node.sh"
mask_node "$TMP/nonode"
NONODE_PATH="$TMP/nonode:$TMP/v/bin:/usr/local/bin:/usr/bin:/bin"
[ "$(PATH="$NONODE_PATH" command -v node)" = "$TMP/nonode/node" ] || fail "could not mask node"

# 3. pip install the wheel (with the test extra: jupyterlab, ipykernel) without node.
PATH="$NONODE_PATH" "$TMP/v/bin/python" -m pip install -q "$WHEEL[test]" >"$TMP/install.log" 2>&1 \
  || { grep -v '^WARNING: Location' "$TMP/install.log" | tail -30 >&2; fail "pip install of the wheel failed"; }
[ ! -s "$TMP/nonode.calls" ] || { cat "$TMP/nonode.calls" >&2; fail "pip install ran node"; }
[ "$(jax_pins)" = "$JAX_BEFORE" ] || fail "installing the wheel changed JAX: $(echo $JAX_BEFORE) -> $(echo $(jax_pins))"
step "installed without node; JAX unchanged"

(cd "$TMP" && PATH="$NONODE_PATH" "$TMP/v/bin/python" -c '
import sys, jupyter_vjpviz
assert jupyter_vjpviz.__file__.startswith(sys.prefix), jupyter_vjpviz.__file__
') || fail "jupyter_vjpviz is not imported from the fresh venv"
# The kernel the browser tests get (the venv's python3 spec; run.sh's JUPYTER_DATA_DIR is
# as empty as this one) runs that JAX, and %load_ext vjpviz says in one line what it gets.
(cd "$TMP" && PATH="$NONODE_PATH" JUPYTER_DATA_DIR="$TMP/data" JAX_PLATFORMS=cpu \
  "$TMP/v/bin/python" - "$JAX_VERSION" <<'PY') || fail "a kernel in the venv does not run jax $JAX_VERSION with vjpviz"
import sys
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3")
try:
  out = {"stdout": [], "stderr": []}
  def run(code):
    for stream in out.values():
      stream.clear()
    reply = kc.execute_interactive(code, timeout=120, output_hook=lambda m: m["msg_type"] == "stream"
                                   and out[m["content"]["name"]].append(m["content"]["text"]))
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(out["stdout"]), "".join(out["stderr"])
  version, _ = run("import jax; print(jax.__version__)")
  assert version.strip() == sys.argv[1], version
  _, said = run("%load_ext vjpviz")
  status, _ = run("%vjpviz")
  line = f"vjpviz on jax {sys.argv[1]}"
  assert said.count("\n") <= 1 and (not said or said.startswith(line)), said
  assert any(s.startswith(line) for s in status.splitlines()), status
  print("wheel: the kernel says:", (said or status.splitlines()[0]).strip(), file=sys.stderr)
finally:
  kc.stop_channels()
  km.shutdown_kernel(now=True)
PY
LISTING="$(cd "$TMP" && PATH="$NONODE_PATH" "$TMP/v/bin/jupyter" labextension list 2>&1 | sed 's/\x1b\[[0-9;]*m//g')"
echo "$LISTING" | grep -E "^ *$TMP/v/share/jupyter/labextensions|jupyter-vjpviz" >&2
echo "$LISTING" | grep -qF "jupyter-vjpviz v$VERSION enabled OK (python, jupyter_vjpviz)" \
  || { echo "$LISTING" >&2; fail "jupyter labextension list does not say jupyter-vjpviz is enabled"; }
echo "$LISTING" | grep -q "$TMP/v/share/jupyter/labextensions" \
  || fail "the labextension is not in the fresh venv's share/jupyter/labextensions"

# 4. The browser tests against JupyterLab from that venv, node masked for the server.
step "browser tests against the wheel venv"
VJPVIZ_VENV="$TMP/v" VJPVIZ_MASK_NODE=1 VJPVIZ_SCREENSHOTS="$HERE/screenshots/wheel" \
  VJPVIZ_SUITE="${VJPVIZ_SUITE:-core}" bash "$HERE/run.sh"
exit $?
