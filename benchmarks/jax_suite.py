"""JAX's own tests as the judge: their outcomes plain and with vjpviz installed, and the wall time.

Runs pytest on JAX's test files twice per round, once plain and once with this file
loaded as a pytest plugin (``-p jax_suite``: ``vv.install()`` for the whole run),
compares the outcome of every test id (and its message, hex addresses aside), counts
vjpviz's own "could not" / "cannot compare" lines, and prints hooked/plain wall time
(target <= 1.05 on ``custom_api_test.py``). The tests come from a snapshot of jax-ml/jax
(``--mirror``, a bare git dir; the default is the one this workplace keeps) or from a
directory of copies (``--dir``). A snapshot a release apart from the installed JAX imports
names that JAX lacks: each is bound to its new name (``--alias OLD=NEW``) or to a
placeholder class, and the tests that use it fail alike plain and hooked.

    python benchmarks/jax_suite.py                          # custom_api_test.py
    python benchmarks/jax_suite.py --alias VJPHiPrimitive=HiPrim --run custom_api_test.py \\
        --run hijax_test.py --run "api_test.py -k 'vjp or grad or remat or checkpoint or Custom'"
"""
from __future__ import annotations

import argparse
import ast
import collections
import importlib
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

MIRROR = "/work/.mirror/jax-ml+jax/repo"
HERE = os.path.dirname(os.path.abspath(__file__))
OUR_LINES = re.compile(r"vjpviz: (could not|cannot compare)[^\n]*")
# JAX's own pytest settings (its pyproject.toml): warnings are errors there too.
PYTEST_INI = """[pytest]
markers =
    multiaccelerator: may use multiple accelerators
    SlurmMultiNodeGpuTest: Slurm multinode GPU test
filterwarnings =
    error
    default:.*not machine-readable.*:UserWarning
    ignore:Transparent hugepages
    ignore:jax.cloud_tpu_init was deprecated
addopts = --import-mode=importlib
"""


# ------------------------------------------------------------- the pytest plugin

def pytest_configure(config):
  import jupyter_vjpviz as vv
  if os.environ.get("JAX_SUITE_SLOTS_TAKEN"):   # --slots-taken: vjpviz's wrapped entry points
    for tool in range(6):                        # (its path on Python 3.11, or under profilers)
      if sys.monitoring.get_tool(tool) is None:
        sys.monitoring.use_tool_id(tool, "jax_suite")
  vv.install()


def pytest_unconfigure(config):
  import jupyter_vjpviz as vv
  vv.uninstall()


# ------------------------------------------------------------------- the runner

def prepare(mirror: str | None, directory: str | None, files: list[str],
            aliases: dict[str, str]) -> str:
  """A directory holding the test files, their imports shimmed, and JAX's pytest settings."""
  where = tempfile.mkdtemp(prefix="jax_suite_")
  for name in files:
    if directory:
      with open(os.path.join(directory, name)) as f:
        text = f.read()
    else:
      text = subprocess.run(["git", "--git-dir", mirror, "show", f"HEAD:tests/{name}"],
                            check=True, capture_output=True, text=True).stdout
    text, shimmed = shim_imports(text, aliases)
    if shimmed:
      print(f"{name}: not in this JAX: {', '.join(shimmed)}")
    with open(os.path.join(where, name), "w") as f:
      f.write(text)
  with open(os.path.join(where, "pytest.ini"), "w") as f:
    f.write(PYTEST_INI)
  return where


def shim_imports(text: str, aliases: dict[str, str]) -> tuple[str, list[str]]:
  """``text`` with each name a top-level ``from jax... import`` takes that the installed JAX
  lacks bound to its alias in the same module, else to a placeholder class (subclassed and
  called at import time, failing only where a test uses it); and those names."""
  lines, shimmed = text.splitlines(keepends=True), []
  for node in reversed(ast.parse(text).body):
    if not isinstance(node, ast.ImportFrom) or (node.module or "").split(".")[0] != "jax":
      continue
    try:
      module = importlib.import_module(node.module)
    except ImportError:
      continue
    kept, missing = [], []
    for alias in node.names:
      (kept if _has(module, alias.name) else missing).append(alias)
    if not missing:
      continue
    node.names = kept
    new = [ast.unparse(node) + "\n"] if kept else []
    for alias in missing:
      bound, renamed = alias.asname or alias.name, aliases.get(alias.name)
      shimmed.append(f"{alias.name} (as {renamed})" if renamed else alias.name)
      new.append(f"from {node.module} import {renamed} as {bound}\n" if renamed else
                 f"class {bound}:\n  def __init__(self, *args, **kwargs): pass\n")
    lines[node.lineno - 1:node.end_lineno] = new
  return "".join(lines), sorted(shimmed)


def _has(module, name: str) -> bool:
  if hasattr(module, name):
    return True
  try:
    importlib.import_module(f"{module.__name__}.{name}")
    return True
  except ImportError:
    return False


def run(where: str, pytest_args: list[str], hooked: bool, tag: str
        ) -> tuple[dict, float, float, list[str]]:
  """(test id -> (outcome, message), wall seconds, CPU seconds, vjpviz's own lines) of one
  pytest run. Its CPU time is less at the mercy of other work on a shared machine."""
  xml = os.path.join(where, f"{tag}.xml")
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [HERE, *filter(None, [os.environ.get("PYTHONPATH")])]))
  cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args,
         f"--junitxml={xml}", "-o", "junit_logging=all", *(["-p", "jax_suite"] if hooked else [])]
  t0, c0 = time.perf_counter(), _children_cpu()
  proc = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True)
  wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
  outcomes, ours = {}, [m.group(0) for m in OUR_LINES.finditer(proc.stdout + proc.stderr)]
  for case in ET.parse(xml).getroot().iter("testcase"):
    test = f"{case.get('classname')}::{case.get('name')}"
    outcome, message = "passed", ""
    for child in case:
      if child.tag in ("failure", "error", "skipped"):
        outcome, message = child.tag, child.get("message") or ""
      elif child.tag == "system-err":
        ours += [m.group(0) for m in OUR_LINES.finditer(child.text or "")]
    outcomes[test] = (outcome, re.sub(r"0x[0-9a-f]+", "0x…", message)[:300])
  return outcomes, wall, cpu, sorted(set(ours))


def _children_cpu() -> float:
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def compare(plain: dict, hooked: dict) -> tuple[list, list]:
  """Test ids whose outcome differs, and those whose message alone differs."""
  outcome, message = [], []
  for test in sorted(set(plain) | set(hooked)):
    a, b = plain.get(test, ("absent", "")), hooked.get(test, ("absent", ""))
    if a[0] != b[0]:
      outcome.append((test, a, b))
    elif a[1] != b[1]:
      message.append((test, a, b))
  return outcome, message


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--mirror", default=MIRROR)
  parser.add_argument("--dir", help="take the test files from here instead of the mirror")
  parser.add_argument("--run", action="append", help="pytest's arguments: a file and its options")
  parser.add_argument("--alias", action="append", default=[], metavar="OLD=NEW",
                      help="a name the snapshot imports that this JAX calls NEW")
  parser.add_argument("--slots-taken", action="store_true",
                      help="hooked runs with every free sys.monitoring slot taken first")
  parser.add_argument("--rounds", type=int, default=1, help="plain/hooked pairs per --run")
  args = parser.parse_args()
  runs = [shlex.split(s) for s in (args.run or ["custom_api_test.py"])]
  if args.slots_taken:
    os.environ["JAX_SUITE_SLOTS_TAKEN"] = "1"
  if not args.dir and not os.path.isdir(args.mirror):
    print(f"no snapshot of jax-ml/jax at {args.mirror} (fetch it, or pass --dir)")
    return
  where = prepare(args.mirror, args.dir, sorted({s[0] for s in runs}),
                  dict(a.split("=", 1) for a in args.alias))
  print(f"{'file (selection)':64s} {'tests':>6s} {'same':>6s} {'differ':>6s} {'lines':>6s}"
        "  wall hooked/plain   (lines: vjpviz's own could-not lines)")
  for pytest_args in runs:
    ratios, cpu_ratios, plain, hooked, ours = [], [], {}, {}, []
    for r in range(args.rounds):
      plain, t_plain, c_plain, _ = run(where, pytest_args, False, f"plain{r}")
      hooked, t_hooked, c_hooked, ours = run(where, pytest_args, True, f"hooked{r}")
      ratios.append(t_hooked / t_plain)
      cpu_ratios.append(c_hooked / c_plain)
    outcome, message = compare(plain, hooked)
    tests = len(set(plain) | set(hooked))
    print(f"{' '.join(pytest_args)[:64]:64s} {tests:6d} {tests - len(outcome):6d} {len(outcome):6d}"
          f" {len(ours):6d}"
          f"  {statistics.median(ratios):.3f} (median of {', '.join(f'{r:.3f}' for r in ratios)}; last "
          f"{t_plain:.0f} s plain, {t_hooked:.0f} s hooked)")
    print(f"  CPU hooked/plain {statistics.median(cpu_ratios):.3f} (median of "
          f"{', '.join(f'{r:.3f}' for r in cpu_ratios)}); load average {os.getloadavg()[1]:.2f}")
    tally = collections.Counter(o for o, _ in plain.values())
    print("  plain outcomes: " + ", ".join(f"{n} {o}" for o, n in sorted(tally.items())))
    for test, a, b in outcome:
      print(f"  outcome differs: {test}: plain {a[0]} {a[1][:80]!r}; hooked {b[0]} {b[1][:80]!r}")
    for test, a, b in message:
      print(f"  message differs: {test}: plain {a[1][:80]!r}; hooked {b[1][:80]!r}")
    for line in ours:
      print(f"  vjpviz said: {line[:200]}")
  shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
  main()
