#!/usr/bin/env bash
# Browser tests of the VJP debugger panel: a real JupyterLab, Debian chromium
# driven by playwright-core. One command for CI:  bash ui-tests/run.sh
# Exits non-zero on any failure; the last line is "N passed, M failed".
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
if [ -x "$ROOT/.venv/bin/jupyter" ]; then
  export PATH="$ROOT/.venv/bin:$PATH"
fi
CHROMIUM="${VJPVIZ_CHROMIUM:-/usr/bin/chromium}"
SUMMARY="0 passed, 1 failed"

fail_early() {
  echo "ui-tests: $1" >&2
  echo "$SUMMARY"
  exit 1
}
command -v jupyter >/dev/null || fail_early "jupyter is not on PATH"
command -v node >/dev/null || fail_early "node is not installed"
[ -x "$CHROMIUM" ] || fail_early "no chromium at $CHROMIUM (apt-get install -y chromium)"
[ -d "$ROOT/node_modules/playwright-core" ] || fail_early "playwright-core missing: run jlpm install"
jupyter labextension list 2>&1 | grep -q "jupyter-vjpviz.*enabled" \
  || fail_early "the jupyter-vjpviz labextension is not installed (pip install -e . or jupyter labextension develop .)"

WORK="$(mktemp -d /tmp/vjpviz-ui.XXXXXX)"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null
  fi
  [ -n "${VJPVIZ_KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$WORK/root" "$WORK/runtime" "$WORK/config" "$WORK/ipython" "$WORK/workspaces" \
  "$WORK/settings/@jupyterlab/apputils-extension" "$WORK/browser" "$HERE/screenshots"
# No news toast over the panel, no update check.
cat > "$WORK/settings/@jupyterlab/apputils-extension/notification.jupyterlab-settings" <<'JSON'
{"checkForUpdates": false, "fetchNews": "false"}
JSON
PORT="$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
TOKEN="vjpviz-ui-$RANDOM$RANDOM"
python "$HERE/make_notebook.py" "$WORK/root" || fail_early "could not write the test notebook"

export JUPYTER_RUNTIME_DIR="$WORK/runtime" JUPYTER_CONFIG_DIR="$WORK/config" IPYTHONDIR="$WORK/ipython" \
  JUPYTERLAB_SETTINGS_DIR="$WORK/settings" JUPYTERLAB_WORKSPACES_DIR="$WORK/workspaces" \
  JUPYTER_PLATFORM_DIRS=1 XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_PLATFORMS=cpu
jupyter lab --no-browser --allow-root --ip=127.0.0.1 --port="$PORT" \
  --IdentityProvider.token="$TOKEN" --ServerApp.root_dir="$WORK/root" \
  --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate \
  --LabApp.extension_manager=readonly --ServerApp.open_browser=False \
  >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 120); do
  if curl -sf "http://127.0.0.1:$PORT/api/status?token=$TOKEN" >/dev/null 2>&1; then break; fi
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.log" >&2; fail_early "jupyter lab exited"; }
  sleep 0.25
done
curl -sf "http://127.0.0.1:$PORT/api/status?token=$TOKEN" >/dev/null || fail_early "jupyter lab did not start"

export VJPVIZ_URL="http://127.0.0.1:$PORT" VJPVIZ_TOKEN="$TOKEN" VJPVIZ_CHROMIUM="$CHROMIUM" \
  VJPVIZ_PROFILE="$WORK/browser" VJPVIZ_SCREENSHOTS="$HERE/screenshots" VJPVIZ_SUMMARY="$WORK/summary"
NODE_PATH="$ROOT/node_modules" node "$HERE/panel.spec.mjs"
STATUS=$?
if [ -s "$WORK/summary" ]; then
  SUMMARY="$(cat "$WORK/summary")"
fi
if [ "$STATUS" -ne 0 ]; then
  echo "--- jupyter server log (tail) ---" >&2
  tail -n 40 "$WORK/server.log" >&2
fi
cleanup
trap - EXIT
echo "$SUMMARY"
exit "$STATUS"
