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
from .display import DiagnosisOutput

_pending: list[Diagnosis] = []


def load(ip) -> None:
  runtime.install()
  runtime.add_listener(_queue)
  ip.events.register("post_run_cell", _show)
  # Start the layout worker now, so the first failing cell does not wait for it.
  safely(_warm_layout)
  for optional in ("magics", "comm"):
    module = _optional(optional)
    if module is not None:
      safely(module.register, ip)


def unload(ip) -> None:
  runtime.remove_listener(_queue)
  try:
    ip.events.unregister("post_run_cell", _show)
  except ValueError:
    pass
  comm = _optional("comm")
  if comm is not None:
    safely(comm.unregister, ip)
  runtime.uninstall()


def _queue(found: list[Diagnosis], exc) -> None:
  _pending.extend(found)


def _show(result=None) -> None:
  found, _pending[:] = list(_pending), []
  inline = _optional("widgets")
  for d in found:
    display(DiagnosisOutput(d))
    # Without a panel (VS Code, Colab, the extension off), the fix editor comes inline.
    if inline is not None and inline.should_show():
      widget = safely(inline.fallback, d)
      if widget is not None:
        display(widget)


def _warm_layout() -> None:
  from ..render import layout
  layout.warm()


def _optional(name: str):
  import importlib
  try:
    return importlib.import_module(f"{__package__}.{name}")
  except ImportError:
    return None
