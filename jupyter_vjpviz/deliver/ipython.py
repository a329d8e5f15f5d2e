"""``%load_ext vjpviz``: the hook, plus rich output after each failing cell.

Warnings made while a cell runs are pushed to the panel at once; an error's
diagnoses once IPython has printed its traceback (``post_run_cell`` finishes the
deliveries the pipeline held back, so the exception never waits on a view's SVG).
Both are queued for ``post_run_cell``, i.e. shown after the traceback, so the
user's error comes first and stays exactly as JAX wrote it. A cell shows and
pushes at most SHOWN_PER_CELL.

Each diagnosis comes here once, with its fixes judged (up to ``analysis.values.replay.BUDGET``):
the panel and the output after the cell both get it whole.
"""
from __future__ import annotations

from IPython.display import display

from ..api import pipeline
from ..analysis.diagnosis import Diagnosis
from ..base.safety import safely
from ..render import layout
from . import comm, magics, widgets
from . import display as output
from .display import mimebundle

SHOWN_PER_CELL = 20
"""Diagnoses shown (and pushed to the panel) per cell: a loop that fails every step
shows its first ones; the history keeps the newest, for ``vjpviz.diagnoses()``."""

_pending: list[Diagnosis] = []   # this cell's diagnoses, shown after its traceback
_not_shown = 0                   # this cell's diagnoses beyond SHOWN_PER_CELL


def load(ip) -> None:
  safely(pipeline.install, True)
  pipeline.add_listener(_queue)
  ip.events.register("post_run_cell", _show)
  # Start the layout worker now, so the first failing cell does not wait for it.
  safely(layout.warm)
  safely(magics.register, ip)
  safely(comm.register)
  safely(_display_diagnoses, ip, True)


def unload(ip) -> None:
  pipeline.remove_listener(_queue)
  try:
    ip.events.unregister("post_run_cell", _show)
  except ValueError:
    pass
  safely(comm.unregister)
  safely(magics.unregister, ip)
  safely(_display_diagnoses, ip, False)
  pipeline.uninstall()


def _display_diagnoses(ip, on: bool) -> None:
  """A Diagnosis typed in a cell (``vjpviz.last()``) shows as after a failing cell."""
  formatter = ip.display_formatter.mimebundle_formatter
  if on:
    formatter.for_type(Diagnosis, mimebundle)
  else:
    formatter.pop(Diagnosis, None)


def _queue(found: list[Diagnosis], exc) -> None:
  global _not_shown
  shown = found[:max(SHOWN_PER_CELL - len(_pending), 0)]
  _not_shown += len(found) - len(shown)
  _pending.extend(shown)
  for d in shown:
    safely(comm.push, d)


def _show(result=None) -> None:
  global _not_shown
  safely(pipeline.follow, getattr(result, "error_in_exec", None))
  found, _pending[:] = list(_pending), []
  if _not_shown:
    print(f"vjpviz: {_not_shown} more diagnoses in this cell not shown (vjpviz.diagnoses() "
          f"has the newest {pipeline.HISTORY_LIMIT})")
    _not_shown = 0
  for d in found:
    safely(_display, d)


def _display(d: Diagnosis) -> None:
  output.show(d)
  # Without a panel (VS Code, Colab, the extension off), the fix editor comes inline.
  if widgets.should_show():
    widget = safely(widgets.fallback, d)
    if widget is not None:
      display(widget)
