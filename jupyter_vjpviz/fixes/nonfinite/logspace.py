"""A ``log`` of something hand-written that over- or underflows, computed in log space by
JAX's own stable function of the expression it was written from: ``log(1 + exp(x))`` and
``log1p(exp(x))`` as ``softplus``, ``log(sum(exp(x)))`` as ``logsumexp``, ``log(exp(a) +
exp(b))`` as ``logaddexp``, ``log(sigmoid(z))`` and ``log(1 - sigmoid(z))`` as
``log_sigmoid``, ``log(1 - exp(x))`` as ``log(-expm1(x))``, ``log(cosh(x))`` by
``logaddexp``. The expression is followed back through the user's variables (``t =
jnp.exp(z)`` above ``jnp.log(1 + t)``); the rewrite goes at the line of the ``log``, which
may be downstream of the line that went non-finite (the ``exp`` that overflowed)."""
from __future__ import annotations

import ast

from ...analysis.values.nonfinite import Culprit
from . import lines, reach
from .candidate import Candidate, in_place

PRIMITIVES = frozenset({"exp", "expm1", "log", "log1p", "logistic", "cosh"})
_STARTS = PRIMITIVES | {"exp2", "div", "sub", "add", "reduce_sum"}


def propose(c: Culprit, p) -> list[Candidate]:
  if c.eqn.primitive.name not in _STARTS:
    return []
  found = []
  for source in reach.lines(c):
    used: list[str] = []
    code = lines.rewrite_nodes(source, lambda e, resolve: _stable(e, resolve, used))
    if code:
      names = ", ".join(dict.fromkeys(used))
      found.append(in_place(f"Compute it in log space with {names}", code, code,
                            "the same values, computed without forming the exponential or "
                            "the probability that over- or underflows", at=source))
  return found


def _stable(e: lines.Expr, resolve, used: list) -> str | None:
  """The stable spelling of ``e`` when it is a log of one of the module's shapes."""
  node = e.node
  name = lines.called(node)
  if name not in ("log", "log1p") or len(node.args) != 1 or node.keywords:
    return None
  arg = resolve(e.sub(node.args[0]))
  new = (_log1p_of(arg, resolve) if name == "log1p" else _log_of(arg, resolve))
  if new:
    used.append(new.partition("(")[0])
  return new


def _log1p_of(arg: lines.Expr, resolve) -> str | None:
  if (x := _call_arg(arg, resolve, "exp")) is not None:
    return f"jax.nn.softplus({x.seg})"
  if isinstance(arg.node, ast.UnaryOp) and isinstance(arg.node.op, ast.USub):
    if (x := _call_arg(arg.sub(arg.node.operand), resolve, "sigmoid")) is not None:
      return f"jax.nn.log_sigmoid(-{x.wrapped})"
  return None


def _log_of(arg: lines.Expr, resolve) -> str | None:
  node = arg.node
  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
    left, right = resolve(arg.sub(node.left)), resolve(arg.sub(node.right))
    for one, other in ((left, right), (right, left)):
      if _is_one(one) and (x := _call_arg(other, resolve, "exp")) is not None:
        return f"jax.nn.softplus({x.seg})"
    a, b = _call_arg(left, resolve, "exp"), _call_arg(right, resolve, "exp")
    if a is not None and b is not None:
      return f"jnp.logaddexp({a.seg}, {b.seg})"
  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and _is_one(arg.sub(node.left)):
    right = resolve(arg.sub(node.right))
    if (x := _call_arg(right, resolve, "sigmoid")) is not None:
      return f"jax.nn.log_sigmoid(-{x.wrapped})"
    if (x := _call_arg(right, resolve, "exp")) is not None:
      return f"jnp.log(-jnp.expm1({x.seg}))"
  if (x := _call_arg(arg, resolve, "sigmoid")) is not None:
    return f"jax.nn.log_sigmoid({x.seg})"
  if (x := _call_arg(arg, resolve, "cosh")) is not None:
    return f"(jnp.logaddexp({x.seg}, -{x.wrapped}) - jnp.log(2.0))"
  return _logsumexp(arg, resolve)


def _logsumexp(arg: lines.Expr, resolve) -> str | None:
  """``log(jnp.sum(exp(x), axis))`` or ``log(exp(x).sum(axis))`` as ``logsumexp(x, axis)``."""
  node = arg.node
  if not isinstance(node, ast.Call) or lines.called(node) != "sum":
    return None
  f = node.func
  method = isinstance(f, ast.Attribute) and not (isinstance(f.value, ast.Name)
                                                 and f.value.id in ("jnp", "np", "numpy"))
  summed = arg.sub(f.value) if method else (arg.sub(node.args[0]) if node.args else None)
  rest = [*node.args[0 if method else 1:], *node.keywords]
  x = summed and _call_arg(resolve(summed), resolve, "exp")
  if x is None:
    return None
  extra = "".join(", " + ast.get_source_segment(arg.text, r) for r in rest)
  return f"jax.nn.logsumexp({x.seg}{extra})"


def _call_arg(e: lines.Expr, resolve, name: str) -> lines.Expr | None:
  """The one argument of ``e`` (followed back through variables) when it calls ``name``."""
  e = resolve(e)
  node = e.node
  if isinstance(node, ast.Call) and lines.called(node) == name and len(node.args) == 1 \
      and not node.keywords:
    return e.sub(node.args[0])
  return None


def _is_one(e: lines.Expr) -> bool:
  return isinstance(e.node, ast.Constant) and e.node.value in (1, 1.0)
