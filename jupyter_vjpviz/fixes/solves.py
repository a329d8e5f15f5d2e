"""Fixes for a ``custom_linear_solve`` solve that returned the wrong type (``solve_type``,
``solve_dtype``), judged by the linear system it is meant to solve.

The candidates rewrite the solve's returned expression as the two types justify (the
shape rewrites of ``exprs``, a cast removed or added), in the user's own ``def``. Each is
run at random right-hand sides of ``b``'s type, handed the linear map as its matrix, and
compared with the system's solution in float64: ``matvec``'s matrix, materialised by
``jax.jacfwd`` where the solve failed (``capture.sites.linear_maps``; its transpose for
``transpose_solve``). A candidate of the wrong type is dropped; one whose values differ is
type-only; where there is no matrix (a matvec of traced values, too many unknowns) or it
is singular, a well-typed fix is unverifiable.
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import textwrap

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from ..analysis.values import oracle
from ..analysis.diagnosis import TYPE_ONLY, UNVERIFIABLE, VERDICT_ORDER, VERIFIED, Diagnosis, Fix
from ..capture import records
from ..capture.compat.private import core
from . import exprs, source

TRIALS = 3          # random right-hand sides


def suggestions(d: Diagnosis) -> list[Fix]:
  """The rewrites of the solve's failing return, best verdict first."""
  solver, want, got = d.solver, d.expected_aval, d.got_aval
  solve = solver.solve.get() if solver is not None else None
  src = source.of(solve) if solve is not None else None
  if src is None or want is None or got is None:
    return []
  namespace = _namespace(solve)
  nodes = _failing_elements(src, d, namespace)
  if not nodes:
    return []
  judge = _Judge(solver)
  dtype = _dtype_text(src, solver, want.dtype, namespace) if got.dtype != want.dtype else None
  fixes = [judge(_fix(src, nodes, *c), namespace, src.node.name)
           for c in _rewrites(src, nodes, want, got, dtype)]
  return sorted((f for f in fixes if f is not None), key=lambda f: VERDICT_ORDER[f.verdict])


def _failing_elements(src, d: Diagnosis, namespace: dict) -> list[ast.expr]:
  """The element at the failing leaf in each return (``b`` itself, or a leaf of it)."""
  keys = source.path_keys(d.path.removeprefix("b") if d.path else "")
  found = [source.leaf_expression(r.value, keys, src.node, namespace) for r in src.returns()]
  return found if found and None not in found else []


def _dtype_text(src, solver, dtype, namespace: dict) -> str:
  """``b.dtype`` where the solve's ``b`` is one array (right for any dtype it is called
  at), else the literal dtype as the solve's module spells jax.numpy."""
  if len(src.params) == 2 and len(solver.b_avals) == 1:
    return f"{src.params[1]}.dtype"
  jnp = next((k for k, v in namespace.items() if v is jax.numpy), "jax.numpy")
  return f"{jnp}.{dtype}"


def _rewrites(src, nodes, want, got, dtype: str | None):
  """(title, text per node, reason): each rewrite the types justify, cast where due, and
  a cast the solve applied removed where that alone gives b's type."""
  why = f"the solution has b's dtype, {want.dtype}"
  per_node = []
  for node in nodes:
    uncast = exprs.uncast(src, node)
    removed = [("remove the cast", uncast, f"the solution has b's type, {want.str_short()}")] \
        if got.shape == want.shape and uncast != src.segment(node) else []
    per_node.append(removed + exprs.typed_rewrites(src, node, want, got, dtype, why))
  yield from exprs.common(per_node)


def _fix(src, nodes, title, texts, reason) -> Fix:
  return Fix(title, src.replace(list(zip(nodes, texts))), reason)


class _Judge:
  """The linear system's solution at a few random right-hand sides, or why there is none."""

  def __init__(self, solver):
    self.solver, self.why = solver, solver.why or "the linear map's matrix was not kept"
    example = jax.tree_util.tree_unflatten(solver.b_tree, [
        np.zeros(a.shape, a.dtype) for a in solver.b_avals])
    flat, self.unravel = ravel_pytree(example)
    self.bs, self.solutions, matrix = [], [], solver.matrix
    if matrix is not None and np.linalg.matrix_rank(matrix) < matrix.shape[0]:
      self.why, matrix = "the linear map's matrix is singular: no one solution to compare", None
    if matrix is not None:
      rng = np.random.default_rng(0)
      rhs = [rng.standard_normal(flat.shape) for _ in range(TRIALS)]
      self.bs = [self.unravel(b.astype(flat.dtype)) for b in rhs]
      self.solutions = [np.linalg.solve(np.asarray(matrix, np.float64), b) for b in rhs]
    self.operator = self._dense(matrix) if matrix is not None else self._unknown

  def _dense(self, matrix):
    """The linear map as its matrix: what the fixed solve is handed as ``matvec``."""
    matrix = np.asarray(matrix)
    return lambda x: self.unravel(matrix @ ravel_pytree(x)[0])

  def _unknown(self, x):
    return x   # only typed: the map's values are not known

  def __call__(self, fix: Fix, namespace: dict, name: str) -> Fix | None:
    """``fix`` judged: None if it is of the wrong type or cannot run."""
    verdict, note = self.judge(fix.code, namespace, name)
    if verdict is None:
      return None
    if verdict == TYPE_ONLY:
      fix = Fix(f"{fix.title} (type-only: {note})", fix.code, fix.reason)
    return _judged(fix, verdict, note)

  def judge(self, code: str, namespace: dict, name: str) -> tuple[str | None, str]:
    """(VERIFIED, TYPE_ONLY or UNVERIFIABLE, and why) for the solve ``name`` that ``code``
    defines; (None, what is wrong) where it does not run or returns another type than b's."""
    try:
      fixed = _compiled(code, namespace, name)
      with _hook_aside():
        outs = [fixed(self.operator, b) for b in self.bs] if self.bs else \
            [jax.eval_shape(lambda b: fixed(self.operator, b), _abstract_b(self.solver))]
    except Exception as e:  # noqa: BLE001 - a candidate that does not run is no fix
      return None, f"it raised {type(e).__name__}: {e}"[:300]
    wrong = next((out for out in outs if _types(out) != _types_of(self.solver)), None)
    if wrong is not None:
      return None, f"it returns {_type_text(wrong)}, not b's type {_type_text(_abstract_b(self.solver))}"
    if not self.bs:
      return UNVERIFIABLE, self.why
    errors = [np.max(np.abs(np.asarray(ravel_pytree(out)[0], np.float64) - x))
              / max(np.max(np.abs(x)), 1e-30) for out, x in zip(outs, self.solutions)]
    rtol = oracle.RTOL.get(str(self.solver.b_avals[0].dtype), 1e-4)
    if max(errors) <= rtol:
      return VERIFIED, ("equal to the linear system's solution (matvec's matrix solved at "
                        f"{TRIALS} random right-hand sides)")
    return TYPE_ONLY, ("its values differ from the linear system's solution (relative error "
                       f"{max(errors):.2g})")


def judged_edit(d: Diagnosis, code: str) -> tuple[str | None, str]:
  """The user's edited solve (``code``, a ``def`` of the solve's name) judged as the
  candidates are: ``_Judge.judge``'s (verdict, why)."""
  solve, name = _solve_of(d)
  return _Judge(d.solver).judge(code, _namespace(solve), name)


def applied_edit(d: Diagnosis, code: str) -> tuple[bool, str | None, str]:
  """``code`` put in place of the solve: rebound in its notebook's namespace (the solver
  looks its solve up there when the cell runs again), or, for a solve in a ``.py`` file,
  a unified diff to apply by hand. (rebound, patch, path)."""
  solve, name = _solve_of(d)
  path = solve.__code__.co_filename
  if not source.in_notebook(path):
    text = textwrap.dedent(code).strip("\n") + "\n"
    return False, source.file_diff(path, [source.replacing_def(solve, text)]), path
  solve.__globals__[name] = _compiled(code, solve.__globals__, name, scope=solve.__globals__)
  jax.clear_caches()   # traces of the old solve are not run again
  return True, None, path


def _solve_of(d: Diagnosis):
  """The live solve function of ``d`` and its name; ValueError where it is gone."""
  solve = d.solver.solve.get() if d.solver is not None else None
  if solve is None:
    raise ValueError(f"{d.rule or 'the solve'} is no longer alive, or was not handed to "
                     "custom_linear_solve: only custom_linear_solve's solves are verified")
  solve = inspect.unwrap(solve)
  return solve, solve.__name__


def _type_text(tree) -> str:
  """Its leaves' types as diagnoses write them (``float32[3,1]``)."""
  texts = [core.ShapedArray(np.shape(l), np.dtype(l.dtype)).str_short()
           for l in jax.tree_util.tree_leaves(tree)]
  return texts[0] if len(texts) == 1 else f"({', '.join(texts)})"


def _judged(fix: Fix, verdict: str, note: str) -> Fix:
  return Fix(fix.title, fix.code, fix.reason, verdict == VERIFIED, verdict, note)


def _abstract_b(solver):
  return jax.tree_util.tree_unflatten(solver.b_tree, [
      jax.ShapeDtypeStruct(a.shape, a.dtype) for a in solver.b_avals])


def _types(tree):
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  return treedef, tuple((tuple(np.shape(l)), np.dtype(l.dtype)) for l in leaves)


def _types_of(solver):
  return solver.b_tree, tuple((tuple(a.shape), np.dtype(a.dtype)) for a in solver.b_avals)


def _compiled(code: str, namespace: dict, name: str, scope: dict | None = None):
  """The fixed ``def``, decorators dropped, run in a copy of the solve's namespace (or in
  ``scope`` itself)."""
  code = textwrap.dedent(code)
  tree = ast.parse(code)
  for node in tree.body:
    if isinstance(node, ast.FunctionDef):
      node.decorator_list = []
  scope = dict(namespace) if scope is None else scope
  source.run_defs(tree, code, scope, "solve-fix")
  return scope[name]


def _namespace(fn) -> dict:
  """The solve's globals with what it closes over."""
  fn = inspect.unwrap(fn)
  scope = dict(getattr(fn, "__globals__", {}))
  try:
    scope.update(inspect.getclosurevars(fn).nonlocals)
  except TypeError:
    pass
  return scope


@contextlib.contextmanager
def _hook_aside():
  """vjpviz's hook stands aside while a fix is judged (its runs are not the user's), and
  the fix runs now, not staged into a trace JAX may be building (a warning is delivered
  where JAX traces the solve)."""
  with records.suspended(), jax.ensure_compile_time_eval():
    yield
