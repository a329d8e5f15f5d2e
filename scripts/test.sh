#!/usr/bin/env bash
# Set up, then run every test: pytest (kernel, notebooks, CLI), jest (frontend),
# and the browser tests against a real JupyterLab in Debian's Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

status=0
echo "== pytest"; python -m pytest -q -p no:cacheprovider tests || status=1
echo "== jest"; jlpm test || status=1
if [[ -f ui-tests/run.sh ]]; then
  echo "== browser"; bash ui-tests/run.sh || status=1
fi
# The wheel in a fresh venv without node: labextension list, then the core
# browser flow against JupyterLab served from that venv (ui-tests/wheel.sh).
if [[ -f ui-tests/wheel.sh ]]; then
  echo "== wheel"; bash ui-tests/wheel.sh || status=1
fi
exit $status
