"""Hooks that put no frame on the user's stack: the start and end of JAX's own functions.

A wrapper around ``jax.vjp`` is a frame under the user's function for as long as it
runs (JAX's own tests count that stack), and so is every wrapper a user's code runs
inside. Instead, ``sys.monitoring`` tells us when one of a few code objects of JAX's
starts, returns or unwinds (local events of that code only, in a tool slot of our own):
the callback runs between JAX's bytecodes and leaves nothing on the stack. A start
may open something (a session) that the same frame's return or unwind closes, with
its return value or exception; the exception propagates as JAX raised it.

A function JAX raises from when a check fails can instead be followed at its ``raise``
statements alone (``follow_raises``): a line event there, every other line's turned off the
first time it runs, so a call that does not raise costs nothing.

Starts and returns are local events (those code objects only). An unwind can only be
followed everywhere (``PY_UNWIND`` is a global event in CPython), so it is turned on
only while a followed frame is open (about 1 us to switch): then, and only then, every
frame an exception leaves costs a call of ours.
"""
from __future__ import annotations

import dis
import sys
import threading
from typing import Any
from collections.abc import Callable

from ..base import safety

Start = Callable[[Any], Any]                           # frame -> token (None: nothing opened)
Finish = Callable[[Any, Any, BaseException | None], None]   # token, return value, exception

_TOOLS = (3, 4)   # the slots no one is assigned (0-2: debugger, coverage, profiler; 5: optimizer)


class _Open(threading.local):
  def __init__(self):
    self.frames: list[tuple[Any, Finish, Any]] = []   # (frame, finish, token), innermost last


class CodeEvents:
  """One tool slot following the code objects added to it, until ``stop``."""

  def __init__(self):
    self.tool: int | None = None
    self._followed: dict = {}          # code -> (start, finish)
    self._raises: dict = {}           # code -> the lines of its raise statements (follow_raises)
    self._open = _Open()
    self._n_open = 0                  # frames open in every thread: unwinds followed while > 0
    self._lock = threading.Lock()

  def start(self) -> bool:
    """Take a free tool slot; False when there is none (or no ``sys.monitoring``)."""
    monitoring = getattr(sys, "monitoring", None)
    tool = next((i for i in _TOOLS if monitoring and monitoring.get_tool(i) is None), None)
    if tool is None:
      return False
    monitoring.use_tool_id(tool, "vjpviz")
    events = monitoring.events
    monitoring.register_callback(tool, events.PY_START, self._started)
    monitoring.register_callback(tool, events.PY_RETURN, self._returned)
    monitoring.register_callback(tool, events.PY_UNWIND, self._unwound)
    monitoring.register_callback(tool, events.LINE, self._line)
    self.tool = tool
    return True

  @property
  def points(self) -> list[str]:
    return [f"{code.co_qualname} (its frames followed)" for code in self._followed]

  def follow(self, code, start: Start, finish: Finish | None = None) -> None:
    """Call ``start(frame)`` as ``code`` starts, and ``finish`` as that frame ends."""
    events = sys.monitoring.events
    self._followed[code] = (start, finish)
    sys.monitoring.set_local_events(
        self.tool, code, events.PY_START | (events.PY_RETURN if finish else 0))

  def follow_raises(self, code, start: Start, finish: Finish) -> bool:
    """Call ``start(frame)`` as ``code`` reaches one of its ``raise`` statements, and
    ``finish`` as the exception leaves that frame (for code that raises out of itself).
    False, nothing followed, where a raise shares its line with other code: reaching that
    line would not mean raising, and a frame opened there might never be closed."""
    lines = _raise_lines(code)
    if not lines:
      return False
    self._raises[code] = lines
    self._followed[code] = (start, finish)
    sys.monitoring.set_local_events(self.tool, code, sys.monitoring.events.LINE)
    return True

  def stop(self) -> None:
    """Release the slot; a frame still open in another thread simply ends unfollowed."""
    if self.tool is None:
      return
    monitoring = sys.monitoring
    with self._lock:
      monitoring.set_events(self.tool, 0)
      self._n_open = 0
      self._open = _Open()   # what other threads still had open is dropped with it
    for code in self._followed:
      monitoring.set_local_events(self.tool, code, 0)
    for event in (monitoring.events.PY_START, monitoring.events.PY_RETURN,
                  monitoring.events.PY_UNWIND, monitoring.events.LINE):
      monitoring.register_callback(self.tool, event, None)
    monitoring.free_tool_id(self.tool)
    self._followed.clear()
    self._raises.clear()
    self.tool = None

  # Callbacks never raise (``safety.safely``): an exception here would surface in JAX's code.

  def _started(self, code, _offset):
    self._open_frame(code, sys._getframe(1))

  def _line(self, code, line):
    if line not in self._raises.get(code, ()):
      return sys.monitoring.DISABLE   # this line, in this code, from now on
    frame = sys._getframe(1)
    # A raise spanning lines comes back to its first one to raise: opened once.
    if not any(open_frame is frame for open_frame, _, _ in self._open.frames):
      self._open_frame(code, frame)
    return None

  def _open_frame(self, code, frame):
    start, finish = self._followed.get(code, (None, None))
    token = safety.safely(start, frame) if start is not None else None
    if token is not None and finish is not None:
      self._open.frames.append((frame, finish, token))
      self._count(+1)

  def _returned(self, code, _offset, value):
    self._close(value, None)

  def _unwound(self, code, _offset, exc):
    if code in self._followed and self._followed[code][1] is not None:
      self._close(None, exc)

  def _close(self, value, exc):
    frames, frame = self._open.frames, sys._getframe(2)
    for i in range(len(frames) - 1, -1, -1):
      if frames[i][0] is frame:
        _, finish, token = frames[i]
        self._count(i - len(frames))
        del frames[i:]
        safety.safely(finish, token, value, exc)
        return

  def _count(self, change: int) -> None:
    """Follow unwinds while any followed frame is open, in any thread."""
    with self._lock:
      before, self._n_open = self._n_open, max(0, self._n_open + change)
      if self.tool is not None and (before == 0) != (self._n_open == 0):
        sys.monitoring.set_events(self.tool, sys.monitoring.events.PY_UNWIND if self._n_open else 0)


def _raise_lines(code) -> set[int] | None:
  """The first line of each ``raise`` statement of ``code``; None if code other than the
  statement's own starts on one of them (``if bad: raise ...``), or if a handler of the
  same frame may catch one (``try``, ``with``): the frame opened there would not unwind."""
  bytecode = dis.Bytecode(code)
  instructions = list(bytecode)
  lines = set()
  for raise_ in (i for i in instructions if i.opname == "RAISE_VARARGS"):
    raised = raise_.positions
    if raised.lineno is None or any(
        e.start <= raise_.offset < e.end for e in bytecode.exception_entries) or any(
        i.positions.lineno == raised.lineno and (i.positions.col_offset or 0) < (raised.col_offset or 0)
        for i in instructions):
      return None
    lines.add(raised.lineno)
  return lines
