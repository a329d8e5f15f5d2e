"""Wires the stages: capture -> analysis -> fixes -> delivery, and keeps the history.

The capture hook hands each finished session here. Everything below runs on
the error (or first-warning) path only; the hot path is the hook's.
"""
from __future__ import annotations

import contextlib
import gc

from .analysis.diagnose import diagnose
from .analysis.diagnosis import Diagnosis
from .capture import hook, records
from .capture.records import Session

_history: list[Diagnosis] = []
_warned: set = set()                 # warnings show once per (kind, rule, path, types)
_listeners: list = []                # delivery callbacks: f(list[Diagnosis], exc)
_collectors: list[list] = []         # while vjpviz.check runs: where its findings go


def install() -> None:
  hook.install(_on_session)


def uninstall() -> None:
  hook.uninstall()


def installed() -> bool:
  return hook.installed()


def history() -> list[Diagnosis]:
  return list(_history)


def clear() -> None:
  _history.clear()
  _warned.clear()


def add_listener(listener) -> None:
  if listener not in _listeners:
    _listeners.append(listener)


def remove_listener(listener) -> None:
  if listener in _listeners:
    _listeners.remove(listener)


@contextlib.contextmanager
def collecting():
  """Route new diagnoses into a list instead of the history and the display."""
  found: list[Diagnosis] = []
  _collectors.append(found)
  try:
    yield found
  finally:
    _collectors.remove(found)


def _on_session(session: Session, exc: BaseException | None) -> None:
  if exc is not None and _seen(exc):
    return
  collector = _collectors[-1] if _collectors else None
  skip = _warned if exc is None and collector is None else None
  with _gc_paused():
    found = diagnose(session, exc, skip=skip)
  if not found:
    return
  found = [_with_fixes(d) for d in found]
  if collector is not None:
    if exc is not None:
      _mark(exc, found)
    collector.extend(found)
    return
  if exc is None:
    _warned.update(_key(d) for d in found)
  else:
    _mark(exc, found)
    exc.add_note(f"vjpviz: {found[0].headline} (vjpviz.last() has the full diagnosis)")
  _history.extend(found)
  for listener in list(_listeners):
    records.safely(listener, found, exc)


@contextlib.contextmanager
def _gc_paused():
  """Building a graph allocates tens of thousands of small objects while the failing
  call's whole state is still alive; the cyclic GC would rescan that heap again and
  again (measured: the edge table of a 48-layer model 2x slower). Nothing built
  here is cyclic garbage, so collection can wait until we are done."""
  was_enabled = gc.isenabled()
  gc.disable()
  try:
    yield
  finally:
    if was_enabled:
      gc.enable()


def _seen(exc: BaseException) -> bool:
  return hasattr(exc, "__vjpviz__")


def _mark(exc: BaseException, found: list[Diagnosis]) -> None:
  """Diagnosed once: outer entry points the exception passes through skip it."""
  exc.__vjpviz__ = found


def _key(d: Diagnosis) -> tuple:
  return (d.kind, d.function, d.rule, d.path, d.expected, d.got)


def _with_fixes(d: Diagnosis) -> Diagnosis:
  from .fixes import suggest  # here, not at the top: fixes verify through check, which imports us
  return records.safely(suggest.attach, d, default=d)
