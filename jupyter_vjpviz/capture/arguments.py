"""The user's own spelling of a library wrapper's inputs, learned by identity.

A library's custom_vjp (equinox's ``filter_custom_vjp``) takes the user's
arguments rearranged (``diff_array_vjp_arg[0].weight``), but hands the very same
tracer objects on to the user's fwd (``model.layers[2].weight``). Watching that
one call's frame (``code_watch``: that code object only, only during that call)
tells which parameter path holds each input. It is learned once per user fwd and
input structure, then cached: the hot path pays a dict lookup.
"""
from __future__ import annotations

from typing import Any, Callable

import jax

from . import code_watch

_LIMIT = 512                      # cached (code, structure) pairs; cleared when full
_cache: dict = {}


def cached(code, structure) -> tuple[str | None, ...] | None:
  return _cache.get((code, structure))


def known(code, structure) -> bool:
  """Whether that call was watched already (even if it named nothing)."""
  return (code, structure) in _cache


def observe(call: Callable[[], Any], code, structure, leaves: list) -> tuple[Any, tuple | None]:
  """``call()``'s result, and for each of ``leaves`` the path of the user's parameter
  it reached in the first frame of ``code`` (None where it reached none); cached."""
  result, seen = watch(call, code, code_watch.START)
  return result, remember(code, structure, [seen.get(id(leaf)) for leaf in leaves] if seen else None)


def observe_return(call: Callable[[], Any], code, structure, leaves_of: Callable) -> tuple[Any, tuple | None]:
  """``call()``'s result, and for each of ``leaves_of(result)`` its path in what ``code``
  returned (``.layers[2].weight``): where a library's bwd put the user's cotangents; cached."""
  result, seen = watch(call, code, code_watch.RETURN)
  names = None
  if seen:
    names = [seen.get(id(leaf)) for leaf in leaves_of(result)]
  return result, remember(code, structure, names)


def remember(code, structure, names) -> tuple | None:
  names = tuple(names) if names is not None else None
  if len(_cache) >= _LIMIT:
    _cache.clear()
  _cache[(code, structure)] = names
  return names


def watch(call: Callable[[], Any], code, event: str) -> tuple[Any, dict]:
  """``call()``'s result, and ``id -> path`` of the array leaves of the first frame of
  ``code`` that starts (its parameters) or returns (its value) meanwhile, in this thread."""
  seen: dict = {}

  def hit(frame, *value):
    if not seen:
      seen.update(_spelled(frame.f_locals if event == code_watch.START else {"": value[0]}))
  with code_watch.Watch(code, event, hit):
    return call(), seen


def _spelled(frame_locals: dict) -> dict[int, str]:
  """id of each array leaf among the parameters -> ``param.path`` (first parameter wins)."""
  return {i: name for i, (_, name) in spelled(frame_locals).items()}


def spelled(frame_locals: dict) -> dict[int, tuple]:
  """id of each leaf among the parameters -> (the leaf, ``param.path``); first one wins."""
  found: dict[int, tuple] = {}
  for name, value in frame_locals.items():
    try:
      leaves = jax.tree_util.tree_leaves_with_path(value)
    except Exception:  # noqa: BLE001 - a parameter that is not a pytree names nothing
      continue
    for path, leaf in leaves:
      found.setdefault(id(leaf), (leaf, name + jax.tree_util.keystr(path)))
  return found


def clear() -> None:
  _cache.clear()
