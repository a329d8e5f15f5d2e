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
from .display import SHOWN_PER_CELL

_pending: list[Diagnosis] = []
_dropped = [0]


def load(ip) -> None:
  safely(runtime.install)
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
  safely(magics.unregister, ip)
  runtime.uninstall()


def _queue(found: list[Diagnosis], exc) -> None:
  room = SHOWN_PER_CELL - len(_pending)
  _pending.extend(found[:max(room, 0)])
  _dropped[0] += max(len(found) - max(room, 0), 0)


def _show(result=None) -> None:
  found, _pending[:] = list(_pending), []
  dropped, _dropped[0] = _dropped[0], 0
  for d in found:
    safely(_display, d)
  if dropped:
    print(f"vjpviz: {dropped} more diagnoses in this cell not shown (vjpviz.diagnoses() has "
          f"the newest {runtime.HISTORY_LIMIT})")


def _display(d: Diagnosis) -> None:
  magics.show(d)
  # Without a panel (VS Code, Colab, the extension off), the fix editor comes inline.
  if widgets.should_show():
    widget = safely(widgets.fallback, d)
    if widget is not None:
      display(widget)
