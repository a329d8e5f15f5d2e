"""The README's main command for a machine without a browser, run as the README writes it.

``bash scripts/demo.sh --headless`` from the repository root executes the tour notebook and
writes ``examples/tour.html``. It once failed on every run (the kernel's ipc sockets were
looked for relative to the wrong directory) while no test ran it; this one runs the same
command line, from the same place, and reads what the user would open.
"""
import html
import os
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOUR = ROOT / "examples" / "tour.html"


def _code_cells(page: str) -> list[str]:
  """The text of each code cell (input and output) of an nbconvert HTML page, in order."""
  cells = re.split(r'<div[^>]*class="jp-Cell ', page)[1:]
  code = [c for c in cells if c.startswith("jp-CodeCell")]
  return [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in code]


@pytest.mark.skipif(shutil.which("jupyter", path=str(ROOT / ".venv" / "bin")) is None,
                    reason="no .venv: the demo is run on a checkout set up by scripts/setup.sh")
def test_the_headless_demo_executes_the_tour_with_its_diagnoses():
  before = TOUR.stat().st_mtime if TOUR.exists() else None
  env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "VJPVIZ_"))}
  run = subprocess.run(["bash", "scripts/demo.sh", "--headless"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
  assert "demo: executed the tour" in run.stdout
  assert TOUR.exists() and TOUR.stat().st_mtime != before, "the tour was not written anew"

  cells = _code_cells(TOUR.read_text())
  failing = [c for c in cells if "Traceback" in c or "Error" in c]
  # Sections 1 to 3 raise JAX's error; each comes with vjpviz's one-line note naming a diagnosis.
  assert len(failing) == 3, [c[:200] for c in cells]
  for cell in failing:
    assert "vjpviz.last() has the full diagnosis" in cell, cell[-2000:]
  # Section 4 runs (JAX lets a bfloat16 gradient through) and vjpviz warns about its dtype.
  silent = next(c for c in cells if "astype(jnp.bfloat16)" in c)
  assert "Traceback" not in silent and "bfloat16" in silent.split("astype(jnp.bfloat16)")[1]
  # Section 5: the proactive check returns the headline of the problem it finds.
  check = cells[-1]
  assert "vv.check(" in check and re.search(r"\[\s*['\"]", check.split("vv.check(")[1]), check
