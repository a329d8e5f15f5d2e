"""A long flat level run block by block: the blocks a loop of the user's unrolled into it.

A Python loop over layers under ``jit`` leaves one flat jaxpr in which the same few dozen
equations stand again for every layer. Run equation by equation, every distinct
primitive and shape costs XLA a compile on first use (tens of milliseconds each: most
of a first search's time). Cut at a signature that recurs with one period, the level
falls into blocks; blocks alike in every primitive, param, type and wire are one
computation, compiled once and called for each. The rest runs as before. A jit inside a
block is not run inline: its values are computed only if the search goes inside it.
"""
from __future__ import annotations

import collections
from collections.abc import Callable

import jax
import numpy as np

from ...capture.compat.private import core
from .nonfinite_eval import hashable_params
from .replay import bind

MIN_REPEATS = 3        # a block compiled pays for itself only when called this often
LOOP_SHARE = 2 / 3     # of the blocks alike to others: then the rest are compiled too


def blocks(eqns) -> dict[int, tuple]:
  """``{start: (end, key)}`` for the blocks of ``eqns`` to run compiled (``key``: alike
  blocks share it): cut at the places of the signature that recurs most evenly, those
  alike ``MIN_REPEATS`` times or more; and when most blocks are such (the level is an
  unrolled loop), the ones that differ too (the one layer unlike the rest: compiled once
  where equation by equation would compile each of its primitives). Equations before the
  first cut and after the last, and blocks with an effect, are in none."""
  if len(eqns) < 2 * MIN_REPEATS:
    return {}
  sigs = [_signature(e) for e in eqns]
  cuts = _period_cuts(sigs)
  found = {}
  for start, end in zip(cuts, cuts[1:]):
    key = _key(eqns[start:end], sigs[start:end])
    if key is not None:
      found[start] = (end, key)
  alike = collections.Counter(key for _, key in found.values())
  repeated = sum(n for n in alike.values() if n >= MIN_REPEATS)
  loop = repeated >= LOOP_SHARE * len(found)
  return {s: (e, k) for s, (e, k) in found.items() if loop or alike[k] >= MIN_REPEATS}


def run(eqns, key, read: Callable, compiled: dict) -> list:
  """Every output of the block ``eqns`` (equation by equation, in order), its operands
  made outside it read with ``read``: ``compiled`` (one level's run: the blocks' params
  may hold the user's closures and arrays, which must not outlive it) keeps one jitted
  evaluator per ``key``, of the first block seen with it, called for every alike block."""
  outer = _external(eqns)
  fn = compiled.get(key)
  if fn is None:
    fn = compiled[key] = jax.jit(_evaluator(list(eqns), outer))
  return fn(*[read(v) for v in outer])


def _evaluator(eqns, outer) -> Callable:
  def run(*args):
    env = dict(zip(outer, args))
    read = lambda v: v.val if isinstance(v, core.Literal) else env[v]
    outs = []
    for eqn in eqns:
      got = bind(eqn, list(map(read, eqn.invars)))   # a loop capped on vjpviz's own runs
      env.update(zip(eqn.outvars, got))
      outs.extend(got)
    return outs
  return run


def _external(eqns) -> list:
  """The block's operands made outside it, in order of first use."""
  made = {v for e in eqns for v in e.outvars}
  return list(dict.fromkeys(v for e in eqns for v in e.invars
                            if isinstance(v, core.Var) and v not in made))


def _signature(eqn):
  """What makes two equations the same computation (a body by identity: JAX traces a
  jitted library function once per type), or None: one with an effect (run as before),
  or params that do not hash."""
  params = hashable_params(eqn)
  if eqn.effects or params is None:
    return None
  return (eqn.primitive, params, tuple(_type(v) for v in (*eqn.invars, *eqn.outvars)))


def _type(v):
  aval = v.aval
  return (type(aval), getattr(aval, "shape", None), getattr(aval, "dtype", None),
          getattr(aval, "weak_type", None))


def _period_cuts(sigs) -> list[int]:
  """Where blocks start: the places of the signature that recurs most evenly (every gap
  between its places the same), covering the most equations; and the end of the last."""
  places = collections.defaultdict(list)
  for i, s in enumerate(sigs):
    if s is not None:
      places[s].append(i)
  best, cover = [], 0
  for at in places.values():
    if len(at) < MIN_REPEATS:
      continue
    gaps = collections.Counter(np.diff(at).tolist())
    gap, n = gaps.most_common(1)[0]
    if n + 1 >= MIN_REPEATS and gap * (n + 1) > cover:
      best, cover = at, gap * (n + 1)
  if not best:
    return []
  gap = collections.Counter(np.diff(best).tolist()).most_common(1)[0][0]
  return [*best, min(best[-1] + gap, len(sigs))]


def _key(eqns, sigs):
  """The block's computation as a hashable value: each equation's signature and where
  each operand comes from (outside, by first use; an earlier output; a literal)."""
  if any(s is None for s in sigs):
    return None
  outer = {v: k for k, v in enumerate(_external(eqns))}
  made, wires = {}, []
  for i, eqn in enumerate(eqns):
    for v in eqn.invars:
      if isinstance(v, core.Literal):
        wires.append(("lit", np.asarray(v.val).tobytes(), _type(v)))
      elif v in made:
        wires.append(("made", made[v]))
      else:
        wires.append(("in", outer[v]))
    made.update((v, (i, j)) for j, v in enumerate(eqn.outvars))
  return tuple(sigs), tuple(wires)
