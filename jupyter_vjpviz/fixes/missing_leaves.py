"""The leaves a library rule's return lacks, computed by differentiating the primal there.

A library that wraps the user's rules (equinox's ``filter_custom_vjp``) hands the user's
bwd the primal's own arguments after its own (``residuals, grad_obj, perturbed, vjp_arg,
*args``) and checks the tree it returns against the first of them itself. A key missing
from a dict the rule returns is then added in the rule's own terms, its value read off
``jax.vjp`` of the user's primal (reached as the rule's globals name it: ``affine.fn``)
at those arguments (first in the body, before anything rebinds them), the leaf at the
user's own keys::

    _, pullback = jax.vjp(lambda inputs: affine.fn(inputs, scale), inputs)
    dinputs, = pullback(g)
    return {"w": x.T @ g, 'b': dinputs[0]['b']}, g @ w.T

Nothing here knows a library: the primal's parameters are the bwd's last ones, its
cotangent parameter the second, and what returns is the first argument's cotangent
tree; a wrong reading of them is a candidate the oracle rejects like any other.
"""
from __future__ import annotations

import ast
import inspect

import jax

from ..analysis.diagnosis import Fix
from ..capture.naming import library_wrappers
from ..capture.naming.leaf_paths import MISSING
from . import dtypes, source, verify


def fixes(rule) -> list[Fix]:
  d, user_rules = rule.d, rule.user_rules
  paths = getattr(user_rules, "paths", None)
  ret = rule.src.only_return()
  if not isinstance(paths, dict) or not paths.get("bwd") or ret is None:
    return []
  primal_params = _positional(user_rules.fun)
  ns = verify.namespace(user_rules)
  primal = library_wrappers.spelled(user_rules.custom_vjp.fun, paths.get("fun") or (), ns)
  params = rule.src.params
  if primal is None or not primal_params or len(params) < len(primal_params) + 2:
    return []
  edits = _added(rule, ret, d)
  if not edits:
    return []
  args = params[len(params) - len(primal_params):]
  grads = dtypes.unused(f"d{args[0]}", rule.src)
  pullback = dtypes.unused("pullback", rule.src)
  jax_name = next((k for k, v in ns.items() if v is jax), None)
  call = primal if len(args) == 1 else \
      f"lambda {args[0]}: {primal}({', '.join(args)})"
  lines = ([] if jax_name else ["import jax"]) + [
      f"_, {pullback} = {jax_name or 'jax'}.vjp({call}, {args[0]})",
      f"{grads}, = {pullback}({params[1]})"]
  keys = [k for _, k, _ in edits]
  items = {}
  for parent, key, held in edits:
    items.setdefault(id(parent), (parent, held, []))[2].append(
        f"{key[-1]!r}: {grads}{''.join(f'[{k!r}]' for k in key)}")
  new = [(parent, "{" + ", ".join(held + added) + "}") for parent, held, added in items.values()]
  names = ", ".join(repr(k[-1]) for k in keys)
  return [Fix(f"Add the missing {'key' if len(keys) == 1 else 'keys'} {names} by "
              f"differentiating {d.function}",
              rule.src.replace([rule.src.before(rule.src.first_statement, lines)] + new),
              f"jax.vjp of {primal} at the rule's own arguments gives every leaf of "
              f"{args[0]}'s gradient; costs one extra forward pass of {d.function} in the "
              "backward pass", exact=True)]


def _positional(fun) -> list[str]:
  """The primal's parameters, where it takes positional ones only."""
  try:
    params = list(inspect.signature(inspect.unwrap(fun)).parameters.values())
  except (TypeError, ValueError):
    return []
  if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
    return []
  return [p.name for p in params]


def _added(rule, ret: ast.Return, d) -> list[tuple]:
  """(dict literal, the user's keys of a leaf it lacks, its present items) for each leaf
  missing from the rule's return, at a dict literal the return holds (or a local it returns
  that is one)."""
  head = verify.returned_head(d, rule.keys)
  if head is None:
    return []
  found = []
  for leaf in d.leaves:
    if leaf.got != MISSING:
      continue
    keys = [k.key for k in leaf.path][len(head):]
    parent = source.literal_at(ret.value, keys[:-1], rule.src.node) if keys else None
    if not isinstance(parent, ast.Dict) or None in parent.keys or not isinstance(keys[-1], str):
      return []
    held = [f"{rule.src.segment(k)}: {rule.src.segment(v)}" for k, v in zip(parent.keys, parent.values)]
    found.append((parent, keys, held))
  return found
