"""The primitives that act on the world when bound eagerly (``io_callback``,
``jax.debug.callback``, ``jax.debug.print``), found where ``private`` says this version keeps
them, and a window in which this thread's eager runs of them are held back.

vjpviz rewrites the programs it traces (``analysis.values.replay.rewrite`` drops their
equations, knowing whether their results are used), but some of its runs are eager: a
train step run again with jit disabled, a rule whose Python reads its values. There
they are caught here: each primitive's ``impl`` (what JAX calls for an eager bind, and
JAX 0.12's debug callback when it runs compiled) is wrapped while a window is open
anywhere, and the wrapper holds back only the calls made on a thread inside one.
"""
from __future__ import annotations

import contextlib
import threading

import jax.numpy as jnp

from .private import callbacks

PRIMITIVES = tuple(p for p in (callbacks.io_callback_p, callbacks.debug_callback_p,
                               callbacks.debug_print_p) if p is not None)

_local = threading.local()     # this thread's open windows; names of results made up
_lock = threading.Lock()
_open = [0]                    # windows open in all threads (the wrappers are on while > 0)
_originals: dict = {}


@contextlib.contextmanager
def held_back():
  """Meanwhile this thread's eager binds of ``PRIMITIVES`` do not run: one without
  results returns none; one with results returns zeros, and its name is listed in the
  list yielded (the run that used them is not the user's)."""
  made_up = getattr(_local, "made_up", None)
  outer = made_up is not None
  if not outer:
    _local.made_up = made_up = []
    with _lock:
      _open[0] += 1
      if _open[0] == 1:
        for p in PRIMITIVES:
          _originals[p] = p.impl
          p.impl = _holding(p, p.impl)
  try:
    yield made_up
  finally:
    if not outer:
      _local.made_up = None
      with _lock:
        _open[0] -= 1
        if _open[0] == 0:
          for p in PRIMITIVES:
            p.impl = _originals.pop(p)


def _holding(primitive, impl):
  def held(*args, **params):
    made_up = getattr(_local, "made_up", None)
    if made_up is None:
      return impl(*args, **params)
    avals = params.get("result_avals", ())
    if avals:
      made_up.append(primitive.name)
    return [jnp.zeros(a.shape, a.dtype) for a in avals]
  return held
