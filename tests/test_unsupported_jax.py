"""A real JAX older than pyproject's floor: %load_ext works and says so in one line.

scripts/test.sh makes ``.venv-jax-old`` with jax 0.5.3 (the floor is 0.6); the
session runs there with this checkout on PYTHONPATH. vjpviz either hooks what it
finds, saying what this JAX gets, or is off, saying why; the user's code is the same.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OLD_PYTHON = ROOT / ".venv-jax-old" / "bin" / "python"


def _session(python, *args) -> dict:
  out = subprocess.run([str(python), str(ROOT / "tests" / "old_jax_session.py"), *args],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
  return json.loads(out.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def session():
  if not OLD_PYTHON.exists():
    pytest.fail(f"{OLD_PYTHON} is missing: scripts/test.sh creates it")
  return _session(OLD_PYTHON)


def test_the_old_jax_is_older_than_the_floor(session):
  from jupyter_vjpviz.capture.compat.capabilities import TESTED
  assert _minor(session["jax"]) < _minor(TESTED[0])


def _minor(version: str) -> tuple[int, ...]:
  return tuple(int(p) for p in version.split(".")[:2])


def test_load_ext_says_in_one_line_what_this_jax_gets_or_why_vjpviz_is_off(session):
  (line,) = session["load_stderr"].splitlines()
  tested = f"vjpviz on jax {session['jax']} (tested on jax "
  assert line.startswith((tested, f"vjpviz: off: cannot hook jax {session['jax']} ")), line
  if line.startswith(tested):
    assert line.split("; ")[0] in session["status"]   # %vjpviz says the same
    skipped = [l.strip() for l in session["status"].splitlines() if l.strip().startswith("skipped ")]
    assert f"{len(skipped)} skipped" in session["status"]
  else:
    assert session["status"].startswith("vjpviz: off")


def test_the_users_error_and_gradients_are_unchanged_on_the_old_jax(session):
  assert session["plain"] is not None and session["hooked"] == session["plain"]
  plain, hooked = session["values"]
  assert hooked == plain and len(plain) == 3


def test_a_jax_that_renamed_an_internal_costs_its_capability_in_one_line():
  """A JAX without an internal vjpviz reads (``source_info_util``, here deleted after plain
  JAX ran): %load_ext says in one line what is off and why; diagnoses and the user's
  error and gradients are as before."""
  session = _session(sys.executable, "--remove", "jax._src:source_info_util")
  (line,) = session["load_stderr"].splitlines()
  assert line.startswith("vjpviz on jax ") and "diagnoses bwd_type" in line, line
  off = line.split("; off: ", 1)[1]
  assert "source locations (JAX lacks source_info_util." in off, line
  assert "tracebacks as JAX's own (JAX lacks source_info_util.register_exclusion)" in off
  assert line.split("; 0 hook points")[0] in session["status"]
  assert session["plain"][0] == "ValueError" and session["hooked"] == session["plain"]
  plain, hooked = session["values"]
  assert hooked == plain and len(plain) == 3
