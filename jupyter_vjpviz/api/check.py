"""``vjpviz.check``: a linter for gradients that costs one abstract trace.

It runs ``jax.vjp`` and the backward pass under ``jax.eval_shape`` with the
hook on, so every custom rule reached, at any depth, is checked (silent dtypes
included) without a single FLOP, and caches the answer per function and avals.
It is also the checker the fixes stage is handed to verify a fix with
(``verify_fix``/``apply_fix`` here): that stage sits below this one.
"""
from __future__ import annotations

import weakref

import jax

from ..capture.compat.private import core
from . import pipeline
from ..analysis.diagnosis import Diagnosis
from ..analysis.values.partial_vjp import pull_ones
from ..base import trees, unchecked
from ..capture.naming.function_names import function_name
from ..fixes import verify as fix_verify

_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def check(fun, *args, argnums=0, **kwargs) -> list[Diagnosis | unchecked.Unchecked]:
  """Every custom rule ``fun`` reaches when differentiated w.r.t. ``argnums``, checked on
  types (no FLOP): the problems found; [] only when every stage ran clean, else an
  ``Unchecked`` among them saying what could not be checked."""
  abstract_args = jax.tree_util.tree_map(as_shape_struct, args)
  nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
  cache_key = _cache_key(nums, abstract_args, kwargs)
  per_fun = _cached(fun)
  if per_fun is not None and cache_key is not None and cache_key in per_fun:
    return list(per_fun[cache_key])
  found = run(fun, abstract_args, nums, kwargs)
  if per_fun is not None and cache_key is not None and unchecked.unchecked(found) is None:
    per_fun[cache_key] = tuple(found)
  return found


def run(fun, abstract_args, nums, kwargs) -> list[Diagnosis]:
  """Differentiate ``fun`` w.r.t. ``nums`` abstractly with the hook on; what it found."""
  traced = [i for i, a in enumerate(abstract_args) if _all_structs(a)]

  def probe(*traced_args):
    full = trees.substituted(abstract_args, traced, traced_args)
    return pull_ones(fun, full, nums, kwargs, staged=True)

  was_installed = pipeline.installed()
  pipeline.install()
  try:
    with (pipeline.collecting() as found,
          unchecked.attempt(f"vv.check of {function_name(fun)}") as trial):
      try:
        jax.eval_shape(probe, *[abstract_args[i] for i in traced])
      except Exception:
        if not any(isinstance(d, Diagnosis) for d in found):
          raise  # the user's own error, not a VJP type problem
  finally:
    if not was_installed:
      pipeline.uninstall()
  if trial.failed and unchecked.unchecked(found) is None:   # a stage of ours failed meanwhile
    found.append(trial.unchecked())
  return found


def _all_structs(tree) -> bool:
  return all(isinstance(l, jax.ShapeDtypeStruct) for l in jax.tree_util.tree_leaves(tree))



def verify_fix(diagnosis: Diagnosis, code: str) -> list[Diagnosis]:
  """What is still wrong with the rule once ``code`` replaces it: types (checked like
  ``check``), then values against the primal's own derivative; ``[]`` means fixed."""
  return fix_verify.verify_fix(diagnosis, code, check)


def apply_fix(diagnosis: Diagnosis, code: str, verify: bool = True) -> fix_verify.Applied:
  """Rebind a notebook rule to ``code`` once it verifies, or return the patch for a file rule."""
  result = fix_verify.apply_fix(diagnosis, code, check if verify else None)
  if result.applied:
    clear_cache()   # the cached answers were about the old rule
  return result


def clear_cache() -> None:
  """Forget every cached answer (a rule was re-registered, so they may be stale)."""
  _cache.clear()


def as_shape_struct(x):
  """``x`` as a ShapeDtypeStruct if it is an array; anything else as it is."""
  if isinstance(x, jax.ShapeDtypeStruct):
    return x
  try:
    return trees.shape_struct(core.typeof(x))
  except TypeError:
    return x


def _cache_key(nums, abstract_args, kwargs):
  try:
    leaves, tree = jax.tree_util.tree_flatten((abstract_args, kwargs))
    k = (nums, tree, tuple((l.shape, l.dtype, l.weak_type) if isinstance(l, jax.ShapeDtypeStruct)
                           else l for l in leaves))
    hash(k)
    return k
  except TypeError:
    return None


def _cached(fun):
  try:
    return _cache.setdefault(fun, {})
  except TypeError:
    return None
