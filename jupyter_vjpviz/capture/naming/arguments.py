"""The user's own spelling of a library wrapper's inputs, learned by identity.

A library's custom_vjp (equinox's ``filter_custom_vjp``) takes the user's
arguments rearranged (``diff_array_vjp_arg[0].weight``), but hands the very same
tracer objects on to the user's fwd (``model.layers[2].weight``). Watching that
one call's frame (``code_monitor``: that code object only, only during that call)
tells which parameter path holds each input. It is learned once per user fwd and
input structure, then cached: the hot path pays a dict lookup.
"""
from __future__ import annotations

from collections.abc import Callable

import jax

from . import code_monitor

_LIMIT = 512                      # cached (code, structure) pairs; cleared when full
_DEPTH = 200                      # nesting flattened at most: far below CPython's C budget (1500)
_cache: dict = {}


def cached(code, structure) -> tuple[str | None, ...] | None:
  return _cache.get((code, structure))


def known(code, structure) -> bool:
  """Whether that call was watched already (even if it named nothing)."""
  return (code, structure) in _cache


class Learning:
  """While open (a context manager around the one call of the user's rule), which path
  of the user's parameters each array leaf has in the first frame of ``code`` that starts
  (``event=START``: its parameters) or returns (``RETURN``: its value) in this thread.

  The rule is called in the caller's own frame, inside the ``with``: no frame of ours
  is added under it (``__enter__`` has returned, ``__exit__`` has not begun).
  """

  def __init__(self, code, structure, event: str):
    self.code, self.structure, self.event = code, structure, event
    self._seen: dict = {}
    self.returned: list = []   # RETURN: the value, while the call is open (a bwd that raises)
    self._monitor = code_monitor.Monitor(code, event, self._hit)

  def __enter__(self):
    self._monitor.__enter__()
    return self

  def __exit__(self, *exc):
    return self._monitor.__exit__(*exc)

  def _hit(self, frame, *value):
    if value and not self.returned:
      self.returned.append(value[0])
    if not self._seen:
      self._seen.update(_spelled(frame.f_locals if self.event == code_monitor.START
                                 else {"": value[0]}))

  def learned(self, leaves_of: Callable[[], list]) -> tuple[str | None, ...] | None:
    """For each of ``leaves_of()`` (asked only if the frame was seen) its path, None where
    it has none; cached for ``code`` and ``structure``."""
    names = [self._seen.get(id(leaf)) for leaf in leaves_of()] if self._seen else None
    return remember(self.code, self.structure, names)


def remember(code, structure, names) -> tuple | None:
  names = tuple(names) if names is not None else None
  if len(_cache) >= _LIMIT:
    _cache.clear()
  _cache[(code, structure)] = names
  return names


def _spelled(frame_locals: dict) -> dict[int, str]:
  """id of each array leaf among the parameters -> ``param.path`` (first parameter wins)."""
  return {i: name for i, (_, name) in spelled(frame_locals).items()}


def spelled(frame_locals: dict) -> dict[int, tuple]:
  """id of each leaf among the parameters -> (the leaf, ``param.path``); first one wins."""
  found: dict[int, tuple] = {}
  for name, value in frame_locals.items():
    if not _bounded(value):
      continue
    try:
      leaves = jax.tree_util.tree_leaves_with_path(value)
    except Exception:  # noqa: BLE001 - a parameter that is not a pytree names nothing
      continue
    for path, leaf in leaves:
      found.setdefault(id(leaf), (leaf, name + jax.tree_util.keystr(path)))
  return found


def _bounded(value) -> bool:
  """Whether ``value``'s dicts, lists and tuples nest less than ``_DEPTH`` deep and hold
  no cycle. A local may be anything (a closed-over dict that holds itself, a namespace);
  jaxlib's flatten overflowing on one raises a RecursionError that, on CPython 3.12,
  leaves the C recursion budget spent for the rest of the process. Walked with a stack
  of our own, so this check cannot overflow."""
  on_path: set[int] = set()
  stack = [(value, 0, False)]
  while stack:
    x, depth, leaving = stack.pop()
    if leaving:
      on_path.discard(id(x))
      continue
    children = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else None
    if children is None:
      continue
    if id(x) in on_path or depth >= _DEPTH:
      return False
    on_path.add(id(x))
    stack.append((x, depth, True))
    stack.extend((c, depth + 1, False) for c in children)
  return True


def clear() -> None:
  _cache.clear()
