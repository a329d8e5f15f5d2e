"""``%load_ext vjpviz``: the hook, plus rich output after each failing cell.

Diagnoses made while a cell runs are queued and shown in ``post_run_cell``,
i.e. after IPython has printed the traceback, so the user's error comes first
and stays exactly as JAX wrote it.
"""
from __future__ import annotations

from IPython.display import display

from .. import runtime
from ..analysis.diagnosis import Diagnosis
from ..capture.records import safely
from ..render import layout
from . import comm, magics, widgets
from .display import DiagnosisOutput

_pending: list[Diagnosis] = []


def load(ip) -> None:
  runtime.install()
  runtime.add_listener(_queue)
  ip.events.register("post_run_cell", _show)
  # Start the layout worker now, so the first failing cell does not wait for it.
  safely(layout.warm)
  safely(magics.register, ip)
  safely(comm.register, ip)


def unload(ip) -> None:
  runtime.remove_listener(_queue)
  try:
    ip.events.unregister("post_run_cell", _show)
  except ValueError:
    pass
  safely(comm.unregister, ip)
  runtime.uninstall()


def _queue(found: list[Diagnosis], exc) -> None:
  _pending.extend(found)


def _show(result=None) -> None:
  found, _pending[:] = list(_pending), []
  for d in found:
    display(DiagnosisOutput(d))
    # Without a panel (VS Code, Colab, the extension off), the fix editor comes inline.
    if widgets.should_show():
      widget = safely(widgets.fallback, d)
      if widget is not None:
        display(widget)
