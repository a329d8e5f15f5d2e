"""The cotangent type JAX expects for a primal type, and how two types are compared.

``ct_aval``, ``same_type`` and ``same_shape`` are what every check site, the analysis,
the fixes and gradcheck ask of a type. They sit below the sites (they read JAX's types
and nothing of ours), so a stage asks them without importing a rule site.
"""
from __future__ import annotations

import sys

from .compat.private import core, state


def ct_aval(primal):
  """The type of the cotangent JAX expects for a primal of type ``primal`` (a ref's: its
  contents')."""
  if isinstance(primal, state.AbstractRef):
    primal = primal.inner_aval
  # JAX before 0.10 has no to_ct_aval: there a cotangent's type is the tangent's.
  return getattr(primal, "to_ct_aval", primal.to_tangent_aval)()


def same_type(expected, got) -> bool | None:
  """Whether ``got`` is ``expected``, by JAX's own ``typematch`` (dtype included, weak
  type not): a user's ``HiType`` is compared through its own ``__eq__``, never assumed
  to have a shape or dtype. None for types that cannot be compared (said once)."""
  try:
    return core.typematch(expected, got)
  except Exception as e:  # noqa: BLE001 - the user's type, not our bug
    _cannot_compare(expected, got, e)
    return None


def same_shape(expected, got) -> bool:
  """Same shape, for types that have one (a ``HiType`` need not)."""
  return getattr(expected, "shape", None) == getattr(got, "shape", None)


_said_uncomparable: set = set()


def _cannot_compare(expected, got, error: Exception) -> None:
  key = (type(expected), type(got))
  if key in _said_uncomparable:
    return
  _said_uncomparable.add(key)
  print(f"vjpviz: cannot compare a cotangent of type {type(got).__name__} with "
        f"{type(expected).__name__} ({type(error).__name__}: {error}); "
        "that cotangent is not checked.", file=sys.stderr)
