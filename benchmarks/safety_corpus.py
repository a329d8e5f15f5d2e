"""Is vjpviz safe to leave on? Each corpus program run plain and hooked, in fresh processes.

``benchmarks/safety_corpus/`` holds real-shaped programs, most with one wrong custom
rule, some failing elsewhere or not at all: diverging loops in the primal, effects
(debug.print, debug.callback, io_callback, impure callbacks), a large activation,
a slow primal, a rule applied inside its own bwd, equinox and flax rules; and programs
that ask vjpviz for a check (``vv.nans``, ``vv.grads``: ``_mode.HOOKED``; run plain, they
take ``jax.grad`` instead), whose extra runs must print and write nothing. Each runs
twice in a fresh interpreter and an empty working folder: plain (no vjpviz) and
hooked (``jupyter_vjpviz.install()`` first), under a per-process timeout (a hooked run
that times out is a failure, with its time). Per program it prints the extra wall
time (hooked - plain), the peak RSS ratio (the child's ru_maxrss, from wait4), and
whether stdout, the files written and the exception (type, message, notes other
than vjpviz's, traceback frames) were identical. This is issue 27's acceptance table.

    PYTHONPATH=. .venv/bin/python benchmarks/safety_corpus.py [--quick] [--json] [--timeout S] [name ...]

``--quick`` runs the small instances (``SAFETY_CORPUS_QUICK=1``: the large activation
1024^2 instead of 8192^2, a shorter slow primal); ``--json`` prints one JSON object.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

CORPUS = pathlib.Path(__file__).resolve().parent / "safety_corpus"
ROOT = CORPUS.parent.parent
VJPVIZ_NOTE = "vjpviz"


@dataclasses.dataclass
class Run:
  """One process: what the user could see of it."""
  seconds: float
  rss_kb: int
  timed_out: bool
  returncode: int | None
  stdout: str
  files: dict[str, str]             # name -> sha256 of what the program left in its folder
  exception: dict | None            # type, message, notes (vjpviz's left out), frames


@dataclasses.dataclass
class Row:
  program: str
  plain: Run
  hooked: Run

  @property
  def same_stdout(self) -> bool:
    return self.plain.stdout == self.hooked.stdout

  @property
  def same_files(self) -> bool:
    return self.plain.files == self.hooked.files

  @property
  def same_exception(self) -> bool:
    return self.plain.exception == self.hooked.exception

  @property
  def safe(self) -> bool:
    return (not self.hooked.timed_out and self.same_stdout and self.same_files
            and self.same_exception)

  def summary(self) -> dict:
    return dict(program=self.program, extra_s=round(self.hooked.seconds - self.plain.seconds, 2),
                plain_s=round(self.plain.seconds, 2), hooked_s=round(self.hooked.seconds, 2),
                rss_plain_mb=round(self.plain.rss_kb / 1024), rss_ratio=_ratio(self),
                hooked_timed_out=self.hooked.timed_out, plain_timed_out=self.plain.timed_out,
                same_stdout=self.same_stdout, same_files=self.same_files,
                same_exception=self.same_exception, safe=self.safe)


def _ratio(row: Row) -> float | None:
  return round(row.hooked.rss_kb / row.plain.rss_kb, 2) if row.plain.rss_kb else None


def programs(names: list[str] | None = None) -> list[pathlib.Path]:
  found = sorted(p for p in CORPUS.glob("*.py") if not p.name.startswith("_"))
  return [p for p in found if not names or p.stem in names]


def run(program: pathlib.Path, hooked: bool, quick: bool, timeout: float) -> Run:
  """``program`` in a fresh interpreter and an empty folder; killed (its whole process
  group) past ``timeout``."""
  with tempfile.TemporaryDirectory(prefix="safety-") as tmp:
    work, result = pathlib.Path(tmp, "work"), pathlib.Path(tmp, "result.json")
    work.mkdir()
    out = pathlib.Path(tmp, "stdout")
    env = dict(os.environ, SAFETY_CORPUS_QUICK="1" if quick else "0",
               SAFETY_CORPUS_HOOKED="1" if hooked else "0",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(CORPUS), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--child", str(program),
           "hooked" if hooked else "plain", str(result)]
    t = time.perf_counter()
    with open(out, "w") as stdout:
      child = subprocess.Popen(cmd, cwd=work, env=env, stdout=stdout, stderr=subprocess.DEVNULL,
                               start_new_session=True)
      status, usage, timed_out = _wait(child, timeout)
    seconds = time.perf_counter() - t
    described = json.loads(result.read_text()) if result.exists() else {}
    return Run(seconds=seconds, rss_kb=usage.ru_maxrss, timed_out=timed_out,
               returncode=None if timed_out else os.waitstatus_to_exitcode(status),
               stdout=out.read_text(errors="replace"), files=_files(work),
               exception=described.get("exception"))


def _wait(child: subprocess.Popen, timeout: float):
  """Wait for ``child`` (wait4: its own peak RSS), killing its process group past ``timeout``."""
  deadline = time.monotonic() + timeout
  timed_out = False
  while True:
    pid, status, usage = os.wait4(child.pid, os.WNOHANG)
    if pid:
      child.returncode = status   # reaped here: Popen must not wait for it again
      return status, usage, timed_out
    if time.monotonic() > deadline and not timed_out:
      timed_out = True
      os.killpg(child.pid, signal.SIGKILL)
    time.sleep(0.02)


def _files(folder: pathlib.Path) -> dict[str, str]:
  return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
          for p in sorted(folder.rglob("*")) if p.is_file()}


def describe(exc: BaseException | None) -> dict | None:
  """What the user sees of an exception, vjpviz's note left out (the one thing it may add)."""
  if exc is None:
    return None
  import traceback
  frames = [(pathlib.Path(f.filename).name, f.lineno, f.name)
            for f in traceback.extract_tb(exc.__traceback__)]
  notes = [n for n in getattr(exc, "__notes__", []) if not n.startswith(VJPVIZ_NOTE)]
  return dict(type=f"{type(exc).__module__}.{type(exc).__qualname__}", message=str(exc),
              notes=notes, frames=frames, cause=describe(exc.__cause__))


def child(program: str, mode: str, result: str) -> int:
  """Runs in the fresh process: the program as ``__main__``, then what it raised, to ``result``."""
  import runpy
  if mode == "hooked":
    import jupyter_vjpviz
    jupyter_vjpviz.install()
  sys.argv = [program]
  exc = None
  try:
    runpy.run_path(program, run_name="__main__")
  except BaseException as e:   # noqa: BLE001 - the program's own error is what we describe
    exc = e
  sys.stdout.flush()
  pathlib.Path(result).write_text(json.dumps(dict(exception=describe(exc))))
  if exc is None:
    return 0
  sys.excepthook(type(exc), exc, exc.__traceback__)   # as the interpreter would: vjpviz prints after
  return 1


def measure(names=None, quick=False, timeout=600.0, log=None) -> list[Row]:
  rows = []
  for program in programs(names):
    row = Row(program.stem, run(program, False, quick, timeout), run(program, True, quick, timeout))
    if log:
      log(row)
    rows.append(row)
  return rows


HEADER = (f"{'program':26s} {'plain s':>8s} {'extra s':>8s} {'RSS MB':>7s} {'RSS x':>6s}  "
          f"{'stdout':6s} {'files':6s} {'exception':9s} note")


def line(row: Row) -> str:
  s = row.summary()
  yes = lambda ok: "same" if ok else "DIFF"
  note = "hooked run killed at timeout" if row.hooked.timed_out else ""
  if row.plain.timed_out:
    note = "plain run killed at timeout"
  return (f"{row.program:26s} {s['plain_s']:8.2f} {s['extra_s']:+8.2f} {s['rss_plain_mb']:7d} "
          f"{s['rss_ratio'] or 0:6.2f}  {yes(row.same_stdout):6s} {yes(row.same_files):6s} "
          f"{yes(row.same_exception):9s} {note}")


def main() -> None:
  if sys.argv[1:2] == ["--child"]:
    sys.exit(child(*sys.argv[2:5]))
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("names", nargs="*", help="program stems (default: all)")
  parser.add_argument("--quick", action="store_true", help="the small instances")
  parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
  parser.add_argument("--timeout", type=float, default=600.0, help="seconds per process")
  args = parser.parse_args()
  if not args.json:
    print(HEADER, flush=True)
  rows = measure(args.names, args.quick, args.timeout,
                 log=None if args.json else lambda row: print(line(row), flush=True))
  if args.json:
    print(json.dumps(dict(quick=args.quick, timeout=args.timeout,
                          rows=[r.summary() for r in rows]), indent=1))
  else:
    print(f"{sum(r.safe for r in rows)}/{len(rows)} programs safe (hooked: no timeout; "
          f"stdout, files and exception identical)")


if __name__ == "__main__":
  main()
