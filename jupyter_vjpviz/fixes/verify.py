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
from jax._src import custom_derivatives as cd

from ..capture import records
from ..analysis.diagnosis import Diagnosis
from ..check import check
from ..check import clear_cache as clear_check_cache

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
  namespace = dict(_globals(owner))
  namespace.update(_closure(owner))
  fwd, bwd = _compile(owner, code, namespace, diagnosis.kind)
  return recheck(diagnosis, _clone(owner, fwd, bwd))


def recheck(diagnosis: Diagnosis, cvjp) -> list[Diagnosis]:
  """Differentiate ``cvjp`` abstractly at the failing call's input types."""
  args = _specs(diagnosis.site)
  return check(lambda *a: cvjp(*a), *args, argnums=tuple(range(len(args))))


def _specs(site) -> tuple:
  owner = site.owner()
  if owner.nondiff_argnums:
    raise ValueError(f"{site.function} has nondiff_argnums, whose values the diagnosis "
                     "does not keep: re-run the call to check the fix")
  specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) for a in site.in_avals]
  return jax.tree_util.tree_unflatten(site.in_tree, specs)


def rule_output(diagnosis: Diagnosis):
  """What the bwd rule returns at the failing call, as ShapeDtypeStructs (None leaves kept).

  Runs fwd then bwd under ``eval_shape`` with the hook suspended, so fixes can be
  chosen from the types of every output, not just the one that was reported.
  """
  owner = _owner(diagnosis)
  args = _specs(diagnosis.site)
  box = (lambda a: cd.CustomVJPPrimal(a, True)) if owner.symbolic_zeros else (lambda a: a)

  def run(*args):
    out, res = owner.fwd(*jax.tree_util.tree_map(box, args))
    return owner.bwd(res, jax.tree_util.tree_map(jax.numpy.ones_like, out))
  records.state.suspended += 1
  try:
    return jax.eval_shape(run, *args)
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
  replaced = sorted(_replacements(owner, code, kind), key=lambda r: r[0], reverse=True)
  for start, stop, text in replaced:
    new[start:stop] = text.splitlines(keepends=True)
  return "".join(difflib.unified_diff(old, new, fromfile=path, tofile=path))


def _replacements(owner, code: str, kind: str):
  """(first line index, end index, re-indented text) for each rule in ``code``."""
  rules = {"fwd": owner.fwd, "bwd": owner.bwd}
  code = textwrap.dedent(code)
  for node, role in _roles(owner, _defs(code), kind):
    rule = inspect.unwrap(rules[role])
    if rule.__name__ == "<lambda>":
      raise ValueError("the rule is a lambda inside a line of its file: define the fix with "
                       "def and pass it to defvjp by hand")
    lines, first = inspect.getsourcelines(rule)
    indent = lines[0][:len(lines[0]) - len(lines[0].lstrip())]
    text = textwrap.indent(ast.get_source_segment(code, node, padded=False) + "\n", indent)
    yield first - 1, first - 1 + len(lines), text


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
