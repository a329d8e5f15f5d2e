"""Square roots at 0: ``sqrt(x**2)`` as ``|x|``, a norm as a safe norm, the double
``where``, an epsilon; each leaves the values where the root was finite."""
from __future__ import annotations

import ast

import jax
import jax.numpy as jnp

from ...analysis.values.nonfinite import Culprit
from ...analysis.values.nonfinite_explain import chosen_away
from . import lines
from .candidate import Candidate, in_place
from .reach import made_by

PRIMITIVES = frozenset({"sqrt", "rsqrt"})


def propose(c: Culprit, p) -> list[Candidate]:
  name = c.eqn.primitive.name
  if name not in PRIMITIVES:
    return []
  line = lines.line(c.source)
  norm = made_by(c, "reduce_sum")
  square = [_abs(line)] if name == "sqrt" and _squared(c) else []
  return square + [_guard(c, line, name, norm)] + ([] if norm else [_eps(line, name)])


def _guard(c: Culprit, line: str | None, name: str, norm: bool) -> Candidate:
  """The double where: ``name`` sees 1 where its operand is not positive. When the user's
  own ``where`` already discards the result there, only the inner guard is written. The
  line's own ``norm`` becomes a safe norm, its ``std`` a guarded square root of its
  ``var``."""
  outer = not chosen_away(c)

  def fn(eqn, ins, producer):
    u = ins[0]
    ok = u > 0
    y = getattr(jax.lax, name)(jnp.where(ok, u, 1.0))
    return [jnp.where(ok, y, 0.0) if outer else y]
  f = f"jnp.{name}"
  inner = lambda a: f"{f}(jnp.where({a} > 0, {a}, 1.0))"
  make = (lambda a: f"jnp.where({a} > 0, {inner(a)}, 0.0)") if outer else inner
  if norm and lines.rewrite(line, ("norm",), str):
    return in_place("Use a safe norm (zero, with a zero gradient, at a zero vector)",
                    lines.rewrite(line, ("norm",), lambda a: f"safe_norm({a})"), "safe_norm(x)",
                    "the norm's sqrt is evaluated at 1 where the sum of squares is 0, and "
                    "its result replaced by 0 there", fn, helper=SAFE_NORM)
  return in_place(f"Guard {name} with a double where",
                  lines.rewrite(line, (name,), make) or lines.rewrite_std(line, make), make("x"),
                  f"{name} never sees the zeros, so its derivative is finite where the "
                  "outer where discards its result", fn)


SAFE_NORM = ("# beside your function:\n"
             "def safe_norm(x, axis=None, keepdims=False):\n"
             "  s = jnp.sum(x * x, axis=axis, keepdims=keepdims)\n"
             "  return jnp.where(s > 0, jnp.sqrt(jnp.where(s > 0, s, 1.0)), 0.0)\n\n")


def _abs(line: str | None) -> Candidate:
  """``sqrt(x**2)`` is ``|x|``, whose derivative JAX defines at 0 (a subgradient, 1)."""
  def fn(eqn, ins, producer):
    _, (base, *_) = producer(eqn.invars[0])
    return [jnp.abs(base)]

  def make(arg):
    tree, text = lines.parse(arg)
    node = tree.body[0].value if tree is not None and tree.body else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
      return f"jnp.abs({ast.get_source_segment(text, node.left)})"
    if isinstance(node, ast.Call) and lines.called(node) == "square" and node.args:
      return f"jnp.abs({ast.get_source_segment(text, node.args[0])})"
    return None
  return in_place("Use jnp.abs(x) instead of sqrt(x**2)", lines.rewrite(line, ("sqrt",), make),
                  "jnp.abs(x)  # for jnp.sqrt(x ** 2)",
                  "the same values; JAX gives |x| a subgradient at 0, where sqrt's "
                  "derivative at 0 is infinite", fn)


def _squared(c: Culprit) -> bool:
  """Whether the culprit's operand is its own operand squared (``x**2``, ``jnp.square``)."""
  made = {v: e for e in c.level.eqns for v in e.outvars}
  eqn = made.get(c.eqn.invars[0])
  return eqn is not None and (eqn.primitive.name == "square" or (
      eqn.primitive.name == "integer_pow" and eqn.params["y"] == 2))


def _eps(line: str | None, name: str) -> Candidate:
  def fn(eqn, ins, producer):
    return [getattr(jax.lax, name)(ins[0] + 1e-12)]
  return in_place(f"Add a small epsilon inside {name}",
                  lines.rewrite(line, (name,), lambda a: f"jnp.{name}({a} + 1e-12)"),
                  f"jnp.{name}(x + 1e-12)",
                  "shifts the value by at most 1e-6; the derivative at 0 becomes finite", fn)
