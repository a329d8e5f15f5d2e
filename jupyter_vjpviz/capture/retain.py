"""Whether a diagnosis may keep the user's custom_vjp alive.

A rule made for one call (a factory, flax linen's ``nn.custom_vjp``, a
``jax.custom_gradient`` in a loop) is gone once the failing call returns, and
with it verify_fix and apply_fix. A diagnosis may hold it as long as the
diagnosis lives, but only if nothing it reaches is an array: no device buffer
may outlive the failing call because of us. What it reaches is walked
conservatively: anything past the budget counts as holding arrays.
"""
from __future__ import annotations

import dataclasses
import functools
import types

import jax
import numpy as np

from .records import Record, Strong

BUDGET = 400       # objects looked at; a rule set needing more is not held


def retained(rec: Record) -> Record:
  """``rec`` whose site holds its custom_vjp strongly, when that is safe (see module)."""
  site = rec.site
  if site is None or site.owner is None or isinstance(site.owner, Strong):
    return rec
  owner = site.owner()
  if owner is None or holds_arrays(owner):
    return rec
  return dataclasses.replace(rec, site=dataclasses.replace(site, owner=Strong(owner)))


def holds_arrays(root) -> bool:
  """True if ``root`` may reach an array (or a tracer) through closures, defaults,
  partials, containers or instance attributes; module globals are not its own."""
  todo, seen = [root], set()
  while todo:
    x = todo.pop()
    if id(x) in seen or isinstance(x, _ATOMS):
      continue
    seen.add(id(x))
    if len(seen) > BUDGET or isinstance(x, (jax.Array, np.ndarray)):
      return True
    todo.extend(_reaches(x))
  return False


_ATOMS = (type(None), bool, int, float, complex, str, bytes, type, types.ModuleType,
          types.BuiltinFunctionType, types.CodeType)


def _reaches(x):
  if isinstance(x, types.FunctionType):
    yield from (c.cell_contents for c in x.__closure__ or () if _bound(c))
    yield from x.__defaults__ or ()
    yield from (x.__kwdefaults__ or {}).values()
    yield from x.__dict__.values()      # __wrapped__ and the like
  elif isinstance(x, types.MethodType):
    yield x.__func__
    yield x.__self__
  elif isinstance(x, functools.partial):
    yield x.func
    yield from x.args
    yield from x.keywords.values()
  elif isinstance(x, dict):
    yield from x.values()
  elif isinstance(x, (tuple, list, set, frozenset)):
    yield from x
  else:
    yield from getattr(x, "__dict__", {}).values()
    slots = getattr(type(x), "__slots__", ())
    yield from (getattr(x, s) for s in ((slots,) if isinstance(slots, str) else slots)
                if hasattr(x, s))


def _bound(cell) -> bool:
  try:
    cell.cell_contents
    return True
  except ValueError:
    return False
