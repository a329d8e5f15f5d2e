"""``python -m jupyter_vjpviz run script.py [args...]``: the debugger outside notebooks.

The script runs as ``__main__`` with the hook installed. Each diagnosis is
printed as text and all of them are written to one standalone HTML report, so
a failing CI job leaves something to open. The exit status is the script's.
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys
import tempfile
import traceback

from .deliver import runtime
from .deliver.runtime import NOTE_POINTER
from .render import html


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m jupyter_vjpviz")
  sub = parser.add_subparsers(dest="command", required=True)
  run = sub.add_parser("run", help="run a script with vjpviz installed")
  run.add_argument("script")
  run.add_argument("args", nargs=argparse.REMAINDER)
  run.add_argument("--report", help="where to write the HTML report "
                                    "(default: a new file in the temp directory)")
  opts = parser.parse_args(argv)
  return run_script(opts.script, opts.args, opts.report)


def run_script(script: str, args: list[str], report: str | None = None) -> int:
  runtime.install()
  runtime.clear()
  runtime.NOTE_POINTER = ("the diagnosis follows the traceback, and vjpviz prints where "
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
    runtime.uninstall()
    runtime.NOTE_POINTER = NOTE_POINTER
  found = runtime.history()
  if found:
    for d in found:
      print(d.to_text(), file=sys.stderr)
    path = write_report(found, report)
    noun = "diagnosis" if len(found) == 1 else "diagnoses"
    print(f"vjpviz: {len(found)} {noun}; HTML report: {path}", file=sys.stderr)
  return status


def write_report(found: list, path: str | None = None) -> str:
  """One standalone HTML page with every diagnosis."""
  if path is None:
    fd, path = tempfile.mkstemp(prefix="vjpviz-", suffix=".html")
    os.close(fd)
  with open(path, "w", encoding="utf-8") as f:
    f.write(html.page(found, "vjpviz report"))
  return path


if __name__ == "__main__":
  sys.exit(main())
