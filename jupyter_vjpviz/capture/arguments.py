"""The user's own spelling of a library wrapper's inputs, learned by identity.

A library's custom_vjp (equinox's ``filter_custom_vjp``) takes the user's
arguments rearranged (``diff_array_vjp_arg[0].weight``), but hands the very same
tracer objects on to the user's fwd (``model.layers[2].weight``). Watching that
one call's frame (``sys.monitoring``, for that code object only and only during
that call, in a tool slot of its own: no profiler of the user's is displaced) tells which parameter
path holds each input. It is learned once per user fwd and input structure, then
cached: the hot path pays a dict lookup.
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable

import jax

_LIMIT = 512                      # cached (code, structure) pairs; cleared when full
_cache: dict = {}
_lock = threading.Lock()          # one observation at a time: the tool id is process-wide


def cached(code, structure) -> tuple[str | None, ...] | None:
  return _cache.get((code, structure))


def observe(call: Callable[[], Any], code, structure, leaves: list) -> tuple[Any, tuple | None]:
  """``call()``'s result, and for each of ``leaves`` the path of the user's parameter
  it reached in the first frame of ``code`` (None where it reached none)."""
  monitoring = getattr(sys, "monitoring", None)
  tool = _free_tool(monitoring)
  if tool is None or not _lock.acquire(blocking=False):
    return call(), None
  seen: dict = {}
  thread = threading.get_ident()

  def started(started_code, _offset):
    if started_code is code and thread == threading.get_ident() and not seen:
      seen.update(_spelled(sys._getframe(1).f_locals))
  try:
    monitoring.use_tool_id(tool, "vjpviz")
    monitoring.register_callback(tool, monitoring.events.PY_START, started)
    monitoring.set_local_events(tool, code, monitoring.events.PY_START)
    result = call()
  finally:
    monitoring.set_local_events(tool, code, 0)
    monitoring.register_callback(tool, monitoring.events.PY_START, None)
    monitoring.free_tool_id(tool)
    _lock.release()
  names = tuple(seen.get(id(leaf)) for leaf in leaves) if seen else None
  if len(_cache) >= _LIMIT:
    _cache.clear()
  _cache[(code, structure)] = names
  return result, names


def _free_tool(monitoring) -> int | None:
  if monitoring is None:
    return None
  return next((i for i in (5, 4, 3) if monitoring.get_tool(i) is None), None)


def _spelled(frame_locals: dict) -> dict[int, str]:
  """id of each array leaf among the parameters -> ``param.path`` (first parameter wins)."""
  found: dict[int, str] = {}
  for name, value in frame_locals.items():
    try:
      leaves = jax.tree_util.tree_leaves_with_path(value)
    except Exception:  # noqa: BLE001 - a parameter that is not a pytree names nothing
      continue
    for path, leaf in leaves:
      found.setdefault(id(leaf), name + jax.tree_util.keystr(path))
  return found


def clear() -> None:
  _cache.clear()
