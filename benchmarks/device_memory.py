"""Device memory of vjpviz's analysis: each safety-corpus program's peak, plain and hooked.

A debugger that doubles an accelerator's peak turns a failing step into an out-of-memory
one. Each program (``benchmarks/safety_corpus/``) runs twice in a fresh interpreter,
plain and with ``jupyter_vjpviz.install()`` first; after it ends (its exception caught)
the process prints the default device's ``peak_bytes_in_use``. Per program: both peaks
and their ratio. On a CPU backend JAX keeps no such statistics and the program says so
(``benchmarks/safety_corpus.py`` measures peak RSS there).

    PYTHONPATH=. python benchmarks/device_memory.py [--quick] [name ...]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

CORPUS = pathlib.Path(__file__).resolve().parent / "safety_corpus"
ROOT = CORPUS.parent.parent

DRIVER = """
import json, runpy, sys
import jax
if sys.argv[2] == "hooked":
  import jupyter_vjpviz
  jupyter_vjpviz.install()
try:
  runpy.run_path(sys.argv[1], run_name="__main__")
except BaseException as e:
  raised = type(e).__name__
else:
  raised = None
stats = jax.devices()[0].memory_stats() or {}
print("DEVICE_MEMORY " + json.dumps({"peak": stats.get("peak_bytes_in_use"), "raised": raised,
                                     "platform": jax.devices()[0].platform}))
"""


def peak(program: pathlib.Path, mode: str, quick: bool, timeout: float) -> dict:
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(CORPUS)]))
  if quick:
    env["SAFETY_CORPUS_QUICK"] = "1"
  try:
    run = subprocess.run([sys.executable, "-c", DRIVER, str(program), mode], env=env,
                         cwd=CORPUS, capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired:
    return {"peak": None, "raised": "timeout", "platform": None}
  for line in run.stdout.splitlines():
    if line.startswith("DEVICE_MEMORY "):
      return json.loads(line.split(" ", 1)[1])
  return {"peak": None, "raised": f"no result (exit {run.returncode})", "platform": None}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("names", nargs="*", help="corpus programs (default: all)")
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--timeout", type=float, default=300)
  args = parser.parse_args()
  programs = sorted(p for p in CORPUS.glob("*.py") if not p.name.startswith("_")
                    and (not args.names or p.stem in args.names))
  print(f"{'program':28} {'plain MiB':>10} {'hooked MiB':>11} {'ratio':>6}  raised (plain / hooked)")
  for program in programs:
    plain, hooked = (peak(program, m, args.quick, args.timeout) for m in ("plain", "hooked"))
    if plain["peak"] is None or hooked["peak"] is None:
      print(f"{program.stem:28} {'n/a':>10} {'n/a':>11} {'':>6}  {plain['raised']} / {hooked['raised']}"
            f"  (platform {plain['platform'] or hooked['platform']}: no device statistics)")
      continue
    mib = lambda b: b / 2**20
    print(f"{program.stem:28} {mib(plain['peak']):10.1f} {mib(hooked['peak']):11.1f} "
          f"{hooked['peak'] / max(plain['peak'], 1):6.2f}  {plain['raised']} / {hooked['raised']}")


if __name__ == "__main__":
  main()
