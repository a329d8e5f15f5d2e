"""``python -m jupyter_vjpviz run script.py [args...]``: the debugger outside notebooks.

The script runs as ``__main__`` with the hook installed. Each diagnosis is
printed as text and all of them are written to one standalone HTML report, so
a failing CI job leaves something to open: by default ``SCRIPT.vjpviz.html`` in the
working directory (``train.py`` -> ``train.vjpviz.html``), a name a re-run overwrites
and a CI step can collect. The exit status is the script's.
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback

from .api import pipeline
from .capture import processes
from .deliver import console, headless
from .api.pipeline import NOTE_POINTER
from .render import html


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m jupyter_vjpviz", description="vjpviz outside notebooks.",
      epilog=f"python -m jupyter_vjpviz run [--report PATH] SCRIPT [ARGS...]: {REPORT_HELP}")
  sub = parser.add_subparsers(dest="command", required=True)
  run = sub.add_parser("run", help="run a script with vjpviz installed", description=REPORT_HELP)
  run.add_argument("--report", metavar="PATH", help="where to write the HTML report "
                                                    "(default: SCRIPT.vjpviz.html here)")
  run.add_argument("script")
  run.add_argument("args", nargs=argparse.REMAINDER)
  merge = sub.add_parser("report", help="merge a multi-process job's records into one HTML report",
                         description=MERGE_HELP)
  merge.add_argument("directory")
  merge.add_argument("--out", metavar="PATH", help="default: DIRECTORY/report.html")
  opts = parser.parse_args(argv)
  if opts.command == "report":
    return merge_report(opts.directory, opts.out)
  return run_script(opts.script, opts.args, opts.report or default_report(opts.script))


REPORT_HELP = ("runs SCRIPT with vjpviz installed, prints each diagnosis and, if there is one, "
               "writes them all to an HTML report: SCRIPT.vjpviz.html in the working directory "
               "(train.py -> train.vjpviz.html) unless --report says where.")


MERGE_HELP = ("merges the records each process of a jax.distributed job wrote to DIRECTORY "
              "(VJPVIZ_REPORT_DIR, or SCRIPT.vjpviz under `run`) into one HTML report: each "
              "problem once, with the processes that recorded it.")


def merge_report(directory: str, out: str | None) -> int:
  if not os.path.isdir(directory):
    print(f"vjpviz: no directory {directory}", file=sys.stderr)
    return 2
  path, problems = headless.merge(directory, out)
  print(f"vjpviz: {problems} problem(s) from {directory}; HTML report: {path}", file=sys.stderr)
  return 0


def default_report(script: str) -> str:
  """The report's path unless ``--report`` says: named for the script, in the working
  directory (the script's own may not be writable)."""
  return os.path.abspath(os.path.splitext(os.path.basename(script))[0] + ".vjpviz.html")


def run_script(script: str, args: list[str], report: str) -> int:
  pipeline.install()
  pipeline.clear()
  headless.install(os.path.splitext(report)[0])   # in a job of several processes: each one's
  pipeline.NOTE_POINTER = ("the diagnosis follows the traceback, and vjpviz prints where "
                          "its HTML report is written")
  sys.argv = [script, *args]
  sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
  status = 0
  try:
    runpy.run_path(script, run_name="__main__")
  except SystemExit as e:
    status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
  except BaseException:  # noqa: BLE001 - the script's failure is reported, not ours
    traceback.print_exc()
    status = 1
  finally:
    pipeline.uninstall()
    pipeline.NOTE_POINTER = NOTE_POINTER
  found = pipeline.history()
  for d in found:
    print(console.report(d), file=sys.stderr)
  if found and processes.index() == 0:
    path = write_report(found, report)
    noun = "diagnosis" if len(found) == 1 else "diagnoses"
    print(f"vjpviz: {len(found)} {noun}; HTML report: {path}", file=sys.stderr)
  if found and headless.directory() and processes.count() > 1:
    print(f"vjpviz: process {processes.index()}'s records are in {headless.directory()}; "
          f"python -m jupyter_vjpviz report {headless.directory()} merges them", file=sys.stderr)
  headless.uninstall()
  return status


def write_report(found: list, path: str) -> str:
  """One standalone HTML page with every diagnosis."""
  with open(path, "w", encoding="utf-8") as f:
    f.write(html.page(found, "vjpviz report"))
  return path


if __name__ == "__main__":
  sys.exit(main())
