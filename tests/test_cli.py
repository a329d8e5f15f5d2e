"""``python -m jupyter_vjpviz run``: text report, HTML file, the script's exit status."""
import os
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]

RULES = """
import sys
import jax, jax.numpy as jnp
print("argv", sys.argv[1:])
@jax.custom_vjp
def act(x): return jnp.sin(x)
def act_fwd(x): return act(x), x
def act_bwd(x, g): return ({bad},)
act.defvjp(act_fwd, act_bwd)
print("grad", jax.grad(lambda x: act(x).sum())(jnp.ones(3)).dtype)
{tail}
"""


def run(tmp_path, bad, tail="", *args):
  script = tmp_path / "train.py"
  script.write_text(RULES.format(bad=bad, tail=tail))
  report = tmp_path / "report.html"
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
  proc = subprocess.run([sys.executable, "-m", "jupyter_vjpviz", "run", "--report", str(report),
                         str(script), *args], capture_output=True, text=True, env=env,
                        cwd=tmp_path, timeout=300)
  return proc, report


def test_failing_script_reports_and_exits_1(tmp_path):
  proc, report = run(tmp_path, "jnp.cos(x)[:2] * g[:2]", "", "--lr", "0.1")
  assert proc.returncode == 1
  assert "argv ['--lr', '0.1']" in proc.stdout
  assert "Traceback" in proc.stderr and "ValueError" in proc.stderr
  assert "act's bwd rule act_bwd returned float32[2]" in proc.stderr
  note = [l for l in proc.stderr.splitlines() if l.startswith("vjpviz: act's bwd rule")][0]
  assert "vjpviz.last()" not in note and "HTML report" in note   # a script can't call vjpviz.last()
  m = re.search(r"HTML report: (\S+)", proc.stderr)
  assert m and pathlib.Path(m.group(1)) == report
  html = report.read_text()
  assert html.startswith("<!DOCTYPE html>") and "act_bwd" in html and html.count("<html") == 1


def test_silent_dtype_is_reported_and_the_scripts_status_kept(tmp_path):
  proc, report = run(tmp_path, "(jnp.cos(x) * g).astype(jnp.bfloat16)", "sys.exit(3)")
  assert proc.returncode == 3
  assert "grad bfloat16" in proc.stdout
  assert "JAX let it through" in proc.stderr and report.exists()


def test_clean_script_writes_no_report(tmp_path):
  proc, report = run(tmp_path, "jnp.cos(x) * g")
  assert proc.returncode == 0, proc.stderr
  assert "HTML report" not in proc.stderr and not report.exists()


def test_report_goes_by_default_next_to_where_the_script_was_run(tmp_path):
  script = tmp_path / "train.py"
  script.write_text(RULES.format(bad="jnp.cos(x)[:2] * g[:2]", tail=""))
  cwd = tmp_path / "work"
  cwd.mkdir()
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
  proc = subprocess.run([sys.executable, "-m", "jupyter_vjpviz", "run", str(script)],
                        capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
  report = cwd / "train.vjpviz.html"
  assert proc.returncode == 1 and f"HTML report: {report}" in proc.stderr, proc.stderr
  assert "act_bwd" in report.read_text()


def test_top_level_help_says_where_the_report_goes():
  proc = subprocess.run([sys.executable, "-m", "jupyter_vjpviz", "--help"], capture_output=True,
                        text=True, cwd=REPO, timeout=120)
  assert proc.returncode == 0 and "--report" in proc.stdout
  assert "SCRIPT.vjpviz.html in the working directory" in " ".join(proc.stdout.split())
