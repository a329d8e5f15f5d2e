"""``log`` at 0: of a softmax, as ``log_softmax`` of its logits; otherwise clamped at the
dtype's smallest normal (which changes the loss only where it was infinite)."""
from __future__ import annotations

import ast

import jax
import jax.numpy as jnp

from ...analysis.values.nonfinite import Culprit
from ...capture.compat.private import core
from . import lines
from .candidate import Candidate, in_place
from .reach import SHAPE

TINY = 1e-30     # clamp for log: above float32's smallest normal, far below any probability
PRIMITIVES = frozenset({"log"})


def propose_softmax(c: Culprit, p) -> list[Candidate]:
  if c.eqn.primitive.name != "log" or softmax_axes(c) is None:
    return []
  return [_log_softmax(c, lines.line(c.source))]


def propose_clamp(c: Culprit, p) -> list[Candidate]:
  return [_clamp(c, lines.line(c.source))] if c.eqn.primitive.name == "log" else []


def _clamp(c: Culprit, line: str | None) -> Candidate:
  """log of at least the operand dtype's smallest normal (float16's is 6.1e-05: 1e-30
  there is 0 again) or ``TINY``."""
  floor = max(TINY, float(jnp.finfo(c.eqn.invars[0].aval.dtype).tiny))

  def fn(eqn, ins, producer):
    return [jnp.log(jnp.maximum(ins[0], floor))]
  return in_place("Clamp before log",
                  lines.rewrite(line, ("log",), lambda a: f"jnp.log(jnp.maximum({a}, {floor:.2g}))"),
                  f"jnp.log(jnp.maximum(x, {floor:.2g}))",
                  "log never sees 0; its gradient is 0 where the input was clamped", fn)


def _log_softmax(c: Culprit, line: str | None) -> Candidate:
  """``log(softmax(z))`` as ``log_softmax(z)``: of the softmax's own arguments, on the line
  or where the user kept the probabilities in a variable (``probs = softmax(z)``)."""
  axes = softmax_axes(c)

  def fn(eqn, ins, producer):
    made, (z, *_) = producer(eqn.invars[0])
    if made.primitive.name == "div":   # a softmax written out, not a call
      _, (z,) = producer(made.invars[0])
    return [jax.nn.log_softmax(z, axis=axes)]

  def make(arg):
    softmax = _softmax_call(arg) or _softmax_call(lines.assigned_above(c.source, arg))
    return softmax and f"jax.nn.log_softmax({softmax})"
  return in_place("Use log_softmax instead of log(softmax(...))", lines.rewrite(line, ("log",), make),
                  f"jax.nn.log_softmax(logits, axis={axes})  # of the softmax's logits",
                  "the same values computed in log space: nothing underflows to 0", fn)


def _softmax_call(text: str | None) -> str | None:
  """The arguments, as written, of ``text`` when it is a call of a ``softmax``."""
  tree, text = lines.parse(text)
  node = tree.body[0].value if tree is not None and tree.body and isinstance(
      tree.body[0], ast.Expr) else None
  if isinstance(node, ast.Call) and lines.called(node) == "softmax":
    return lines.arguments(node, text)
  return None


def softmax_axes(c: Culprit):
  """The axes of the softmax whose result is ``log``'s operand: ``exp(z)`` divided by a
  broadcast of its own sum over them (how jax.nn.softmax and hand-written ones trace),
  inside the call that makes it where there is one (jax.nn.softmax's custom_jvp)."""
  eqns, var = c.level.eqns, c.eqn.invars[0]
  made = {v: e for e in eqns for v in e.outvars}
  div = made.get(var)
  inner = _called_jaxpr(div)
  if inner is not None and len(inner.outvars) == len(div.outvars):
    var = inner.outvars[div.outvars.index(var)]
    made = {v: e for e in inner.eqns for v in e.outvars}
    div = made.get(var)
  if div is None or div.primitive.name != "div":
    return None
  num, den = (made.get(v) if isinstance(v, core.Var) else None for v in div.invars)
  while den is not None and den.primitive.name in SHAPE:
    den = made.get(den.invars[0])
  if (num is None or num.primitive.name != "exp" or den is None
      or den.primitive.name != "reduce_sum" or den.invars[0] is not num.outvars[0]):
    return None
  return den.params["axes"]


def _called_jaxpr(eqn):
  """The jaxpr a call equation (custom_jvp_call, a jit) runs; None for any other."""
  if eqn is None:
    return None
  inner = eqn.params.get("call_jaxpr", eqn.params.get("jaxpr"))
  inner = getattr(inner, "jaxpr", inner)
  return inner if isinstance(inner, core.Jaxpr) else None
