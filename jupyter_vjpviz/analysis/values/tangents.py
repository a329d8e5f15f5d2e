"""The primal's own JVP as the judge of a custom_jvp rule's tangents.

The custom_vjp oracle (``oracle``) compares cotangents with the primal's VJP; a
custom_jvp rule returns tangents, so its judge is ``jax.jvp`` of the undecorated
primal, at the failing application's own values first (where the user's program is
known to run), then at draws in the range those values show, with random input
tangents. Output leaves whose reference is zero at every draw though the primal is
built on piecewise-constant operations (round, sign, comparisons) cannot be judged
by it: a rule giving a tangent there is a surrogate, judged by its own values. The
drawing, the tolerances and the verdicts are the oracle's.
"""
from __future__ import annotations

import dataclasses
from typing import Any
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ...capture.compat.private import cd
from ...capture.records import RuleSite
from . import oracle, replay
from ...base.trees import substituted


@dataclasses.dataclass(frozen=True)
class _Draw:
  args: tuple                 # every argument of the call, nondiff included
  tangents: tuple             # one tangent tree per differentiable argument
  reference: tuple            # per output leaf, float64 numpy


@dataclasses.dataclass
class Tangents:
  """Reference tangents of one custom_jvp application, drawn once for every candidate."""
  site: RuleSite
  draws: tuple[_Draw, ...]
  out_tree: Any
  out_avals: tuple            # per output leaf: the primal output's aval
  out_names: tuple[str, ...]  # ``out``, ``out[0]``: how a verdict names a leaf
  judge: str = "autodiff"     # or ``oracle.RULE_VALUES``
  unjudged: frozenset = frozenset()   # output leaves the primal's JVP cannot judge
  reason: str = ""
  floor: float = 0.0          # the tolerance of the lowest precision the primal computes in
  precision: tuple | None = None      # per output leaf, the aval whose dtype sets the tolerance

  @classmethod
  def of(cls, site: RuleSite, fun: Callable, draws: int = oracle.DRAWS, seed: int = 0) -> Tangents:
    with oracle.eagerly_aside():
      return _build(cls, site, fun, draws, seed)

  @property
  def available(self) -> bool:
    return len(self.unjudged) < len(self.out_avals)

  def verdict(self, jvp: Callable, symbolic_zeros: bool = False) -> oracle.Verdict:
    """Run ``jvp`` at each draw and compare its tangents leaf by leaf with the reference:
    at the lowest precision the rule computes in, where that is lower than the primal's
    (a tangent computed in float16 on purpose carries float16's rounding, and says so)."""
    with oracle.eagerly_aside():
      try:
        run = self.compiled_run(jvp, symbolic_zeros)
        outs = [self._flat(run((d.args, d.tangents)), strict=True) for d in self.draws]
      except replay.NotJudged as e:
        return oracle.Verdict(oracle.UNVERIFIABLE, str(e), judge=self.judge)
      except _TypeMismatch as e:
        return oracle.Verdict(oracle.TYPE_ERROR, str(e), judge=self.judge)
      except Exception as e:  # noqa: BLE001 - the candidate's own bug is its verdict
        return oracle.Verdict(oracle.FAILED, f"the rule raised {type(e).__name__}: {e}"[:300],
                              judge=self.judge)
      leaves, relaxed = self._compared(outs, self.floor), False
      if any(l.judged and not l.ok for l in leaves):
        floor = oracle.rule_rtol(lambda at: run_rule(self.site, jvp, *at, symbolic_zeros),
                                 (self.draws[0].args, self.draws[0].tangents))
        if floor > self.floor:
          leaves, relaxed = self._compared(outs, floor), True
    named = oracle.RULE_VALUES if self.judge == oracle.RULE_VALUES else "the primal's JVP"
    if any(l.judged and not l.ok for l in leaves):
      return oracle.Verdict(oracle.WRONG, "; ".join(l.describe() for l in leaves
                                                    if l.judged and not l.ok),
                            tuple(leaves), self.judge)
    if any(not l.judged for l in leaves):
      return oracle.Verdict(oracle.UNVERIFIABLE, self.reason, tuple(leaves), self.judge)
    precision = ", at the lower precision the rule computes in" if relaxed else ""
    return oracle.Verdict(oracle.RIGHT, f"equal to {named} at {len(self.draws)} points "
                          f"(the failing application's values first){precision}",
                          tuple(leaves), self.judge, relaxed=relaxed)

  def _compared(self, outs: list, floor: float) -> list:
    return [oracle.leaf_error(k, name, [d.reference[k] for d in self.draws], [o[k] for o in outs],
                              aval, judged=k not in self.unjudged, floor=floor)
            for k, (name, aval) in enumerate(zip(self.out_names, self.precision or self.out_avals))]

  def of_rule(self, jvp: Callable, symbolic_zeros: bool = False) -> Tangents | None:
    """These draws with ``jvp``'s own tangents as the reference, at its own precision (None
    where it does not run, or gives another shape): whether a candidate keeps a surrogate's
    values."""
    with oracle.eagerly_aside():
      try:
        run = self.compiled_run(jvp, symbolic_zeros)
        pairs = [run((d.args, d.tangents)) for d in self.draws]
        refs = [tuple(self._flat(pair, strict=False)) for pair in pairs]
      except Exception:  # noqa: BLE001 - a rule that cannot run here keeps no reference
        return None
    own = jax.tree_util.tree_leaves(pairs[0][1], is_leaf=_is_zero_or_none)
    return dataclasses.replace(self, draws=tuple(dataclasses.replace(d, reference=r)
                                                 for d, r in zip(self.draws, refs)),
                               judge=oracle.RULE_VALUES, unjudged=frozenset(), reason="",
                               precision=tuple(a if _is_zero_or_none(t) else jax.typeof(t)
                                               for t, a in zip(own, self.out_avals)))

  def differs(self, other: Tangents) -> str | None:
    """How ``other``'s references differ from these (None: they agree)."""
    leaves = [oracle.leaf_error(k, name, [d.reference[k] for d in self.draws],
                                 [d.reference[k] for d in other.draws], aval, judged=True)
              for k, (name, aval) in enumerate(zip(self.out_names, self.out_avals))]
    bad = [l for l in leaves if not l.ok]
    return oracle.Verdict(oracle.WRONG, "", tuple(leaves)).breaks() if bad else None

  def compiled_run(self, jvp: Callable, symbolic_zeros: bool):
    """``jvp`` at one draw ``(args, tangents)``, compiled once for every draw."""
    return oracle.compiled_run(lambda at: run_rule(self.site, jvp, *at, symbolic_zeros),
                            (self.draws[0].args, self.draws[0].tangents))

  def _flat(self, pair, strict: bool) -> list:
    """The tangent half of a rule's ``(primal_out, tangent_out)`` per output leaf, as float64
    numpy; ``strict``: each of its primal output's tangent type (else of its shape)."""
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
      raise _TypeMismatch("the rule does not return a (primal output, tangent) pair")
    leaves, tree = jax.tree_util.tree_flatten(pair[1], is_leaf=_is_zero_or_none)
    if tree != self.out_tree:
      raise _TypeMismatch(f"the tangents have the structure {tree}, not {self.out_tree}")
    out = []
    for name, t, aval in zip(self.out_names, leaves, self.out_avals):
      want = aval.to_tangent_aval()
      if _is_zero_or_none(t):
        out.append(np.zeros(want.shape))
        continue
      got = jax.typeof(t)
      if tuple(got.shape) != tuple(want.shape) or (strict and got.dtype != want.dtype):
        raise _TypeMismatch(f"the tangent of {name} is {got.str_short()}, not {want.str_short()}")
      out.append(oracle.on_host(t))
    return out


class _TypeMismatch(Exception):
  pass


def _is_zero_or_none(t) -> bool:
  """A tangent that is zero by its type: a symbolic zero, or None where a compiled run
  gave one back (``oracle.compiled_run``)."""
  return t is None or isinstance(t, (cd.SymbolicZero, cd.Zero))


def run_rule(site: RuleSite, jvp: Callable, args, tangents, symbolic_zeros: bool = False):
  """``jvp(*nondiff, primals, tangents)`` at one draw, with symbolic zeros for the inputs the
  failing application did not perturb, where the rule takes them."""
  positions = oracle.differentiable_positions(site, len(args))
  nondiff = [args[i] for i in sorted(i for i, _ in site.nondiff)]
  if symbolic_zeros and site.perturbed is not None:
    leaves, tree = jax.tree_util.tree_flatten(tuple(tangents))
    tangents = jax.tree_util.tree_unflatten(tree, [
        t if given else cd.SymbolicZero(jax.typeof(t)) for t, given in zip(leaves, site.perturbed)])
  return jvp(*nondiff, tuple(args[i] for i in positions), tuple(tangents))


def _build(cls, site: RuleSite, fun: Callable, n_draws: int, seed: int) -> Tangents:
  abstract = oracle.abstract_call_args(site)
  traced = oracle.TracedPrimal(fun, abstract)
  bounds = oracle.index_bounds(traced)
  user, domains = oracle.user_application(site, abstract)
  positions = oracle.differentiable_positions(site, len(abstract))
  rng = np.random.default_rng(seed)
  fun = replay.bounded(fun)
  def reference(at):
    args, tangents = at
    def restricted(*picked):
      full = substituted(args, positions, picked)
      return fun(*full)
    return jax.jvp(restricted, tuple(args[i] for i in positions), tangents)
  draws, out, run = [], None, None
  for k in range(n_draws):
    args = user if k == 0 and user is not None else oracle.draw_args(
        site, abstract, rng, positive=k % 2 == 1, bounds=bounds, domains=domains)
    tangents = tuple(_draw_tangents(args[i], rng) for i in positions)
    run = run or oracle.compiled_run(reference, (tuple(args), tangents))
    out, ref = run((tuple(args), tangents))
    draws.append(_Draw(tuple(args), tangents, tuple(oracle.on_host(l) if l is not None else None
                                                    for l in jax.tree_util.tree_leaves(ref))))
  paths, tree = jax.tree_util.tree_flatten_with_path(out)
  names = tuple("out" + jax.tree_util.keystr(p) for p, _ in paths)
  avals = tuple(jax.typeof(l) for _, l in paths)
  unjudged, reason = _flat_outputs(traced, draws, names)
  return cls(site, tuple(draws), tree, avals, names, unjudged=unjudged, reason=reason,
             floor=oracle.computed_rtol(traced))


def _draw_tangents(arg, rng):
  """A random tangent for each array leaf of ``arg`` (float0 zeros for integer ones)."""
  def draw(leaf):
    struct = jax.ShapeDtypeStruct(jnp.shape(leaf), jax.dtypes.result_type(leaf))
    return jnp.asarray(oracle.draw_like(oracle.ct_struct(struct), rng))
  return jax.tree_util.tree_map(draw, arg)


def _flat_outputs(traced, draws, names) -> tuple[frozenset, str]:
  """Output leaves whose JVP is zero at every draw where the primal is built on
  piecewise-constant operations: the primal's derivative cannot judge a tangent there."""
  if traced.jaxpr is None:
    return frozenset(), ""
  flat_ops = sorted(oracle.primitives_of(traced.jaxpr) & (oracle.FLAT_PRIMITIVES | oracle.COMPARISONS))
  zero = frozenset(k for k in range(len(names)) if all(
      d.reference[k] is None or not np.any(np.isfinite(d.reference[k]) & (d.reference[k] != 0))
      for d in draws))
  if not zero or not flat_ops:
    return frozenset(), ""
  return zero, (f"the primal's JVP is zero at every draw for {', '.join(names[k] for k in sorted(zero))}"
                f" ({', '.join(flat_ops)}): autodiff cannot judge a surrogate tangent")
