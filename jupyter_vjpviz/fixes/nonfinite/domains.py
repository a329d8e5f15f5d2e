"""Functions at the edge of their domain (``arccos``/``arcsin``/``atanh`` at ±1, ``log`` at
0, ``atan2`` at the origin, a fractional power at 0, ``erfinv`` at ±1): the double
``where``. The function sees a safe operand where the original one is at the edge, and
where the user's own ``where`` discards the result there (the mask after the fact) only
that inner guard is written; otherwise an outer ``where`` gives back the function's value
at the edge (its gradient there zero)."""
from __future__ import annotations

import ast
import dataclasses

from ...analysis.values.nonfinite import Culprit
from ...analysis.values.nonfinite_explain import chosen_away
from . import lines
from .candidate import Candidate, in_place


@dataclasses.dataclass(frozen=True)
class Guard:
  names: tuple            # as the user calls it (``jnp.arccos``: "arccos")
  ok: str                 # where the operand ``{a}`` is inside the domain
  safe: str               # the operand used elsewhere
  edge: str | None        # the value at the edge (None: not finite there, no outer where)


_CLIPPED = "jax.lax.stop_gradient(jnp.{f}(jnp.clip({a}, -1.0, 1.0)))"
GUARDS = {
    "acos": Guard(("arccos", "acos"), "jnp.abs({a}) < 1", "0.0", _CLIPPED.replace("{f}", "arccos")),
    "asin": Guard(("arcsin", "asin"), "jnp.abs({a}) < 1", "0.0", _CLIPPED.replace("{f}", "arcsin")),
    "atanh": Guard(("arctanh", "atanh"), "jnp.abs({a}) < 1", "0.0", None),
    "acosh": Guard(("arccosh", "acosh"), "{a} > 1", "2.0", "0.0"),
    "log": Guard(("log",), "{a} > 0", "1.0", None),
    "log2": Guard(("log2",), "{a} > 0", "1.0", None),
    "log1p": Guard(("log1p",), "{a} > -1", "0.0", None),
    "cbrt": Guard(("cbrt",), "{a} != 0", "1.0", "0.0"),
    "erf_inv": Guard(("erfinv",), "jnp.abs({a}) < 1", "0.0", None),
    "pow": Guard(("power", "pow", "**"), "{a} != 0", "1.0", "0.0"),
    "acospi": Guard(("acospi",), "jnp.abs({a}) < 1", "0.0", None),
    "asinpi": Guard(("asinpi",), "jnp.abs({a}) < 1", "0.0", None),
    "log2p1": Guard(("log2p1",), "{a} > -1", "0.0", None),
}
PRIMITIVES = frozenset({*GUARDS, "atan2", "atan2pi"})


def propose(c: Culprit, p) -> list[Candidate]:
  name = c.eqn.primitive.name
  outer = not chosen_away(c)
  if name in ("atan2", "atan2pi"):
    make = lambda e, resolve: _atan2(e, outer)
  elif name in GUARDS:
    make = lambda e, resolve: _guarded(e, GUARDS[name], outer)
  else:
    return []
  code = lines.rewrite_nodes(c.source, make)
  if code is None:
    return []
  return [in_place(f"Guard {name} with a double where", code, code,
                   f"{name} never sees the edge of its domain, so its derivative is finite "
                   "where the result is discarded or replaced by its value there")]


def _guarded(e: lines.Expr, g: Guard, outer: bool) -> str | None:
  node = e.node
  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and "**" in g.names:
    a, rest = e.sub(node.left), f" ** {e.sub(node.right).wrapped}"
    inner = lambda safe: f"{safe}{rest}"
  elif isinstance(node, ast.Call) and lines.called(node) in g.names and node.args \
      and not isinstance(node.args[0], ast.Starred):
    a = e.sub(node.args[0])
    others = "".join(", " + ast.get_source_segment(e.text, x) for x in (*node.args[1:], *node.keywords))
    func = ast.get_source_segment(e.text, node.func)
    inner = lambda safe: f"{func}({safe}{others})"
  else:
    return None
  ok = g.ok.format(a=a.seg if a.wrapped == a.seg else a.wrapped)
  guarded = inner(f"jnp.where({ok}, {a.seg}, {g.safe})")
  if not outer or g.edge is None:
    return guarded
  return f"jnp.where({ok}, {guarded}, {g.edge.format(a=a.seg)})"


def _atan2(e: lines.Expr, outer: bool) -> str | None:
  node = e.node
  if not (isinstance(node, ast.Call) and lines.called(node) in ("arctan2", "atan2", "atan2pi")
          and len(node.args) == 2):
    return None
  y, x = (e.sub(a) for a in node.args)
  ok = f"({y.seg} != 0) | ({x.seg} != 0)"
  func = ast.get_source_segment(e.text, node.func)
  guarded = f"{func}(jnp.where({ok}, {y.seg}, 0.0), jnp.where({ok}, {x.seg}, 1.0))"
  return f"jnp.where({ok}, {guarded}, 0.0)" if outer else guarded
