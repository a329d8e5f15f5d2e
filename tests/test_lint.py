"""ruff over the repository, with pyproject's ``[tool.ruff]``: any finding fails the run."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATHS = ("jupyter_vjpviz", "tests", "benchmarks", "scripts")


def _ruff() -> list[str] | None:
  """ruff from this interpreter's environment (the ``test`` extra), else from PATH."""
  beside = Path(sys.executable).with_name("ruff")
  if beside.exists():
    return [str(beside)]
  found = shutil.which("ruff")
  return [found] if found else None


def test_ruff_finds_nothing():
  ruff = _ruff()
  if ruff is None:
    pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
  run = subprocess.run([*ruff, "check", "--no-cache", "--output-format", "concise", *PATHS],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stdout + run.stderr
