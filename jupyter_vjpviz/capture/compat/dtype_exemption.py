"""JAX's exemption from its cotangent dtype check, where JAX has it.

``_temporary_dtype_exception`` (in ``api`` for f_vjp cotangents, in
``custom_derivatives`` for custom_vjp rules) lets any inexact dtype through where an
inexact one is expected; JAX 0.12 marks it for removal. Looked up on each call: once it
is gone JAX checks dtypes strictly, so nothing is exempt and a wrong dtype is an error,
never an internal error of ours.
"""
from __future__ import annotations

NAME = "_temporary_dtype_exception"


def exempt(owner, got, expected) -> bool:
  """Whether JAX's ``owner`` module lets ``got`` through where ``expected`` is due."""
  rule = getattr(owner, NAME, None)
  return rule is not None and bool(rule(got, expected))
