"""``%vjpviz values on``: each later VJP diagnosis carries its backward pass's values.

Opt-in: while on, each eager ``jax.vjp`` (``jax.grad``) remembers its call by weak
references only, so no array lives longer for it (a call whose arrays are gone is not
measured). When the hook diagnoses that VJP's backward pass (a wrong cotangent type,
a warning), the pass is re-run eagerly at the same inputs, equation by equation, with
ones as the output cotangent (jax.grad's), each edge's cotangent reduced to its norm
and NaN/Inf counts as it is made (``nonfinite.measure``), as far as it runs: the rule
that raised ends it, so the cotangents that reached it are shown. The graph's edges
carry them (the overlay ``vv.nans`` draws) and a stacked model's per-layer strip.
The pass is vjpviz's own run after the error (``analysis.values.replay``): within the failing
call's budget, quiet, without the program's effects; not judged, the graph has no values.
"""
from __future__ import annotations

import dataclasses
import weakref

import jax

from ..capture import records
from ..capture.compat.private import core
from ..api import pipeline
from ..analysis.values import flows, nonfinite, replay
from ..analysis.diagnosis import Diagnosis
from ..base import hosts
from ..capture.sites import entry_points


class EagerCalls:
  """Each eager jax.vjp's call, weakly: ``(fun, args, kwargs)`` with its arrays as weak
  references, under the VJP's jaxpr (dropped with it)."""

  def __init__(self):
    self.calls: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

  def vjp(self, fun, args, kwargs, diff_argnums, has_aux, f_vjp) -> None:
    jaxpr = getattr(f_vjp, "jaxpr", None)
    leaves, tree = jax.tree_util.tree_flatten((tuple(args), kwargs))
    if jaxpr is None or any(isinstance(x, core.Tracer) for x in leaves):
      return
    self.calls[jaxpr] = (tree, [_weak(x) for x in leaves])

  def call_of(self, origin):
    """The live leaves of the call whose VJP ``origin`` describes, or None."""
    for jaxpr, (tree, refs) in list(self.calls.items()):
      if entry_points.origin_of(jaxpr) is origin:
        leaves = [r() for r in refs]
        return None if any(x is None for x in leaves) else jax.tree_util.tree_unflatten(tree, leaves)
    return None


def _weak(x):
  try:
    return weakref.ref(x)
  except TypeError:             # a Python number or None: no buffer to keep alive
    return lambda: x


_calls: EagerCalls | None = None


def on() -> None:
  global _calls
  if _calls is None:
    _calls = EagerCalls()
    entry_points.vjp_finished.add(_calls.vjp)
    pipeline.before_delivery.add(decorate)


def off() -> None:
  global _calls
  if _calls is not None:
    entry_points.vjp_finished.discard(_calls.vjp)
    pipeline.before_delivery.discard(decorate)
    _calls = None


def enabled() -> bool:
  return _calls is not None


def decorate(d: Diagnosis, session) -> Diagnosis:
  """``d`` with its graph's edges carrying the values its backward pass had, when its
  call is still alive and ``d`` has none yet (``vv.nans`` measured its own)."""
  call = _calls.call_of(session.origin) if _calls and session.origin is not None else None
  if call is None or d.cotangents.get("edges") or hosts.any_spans(call):
    return d   # (a call spanning processes: re-running it would be a collective of ours alone)
  try:
    with records.suspended(), replay.replaying(capped=False):   # the call's own values: its loops end
      jaxpr, invals, active, out_cts = flows.program_inputs(session.origin, call)
      del call
      edges, measured, whole = nonfinite.measure(jaxpr, invals, active, out_cts)
  except replay.NotJudged:   # out of time, or an effect whose result the program uses
    return d
  del invals
  arrays = [j for j, leaf in enumerate(session.origin.leaves)
            if isinstance(leaf, core.AbstractValue)]
  differentiated = [measured[arrays.index(j)] for j in session.origin.differentiated_leaves
                    if j in arrays]
  strip = nonfinite.strip(flows.input_names(d.graph, session.origin), differentiated)
  graph = dataclasses.replace(flows.mark_flows(d.graph, edges), strip=strip)
  return dataclasses.replace(d, graph=graph, cotangents={
      **flows.flow_dicts(edges, strip), "complete": whole})
