"""A registry of monkeypatches that can always be undone by identity.

Every hook point is an attribute JAX looks up at call time (a module global or a
class attribute), so replacing it takes effect at once and restoring the very
same object undoes it completely.
"""
from __future__ import annotations

import dataclasses
from typing import Any
from collections.abc import Callable

from . import private

_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Patch:
  owner: Any          # a module, a class, or a dict (JAX's rule tables)
  name: Any
  original: Any
  replacement: Any


class PatchSet:
  """Patches applied together and restored in reverse order.

  A hook point this JAX lacks (or whose wrapper cannot be built) is skipped and
  remembered with the reason, so ``%vjpviz`` can say what is not watched.
  """

  def __init__(self):
    self._applied: list[Patch] = []
    self.skipped: list[tuple[str, str]] = []     # (hook point, why)

  @property
  def active(self) -> bool:
    return bool(self._applied)

  @property
  def points(self) -> list[str]:
    return [label(p.owner, p.name) for p in self._applied]

  def apply(self, owner: Any, name: Any,
            make_replacement: Callable[[Any], Any]) -> None:
    """Replace ``owner.name`` with ``make_replacement(original)``; skip if absent. An
    ``owner`` of the private names' registry means where JAX keeps that name."""
    if isinstance(owner, private.Namespace):
      place = private.owner(f"{owner}.{name}")
      if place is None:
        self.skip(f"{owner}.{name}", "absent in this JAX")
        return
      owner, name = place
    original = _get(owner, name)
    if original is _MISSING:
      self.skip(label(owner, name), "absent in this JAX")
      return
    try:
      replacement = make_replacement(original)
    except Exception as e:  # noqa: BLE001 - an unfamiliar JAX loses this point, not the kernel
      self.skip(label(owner, name), f"{type(e).__name__}: {e}")
      return
    _set(owner, name, replacement)
    self._applied.append(Patch(owner, name, original, replacement))

  def add(self, owner: Any, name: str, value: Any) -> None:
    """Give ``owner`` an attribute it lacks (a descriptor on a class); restoring deletes it."""
    if _get(owner, name) is not _MISSING:
      self.skip(label(owner, name), "already defined in this JAX")
      return
    _set(owner, name, value)
    self._applied.append(Patch(owner, name, _MISSING, value))

  def skip(self, point: str, why: str) -> None:
    self.skipped.append((point, why))

  def restore(self) -> None:
    while self._applied:
      patch = self._applied.pop()
      if patch.original is _MISSING:
        delattr(patch.owner, patch.name)
      else:
        _set(patch.owner, patch.name, patch.original)
    self.skipped.clear()


def label(owner: Any, name: Any) -> str:
  """``module.attr`` or ``Class.attr``; a rule table's entry by its key."""
  if isinstance(owner, dict):
    return f"transpose rule of {name}"
  prefix = getattr(owner, "__module__", None) if isinstance(owner, type) else None
  base = getattr(owner, "__qualname__", None) or getattr(owner, "__name__", type(owner).__name__)
  return ".".join(x for x in (prefix, base, str(name)) if x)


def _get(owner, name):
  if isinstance(owner, dict):
    return owner.get(name, _MISSING)
  return getattr(owner, name, _MISSING)


def _set(owner, name, value):
  if isinstance(owner, dict):
    owner[name] = value
  else:
    setattr(owner, name, value)
