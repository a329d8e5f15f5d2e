"""A registry of monkeypatches that can always be undone by identity.

Every hook point is an attribute JAX looks up at call time (a module global or a
class attribute), so replacing it takes effect at once and restoring the very
same object undoes it completely.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Patch:
  owner: Any          # a module, a class, or a dict (JAX's rule tables)
  name: Any
  original: Any
  replacement: Any


class PatchSet:
  """Patches applied together and restored in reverse order."""

  def __init__(self):
    self._applied: list[Patch] = []

  @property
  def active(self) -> bool:
    return bool(self._applied)

  def apply(self, owner: Any, name: Any,
            make_replacement: Callable[[Any], Any]) -> None:
    """Replace ``owner.name`` with ``make_replacement(original)``; skip if absent."""
    original = _get(owner, name)
    if original is _MISSING:
      return
    replacement = make_replacement(original)
    _set(owner, name, replacement)
    self._applied.append(Patch(owner, name, original, replacement))

  def restore(self) -> None:
    while self._applied:
      patch = self._applied.pop()
      _set(patch.owner, patch.name, patch.original)


def _get(owner, name):
  if isinstance(owner, dict):
    return owner.get(name, _MISSING)
  return getattr(owner, name, _MISSING)


def _set(owner, name, value):
  if isinstance(owner, dict):
    owner[name] = value
  else:
    setattr(owner, name, value)
