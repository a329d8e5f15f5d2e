"""Monitoring one of the user's code objects start or return, through ``sys.monitoring``.

Every monitor of the user's own functions shares this one layer: a tool slot of
our own, held only while some monitor is open (a profiler or debugger of the user's
is never displaced: with no free slot nothing is monitored), and local events on
the monitored code objects only, so no other code pays anything. A start or return
goes to this thread's innermost open monitor of that code; callbacks never raise
into the user's code.
"""
from __future__ import annotations

import collections
import sys
import threading
from collections.abc import Callable

START, RETURN = "start", "return"

_monitoring = getattr(sys, "monitoring", None)
_TOOLS = (3, 4, 5)      # 0-2 are the debugger's, coverage's and the profiler's
_lock = threading.Lock()
_tool: int | None = None
_open = 0                                       # monitors open in any thread
_counts: collections.Counter = collections.Counter()   # (code, event) -> open monitors
_local = threading.local()                      # .monitors: this thread's, innermost last


class Monitor:
  """While open (a context manager), ``seen(frame)`` as ``code`` starts in this thread
  (``event=START``: the frame holds its arguments), or ``seen(frame, value)`` as it
  returns (``RETURN``). ``opened`` is False when no tool slot was free."""

  def __init__(self, code, event: str, seen: Callable):
    self.code, self.event, self.seen = code, event, seen
    self.opened = False

  def __enter__(self):
    self.opened = _start(self)
    return self

  def __exit__(self, *exc):
    if self.opened:
      self.opened = False
      _stop(self)
    return False


def _monitors() -> list:
  if not hasattr(_local, "monitors"):
    _local.monitors = []
  return _local.monitors


def _start(monitor: Monitor) -> bool:
  global _tool, _open
  if _monitoring is None:
    return False
  with _lock:
    if _tool is None:
      _tool = next((i for i in _TOOLS if _monitoring.get_tool(i) is None), None)
      if _tool is None:
        return False
      _monitoring.use_tool_id(_tool, "vjpviz")
      _monitoring.register_callback(_tool, _monitoring.events.PY_START, _started)
      _monitoring.register_callback(_tool, _monitoring.events.PY_RETURN, _returned)
    _open += 1
    _counts[monitor.code, monitor.event] += 1
    _set_events(monitor.code)
  _monitors().append(monitor)
  return True


def _stop(monitor: Monitor) -> None:
  global _tool, _open
  _monitors().remove(monitor)
  with _lock:
    _counts[monitor.code, monitor.event] -= 1
    if not _counts[monitor.code, monitor.event]:
      del _counts[monitor.code, monitor.event]
    _set_events(monitor.code)
    _open -= 1
    if not _open:
      _monitoring.register_callback(_tool, _monitoring.events.PY_START, None)
      _monitoring.register_callback(_tool, _monitoring.events.PY_RETURN, None)
      _monitoring.free_tool_id(_tool)
      _tool = None


def _set_events(code) -> None:
  events = _monitoring.events
  bits = ((events.PY_START if _counts.get((code, START)) else 0)
          | (events.PY_RETURN if _counts.get((code, RETURN)) else 0))
  _monitoring.set_local_events(_tool, code, bits)


def _started(code, _offset):
  try:
    _deliver(code, START, sys._getframe(1))
  except Exception:  # noqa: BLE001 - a monitor's failure must not reach the user's code
    pass


def _returned(code, _offset, value):
  try:
    _deliver(code, RETURN, sys._getframe(1), value)
  except Exception:  # noqa: BLE001
    pass


def _deliver(code, event: str, frame, *value) -> None:
  for monitor in reversed(getattr(_local, "monitors", ())):
    if monitor.code is code and monitor.event == event:
      monitor.seen(frame, *value)
      return
