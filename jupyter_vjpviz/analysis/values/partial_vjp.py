"""``jax.vjp`` with respect to some positional arguments only, the others held as they are.

The oracle, the NaN search and the type and value checks all differentiate a user's
function in some of its arguments; this is the one place that builds that closure.
"""
from __future__ import annotations

import functools
import inspect

import jax
import numpy as np

from ...capture.compat.private import core
from ...capture.naming import function_names
from ...capture.avals import ct_aval
from ...base.trees import substituted


def vjp_wrt(fun, args, positions, kwargs=None, staged: bool = False):
  """``jax.vjp`` of ``fun(*args, **kwargs)`` in ``args[i]`` for ``i`` in ``positions``;
  ``staged``: of its jit, so JAX traces every custom_vjp's primal and checks each fwd
  against it (under grad alone it runs only the fwd)."""
  def restricted(*picked):
    full = substituted(args, positions, picked)
    return fun(*full, **(kwargs or {}))
  restricted.__signature__ = _picked_parameters(fun, positions)
  return jax.vjp(jax.jit(restricted) if staged else restricted, *[args[i] for i in positions])


def _picked_parameters(fun, positions) -> inspect.Signature | None:
  """``fun``'s parameters at ``positions`` (``function_names.positional_names``: a bound method's
  without ``self``): a diagnosis names the inputs as the user's function does (``ws[1]``,
  not ``args[0][1]``); None when they cannot be read."""
  params = function_names.positional_names(fun)
  if any(i >= len(params) for i in positions):
    return None
  return inspect.Signature([inspect.Parameter(params[i], inspect.Parameter.POSITIONAL_ONLY)
                            for i in positions])


def arrays_only(fun, args: tuple, positions) -> tuple:
  """(``fun``, ``args``) as ``eqx.filter_grad`` differentiates them: where an argument at
  ``positions`` holds leaves that are not floating arrays (an equinox module's activation
  function, its integers), they are held in a closure and ``None`` stands in their place;
  the same two, unchanged, where none does."""
  held: dict[int, tuple] = {}
  picked = list(args)
  for i in positions:
    flat, tree = jax.tree_util.tree_flatten(args[i])
    if not all(differentiable(x) for x in flat):
      held[i] = (flat, tree)
      picked[i] = tree.unflatten([x if differentiable(x) else None for x in flat])
  if not held:
    return fun, args

  @functools.wraps(fun)
  def whole(*given, **kwargs):
    full = list(given)
    for i, (flat, tree) in held.items():
      mine = jax.tree_util.tree_leaves(given[i], is_leaf=lambda x: x is None)
      full[i] = tree.unflatten([m if differentiable(x) else x for m, x in zip(mine, flat)])
    return fun(*full, **kwargs)
  return whole, tuple(picked)


def without_aux(fun):
  """``fun`` of ``(loss, aux)`` (``jax.grad(..., has_aux=True)``'s) as a function of the loss."""
  @functools.wraps(fun)
  def loss(*args, **kwargs):
    return fun(*args, **kwargs)[0]
  return loss


def as_input(x):
  """A Python or numpy float differentiated as the array ``jax.grad`` makes of it; anything
  else as it is."""
  return jax.numpy.asarray(x) if isinstance(x, (float, np.ndarray, np.floating)) else x


def differentiable(x) -> bool:
  """A floating (or complex) array: what ``jax.grad`` of an equinox filter differentiates."""
  return isinstance(x, (jax.Array, np.ndarray)) and jax.numpy.issubdtype(x.dtype, jax.numpy.inexact)


def pull_ones(fun, args, positions, kwargs=None, staged: bool = False):
  """The cotangents of ``args[positions]`` for a cotangent of ones on every output."""
  out, pull = vjp_wrt(fun, args, positions, kwargs, staged)
  return pull(jax.tree_util.tree_map(unit_cotangent, out))


def unit_cotangent(out):
  """Ones of ``out``'s cotangent type (float0 zeros for an integer output)."""
  aval = ct_aval(core.typeof(out))
  if aval.dtype == jax.dtypes.float0:
    return np.zeros(aval.shape, jax.dtypes.float0)
  return jax.numpy.ones(aval.shape, aval.dtype)
