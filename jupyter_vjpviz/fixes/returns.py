"""Which return statements of a rule produced the failing cotangent.

A rule with several returns (an if/else on a static flag, an early return) runs
only some of them for a given call, and editing a branch that was already right
would break it. So a copy of the rule reports what each return gives, runs at
the failing call's types under ``eval_shape``, and only the returns whose
element at the failing path has the failing type are edited.
"""
from __future__ import annotations

import ast
import inspect
import itertools

import jax

from . import source, verify

_serial = itertools.count(1)
_REPORT = "__vjpviz_returned__"


def failing_elements(rule) -> list[ast.expr] | None:
  """The element at the failing path in each return that produced it; None if unknown."""
  returns = rule.src.returns()
  if not returns:
    return None
  if len(returns) == 1:
    element = source.element(returns[0].value, rule.keys)
    return [element] if element is not None else None
  got = rule.d.got_aval
  seen = _returned_types(rule) if got is not None else None
  if not seen:
    return None
  hits = [k for k, value in seen.items() if _matches(_at(value, rule.keys), got)]
  elements = [source.element(returns[k].value, rule.keys) for k in hits]
  return elements if elements and None not in elements else None


def _returned_types(rule) -> dict | None:
  """{index of a bwd return statement: the types it returned} for the failing call.

  Nothing the user did not run may run here: the copy is only the body the live
  rule was compiled from (no decorators, annotations or default expressions; the
  live defaults are reused), and a file edited since it was imported is left alone.
  """
  live = inspect.unwrap(rule.owner.bwd)
  tree = ast.parse(rule.src.text)
  copy = source.RuleSource(rule.src.text, tree.body[0])
  _bare(copy.node)
  if not _compiles_to(tree, live):
    return None
  for k, ret in enumerate(copy.returns()):
    ret.value = ast.Call(ast.Name(_REPORT, ast.Load()), [ast.Constant(k), ret.value], [])
  ast.fix_missing_locations(tree)
  seen = {}

  def report(k, value):
    seen[k] = jax.tree_util.tree_map(jax.typeof, value)
    return value
  namespace = verify.namespace(rule.owner)
  namespace[_REPORT] = report
  try:
    exec(compile(tree, f"<vjpviz-returns-{next(_serial)}>", "exec"), namespace)  # noqa: S102
    reporting = namespace[copy.node.name]
    reporting.__defaults__, reporting.__kwdefaults__ = live.__defaults__, live.__kwdefaults__
    verify.run_rules(rule.d.site, rule.owner.fwd, reporting, rule.owner.symbolic_zeros)
  except Exception:  # noqa: BLE001 - a rule that cannot run abstractly: no branch is known
    return None
  return seen


def _bare(node: ast.FunctionDef) -> None:
  """Strip what a ``def`` statement evaluates besides making the function."""
  node.decorator_list = []
  node.returns = None
  args = node.args
  for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
    if arg is not None:
      arg.annotation = None
  args.defaults = []
  args.kw_defaults = [None] * len(args.kwonlyargs)


def _compiles_to(tree: ast.Module, live) -> bool:
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


def _at(tree, keys: list):
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
