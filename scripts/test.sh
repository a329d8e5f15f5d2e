#!/usr/bin/env bash
# Set up, then run every test: pytest (kernel, notebooks, CLI), the kernel-side
# tests again on older JAX releases (one count line each), jest (frontend), the
# browser tests against a real JupyterLab in Debian's Chromium, and the same against
# the wheel installed in a fresh venv without node. Ends with one line adding up
# every suite: "total: N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

# Older JAX releases, each in a venv of its own on the oldest Python they run on: a
# user's environment with that JAX, into which the checkout is pip-installed as a user
# would (a wheel: the labextension is already built, so no npm runs); the install must
# leave JAX as it was (suite "install", counted). OLD_JAX is tested (OLD_JAX_TESTS, and
# OLDEST_JAX_TESTS on the oldest);
# UNSUPPORTED_JAX is older than pyproject's floor, for tests/test_unsupported_jax.py
# (this checkout on PYTHONPATH, only the runtime dependencies installed).
OLD_JAX=(0.6.2 0.7.2 0.8.3 0.9.2 0.10.2)
# On each older JAX the suites whose outcome depends on it: capture, diagnoses, fixes and
# their verification, JAX's errors unchanged, vjpviz's own faults, threads and uninstall.
# Each test file imports there; what a JAX lacks is skipped by feature (tests/jax_features.py).
# Rendering, panel and library suites do not depend on the JAX (or need libraries not
# installed with an older one): they run on 0.12, and the kernel's comm and magics on the
# oldest (OLDEST_JAX_TESTS). A test of vjpviz's own bookkeeping is not run again per JAX.
OLD_JAX_TESTS=(tests/test_jax_versions.py tests/test_capture.py tests/test_fixes.py
               tests/test_fix_verdicts.py tests/test_fix_candidates.py tests/test_oracle.py
               tests/test_hook_properties.py tests/test_reliability.py tests/test_user_pytrees.py
               tests/test_gradcheck.py tests/test_jax_suite_findings.py tests/test_apply_safety.py
               tests/test_factory_rules.py tests/test_late_fixes.py
               --deselect tests/test_reliability.py::test_history_is_bounded_and_drops_the_oldest)
OLDEST_JAX_TESTS=(tests/test_comm.py tests/test_comm_fuzz.py tests/test_magics.py)
UNSUPPORTED_JAX=0.5.3
OLD_PYTHON=$(bash scripts/find-python.sh 3.11)
pip_q() { "$@" --disable-pip-version-check -q 2>&1 | grep -v '^WARNING: Location' || true; }

jax_venv() {
  local venv=.venv-jax-$1
  if [[ ! -x $venv/bin/python ]]; then
    "$OLD_PYTHON" -m venv "$venv"
    pip_q "$venv/bin/pip" install "jax==$1" "jaxlib==$1"
  fi
}
jax_pins() { "$1/bin/pip" freeze --disable-pip-version-check | grep -E '^jax(lib)?==' | tr '\n' ' '; }

# The checkout pip-installed into each older JAX's venv, as a user would: one line each,
# then "N passed, M failed" (a venv whose JAX changed is not tested further).
install_into_old_jax() {
  local version venv before after kept=0 changed=0
  for version in "${OLD_JAX[@]}"; do
    jax_venv "$version"
    venv=.venv-jax-$version
    before=$(jax_pins "$venv")
    pip_q "$venv/bin/pip" install . pytest hypothesis ipykernel jupyter_client nbformat nbclient
    after=$(jax_pins "$venv")
    if [[ -n $before && $before == "$after" ]]; then
      kept=$((kept + 1))
      echo "install into $venv: JAX unchanged ($before)"
    else
      changed=$((changed + 1))
      echo "$version" >>"$logs/jax-changed"
      echo "install into $venv changed JAX: $before-> $after" >&2
    fi
  done
  echo "$kept passed, $changed failed"
  ((changed == 0))
}

if [[ ! -x .venv-jax-old/bin/python ]] || ! grep -q "^jax==$UNSUPPORTED_JAX$" <(.venv-jax-old/bin/python -m pip freeze); then
  rm -rf .venv-jax-old
  "$OLD_PYTHON" -m venv .venv-jax-old
  pip_q .venv-jax-old/bin/pip install "jax==$UNSUPPORTED_JAX" "jaxlib==$UNSUPPORTED_JAX" \
    ipython ipywidgets graphviz 'pygraphviz>=2.0.4' comm jsonschema nh3
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

export VJPVIZ_CAPABILITIES=$logs/capabilities   # each JAX's kinds, for the README's table
pytest_summary='[0-9]+ (passed|failed).* in [0-9.]+s'
suite install '^[0-9]+ passed, [0-9]+ failed$' install_into_old_jax
suite pytest "$pytest_summary" python -m pytest -q -p no:cacheprovider tests
for version in "${OLD_JAX[@]}"; do
  if grep -qx "$version" "$logs/jax-changed" 2>/dev/null; then
    echo "== jax-$version: not run, installing vjpviz changed its JAX"
    continue
  fi
  oldest=()
  [[ $version == "${OLD_JAX[0]}" ]] && oldest=("${OLDEST_JAX_TESTS[@]}")
  suite "jax-$version" "$pytest_summary" ".venv-jax-$version/bin/python" -m pytest -q \
    -p no:cacheprovider "${OLD_JAX_TESTS[@]}" "${oldest[@]}"
done
python scripts/capability_table.py --check README.md "$VJPVIZ_CAPABILITIES"/*.json || true
suite jest '^Tests:' jlpm test
suite browser '^[0-9]+ passed, [0-9]+ failed$' bash ui-tests/run.sh
# The wheel installed without node into a fresh venv that already has the oldest JAX
# tested: JAX unchanged, labextension list, then the core browser flow against
# JupyterLab served from that venv (its kernel on that JAX).
suite wheel '^[0-9]+ passed, [0-9]+ failed$' env VJPVIZ_WHEEL_JAX="${OLD_JAX[0]}" bash ui-tests/wheel.sh

echo "total: $passed passed, $failed failed"
exit $status
