"""Which return statements of a rule produced the failing cotangent, and what was in scope.

A rule with several returns (an if/else on a static flag, an early return) runs
only some of them for a given call, and editing a branch that was already right
would break it. So a copy of the rule reports what each return gives, runs at
the failing call's types under ``eval_shape``, and only the returns whose
element at the failing path has the failing type are edited. The same run
records the types of the rule's locals at each return, which fixes search for
names of the right type (types and Python scalars only: no array is kept).
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import warnings
from typing import Any

import jax
import numpy as np

from ..base import kinds
from . import source, verify

_serial = itertools.count(1)
_REPORT = "__vjpviz_returned__"
_SCALARS = (bool, int, float, complex, str, type(None))


@dataclasses.dataclass(frozen=True)
class Returned:
  """What one return statement gave, and the locals in scope there, as types."""
  value: Any
  scope: dict   # local name -> its types (avals, Python scalars); other values left out


def failing_elements(rule) -> list[ast.expr] | None:
  """The element at the failing path in each return that produced it; None if unknown."""
  returns = rule.src.returns()
  if not returns:
    return None
  if len(returns) == 1:
    element = source.leaf_expression(returns[0].value, rule.keys, rule.src.node, rule.globals)
    return [element] if element is not None else None
  # which return ran is found by running a bwd rule alone: a jvp rule's returns stay unknown
  hits = failing_returns(rule) if kinds.of(rule.d.kind).role == "bwd" else None
  elements = [source.leaf_expression(returns[k].value, rule.keys, rule.src.node, rule.globals) for k in hits or ()]
  return elements if elements and None not in elements else None


def failing_returns(rule, seen: dict | None = None) -> list[int] | None:
  """Indices of the returns whose element at the failing path has the failing type."""
  got = rule.d.got_aval
  seen = returned(rule) if seen is None else seen
  if got is None or not seen:
    return None
  return [k for k, r in seen.items() if _matches(at(r.value, rule.keys), got)]


def returned(rule) -> dict[int, Returned] | None:
  """{index of a bwd return statement: what it returned} for the failing call.

  Nothing the user did not run may run here: the copy is only the body the live
  rule was compiled from (no decorators, annotations or default expressions; the
  live defaults are reused), and a file edited since it was imported is left alone.
  """
  live = inspect.unwrap(rule.user_rules.bwd)
  tree = ast.parse(rule.src.text)
  copy = source.RuleSource(rule.src.text, tree.body[0])
  source.bare(copy.node)
  if not compiles_to(tree, live):
    return None
  for k, ret in enumerate(copy.returns()):
    scope = ast.Call(ast.Name("locals", ast.Load()), [], [])
    ret.value = ast.Call(ast.Name(_REPORT, ast.Load()), [ast.Constant(k), ret.value, scope], [])
  ast.fix_missing_locations(tree)
  seen = {}

  def report(k, value, scope):
    seen[k] = Returned(jax.tree_util.tree_map(jax.typeof, value), _types(scope))
    return value
  namespace = verify.namespace(rule.user_rules)
  namespace[_REPORT] = report
  try:
    exec(compile(tree, f"<vjpviz-returns-{next(_serial)}>", "exec"), namespace)  # noqa: S102
    reporting = namespace[copy.node.name]
    reporting.__defaults__, reporting.__kwdefaults__ = live.__defaults__, live.__kwdefaults__
    verify.run_rules(rule.d.site, rule.user_rules.fwd, reporting, rule.user_rules.symbolic_zeros)
  except Exception:  # noqa: BLE001 - a rule that cannot run abstractly: no branch is known
    # unless the rule returned and a library's check of its return raised (equinox's tree)
    return seen if seen and _behind_a_library(rule.user_rules) else None
  return seen


def _behind_a_library(user_rules) -> bool:
  """The user's bwd runs inside a library's (``library_wrappers.UserRules.paths``)."""
  paths = getattr(user_rules, "paths", None)
  return isinstance(paths, dict) and bool(paths.get("bwd"))


def _types(scope: dict) -> dict:
  """Each local whose leaves are all arrays or Python scalars, arrays as their avals."""
  found = {}
  for name, value in scope.items():
    leaves = jax.tree_util.tree_leaves(value)
    if all(isinstance(l, (jax.Array, np.ndarray, *_SCALARS)) for l in leaves):
      found[name] = jax.tree_util.tree_map(
          lambda l: l if isinstance(l, _SCALARS) else jax.typeof(l), value)
  return found


def compiles_to(tree: ast.Module, live) -> bool:
  """Whether this text is what the live rule was compiled from (same names and constants).

  Compiled on its own, the rule's free variables read as globals, so both sides
  are compared as the set of every name they read.
  """
  try:
    code = next(c for c in compile(tree, "<vjpviz-check>", "exec").co_consts
                if inspect.iscode(c))
    mine, theirs = code, live.__code__
  except (StopIteration, AttributeError, SyntaxError, ValueError):
    return False
  names = lambda c: set(c.co_names) | set(c.co_freevars)
  consts = lambda c: [x for x in c.co_consts if not inspect.iscode(x)]
  return (mine.co_varnames == theirs.co_varnames and names(mine) == names(theirs)
          and consts(mine) == consts(theirs))


def at(tree, keys: list):
  """The subtree of ``tree`` at a path's keys, or None. Reading it must not warn: flax
  nnx's ``Variable.value``, the key its flattening names, is deprecated to its users."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    for key in keys:
      try:
        tree = getattr(tree, key) if isinstance(key, str) and not isinstance(tree, dict) \
            else tree[key]
      except (KeyError, IndexError, TypeError, AttributeError):
        return None
  return tree


def _matches(aval, got) -> bool:
  return aval is not None and hasattr(aval, "shape") \
      and (tuple(aval.shape), aval.dtype) == (tuple(got.shape), got.dtype)
