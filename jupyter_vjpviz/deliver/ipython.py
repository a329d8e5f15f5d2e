"""``%load_ext vjpviz``: the hook, plus rich output after each failing cell.

Warnings made while a cell runs are pushed to the panel at once; an error's
diagnoses once IPython has printed its traceback (``post_run_cell`` finishes the
deliveries the pipeline held back, so the exception never waits on a view's SVG).
Both are queued for ``post_run_cell``, i.e. shown after the traceback, so the
user's error comes first and stays exactly as JAX wrote it. A cell shows and
pushes at most SHOWN_PER_CELL.

Fixes are judged after a diagnosis is delivered (up to ``analysis.replay.BUDGET``):
they follow it wherever it went, to the panel as a fixes message, into the
queued diagnosis, or into the output already showing it (its display id).
"""
from __future__ import annotations

import collections

from IPython.display import display

from .. import pipeline
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
_delivered: collections.OrderedDict = collections.OrderedDict()
"""id -> "pushed" or "shown": where each recent diagnosis went, for its fixes (bounded)."""


def load(ip) -> None:
  safely(pipeline.install, True)
  pipeline.add_listener(_queue)
  pipeline.add_listener(_fixes_judged, with_fixes=True)
  ip.events.register("post_run_cell", _show)
  # Start the layout worker now, so the first failing cell does not wait for it.
  safely(layout.warm)
  safely(magics.register, ip)
  safely(comm.register)
  safely(_display_diagnoses, ip, True)


def unload(ip) -> None:
  pipeline.remove_listener(_queue)
  pipeline.remove_listener(_fixes_judged)
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
    _went(d, "pushed")


def _fixes_judged(found: list[Diagnosis], exc) -> None:
  """The same diagnoses with their fixes: wherever each went, its fixes follow."""
  for d in found:
    where = _delivered.get(d.id)
    if where is None:
      continue
    queued = next((k for k, p in enumerate(_pending) if p.id == d.id), None)
    if queued is not None:
      _pending[queued] = d
    elif where == "shown":
      safely(output.show, d, True)   # redraw the output showing it
    safely(comm.push_fixes, d)


def _went(d: Diagnosis, where: str) -> None:
  _delivered[d.id] = where
  _delivered.move_to_end(d.id)
  while len(_delivered) > pipeline.HISTORY_LIMIT:
    _delivered.popitem(last=False)


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
  _went(d, "shown")
  # Without a panel (VS Code, Colab, the extension off), the fix editor comes inline.
  if widgets.should_show():
    widget = safely(widgets.fallback, d)
    if widget is not None:
      display(widget)
