"""A custom_jvp read alike whichever class JAX made it.

``jax.custom_jvp`` holds ``fun``, ``jvp``, ``nondiff_argnums`` and ``symbolic_zeros``. On
JAX 0.11 under ``jax_custom_jvp3``, ``jax.custom_jvp(f)`` returns hijax's ``custom_jvp3``
instead, holding the same as ``f``, ``jvp_fun``, ``static_argnums`` and ``symz`` (JAX 0.12
keeps the user's ``jax.custom_jvp`` and makes a ``custom_jvp3`` afresh at each call).
"""
from __future__ import annotations

import jax

from . import private
from .private import hijax

_JVP3_NAMES = {"fun": "f", "jvp": "jvp_fun", "nondiff_argnums": "static_argnums",
               "symbolic_zeros": "symz"}


def is_custom_jvp(obj) -> bool:
  return isinstance(obj, jax.custom_jvp) or (private.has("hijax.custom_jvp3")   # the flag's JAX
                                             and isinstance(obj, hijax.custom_jvp3))


def own_name(custom, name: str) -> str:
  """What ``custom``'s class calls the custom_jvp attribute ``name``."""
  return name if isinstance(custom, jax.custom_jvp) else _JVP3_NAMES.get(name, name)


def attribute(custom, name: str):
  return getattr(custom, own_name(custom, name))


def primal(custom):
  return attribute(custom, "fun")


def nondiff_argnums(custom) -> tuple[int, ...]:
  return tuple(attribute(custom, "nondiff_argnums"))
