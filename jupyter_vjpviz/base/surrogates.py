"""``vjpviz.surrogate``: a custom rule whose gradient differs from its primal's on purpose.

A straight-through estimator, a clipped or smoothed gradient: ``vjpviz.gradcheck``
would call it wrong. Marking the custom_vjp object, the primal function, or the
library object that builds the custom_vjp (equinox's ``filter_custom_vjp``) says
it is intended. Importing this module touches no JAX: marking happens where the
user's rules are defined, and must never fail there.
"""
from __future__ import annotations

import weakref

MARK = "__vjpviz_surrogate__"

_marked: weakref.WeakSet = weakref.WeakSet()   # objects that take no attributes
_builtins: list = []                           # nor weak references: they live forever anyway


def surrogate(f):
  """Mark ``f`` as an intended surrogate gradient; returns ``f`` (a decorator)."""
  try:
    setattr(f, MARK, True)
  except (AttributeError, TypeError):
    try:
      _marked.add(f)
    except TypeError:
      _builtins.append(f)
  return f


def is_surrogate(cvjp) -> bool:
  """Whether ``cvjp``, its primal, or what its primal closes over is marked.

  A library's custom_vjp wraps the user's function: the primal closes over it,
  or over the library's object holding it (``self.fn``), one step away.
  """
  fun = getattr(cvjp, "fun", None)
  held = [_cell_contents(c) for c in getattr(fun, "__closure__", None) or ()]
  attrs = [v for h in held for v in getattr(h, "__dict__", {}).values() if callable(v)]
  candidates = [cvjp, fun, getattr(fun, "__wrapped__", None), *held, *attrs]
  return any(_marked_one(c) for c in candidates if c is not None)


def _marked_one(x) -> bool:
  if getattr(x, MARK, False) is True or any(x is b for b in _builtins):
    return True
  try:
    return x in _marked
  except TypeError:   # unhashable or not weakly referenceable: not in the weak set
    return False


def _cell_contents(cell):
  try:
    return cell.cell_contents
  except ValueError:  # an empty cell
    return None
