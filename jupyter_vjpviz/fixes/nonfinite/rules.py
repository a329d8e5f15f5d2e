"""A custom rule whose backward went non-finite: JAX's own derivative of its primal."""
from __future__ import annotations

from ...analysis.program import rule_call
from ...analysis.values.nonfinite import Culprit
from ...analysis.values.nonfinite_eval import evaluate
from ...capture.naming import function_names
from .candidate import Candidate

PRIMITIVES = frozenset({"custom_vjp_call", "custom_jvp_call"})


def propose(c: Culprit, p) -> list[Candidate]:
  if not rule_call(c.eqn):
    return []
  function = function_names.function_of(c.eqn.params.get("call_jaxpr"))[0] or "the primal"

  def fn(eqn, ins, producer):
    return evaluate(eqn.params["call_jaxpr"], ins)
  code = (f"# in {function}'s bwd rule, the cotangent JAX's own autodiff gives (.fun: the\n"
          f"# primal without its rule, which would call this bwd again):\n"
          f"_, pull = jax.vjp({function}.fun, *primal_inputs)   # fwd saves them as residuals\n"
          "return pull(g)")
  return [Candidate(f"Differentiate {function} with JAX instead of its custom rule", code,
                    "JAX's derivative of the primal, where it is finite", fn)]
