"""The reverse-mode call offered where JAX refuses a custom_vjp function forward mode
(``jvp_of_custom_vjp``), judged by running it.

The call (``jax.jacrev`` of the custom_vjp for a ``jax.jacfwd``, ``jacrev`` of ``jacrev``
for a ``jax.hessian``) goes through the user's own bwd rule; its reference is the same
derivative of the primal with the rule dropped (``jax.jacfwd``, ``jax.hessian`` of
``.fun``), which shares nothing with the rule, computed in float64 where the primal runs
so. Both run at random inputs of the refused application's types, through ``replay``
(bounded, the user's effects held back, the hook aside). Equal on every draw: the call is
right. Different: the bwd rule is wrong too (its cotangents are not the primal's
derivative), and the verdict says where. Derivatives too large to hold, or a primal that
does not run at random inputs: not judged, and why.
"""
from __future__ import annotations

import jax
import numpy as np

from ...capture.compat.private import config
from . import oracle, replay

JACOBIAN_BYTES = 1 << 22
"""Bytes of one draw's float64 derivative above which the call is not judged: a Jacobian
is (outputs x inputs) elements, a hessian's once more the inputs."""


def _jacrev2(f, argnums):
  return jax.jacrev(jax.jacrev(f, argnums), argnums)


CALLS = {"jax.jacfwd": (jax.jacrev, jax.jacfwd, "jax.jacfwd"),
         "jax.hessian": (_jacrev2, jax.hessian, "jax.hessian")}
"""The user's refused transformation -> (the reverse-mode call offered, the reference
applied to the primal, the reference's name)."""


def judged(transformation: str) -> bool:
  """Whether the call offered for ``transformation`` is one this module runs."""
  return transformation in CALLS


def verdict(site, cvjp, transformation: str, draws: int = oracle.DRAWS) -> oracle.Verdict:
  """The offered reverse-mode call of ``cvjp`` (the user's custom_vjp, applied at
  ``site``) against the primal's own derivative at ``draws`` random inputs."""
  call, reference, named = CALLS[transformation]
  primal = getattr(cvjp, "fun", None)
  if primal is None:
    return _unverifiable(f"{site.function} has no primal to differentiate (.fun)")
  abstract = oracle.abstract_call_args(site)
  argnums = tuple(oracle.differentiable_positions(site, len(abstract)))
  with oracle.eagerly_aside():
    traced = oracle.TracedPrimal(primal, abstract)
    if traced.jaxpr is None:
      return _unverifiable(f"{site.function}'s primal does not run at its recorded types")
    too_large = _too_large(traced, site, transformation)
    if too_large:
      return _unverifiable(too_large)
    rng, bounds = np.random.default_rng(0), oracle.index_bounds(traced)
    pairs, dropped = [], []
    for k in range(draws):
      args = oracle.draw_args(site, abstract, rng, positive=k % 2 == 1, bounds=bounds)
      try:
        got = replay.run(replay.bounded(call(cvjp, argnums)), *args)
        want = _in_float64(reference(primal, argnums), args)
      except replay.NotJudged as e:
        dropped.append(str(e))
        if isinstance(e, replay.LoopCapped):
          continue
        break
      except Exception as e:  # noqa: BLE001 - what the pasted call meets, as a reason
        return _unverifiable(f"it raised at random inputs: {type(e).__name__}: {e}"[:300])
      pairs.append((jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)))
  if not pairs:
    return _unverifiable(dropped[-1] if dropped else replay.TIME_BUDGET)
  return _compared(site, pairs, named, transformation)


def _compared(site, pairs, named: str, transformation: str) -> oracle.Verdict:
  """Per leaf of the derivative, the call's values against the reference's."""
  n = len(pairs[0][0])
  if any(len(g) != n or len(w) != n for g, w in pairs):
    return oracle.Verdict(oracle.WRONG, f"its derivative has another structure than "
                          f"{named} of the primal's", judge=named)
  names = _leaf_names(site, n)
  leaves = tuple(oracle.leaf_error(
      i, names[i], [oracle.on_host(w[i]) for _, w in pairs],
      [oracle.on_host(g[i]) for g, _ in pairs], site.in_avals[i % len(site.in_avals)],
      judged=True) for i in range(n))
  judge = f"{named} of {site.function}.fun"
  unjudged = [leaf.name for leaf in leaves if not leaf.judged]
  if unjudged:   # the reference was nowhere finite there: a leaf not compared is not right
    return _unverifiable(f"not judged: {judge} is not finite at any draw for "
                         f"{', '.join(unjudged)}")
  if all(leaf.ok for leaf in leaves):
    return oracle.Verdict(oracle.RIGHT, f"equal to {judge} (the rule dropped) at {len(pairs)} "
                          "random inputs", leaves, judge=judge)
  worst = max(leaves, key=lambda leaf: 0.0 if leaf.ok else leaf.max_rel)
  rule = f"the bwd rule {site.rule}" if site.rule else "the bwd rule"
  # no leaves: the reason, not a leaf's clause, is what the fix's title says
  return oracle.Verdict(
      oracle.WRONG, f"{rule} is wrong too: it gives another derivative than {judge} "
      f"(at {worst.name}, rel {worst.max_rel:.2g})", judge=judge)


def _leaf_names(site, n: int) -> list[str]:
  """The derivative's leaves named by the input each one differentiates by (the last
  axis of JAX's (outputs x inputs) nesting), where the count says which."""
  names = list(site.in_names)
  if n % len(names):
    return [f"leaf {i}" for i in range(n)]
  return [f"d/d{names[i % len(names)]}" for i in range(n)]


def _too_large(traced, site, transformation: str) -> str:
  outs = sum(int(np.prod(v.aval.shape)) for v in traced.jaxpr.outvars
             if hasattr(v.aval, "shape"))
  ins = sum(int(np.prod(a.shape)) for a in site.in_avals)
  size = 8 * outs * ins * (ins if transformation == "jax.hessian" else 1)
  return (f"not judged: its derivative ({size >> 20} MiB a draw) is too large to compute "
          "again") if size > JACOBIAN_BYTES else ""


def _in_float64(fun, args):
  """``fun`` at ``args`` in float64 where it runs so, else in their own precision."""
  try:
    with config.enable_x64(True):
      return replay.run(replay.bounded(fun), *jax.tree_util.tree_map(_as64, args))
  except replay.NotJudged:
    raise
  except Exception:  # noqa: BLE001 - a primal that does not run in float64
    return replay.run(replay.bounded(fun), *args)


def _as64(x):
  if isinstance(x, (np.ndarray, jax.Array)) and np.issubdtype(x.dtype, np.floating):
    return np.asarray(x, np.float64)
  return x


def _unverifiable(why: str) -> oracle.Verdict:
  return oracle.Verdict(oracle.UNVERIFIABLE, why, judge="")
