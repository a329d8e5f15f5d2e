"""A division by zero (0/0, x/0, a normalisation by a norm or a sum of a zero row): the
denominator replaced by 1 where it is 0 and the quotient by 0 there. A denominator that is
a norm (on the line, or in a variable assigned above) becomes a safe norm written inline:
its own square root at 0 would take the zero cotangent the guard gives it to NaN."""
from __future__ import annotations

import ast

import jax.numpy as jnp

from ...analysis.values.nonfinite import Culprit
from . import lines
from .candidate import Candidate, in_place
from .roots import SAFE_NORM

PRIMITIVES = frozenset({"div"})


def propose(c: Culprit, p) -> list[Candidate]:
  if c.eqn.primitive.name != "div":
    return []
  found = []
  for normed in (True, False):
    used = []
    code = lines.rewrite_nodes(c.source, lambda e, resolve: _guarded(e, resolve, normed, used))
    if code and (used or not normed):
      found.append(in_place("Normalise with a safe norm, guarding the division" if used else
                            "Guard the division with a double where", code, code,
                            "the denominator is replaced by 1 where it is 0, and the result "
                            "by 0", None if used else _guard_fn,
                            helper=SAFE_NORM if used else ""))
  return found


def _guard_fn(eqn, ins, producer):
  n, d = ins
  ok = d != 0
  return [jnp.where(ok, n / jnp.where(ok, d, 1.0), 0.0)]


def _guarded(e: lines.Expr, resolve, normed: bool, used: list) -> str | None:
  node = e.node
  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
    n, d = e.sub(node.left), e.sub(node.right)
  elif isinstance(node, ast.Call) and lines.called(node) in ("divide", "true_divide") \
      and len(node.args) == 2:
    n, d = e.sub(node.args[0]), e.sub(node.args[1])
  else:
    return None
  den = d.wrapped
  if normed:
    norm = resolve(d)
    if not (isinstance(norm.node, ast.Call) and lines.called(norm.node) == "norm"
            and len(norm.node.args) == 1
            and all(k.arg in ("axis", "keepdims") for k in norm.node.keywords)):
      return None
    den = f"safe_norm({lines.arguments(norm.node, norm.text)})"
    used.append(den)
  return f"jnp.where({den} != 0, {n.wrapped} / jnp.where({den} != 0, {den}, 1.0), 0.0)"
