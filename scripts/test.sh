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
NEWEST_JAX=$(python -c 'import jax; print(jax.__version__)')

# Older JAX releases, each in a venv of its own on the oldest Python they run on: a
# user's environment with that JAX, into which the checkout is pip-installed as a user
# would (a wheel: the labextension is already built, so no npm runs); the install must
# leave JAX as it was (suite "install", counted). OLD_JAX is tested (OLD_JAX_TESTS, and
# OLDEST_JAX_TESTS on the oldest);
# UNSUPPORTED_JAX is older than pyproject's floor, for tests/test_unsupported_jax.py
# (this checkout on PYTHONPATH, only the runtime dependencies installed).
# The main lane runs the newest JAX pip resolves (the next release is found by CI the day it
# appears); a release of this list that is that JAX runs there alone, not twice.
OLD_JAX=(0.6.2 0.7.2 0.8.3 0.9.2 0.10.2 0.11.2 0.12.1)
# On each older JAX the suites whose outcome depends on it: capture, diagnoses, fixes and
# their verification, JAX's errors unchanged, vjpviz's own faults, threads and uninstall.
# Each test file imports there; what a JAX lacks is skipped by feature (tests/jax_features.py).
# Rendering, panel and library suites do not depend on the JAX (or need libraries not
# installed with an older one): they run on the newest, and the kernel's comm and magics on
# the oldest (OLDEST_JAX_TESTS). A test of vjpviz's own bookkeeping is not run again per JAX.
OLD_JAX_TESTS=(tests/test_jax_versions.py tests/test_capture.py tests/test_fixes.py
               tests/test_fix_verdicts.py tests/test_fix_candidates.py tests/test_oracle.py
               tests/test_hook_properties.py tests/test_reliability.py tests/test_user_pytrees.py
               tests/test_gradcheck.py tests/test_jax_suite_findings.py tests/test_apply_safety.py
               tests/test_factory_rules.py tests/test_push.py tests/test_upgrade_flags.py
               tests/test_forward_mode.py tests/test_jvp_of_custom_vjp.py
               --deselect tests/test_reliability.py::test_history_is_bounded_and_drops_the_oldest)
OLDEST_JAX_TESTS=(tests/test_comm.py tests/test_comm_fuzz.py tests/test_magics.py
                  tests/test_watch_flow.py tests/test_watch_safety.py)
# The releases between the oldest and the newest older one run lean (CI's time): fixes are
# judged the same way on every JAX (their suites run on the oldest, on 0.11 and on the
# newest), and the hook's properties get a quarter of their examples.
LEAN_JAX=(0.7.2 0.8.3 0.9.2 0.10.2 0.12.1)
LEAN_SKIPS=(tests/test_fixes.py tests/test_fix_verdicts.py tests/test_fix_candidates.py
            tests/test_factory_rules.py)
# JAX's AD upgrade flags (jax_custom_jvp3, jax_custom_vjp3, jax_remat3, ...: the code paths
# it means to make the default) all on, through VJPVIZ_JAX_FLAGS=all (tests/conftest.py sets
# every one this JAX has): the capture suites again, on every JAX that has a flag. Every
# diagnosis kind, NaN localisation and gradcheck with the flags off and on, compared in one
# process, is tests/test_upgrade_flags.py, which runs on every JAX.
FLAG_TESTS=(tests/test_capture.py tests/test_hijax_rules.py tests/test_forward_mode.py
            tests/test_jvp_of_custom_vjp.py)
UNSUPPORTED_JAX=0.5.3
mapfile -t OLD_JAX < <(printf '%s\n' "${OLD_JAX[@]}" | grep -vxF "$NEWEST_JAX")
OLD_PYTHON=$(bash scripts/find-python.sh 3.11)
NEW_PYTHON=$(bash scripts/find-python.sh 3.12)
pip_q() { "$@" --disable-pip-version-check -q 2>&1 | grep -v '^WARNING: Location' || true; }

# The oldest Python a JAX release runs on: 3.12 from JAX 0.11.
python_for() { if [[ $1 == 0.[6-9].* || $1 == 0.10.* ]]; then echo "$OLD_PYTHON"; else echo "$NEW_PYTHON"; fi; }

jax_venv() {
  local venv=.venv-jax-$1
  if [[ ! -x $venv/bin/python ]]; then
    "$(python_for "$1")" -m venv "$venv"
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

# suite NAME SUMMARY-LINE-REGEX COMMAND...: run it, keep its log ($logs/NAME.log) and its
# counts ($logs/NAME.count: "passed failed", or "- -" when no count line was found).
suite() {
  local name=$1 summary=$2
  shift 2
  echo "== $name"
  local ok=1
  "$@" >"$logs/$name.log" 2>&1 || ok=0
  if ((ok)); then tail -n 15 "$logs/$name.log"; else tail -n 300 "$logs/$name.log"; fi
  local line p f=0 n
  line=$(grep -E "$summary" "$logs/$name.log" | tail -1 || true)
  p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || true)
  for n in $(grep -oE '[0-9]+ (failed|errors?)' <<<"$line" | grep -oE '[0-9]+'); do
    f=$((f + n))
  done
  if [[ -z $p ]]; then
    echo "== $name: no test count found" >&2
    ok=0
  fi
  echo "${p:-0} $f $ok" >"$logs/$name.count"
  # The failing tests by name (pytest, jest, Playwright), and browser tests that passed
  # only on their retry, for the last lines of the run.
  grep -E '^(FAILED|ERROR) |^ *(✘|✕) |^ui-tests: flaky' "$logs/$name.log" | head -n 20 \
    >"$logs/$name.failures" || true
}

# One JAX release's suites: as they are, then with the upgrade flags on (where it has one).
jax_suites() {
  local version=$1 py=.venv-jax-$1/bin/python oldest=()
  if grep -qx "$version" "$logs/jax-changed" 2>/dev/null; then
    echo "== jax-$version: not run, installing vjpviz changed its JAX"
    echo "0 0 0" >"$logs/jax-$version.count"
    return
  fi
  local tests=("${OLD_JAX_TESTS[@]}") scale=1 skip
  [[ $version == "${OLD_JAX[0]}" ]] && oldest=("${OLDEST_JAX_TESTS[@]}")
  if [[ " ${LEAN_JAX[*]} " == *" $version "* ]]; then
    scale=0.25
    for skip in "${LEAN_SKIPS[@]}"; do tests=("${tests[@]/$skip}"); done
  fi
  VJPVIZ_PROPERTY_SCALE=$scale suite "jax-$version" "$pytest_summary" "$py" -m pytest -q \
    -p no:cacheprovider ${tests[@]} "${oldest[@]}"
  flag_suite "jax-$version+flags" "$py"
}

flag_suite() {
  local name=$1 py=$2
  if [[ $("$py" -c 'import sys; sys.path.insert(0, "tests"); import jax_features as f; print(bool(f.upgrade_flags("all")))') == True ]]; then
    VJPVIZ_JAX_FLAGS=all suite "$name" "$pytest_summary" "$py" -m pytest -q -p no:cacheprovider "${FLAG_TESTS[@]}"
  else
    echo "== $name: this JAX has none of the upgrade flags"
  fi
}

export VJPVIZ_CAPABILITIES=$logs/capabilities   # each JAX's kinds, for the README's table
pytest_summary='[0-9]+ (passed|failed).* in [0-9.]+s'

# Two lanes, one per core: the older JAX releases (install, then each release's suites) in
# the background; the newest JAX, the frontend and the browsers in the foreground.
older_lane() {
  suite install '^[0-9]+ passed, [0-9]+ failed$' install_into_old_jax
  for version in "${OLD_JAX[@]}"; do
    jax_suites "$version"
  done
}
older_lane >"$logs/older-lane.out" 2>&1 &
older=$!

suite pytest "$pytest_summary" python -m pytest -q -p no:cacheprovider tests
flag_suite "pytest+flags" python
# Speed as a tested property: issue 48's figures as ratios measured interleaved in one run
# (beside the older lane's load), against benchmarks/speed_baseline.json (docs/benchmarks.md).
suite speed '^[0-9]+ passed, [0-9]+ failed$' env PYTHONPATH="$PWD:$PWD/benchmarks" \
  python benchmarks/speed.py
suite lint '^[0-9]+ passed, [0-9]+ failed$' bash -c \
  'if jlpm lint:check; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; exit 1; fi'
suite jest '^Tests:' jlpm test
suite browser '^[0-9]+ passed, [0-9]+ failed$' bash ui-tests/run.sh
# The wheel installed without node into a fresh venv that already has the oldest JAX
# tested: JAX unchanged, labextension list, then the core browser flow against
# JupyterLab served from that venv (its kernel on that JAX).
suite wheel '^[0-9]+ passed, [0-9]+ failed$' env VJPVIZ_WHEEL_JAX="${OLD_JAX[0]}" bash ui-tests/wheel.sh

wait "$older" || true
echo "== older JAX lane"
cat "$logs/older-lane.out"
python scripts/capability_table.py --check docs/jax-versions.md "$VJPVIZ_CAPABILITIES"/*.json || true

passed=0
failed=0
status=0
for count in "$logs"/*.count; do
  read -r p f ok <"$count"
  printf '%-22s %5s passed, %s failed\n' "$(basename "$count" .count)" "$p" "$f"
  passed=$((passed + p))
  failed=$((failed + f))
  ((ok)) || status=1
done
for failures in "$logs"/*.failures; do
  [[ -s $failures ]] && sed "s/^/$(basename "$failures" .failures): /" "$failures"
done
echo "total: $passed passed, $failed failed"
exit $status
