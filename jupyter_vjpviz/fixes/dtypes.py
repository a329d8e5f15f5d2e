"""Casting a cotangent back to its primal's dtype when bwd cannot see the primal.

bwd only gets the residuals, so the primal's dtype has to travel in them. A
dtype object is not a valid JAX residual; a 0-d zero of that dtype is, and costs
nothing. The fix edits both rules: fwd adds that zero to its residuals, bwd
unpacks it and casts with its ``.dtype``, which stays right for any input dtype
(a literal ``jnp.float32`` is right only for the dtype seen).
"""
from __future__ import annotations

import ast
import inspect

from ..analysis.diagnosis import Fix
from . import exprs, source


def primal_params(rule, fwd: source.RuleSource):
  """(parameter name in fwd, aval) for each differentiable input that is a single array."""
  site = rule.d.site
  if len(site.in_paths) != len(site.in_tree.children()):
    return []
  return list(zip(fwd.params[len(rule.user_rules.nondiff_argnums):], site.in_avals))


def saved_dtype_fix(rule, nodes: list[ast.expr]) -> Fix | None:
  """fwd saves a zero of the primal's dtype; bwd casts each of ``nodes`` with it."""
  want = rule.d.expected_aval
  fwd = source.of_role(rule.user_rules, "fwd")
  ret = fwd.only_return() if fwd is not None and named_defs(rule, fwd) else None
  if ret is None or not (isinstance(ret.value, ast.Tuple) and len(ret.value.elts) == 2):
    return None
  primal = next((p for p, aval in primal_params(rule, fwd) if aval.dtype == want.dtype), None)
  if primal is None:
    return None
  carrier = unused(f"{primal}_zero", rule.src)
  res = ret.value.elts[1]
  new_fwd = fwd.replace([(res, f"({fwd.segment(res)}, {rule.jnp}.zeros((), {primal}.dtype))")])
  res_param = rule.src.params[len(rule.user_rules.nondiff_argnums)]
  edits = [rule.src.prepend(f"{res_param}, {carrier} = {res_param}")]
  edits += [(n, exprs.cast(exprs.uncast(rule.src, n), f"{carrier}.dtype")) for n in nodes]
  return Fix(f"Cast to {primal}'s dtype, saving it in the residuals",
             new_fwd + "\n" + rule.src.replace(edits),
             f"the gradient of {primal} has {primal}'s dtype; bwd cannot see {primal}, so fwd "
             "passes a 0-d zero of that dtype along (a dtype is not a valid residual)",
             exact=True)


def named_defs(rule, fwd: source.RuleSource) -> bool:
  """Both rules are defs, so a fix redefining both can be matched to them by name."""
  names = (inspect.unwrap(rule.user_rules.fwd).__name__, inspect.unwrap(rule.user_rules.bwd).__name__)
  return (fwd.node.name, rule.src.node.name) == names


def unused(name: str, src: source.RuleSource) -> str:
  taken = {n.id for n in ast.walk(src.node) if isinstance(n, ast.Name)} | set(src.params)
  while name in taken:
    name += "_"
  return name
