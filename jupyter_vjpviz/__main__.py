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

from . import pipeline
from .pipeline import NOTE_POINTER
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
  opts = parser.parse_args(argv)
  return run_script(opts.script, opts.args, opts.report or default_report(opts.script))


REPORT_HELP = ("runs SCRIPT with vjpviz installed, prints each diagnosis and, if there is one, "
               "writes them all to an HTML report: SCRIPT.vjpviz.html in the working directory "
               "(train.py -> train.vjpviz.html) unless --report says where.")


def default_report(script: str) -> str:
  """The report's path unless ``--report`` says: named for the script, in the working
  directory (the script's own may not be writable)."""
  return os.path.abspath(os.path.splitext(os.path.basename(script))[0] + ".vjpviz.html")


def run_script(script: str, args: list[str], report: str) -> int:
  pipeline.install()
  pipeline.clear()
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
  if found:
    for d in found:
      print(d.to_text(), file=sys.stderr)
    path = write_report(found, report)
    noun = "diagnosis" if len(found) == 1 else "diagnoses"
    print(f"vjpviz: {len(found)} {noun}; HTML report: {path}", file=sys.stderr)
  return status


def write_report(found: list, path: str) -> str:
  """One standalone HTML page with every diagnosis."""
  with open(path, "w", encoding="utf-8") as f:
    f.write(html.page(found, "vjpviz report"))
  return path


if __name__ == "__main__":
  sys.exit(main())
