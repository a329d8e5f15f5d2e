"""Where a parameter's units die: the line of the mask that zeroes whole units.

``vv.grads`` reports a leaf whose gradient is zero in whole rows or columns only (a relu
some of whose units no example activates) as partly zero; ``grad_paths`` explains a leaf
whose gradient is zero everywhere. Here, on the forward values, the mask those units die
at: the first one the leaf's values reach whose result is zero in whole units for the
whole batch, or the one that made a factor's dead units, where the leaf multiplies it.
"""
from __future__ import annotations

import numpy as np

from ...capture.compat.private import core
from ..program import eqn_id, sub_jaxprs
from .grad_paths import MASKS, PASS, PRODUCTS, Cut, inside_kinds, op_name, producers
from .nonfinite import eqn_source
from .nonfinite_eval import CALLS


def unit_cuts(jaxpr: core.Jaxpr, env: dict, wanted: list[int]) -> dict[int, Cut]:
  """For inputs whose gradient is zero in whole units (rows, columns) only: the first mask
  their values reach (program order, through the bodies of calls) whose result is zero in
  whole units for the whole batch (a relu whose units no example activates): where those
  units die. ``env``: the forward values (``nonfinite.forward``)."""
  found: dict[int, Cut] = {}
  _unit_level(jaxpr, None, env, {jaxpr.invars[i]: {i} for i in wanted}, found, None)
  return found


def _unit_level(jaxpr, prefix, env, reached, found, outer) -> None:
  made = None
  for k, eqn in enumerate(jaxpr.eqns):
    hit = set().union(*[reached.get(v, ()) for v in eqn.invars if isinstance(v, core.Var)])
    hit -= set(found)
    if not hit:
      continue
    nid, where = eqn_id(prefix, k), eqn_source(eqn) or outer
    if eqn.primitive.name in CALLS and isinstance(env.get(k), dict):
      body = next(sub_jaxprs(eqn))
      _unit_level(body, nid, env[k], {b: reached.get(v, set()) & hit for b, v in
                                      zip(body.invars, eqn.invars) if isinstance(v, core.Var)},
                  found, where)
    elif ((op_name(eqn) in MASKS or "dead" in inside_kinds(eqn))
          and any(_dead_units(env.get(v)) for v in eqn.outvars)):
      for i in hit:
        found[i] = Cut("dead", nid, op_name(eqn), where)
      continue
    elif eqn.primitive.name in PRODUCTS:   # times a factor whose units died before: that mask
      made = made or producers(jaxpr)
      cut = next(filter(None, (_dead_before(u, made, env, prefix, outer) for u in eqn.invars
                               if isinstance(u, core.Var) and not reached.get(u))), None)
      if cut is not None:
        for i in hit:
          found[i] = cut
        continue
    for v in eqn.outvars:
      reached.setdefault(v, set()).update(hit)


def _dead_before(v, made: dict, env: dict, prefix, outer, hops: int = 8) -> Cut | None:
  """The mask that made ``v``'s dead units, through reshapes and casts at this level."""
  if not _dead_units(env.get(v)):
    return None
  for _ in range(hops):
    if v not in made:
      return None
    k, producer = made[v]
    name = op_name(producer)
    if name in MASKS or "dead" in inside_kinds(producer):
      return Cut("dead", eqn_id(prefix, k), name, eqn_source(producer) or outer)
    if name not in PASS:
      return None
    v = producer.invars[0]
  return None


def _dead_units(x) -> bool:
  """Whether ``x`` [batch..., units] is zero in some unit for every example."""
  try:
    x = np.asarray(x)
    return x.ndim >= 2 and bool(np.any(np.all(x == 0, axis=tuple(range(x.ndim - 1)))))
  except Exception:  # noqa: BLE001 - a value we cannot read is not called dead
    return False
