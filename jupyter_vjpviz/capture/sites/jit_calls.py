"""Top-level jitted calls as they return, for checking a train step's outputs.

A gradient taken inside ``jax.jit`` holds tracers, so its values are seen only in
the jitted call's outputs. A call that compiles goes through pjit's Python path
(``_run_python_pjit``); a cached one runs in C++, which calls JAX's post hook (the
one ``jax_debug_nans`` checks outputs with) when one is set. Both tell
``observer(fun, args, kwargs, outputs)``, ``fun`` the Python function jitted;
calls made while tracing are not told. Only in the thread that observes and only
while ``observing`` runs: nothing is wrapped otherwise, and a post hook already set
(``jax_debug_nans``'s) still runs after ours.
"""
from __future__ import annotations

import contextlib
import threading

from ..compat.private import api, core, pjit
from ...base import safety
from ..compat.patches import PatchSet


@contextlib.contextmanager
def observing(observer):
  """Tell ``observer`` of each top-level jitted call in this thread meanwhile."""
  me = threading.get_ident()
  tell = lambda fun, args, kwargs, outs: (threading.get_ident() == me and safety.safely(
      observer, fun, args, kwargs, outs))
  patches = PatchSet()
  patches.apply(pjit, "_run_python_pjit", lambda original: _compiling(original, tell))
  state = api._post_hook_state
  previous = state.swap_local(_cached(state.value, tell)) if state is not None else None
  try:
    yield patches
  finally:
    patches.restore()
    if state is not None:
      state.set_local(previous)


def _compiling(original, tell):
  def run_python_pjit(p, args_flat, fun, args, kwargs):
    out = original(p, args_flat, fun, args, kwargs)
    if core.trace_state_clean():
      tell(fun, args, kwargs, out[0])
    return out
  run_python_pjit.__wrapped__ = original
  return run_python_pjit


def _cached(previous, tell):
  def post_hook(jitted, args, kwargs, outs):
    fun = getattr(jitted, "_fun", None)
    if fun is not None:
      tell(fun, args, kwargs, outs)
    if previous is not None:
      previous(jitted, args, kwargs, outs)
  return post_hook
