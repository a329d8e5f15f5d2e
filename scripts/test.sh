#!/usr/bin/env bash
# Set up, then run every test: pytest (kernel, notebooks, CLI), jest (frontend),
# the browser tests against a real JupyterLab in Debian's Chromium, and the same
# against the wheel installed in a fresh venv without node. Ends with one line
# adding up every suite: "total: N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

# A real JAX outside the supported range, for tests/test_unsupported_jax.py (this
# checkout runs there from PYTHONPATH; only the runtime dependencies are installed).
if [[ ! -x .venv-jax-old/bin/python ]]; then
  "$(bash scripts/find-python.sh)" -m venv .venv-jax-old
  .venv-jax-old/bin/pip install --disable-pip-version-check -q jax==0.7.2 jaxlib==0.7.2 \
    ipython ipywidgets graphviz 'pygraphviz>=2.0.4' comm
fi

logs=$(mktemp -d)
status=0
passed=0
failed=0

# suite NAME SUMMARY-LINE-REGEX COMMAND...: run it, keep its log, add up its counts.
suite() {
  local name=$1 summary=$2
  shift 2
  echo "== $name"
  "$@" 2>&1 | tee "$logs/$name.log" || status=1
  local line p n
  line=$(grep -E "$summary" "$logs/$name.log" | tail -1 || true)
  p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || true)
  if [[ -z $p ]]; then
    echo "== $name: no test count found" >&2
    status=1
  fi
  passed=$((passed + ${p:-0}))
  for n in $(grep -oE '[0-9]+ (failed|errors?)' <<<"$line" | grep -oE '[0-9]+'); do
    failed=$((failed + n))
  done
}

suite pytest '[0-9]+ (passed|failed).* in [0-9.]+s' python -m pytest -q -p no:cacheprovider tests
suite jest '^Tests:' jlpm test
suite browser '^[0-9]+ passed, [0-9]+ failed$' bash ui-tests/run.sh
# The wheel in a fresh venv without node: labextension list, then the core
# browser flow against JupyterLab served from that venv.
suite wheel '^[0-9]+ passed, [0-9]+ failed$' bash ui-tests/wheel.sh

echo "total: $passed passed, $failed failed"
exit $status
