"""Fixes for a gradient that goes NaN or Inf, each checked by re-running the gradient.

Only rewrites known to be right are proposed: the double-``where`` guard (the
operand replaced by a safe value where the result is not used), a safe norm,
clamping before ``log``, ``log_softmax`` for the log of a softmax, JAX's own
derivative of a custom rule's primal, and for cotangents that overflow (an
exploding gradient whose true value is finite) scaling the loss by a power of
two: the backward pass is linear in its output cotangent and a power of two
scales exactly, so dividing the gradient by it gives the same values, in range.
Each is applied to the forward program at the culprit equation (``nonfinite_eval.Patch``)
and the whole gradient is computed again: a candidate goes on when that gradient is finite
and equal to the original wherever the original was finite. A rewrite of the user's line
is then verified as written (``fixes.pasted``): the function with the line replaced by the
fix's code keeps the forward values, has a finite gradient, and that gradient equals
float64 central differences of the original. One that changes the model is offered as
type-only, saying what it breaks; one that cannot be pasted or judged, as unverifiable.
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
from ..analysis.values import nonfinite, oracle, replay
from ..analysis.diagnosis import TYPE_ONLY, UNVERIFIABLE, VERIFIED, Fix
from ..analysis.locate import source_line
from ..base import syntax
from ..analysis.values.nonfinite import Culprit, Localisation
from ..analysis.values.nonfinite_eval import Patch, evaluate
from ..analysis.values.nonfinite_explain import chosen_away, overflowed
from ..analysis.program import rule_call
from ..capture.naming import function_names
from . import pasted

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
  call: tuple | None = None           # (fun, args, kwargs, where the gradient was finite)


@dataclasses.dataclass(frozen=True)
class _Candidate:
  title: str
  code: str
  reason: str
  fn: Callable | None = None   # (eqn, operands, producer) -> outputs, at the culprit
  scale: float = 1.0           # of the output cotangent; the gradient divided by it
  in_place: bool = False       # a rewrite of the user's line: judged as written there
  template: bool = False       # the line could not be rewritten: the code is a pattern


def gradient(p: Program, patch: Patch | None = None) -> list:
  """The gradient of ``p`` w.r.t. its active inputs, with ``patch`` applied, by the search's
  own backward pass (eager: the pullbacks it traced are reused, and a patched program is
  not compiled whole for one use)."""
  return nonfinite.gradient(p.jaxpr, p.args, p.active, p.out_cts, patch)


def suggest(c: Culprit, p: Program, original: list) -> list[Fix]:
  """The first candidate for ``c`` (or for the equation that made its non-finite
  operand) that makes the gradient finite and keeps it where it was: each one judged
  costs a whole backward pass, so the rest are not tried. Judging is vjpviz's own run
  of the rewritten program (``analysis.values.replay``: within the call's account, loops
  capped, no effect repeated); a candidate it could not judge is offered unverifiable,
  its note saying why."""
  c = c.origin or c
  unjudged = []
  with replay.account():
    for cand in candidates(c, p):
      try:
        verdict = _judge(cand, c, p, original)
        broken = verdict and cand.in_place and _as_written(cand, c, p)
      except (replay.NotJudged, pasted.Unpastable) as e:
        unjudged.append(Fix(cand.title, cand.code, cand.reason, exact=False,
                            verdict=UNVERIFIABLE, note=str(e)))
        if str(e) == replay.TIME_BUDGET:
          break
        continue
      if broken:
        unjudged.append(Fix(cand.title, cand.code, cand.reason, exact=False,
                            verdict=TYPE_ONLY, note=f"the gradient is finite, but {broken}"))
      elif verdict is not None:
        note = (AS_WRITTEN if cand.in_place else verdict)
        return [Fix(cand.title, cand.code, cand.reason, exact=True, verdict=VERIFIED,
                    note=note)]
  return unjudged


AS_WRITTEN = ("pasted at the line: the forward values are kept, the gradient is finite and "
              "equals central differences of the original (float64 where it runs so)")


def _as_written(cand: _Candidate, c: Culprit, p: Program) -> str | None:
  """What the fix's code, pasted at the culprit's line, breaks (None: nothing)."""
  if cand.template:
    raise pasted.Unpastable("the line could not be read and rewritten: the code is a pattern "
                            "to adapt, not a line to paste")
  if p.call is None:
    raise pasted.Unpastable("the differentiated call is not known")
  fun, args, kwargs, finite = p.call
  try:
    fixed = pasted.pasted(fun, c.source, cand.code, args)
    return pasted.judge(fun, fixed, args, kwargs, p.argnums, finite)
  except (replay.NotJudged, pasted.Unpastable):
    raise
  except Exception as e:  # noqa: BLE001 - the program with the line replaced does not run
    raise pasted.Unpastable(f"with its code in place of the line, the program raised "
                            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e


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
    return found + [_clamp(c, line)]
  if name == "div":
    return [_guard_div(line)]
  return []


def _guard(c: Culprit, line: str | None, name: str, norm: bool) -> _Candidate:
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
  if norm and _rewrite(line, ("norm",), str):
    return _in_place("Use a safe norm (zero, with a zero gradient, at a zero vector)",
                     _rewrite(line, ("norm",), lambda a: f"safe_norm({a})"), "safe_norm(x)",
                     "the norm's sqrt is evaluated at 1 where the sum of squares is 0, and "
                     "its result replaced by 0 there", fn, helper=_SAFE_NORM)
  return _in_place(f"Guard {name} with a double where",
                   _rewrite(line, (name,), make) or _rewrite_std(line, make), make("x"),
                   f"{name} never sees the zeros, so its derivative is finite where the "
                   "outer where discards its result", fn)


def _in_place(title: str, rewritten: str | None, template: str, reason: str, fn,
              helper: str = "") -> _Candidate:
  """A rewrite of the user's line (``rewritten``: None where the line could not be read
  and rewritten, and ``template`` is shown, unverifiable: it cannot be pasted as it is)."""
  if rewritten is None:
    return _Candidate(title, template, reason, fn, in_place=True, template=True)
  return _Candidate(title, helper + rewritten, reason, fn, in_place=True)


_SAFE_NORM = ("# beside your function:\n"
              "def safe_norm(x, axis=None, keepdims=False):\n"
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
    return None
  return _in_place("Use jnp.abs(x) instead of sqrt(x**2)", _rewrite(line, ("sqrt",), make),
                   "jnp.abs(x)  # for jnp.sqrt(x ** 2)",
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
  return _in_place(f"Add a small epsilon inside {name}",
                   _rewrite(line, (name,), lambda a: f"jnp.{name}({a} + 1e-12)"),
                   f"jnp.{name}(x + 1e-12)",
                   "shifts the value by at most 1e-6; the derivative at 0 becomes finite", fn)


def _clamp(c: Culprit, line: str | None) -> _Candidate:
  """log of at least the operand dtype's smallest normal (float16's is 6.1e-05: 1e-30
  there is 0 again) or ``TINY``."""
  floor = max(TINY, float(jnp.finfo(c.eqn.invars[0].aval.dtype).tiny))

  def fn(eqn, ins, producer):
    return [jnp.log(jnp.maximum(ins[0], floor))]
  return _in_place("Clamp before log",
                   _rewrite(line, ("log",), lambda a: f"jnp.log(jnp.maximum({a}, {floor:.2g}))"),
                   f"jnp.log(jnp.maximum(x, {floor:.2g}))",
                   "log never sees 0; its gradient is 0 where the input was clamped", fn)


def _log_softmax(c: Culprit, line: str | None) -> _Candidate:
  """``log(softmax(z))`` as ``log_softmax(z)``: of the softmax's own arguments, on the line
  or where the user kept the probabilities in a variable (``probs = softmax(z)``)."""
  axes = _softmax_axes(c)

  def fn(eqn, ins, producer):
    made, (z, *_) = producer(eqn.invars[0])
    if made.primitive.name == "div":   # a softmax written out, not a call
      _, (z,) = producer(made.invars[0])
    return [jax.nn.log_softmax(z, axis=axes)]

  def make(arg):
    softmax = _softmax_call(arg) or _softmax_call(_assigned_above(c.source, arg))
    return softmax and f"jax.nn.log_softmax({softmax})"
  return _in_place("Use log_softmax instead of log(softmax(...))", _rewrite(line, ("log",), make),
                   f"jax.nn.log_softmax(logits, axis={axes})  # of the softmax's logits",
                   "the same values computed in log space: nothing underflows to 0", fn)


def _softmax_call(text: str | None) -> str | None:
  """The arguments, as written, of ``text`` when it is a call of a ``softmax``."""
  tree, text = _parse(text)
  node = tree.body[0].value if tree is not None and tree.body and isinstance(
      tree.body[0], ast.Expr) else None
  if isinstance(node, ast.Call) and _called(node) == "softmax":
    return ", ".join(ast.get_source_segment(text, a) for a in (*node.args, *node.keywords))
  return None


def _assigned_above(source: str | None, name: str) -> str | None:
  """The expression last assigned to the variable ``name`` above ``source``'s line, in the
  same function (lines read back to its ``def``)."""
  where = source_line(source)
  if where is None or not name.isidentifier():
    return None
  file, line = where
  for n in range(line - 1, max(0, line - 200), -1):
    tree, text = _parse(linecache.getline(file, n))
    stmt = tree.body[0] if tree is not None and tree.body else None
    if isinstance(stmt, ast.Assign) and [getattr(t, "id", None) for t in stmt.targets] == [name]:
      return ast.get_source_segment(text, stmt.value)
    if linecache.getline(file, n).lstrip().startswith("def "):
      return None
  return None


def _guard_div(line: str | None) -> _Candidate:
  def fn(eqn, ins, producer):
    n, d = ins
    ok = d != 0
    return [jnp.where(ok, n / jnp.where(ok, d, 1.0), 0.0)]
  return _in_place("Guard the division with a double where", _rewrite_div(line),
                   "jnp.where(d != 0, n / jnp.where(d != 0, d, 1.0), 0.0)",
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
  while den is not None and den.primitive.name in _SHAPE:
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
      new = make(args)
      return new and syntax.indent_of(line) + text.replace(ast.get_source_segment(text, node), new, 1)
  return None


_MODULES = frozenset({"jnp", "np", "numpy"})


def _rewrite_std(line: str | None, make) -> str | None:
  """``line``'s ``std`` (``h.std(0)``, ``jnp.std(h, 0)``) as its ``var`` on a line of its
  own, and ``make(that variable)`` in the std's place: the square root is the user's to see."""
  tree, text = _parse(line)
  for node in ast.walk(tree) if tree is not None else ():
    if isinstance(node, ast.Call) and _called(node) == "std" and isinstance(node.func, ast.Attribute):
      owner = node.func.value
      method = not (isinstance(owner, ast.Name) and owner.id in _MODULES)
      args = ([owner] if method else []) + [*node.args, *node.keywords]
      if not args:
        return None
      taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
      var = "var" if "var" not in taken else next(f"var{i}" for i in range(2, 99) if f"var{i}" not in taken)
      spelled = ", ".join(ast.get_source_segment(text, a) for a in args)
      indent = syntax.indent_of(line)
      return (f"{indent}{var} = jnp.var({spelled})\n"
              + indent + text.replace(ast.get_source_segment(text, node), make(var), 1))
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
  """The line's code (its comment dropped: a rewrite makes it about the old code), parsed."""
  line = line or ""
  at = syntax.comment_at(line)
  text = (line[:at] if at is not None else line).strip()
  try:
    return ast.parse(text), text
  except SyntaxError:
    return None, text


def _called(node) -> str | None:
  if isinstance(node, ast.Call):
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
  return None
