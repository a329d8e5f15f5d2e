"""A real JAX outside the supported range: %load_ext works and says what it skips.

scripts/test.sh makes ``.venv-jax-old`` with jax 0.7.2, whose VJP machinery
lacks several of the hook points vjpviz wraps on 0.12; the session runs there
with this checkout on PYTHONPATH.
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


def test_the_old_jax_is_outside_the_supported_range(session):
  from jupyter_vjpviz.capture.hook import SUPPORTED_JAX
  assert not session["jax"].startswith(SUPPORTED_JAX)


def test_load_ext_says_in_one_line_which_hook_points_are_skipped(session):
  (line,) = session["load_stderr"].splitlines()
  assert line.startswith("vjpviz: built for jax") and f"found {session['jax']}" in line
  assert "hook points skipped: " in line and "none" not in line


def test_status_lists_each_skipped_point_with_the_reason(session):
  status = session["status"]
  assert "vjpviz: installed" in status
  skipped = [l.strip() for l in status.splitlines() if l.strip().startswith("skipped ")]
  assert skipped and all(l.endswith(": absent in this JAX") for l in skipped)
  assert f"{len(skipped)} skipped" in status


def test_the_users_error_and_gradients_are_unchanged_on_the_old_jax(session):
  assert session["plain"] is not None and session["hooked"] == session["plain"]
  plain, hooked = session["values"]
  assert hooked == plain and len(plain) == 3


def test_a_jax_we_cannot_import_from_costs_one_line_and_percent_vjpviz_says_why():
  """A JAX that renamed an internal vjpviz imports: no failing %load_ext, vjpviz is off."""
  session = _session(sys.executable, "--remove", "jax._src:source_info_util")
  (line,) = session["load_stderr"].splitlines()
  assert line.startswith("vjpviz: off: cannot hook jax ") and "source_info_util" in line
  assert "source_info_util" in session["status"] and session["status"].startswith("vjpviz: off")
  assert session["plain"][0] == "ValueError" and session["hooked"] == session["plain"]
  plain, hooked = session["values"]
  assert hooked == plain and len(plain) == 3
