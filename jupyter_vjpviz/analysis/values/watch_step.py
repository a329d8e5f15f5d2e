"""A watched step's compiled computation: the user's step traced again with its first
gradient's health (each leaf's squared norm, the logs' summaries, the backward flow)
reduced beside its outputs, compiled as the step is (``jax.jit``/``nnx.jit`` options, else
as ``eqx.filter_jit``).

``phase`` says how far a call got, so that ``api/watch.py`` can tell vjpviz's failure from
the user's: ``compile`` (the jitted function made), ``trace`` (the step traced again, our
reductions added), ``lower`` (that trace lowered, compiled and first run by jit), ``run``
(jit's dispatch of a computation traced before: the user's step, run as compiled).
"""
from __future__ import annotations

import weakref

import jax
import jax.numpy as jnp
import numpy as np

from ...base.safety import safely
from ...capture import grad_calls
from ...capture.naming import leaf_paths
from .. import watch_rows as rows
from . import flow as values_flow
from .watch_flow import FlowColumns

KEEP_BYTES = 1 << 28   # the most bytes of arguments copied to the host at a non-finite step
ARMED = "_vjpviz_armed"   # the keyword the watched step's device flags pass under


class WatchedStep:
  """``step`` compiled with its gradient's health; what its trace learnt (the leaves'
  ``paths``, whether they are ``live`` nnx modules, the logs' names, the flow's blocks)."""

  def __init__(self, step, fun, group, logs_of=None, flow: bool = False):
    self.step, self.fun, self.group, self.logs_of = step, fun, group, logs_of
    self.flow_on = flow
    self.flow = FlowColumns()   # the blocks a row carries, or why none
    self.log_names: list[str] = []
    self.paths: list[str] = []
    self.keypaths: list = []
    self.live = False    # the step's gradient is of live nnx modules
    self.first_bad: tuple | None = None   # set by ``_guarded``'s host copy
    self.phase = "compile"
    self._direct = None   # the step jitted as the user's is (``jitted_as``), once made
    self._compiled: dict = {}

  def __call__(self, args, kwargs):
    """(the step's outputs, its health array, ``ARMED``) of one call."""
    self.phase = "compile"
    if self._direct is None:
      self._direct = jitted_as(self.step, self._traced) or False
    self.phase = "run"
    if self._direct is not False:
      return self._direct(*args, **kwargs)
    return self._filtered(args, kwargs)

  def _traced(self, *args, **kwargs):
    """The step's outputs, its first gradient's squared norm per leaf, and ``ARMED``
    carried on (``_guarded``)."""
    self.phase = "trace"
    armed = kwargs.pop(ARMED, None)
    # flattened before the step runs: an nnx step updates its modules in place, and the
    # copy ``_guarded`` makes must be of the arguments it was called with
    call = jax.tree_util.tree_flatten((args, kwargs))
    box: list = []
    taps: list = []   # the tapped function's Taps, or why it could not tap
    flows: list = []  # the taps' logs
    tapper = values_flow.Tapper(self.group, taps) if self.flow_on else None
    with grad_calls.seen_through(box, tapper, flows):
      out = self.fun(*args, **kwargs)
    if not box:
      raise ValueError("vv.watch: the step took no gradient (jax.grad, jax.value_and_grad, "
                       "eqx.filter_value_and_grad, nnx.value_and_grad)")
    grads, live = box[0]
    self.live = live
    flat = [(leaf_paths.without_value(kp) if live else kp, g)
            for kp, g in jax.tree_util.tree_flatten_with_path(grads)[0]
            if isinstance(g, jax.Array) and jnp.issubdtype(g.dtype, jnp.inexact)]
    self.paths = [leaf_paths.attribute_path(kp) if live else jax.tree_util.keystr(kp)
                  for kp, _ in flat]
    self.keypaths = [kp for kp, _ in flat]
    norms = rows.healths([g for _, g in flat])   # float32[leaves]
    armed = None if armed is None else self._guarded(norms, armed, call)
    parts = [norms]
    if self.logs_of is not None:
      parts.append(safely(self._log_stats, out, default=rows.NO_LOGS))
    if self.flow_on:
      parts += self.flow.columns(taps, flows)
    health = rows.assembled(parts)
    self.phase = "lower"   # by jit next, then its first run: the user's step's as much as ours
    return out, health, armed

  def _log_stats(self, out) -> jax.Array:
    """float32[3 * logs]: each numeric leaf's mean, min and max of the gradient logs
    ``logs_of`` picks from the step's outputs (``jax.grad(..., with_logs=True)``), reduced
    inside the step: they reach the host with its norms, in the same copy."""
    self.log_names = []     # as the default this returns on a failure
    named = rows.named_logs(self.logs_of(out))
    self.log_names = [name for name, _ in named]
    return jnp.concatenate([rows.NO_LOGS, *(rows.stats(x) for _, x in named)])

  def _guarded(self, health, armed, call):
    """``armed`` updated (``call``: the step's arguments, flattened before it ran): its
    first entry cleared at a non-finite step, its second counting calls. At the first
    non-finite step, its arguments are copied to the host (a pure callback in a branch
    not taken otherwise: no transfer at any other step), one copy, where they take at most
    ``KEEP_BYTES``: ``vv.nans`` on that step whatever came after. Only with
    ``keep_first_nonfinite``: the callback costs every step ~2 ms on an accelerator."""
    flat, tree = call
    at = [k for k, x in enumerate(flat) if isinstance(x, jax.Array)]
    bad = ~jnp.all(jnp.isfinite(health))
    if sum(flat[k].size * flat[k].dtype.itemsize for k in at) <= KEEP_BYTES:
      statics = [None if isinstance(x, jax.Array) else x for x in flat]
      me = weakref.ref(self)

      def copied(step, *arrays):
        watched = me()
        if watched is not None and watched.first_bad is None:
          leaves = list(statics)
          for k, x in zip(at, arrays):
            leaves[k] = np.array(x)
          # built afresh for each run: the step may update them in place (nnx modules)
          watched.first_bad = (int(step), lambda: jax.tree_util.tree_unflatten(
              tree, [jnp.asarray(x) if isinstance(x, np.ndarray) else x for x in leaves]))

      # run inside the user's compiled step: a failure of ours must not raise there
      keep = lambda *a: safely(copied, *a) or np.int32(0)
      # A pure callback, its result used: an effect would take the step off jit's C++
      # dispatch (a third more time per step on CPU).
      kept = jax.lax.cond(bad & (armed[0] == 1), lambda: jax.pure_callback(
          keep, jax.ShapeDtypeStruct((), jnp.int32), armed[1], *(flat[k] for k in at)),
          lambda: jnp.int32(0))
      armed = armed + kept
    return jnp.stack([armed[0] * (1 - bad.astype(jnp.int32)), armed[1] + 1])

  def _filtered(self, args, kwargs):
    """The step compiled once per structure and non-array leaves (as eqx.filter_jit: a
    model's functions are static), its outputs' non-array leaves returned as traced."""
    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    dynamic = [isinstance(x, (jax.Array, np.ndarray)) for x in leaves]
    key = (tree, tuple(x for x, d in zip(leaves, dynamic) if not d), tuple(dynamic))
    if key not in self._compiled:
      self.phase = "compile"
      self._compiled[key] = self._split(leaves, tree, dynamic)
      self.phase = "run"
    compiled, out_static = self._compiled[key]
    arrays, health, armed = compiled([x for x, d in zip(leaves, dynamic) if d])
    return _merged(out_static, arrays), health, armed

  def _split(self, leaves, tree, dynamic):
    out_static: list = []

    def run(arrays):
      it = iter(arrays)
      args, kwargs = jax.tree_util.tree_unflatten(
          tree, [next(it) if d else x for x, d in zip(leaves, dynamic)])
      out, health, armed = self._traced(*args, **kwargs)
      out_leaves, out_tree = jax.tree_util.tree_flatten(out)
      is_array = [isinstance(x, jax.Array) for x in out_leaves]
      out_static[:] = [out_tree, [None if a else x for x, a in zip(out_leaves, is_array)]]
      return [x for x, a in zip(out_leaves, is_array) if a], health, armed
    return jax.jit(run), out_static


def _merged(out_static: list, arrays: list):
  tree, leaves = out_static
  it = iter(arrays)
  return jax.tree_util.tree_unflatten(tree, [next(it) if x is None else x for x in leaves])


def jitted_as(step, traced):
  """``traced`` jitted as ``step`` is, with its static and donated arguments, called through
  jit's own dispatch (nothing flattened here): a ``jax.jit``, or a flax ``nnx.jit`` (whose
  modules' updates, an ``nnx.Optimizer``'s in place, land in the user's objects as
  without vv.watch; its shardings are not carried). None for anything else (then
  compiled as ``eqx.filter_jit`` would)."""
  inner = getattr(step, "jitted_fn", None)    # nnx.jit's jax.jit over its pure arguments
  info = getattr(inner if inner is not None else step, "_jit_info", None)
  if info is None:
    return None
  options = {name: getattr(info, name, None) or () for name in (
      "static_argnums", "static_argnames", "donate_argnums", "donate_argnames")}
  if inner is None:
    return jax.jit(traced, **options)
  from flax import nnx   # the step is flax's own
  return nnx.jit(traced, graph=getattr(step, "graph", True),
                 graph_updates=type(step).__name__ == "JitWrapped", **options)
