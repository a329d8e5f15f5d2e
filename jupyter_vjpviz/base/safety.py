"""``safely``: vjpviz's own code runs behind it, so no bug of ours reaches the user's program."""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import traceback
from typing import Any
from collections.abc import Callable

_reported_failures: set[tuple[str, str]] = set()

_DOING = {"capture": "watch this VJP", "analysis": "diagnose", "fixes": "suggest fixes",
          "render": "render the diagnosis", "deliver": "show the diagnosis",
          "pipeline": "diagnose", "check": "check", "gradcheck": "check the gradient's values",
          "nans": "check the gradient's values", "flows": "check the gradient's values",
          "grads": "show the diagnosis", "watch": "show the diagnosis"}
"""What vjpviz was doing, by the module that failed (its most specific part first)."""


class Unavailable(Exception):
  """A JAX internal this needs is absent from the running JAX: its capability is off, and
  the capabilities line said so once (``capture.compat.private``); nothing more to say."""


def safely(fn: Callable, *args, default: Any = None) -> Any:
  """Run vjpviz's own code; if it fails, say so in one line and carry on.

  The user's program must behave exactly as without vjpviz, so nothing of ours
  may raise into it. Each (place, error type) is reported once: a training loop
  must not print the same line every step.
  """
  try:
    return fn(*args)
  except Unavailable as e:
    absorbed.notify(_stage(fn, sys._getframe(1)), getattr(fn, "__qualname__", "?"), e)
    return default
  except Exception as e:  # noqa: BLE001 - our bug must not become the user's
    where = getattr(fn, "__qualname__", None) or type(fn).__name__
    doing = _stage(fn, sys._getframe(1))
    absorbed.notify(doing, where, e)   # a check running meanwhile is not established
    if (where, type(e).__name__) not in _reported_failures:
      _reported_failures.add((where, type(e).__name__))
      print(failure_line(doing, where, e), file=sys.stderr)
      if os.environ.get("VJPVIZ_DEBUG"):   # for us: where in vjpviz it failed
        traceback.print_exc()
    return default



class Listeners(list):
  """Callbacks a delivering layer registers on one below it (pipeline, watch, grads, and
  the capture sites' ``vjp_finished``, ``site_made``, ``rule_applied``): each at most once,
  each called ``safely``, so one that fails never reaches the user's program."""

  def add(self, listener) -> None:
    if listener not in self:
      self.append(listener)

  def discard(self, listener) -> None:
    if listener in self:
      self.remove(listener)

  def notify(self, *args) -> None:
    for listener in list(self):
      safely(listener, *args)

  @contextlib.contextmanager
  def listening(self, listener):
    """``listener`` added meanwhile."""
    self.add(listener)
    try:
      yield
    finally:
      self.discard(listener)


class ThreadListeners(threading.local):
  """``Listeners`` of each thread apart: one added is told only of what happens in the
  thread that added it (``vjpviz.gradcheck`` hears of the rules its own call applies)."""

  def __init__(self):
    self.here = Listeners()

  def __getattr__(self, name):      # add, discard, notify, listening: this thread's
    return getattr(self.here, name)

  def __bool__(self) -> bool:
    return bool(self.here)


absorbed = ThreadListeners()
"""``f(doing, where, error)``: each error ``safely`` absorbs in this thread, as it does
(``base.unchecked.attempt``: a check whose stage failed has no all-clear to give)."""


def failure_line(doing: str, where: str, error: BaseException) -> str:
  """The one line vjpviz prints when it fails: what it could not do, and why."""
  why = " ".join(f"{type(error).__name__}: {error or repr(error)}".split())[:300]
  return (f"vjpviz: could not {doing} (internal error in {where}: {why}); "
          "your code ran as it would without vjpviz.")


def forget_failures() -> None:
  """Report internal errors afresh (``vjpviz.clear()``)."""
  _reported_failures.clear()


def _stage(fn: Callable, caller) -> str:
  """What the failing code was for: from its module, or the vjpviz module that called it."""
  module = getattr(fn, "__module__", None) or ""
  if not module.startswith("jupyter_vjpviz."):
    module = caller.f_globals.get("__name__", "")
  return next((_DOING[p] for p in reversed(module.split(".")[1:]) if p in _DOING), "diagnose")
