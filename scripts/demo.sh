#!/usr/bin/env bash
# Set up, then open JupyterLab on the tour notebook. With --headless (machines
# without a browser), execute the tour instead and write examples/tour.html.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

if [[ "${1:-}" == "--headless" ]]; then
  # The kernel talks over local sockets (ipc): over TCP, ipykernel warns that its
  # traffic is unencrypted; over ipc it never leaves this machine. Its socket paths
  # are relative to the kernel's working directory (the notebook's folder), so
  # nbconvert runs from there too, or it looks for them in the wrong place.
  (cd examples && jupyter nbconvert --to html --execute --allow-errors \
    --KernelManager.transport=ipc --ExecutePreprocessor.timeout=300 --output tour.html tour.ipynb)
  echo "demo: executed the tour; open examples/tour.html"
else
  exec jupyter lab --allow-root --ip=127.0.0.1 examples/tour.ipynb
fi
