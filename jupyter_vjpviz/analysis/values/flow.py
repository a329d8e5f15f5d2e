"""Backward flow: the cotangent of each block's output activation, inside the compiled step.

The function a step differentiates is traced once to a jaxpr, its calls (jit) inlined,
and run again equation by equation under the user's own ``jax.grad``, a tap
(``capture.flow_taps``) on each block's output: the same computation, so XLA compiles
the same step, plus a few reductions per tap (three, fused with their reads) in the
backward pass.

A block is a group of parameter leaves as ``vv.grads`` names them (``block_members``:
named scopes, module paths, a stacked model's layers; else each leaf's parent path). Each
equation belongs to the block of the parameters it reads (through values made of
parameters alone: a transposed kernel), else to the latest block of its activation
operands (a ReLU after a layer is that layer's). A block's output is each activation it
makes that a later block reads (the residual stream too: its cotangent sums every
reader's); a block no later one reads (the last) outputs what its last equation reading
its parameters makes (the prediction, before the loss).

A stack of layers applied by ``lax.scan`` (its slices of stacked parameters: equinox's
scan over layers, flax's ``nn.scan``/``nnx.scan``) is one equation: its block is split
into one per layer (``.layers[3]``: the parameters' slice), the scan rerun with a tap on
its carry's activations inside its body, whose summaries JAX stacks per iteration.
"""
from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ...base.trees import substituted
from ...capture import flow_taps
from ...capture.compat.changed_signatures import bind
from ...capture.compat.private import core
from ...capture.naming import leaf_paths
from ..program import consts, scan_groups, sub_jaxprs
from .grad_paths import reading_scopes
from .nonfinite_eval import inexact

INLINED = frozenset({"jit", "pjit", "closed_call", "core_call"})
"""Calls run inline: their bodies' blocks are the model's (a jitted layer, flax's calls)."""

STATS = ("norm", "max_abs", "finite_fraction", "zero_fraction")
"""What ``w.flow()`` gives per step and block, in the order of a step's flow columns."""


@dataclasses.dataclass(frozen=True)
class Taps:
  """The taps of one traced gradient: its blocks in forward order and, per tap, its log
  key and the block of each row of its summaries (one: all in that block; a layer
  scan's tap: one per iteration)."""
  blocks: tuple[str, ...]
  keys: tuple[tuple[str, tuple[int, ...]], ...]

  def columns(self, logs: dict) -> list[jax.Array]:
    """float32[5] per block: its taps' ``flow_taps.SUMMARY`` ``merged``, from their
    summaries in ``logs`` (stacked ones too: a gradient taken under vmap or scan), each
    one part of the row the watch assembles (``watch_rows.assembled``; its ``STATS``
    made on the host). A block of one tap's one row is that summary as the tap made it:
    no kernel in the step."""
    parts: list[list] = [[] for _ in self.blocks]   # per block: a summary per tap
    for key, owners in self.keys:
      s = logs[flow_taps.PREFIX + key].reshape(-1, len(owners), len(flow_taps.SUMMARY))
      per_owner = s[0] if len(s) == 1 else merged(s)
      for j, b in enumerate(owners):
        parts[b].append(per_owner[j])
    # each block has a tap (``Traced``)
    return [part[0] if len(part) == 1 else merged(jnp.stack(part)) for part in parts]


def merged(summaries) -> jax.Array:
  """One ``flow_taps.SUMMARY`` of several (along axis 0): the sums and counts added, max
  |.| the largest (a NaN stays in its own block)."""
  return summaries.sum(axis=0).at[..., 1].set(summaries[..., 1].max(axis=0))


Group = Callable[[list[str], list], list[tuple[str, list[int]]]]
"""(leaf paths, their reading scopes) -> (block, its leaves' indices) per block."""


@dataclasses.dataclass(frozen=True)
class Tapper:
  """What ``capture.grad_calls`` taps a gradient's function with: ``found`` gets each
  trace's ``Taps`` (or why it could not tap)."""
  group: Group
  found: list

  def logs(self, fun, argnums) -> Callable:
    return tapped(fun, argnums, self.group, self.found)

  def traced(self, fun, args, kwargs, argnums) -> Traced:
    return Traced(fun, args, kwargs, argnums, self.group, self.found)


def tapped(fun, argnums, group: Group, found: list) -> Callable:
  """``fun`` (what ``jax.grad`` differentiates w.r.t. ``argnums``) run from its jaxpr with
  a tap on each block's output, logging its summary (``defvjp_with_logs``); each trace
  appends its ``Taps`` to ``found``, or why it could not tap (then it runs untapped)."""
  def run(*args, **kwargs):
    return Traced(fun, args, kwargs, argnums, group, found).run(args, kwargs)
  return run


class Traced:
  """``fun`` called with ``args`` traced once to a jaxpr (the user's error, if any,
  raised from here, as their own call would), its taps chosen; ``run`` evaluates it on
  arrays of the same types (under ``jax.grad``: traced inside it for the logs, before it
  for the sinks), its taps logging or, given ``sinks``, writing their summaries into the
  cotangent of ``sinks`` (float32[taps, 5]), the backward-pass channel older JAX has."""

  def __init__(self, fun, args, kwargs, argnums, group: Group, found: list):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    flat, self.tree = jax.tree_util.tree_flatten((args, kwargs))
    self.at = [k for k, x in enumerate(flat) if isinstance(x, (jax.Array, np.ndarray))]

    def flat_fun(*arrays):   # its non-array outputs (an aux's names) kept as they are
      a, kw = jax.tree_util.tree_unflatten(self.tree, substituted(flat, self.at, arrays))
      leaves, self.out_tree = jax.tree_util.tree_flatten(fun(*a, **kw))
      self.out_leaves = [None if isinstance(x, jax.Array) else x for x in leaves]
      return [x for x in leaves if isinstance(x, jax.Array)]
    self.closed = jax.make_jaxpr(flat_fun)(*(flat[k] for k in self.at))
    self.jaxpr = getattr(self.closed, "jaxpr", self.closed)
    self.keys: dict = {}    # ref -> its tap's key: none where vjpviz failed
    self.scans: dict = {}   # plan index of a layer scan -> (carry position, key) per tap
    self.rows: dict = {}    # key -> (first row, rows) of its summaries in the sinks
    try:
      self.plan, self.outs = _plan(self.jaxpr, _inputs(self.jaxpr))
      names, leaf_block = _blocks(self.jaxpr, _params(args, nums, self.at), group)
      outputs, scans = _outputs(self.plan, self.jaxpr, leaf_block)
      found.append(self._taps(names, outputs, scans))
    except Exception as e:  # noqa: BLE001 - vjpviz's own failure: the jaxpr runs untapped
      self.keys, self.scans, self.rows = {}, {}, {}
      found.append(f"{type(e).__name__}: {e}"[:300])

  def _taps(self, names: list[str], outputs: list, scans: list) -> Taps:
    """The blocks measured, in forward order (one with no output measured left out; a
    layer scan's, one per layer), each tap's key, and where its rows go."""
    blocks: list[str] = []
    at: dict = {}           # block -> its index; a layer scan -> its first layer's
    for b in sorted({b for _, b in outputs} | {b for _, b, *_ in scans}):
      if any(c == b for _, c in outputs):
        at[b] = len(blocks)
        blocks.append(names[b])
      for i, c, _, length, reverse in scans:
        if c == b:
          at[i, "scan"] = len(blocks)
          order = range(length)[::-1] if reverse else range(length)   # as applied
          name = names[b]   # its body's scope, for named scopes (``reading_scopes``)
          blocks += [f"{name}[{t}]" for t in order]
    keys = []
    for n, (r, b) in enumerate(outputs):
      self.keys[r] = f"{n}"
      keys.append((f"{n}", (at[b],)))
    for i, _, positions, length, reverse in scans:
      self.scans[i] = [(p, f"s{i}/{p}") for p in positions]
      first = at[i, "scan"]
      rows = tuple(first + (length - 1 - t if reverse else t) for t in range(length))
      keys += [(key, rows) for _, key in self.scans[i]]
    start = 0
    for key, rows in keys:
      self.rows[key] = (start, len(rows))
      start += len(rows)
    return Taps(tuple(blocks), tuple(keys))

  @property
  def sink_rows(self) -> int:
    """The rows of ``run``'s ``sinks``: one per tap, a layer scan's one per iteration."""
    return sum(n for _, n in self.rows.values())

  def run(self, args, kwargs, sinks=None):
    """The function's outputs on ``args``, tapped (into ``sinks``' cotangent, rows in
    the order of the taps' keys, where given)."""
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    arrays = [leaves[k] for k in self.at]
    if not self.keys and not self.scans:
      values = core.eval_jaxpr(self.jaxpr, consts(self.closed), *arrays)
    else:
      def sink(key):   # a top-level tap's row, a layer scan's tap's rows (sliced per iteration)
        if sinks is None:
          return None
        start, n = self.rows[key]
        return sinks[start] if key in self.keys.values() else sinks[start:start + n]
      values = _run(self.plan, self.outs, self.jaxpr, consts(self.closed), arrays,
                    _Tapping(self.keys, self.scans, sink))
    it = iter(values)
    return jax.tree_util.tree_unflatten(
        self.out_tree, [next(it) if x is None else x for x in self.out_leaves])

  def logs(self, sink_cts) -> dict:
    """The taps' summaries from ``sinks``' cotangent, keyed as their logs would be."""
    return {flow_taps.PREFIX + key: sink_cts[start:start + n]
            for key, (start, n) in self.rows.items()}


def _params(args, nums, at) -> dict[int, str]:
  """jaxpr input -> path, of the differentiated floating leaves (``keystr`` in their
  argument, ``args[i]`` before it when several are differentiated)."""
  position = {k: i for i, k in enumerate(at)}
  found, start = {}, 0
  for i, a in enumerate(args):
    leaves = jax.tree_util.tree_flatten_with_path(a)[0]
    for k, (kp, x) in enumerate(leaves):
      if i in nums and start + k in position and inexact(x):
        found[position[start + k]] = (f"args[{i}]" if len(nums) > 1 else "") + _path(a, kp)
    start += len(leaves)
  return found


def _path(arg, kp) -> str:
  """A leaf's path in its argument: flax nnx's graph-mode grad hands ``jax.grad`` its
  modules' states (``NodeStates``, ``.states[i]``): named as on the live module, as the
  watch names its leaves (``.layers[0].kernel``)."""
  if type(arg).__name__ == "NodeStates" and len(kp) > 2:
    return leaf_paths.attribute_path(leaf_paths.without_value(kp[2:]))
  return jax.tree_util.keystr(kp)


# --- the plan: the jaxpr's equations with its calls inlined ---------------------------

@dataclasses.dataclass(frozen=True, eq=False)
class _Const:   # by identity: its value is an array
  val: object


def _plan(jaxpr, ins: list, scope: int = 0, counter=None) -> tuple[list, list]:
  """(equations as ``(eqn, operand refs, result refs)`` in order, the outputs' refs) of
  ``jaxpr`` fed ``ins``: a ref is a Literal, a ``_Const`` or ``(scope, var)``, unique per
  inlined call (one body inlined twice has its own values each time)."""
  counter = counter if counter is not None else itertools.count(1)
  env = dict(zip(jaxpr.invars, ins))
  env.update((v, _Const(c)) for v, c in zip(jaxpr.constvars, consts(jaxpr)))
  ref = lambda v: v if isinstance(v, core.Literal) else env.get(v, (scope, v))
  plan = []
  for eqn in jaxpr.eqns:
    operands = [ref(v) for v in eqn.invars]
    body = next(iter(sub_jaxprs(eqn)), None) if eqn.primitive.name in INLINED else None
    if body is not None and len(body.invars) == len(operands):
      inner, outs = _plan(body, operands, next(counter), counter)
      plan += inner
      env.update(zip(eqn.outvars, outs))
    else:
      plan.append((eqn, operands, [(scope, v) for v in eqn.outvars]))
  return plan, [ref(v) for v in jaxpr.outvars]


def _inputs(jaxpr) -> list:
  return [(0, v) for v in jaxpr.invars]


@dataclasses.dataclass(frozen=True)
class _Tapping:
  """Where ``_run`` taps: ``keys`` (ref -> key), ``scans`` (plan index -> (carry
  position, key) per tap in its body), ``sink(key)``: the tap's sink rows, or None (logs)."""
  keys: dict
  scans: dict
  sink: Callable

  def tap(self, key: str, x, sink):
    return flow_taps.tap(x, key) if sink is None else flow_taps.sink_tap(x, sink)


def _run(plan, outs, jaxpr, const_values, arrays, tapping: _Tapping) -> list:
  """The outputs ``outs`` of ``plan`` (``jaxpr``'s) on ``arrays``, each value at a ref of
  ``tapping.keys`` tapped, each layer scan of ``tapping.scans`` run with taps inside."""
  env = dict(zip(_inputs(jaxpr), arrays))
  env.update(((0, v), c) for v, c in zip(jaxpr.constvars, const_values))
  read = lambda r: r.val if isinstance(r, (core.Literal, _Const)) else env[r]
  for i, (eqn, operands, results) in enumerate(plan):
    values = [read(r) for r in operands]
    values = (_scan_tapped(eqn, values, tapping.scans[i], tapping) if i in tapping.scans
              else bind(eqn, values))
    for r, value in zip(results, values):
      key = tapping.keys.get(r)
      env[r] = value if key is None else tapping.tap(key, value, tapping.sink(key))
  return [read(r) for r in outs]


def _scan_tapped(eqn, values: list, taps: list, tapping: _Tapping) -> list:
  """A scan equation's results on ``values``, run again by ``lax.scan`` from its body,
  each carry position of ``taps`` tapped as each iteration makes it (its sink rows a
  scanned input beside the scan's own)."""
  n_consts, n_carry, _ = scan_groups(eqn)
  body = next(iter(sub_jaxprs(eqn)))
  closed, init, xs = values[:n_consts], values[n_consts:n_consts + n_carry], values[n_consts + n_carry:]
  sinks = [tapping.sink(key) for _, key in taps]

  def step(carry, x):
    out = core.eval_jaxpr(body, consts(body), *closed, *carry, *x[0])
    carry = list(out[:n_carry])
    for (p, key), s in zip(taps, x[1]):
      carry[p] = tapping.tap(key, carry[p], s)
    return carry, list(out[n_carry:])
  carry, ys = jax.lax.scan(step, list(init), (list(xs), sinks), length=eqn.params["length"],
                           reverse=eqn.params["reverse"], unroll=eqn.params["unroll"])
  return [*carry, *ys]


# --- which values are blocks' outputs -------------------------------------------------

def _blocks(jaxpr, params: dict[int, str], group: Group) -> tuple[list[str], dict[int, int]]:
  """(block names in the order the program first reads them, jaxpr input -> its block)
  of the parameters ``params`` (jaxpr input -> path)."""
  inputs = sorted(params)
  scopes = [reading_scopes(jaxpr)[i] for i in inputs]
  paths = [params[i] for i in inputs]
  members = group(paths, scopes)
  covered = {k for _, ks in members for k in ks}
  rest = [k for k in range(len(paths)) if k not in covered]   # each in its parent's block
  members += [(name, [rest[k] for k in ks]) for name, ks in _by_parent([paths[k] for k in rest])]
  unread = (float("inf"),)
  order = sorted(range(len(members)), key=lambda m: min(
      (scopes[k][1] or unread for k in members[m][1]), default=unread))
  return ([members[m][0] for m in order],
          {inputs[k]: b for b, m in enumerate(order) for k in members[m][1]})


_PARENT = re.compile(r"(\.[^.\[\]]+|\[[^\]]*\])(\.value)?$")


def _by_parent(paths: list[str]) -> list[tuple[str, list[int]]]:
  """Each leaf's parent path (``['Dense_1']`` of ``['Dense_1']['kernel']``) as its block."""
  found: dict[str, list[int]] = {}
  for k, p in enumerate(paths):
    found.setdefault(_PARENT.sub("", p) or p, []).append(k)
  return list(found.items())


def _outputs(plan, jaxpr, leaf_block: dict[int, int]) -> tuple[list, list]:
  """(ref, block) of every block's output activations, in plan order, and the layer
  scans (module docstring), tapped inside in their stead: (plan index, block, carry
  positions of activations, length, reverse) each."""
  # (block, made of parameters alone) per value; the rest of the inputs and the consts
  # (a batch the loss closes over) are data: activations of no block
  state: dict = {(0, v): (leaf_block.get(i), i in leaf_block) for i, v in enumerate(jaxpr.invars)}
  of = lambda r: None if isinstance(r, core.Literal) else state.get(r, (None, False))
  owner, reads = [], []
  for _, operands, results in plan:
    got = [x for x in map(of, operands) if x is not None]   # a literal is neither
    weights = [b for b, w in got if w and b is not None]
    acts = [b for b, w in got if not w and b is not None]
    weight = bool(got) and all(w for _, w in got)
    b = max(weights) if weights else max(acts) if acts else None
    owner.append(None if weight else b)
    reads.append(bool(weights) and not weight)
    state.update((r, (b, weight)) for r in results)
  found: dict = {}
  for i, (_, operands, _) in enumerate(plan):
    for r in filter(of, operands):
      b, w = of(r)
      if not w and b is not None and owner[i] is not None and owner[i] != b and _float(r):
        found.setdefault(r, b)
  crossed = set(found.values())
  for b in set(leaf_block.values()) - crossed:
    last = max((i for i in range(len(plan)) if owner[i] == b and reads[i]), default=None)
    if last is not None:
      found.update((r, b) for r in plan[last][2] if _float(r))
  made = {r: i for i, (_, _, results) in enumerate(plan) for r in results}
  scans = _layer_scans(plan, of)
  inside = {i for i, *_ in scans}
  return (sorted(((r, b) for r, b in found.items() if made[r] not in inside),
                 key=lambda rb: made[rb[0]]), scans)


def _layer_scans(plan, of: Callable) -> list:
  """Each scan over slices of one block's parameters (its layers) carrying floating
  activations: (plan index, block, carry positions, length, reverse)."""
  found = []
  for i, (eqn, operands, results) in enumerate(plan):
    if eqn.primitive.name != "scan" or not eqn.params["length"]:
      continue
    n_consts, n_carry, _ = scan_groups(eqn)
    weights = [of(r) for r in operands[n_consts + n_carry:]]
    blocks = [b for b, w in filter(None, weights) if w and b is not None]
    positions = [p for p, r in enumerate(operands[n_consts:n_consts + n_carry])
                 if _float(results[p]) and not (of(r) or (None, False))[1]]
    if blocks and positions:
      found.append((i, max(blocks), positions, eqn.params["length"], eqn.params["reverse"]))
  return found


def _float(ref) -> bool:
  return isinstance(ref, tuple) and inexact(ref[1])


# --- a watch's flow columns, read on the host -----------------------------------------

def table(cols: np.ndarray, blocks: list[str], start: int = 0) -> list[dict]:
  """One row per step and block (``step``, ``block``, then ``STATS``) of ``cols``
  (float32[steps, 4 * blocks]: the steps' flow columns, the first being step ``start``)."""
  found = []
  for t, row in enumerate(cols):
    for b, name in enumerate(blocks):
      found.append({"step": start + t, "block": name,
                    **{k: float(v) for k, v in zip(STATS, row[4 * b:4 * b + 4])}})
  return found


def first_nonfinite(cols: np.ndarray) -> tuple[int, int] | None:
  """(step, block index) of the first step whose cotangents were not all finite, and the
  block nearest the loss among those whose output saw it: the backward pass met it there
  first, so the non-finite values were made after that block's output (in the next
  block, or in the loss after the last)."""
  bad = ~(cols[:, 2::4] == 1.0)   # a NaN fraction (an empty cotangent) is no all-clear
  steps = np.flatnonzero(bad.any(axis=1))
  if not steps.size:
    return None
  t = int(steps[0])
  return t, int(np.flatnonzero(bad[t])[-1])
