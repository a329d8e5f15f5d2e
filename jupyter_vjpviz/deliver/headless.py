"""A headless job's records as files, one per process, merged into one HTML report.

With ``VJPVIZ_REPORT_DIR`` set (or under ``python -m jupyter_vjpviz run`` in a job of
several processes), each process writes what it records to ``DIR/process-N.json`` as it
records it (a job killed later keeps what it wrote): each diagnosis, NaN diagnosis and
gradient report as its protocol dict, its fingerprint and its HTML; at exit, the series
of each ``vv.watch`` it recorded. ``python -m jupyter_vjpviz report DIR`` merges them
into one page: each problem once, under the processes that recorded it. No process reads
another's file while the job runs: the merge is the only reader.
"""
from __future__ import annotations

import atexit
import dataclasses
import glob
import json
import os

from ..api import pipeline, watch
from ..analysis.diagnosis import Diagnosis
from ..base.safety import safely
from ..capture import processes
from ..render import html

ENV = "VJPVIZ_REPORT_DIR"


class Records:
  """This process's records, rewritten to its file whenever one is added."""

  def __init__(self, directory: str, alone_too: bool = True):
    self.directory, self.alone_too = directory, alone_too
    self.entries: dict[str, dict] = {}     # id -> entry, in the order recorded

  def diagnosed(self, found, exc=None) -> None:
    for d in found:
      self.recorded(d)

  def recorded(self, record) -> None:
    diagnosis = isinstance(record, Diagnosis)
    part = html.fragment(dataclasses.replace(record, processes=())) if diagnosis else \
        record._repr_html_()   # the merge says which processes recorded it
    self.entries[record.id] = {"record": "diagnosis" if diagnosis else "gradient report",
                               "fingerprint": record.fingerprint, "process": record.process,
                               "data": record.to_dict(), "html": part}
    self.save()

  def save(self, series: list | None = None) -> None:
    """The file, written whole (to a temporary name first: a reader never sees half); in
    a process alone, only where ``alone_too`` (the ``run`` CLI writes its HTML there)."""
    if not self.alone_too and processes.count() == 1:
      return
    os.makedirs(self.directory, exist_ok=True)
    path = os.path.join(self.directory, f"process-{processes.index()}.json")
    data = {"process": processes.index(), "processes": processes.count(),
            "records": list(self.entries.values()), "watches": series or []}
    with open(path + ".tmp", "w", encoding="utf-8") as f:
      json.dump(data, f, default=str)
    os.replace(path + ".tmp", path)

  def at_exit(self) -> None:
    """The watches' series (those this process recorded: process 0's in a job)."""
    series = safely(lambda: [w.series() for w in watch.watches() if w.recording], default=[])
    if series:
      safely(self.save, series)


_records: list[Records] = []


def install(directory: str | None = None) -> None:
  """Write this process's records to ``VJPVIZ_REPORT_DIR`` if set, else to ``directory``
  in a job of several processes (the ``run`` CLI's); else nothing is written."""
  if _records or not (os.environ.get(ENV) or directory):
    return
  records = Records(os.environ.get(ENV) or directory, alone_too=bool(os.environ.get(ENV)))
  _records.append(records)
  pipeline.add_listener(records.diagnosed)
  pipeline.on_record.add(records.recorded)
  atexit.register(records.at_exit)


def uninstall() -> None:
  """The watches' series written now, and nothing more after."""
  for records in _records:
    records.at_exit()
    pipeline.remove_listener(records.diagnosed)
    pipeline.on_record.discard(records.recorded)
    atexit.unregister(records.at_exit)
  _records.clear()


def directory() -> str | None:
  """Where this process writes its records, if it does."""
  return _records[0].directory if _records else None


def merge(directory: str, out: str | None = None) -> tuple[str, int]:
  """Every process's file in ``directory`` as one HTML page (``out``, default
  ``DIR/report.html``): each problem once, under the processes that recorded it.
  (its path, the number of problems: healthy gradient reports not counted)."""
  by_problem: dict[tuple[str, str], dict[int, dict]] = {}   # (record, fingerprint) -> by process
  for path in sorted(glob.glob(os.path.join(directory, "process-*.json"))):
    with open(path, encoding="utf-8") as f:
      for entry in json.load(f)["records"]:
        by_problem.setdefault((entry["record"], entry["fingerprint"]), {})[entry["process"]] = entry
  parts = [(f"{kind}: {processes.spelled(by)}", by[min(by)]["html"])
           for (kind, _), by in by_problem.items()]
  out = out or os.path.join(directory, "report.html")
  with open(out, "w", encoding="utf-8") as f:
    f.write(html.merged(parts, "vjpviz report"))
  return out, sum(_problem(by[min(by)]) for by in by_problem.values())


def _problem(entry: dict) -> bool:
  """A diagnosis, or a gradient report that found something (a healthy one is shown, not
  counted)."""
  return entry["record"] == "diagnosis" or not entry["data"].get("healthy")
