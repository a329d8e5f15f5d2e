"""A clamp that hides a non-finite branch: ``maximum(log(p), c)`` at ``p = 0`` keeps the
clamp's value, but the ``log``'s derivative there is infinite and the clamp's zero
cotangent makes it NaN. The log is guarded and the clamp kept, exactly: ``c`` where ``p``
is 0, as before, with a zero gradient there."""
from __future__ import annotations

import ast

from ...analysis.values.nonfinite import Culprit
from . import lines
from .candidate import Candidate, in_place

PRIMITIVES = frozenset({"log", "log2", "log1p"})


def propose(c: Culprit, p) -> list[Candidate]:
  if c.eqn.primitive.name not in PRIMITIVES:
    return []
  code = lines.rewrite_nodes(c.source, lambda e, resolve: _kept(e))
  if code is None:
    return []
  return [in_place("Guard the log inside the clamp", code, code,
                   "the clamp's value where the log's operand is 0, as before; the log never "
                   "sees 0, so no infinite derivative meets the clamp's zero cotangent")]


def _kept(e: lines.Expr) -> str | None:
  node = e.node
  if not (isinstance(node, ast.Call) and lines.called(node) == "maximum" and len(node.args) == 2):
    return None
  inner, floor = (e.sub(a) for a in node.args)
  log = inner.node
  if not (isinstance(log, ast.Call) and lines.called(log) in ("log", "log2") and len(log.args) == 1):
    return None
  a = inner.sub(log.args[0])
  func = ast.get_source_segment(e.text, log.func)
  maximum = ast.get_source_segment(e.text, node.func)
  return (f"jnp.where({a.wrapped} > 0, {maximum}({func}(jnp.where({a.wrapped} > 0, {a.seg}, 1.0)), "
          f"{floor.seg}), {floor.seg})")
