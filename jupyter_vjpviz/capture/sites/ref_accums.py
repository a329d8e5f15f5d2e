"""A gradient ref for an input of a rule that takes accumulators, under vmap: refused.

Under ``jax.vmap`` applied before differentiation, a custom_vjp whose bwd takes gradient
accumulators (``defvjp_with_accums``, ``custom_gradient(with_accums=)``) is handed
accumulators for values only, so JAX 0.12.1 refuses a ``Ref`` passed for its input with
``f_vjp.with_refs`` (``batching.ref_accum_error``, with the function's name). JAX builds
that error by calling the function, from the frame that holds the accumulators (classic
``call_with_accums``' ``accums``, hijax ``vjp_bwd``'s ``arg_accums``); the refused
``RefAccum`` holds the user's ref, found by identity among the accumulators JAX's VJP
function made of ``with_refs``' arguments (its ``maybe_accums``, beside their
``in_tree``) for its path. Recorded as ``grad_ref_type``: what that entry must be is a
value (``jax.ad.GradValue()``). JAX's exception passes through untouched.
"""
from __future__ import annotations

import sys

import jax

from ...base import safety, trees
from .. import records
from ..compat import private
from ..compat.patches import PatchSet
from ..compat.private import ad, core
from ..records import ERROR, Record

GRAD_VALUE = "jax.ad.GradValue()"
"""What a ``with_refs`` entry must be for an input whose rule vmap hands values only."""


def install(patches: PatchSet) -> None:
  if private.has("ad.ref_accum_error"):
    patches.apply(ad, "ref_accum_error", _wrap)


def _wrap(original):
  def ref_accum_error(name):
    exc = original(name)
    if records.active():
      records.record(safety.safely(refused, name, sys._getframe(1)))
    return exc
  ref_accum_error.__wrapped__ = original
  return ref_accum_error


def refused(name: str, frame) -> Record | None:
  """The record of the refused ref in the accumulators of JAX's ``frame``."""
  accums = frame.f_locals.get("accums") or frame.f_locals.get("arg_accums") or ()
  accum = next((a for a in jax.tree_util.tree_leaves(accums) if isinstance(a, ad.RefAccum)), None)
  if accum is None:
    return None
  ref, path = accum.ref, None
  while frame is not None and path is None:
    path = _with_refs_path(frame.f_locals, accum)
    frame = frame.f_back
  got = core.typeof(ref) if ref is not None else None
  where = path or "an input"
  return Record(
      kind="grad_ref_type", severity=ERROR, function=name, source=None, path=path,
      expected=GRAD_VALUE, got=got.str_short() if got is not None else "a Ref", got_aval=got,
      detail=f"under vmap, {name}'s bwd rule takes accumulators for values only, so the "
             f"gradient of {where} can't go into a ref: pass {GRAD_VALUE} there (and add the "
             "gradient into the ref yourself), or apply vmap after differentiation")


def _with_refs_path(local: dict, accum) -> str | None:
  """``args[...]``: where ``accum``'s ref was passed to ``with_refs``, if ``local`` is the
  frame of JAX's VJP function that holds the accumulators made of its arguments."""
  made, tree = local.get("maybe_accums"), local.get("in_tree")
  if not isinstance(made, (list, tuple)) or not isinstance(tree, jax.tree_util.PyTreeDef):
    return None
  for idx, a in enumerate(made):
    if a is accum or (accum.ref is not None and getattr(a, "ref", None) is accum.ref):
      return "args" + jax.tree_util.keystr(trees.leaf_paths(tree, [object()] * tree.num_leaves)[idx])
  return None
