"""The primal's own derivative as the judge of a custom rule's cotangents.

A custom rule exists for speed, memory or numerical stability; in most real code
its primal function is differentiable by JAX itself. ``jax.vjp`` of the primal at
random inputs of the recorded avals, with a random output cotangent, gives the
reference cotangent of every input, and a candidate rule is right when it gives
the same. Where JAX cannot differentiate the primal (a ``pure_callback``),
central finite differences along random directions are the second judge; where
the primal's derivative is zero almost everywhere (``round``, ``sign``: a
straight-through estimator), nothing can judge the rule, and the verdict says so.

An ``Oracle`` holds arrays (its draws): it lives for one ranking of fixes or one
gradient check and is never kept in a Diagnosis; a ``Verdict`` holds numbers
and strings only.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from typing import Any
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ...capture.compat.private import cd, core
from ...base import trees
from ...capture import applied, avals, records
from ...capture.records import RuleSite, Weak
from ...capture.sites import custom_rules
from . import replay
from .partial_vjp import vjp_wrt

RIGHT = "right"                 # equal to the reference on every draw
WRONG = "wrong"                 # well-typed, different values
TYPE_ERROR = "type_error"       # the rule's output has another structure or type
FAILED = "failed"               # the rule raised
UNVERIFIABLE = "unverifiable"   # no judge for (some of) the cotangents

DRAWS = 3

# Relative tolerance by dtype, scaled by the largest reference magnitude of the leaf:
# two correct formulations of one gradient agree to a few ulps times the depth of
# the computation, not elementwise near zero.
RTOL = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2}
RULE_VALUES = "the rule's own values"
"""``Oracle.judge`` of a reference made of a rule's own cotangents (``Oracle.of_rule``)."""
_FD_RTOL = 1e-2      # central differences in float32; float64 where it can be enabled

# Primitives whose derivative is zero almost everywhere: autodiff of a primal
# built on them says "zero", which is no judgement of a surrogate gradient.
FLAT_PRIMITIVES = frozenset({"round", "floor", "ceil", "sign", "argmax", "argmin", "is_finite",
                   "random_bits", "nextafter"})
_INDEXING = frozenset({"gather", "scatter", "scatter-add", "scatter_add", "scatter-mul",
                       "scatter_mul", "scatter-min", "scatter-max", "dynamic_slice",
                       "dynamic_update_slice"})
COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})
_PASS_THROUGH = frozenset({"convert_element_type", "broadcast_in_dim", "reshape", "squeeze",
                           "expand_dims", "add", "sub", "select_n", "neg", "concatenate",
                           "transpose", "copy", "clamp", "max", "min"})


@dataclasses.dataclass(frozen=True)
class LeafError:
  """How one input's cotangent compares with the reference, over all draws."""
  index: int                  # among the rule's differentiable input leaves
  name: str                   # as the user spells it: ``x``, ``params['w']``
  max_abs: float
  max_rel: float              # max_abs over the largest reference magnitude
  where: tuple[int, ...]      # element with the largest difference
  reference_zero: bool        # the reference is zero at every draw
  got_zero: bool              # so is the rule's cotangent
  judged: bool = True         # False: no judge for this leaf (see Verdict.reason)
  ok: bool = True
  reference_at: float = 0.0   # the reference at ``where`` (on the draw with the worst error)
  got_at: float = 0.0         # the rule's cotangent there
  scale: float = 0.0          # the largest reference magnitude

  def to_dict(self) -> dict:
    """Plain JSON: an infinite relative error (a zero reference) becomes None."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else
            list(v) if isinstance(v, tuple) else v
            for k, v in dataclasses.asdict(self).items()}

  def describe(self) -> str:
    if not self.judged:
      return f"{self.name}: not judged"
    if self.ok:
      return f"{self.name}: equal to the reference (max abs error {self.max_abs:.2g})"
    if self.got_zero:
      return f"{self.name}: zero, but the reference is not"
    return (f"{self.name}: differs from the reference, max abs {self.max_abs:.3g}, "
            f"rel {self.max_rel:.2g} at {list(self.where)}")


@dataclasses.dataclass(frozen=True)
class Verdict:
  """What a candidate rule's cotangents are worth: numbers and words, no arrays."""
  status: str
  reason: str
  leaves: tuple[LeafError, ...] = ()
  judge: str = "autodiff"     # "autodiff" | "finite differences" | ""
  where: str = ""             # where it was judged, when not plainly: inside a shard_map
  relaxed: bool = False       # right only at the lower precision the rule computes in

  @property
  def right(self) -> bool:
    return self.status == RIGHT

  def breaks(self) -> str | None:
    """What this candidate gets wrong, in one clause: ``the gradient of scale becomes zero``."""
    bad = [l for l in self.leaves if l.judged and not l.ok]
    if not bad:
      return None
    zeroed = [l.name for l in bad if l.got_zero]
    wrong = [l.name for l in bad if not l.got_zero]
    parts = ([f"the gradient of {_names(zeroed)} becomes zero"] if zeroed else []) + \
        ([f"the gradient of {_names(wrong)} differs from the primal's "
          f"(rel {max(l.max_rel for l in bad if not l.got_zero):.2g})"] if wrong else [])
    return "; ".join(parts)


def _names(names: list[str]) -> str:
  return ", ".join(f"`{n}`" for n in names)


@dataclasses.dataclass(frozen=True)
class _Draw:
  args: tuple                 # every argument of the call, nondiff included
  ct: Any                     # the output cotangent
  reference: tuple | None     # per input leaf (None: no reference at this draw)


@dataclasses.dataclass
class Oracle:
  """Reference cotangents of one rule application, drawn once, reused for every candidate."""
  site: RuleSite
  fun: Callable
  draws: tuple[_Draw, ...]
  judge: str                  # "autodiff" | "finite differences" | RULE_VALUES | "" (none)
  reason: str = ""            # why some or all leaves have no judge
  unjudged: frozenset = frozenset()   # leaf indices without a judge
  precision: tuple | None = None      # per leaf, the aval whose dtype sets the tolerance
  assumes: str = ""                   # what the draws take for granted (said with RIGHT)
  floor: float = 0.0                  # the tolerance of the lowest precision the primal computes in
  shrunk: bool = False                # drawn at smaller shapes than the call's (large arguments)
  given_all: Oracle | None = None
  """Where the failing application gave some outputs no cotangent (a symbolic_zeros rule's
  branch for them failed): the same draws with every output given one, so that a candidate
  right on that branch is right on the others too."""

  @classmethod
  def of(cls, site: RuleSite, fun: Callable, draws: int = DRAWS, seed: int = 0,
         by_fwd: bool = False) -> Oracle:
    """Draw inputs and cotangents for ``site`` and differentiate ``fun`` there.

    ``by_fwd``: ``fun`` is fwd's primal output standing in for a primal that runs only
    inside its library's call; its outputs that hand an input back unchanged (the
    library's state, as flax nnx's custom_vjp returns it) get zero cotangents, as rules
    written for such a library take them. A verdict says both."""
    with eagerly_aside():
      oracle = _build(cls, site, fun, draws, seed, by_fwd)
      if _zero_cts(site):
        oracle.given_all = _build(cls, dataclasses.replace(site, zero_cts=None), fun, draws,
                                  seed + 1, by_fwd)
      return oracle

  @property
  def available(self) -> bool:
    return bool(self.judge) and len(self.unjudged) < len(self.site.in_paths)

  def identity(self) -> bool:
    """The primal hands inputs back unchanged as all its outputs: a custom rule on it exists
    only to shape the gradient (clipping, reversal, scaling), so it differs on purpose."""
    traced = TracedPrimal(self.fun, abstract_call_args(self.site))
    if traced.jaxpr is None or not traced.jaxpr.outvars:
      return False
    return len(_passed_through(traced.jaxpr)) == len(traced.jaxpr.outvars)

  def reference_zero(self, index: int) -> bool:
    """Whether the reference cotangent of input leaf ``index`` is zero at every draw."""
    refs = [d.reference[index] for d in self.draws if d.reference is not None]
    return bool(refs) and all(not np.any(r) for r in refs if r is not None)

  def verdict(self, fwd: Callable, bwd: Callable, symbolic_zeros: bool = False,
              nondiff_argnums: tuple = (), perturbed: tuple[bool, ...] | None = None) -> Verdict:
    """Run ``bwd(fwd(args))`` at each draw and compare it leaf by leaf with the reference;
    right only if right with every output given a cotangent too (``given_all``).

    ``perturbed`` (per input leaf, for ``symbolic_zeros`` rules) says which inputs the
    application differentiated; the others owe no cotangent and are not compared.
    """
    found = self._verdict(fwd, bwd, symbolic_zeros, perturbed)
    if not found.right or self.given_all is None:
      return found
    other = self.given_all._verdict(fwd, bwd, symbolic_zeros, perturbed)
    if other.right:
      return found
    return dataclasses.replace(other, reason="with every output given a cotangent (no "
                               f"symbolic zero, the rule's other branch): {other.reason}")

  def _verdict(self, fwd: Callable, bwd: Callable, symbolic_zeros: bool,
               perturbed: tuple[bool, ...] | None) -> Verdict:
    with eagerly_aside():
      try:
        run = compiled_run(self.rule(fwd, bwd, symbolic_zeros, perturbed),
                        (self.draws[0].args, self.draws[0].ct))
        outs = [_flatten_cts(self.site, run((d.args, d.ct))) for d in self.draws]
      except replay.NotJudged as e:
        return Verdict(UNVERIFIABLE, str(e), judge=self.judge)
      except _TypeMismatch as e:
        return Verdict(TYPE_ERROR, str(e), judge=self.judge)
      except Exception as e:  # noqa: BLE001 - the candidate's own bug is its verdict
        if self.shrunk:   # or a rule written for the call's own shapes
          return Verdict(UNVERIFIABLE, "not judged: the rule does not run at the smaller "
                         f"shapes drawn to bound memory ({type(e).__name__})", judge=self.judge)
        return Verdict(FAILED, f"the rule raised {type(e).__name__}: {e}"[:300], judge=self.judge)
      if not self.judge:
        return Verdict(UNVERIFIABLE, self.reason, judge="")
      leaves, relaxed = self._compare(outs), False
      if any(l.judged and not l.ok for l in leaves):   # at the rule's own precision, if lower
        floor = rule_rtol(self.rule(fwd, bwd, symbolic_zeros, perturbed),
                           (self.draws[0].args, self.draws[0].ct))
        if floor > self.floor:
          leaves, relaxed = dataclasses.replace(self, floor=floor)._compare(outs), True
      leaves = [l for l in leaves if perturbed is None or not symbolic_zeros or perturbed[l.index]]
    if any(l.judged and not l.ok for l in leaves):
      return Verdict(WRONG, "; ".join(l.describe() for l in leaves if l.judged and not l.ok),
                     tuple(leaves), self.judge)
    if any(not l.judged for l in leaves):
      return Verdict(UNVERIFIABLE, self.reason or _not_finite(leaves), tuple(leaves), self.judge)
    assumes = f" ({self.assumes})" if self.assumes else ""
    precision = ", at the lower precision the rule computes in" if relaxed else ""
    return Verdict(RIGHT, f"equal to {self.named} at {len(self.draws)} random points"
                   f"{precision}{assumes}", tuple(leaves), self.judge, relaxed=relaxed)

  def rule(self, fwd: Callable, bwd: Callable, symbolic_zeros: bool,
           perturbed: tuple[bool, ...] | None) -> Callable:
    """The rule's cotangents as a function of one draw ``(args, output cotangent)``."""
    return lambda a: _run_rule(self.site, a, fwd, bwd, symbolic_zeros, perturbed)

  @property
  def named(self) -> str:
    return RULE_VALUES if self.judge == RULE_VALUES else f"the primal's {self.judge}"

  def of_rule(self, fwd: Callable, bwd: Callable, symbolic_zeros: bool = False,
              perturbed: tuple[bool, ...] | None = None) -> Oracle | None:
    """These draws with the rule ``fwd``/``bwd``'s own cotangents as the reference, judged
    at the rule's own precision (None where they have another shape): whether a
    candidate keeps what a rule computes, where it differs from the primal's on purpose."""
    with eagerly_aside():
      try:
        run = compiled_run(self.rule(fwd, bwd, symbolic_zeros, perturbed),
                        (self.draws[0].args, self.draws[0].ct))
        raw = [run((d.args, d.ct)) for d in self.draws]
        aligned = [_aligned(self.site, r) for r in raw]
        refs = [tuple(_flatten_cts(self.site, r, strict=False)) for r, _ in aligned]
      except Exception:  # noqa: BLE001 - a rule that cannot run here keeps no reference
        return None
    missing = aligned[0][1]
    if missing and any(d.reference is None for d in self.draws):
      return None   # nothing to stand in for what the rule does not return
    flat = custom_rules.match_structure(self.site, aligned[0][0])
    precision = tuple(core.typeof(ct) if hasattr(ct, "dtype") else a
                      for ct, a in zip(flat, self.site.in_avals))
    draws = tuple(dataclasses.replace(d, reference=tuple(
        d.reference[i] if i in missing and d.reference is not None else ref
        for i, ref in enumerate(r))) for d, r in zip(self.draws, refs))
    names = ", ".join(f"`{self.site.in_names[i]}`" for i in sorted(missing))
    assumes = f"the primal's {self.judge} for {names}, which the rule does not return" \
        if missing else ""
    return dataclasses.replace(self, draws=draws, judge=RULE_VALUES, reason="",
                               precision=precision, assumes=assumes, unjudged=frozenset(),
                               given_all=None)

  def agrees(self, other: Oracle) -> Verdict:
    """``other``'s references judged against this oracle's, at ``other``'s precision."""
    outs = [d.reference for d in other.draws]
    leaves = dataclasses.replace(self, precision=other.precision)._compare(outs)
    wrong = [l for l in leaves if l.judged and not l.ok]
    return Verdict(WRONG if wrong else RIGHT, "; ".join(l.describe() for l in wrong),
                   tuple(leaves), self.judge)

  def _compare(self, outs) -> list[LeafError]:
    if self.judge == "finite differences":
      return _compare_directional(self, outs)
    leaves = []
    for i, name in enumerate(self.site.in_names):
      refs = [d.reference[i] if d.reference is not None else None for d in self.draws]
      gots = [o[i] for o in outs]
      leaves.append(leaf_error(i, name, refs, gots, (self.precision or self.site.in_avals)[i],
                                judged=i not in self.unjudged, floor=self.floor))
    return leaves


class _TypeMismatch(Exception):
  pass


# ---------------------------------------------------------------- building

def _build(cls, site: RuleSite, fun: Callable, n_draws: int, seed: int,
           by_fwd: bool = False) -> Oracle:
  site, shrunk = _smaller_site(site, fun)
  abstract_args = abstract_call_args(site)
  traced = TracedPrimal(fun, abstract_args)
  bounds = index_bounds(traced)
  still = _unchanged_outputs(traced) if by_fwd else frozenset()
  key = np.random.default_rng(seed)
  draws, judge, reason, pull, dropped = [], "autodiff", "", None, []
  fun = replay.bounded(fun)
  user, domains = user_application(site, abstract_args)
  for k in range(n_draws):
    at_user = k == 0 and user is not None and not shrunk
    args = user if at_user else \
        draw_args(site, abstract_args, key, positive=k % 2 == 1, bounds=bounds, domains=domains)
    out = _shapes(fun, args)
    ct = _draw_ct(out, key, still | _zero_cts(site))
    try:
      try:
        if at_user:   # its loops end as the user's did: what they needed caps the draws'
          with replay.at_user_values():
            reference, _ = _reference(site, fun, args, ct, judge, None)
        else:
          reference, pull = _reference(site, fun, args, ct, judge, pull)
      except replay.NotJudged:
        raise
      except Exception as e:  # noqa: BLE001 - JAX cannot differentiate the primal
        judge, reason = "finite differences", (
            f"JAX cannot differentiate {site.function} ({type(e).__name__}); "
            "judged by finite differences")
        reference, pull = _reference(site, fun, args, ct, judge, pull)
    except replay.NotJudged as e:   # this draw ran a loop past its cap, or time is up
      dropped.append(str(e))
      if isinstance(e, replay.LoopCapped):
        continue
      break
    draws.append(_Draw(tuple(args), ct, reference))
  if not draws:
    raise replay.NotJudged(dropped[-1] if dropped else replay.TIME_BUDGET)
  if dropped:
    reason = "; ".join(filter(None, [reason, f"{len(dropped)} of {n_draws} draws dropped "
                                     f"({dropped[0].removeprefix('not judged: ')})"]))
  unjudged, flat_reason = _flat_leaves(site, traced, draws) if judge == "autodiff" \
      else (frozenset(), "")
  if flat_reason:
    reason = flat_reason
  assumes = "; ".join(filter(None, [
      shrunk,
      by_fwd and "differentiated through fwd's primal output, as the primal runs only inside "
      "its library's call",
      still and (f"no cotangent on the {len(still)} output(s) that hand an input back "
                 "unchanged (the library's state), as rules written for it take them")]))
  return cls(site, fun, tuple(draws), judge, reason, unjudged, assumes=assumes,
             floor=computed_rtol(traced), shrunk=bool(shrunk))


def _smaller_site(site: RuleSite, fun) -> tuple[RuleSite, str]:
  """``site`` at smaller shapes where its arrays are too large to draw again
  (``replay.smaller``), and what its draws then assume; ``NotJudged`` where the primal
  does not run at smaller shapes (memory is bounded before anything else)."""
  nondiff = [(i, v) for i, v in site.nondiff if isinstance(v, jax.ShapeDtypeStruct)]
  arrays = list(site.in_avals) + [v for _, v in nondiff]
  new = replay.smaller([(tuple(a.shape), np.dtype(a.dtype).itemsize) for a in arrays])
  if new is None:
    return site, ""
  k = len(site.in_avals)
  moved = {i: jax.ShapeDtypeStruct(s, v.dtype) for (i, v), s in zip(nondiff, new[k:])}
  small = dataclasses.replace(
      site, in_avals=tuple(a.update(shape=s) for a, s in zip(site.in_avals, new)),
      nondiff=tuple((i, moved.get(i, v)) for i, v in site.nondiff))
  if TracedPrimal(fun, abstract_call_args(small)).jaxpr is None:
    raise replay.NotJudged(f"not judged: the arguments are too large to draw again, and "
                           f"{site.function} does not run at smaller shapes")
  changed = [f"{n} {small.in_avals[j].str_short()} for {a.str_short()}"
             for j, (n, a) in enumerate(zip(site.in_names, site.in_avals))
             if a.shape != small.in_avals[j].shape]
  return small, f"drawn at smaller shapes to bound memory: {', '.join(changed[:3])}"


def _reference(site, fun, args, ct, judge: str, pull):
  """(the reference cotangents at one draw, the compiled pullback that gave them);
  None with finite differences, which difference the primal itself."""
  if judge != "autodiff":
    replay.run(fun, *args)
    return None, pull
  pull = pull or compiled_run(lambda a: pullback(site, fun, *a), (args, ct))
  return tuple(on_host(l) for l in jax.tree_util.tree_leaves(pull((args, ct)))), pull


def _draw_ct(out, rng, still: frozenset = frozenset()):
  """A random cotangent for ``out``; zeros at the output leaves in ``still``."""
  leaves, tree = jax.tree_util.tree_flatten(out)
  cts = [draw_like(ct_struct(s), rng) for s in leaves]
  return jax.tree_util.tree_unflatten(
      tree, [jnp.zeros_like(c) if k in still else c for k, c in enumerate(cts)])


def _zero_cts(site: RuleSite) -> frozenset[int]:
  """The output leaves the failing application gave no cotangent (symbolic zeros)."""
  return frozenset(k for k, zero in enumerate(site.zero_cts or ()) if zero)


def abstract_call_args(site: RuleSite) -> list:
  """Every argument of the call as ShapeDtypeStructs (arrays) or its value (the rest)."""
  differentiable = jax.tree_util.tree_unflatten(
      site.in_tree, [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in site.in_avals])
  static = dict(site.nondiff)
  rest = iter(differentiable)
  return [static[i] if i in static else next(rest)
          for i in range(len(differentiable) + len(static))]


def user_application(site, abstract_args) -> tuple[list | None, dict]:
  """(the failing application's own arguments, the range of each array leaf's values),
  while its call is on the stack: the first point checks use, where the user's program
  is known to run, and the domain the others are drawn in; (None, {}) where not known."""
  found = applied.values(site)
  flat, tree = jax.tree_util.tree_flatten(tuple(abstract_args),
                                          is_leaf=lambda x: isinstance(x, Weak))
  if found is None or found[0] != tree:
    return None, {}
  values, domains = [], {}
  for j, (leaf, value) in enumerate(zip(flat, found[1])):
    if not isinstance(leaf, jax.ShapeDtypeStruct):
      values.append(leaf.get() if isinstance(leaf, Weak) else leaf)
      continue
    if value is None or tuple(value.shape) != tuple(leaf.shape) or value.dtype != leaf.dtype:
      return None, {}
    values.append(value)
    if value.size and jnp.issubdtype(value.dtype, jnp.number) and \
        not jnp.issubdtype(value.dtype, jnp.complexfloating):
      domains[j] = (float(jnp.min(value)), float(jnp.max(value)))
  return jax.tree_util.tree_unflatten(tree, values), domains


def draw_args(site, abstract_args, rng, positive: bool, bounds: dict,
               domains: dict | None = None) -> list:
  """Random values of every argument: nondiff arrays too, callables resolved; in the
  range of the user's own values where known (``domains``)."""
  flat, tree = jax.tree_util.tree_flatten(abstract_args, is_leaf=lambda x: isinstance(x, Weak))
  drawn = []
  for j, leaf in enumerate(flat):
    if isinstance(leaf, Weak):
      fn = leaf.get()
      if fn is None:
        raise ValueError("a callable argument of the failing call no longer exists")
      drawn.append(fn)
    elif isinstance(leaf, jax.ShapeDtypeStruct):
      drawn.append(draw_like(leaf, rng, positive, bounds.get(j), (domains or {}).get(j)))
    else:
      drawn.append(leaf)
  return jax.tree_util.tree_unflatten(tree, drawn)


def ct_struct(out):
  """The cotangent type of a primal output: float0 for integer and boolean outputs."""
  return jax.ShapeDtypeStruct(out.shape, core.primal_dtype_to_tangent_dtype(out.dtype))


def draw_like(struct, rng, positive: bool = False, bound: int | None = None,
               domain: tuple[float, float] | None = None):
  dtype = np.dtype(struct.dtype)
  if dtype == jax.dtypes.float0:
    return np.zeros(struct.shape, jax.dtypes.float0)
  if jnp.issubdtype(dtype, jnp.bool_):
    return jnp.asarray(rng.random(struct.shape) < 0.5)
  if jnp.issubdtype(dtype, jnp.integer):
    lo, hi = (int(domain[0]), int(domain[1]) + 1) if domain else (0, 2)
    hi = min(hi, bound) if bound else hi
    return jnp.asarray(rng.integers(min(lo, hi - 1), hi, struct.shape), dtype)
  if domain is not None and domain != (0.0, 0.0):
    values = _around(rng, struct.shape, *domain)
  else:
    values = rng.uniform(0.25, 2.0, struct.shape) if positive else rng.standard_normal(struct.shape)
  if jnp.issubdtype(dtype, jnp.complexfloating):
    values = values + 1j * rng.standard_normal(struct.shape)
  return jnp.asarray(values, dtype)


def _around(rng, shape, lo: float, hi: float):
  """Random values with the sign the user's lie in, over a range around theirs."""
  if lo >= 0:
    return rng.uniform(lo / 2, 2 * hi, shape)
  if hi <= 0:
    return rng.uniform(2 * lo, hi / 2, shape)
  return rng.standard_normal(shape) * max(-lo, hi)


def pullback(site: RuleSite, fun, args, ct):
  """The cotangents JAX's autodiff of the primal gives its differentiable arguments."""
  positions = differentiable_positions(site, len(args))
  return vjp_wrt(fun, args, positions)[1](ct)


def differentiable_positions(site: RuleSite, n_args: int) -> list[int]:
  nondiff = {i for i, _ in site.nondiff}
  return [i for i in range(n_args) if i not in nondiff]


def on_host(x):
  """float64 numpy of a cotangent leaf; None for float0 (an integer input's)."""
  if getattr(x, "dtype", None) == jax.dtypes.float0:
    return None
  return np.asarray(x, np.complex128 if np.iscomplexobj(x) else np.float64)


def _run_rule(site, args_ct, fwd, bwd, symbolic_zeros, perturbed):
  """The rule's cotangents at one draw ``(args, output cotangent)``."""
  args, ct = list(args_ct[0]), args_ct[1]
  given = list(args)
  positions = differentiable_positions(site, len(args))
  if symbolic_zeros:
    leaves, tree = jax.tree_util.tree_flatten([args[i] for i in positions])
    flags = perturbed or (True,) * len(leaves)
    boxed = jax.tree_util.tree_unflatten(
        tree, [cd.CustomVJPPrimal(a, p) for a, p in zip(leaves, flags)])
    for i, b in zip(positions, boxed):
      args[i] = b
  _, res = fwd(*args)
  nondiff = [given[i] for i in sorted(i for i, _ in site.nondiff)]
  return bwd(*nondiff, res, custom_rules.replayed_ct(site, ct) if symbolic_zeros else ct)


def _shapes(fun, args):
  """``jax.eval_shape(fun, *args)`` with callables and Python data among ``args`` held fixed."""
  leaves, tree, dyn = _arrays(args)

  def run(arrays):
    full = trees.substituted(leaves, dyn, arrays)
    return fun(*jax.tree_util.tree_unflatten(tree, full))
  return jax.eval_shape(run, [leaves[i] for i in dyn])


def _arrays(example):
  """``example``'s leaves, tree, and the indices of the leaves that are arrays."""
  leaves, tree = jax.tree_util.tree_flatten(example, is_leaf=_none_or_zero)
  dyn = [i for i, l in enumerate(leaves) if isinstance(l, (jax.Array, np.ndarray))
         and l.dtype != jax.dtypes.float0]
  return leaves, tree, dyn


def compiled_run(fn, example):
  """``fn(x)`` for ``x`` shaped like ``example``, compiled once over its arrays (everything
  else, callables and Python data, stays as in ``example``); eagerly if it cannot be jitted.

  One XLA compilation of the whole rule, where running it eagerly compiles each of its
  primitives on a cold process (seconds, against the 1 s that ranking fixes may take).
  """
  leaves, tree, dyn = _arrays(example)

  def run(arrays):
    full = trees.substituted(leaves, dyn, arrays)
    out = fn(jax.tree_util.tree_unflatten(tree, full))
    return jax.tree_util.tree_map(lambda x: None if _none_or_zero(x) else x, out,
                                  is_leaf=_none_or_zero)
  jitted = None

  def call(x):
    nonlocal jitted
    arrays = [l for i, l in enumerate(jax.tree_util.tree_leaves(x, is_leaf=_none_or_zero))
              if i in dyn]
    try:
      jitted = jitted or _constants_as_arguments(run, arrays)
      return replay.run(jitted, arrays)
    except replay.NotJudged:
      raise
    except Exception:  # noqa: BLE001 - Python control flow on values: run it as written
      return replay.run(fn, x)
  return call


def _constants_as_arguments(run, arrays):
  """``jax.jit(run)`` at ``arrays``' types, the arrays ``run`` closes over (the user's
  callables' weights, their closures' arrays) passed to the compiled program as arguments.

  ``jax.jit`` makes them constants of the program: it reads each to the host and copies
  it into the HLO, at every compilation, and on JAX 0.9 and 0.10 that read leaves a
  second ``jax.Array`` on the array's buffer for as long as the array lives (JAX's own
  caches keep a nondiff callable of a jax_custom_vjp3 rule, and what it closes over).
  """
  out_tree = []

  def flat(x):   # its output flattened here: JAX's own unflattening of the shapes
    leaves, tree = jax.tree_util.tree_flatten(run(x))   # would build user pytrees of
    out_tree.append(tree)                               # non-arrays (JAX 0.6's OutInfo)
    return leaves
  closed = replay.rewrite(jax.make_jaxpr(flat)(arrays))
  program = jax.jit(lambda consts, args: core.eval_jaxpr(
      closed.jaxpr, consts, *jax.tree_util.tree_leaves(args)))
  return lambda args: jax.tree_util.tree_unflatten(out_tree[0], program(closed.consts, args))


def _aligned(site: RuleSite, cts) -> tuple[tuple, frozenset]:
  """(``cts`` as a tuple of one cotangent per argument, the input leaves it has none for):
  a bare array for a one-argument rule wrapped, entries missing at the end added as None,
  extra ``None`` entries dropped. What a rule that cannot run as written still says about
  the inputs it does give cotangents for."""
  n_args = len(site.in_tree.children())
  cts = tuple(cts) if isinstance(cts, (tuple, list)) else (cts,)
  while len(cts) > n_args and cts[-1] is None:
    cts = cts[:-1]
  slices = trees.arg_slices(site.in_tree)
  missing = frozenset(i for s in slices[len(cts):] for i in range(s.start, s.stop))
  return cts + (None,) * (n_args - len(cts)), missing


def _flatten_cts(site: RuleSite, cts, strict: bool = True) -> list:
  """``cts`` per input leaf, as float64 numpy; zeros for None and symbolic zeros.
  ``strict``: each of the expected type (else of its shape, whatever its dtype)."""
  if isinstance(cts, list):
    cts = tuple(cts)
  n_args = len(site.in_tree.children())
  if not isinstance(cts, tuple) or len(cts) != n_args:
    raise _TypeMismatch(f"the rule returns {type(cts).__name__} where {n_args} "
                        "cotangent(s) are due")
  flat = custom_rules.match_structure(site, cts)
  if isinstance(flat, records.Record):
    raise _TypeMismatch(f"the rule's cotangents have another structure: {flat.detail}"[:300])
  out = []
  for i, (ct, primal) in enumerate(zip(flat, site.in_avals)):
    want = avals.ct_aval(primal)
    if want.dtype == jax.dtypes.float0:
      out.append(None)
      continue
    if ct is None or isinstance(ct, (cd.SymbolicZero, cd.Zero)):
      out.append(np.zeros(want.shape))
      continue
    got = core.typeof(ct)
    if tuple(got.shape) != tuple(want.shape) or (strict and got.dtype != want.dtype):
      raise _TypeMismatch(f"{site.in_names[i]}'s cotangent is {got.str_short()}, "
                          f"not {want.str_short()}")
    out.append(on_host(ct))
  return out


def _none_or_zero(x) -> bool:
  return x is None or isinstance(x, (cd.SymbolicZero, cd.Zero))


# --------------------------------------------------------------- comparing

def compare(i: int, name: str, reference, got, primal) -> LeafError:
  """One leaf's ``got`` against ``reference`` (numpy), by ``primal``'s dtype tolerance,
  where the reference is finite: how a rewrite of a program is judged against the original."""
  return leaf_error(i, name, [on_host(reference)], [on_host(got)], primal, judged=True)


def computed_rtol(traced: TracedPrimal) -> float:
  """The tolerance of the lowest floating precision the primal computes in (a bfloat16
  matmul inside a float32 function): its own derivative carries that rounding, and so
  does any right rule (0 without a jaxpr: the inputs' dtypes decide)."""
  return _jaxpr_rtol(traced.jaxpr) if traced.jaxpr is not None else 0.0


def _jaxpr_rtol(jaxpr) -> float:
  dtypes = {str(v.aval.dtype) for v in _outvars(jaxpr) if hasattr(v.aval, "dtype")}
  return max((RTOL[d] for d in dtypes if d in RTOL), default=0.0)


def rule_rtol(fn, example) -> float:
  """The tolerance of the lowest precision a rule computes in (a bwd computing in float16
  and casting back carries float16 rounding, whatever dtype it returns); 0 where the
  rule cannot be traced (its output dtypes then decide)."""
  leaves, tree, dyn = _arrays(example)

  def run(arrays):
    full = trees.substituted(leaves, dyn, arrays)
    return fn(jax.tree_util.tree_unflatten(tree, full))
  try:
    return _jaxpr_rtol(jax.make_jaxpr(run)([leaves[i] for i in dyn]).jaxpr)
  except Exception:  # noqa: BLE001 - Python control flow on values
    return 0.0


def _outvars(jaxpr):
  for eqn in jaxpr.eqns:
    yield from eqn.outvars
    for sub in core.jaxprs_in_params(eqn.params):
      yield from _outvars(sub)


def leaf_error(i, name, refs, gots, primal, judged: bool, floor: float = 0.0) -> LeafError:
  dtype = str(avals.ct_aval(primal).dtype)
  if jax.dtypes.float0 == avals.ct_aval(primal).dtype:   # an integer input has no gradient
    return LeafError(i, name, 0.0, 0.0, (), True, True)
  pairs = [(r, g) for r, g in zip(refs, gots) if r is not None and g is not None]
  if not any(np.isfinite(r).any() or not r.size for r, _ in pairs):   # outside its domain
    return LeafError(i, name, 0.0, 0.0, (), True, True, judged=False, ok=True)
  worst, where, scale, at = 0.0, (), 0.0, (0.0, 0.0)
  for r, g in pairs:
    known = np.isfinite(r)          # a stable rule may be finite where autodiff is not
    abs_difference = np.where(known, np.abs(g - np.where(known, r, 0)), 0)
    scale = max(scale, float(np.max(np.abs(np.where(known, r, 0)), initial=0.0)))
    if abs_difference.size and float(np.max(abs_difference)) > worst:
      worst = float(np.max(abs_difference))
      k = np.unravel_index(int(np.argmax(abs_difference)), abs_difference.shape)
      where = tuple(int(j) for j in k)
      at = (float(np.real(r[k])), float(np.real(g[k])))
  rtol = max(RTOL.get(dtype, 1e-4), floor)
  ok = worst <= rtol * scale + rtol * 1e-2
  return LeafError(i, name, worst, worst / scale if scale else math.inf if worst else 0.0,
                   where, reference_zero=scale == 0.0,
                   got_zero=all(not np.any(g) for _, g in pairs), judged=judged,
                   ok=ok or not judged, reference_at=at[0], got_at=at[1], scale=scale)


def _compare_directional(oracle: Oracle, outs) -> list[LeafError]:
  """Per input leaf: <rule ct, v> against the central difference of <ct, f> along v."""
  site = oracle.site
  leaves = []
  rng = np.random.default_rng(1)
  for i, name in enumerate(site.in_names):
    errs, scale, got_zero = [], 0.0, True
    for draw, out in zip(oracle.draws, outs):
      if out[i] is None:
        continue
      v = rng.standard_normal(out[i].shape)
      fd = _central_difference(site, oracle.fun, draw, i, v)
      if fd is None or not math.isfinite(fd):   # outside the primal's domain: no judge
        continue
      ad = float(np.real(np.vdot(out[i], v)))
      errs.append(abs(ad - fd))
      scale = max(scale, abs(fd))
      got_zero = got_zero and not np.any(out[i])
    if not errs:
      leaves.append(LeafError(i, name, 0.0, 0.0, (), True, True, judged=False))
      continue
    worst = max(errs)
    leaves.append(LeafError(i, name, worst, worst / scale if scale else 0.0, (),
                            reference_zero=scale == 0.0, got_zero=got_zero,
                            ok=worst <= _FD_RTOL * max(scale, 1e-3), scale=scale))
  return leaves


def _central_difference(site, fun, draw: _Draw, leaf: int, v) -> float | None:
  """d/de <ct, f(x + e v)> at e = 0, perturbing input leaf ``leaf`` only."""
  args = list(draw.args)
  positions = differentiable_positions(site, len(args))
  differentiable = tuple(args[i] for i in positions)
  flat, tree = jax.tree_util.tree_flatten(differentiable)
  x = np.asarray(flat[leaf], np.float64)
  eps = 1e-3 * max(1.0, float(np.max(np.abs(x), initial=0.0)))

  def value(sign):
    moved = list(flat)
    moved[leaf] = jnp.asarray(x + sign * eps * v, flat[leaf].dtype)
    full = trees.substituted(args, positions, jax.tree_util.tree_unflatten(tree, moved))
    out = replay.run(fun, *full)
    return sum(float(np.real(np.vdot(np.asarray(c, np.float64), np.asarray(o, np.float64))))
               for c, o in zip(jax.tree_util.tree_leaves(draw.ct), jax.tree_util.tree_leaves(out))
               if getattr(c, "dtype", None) != jax.dtypes.float0)
  try:
    return (value(1) - value(-1)) / (2 * eps)
  except Exception:  # noqa: BLE001 - a primal that cannot run off its draw gets no judge
    return None


# ------------------------------------------------ what the primal tells us

class TracedPrimal:
  """The primal's jaxpr at the call's abstract arguments, traced once when first asked
  (None where it cannot be traced: what it would tell is then not known).

  Its inputs are the array leaves alone, in flattened order; the rest (nondiff values,
  callables) stay static, as in the user's call. The arguments are rebuilt inside the
  traced function, so the user's pytree types are unflattened with tracers only, as
  JAX does (make_jaxpr of the pytrees themselves hands JAX 0.6's ArgInfo to them).
  """

  def __init__(self, fun, abstract_args):
    self.fun, self.abstract_args = fun, abstract_args

  @functools.cached_property
  def jaxpr(self):
    flat, tree = jax.tree_util.tree_flatten(self.abstract_args,
                                            is_leaf=lambda x: isinstance(x, Weak))
    arrays = [j for j, leaf in enumerate(flat) if isinstance(leaf, jax.ShapeDtypeStruct)]

    def primal(*leaves):
      full = [leaf.get() if isinstance(leaf, Weak) else leaf for leaf in flat]
      for j, leaf in zip(arrays, leaves):
        full[j] = leaf
      return self.fun(*jax.tree_util.tree_unflatten(tree, full))
    try:
      return jax.make_jaxpr(primal)(*[flat[j] for j in arrays]).jaxpr
    except Exception:  # noqa: BLE001
      return None


def index_bounds(traced: TracedPrimal) -> dict[int, int]:
  """For integer argument leaves: the size of what the primal indexes or compares them with.

  Labels and indices must be drawn in range, or both the rule and autodiff see
  out-of-bounds gathers (clamped or dropped) and agree on nothing useful.
  """
  flat, tree = jax.tree_util.tree_flatten(traced.abstract_args,
                                          is_leaf=lambda x: isinstance(x, Weak))
  ints = [j for j, l in enumerate(flat) if isinstance(l, jax.ShapeDtypeStruct)
          and jnp.issubdtype(l.dtype, jnp.integer)]
  if not ints or traced.jaxpr is None:   # without a jaxpr, draws fall back to {0, 1}
    return {}
  arrays = [j for j, l in enumerate(flat) if isinstance(l, jax.ShapeDtypeStruct)]
  invars = dict(zip(traced.jaxpr.invars, arrays))
  bounds = {}
  for var, j in invars.items():
    if j in ints:
      found = _bound(traced.jaxpr, var)
      if found:
        bounds[j] = found
  return bounds


def _unchanged_outputs(traced: TracedPrimal) -> frozenset[int]:
  """The primal's output leaves that are one of its inputs, unchanged (through calls);
  none known without a jaxpr (every output then gets a cotangent)."""
  return frozenset(_passed_through(traced.jaxpr)) if traced.jaxpr is not None else frozenset()


def _passed_through(jaxpr) -> dict[int, int]:
  """output position -> input position, for each output that is an input unchanged."""
  origin = {v: i for i, v in enumerate(jaxpr.invars)}
  for eqn in jaxpr.eqns:
    subs = list(core.jaxprs_in_params(eqn.params))
    if len(subs) != 1 or len(subs[0].invars) != len(eqn.invars) or \
        len(subs[0].outvars) != len(eqn.outvars):
      continue
    for o, i in _passed_through(subs[0]).items():
      v = eqn.invars[i]
      if isinstance(v, core.Var) and v in origin:
        origin[eqn.outvars[o]] = origin[v]
  return {k: origin[v] for k, v in enumerate(jaxpr.outvars)
          if isinstance(v, core.Var) and v in origin}


def _bound(jaxpr, var) -> int | None:
  """The smallest size ``var`` (or what derives from it) indexes or is compared against."""
  derived, best = {var}, None
  iotas = {e.outvars[0]: e.params.get("shape", (0,)) for e in jaxpr.eqns
           if e.primitive.name == "iota"}
  for eqn in jaxpr.eqns:
    touching = [v for v in eqn.invars if isinstance(v, core.Var) and v in derived]
    if not touching:
      continue
    name = eqn.primitive.name
    sizes = []
    if name in _INDEXING:
      sizes = [d for d in eqn.invars[0].aval.shape if d > 0]
    elif name in COMPARISONS:
      sizes = [max(iotas[v]) for v in eqn.invars if isinstance(v, core.Var) and v in iotas]
    for sub in core.jaxprs_in_params(eqn.params):
      for outer, inner in zip(eqn.invars, sub.invars):
        if isinstance(outer, core.Var) and outer in derived:
          found = _bound(sub, inner)
          sizes += [found] if found else []
    if sizes:
      best = min([best, *sizes]) if best else min(sizes)
    if name in _PASS_THROUGH:
      derived.update(eqn.outvars)
  return best


def _flat_leaves(site, traced: TracedPrimal, draws) -> tuple[frozenset, str]:
  """Input leaves whose reference is zero (or not finite) at every draw although the
  output depends on them: the primal is piecewise constant there (sign, round,
  comparisons, argmax, a quantiser), and a non-zero rule is a surrogate."""
  zero = {i for i in range(len(site.in_paths))
          if all(d.reference is not None and (d.reference[i] is None or not np.any(
              np.isfinite(d.reference[i]) & (d.reference[i] != 0))) for d in draws)}
  if not zero or traced.jaxpr is None:
    return frozenset(), ""
  invars = _differentiable_invars(site, traced)
  reaching = _reaching(traced.jaxpr)
  flat = frozenset(i for i in zero if i < len(invars) and invars[i] in reaching)
  if not flat:
    return frozenset(), ""
  named = sorted(primitives_of(traced.jaxpr) & (FLAT_PRIMITIVES | COMPARISONS))
  how = f" ({', '.join(named)})" if named else ""
  return flat, (f"{site.function}'s derivative is zero at every draw for "
                f"{', '.join(site.in_names[i] for i in sorted(flat))} although its output "
                f"depends on it{how}: autodiff cannot judge a surrogate gradient")


def _differentiable_invars(site, traced: TracedPrimal) -> list[int]:
  """For each differentiable input leaf, its position among the traced jaxpr's inputs."""
  nondiff, positions, k = {i for i, _ in site.nondiff}, [], 0
  for i, arg in enumerate(traced.abstract_args):
    leaves = jax.tree_util.tree_leaves(arg, is_leaf=lambda x: isinstance(x, Weak))
    n = sum(1 for l in leaves if isinstance(l, jax.ShapeDtypeStruct))
    positions += [] if i in nondiff else list(range(k, k + n))
    k += n
  return positions


def _reaching(jaxpr) -> set[int]:
  """Positions of the inputs some output depends on (an equation's outputs on all its inputs)."""
  live = {v for v in jaxpr.outvars if isinstance(v, core.Var)}
  for eqn in reversed(jaxpr.eqns):
    if any(o in live for o in eqn.outvars):
      live.update(v for v in eqn.invars if isinstance(v, core.Var))
  return {k for k, v in enumerate(jaxpr.invars) if v in live}


def _not_finite(leaves) -> str:
  names = ", ".join(f"`{l.name}`" for l in leaves if not l.judged)
  return (f"not judged: the primal's derivative for {names} is not finite at the draws "
          "(outside its domain), so it cannot say whether the rule is right")


def primitives_of(jaxpr) -> set[str]:
  found = set()
  for eqn in jaxpr.eqns:
    found.add(eqn.primitive.name)
    for sub in core.jaxprs_in_params(eqn.params):
      found |= primitives_of(sub)
  return found


@contextlib.contextmanager
def eagerly_aside():
  """The hook stands aside while the oracle runs the user's rules and primal, eagerly even
  when the error was found inside a trace (``vjpviz.check`` diagnoses under eval_shape)."""
  with records.suspended(), core.eval_context(), replay.quiet():
    yield
