"""Why an equation's backward rule went non-finite, in one sentence, from its primal values.

Each primitive whose derivative is infinite somewhere says where (``sqrt`` and
``log`` at zero, a division at a zero denominator, a power below one at zero);
a cotangent that was merely large overflowed; and when the culprit's result is
then chosen away by a ``where`` (``select_n``) the sentence says so, since that
is the "double where" trap: the untaken branch gets a zero cotangent, and
``0 * inf`` is NaN.
"""
from __future__ import annotations

from ...base.places import spelled
from ...capture.compat.private import core
from .nonfinite import Culprit, Flow, Summary
from .nonfinite_eval import CALLS
from ..program import rule_call, sub_jaxprs

_AT_ZERO = {"sqrt": "its derivative 1/(2·sqrt(x)) is infinite there",
            "rsqrt": "its derivative -1/(2·x^1.5) is infinite there",
            "log": "its derivative 1/x is infinite there",
            "pow": "a power's derivative is infinite at a zero base",
            "integer_pow": "a negative power's derivative is infinite at zero",
            "cbrt": "its derivative is infinite there"}


def explain(c: Culprit) -> str:
  """One sentence: what the primal values at the culprit were, and why that is non-finite."""
  if c.inner is not None:
    prim, where, operands, loop, _ = c.inner
    at = f" at {spelled(where)}" if where else ""
    return f"its bwd rule's `{prim}`{at} {_values(prim, operands, c.ct_out)}" + (
        f" {loop}" if loop else "")
  if rule_call(c.eqn):
    inside = f"; inside its bwd rule {c.unjudged}" if c.unjudged else ""
    return f"its custom rule turned a finite cotangent into {c.ct_out.bad()}{inside}"
  if c.origin is not None:
    o, bad = c.origin, next(s for s in c.operands if s is not None and not s.finite)
    text = (f"`{c.eqn.primitive.name}` of a value with {bad.bad()}, made by "
            f"`{o.eqn.primitive.name}`{_made_at(o)}, turned a finite cotangent into "
            f"{c.ct_out.bad()}")
  else:
    text = f"`{c.eqn.primitive.name}` {_values(c.eqn.primitive.name, c.operands, c.ct_out, c.ct_in)}"
  if chosen_away(c):
    text += ("; its result is then discarded by a `where` whose untaken branch gets a zero "
             "cotangent, and 0 × ∞ is NaN (the double-where trap)")
  return text + (f" {c.where}" if c.where else "")


def _values(prim: str, operands, ct_out: Flow, ct_in: Summary | None = None) -> str:
  first = operands[0] if operands else None
  if prim in _AT_ZERO and first is not None and first.zero:
    return f"at an input with {_count(first.zero, first.size, 'exact zero')}: {_AT_ZERO[prim]}"
  if prim == "log" and first is not None and first.negative:
    return f"at {_count(first.negative, first.size, 'negative value')}"
  if prim == "div" and len(operands) > 1 and operands[1] is not None and operands[1].zero:
    d = operands[1]
    return f"divides by a denominator with {_count(d.zero, d.size, 'zero')}"
  if ct_in is not None and ct_in.finite and ct_out.inf and not ct_out.nan:
    return (f"overflowed: a finite cotangent (max |ct| {ct_in.max_abs:.3g}) became "
            f"{ct_out.bad()} (the gradient explodes)")
  return f"turned a finite cotangent into {ct_out.bad()}"


def _made_at(o: Culprit) -> str:
  """`` at an input with 3 exact zeros (of 9)``: why ``o``'s result was non-finite."""
  first = o.operands[0] if o.operands else None
  if o.eqn.primitive.name in _AT_ZERO and first is not None and first.zero:
    return f" at an input with {_count(first.zero, first.size, 'exact zero')}"
  if o.eqn.primitive.name == "div" and _singular("div", o.operands):
    return f" from a denominator with {_count(o.operands[1].zero, o.operands[1].size, 'zero')}"
  return ""


def overflowed(c: Culprit) -> bool:
  """Finite cotangents in, only Infs out, at operands where the derivative is finite: the
  magnitudes overflowed (an exploding gradient), nothing was undefined."""
  return (c.inner is None and not rule_call(c.eqn)
          and c.ct_in.finite and bool(c.ct_out.inf) and not c.ct_out.nan
          and not _singular(c.eqn.primitive.name, c.operands))


def _singular(prim: str, operands) -> bool:
  """Whether the operands hit a point where ``prim``'s derivative is infinite."""
  first = operands[0] if operands else None
  second = operands[1] if len(operands) > 1 else None
  return bool((prim in _AT_ZERO and first is not None and first.zero)
              or (prim == "log" and first is not None and first.negative)
              or (prim == "div" and second is not None and second.zero))


def _count(n: int, size: int, what: str) -> str:
  return f"{n} {what}{'s' * (n != 1)} (of {size})"


def chosen_away(c: Culprit) -> bool:
  """Whether the culprit's result reaches a ``where`` (``select_n``, through shape-only
  operations and into the bodies of calls) as a branch, with a zero cotangent where that
  branch was not taken."""
  return bool(c.ct_in.zero) and _reaches_select(c.level, set(c.eqn.outvars))


def _reaches_select(jaxpr, frontier: set) -> bool:
  for eqn in jaxpr.eqns:
    uses = [j for j, v in enumerate(eqn.invars) if isinstance(v, core.Var) and v in frontier]
    if not uses:
      continue
    name = eqn.primitive.name
    if name == "select_n" and uses != [0]:
      return True
    if name in CALLS:
      body = next(sub_jaxprs(eqn))
      if _reaches_select(body, {body.invars[j] for j in uses}):
        return True
    if name in _PASS:
      frontier.update(eqn.outvars)
  return False


_PASS = frozenset({"mul", "broadcast_in_dim", "reshape", "convert_element_type", "neg",
                   "squeeze", "expand_dims", "transpose", "copy"})
