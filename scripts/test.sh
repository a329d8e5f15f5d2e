#!/usr/bin/env bash
# Set up, then run every test: pytest (kernel, notebooks, CLI), jest (frontend),
# the browser tests against a real JupyterLab in Debian's Chromium, and the same
# against the wheel installed in a fresh venv without node.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

status=0
echo "== pytest"; python -m pytest -q -p no:cacheprovider tests || status=1
echo "== jest"; jlpm test || status=1
echo "== browser"; bash ui-tests/run.sh || status=1
# The wheel in a fresh venv without node: labextension list, then the core
# browser flow against JupyterLab served from that venv.
echo "== wheel"; bash ui-tests/wheel.sh || status=1
exit $status
