#!/usr/bin/env bash
# Browser tests of the VJP debugger panel under Galata, JupyterLab's own harness
# (@playwright/test) with Debian chromium: ui-tests/galata/*.spec.ts against a real
# JupyterLab, and notebook7.spec.ts against Notebook 7. One command for CI:
#   bash ui-tests/run.sh
# Exits non-zero on any failure; the last line is "N passed, M failed".
#
# Environment:
#   VJPVIZ_VENV=DIR     serve JupyterLab (and the kernel) from this venv instead of
#                       .venv, e.g. one with the wheel installed (ui-tests/wheel.sh)
#   VJPVIZ_MASK_NODE=1  start the servers with node, npm, jlpm and yarn masked by shims
#                       that exit 127 (as a missing command) and log each call
#   VJPVIZ_SUITE=core   only the core flow of the issue (skip the tests tagged @extra)
#   VJPVIZ_TESTS=RE     run only the tests whose titles match this regex
#   VJPVIZ_SCREENSHOTS=DIR  where the screenshots go (default ui-tests/screenshots)
#   VJPVIZ_CHROMIUM, VJPVIZ_KEEP (keep the temp dir)
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
# The test driver runs on node; find it before any masking.
NODE="$(command -v node || true)"
if [ -n "${VJPVIZ_VENV:-}" ]; then
  VJPVIZ_VENV="$(cd "$VJPVIZ_VENV" && pwd)"
  export PATH="$VJPVIZ_VENV/bin:$PATH"
elif [ -x "$ROOT/.venv/bin/jupyter" ]; then
  export PATH="$ROOT/.venv/bin:$PATH"
fi
CHROMIUM="${VJPVIZ_CHROMIUM:-/usr/bin/chromium}"
SHOTS="${VJPVIZ_SCREENSHOTS:-$HERE/screenshots}"
SUMMARY="0 passed, 1 failed"

fail_early() {
  echo "ui-tests: $1" >&2
  echo "$SUMMARY"
  exit 1
}
command -v jupyter >/dev/null || fail_early "jupyter is not on PATH"
[ -n "$NODE" ] || fail_early "node is not installed (the test driver needs it)"
[ -x "$CHROMIUM" ] || fail_early "no chromium at $CHROMIUM (apt-get install -y chromium)"
[ -d "$ROOT/node_modules/@jupyterlab/galata" ] || fail_early "@jupyterlab/galata missing: run jlpm install"
# Playwright runs the specs without checking their types: tsc does, first.
"$NODE" "$ROOT/node_modules/typescript/bin/tsc" -p "$HERE/galata" >&2 || fail_early "the specs do not type-check"

WORK="$(mktemp -d /tmp/vjpviz-ui.XXXXXX)"
SERVER_PID=""
stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null
  fi
  SERVER_PID=""
}

cleanup() {
  stop_server
  [ -n "${VJPVIZ_KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
SERVER_PATH="$PATH"
if [ -n "${VJPVIZ_MASK_NODE:-}" ]; then
  source "$HERE/mask-node.sh"
  mask_node "$WORK/nonode"
  SERVER_PATH="$WORK/nonode:$PATH"
  [ "$(PATH="$SERVER_PATH" command -v node)" = "$WORK/nonode/node" ] || fail_early "could not mask node"
fi
echo "ui-tests: jupyter $(command -v jupyter)" >&2
# (`labextension list` asks yarn for its config: with node masked it says so and goes on.)
PATH="$SERVER_PATH" jupyter labextension list 2>&1 | sed 's/\x1b\[[0-9;]*m//g' \
  | grep -q "jupyter-vjpviz v[0-9.]* enabled OK" \
  || fail_early "the jupyter-vjpviz labextension is not installed (pip install -e . or jupyter labextension develop .)"
: > "$WORK/nonode.calls"

mkdir -p "$WORK/root" "$WORK/runtime" "$WORK/config" "$WORK/ipython" "$WORK/workspaces" \
  "$WORK/settings/@jupyterlab/apputils-extension" "$WORK/settings/@jupyterlab/notebook-extension" \
  "$SHOTS"
# No news toast over the panel, no update check.
cat > "$WORK/settings/@jupyterlab/apputils-extension/notification.jupyterlab-settings" <<'JSON'
{"checkForUpdates": false, "fetchNews": "false"}
JSON
# Start a notebook's own kernel without the "Select Kernel" dialog (which a fresh
# page can show when the kernel specs arrive after the notebook).
cat > "$WORK/settings/@jupyterlab/notebook-extension/tracker.jupyterlab-settings" <<'JSON'
{"autoStartDefaultKernel": true}
JSON
TOKEN="vjpviz-ui-$RANDOM$RANDOM"
python "$HERE/make_notebook.py" "$WORK/root" || fail_early "could not write the test notebook"

export JUPYTER_RUNTIME_DIR="$WORK/runtime" JUPYTER_CONFIG_DIR="$WORK/config" IPYTHONDIR="$WORK/ipython" \
  JUPYTER_DATA_DIR="$WORK/data" \
  JUPYTERLAB_SETTINGS_DIR="$WORK/settings" JUPYTERLAB_WORKSPACES_DIR="$WORK/workspaces" \
  JUPYTER_PLATFORM_DIRS=1 XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_PLATFORMS=cpu \
  VJPVIZ_BUDGET="${VJPVIZ_BUDGET:-600}"   # the kernels' fixes judged whatever the load

# start_server galata|notebook: serve on a free port; sets PORT and SERVER_PID.
# galata: JupyterLab with Galata's settings and in-page helpers, no token, an empty root
# (each test uploads its notebooks); notebook: Notebook 7 on the notebooks, with a token.
start_server() {
  local mode="$1" app=notebook token="$TOKEN" root="$WORK/root" extra
  PORT="$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
  if [ "$mode" = notebook ]; then
    extra=(--JupyterNotebookApp.expose_app_in_browser=True)
  else
    app=lab token="" root="$WORK/galata-root"
    mkdir -p "$root"
    extra=(--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate
      --LabApp.extension_manager=readonly --LabApp.expose_app_in_browser=True
      --config="$HERE/galata/jupyter_server_config.py")
  fi
  PATH="$SERVER_PATH" jupyter "$app" --no-browser --allow-root --ip=127.0.0.1 --port="$PORT" \
    --IdentityProvider.token="$token" --ServerApp.root_dir="$root" \
    --ServerApp.open_browser=False "${extra[@]}" \
    >"$WORK/server-$mode.log" 2>&1 &
  SERVER_PID=$!
  SERVER_LOG="$WORK/server-$mode.log"
  for _ in $(seq 120); do
    if curl -sf "http://127.0.0.1:$PORT/api/status?token=$TOKEN" >/dev/null 2>&1; then break; fi
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$SERVER_LOG" >&2; return 1; }
    sleep 0.25
  done
  curl -sf "http://127.0.0.1:$PORT/api/status?token=$TOKEN" >/dev/null
}

# add_summary "P passed, F failed": adds a suite's counts to the closing line.
add_summary() {
  local p1 f1 p2 f2
  read -r p1 _ f1 _ <<<"$SUMMARY"
  read -r p2 _ f2 _ <<<"$1"
  SUMMARY="$((p1 + p2)) passed, $((f1 + f2)) failed"
}

GALATA=("$NODE" "$ROOT/node_modules/@playwright/test/cli.js" test --config "$HERE/galata/playwright.config.js"
  --pass-with-no-tests ${VJPVIZ_TESTS:+--grep "$VJPVIZ_TESTS"})
[ "${VJPVIZ_SUITE:-all}" != core ] || GALATA+=(--grep-invert @extra)

# has_tests NAME: some test of project NAME is selected (else its server is not started).
has_tests() {
  NODE_PATH="$ROOT/node_modules" "${GALATA[@]}" --project "$1" --list --reporter=list 2>/dev/null | grep -q "^Total: [1-9]"
}

# run_project NAME: Galata's project NAME against the server started last ($PORT): each
# test with its own page (and, under JupyterLab, its own directory and kernels).
run_project() {
  local report="$WORK/galata-$1.json" status
  VJPVIZ_GALATA_URL="http://127.0.0.1:$PORT" VJPVIZ_NB7_URL="http://127.0.0.1:$PORT" VJPVIZ_TOKEN="$TOKEN" \
    VJPVIZ_NOTEBOOKS="$WORK/root" VJPVIZ_GALATA_REPORT="$report" NODE_PATH="$ROOT/node_modules" \
    "${GALATA[@]}" --project "$1"
  status=$?
  # Playwright's report: expected (passed), flaky (passed on its retry: named), unexpected.
  add_summary "$(python - "$report" <<'PY' 2>/dev/null || echo "0 passed, 1 failed"
import json, sys
report = json.load(open(sys.argv[1]))
def specs(suite):
  yield from suite.get("specs", [])
  for inner in suite.get("suites", []):
    yield from specs(inner)
for suite in report["suites"]:
  for spec in specs(suite):
    if any(t["status"] == "flaky" for t in spec["tests"]):
      print(f"ui-tests: flaky (passed on its retry): {spec['file']}: {spec['title']}", file=sys.stderr)
s = report["stats"]
print(s["expected"] + s["flaky"], "passed,", s["unexpected"], "failed")
PY
)"
  if [ "$status" -ne 0 ]; then
    STATUS=1
    echo "--- server log for $1 (tail) ---" >&2
    tail -n 40 "$SERVER_LOG" >&2
  fi
}

export VJPVIZ_CHROMIUM="$CHROMIUM" VJPVIZ_SCREENSHOTS="$SHOTS"
SUMMARY="0 passed, 0 failed"
STATUS=0
# JupyterLab with Galata's settings and in-page helpers.
if start_server galata; then
  run_project lab
  stop_server
else
  echo "ui-tests: jupyter lab for Galata did not start" >&2
  add_summary "0 passed, 1 failed"
  STATUS=1
fi

# Notebook 7: the same panel in its right sidebar, against `jupyter notebook` with
# the same flags.
if has_tests notebook7; then
  if ! PATH="$SERVER_PATH" jupyter notebook --version >/dev/null 2>&1; then
    echo "ui-tests: jupyter notebook (Notebook 7) is not installed: pip install 'notebook>=7.4,<8'" >&2
    add_summary "0 passed, 1 failed"
    STATUS=1
  elif start_server notebook; then
    run_project notebook7
    stop_server
  else
    echo "ui-tests: jupyter notebook did not start" >&2
    add_summary "0 passed, 1 failed"
    STATUS=1
  fi
fi
# The README's pictures are screenshots this run took (the panel on a failing rule, the
# graph opened in the main area, a vv.grads report inline, a vv.watch plot in the panel),
# so they show what the tests saw: copied into docs/images when the full run took them
# (commit them with the change that altered them).
if [ -z "${VJPVIZ_TESTS:-}" ] && [ -z "${VJPVIZ_VENV:-}" ]; then
  mkdir -p "$ROOT/docs/images"
  for pair in 02-diagnosis:panel 14-unscoped-main:graph 16-grads-report:grads 17-watch:watch; do
    [ -f "$SHOTS/${pair%%:*}.png" ] && cp "$SHOTS/${pair%%:*}.png" "$ROOT/docs/images/${pair##*:}.png"
  done
fi
if [ -n "${VJPVIZ_MASK_NODE:-}" ]; then
  # JupyterLab's server probes for node (build status, yarn config, npm prefix);
  # the shims answer 127 like a missing command and it carries on ("Could not
  # determine jupyterlab build status without nodejs"). What needed node would
  # have failed a test above; the probes are listed, not counted.
  if [ -s "$WORK/nonode.calls" ]; then
    echo "ui-tests: node probes answered 127 by the mask: $(sort "$WORK/nonode.calls" | uniq -c | tr '\n' ';')" >&2
  else
    echo "ui-tests: nothing asked for node" >&2
  fi
fi
cleanup
trap - EXIT
echo "$SUMMARY"
exit "$STATUS"
