"""Fixes for a gradient that goes NaN or Inf, each checked by re-running the gradient.

Only rewrites known to be right are proposed: the double-``where`` guard (the
operand replaced by a safe value where the result is not used), a safe norm,
clamping before ``log``, ``log_softmax`` for the log of a softmax, JAX's own
derivative of a custom rule's primal, and for cotangents that overflow (an
exploding gradient whose true value is finite) scaling the loss by a power of
two: the backward pass is linear in its output cotangent and a power of two
scales exactly, so dividing the gradient by it gives the same values, in range.
Each is applied to the forward program at the culprit equation (``nonfinite_eval.Patch``) and the whole gradient is
computed again: a fix is verified when that gradient is finite and equal to the
original wherever the original was finite. The code shown is the user's own
line with the expression rewritten, when the line can be read and parsed.
"""
from __future__ import annotations

import ast
import dataclasses
import linecache
from typing import NamedTuple
from collections.abc import Callable

import jax
import jax.numpy as jnp

from ..capture.compat.private import core
from ..analysis import nonfinite, oracle, replay
from ..analysis.diagnosis import UNVERIFIABLE, VERIFIED, Fix
from ..analysis.locate import source_line
from ..base import syntax
from ..analysis.nonfinite import Culprit, Localisation
from ..analysis.nonfinite_eval import Patch, evaluate
from ..analysis.nonfinite_explain import chosen_away, overflowed
from ..analysis.program import rule_call
from ..capture.naming import function_names

TINY = 1e-30     # clamp for log: above float32's smallest normal, far below any probability


class Program(NamedTuple):
  """The differentiated call, as the localiser ran it (arrays: for this call only)."""
  jaxpr: core.Jaxpr
  args: list
  active: list
  out_cts: list
  names: list       # the differentiated inputs as the user names them
  function: str = "loss"
  argnums: tuple = (0,)
  found: Localisation | None = None   # the search's state, for a fix's gradient to resume


@dataclasses.dataclass(frozen=True)
class _Candidate:
  title: str
  code: str
  reason: str
  fn: Callable | None = None   # (eqn, operands, producer) -> outputs, at the culprit
  scale: float = 1.0           # of the output cotangent; the gradient divided by it


def gradient(p: Program, patch: Patch | None = None) -> list:
  """The gradient of ``p`` w.r.t. its active inputs, with ``patch`` applied, by the search's
  own backward pass (eager: the pullbacks it traced are reused, and a patched program is
  not compiled whole for one use)."""
  return nonfinite.gradient(p.jaxpr, p.args, p.active, p.out_cts, patch)


def suggest(c: Culprit, p: Program, original: list) -> list[Fix]:
  """The first candidate for ``c`` (or for the equation that made its non-finite
  operand) that makes the gradient finite and keeps it where it was: each one judged
  costs a whole backward pass, so the rest are not tried. Judging is vjpviz's own run
  of the rewritten program (``analysis.replay``: within the call's account, loops
  capped, no effect repeated); a candidate it could not judge is offered unverifiable,
  its note saying why."""
  c = c.origin or c
  unjudged = []
  with replay.account():
    for cand in candidates(c, p):
      try:
        verdict = _judge(cand, c, p, original)
      except replay.NotJudged as e:
        unjudged.append(Fix(cand.title, cand.code, cand.reason, exact=False,
                            verdict=UNVERIFIABLE, note=str(e)))
        if str(e) == replay.TIME_BUDGET:
          break
        continue
      if verdict is not None:
        return [Fix(cand.title, cand.code, cand.reason, exact=True, verdict=VERIFIED,
                    note=verdict)]
  return unjudged


def _judge(cand: _Candidate, c: Culprit, p: Program, original: list) -> str | None:
  try:
    with replay.replaying():
      patch = cand.fn and Patch(c.path, cand.fn)
      got = patch and p.found and nonfinite.resumed(p.found, patch)
      if not got:
        scaled = p._replace(out_cts=[None if o is None else o * cand.scale for o in p.out_cts])
        got = [g / cand.scale for g in gradient(scaled, patch)]
  except replay.NotJudged:
    raise
  except Exception:  # noqa: BLE001 - a rewrite that does not apply here is no fix
    return None
  if not nonfinite.all_finite(got):
    return None
  kept = [oracle.compare(i, n, o, g, core.typeof(o))
          for i, (n, o, g) in enumerate(zip(p.names, original, got))]
  if not all(k.ok for k in kept):
    return None
  return "the gradient is finite, and equal to the original wherever that was finite"


def candidates(c: Culprit, p: Program) -> list[_Candidate]:
  """The rewrites that fit the culprit equation, best first."""
  name, line = c.eqn.primitive.name, _line(c.source)
  if overflowed(c):
    return [_rescale(p.function, p.argnums, k) for k in SCALES]
  if rule_call(c.eqn):
    return [_autodiff(c)]
  if name in ("sqrt", "rsqrt"):
    norm = _made_by(c, "reduce_sum")
    square = [_abs(line)] if name == "sqrt" and _squared(c) else []
    return square + [_guard(c, line, name, norm)] + ([] if norm else [_eps(line, name)])
  if name == "log":
    found = [_log_softmax(c, line)] if _softmax_axes(c) is not None else []
    return found + [_clamp(line)]
  if name == "div":
    return [_guard_div(line)]
  return []


def _guard(c: Culprit, line: str | None, name: str, norm: bool) -> _Candidate:
  """The double where: ``name`` sees 1 where its operand is not positive. When the user's
  own ``where`` already discards the result there, only the inner guard is written."""
  outer = not chosen_away(c)

  def fn(eqn, ins, producer):
    u = ins[0]
    ok = u > 0
    y = getattr(jax.lax, name)(jnp.where(ok, u, 1.0))
    return [jnp.where(ok, y, 0.0) if outer else y]
  if norm:
    code = _rewrite(line, ("norm",), lambda a: f"safe_norm({a})") or "safe_norm(x)"
    return _Candidate("Use a safe norm (zero, with a zero gradient, at a zero vector)",
                      _SAFE_NORM + code, "the norm's sqrt is evaluated at 1 where the sum of "
                      "squares is 0, and its result replaced by 0 there", fn)
  f = f"jnp.{name}"
  inner = lambda a: f"{f}(jnp.where({a} > 0, {a}, 1.0))"
  make = (lambda a: f"jnp.where({a} > 0, {inner(a)}, 0.0)") if outer else inner
  code = _rewrite(line, (name,), make) or make("x")
  return _Candidate(f"Guard {name} with a double where", code,
                    f"{name} never sees the zeros, so its derivative is finite where the "
                    "outer where discards its result", fn)


_SAFE_NORM = ("def safe_norm(x, axis=None, keepdims=False):\n"
              "  s = jnp.sum(x * x, axis=axis, keepdims=keepdims)\n"
              "  return jnp.where(s > 0, jnp.sqrt(jnp.where(s > 0, s, 1.0)), 0.0)\n\n")


def _abs(line: str | None) -> _Candidate:
  """``sqrt(x**2)`` is ``|x|``, whose derivative JAX defines at 0 (a subgradient, 1)."""
  def fn(eqn, ins, producer):
    _, (base, *_) = producer(eqn.invars[0])
    return [jnp.abs(base)]

  def make(arg):
    tree, text = _parse(arg)
    node = tree.body[0].value if tree is not None and tree.body else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
      return f"jnp.abs({ast.get_source_segment(text, node.left)})"
    if isinstance(node, ast.Call) and _called(node) == "square" and node.args:
      return f"jnp.abs({ast.get_source_segment(text, node.args[0])})"
    return f"jnp.abs(x)  # x: the value squared in jnp.sqrt({arg})"
  code = _rewrite(line, ("sqrt",), make) or "jnp.abs(x)  # for jnp.sqrt(x ** 2)"
  return _Candidate("Use jnp.abs(x) instead of sqrt(x**2)", code,
                    "the same values; JAX gives |x| a subgradient at 0, where sqrt's "
                    "derivative at 0 is infinite", fn)


def _squared(c: Culprit) -> bool:
  """Whether the culprit's operand is its own operand squared (``x**2``, ``jnp.square``)."""
  made = {v: e for e in c.level.eqns for v in e.outvars}
  eqn = made.get(c.eqn.invars[0])
  return eqn is not None and (eqn.primitive.name == "square" or (
      eqn.primitive.name == "integer_pow" and eqn.params["y"] == 2))


def _eps(line: str | None, name: str) -> _Candidate:
  def fn(eqn, ins, producer):
    return [getattr(jax.lax, name)(ins[0] + 1e-12)]
  code = _rewrite(line, (name,), lambda a: f"jnp.{name}({a} + 1e-12)") or f"jnp.{name}(x + 1e-12)"
  return _Candidate(f"Add a small epsilon inside {name}", code,
                    "shifts the value by at most 1e-6; the derivative at 0 becomes finite", fn)


def _clamp(line: str | None) -> _Candidate:
  def fn(eqn, ins, producer):
    u = ins[0]
    return [jnp.log(jnp.maximum(u, max(TINY, float(jnp.finfo(u.dtype).tiny))))]
  code = _rewrite(line, ("log",), lambda a: f"jnp.log(jnp.maximum({a}, {TINY:g}))") \
      or f"jnp.log(jnp.maximum(x, {TINY:g}))"
  return _Candidate("Clamp before log", code, "log never sees 0; its gradient is 0 where the "
                    "input was clamped", fn)


def _log_softmax(c: Culprit, line: str | None) -> _Candidate:
  axes = _softmax_axes(c)

  def fn(eqn, ins, producer):
    div, _ = producer(eqn.invars[0])
    _, (z,) = producer(div.invars[0])
    return [z - jnp.log(jnp.sum(jnp.exp(z), axis=axes, keepdims=True))]
  code = _rewrite(line, ("log",), lambda a: a.replace("softmax(", "log_softmax(", 1)
                  if "softmax(" in a else f"jax.nn.log_softmax({a}, axis={axes})") \
      or f"jax.nn.log_softmax(x, axis={axes})"
  return _Candidate("Use log_softmax instead of log(softmax(...))", code,
                    "the same values computed in log space: nothing underflows to 0", fn)


def _guard_div(line: str | None) -> _Candidate:
  def fn(eqn, ins, producer):
    n, d = ins
    ok = d != 0
    return [jnp.where(ok, n / jnp.where(ok, d, 1.0), 0.0)]
  code = _rewrite_div(line) or "jnp.where(d != 0, n / jnp.where(d != 0, d, 1.0), 0.0)"
  return _Candidate("Guard the division with a double where", code,
                    "the denominator is replaced by 1 where it is 0, and the result by 0", fn)


SCALES = (32, 64, 100)   # 2**-k tried in turn: float32 spans 2**-126 to 2**128


def _rescale(function: str, argnums: tuple, k: int) -> _Candidate:
  nums = "" if argnums == (0,) else f", argnums={argnums[0] if len(argnums) == 1 else argnums}"
  code = (f"scale = 2.0 ** -{k}   # a power of two: exact; the cotangents stay in range\n"
          f"grads = jax.grad(lambda *a: {function}(*a) * scale{nums})(*args)\n"
          "grads = jax.tree_util.tree_map(lambda g: g / scale, grads)")
  return _Candidate(f"Scale the loss by 2^-{k} while differentiating (the gradient "
                    "explodes in range)", code,
                    "the backward pass is linear in its output cotangent: every cotangent is "
                    f"scaled by 2^-{k} exactly, none overflows, and dividing the gradient by the "
                    "same power of two restores its values", scale=2.0 ** -k)


def _autodiff(c: Culprit) -> _Candidate:
  function = function_names.function_of(c.eqn.params.get("call_jaxpr"))[0] or "the primal"

  def fn(eqn, ins, producer):
    return evaluate(eqn.params["call_jaxpr"], ins)
  code = (f"# in {function}'s bwd rule, the cotangent JAX's own autodiff gives (.fun: the\n"
          f"# primal without its rule, which would call this bwd again):\n"
          f"_, pull = jax.vjp({function}.fun, *primal_inputs)   # fwd saves them as residuals\n"
          "return pull(g)")
  return _Candidate(f"Differentiate {function} with JAX instead of its custom rule", code,
                    "JAX's derivative of the primal, where it is finite", fn)


def _made_by(c: Culprit, primitive: str) -> bool:
  """Whether the culprit's operand is made by ``primitive`` (through reshapes)."""
  made = {v: e for e in c.level.eqns for v in e.outvars}
  eqn = made.get(c.eqn.invars[0])
  while eqn is not None and eqn.primitive.name in _SHAPE:
    eqn = made.get(eqn.invars[0])
  return eqn is not None and eqn.primitive.name == primitive


_SHAPE = frozenset({"broadcast_in_dim", "reshape", "squeeze", "expand_dims",
                    "convert_element_type", "real"})


def _softmax_axes(c: Culprit):
  """The axes of the softmax whose result is ``log``'s operand: ``exp(z)`` divided by a
  broadcast of its own sum over them (how jax.nn.softmax and hand-written ones trace)."""
  made = {v: e for e in c.level.eqns for v in e.outvars}
  div = made.get(c.eqn.invars[0])
  if div is None or div.primitive.name != "div":
    return None
  num, den = (made.get(v) if isinstance(v, core.Var) else None for v in div.invars)
  while den is not None and den.primitive.name in _SHAPE:
    den = made.get(den.invars[0])
  if (num is None or num.primitive.name != "exp" or den is None
      or den.primitive.name != "reduce_sum" or den.invars[0] is not num.outvars[0]):
    return None
  return den.params["axes"]


def _line(source: str | None) -> str | None:
  where = source_line(source)
  text = linecache.getline(*where) if where else ""
  return text.rstrip("\n") or None


def _rewrite(line: str | None, funcs: tuple[str, ...], make) -> str | None:
  """``line`` with its first call to one of ``funcs`` (``jnp.sqrt(...)``) replaced by
  ``make(the call's arguments, as written)``."""
  tree, text = _parse(line)
  for node in ast.walk(tree) if tree is not None else ():
    if isinstance(node, ast.Call) and _called(node) in funcs and node.args:
      args = ", ".join(ast.get_source_segment(text, a) for a in (*node.args, *node.keywords))
      return syntax.indent_of(line) + text.replace(ast.get_source_segment(text, node), make(args), 1)
  return None


def _rewrite_div(line: str | None) -> str | None:
  tree, text = _parse(line)
  for node in ast.walk(tree) if tree is not None else ():
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
      n, d = (ast.get_source_segment(text, x) for x in (node.left, node.right))
      new = f"jnp.where({d} != 0, {n} / jnp.where({d} != 0, {d}, 1.0), 0.0)"
      return syntax.indent_of(line) + text.replace(ast.get_source_segment(text, node), new, 1)
  return None


def _parse(line: str | None):
  text = (line or "").strip()
  try:
    return ast.parse(text), text
  except SyntaxError:
    return None, text


def _called(node) -> str | None:
  if isinstance(node, ast.Call):
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
  return None
