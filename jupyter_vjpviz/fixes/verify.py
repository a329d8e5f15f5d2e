"""Check a proposed rule abstractly, and apply it where that is safe.

``verify_fix`` never touches the user's objects: the code runs in a copy of the
rule's globals and is attached to a shallow clone of their ``custom_vjp``, which
``vjpviz.check`` then differentiates on ShapeDtypeStructs (no FLOPs).
``apply_fix`` rebinds notebook-defined rules in place (the cell is the user's
to re-run anyway) but only ever returns a diff for rules living in ``.py``
files: writing the user's files is their call.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import itertools
import linecache
import os
import textwrap

import jax
import numpy as np
from jax._src import custom_derivatives as cd

from ..capture import custom_rules, records
from ..analysis.diagnosis import Diagnosis
from ..capture.records import Weak
from ..lint import check
from ..lint import clear_cache as clear_check_cache
from . import source

_serial = itertools.count(1)


@dataclasses.dataclass(frozen=True)
class Applied:
  """What ``apply_fix`` did: rebound the rule, or produced a diff to apply by hand."""
  applied: bool
  problems: tuple[Diagnosis, ...] = ()   # what verification still found (then nothing applied)
  diff: str | None = None                # for rules defined in a .py file
  path: str | None = None


def verify_fix(diagnosis: Diagnosis, code: str) -> list[Diagnosis]:
  """Diagnoses of the rule with ``code`` substituted; ``[]`` means fixed."""
  owner = _owner(diagnosis)
  fwd, bwd = _compile(owner, code, namespace(owner), diagnosis.kind)
  return recheck(diagnosis, _clone(owner, fwd, bwd))


def namespace(owner) -> dict:
  """A copy of what the rules see (their globals and closures), to run edited code in."""
  found = dict(_globals(owner))
  found.update(_closure(owner))
  return found


def recheck(diagnosis: Diagnosis, cvjp) -> list[Diagnosis]:
  """Differentiate ``cvjp`` abstractly at the failing call's input types."""
  site = diagnosis.site
  specs = _specs(site)
  return check(lambda *a: cvjp(*arguments(site, a)), *specs, argnums=tuple(range(len(specs))))


def _specs(site) -> tuple:
  """The differentiable arguments of the failing call, as ShapeDtypeStructs."""
  specs = [custom_rules.spec(a) for a in site.in_avals]
  return jax.tree_util.tree_unflatten(site.in_tree, specs)


def arguments(site, diff: tuple) -> list:
  """All arguments of the call: ``diff`` with the site's nondiff values put back in place.

  JAX refuses tracers in nondiff positions, so a nondiff array (kept as its
  ShapeDtypeStruct) comes back as host zeros: its type is what a check needs.
  """
  static = dict(site.nondiff)
  rest = iter(diff)
  return [jax.tree_util.tree_map(_placeholder, static[i]) if i in static else next(rest)
          for i in range(len(diff) + len(static))]


def _placeholder(leaf):
  if isinstance(leaf, jax.ShapeDtypeStruct):
    return np.zeros(leaf.shape, leaf.dtype)
  if isinstance(leaf, Weak):
    fn = leaf.get()
    if fn is None:
      raise ValueError("a nondiff argument of the failing call no longer exists; "
                       "re-run the cell to check the fix")
    return fn
  return leaf


def rule_output(diagnosis: Diagnosis):
  """What the bwd rule returns at the failing call, as ShapeDtypeStructs (None leaves kept).

  Runs fwd then bwd under ``eval_shape`` with the hook suspended, so fixes can be
  chosen from the types of every output, not just the one that was reported.
  """
  owner = _owner(diagnosis)
  return run_rules(diagnosis.site, owner.fwd, owner.bwd, owner.symbolic_zeros)


def run_rules(site, fwd, bwd, symbolic_zeros: bool = False):
  """``bwd(fwd(args))`` under ``eval_shape`` at the site's types, the hook suspended."""
  box = (lambda a: cd.CustomVJPPrimal(a, True)) if symbolic_zeros else (lambda a: a)
  nondiff = [i for i, _ in site.nondiff]

  def run(*diff):
    args = arguments(site, jax.tree_util.tree_map(box, diff))
    out, res = fwd(*args)
    return bwd(*[args[i] for i in nondiff], res, jax.tree_util.tree_map(jax.numpy.ones_like, out))
  records.state.suspended += 1
  try:
    return jax.eval_shape(run, *_specs(site))
  finally:
    records.state.suspended -= 1


def apply_fix(diagnosis: Diagnosis, code: str, verify: bool = True) -> Applied:
  """Rebind a notebook rule to ``code`` (after verifying it), or diff a file rule."""
  if verify:
    problems = verify_fix(diagnosis, code)
    if problems:
      return Applied(applied=False, problems=tuple(problems))
  owner = _owner(diagnosis)
  path = inspect.unwrap(owner.bwd).__code__.co_filename
  if not in_notebook(path):
    return Applied(applied=False, diff=file_diff(owner, code, diagnosis.kind), path=path)
  fwd, bwd = _compile(owner, code, _globals(owner), diagnosis.kind)
  flags = dict(symbolic_zeros=owner.symbolic_zeros)
  if owner.with_accums:
    owner.defvjp_with_accums(fwd, bwd, **flags)
  else:
    owner.defvjp(fwd, bwd, optimize_remat=owner.optimize_remat,
                 generic_batching=owner.generic_batching, **flags)
  jax.clear_caches()  # trace caches can otherwise keep running the old rule
  clear_check_cache()  # and vjpviz.check's answers were about the old rule
  return Applied(applied=True, path=path)


def in_notebook(path: str) -> bool:
  """True for IPython cells: pseudo-files, or ipykernel's never-written cell files."""
  return (path.startswith("<") or not path.endswith(".py") or not os.path.isfile(path)
          or os.path.basename(os.path.dirname(path)).startswith("ipykernel_"))


def file_diff(owner, code: str, kind: str = "bwd_type") -> str:
  """A unified diff replacing each rule ``code`` redefines in its source file."""
  path = inspect.unwrap(owner.bwd).__code__.co_filename
  with open(path, encoding="utf-8") as f:
    old = f.readlines()
  new = list(old)
  replaced = sorted(_replacements(owner, code, kind, old), key=lambda r: r[0], reverse=True)
  for start, stop, text in replaced:
    new[start:stop] = text.splitlines(keepends=True)
  return "".join(difflib.unified_diff(old, new, fromfile=path, tofile=path))


def _replacements(owner, code: str, kind: str, lines: list[str]):
  """(first line index, end index, new text) for each rule in ``code``."""
  rules = {"fwd": owner.fwd, "bwd": owner.bwd}
  code = textwrap.dedent(code)
  for node, role in _roles(owner, _defs(code), kind):
    rule = inspect.unwrap(rules[role])
    text = ast.get_source_segment(code, node, padded=False) + "\n"
    if rule.__name__ == "<lambda>":
      yield _lambda_replacement(rule, node.name, text, lines)
      continue
    old, first = inspect.getsourcelines(rule)
    yield first - 1, first - 1 + len(old), textwrap.indent(text, _indent(old[0]))


def _lambda_replacement(rule, name: str, text: str, lines: list[str]):
  """The statement holding the lambda, preceded by the fix's def and naming it instead.

  A lambda has no lines of its own to replace: the def goes right before the
  statement that uses it (``act.defvjp(fwd, lambda r, g: ...)``), at its indentation.
  """
  tree = ast.parse("".join(lines))
  found = source.lambda_node(tree, rule.__code__)
  if found is None:
    raise ValueError(f"cannot tell which lambda on line {rule.__code__.co_firstlineno} of "
                     f"{rule.__code__.co_filename} is the rule: define it with def by hand")
  stmt = max((n for n in ast.walk(tree) if isinstance(n, ast.stmt)
              and (n.lineno, n.col_offset) <= (found.lineno, found.col_offset)
              and (n.end_lineno, n.end_col_offset) >= (found.end_lineno, found.end_col_offset)),
             key=lambda n: (n.lineno, n.col_offset))
  first, last = stmt.lineno - 1, stmt.end_lineno
  old = lines[first:last]
  at = lambda line, col: sum(len(l) for l in old[:line - stmt.lineno]) + col
  joined = "".join(old)
  joined = (joined[:at(found.lineno, found.col_offset)] + name
            + joined[at(found.end_lineno, found.end_col_offset):])
  return first, last, textwrap.indent(text, _indent(old[0])) + joined


def _indent(line: str) -> str:
  return line[:len(line) - len(line.lstrip())]


def _compile(owner, code: str, namespace: dict, kind: str):
  """The (fwd, bwd) pair after running ``code`` in ``namespace``."""
  filename = f"<vjpviz-fix-{next(_serial)}>"
  linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
  exec(compile(code, filename, "exec"), namespace)  # noqa: S102 - the user's own rule
  rules = {"fwd": owner.fwd, "bwd": owner.bwd}
  for node, role in _roles(owner, _defs(code), kind):
    rules[role] = namespace[node.name]
  return rules["fwd"], rules["bwd"]


def _roles(owner, defs: list[ast.FunctionDef], kind: str):
  """(def, "fwd"|"bwd") for each def that replaces a rule; other defs are helpers.

  A def named like a rule replaces it; a lone def of another name (a lambda
  made into a def) replaces the rule the diagnosis is about.
  """
  roles = {_name(owner.fwd): "fwd", _name(owner.bwd): "bwd"}
  alone = "fwd" if kind.startswith("fwd") else "bwd"
  for node in defs:
    role = roles.get(node.name) or (alone if len(defs) == 1 else None)
    if role:
      yield node, role


def _defs(code: str) -> list[ast.FunctionDef]:
  defs = [n for n in ast.parse(textwrap.dedent(code)).body if isinstance(n, ast.FunctionDef)]
  if not defs:
    raise ValueError("a fix must define the rule function(s) with `def`")
  return defs


def _clone(owner, fwd, bwd):
  """A shallow copy of the user's custom_vjp with other rules: theirs is untouched."""
  clone = object.__new__(type(owner))
  clone.__dict__.update(owner.__dict__)
  clone.fwd, clone.bwd = fwd, bwd
  return clone


def _owner(diagnosis: Diagnosis):
  site = diagnosis.site
  owner = site.owner() if site is not None and site.owner is not None else None
  if owner is None:
    raise ValueError(f"{diagnosis.kind} is not about a custom_vjp rule that is still alive; "
                     "only rule fixes can be verified or applied")
  return owner


def _globals(owner) -> dict:
  return inspect.unwrap(owner.bwd).__globals__


def _closure(owner) -> dict:
  """Values the rules close over, so a nested rule's fix can still see them."""
  found = {}
  for rule in (owner.fwd, owner.bwd):
    try:
      found.update(inspect.getclosurevars(inspect.unwrap(rule)).nonlocals)
    except TypeError:
      pass
  return found


def _name(fn) -> str | None:
  return getattr(inspect.unwrap(fn), "__name__", None)
