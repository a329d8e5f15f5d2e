"""``vv.grads``: gradient health of a program that runs.

One backward pass, eager and measured edge by edge (``nonfinite.measured``: every edge's
cotangent norm, which the graph shows), gives the gradient; the structural walk over the
forward jaxpr says why a leaf gets none where no cotangent can reach it
(``analysis.values.grad_paths``), the measured pass why for the rest: the equation whose
pullback made the zero.

The forward run is the user's (their ``jax.debug.print`` output and callbacks happen,
once, as under ``jax.grad``); the backward pass differentiates equations again, which
runs their bodies' forward again: it is vjpviz's own run (``analysis.values.replay``), quiet,
without the program's effects, its loops ending as the user's did (the same values).
"""
from __future__ import annotations

import collections
import dataclasses
import math
import os
import re

import jax
import numpy as np

from ..capture import records
from ..capture.compat.private import core
from ..analysis import program
from ..analysis.values import dead_units, grad_paths, nonfinite, replay
from ..analysis.values.flows import mark_flows, program_inputs
from ..analysis.graph import Graph
from ..analysis.grad_report import GradReport, Layer, NonFinite, PartlyZero, ZeroLeaf
from ..analysis.values.nonfinite_eval import inexact
from ..analysis.values.partial_vjp import as_input, without_aux
from ..base import hosts, unchecked
from ..base.safety import Listeners
from ..capture.naming import function_names as names
from ..capture.records import Origin
from . import pipeline
from .. import render  # noqa: F401 - registers the report's renderings
from ..base.trees import substituted

CHANGE = 10.0      # a block whose gradient norm changes more than this from the next is flagged
LEARNING_RATES = (1e-6, 1.0)   # what users set: a block no rate in it trains is flagged
KEPT = 32          # the reports kept for the panel (its graph requests name them by id)


def grads(fn, *args, argnums=0, has_aux=False, **kwargs) -> GradReport:
  """Which leaves of ``args[argnums]`` get no gradient from ``fn`` (a scalar loss; with
  ``has_aux``, the first of ``(loss, aux)``), and why; where whole units get none; the
  gradient and parameter norm per block of a stacked model. Its floating leaves are
  differentiated (an equinox module's functions and integers are not). Arrays that span
  processes (``jax.distributed``; every process calls ``grads``, as it calls the job's
  own computations) are copied whole to each process once (``hosts.whole_here``): each
  reports on the whole gradient, alone."""
  fn = without_aux(fn) if has_aux else fn
  nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
  args = tuple(jax.tree_util.tree_map(as_input, a) if i in nums else a for i, a in enumerate(args))
  try:
    args, kwargs = hosts.whole_here((args, kwargs))   # arrays spanning processes
    with hosts.on_one_device():
      report = _checked(fn, args, kwargs, nums)
  except hosts.TooLarge as e:   # every process alike: not judged, and why
    name = names.function_name(fn)
    report = GradReport(function=name, leaves=(), unchecked=unchecked.Unchecked(
        f"vv.grads of {name}", f"gradient not taken: {e}"))
  report = pipeline.recorded(report)
  _kept.append(report)
  _listeners.notify(report)
  return report


def _checked(fn, args, kwargs, nums) -> GradReport:
  paths, positions = _float_leaves(args, kwargs, nums)
  if not positions:
    several = len(nums) > 1
    raise TypeError(f"vv.grads: argument{'s' * several} {list(nums)} of "
                    f"{getattr(fn, '__name__', 'fn')} hold{'' if several else 's'} no "
                    "floating-point array to differentiate")
  out = _shape_of(fn, args, kwargs)
  if not (isinstance(out, jax.ShapeDtypeStruct) and out.shape == ()
          and jax.numpy.issubdtype(out.dtype, jax.numpy.floating)):   # bfloat16 is one
    raise TypeError(f"vv.grads: {getattr(fn, '__name__', 'fn')} must return a real scalar "
                    f"(as jax.grad needs), got {jax.tree_util.tree_map(_aval, out)}")
  name = names.function_name(fn)
  with records.suspended(), jax.debug_nans(False), unchecked.attempt(f"vv.grads of {name}") as trial:
    try:
      report = _report(fn, args, kwargs, paths, positions, nums)
    except Exception as e:  # noqa: BLE001 - vjpviz's own run, not the user's call: said, not raised
      report = GradReport(function=name, leaves=tuple((p, math.nan, math.nan) for p in paths),
                          unchecked=unchecked.raised(trial.check, e))
  if trial.failed and report.healthy:   # a stage of ours failed: no all-clear to give
    report = dataclasses.replace(report, unchecked=trial.unchecked())
  return report


_kept: collections.deque[GradReport] = collections.deque(maxlen=KEPT)
_listeners = Listeners()
"""f(report), called with each report ``grads`` makes (the panel's channel registers one)."""
add_listener, remove_listener = _listeners.add, _listeners.discard


def reports() -> list[GradReport]:
  """The last ``KEPT`` reports, oldest first: avals and norms, no arrays."""
  return list(_kept)


def _report(fn, args, kwargs, paths, positions, nums) -> GradReport:
  """One forward run and one backward pass, eager and measured edge by edge (``vv.nans``'s):
  its inputs' cotangents are the gradient."""
  origin = _origin(fn, args, kwargs, positions)
  with replay.quiet():   # traced again: the user's Python prints were seen (eval_shape)
    jaxpr, invals, active, out_cts = program_inputs(origin, (args, kwargs))
    struct = grad_paths.structural(jaxpr)
    scopes = grad_paths.reading_scopes(jaxpr)
  flat = jax.tree_util.tree_leaves((args, kwargs))
  leaves = [flat[j] for j in positions]
  position = _invar_positions(origin, positions)
  param_flows = [_flow(x) for x in leaves]
  env = nonfinite.forward(jaxpr, invals)   # the user's own run: their effects happen
  try:   # vjpviz's, at the user's values: its loops end as theirs did, or at the deadline
    with replay.account(replay.main_pass()), replay.replaying(capped=False):
      edges, got, complete = nonfinite.measured(jaxpr, invals, active, out_cts, env)
  except replay.NotJudged as e:   # an effect whose result the program uses, no time left
    return _unjudged(origin, paths, param_flows, str(e))
  values = [np.zeros(x.shape, x.dtype) if got[i] is None else hosts.host(got[i])
            for x, i in zip(leaves, position)]
  del got
  grad_flows = [_flow(g) for g in values]
  bad = tuple(_nonfinite(paths[k], g, f) for k, (g, f) in enumerate(zip(values, grad_flows))
              if not f.finite)
  zeros = [k for k, g in enumerate(values) if not np.any(g)]
  live = [position[k] for k in zeros if struct[position[k]] == grad_paths.LIVE]
  cuts = grad_paths.value_cuts(jaxpr, env, edges, live) if live else {}
  primals = grad_paths.primal_norms(jaxpr, env)
  gathered, sliced = grad_paths.gathered(jaxpr), grad_paths.sliced(jaxpr)
  partly = {k: _partly(paths[k], g, position[k] in gathered, sliced.get(position[k]))
            for k, g in enumerate(values) if k not in zeros and grad_flows[k].finite}
  dying = [position[k] for k, found in partly.items() if any(p.reason == "dead" for p in found)]
  died = dead_units.unit_cuts(jaxpr, env, dying) if dying else {}
  del env, invals
  partly = tuple(_with_source(p, died.get(position[k])) for k, found in partly.items()
                 for p in found)
  names = _input_names(origin, args, kwargs, dict(zip(position, paths)))
  zero = tuple(_zero_leaf(paths[k], struct[position[k]] if struct[position[k]] != grad_paths.LIVE
                          else cuts.get(position[k], grad_paths.Cut("dead")), names)
               for k in zeros)
  eps = max((float(np.finfo(x.dtype).eps) for x in leaves if inexact(x)), default=0.0)
  tables = {k for k, i in enumerate(position) if i in gathered}
  unmeasured = {k for k, f in enumerate(grad_flows) if not f.finite}
  layers = _layers(paths, [scopes[i] for i in position], grad_flows, param_flows, eps, tables,
                   unmeasured)
  graph = dataclasses.replace(_with_primals(mark_flows(_graph(origin), edges), primals),
                              strip=nonfinite.strip(list(paths), grad_flows))
  return GradReport(function=origin.name, zero=zero, partly_zero=partly, layers=layers,
                    leaves=tuple((p, g.norm, w.norm) for p, g, w in zip(paths, grad_flows,
                                                                          param_flows)),
                    graph=graph, note=None if complete else "the measured pass stopped early",
                    nonfinite=bad,
                    cause=_cause(origin.name, nums, grad_paths.nonfinite_at(jaxpr, edges))
                    if bad else None)


def _with_source(p: PartlyZero, cut: grad_paths.Cut | None) -> PartlyZero:
  """Dead units with the line of the mask where they die (``dead_units.unit_cuts``)."""
  return dataclasses.replace(p, source=cut.source, op=cut.op) if cut and p.reason == "dead" else p


def _nonfinite(path: str, g: np.ndarray, f: nonfinite.Flow) -> NonFinite:
  first = np.unravel_index(int(np.flatnonzero(~np.isfinite(g))[0]), g.shape) if g.ndim else ()
  return NonFinite(path, f.nan, f.inf, f.size, tuple(int(i) for i in first))


def _cause(name: str, nums: tuple, at: grad_paths.Cut | None) -> str:
  """What made the gradient non-finite, as far as the measured pass's top level says (the
  equation, your line), and how to learn why: ``vv.nans`` on the same call."""
  argnums = "" if nums == (0,) else f", argnums={nums[0] if len(nums) == 1 else nums}"
  where = (f"made non-finite at {at.op}" + (f" ({at.source})" if at.source else "") + "; "
           if at is not None else "")
  return (f"{where}vv.nans({name}, <the same arguments>{argnums}) says why, at your line, "
          "with a verified fix")


def _unjudged(origin, paths, param_flows, reason: str) -> GradReport:
  """The report of a gradient vjpviz could not take again: the parameters' norms, and why."""
  return GradReport(function=origin.name, graph=_graph(origin), note=f"gradient {reason}",
                    unchecked=unchecked.Unchecked(f"vv.grads of {origin.name}",
                                                  "the gradient could not be taken again"),
                    leaves=tuple((p, math.nan, w.norm) for p, w in zip(paths, param_flows)))


def _graph(origin) -> Graph:
  """``origin``'s forward program as a graph (traced again: the user's prints captured)."""
  with replay.quiet():
    return program.build(origin, lambda g: [])[0]


def _with_primals(graph: Graph, norms: dict) -> Graph:
  """Each edge into an equation with its primal value's norm (``Edge.primal_norm``)."""
  return dataclasses.replace(graph, edges=tuple(
      e._replace(primal_norm=norms.get(f"{e.dst}#{e.position}")) for e in graph.edges))


def _shape_of(fn, args, kwargs):
  """``jax.eval_shape`` of the call, its non-array leaves closed over (an equinox model
  holds its activation function)."""
  flat, tree = jax.tree_util.tree_flatten((args, kwargs))
  at = [k for k, x in enumerate(flat) if isinstance(x, (jax.Array, np.ndarray))]

  def call(*arrays):
    leaves = substituted(flat, at, arrays)
    a, kw = jax.tree_util.tree_unflatten(tree, leaves)
    return fn(*a, **kw)
  return jax.eval_shape(call, *(flat[k] for k in at))


def _aval(x) -> str:
  return f"{x.dtype}{list(x.shape)}" if hasattr(x, "shape") else type(x).__name__


def _float_leaves(args, kwargs, nums) -> tuple[list[str], list[int]]:
  """(path, position in the flattened ``(args, kwargs)``) of every floating array in the
  differentiated arguments: ``keystr`` of the leaf in its argument (``args[i]`` before it
  when several are). By position, not identity: a model may hold one array twice."""
  paths, positions = [], []
  start = 0
  for i, a in enumerate(args):
    flat = jax.tree_util.tree_flatten_with_path(a)[0]
    for k, (kp, x) in enumerate(flat):
      if i in nums and isinstance(x, jax.Array) and inexact(x):
        paths.append((f"args[{i}]" if len(nums) > 1 else "") + jax.tree_util.keystr(kp))
        positions.append(start + k)
    start += len(flat)
  return paths, positions


def _origin(fn, args, kwargs, positions) -> Origin:
  """The call as the graph builder reads it: avals for arrays, the leaves at
  ``positions`` differentiated (``user_origin`` matches them by identity)."""
  flat, tree = jax.tree_util.tree_flatten((args, kwargs))
  leaves = tuple(core.typeof(x) if isinstance(x, (jax.Array, np.ndarray)) else x for x in flat)
  return Origin(fun=fn, leaves=leaves, tree=tree, differentiated_leaves=tuple(positions),
                name=names.function_name(fn), source=names.function_source(fn))


def _invar_positions(origin, positions) -> list[int]:
  """The jaxpr input each differentiated leaf is."""
  arrays = {j: k for k, j in enumerate(
      j for j, leaf in enumerate(origin.leaves) if isinstance(leaf, core.AbstractValue))}
  return [arrays[j] for j in positions]


def _zero_leaf(path: str, cut, names: list[str]) -> ZeroLeaf:
  factor = names[cut.factor] if cut.factor is not None else None
  return ZeroLeaf(path, cut.reason, cut.source, cut.op, cut.node, factor)


def _input_names(origin, args, kwargs, differentiated: dict[int, str]) -> list[str]:
  """Each jaxpr input's name: a differentiated leaf's path (``differentiated``, by input),
  another as the user passed it (``args[1]['x']``, ``kwargs['mask']``)."""
  flat = jax.tree_util.tree_flatten_with_path((args, kwargs))[0]
  names = []
  for (kp, _), leaf in zip(flat, origin.leaves):
    if isinstance(leaf, core.AbstractValue):
      where = "args" if kp[0].idx == 0 else "kwargs"
      names.append(differentiated.get(len(names), f"{where}{jax.tree_util.keystr(kp[1:])}"))
  return names


def _partly(path: str, g: np.ndarray, gathered: bool,
            read: list[np.ndarray] | None = None) -> list[PartlyZero]:
  """Units along the first axis (rows) and the last (columns) of ``g`` that are all zero:
  those no static slice reads (``read``, per axis: ``grad_paths.sliced``) apart."""
  if g.ndim == 0 or np.all(g != 0):
    return []
  found = []
  axes = [(0, "rows" if g.ndim > 1 else "entries")] + ([(g.ndim - 1, "columns")] if g.ndim > 1
                                                        else [])
  for axis, units in axes:
    other = tuple(a for a in range(g.ndim) if a != axis)
    dead = ~np.any(g != 0, axis=other) if other else g == 0
    unread = dead & ~read[axis] if read is not None else np.zeros_like(dead)
    if unread.any():
      found.append(PartlyZero(path, units, float(unread.mean()), "not read", False))
    dead &= ~unread
    if dead.any() and (units != "columns" or not gathered):
      reason = "not gathered" if gathered and axis == 0 else "dead"
      found.append(PartlyZero(path, units, float(dead.mean()), reason, reason != "not gathered"))
  return found


def _flow(x) -> nonfinite.Flow:
  return nonfinite.Flow.of(nonfinite.flow(x), int(np.size(x)))


def _layers(paths, scopes, grad_flows, param_flows, eps, tables=frozenset(),
            unmeasured=frozenset()) -> tuple[Layer, ...]:
  """Per block, in depth order, each flagged where its gradient norm is over ``CHANGE``
  times above or below the next one's, or its update ratio is out of reach (``_flag``).
  The blocks are the named scopes the leaves are read in, where they make two or more
  (``_named_blocks``); else the repeated blocks of a stacked model (``nonfinite.strip``'s
  grouping of the paths). A block of embedding ``tables`` (leaf indices read only by
  gathers) is neither flagged nor compared with; nor is one holding an ``unmeasured`` leaf
  (its gradient NaN/Inf: its norm is of the finite part only)."""
  members = block_members(paths, scopes)
  rows = [(name, nonfinite.Flow.joined([grad_flows[k] for k in ks]).norm,
           nonfinite.Flow.joined([param_flows[k] for k in ks]).norm) for name, ks in members]
  members = [ks for _, ks in members]
  # An embedding's gradient is sparse by nature (rows not gathered): its norm is no evidence.
  sparse = [bool(ks) and set(ks) <= set(tables) or bool(set(ks) & set(unmeasured))
            for ks in members]
  layers = []
  for k, (name, norm, param) in enumerate(rows):
    deeper = rows[k + 1][1] if k + 1 < len(rows) and not sparse[k + 1] else None
    ratio = norm / param if param else None
    flag, why = (None, None) if sparse[k] else _flag(norm, deeper, ratio, eps)
    layers.append(Layer(name, norm, param, ratio, flag, why))
  return tuple(layers)


def block_members(paths, scopes, by_path: bool = False) -> list[tuple[str, list[int]]]:
  """(block, its leaves' indices) per block, as the report names them: the named scopes
  the leaves are read in, where they make two or more (``_named_blocks``; an equinox
  model's, whose scopes are classes, by path instead); else the repeated blocks of a
  stacked model (``nonfinite.strip``'s grouping of the paths); else, ``by_path``, the
  paths cut one key below what all share (``_path_blocks``); [] when none applies."""
  named = _named_blocks(scopes)
  if named and _by_class(named, paths):   # equinox's scopes: one per class, not per layer
    named = _path_blocks(paths, scopes)
  if named:
    return named
  blank = [nonfinite.Flow(1, 0, 0, 0.0, 0.0)] * len(paths)
  stacked = [(row[0], [k for k, p in enumerate(paths) if p.startswith(row[0])])
             for row in nonfinite.strip(list(paths), blank)]
  return stacked or (_path_blocks(paths, scopes) if by_path else [])


def _flag(norm, deeper, ratio, eps) -> tuple[str | None, str | None]:
  """A block's flag, and why: its gradient norm over ``CHANGE`` times below or above the
  next block's; else an update ratio ‖g‖/‖w‖ no learning rate a user sets makes work:
  below the weights' rounding ``eps`` at the highest (the update is lost adding it), or
  over the weights themselves at the lowest."""
  # A block with no gradient at all is its zero leaves' to say, each with its reason (a
  # stop_gradient, an unused head): "vanishing" would be a second, wrong one.
  if deeper is not None and deeper > 0 and 0 < norm < deeper / CHANGE:
    return "vanishing", f"‖g‖ {deeper / norm:.3g}x below the next block's"
  if deeper and norm > deeper * CHANGE:   # a next block with none is a zero leaf's to say
    return "exploding", f"‖g‖ {norm / deeper:.3g}x above the next block's"
  low, high = LEARNING_RATES
  if ratio is not None and 0 < ratio * high < eps:
    return "vanishing", (f"‖g‖/‖w‖ {ratio:.3g}: at a learning rate of {high:g} the update is "
                         f"below the weights' rounding ({eps:.3g}) and is lost")
  if ratio is not None and ratio * low > 1:
    return "exploding", (f"‖g‖/‖w‖ {ratio:.3g}: at a learning rate of {low:g} the update "
                         "still outweighs the weights")
  return None, None


def _named_blocks(scopes) -> list[tuple[str, list[int]]]:
  """(scope, its leaves) per block, in the order the program first reads them: each leaf's
  scope (``grad_paths.reading_scopes``) cut one name below what all share (``Net/encoder``
  of ``Net/encoder/proj``); [] unless that makes two or more (an equinox model's
  scopes are its classes' names, one for every ``Linear``: its blocks are its paths')."""
  parts = [scope.split("/") if scope else None for scope, _ in scopes]
  named = [p for p in parts if p]
  if not named:
    return []
  depth = len(os.path.commonprefix(named)) + 1
  blocks: dict[str, list[int]] = {}
  for k in sorted((k for k, p in enumerate(parts) if p), key=lambda k: scopes[k][1]):
    blocks.setdefault("/".join(parts[k][:depth]), []).append(k)
  return list(blocks.items()) if len(blocks) > 1 else []


_KEY = re.compile(r"\.\w+|\[[^\]]*\]")


def _keys(path: str) -> list[str]:
  """``.attn.query_proj.weight`` -> ``['.attn', '.query_proj', '.weight']``."""
  return _KEY.findall(path)


def _by_class(named, paths) -> bool:
  """Whether a named block holds leaves of different modules: its scope is a class's name
  (two ``eqx.nn.Linear`` layers), not one layer's."""
  depth = len(os.path.commonprefix([_keys(p) for p in paths]))
  return any(len({tuple(_keys(paths[k])[:depth + 1]) for k in ks}) > 1 for _, ks in named)


def _path_blocks(paths, scopes) -> list[tuple[str, list[int]]]:
  """(path, its leaves) per block, in the order the program first reads them: each leaf's
  path cut one key below what all share (``.enc``, ``.attn`` of an equinox model's leaves);
  [] unless that makes two or more."""
  keys = [_keys(p) for p in paths]
  depth = len(os.path.commonprefix(keys)) + 1
  blocks: dict[str, list[int]] = {}
  unread = lambda k: scopes[k][1] is None
  for k in sorted(range(len(paths)), key=lambda k: (unread(k), () if unread(k) else scopes[k][1])):
    blocks.setdefault("".join(keys[k][:depth]), []).append(k)
  return list(blocks.items()) if len(blocks) > 1 else []
