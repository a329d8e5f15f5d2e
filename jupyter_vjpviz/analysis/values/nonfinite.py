"""Where a gradient first goes NaN or Inf: the equation whose backward rule did it.

The backward pass is re-run one level of the forward program at a time, only
where it matters: a level (the top, a jit's body, one iteration of a scan's
body) is run forwards and then differentiated equation by equation, eagerly,
each edge's cotangent reduced to a ``Flow`` (NaN/Inf counts, norm, max |value|)
as it is made. The first equation in backward order whose outputs' cotangents
are finite and whose inputs' are not is the culprit at that level, and the
level stops there: nothing upstream of it is differentiated. If it has a body
(jit, remat, cond, a scan: bisected to the first iteration that turns finite
into non-finite) the search goes on inside with that equation's own operands
and cotangents, which the eager run still holds. A custom rule's bwd (and a
while loop in it, iteration by iteration) is searched forwards for the first
of its operations that turned finite values non-finite: the line of the user's
bwd that divides by zero.

Eager, not compiled: a compiled level costs XLA a compile of every equation's
pullback at once (minutes at 4k equations), while eager dispatch compiles
each primitive once per shape and reuses it across layers; a nested jit is
still differentiated compiled, once per body (JAX caches it by jaxpr). The one
exception is the forward run of an unrolled loop: its alike blocks are compiled
once each (``repeated_blocks``), where eagerly each of their primitives would be.

Arrays live only while ``localise`` runs; what it returns holds numbers,
strings and the equation (for the fixes stage, which re-runs the gradient with
it rewritten); ``Diagnosis`` keeps none of them.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import re

import jax
import jax.numpy as jnp
import numpy as np

from ...base import hosts
from ...capture.compat.private import core
from ...capture.naming import frames
from . import repeated_blocks, replay
from .nonfinite_eval import (CALLS, Patch, bind, eqn_pullback, evaluate, flow, inexact, patched,
                             pullback, scan_groups, shard_bind, split)
from ..program import body_prefix, eqn_id, consts, opened, rule_call, sub_jaxprs


@dataclasses.dataclass(frozen=True)
class Flow:
  """What the overlay shows of one edge's cotangent: its size, NaN and Inf counts, the norm
  and max |value| of its finite elements."""
  size: int
  nan: int
  inf: int
  norm: float
  peak: float

  @property
  def finite(self) -> bool:
    return self.nan == 0 and self.inf == 0

  def bad(self) -> str:
    """``3 NaN, 1 Inf of 8 elements``."""
    parts = [f"{n} {w}" for n, w in ((self.nan, "NaN"), (self.inf, "Inf")) if n]
    return f"{', '.join(parts) or 'no NaN or Inf'} of {self.size} element{'s' * (self.size != 1)}"

  def to_dict(self) -> dict:
    return {k: (v if not isinstance(v, float) or math.isfinite(v) else None)
            for k, v in dataclasses.asdict(self).items()}

  @classmethod
  def of(cls, vec, size: int) -> Flow:
    nan, inf, sumsq, peak = (float(v) for v in np.asarray(vec))
    return cls(size, int(nan), int(inf), math.sqrt(sumsq), peak)

  @classmethod
  def joined(cls, found: list) -> Flow:
    return cls(sum(f.size for f in found), sum(f.nan for f in found),
               sum(f.inf for f in found), math.sqrt(sum(f.norm ** 2 for f in found)),
               max((f.peak for f in found), default=0.0))


@dataclasses.dataclass(frozen=True)
class Summary(Flow):
  """One array's values reduced: counts and magnitudes, never the values."""
  zero: int
  negative: int
  lo: float             # min and max of the finite elements
  hi: float

  @property
  def max_abs(self) -> float:
    return self.peak

  @classmethod
  def joined(cls, found: list[Summary]) -> Summary:
    flow = Flow.joined(found)
    return cls(*dataclasses.astuple(flow), sum(s.zero for s in found),
               sum(s.negative for s in found), min((s.lo for s in found), default=0.0),
               max((s.hi for s in found), default=0.0))


def summary(x) -> Summary:
  """``x`` summarised now, on the host (for explanations; ``x`` is one operand)."""
  x = hosts.host(x)
  x = np.real(x) if np.iscomplexobj(x) else x.astype(np.float64)
  ok = np.isfinite(x)
  fin = x[ok]
  lo, hi = (float(fin.min()), float(fin.max())) if fin.size else (0.0, 0.0)
  return Summary(int(x.size), int(np.isnan(x).sum()), int(np.isinf(x).sum()),
                 float(np.sqrt((fin ** 2).sum())), max(abs(lo), abs(hi)), int((x == 0).sum()),
                 int((x < 0).sum()), lo, hi)


@dataclasses.dataclass
class Culprit:
  """The equation whose backward rule first made a cotangent non-finite, and why."""
  node: str                         # graph node id (program.py's numbering)
  path: tuple                       # (equation, body) per level, for nonfinite_eval.Patch
  eqn: core.JaxprEqn = dataclasses.field(repr=False)
  level: core.Jaxpr = dataclasses.field(repr=False)   # the jaxpr holding ``eqn``
  operands: tuple[Summary | None, ...]   # each operand's primal values (None: not an array)
  ct_in: Summary                    # cotangent of its outputs (finite)
  ct_out: Flow                      # cotangent it produced for its operands (non-finite)
  source: str | None
  where: str = ""                   # "in iteration 37 of 100 of its scan"
  inner: tuple | None = None        # custom rules: (primitive, source, operand summaries,
                                    #   "in iteration 3 of its while loop" or "", the
                                    #   user's function there)
  unjudged: str = ""                # why its bwd rule was not searched inside ("not judged: ...")
  origin: Culprit | None = None     # the equation, at this level, that made a non-finite
                                    #   operand of this one from finite values (log at 0 in
                                    #   x * log(x)): the one a fix rewrites


@dataclasses.dataclass
class Localisation:
  culprit: Culprit | None
  edges: dict                       # "dst#position" -> Flow of that edge's cotangent
  iterations: list                  # per scan iteration searched: (node, t, norm, finite)
  frames: list = dataclasses.field(default_factory=list, repr=False)
  """The search's state where it stopped, innermost level first (``_Frame``): for the
  fixes' gradients to resume from instead of running the whole pass again; arrays, so
  this call's only."""


@dataclasses.dataclass
class _Frame:
  """One level's state when the search stopped in it at equation ``k`` (the culprit, or
  the jit whose body holds it): its values, and its cotangents then (``ct``: before ``k``
  added its own; ``undo``: per equation processed, newest last, what it changed)."""
  jaxpr: core.Jaxpr
  active: list
  env: dict
  ct: dict
  k: int
  undo: list


def localise(jaxpr: core.Jaxpr, args: list, active: list[bool], out_cts: list) -> Localisation:
  """Search the backward pass of ``jaxpr`` at ``args`` (differentiating the ``active``
  inputs, its outputs receiving ``out_cts``) for the first equation that goes non-finite."""
  search = _Search()
  found, _ = search.level(jaxpr, None, (), list(args), list(active), list(out_cts), "")
  return Localisation(found, search.edges, search.iterations, search.frames)


def measure(jaxpr: core.Jaxpr, args: list, active: list[bool], out_cts: list) -> tuple:
  """Every edge's cotangent in the backward pass of ``jaxpr``, not only on the path to a
  culprit, as far as it runs (a rule that raises, the error being diagnosed, ends it);
  the ``Flow`` of each input's cotangent (None: not reached, or not differentiated), and
  whether the pass ran to its end (else those are what reached the inputs by then)."""
  edges, got, complete = measured(jaxpr, args, active, out_cts)
  flows = [None if c is None else flow(c) for c in got]
  return edges, [None if f is None else Flow.of(f, int(np.size(x)))
                 for f, x in zip(flows, args)], complete


def measured(jaxpr: core.Jaxpr, args: list, active: list[bool], out_cts: list,
             env: dict | None = None) -> tuple:
  """``measure``'s pass keeping the inputs' cotangents themselves (None: zero); ``env``:
  the forward values already computed (``forward``), else it runs the forward itself."""
  search = _Search(stop=False)
  _, got = search.level(jaxpr, None, (), list(args), list(active), list(out_cts), "", env=env)
  return search.edges, got, not search.failed


def gradient(jaxpr: core.Jaxpr, args: list, active: list[bool], out_cts: list,
             patch: Patch | None = None) -> list:
  """The cotangents of the ``active`` inputs, ``patch`` applied: the search's own backward
  pass run to its end (its traced pullbacks reused), nothing measured on the way."""
  _, got = _Search(stop=False, record=False).level(jaxpr, None, (), list(args), list(active),
                                                   list(out_cts), "", patch=patch)
  return [jnp.zeros_like(x) if c is None else c
          for x, c, a in zip(args, got, active) if a]


def resumed(found: Localisation, patch: Patch) -> list | None:
  """The gradient with ``patch`` applied, resumed from where the search stopped: the
  forward run again only from the patched equation and only while its values differ
  (a ``where`` that discards them ends it), the backward from the last equation they
  reached, with the cotangents the search had there. None when that does not hold (the
  patch is not in the culprit's own level, its values reach the level's outputs, or
  change an equation the search never differentiated): run the whole ``gradient``."""
  if not found.frames or len(found.frames) != len(patch.path):
    return None
  inner, parents = found.frames[0], found.frames[1:]
  if any(f.jaxpr.eqns[f.k].primitive.name not in CALLS for f in parents):
    return None
  kp = patch.path[-1][0]
  here = Patch(((kp, 0),), patch.fn)
  env, last = _propagate(inner.jaxpr, inner.env, here)
  if last is None or last < inner.k:
    return None
  ct = dict(inner.ct)
  for k, before in reversed(inner.undo):   # back to what the search had before ``last``
    if k > last:
      break
    for v, old in before:
      ct.pop(v) if old is None else ct.__setitem__(v, old)
  search = _Search(stop=False, record=False)
  _, got = search.level(inner.jaxpr, None, (), None, inner.active, [], "", env=env,
                        patch=here, ct=ct, start=last)
  for f in parents:
    eqn, live = f.jaxpr.eqns[f.k], _active(f.jaxpr, f.active)
    ct = dict(f.ct)
    for v, c in zip(eqn.invars, got):
      if isinstance(v, core.Var) and v in live and c is not None:
        ct[v] = ct[v] + c if v in ct else c
    _, got = search.level(f.jaxpr, None, (), None, f.active, [], "", env=f.env, ct=ct,
                          start=f.k - 1)
  top = found.frames[-1]
  return [jnp.zeros_like(top.env[v]) if c is None else c
          for v, c, a in zip(top.jaxpr.invars, got, top.active) if a]


def _propagate(jaxpr, env: dict, patch: Patch) -> tuple[dict, int | None]:
  """``env`` with the patched equation's outputs and what they change after it, and the
  last equation whose operands changed (None: the level's outputs changed)."""
  env, kp = dict(env), patch.path[0][0]
  read = lambda v: v.val if isinstance(v, core.Literal) else env[v]
  changed, last = set(), kp
  for i in range(kp, len(jaxpr.eqns)):
    eqn = jaxpr.eqns[i]
    if i > kp and not any(isinstance(v, core.Var) and v in changed for v in eqn.invars):
      continue
    ins = [read(v) for v in eqn.invars]
    if i == kp:
      outs = patched(eqn, ins, patch, _producer(jaxpr, read))
    elif eqn.primitive.name in CALLS:
      body = next(sub_jaxprs(eqn))
      inner = env[i] = forward(body, ins)
      outs = [v.val if isinstance(v, core.Literal) else inner[v] for v in body.outvars]
    else:
      outs = bind(eqn, ins)
    last = i
    for v, x in zip(eqn.outvars, outs):
      if not np.array_equal(np.asarray(x), np.asarray(env[v]), equal_nan=True):
        changed.add(v)
      env[v] = x
  return env, (None if any(isinstance(v, core.Var) and v in changed for v in jaxpr.outvars)
               else last)


def strip(names: list[str], flows: list) -> tuple:
  """The gradient per layer of a stacked model, ``(layer, *Flow)`` in order: the inputs
  grouped by their path without its last key (``layers[3].weight`` -> ``layers[3]``), or
  else each on its own (``params[3]``), when at least ``STACKED`` groups differ only in
  their indices; () otherwise. A flax nnx Variable's ``.value`` is part of its leaf's key."""
  named = [(n, f) for n, f in zip(names, flows) if f is not None]
  for key in (lambda n: re.sub(r"(\.[^.\[\]]+|\[[^\]]*\])(\.value)?$", "", n), lambda n: n):
    groups: dict[str, list] = {}
    for name, f in named:
      groups.setdefault(key(name), []).append(f)
    shapes = collections.Counter(re.sub(r"\d+", "#", g) for g in groups)
    shape, n = shapes.most_common(1)[0] if shapes else ("", 0)
    if n >= STACKED:
      return tuple((g, *dataclasses.astuple(Flow.joined(fs))) for g, fs in groups.items()
                   if re.sub(r"\d+", "#", g) == shape)
  return ()


STACKED = 3


class _Search:
  def __init__(self, stop: bool = True, record: bool = True):
    self.edges: dict[str, Flow] = {}
    self.iterations: list = []
    self.stop = stop            # at the first culprit (else: the whole pass)
    self.record = record        # each edge's Flow (else: only the gradient, no transfers)
    self.failed = False         # measuring, a rule raised: the pass ends there
    self.frames: list[_Frame] = []   # where it stopped, innermost first

  def level(self, jaxpr, prefix, path, args, active, out_cts, where,
            outer: str | None = None, env: dict | None = None,
            patch: Patch | None = None, run=None, ct: dict | None = None,
            start: int | None = None) -> tuple[Culprit | None, list]:
    """The culprit in one level, or None and the cotangents of the level's inputs (None:
    zero); ``outer``: the enclosing equation's line (a library's jit keeps no user frame
    in its body's tracebacks); ``patch``: an equation rewritten, its path from this level;
    ``run(eqn, operands)``: how an equation is applied, when not as written (a shard_map
    body's on every shard, ``shard_bind``).

    A jit or remat fed finite cotangents is searched inside before it is differentiated
    whole: its body's search gives its pullback too, and nothing is compiled for it.
    ``env``: the level's values at ``args``, when its parent's forward run has them;
    ``ct`` and ``start``: resume with these cotangents from equation ``start`` down."""
    env = env or forward(jaxpr, args, patch, run)
    read = lambda v: v.val if isinstance(v, core.Literal) else env[v]
    live = _active(jaxpr, active)
    if ct is None:
      ct = {}
      for v, c in zip(jaxpr.outvars, out_cts):
        if isinstance(v, core.Var) and v in live and c is not None:
          ct[v] = ct[v] + c if v in ct else c
    undo = []
    for k in reversed(range(len(jaxpr.eqns) if start is None else start + 1)):
      eqn = jaxpr.eqns[k]
      wrt = [j for j, v in enumerate(eqn.invars) if isinstance(v, core.Var) and v in live]
      fo = [j for j, v in enumerate(eqn.outvars) if inexact(v) and v in ct]
      if not wrt or not fo:
        continue
      cts = [ct.get(v) if inexact(v) else None for v in eqn.outvars]
      ins = [read(v) for v in eqn.invars]
      here = patch if patch is not None and patch.path[0][0] == k else None
      inline = eqn.primitive.name in CALLS and (here is None or len(here.path) > 1)
      targets = [eqn.invars[j] for j in wrt]
      if inline and (not self.stop or all_finite(cts)):
        eqn_active = [isinstance(v, core.Var) and v in live for v in eqn.invars]
        found, got = self.level(next(sub_jaxprs(eqn)), eqn_id(prefix, k), (*path, (k, 0)),
                                ins, eqn_active, cts, where, eqn_source(eqn) or outer, env.get(k),
                                here and Patch(here.path[1:], here.fn), run)
        if found is not None:
          self.frames.append(_Frame(jaxpr, list(active), env, ct, k, undo))
          return found, None
        if self.failed:
          break
        got = [jnp.zeros_like(ins[j]) if got[j] is None else got[j] for j in wrt]
      elif here is not None:
        got, targets = _patched_pullback(jaxpr, read, live, eqn, ins, here, wrt, fo, cts)
      else:
        try:
          got = (pullback(lambda full: run(eqn, full), ins, wrt, fo, [cts[j] for j in fo])
                 if run else eqn_pullback(eqn, ins, wrt, fo, [cts[j] for j in fo]))
        except replay.NotJudged:
          raise
        except Exception:  # noqa: BLE001 - measuring: the rule being diagnosed fails again
          if not (self.record and not self.stop):
            raise
          self.failed = True
          break
      if self.stop:
        undo.append((k, [(v, ct.get(v)) for v in targets]))
      for v, c in zip(targets, got):
        ct[v] = ct[v] + c if v in ct else c
      if not self.record:
        continue
      stats = [flow(c) for c in (*got, *(cts[j] for j in fo))]
      fed = all(Flow.of(f, 1).finite for f in stats[len(got):])
      made = []
      for j, c, f in zip(wrt, got, stats):
        made.append(Flow.of(f, int(np.size(c))))
        self.edges[f"{eqn_id(prefix, k)}#{j}"] = made[-1]
      if self.stop and fed and not all(f.finite for f in made):
        found = self.culprit(jaxpr, prefix, path, k, live, ins, cts, made, where, outer, read)
        self.frames.append(_Frame(jaxpr, list(active), env, ct, k, undo))
        return found, None
    return None, [ct.get(v) if isinstance(v, core.Var) else None for v in jaxpr.invars]

  def culprit(self, jaxpr, prefix, path, k, live, ins, cts, made, where, outer,
              read) -> Culprit:
    """Equation ``k`` of the level made non-finite cotangents (``made``) from finite ones:
    the culprit there, or inside it when its body is searched as it is differentiated."""
    eqn = jaxpr.eqns[k]
    eqn_active = [isinstance(v, core.Var) and v in live for v in eqn.invars]
    here = Culprit(eqn_id(prefix, k), (*path, (k, 0)), eqn, jaxpr,
                   tuple(summary(x) if inexact(x) else None for x in ins),
                   Summary.joined([summary(c) for c in cts if c is not None]),
                   Flow.joined([f for f in made if not f.finite]), eqn_source(eqn) or outer, where)
    here.origin = _origin(here, jaxpr, path, prefix, read, outer, where)
    return self.inside(here, ins, eqn_active, cts) or here

  def inside(self, c: Culprit, ins, active, cts) -> Culprit | None:
    """The culprit within ``c``'s body, if it has one that is differentiated as written (a
    jit's body was searched already, before it was differentiated whole)."""
    name, subs = c.eqn.primitive.name, list(sub_jaxprs(c.eqn))
    if name == "cond":
      b = int(ins[0])
      return self.level(subs[b], body_prefix(c.node, b, len(subs)), (*c.path[:-1], (c.path[-1][0], b)),
                        ins[1:], active[1:], cts, c.where, c.source)[0]
    if name == "scan":
      return self.iteration(c, subs[0], ins, active, cts)
    if rule_call(c.eqn):
      try:
        c.inner = _inside_rule(c.eqn, ins, active, cts)
      except replay.NotJudged as e:   # its loop stepped past the deadline, an effect it uses
        c.unjudged = str(e)
    if name == "shard_map":
      return self.sharded(c, subs[0], ins, active, cts)
    return None

  def sharded(self, c: Culprit, body, ins, active, cts) -> Culprit | None:
    """A shard_map's body searched on all its shards at once (``shard_bind``), the
    operands and cotangents split as its specs split them; None where the body uses a
    collective that is not emulated (the shard_map stays the culprit)."""
    p = c.eqn.params
    mesh = p["mesh"]
    try:
      args = [split(x, s, mesh) for x, s in zip(ins, p["in_specs"])]
      outs = [None if x is None else split(x, s, mesh) for x, s in zip(cts, p["out_specs"])]
      return self.level(body, c.node, c.path, args, active, outs, c.where, c.source,
                        run=lambda eqn, a: shard_bind(mesh, eqn, a))[0]
    except Exception:  # noqa: BLE001 - a collective not emulated: not searched inside
      return None

  def iteration(self, c: Culprit, body, ins, active, cts) -> Culprit | None:
    """Bisect a scan to its first iteration (in backward order) that goes non-finite."""
    n_consts, n_carry, _ = scan_groups(c.eqn)
    cts = [jnp.zeros(v.aval.shape, v.aval.dtype) if x is None and inexact(v) else x
           for v, x in zip(c.eqn.outvars, cts)]
    length, reverse = c.eqn.params["length"], c.eqn.params["reverse"]
    consts, carry = ins[:n_consts], ins[n_consts:n_consts + n_carry]
    xs = ins[n_consts + n_carry:]
    body_active = _carry_fixpoint(body, active, n_consts, n_carry)
    wrt = [j for j, (a, v) in enumerate(zip(body_active, body.invars)) if a and inexact(v)]
    outs = [j for j, v in enumerate(body.outvars) if inexact(v)]
    step = jax.jit(lambda a: evaluate(body, a))
    back = jax.jit(lambda a, ct: pullback(lambda f: evaluate(body, f), a, wrt, outs, ct))
    order = list(range(length))[::-1] if reverse else list(range(length))
    carries = []
    for t in order:
      replay.check()
      carries.append(carry)
      carry = step([*consts, *carry, *[x[t] for x in xs]])[:n_carry]
    ct_carry, ct_ys = list(cts[:n_carry]), cts[n_carry:]
    for idx in reversed(range(length)):
      replay.check()
      t = order[idx]
      args = [*consts, *carries[idx], *[x[t] for x in xs]]
      ct = [*ct_carry, *[y[t] for y in ct_ys]]
      got = back(args, [ct[j] for j in outs])
      norm = float(jnp.sqrt(sum(jnp.sum(jnp.abs(x) ** 2) for x in ct_carry))) if ct_carry else 0.0
      self.iterations.append((c.node, t, norm, all_finite(ct)))
      if all_finite(ct) and not all_finite(got):
        where = f"in iteration {t} of {length} of its scan{' (reversed)' if reverse else ''}"
        return self.level(body, c.node, c.path, args, body_active, ct,
                          f"{c.where}, {where}" if c.where else where, c.source)[0]
      by_input = dict(zip(wrt, got))
      ct_carry = [by_input.get(n_consts + j, jnp.zeros_like(x)) for j, x in enumerate(carries[idx])]
    return None


def _origin(c: Culprit, jaxpr, path, prefix, read, outer, where) -> Culprit | None:
  """Where ``c``'s first non-finite operand was made: followed back through the equations
  that only carried it (a matmul consuming a division's NaN) to the first whose operands
  were finite, at this level or inside the call that made it (a jitted helper); None when
  it came in as a non-finite input of the level."""
  bad = next((v for v, s in zip(c.eqn.invars, c.operands) if s is not None and not s.finite), None)
  return _made(jaxpr, read, bad, path, prefix, c, outer, where, ORIGIN_STEPS)


def _made(jaxpr, read, bad, path, prefix, c, outer, where, steps) -> Culprit | None:
  made = {v: (i, e) for i, e in enumerate(jaxpr.eqns) for v in e.outvars}
  while steps > 0 and isinstance(bad, core.Var) and bad in made:
    steps -= 1
    k, eqn = made[bad]
    operands = [read(u) for u in eqn.invars]
    worse = next((u for u, x in zip(eqn.invars, operands) if isinstance(u, core.Var)
                  and inexact(x) and not all_finite([x])), None)
    if worse is not None:
      bad = worse
      continue
    if eqn.primitive.name in CALLS:   # made inside the call: its body run on these operands
      body = next(sub_jaxprs(eqn))
      env = forward(body, operands)
      out = body.outvars[eqn.outvars.index(bad)]
      return _made(body, lambda v: v.val if isinstance(v, core.Literal) else env[v], out,
                   (*path, (k, 0)), eqn_id(prefix, k), c, eqn_source(eqn) or outer, where, steps)
    return Culprit(eqn_id(prefix, k), (*path, (k, 0)), eqn, jaxpr,
                   tuple(summary(o) if inexact(o) else None for o in operands), c.ct_in,
                   c.ct_out, eqn_source(eqn) or outer, where)
  return None


ORIGIN_STEPS = 64    # equations followed back from a non-finite operand to where it was made


def forward(jaxpr, args, patch: Patch | None = None, run=None) -> dict:
  """Every value of one level at ``args``, eagerly, ``patch`` applied (``run``: as
  ``_Search.level``'s); a jit's body run inline, its values kept (under the equation's
  index) for the search inside it; blocks that recur (an unrolled loop's) compiled once
  each (``repeated_blocks``)."""
  env = dict(zip(jaxpr.constvars, consts(jaxpr)))
  env.update(zip(jaxpr.invars, args))
  read = lambda v: v.val if isinstance(v, core.Literal) else env[v]
  alike = {} if run is not None else repeated_blocks.blocks(jaxpr.eqns)
  compiled, end = {}, 0
  for i, eqn in enumerate(jaxpr.eqns):
    if i < end:
      continue
    if i in alike and not (patch is not None and i <= patch.path[0][0] < alike[i][0]):
      end, key = alike[i]
      block = jaxpr.eqns[i:end]
      outs = repeated_blocks.run(block, key, read, compiled)
      env.update(zip((v for e in block for v in e.outvars), outs))
      continue
    ins = [read(v) for v in eqn.invars]
    here = patch if patch is not None and patch.path[0][0] == i else None
    if eqn.primitive.name in CALLS and (here is None or len(here.path) > 1):
      body = next(sub_jaxprs(eqn))
      inner = env[i] = forward(body, ins, here and Patch(here.path[1:], here.fn), run)
      outs = [v.val if isinstance(v, core.Literal) else inner[v] for v in body.outvars]
    else:
      outs = ((run or bind)(eqn, ins) if here is None else
              patched(eqn, ins, here, _producer(jaxpr, read)))
    env.update(zip(eqn.outvars, outs))
  return env


def _patched_pullback(jaxpr, read, live, eqn, ins, patch, wrt, fo, cts) -> tuple:
  """The pullback of the patched equation, and the variables its cotangents go to: its
  operands, and the earlier values a rewrite reads through ``producer`` (``log_softmax``
  reads the softmax's logits; ``abs`` the squared value), differentiated as the
  rewritten program would be."""
  produce, reads = _producer(jaxpr, read), []

  def recording(v):
    found = produce(v)
    reads.extend(found[0].invars if found else ())
    return found
  if len(patch.path) == 1:
    patch.fn(eqn, ins, recording)
  extra = list(dict.fromkeys(u for u in reads if isinstance(u, core.Var) and u in live))
  n = len(ins)

  def apply(full):
    values = dict(zip(extra, full[n:]))
    return patched(eqn, full[:n], patch, _producer(jaxpr, lambda u: values[u] if isinstance(
        u, core.Var) and u in values else read(u)))
  got = pullback(apply, [*ins, *[read(u) for u in extra]], [*wrt, *range(n, n + len(extra))],
                 fo, [cts[j] for j in fo])
  return got, [*[eqn.invars[j] for j in wrt], *extra]


def _producer(jaxpr, read):
  """``Patch``'s ``producer`` for one level: the equation that made a variable there, and
  its operands."""
  made = {v: e for e in jaxpr.eqns for v in e.outvars}
  return lambda v: (made[v], [read(u) for u in made[v].invars]) if v in made else None


def _active(jaxpr, active) -> set:
  """The variables that depend on a differentiated input (floating ones only): none
  through ``stop_gradient`` (what it feeds, a while loop's statistic, is not differentiated)."""
  live = {v for v, a in zip(jaxpr.invars, active) if a and inexact(v)}
  for eqn in jaxpr.eqns:
    if eqn.primitive.name != "stop_gradient" and any(
        isinstance(v, core.Var) and v in live for v in eqn.invars):
      live.update(v for v in eqn.outvars if inexact(v))
  return live


def _carry_fixpoint(body, active, n_consts: int, n_carry: int) -> list[bool]:
  """A scan body's differentiated inputs: a carry is if its initial value or its update is."""
  flags = list(active)
  for _ in range(n_carry + 1):
    live = _active(body, flags)
    grown = [flags[n_consts + j] or (isinstance(v, core.Var) and v in live)
             for j, v in enumerate(body.outvars[:n_carry])]
    if grown == flags[n_consts:n_consts + n_carry]:
      break
    flags[n_consts:n_consts + n_carry] = grown
  return flags


def _inside_rule(eqn, ins, active, cts) -> tuple | None:
  """A custom rule's backward, traced with its own operands and run forwards: the first
  of its operations (the user's bwd lines) that turned finite values non-finite. A loop
  stepped on the host costs far more than the user's compiled one: it is stepped within
  the deadline of the call's account (a fresh one when none is open)."""
  cts = [jnp.zeros(v.aval.shape, v.aval.dtype) if c is None and inexact(v) else c
         for v, c in zip(eqn.outvars, cts)]
  if eqn.primitive.name == "custom_vjp_call":
    traced = jax.make_jaxpr(lambda a, c: _user_bwd(eqn, a, active, c))(list(ins), cts)
  else:
    wrt = [j for j, (a, v) in enumerate(zip(active, eqn.invars)) if a]
    fo = [j for j, v in enumerate(eqn.outvars) if inexact(v)]
    traced = jax.make_jaxpr(lambda a, c: pullback(lambda f: bind(eqn, f), a, wrt, fo,
                                                  [c[j] for j in fo]))(list(ins), cts)
  with replay.account(replay.BUDGET):   # within the search's own, stepping gets the budget
    found = first_nonfinite(opened(traced), jax.tree_util.tree_leaves((list(ins), cts)))
  if found is None:
    return None
  inner, operands, where = found
  frame = frames.user_frame(inner.source_info.traceback)
  return (inner.primitive.name, eqn_source(inner),
          tuple(summary(x) if inexact(x) else None for x in operands), where,
          frame.function_name if frame else None)


def _user_bwd(eqn, ins, active, cts):
  """The custom_vjp's own fwd and bwd called directly, as JAX's JVP rule calls them (the
  fwd told which primals are perturbed: the differentiated ones), so that the bwd's
  operations are traced with the user's lines (JAX's transpose would give them the
  primal's call site)."""
  p = eqn.params
  primals = ins[p["num_consts"]:]
  fwd_jaxpr, consts = p["fwd_jaxpr_thunk"].call_wrapped(*active[p["num_consts"]:])
  outs = core.eval_jaxpr(fwd_jaxpr, consts, *primals)
  _, res_tree, forwarded = p["out_trees"]()
  made = iter(outs[:res_tree.num_leaves - sum(f is not None for f in forwarded)])
  res = [next(made) if f is None else primals[f] for f in forwarded]
  p["bwd"].call_wrapped(*res, *cts)
  return jnp.zeros(())


def first_nonfinite(jaxpr: core.Jaxpr, args) -> tuple | None:
  """(equation, operands, in which loop iteration) of the first equation, forwards, whose
  operands are finite and whose outputs are not; through the bodies of calls and,
  iteration by iteration, of while loops (a bwd rule's own loop)."""
  env = dict(zip(jaxpr.constvars, consts(jaxpr)))
  env.update(zip(jaxpr.invars, args))
  read = lambda v: v.val if isinstance(v, core.Literal) else env[v]
  for eqn in jaxpr.eqns:
    ins = [read(v) for v in eqn.invars]
    outs = bind(eqn, ins)
    if _poisoned(ins, outs):
      if eqn.primitive.name in CALLS:
        return first_nonfinite(next(sub_jaxprs(eqn)), ins)
      if eqn.primitive.name == "while":
        return _first_bad_iteration(eqn, ins) or (eqn, ins, "")
      return eqn, ins, ""
    env.update(zip(eqn.outvars, outs))
  return None


def _first_bad_iteration(eqn, ins) -> tuple | None:
  """Step a while loop on the host to the first iteration that turns a finite carry
  non-finite, and search its body there."""
  p = eqn.params
  nc, nb = p["cond_nconsts"], p["body_nconsts"]
  cond, body = p["cond_jaxpr"].jaxpr, p["body_jaxpr"].jaxpr
  cconsts, bconsts, carry = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
  t = 0
  while bool(evaluate(cond, [*cconsts, *carry])[0]):
    replay.check()
    new = evaluate(body, [*bconsts, *carry])
    if _poisoned([*bconsts, *carry], new):
      found = first_nonfinite(body, [*bconsts, *carry])
      return found and (*found[:2], f"in iteration {t} of its while loop"
                        + (f", {found[2]}" if found[2] else ""))
    carry, t = new, t + 1
  return None


def _poisoned(ins, outs) -> bool:
  """Whether ``outs`` hold a NaN where no operand held one, or an Inf where all were
  finite: operands may carry Infs on purpose (diffrax fills its buffers with them)."""
  (nan_in, inf_in), (nan_out, inf_out) = _nonfinite(ins), _nonfinite(outs)
  return (nan_out and not nan_in) or (inf_out and not (nan_in or inf_in))


def _nonfinite(xs) -> tuple[bool, bool]:
  """Whether any of ``xs`` holds a NaN, and an Inf."""
  arrays = [hosts.host(x) for x in xs if x is not None and hasattr(x, "dtype") and inexact(x)]
  return (any(bool(np.isnan(a).any()) for a in arrays),
          any(bool(np.isinf(a).any()) for a in arrays))


def all_finite(xs) -> bool:
  """On the host, as ``flow``: no reduction compiled per shape."""
  return all(bool(np.isfinite(hosts.host(x)).all()) for x in xs
             if x is not None and hasattr(x, "dtype") and inexact(x))


def eqn_source(eqn) -> str | None:
  frame = frames.user_frame(eqn.source_info.traceback)
  return f"{frame.file_name}:{frame.start_line}" if frame else None
