"""``vv.watch(step)``: each parameter leaf's gradient norm per training step, cheaply.

The step is traced again with ``jax.grad``/``jax.value_and_grad`` (which equinox's
``filter_value_and_grad`` calls) and flax's ``nnx.grad``/``nnx.value_and_grad`` seen
through (an ``nnx.jit`` step jitted again by ``nnx.jit``: its modules are updated in place;
their leaves named as the user reaches them, ``.layers[2].kernel``): the
first gradient it takes is reduced inside the same jitted computation to one small
float32[leaves] array (each leaf's squared norm: zero, finite or not), returned beside the
step's own outputs; every ``BATCH`` steps' are stacked and copied to the host
asynchronously (per-step copies cost a dispatch-bound step ~0.1 ms each): no other
transfer, no second computation. Reading ``steps`` (or printing) waits for the rest.

Listeners (``add_listener``: the panel's channel registers one) hear of a watch at most
every ``PUSH_EVERY`` seconds, from a call; they read the series landed so far (``landed``,
``series``: downsampled, one line per layer, the events), never waiting for a copy.
A throttled call leaves a timer behind (one thread, ended by its push or ``close``) so
that a loop's last steps land without another call.

The last call's arguments are kept (a reference, no copy), so that ``vv.nans`` can run on
them (the panel's button on a non-finite event); the first non-finite step's too, at no
cost per step, best-effort: at the next call (or a read), the last call's are kept on if
its health array is already on the host (``is_ready``, never waited for) and not finite.
An accelerator running steps behind the host can miss it (then a later non-finite call
is kept, if any is seen so), and arguments donated to the step, or live nnx modules
(updated in place: the kept call holds their state after the step), cannot be kept so.
``keep_first_nonfinite=True`` keeps that step exactly, as a host copy made inside the
compiled step, at the price of a host callback compiled into every step (~2 ms a step on
a TPU even when its branch is not taken: benchmarks/watch_overhead.py).

In a ``jax.distributed`` job only process 0 keeps the series; every process reads its
last call's health as ``_promote`` does (ready, until the first non-finite one) and, at a
non-finite one, checks its own shards of that call's sharded arrays and tells process 0
which hold non-finite values (``_locate``): the event names that process.

``logs=``: the gradient logs a step returns (``jax.grad(..., with_logs=True)``) reduced
in the step to each log's mean, min and max, carried in the same row as the norms.
"""
from __future__ import annotations

import dataclasses
import html
import itertools
import threading
import time
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from ..base import hosts
from ..base.safety import Listeners, safely
from ..capture import processes
from ..capture.naming import function_names, leaf_paths
from .nans import nans as localise_nans
from ..render.html import STYLE
from ..analysis import watch_rows as rows
from ..analysis.watch_rows import POINTS, BlockEvent, LeafEvents  # noqa: F401 - their home was here
from ..analysis.values import flow as values_flow
from ..analysis.values.watch_flow import FlowColumns
from ..capture import grad_calls
from .grads import block_members

STAYED = 3    # a leaf zero this many steps running is named as stuck
BATCH = 32    # steps whose arrays are stacked and sent to the host at once
PUSH_EVERY = 0.5   # seconds between two pushes of a watch's series to the panel
LINES = 64         # the most lines (layers) it draws
EVENTS = 256       # the most events it lists
KEEP_BYTES = 1 << 28   # the most bytes of arguments copied to the host at a non-finite step
ARMED = "_vjpviz_armed"   # the keyword the watched step's device flags pass under


# A full batch stacked by one compiled call: op by op, ``jnp.stack`` of BATCH arrays costs a
# small step a quarter of its time again (benchmarks/watch_overhead.py, width 64 on CPU).
_stack_batch = jax.jit(jnp.stack)


class Watched:
  """A jitted training step that records its gradient's health per call."""

  def __init__(self, step, stayed: int = STAYED, keep: bool = True,
               keep_first_nonfinite: bool = False, logs=None, flow: bool = False):
    self.__wrapped__, self.stayed, self.keep = step, stayed, keep
    self.flow_on = flow
    self._flow = FlowColumns()   # the blocks a row carries, or why none
    self.logs_of = logs      # the step's outputs -> the gradient logs it returned
    self.log_names: list[str] = []
    self.keep_first_nonfinite = keep_first_nonfinite
    self.id = f"w{next(_ids)}"
    _watches[self.id] = self
    self._calls = 0
    self._kept: tuple | None = None   # (step, args, kwargs, health, out) of the last call
    self._located: int | None = None   # the step whose non-finite shards this process told
    self._shards: dict[int, dict] = {}   # on process 0: process -> its record of that step
    self._waited = False   # process 0 waited (once) for the others' records
    self._first_bad: tuple | None = None   # (step, () -> (args, kwargs)) of the first
                                           # non-finite call: _kept's, or a host copy
    self._armed = None    # on the device: [no non-finite step yet, calls so far]
    self._live = False    # the step's gradient is of live nnx modules
    self._pushed_at = self._called_at = 0.0
    self._timer: threading.Timer | None = None
    self._lock = threading.Lock()    # the steps' arrays, read by a trailing push's thread
    self._fun = getattr(step, "__wrapped__", None) or getattr(step, "fn", None) or step
    self.paths: list[str] = []
    self._keypaths: list = []
    self._pending: list = []     # the last steps' arrays, still on the device
    self._batches: list = []     # BATCH steps' stacked, on their way to the host
    self._rows: list[np.ndarray] = []
    self._compiled: dict = {}
    self._direct = _jitted_as(step, self._traced)

  def __call__(self, *args, **kwargs):
    kept = (self._calls, args, kwargs)
    self._calls += 1
    if self.keep_first_nonfinite:
      if self._armed is None:
        self._armed = jnp.array([1, 0], jnp.int32)
      kwargs = {**kwargs, ARMED: self._armed}
    out, health, armed = self.compiled_call(args, kwargs)
    self._armed = armed if self.keep_first_nonfinite else None
    safely(self._locate, False)   # the last call's, before this one's replaces it
    self._promote()
    self._kept = (*kept, health, out) if self.keep else None
    if not self.recording:   # the same global norms as process 0's, which keeps the series
      return out
    with self._lock:
      self._pending.append(health)
      if len(self._pending) == BATCH:   # one dispatch and one async copy per BATCH steps
        self._flush()
    if _listeners:
      self._called_at = time.monotonic()
      if self._called_at - self._pushed_at >= PUSH_EVERY:
        self._push()
      elif self._timer is None:   # the loop's last steps land even if no call follows
        self._timer = threading.Timer(self._pushed_at + PUSH_EVERY - self._called_at,
                                      self._trailing)
        self._timer.name, self._timer.daemon = "vjpviz-watch-push", True
        self._timer.start()
    return out

  @property
  def recording(self) -> bool:
    """Whether this process keeps the series: in a ``jax.distributed`` job only process 0
    does (every process computes the same global norms; the others copy no series to the
    host, only the last call's health until a non-finite one: ``_locate``)."""
    return processes.index() == 0

  def compiled_call(self, args, kwargs):
    """(the step's outputs, its health array, ``ARMED``) of one call of the compiled
    watched step, nothing recorded (what a call costs past the step itself, without the
    recording: benchmarks/watch_overhead.py)."""
    if self._direct is not None:
      return self._direct(*args, **kwargs)
    return self._filtered(args, kwargs)

  def _promote(self) -> None:
    """The last call's arguments kept as the first non-finite step's, if none is yet, its
    health array is on the host already and not finite, and they are intact (not donated,
    not live modules updated in place since)."""
    if self._kept is None or self._first_bad is not None or self.keep_first_nonfinite:
      return
    health = self._kept[3]
    if self._live or not health.is_ready() or self._finite(np.asarray(health)):
      return
    step, args, kwargs, *_ = self._kept
    if not any(_deleted(x) for x in jax.tree_util.tree_leaves((args, kwargs))):
      self._first_bad = (step, lambda: (args, kwargs))

  def _finite(self, row: np.ndarray) -> bool:
    """Every leaf's norm of a step's ``row`` finite (its logs' summaries not judged)."""
    return bool(np.isfinite(row[:len(self.paths)]).all())

  def _locate(self, wait: bool) -> None:
    """In a job: once the last call's global norms (the same on every process, so every
    process takes this branch alike) are seen non-finite, its arrays sharded across the
    processes (arguments and outputs) are checked here, on the shards this process holds
    (host copies: no collective), and which hold non-finite values is published for
    process 0 (``processes``). Best-effort as ``_promote``: the health is read where it is
    ready (``wait``: waited for, by a read), until the first non-finite call."""
    if self._located is not None or self._kept is None or processes.count() == 1:
      return
    step, args, kwargs, health, out = self._kept
    if not (wait or health.is_ready()) or self._finite(hosts.host(health)):
      return
    self._located = step
    labels = [*function_names.call_labels(self._fun, (args, kwargs)),
              *(f"out{jax.tree_util.keystr(kp)}"
                for kp, _ in jax.tree_util.tree_flatten_with_path(out)[0])]
    processes.publish(f"watch/{self.id}", {"step": step, "held": [
        f"{label}{view.span()}" for label, x in zip(labels, jax.tree_util.tree_leaves(
            (args, kwargs, out))) if (view := _nonfinite_view(x)) is not None]})

  def _nonfinite_shards(self, step: int) -> str:
    """On process 0, where a job's processes found non-finite shards at ``step``:
    ``on process 1 only (x[2:4, 0:3])``; waits for their records once, at most
    ``processes.WAIT``; "" elsewhere, or where none did."""
    if self._located != step or processes.index() != 0:
      return ""
    if len(self._shards) < processes.count():
      wait = 0.0 if self._waited else processes.WAIT
      self._waited = True
      self._shards = processes.gathered({f"watch/{self.id}"}, wait).get(f"watch/{self.id}", {})
    held = {p: r["held"] for p, r in self._shards.items() if r["step"] == step and r["held"]}
    spans = "; ".join(", ".join(h) for _, h in sorted(held.items()))
    return f"{processes.spelled(held)} ({spans})" if held else ""

  def _flush(self) -> None:
    """The pending steps' arrays stacked and copied to the host (held: ``_lock``)."""
    stack = _stack_batch if len(self._pending) == BATCH else jnp.stack
    self._batches.append(stack(self._pending))
    self._batches[-1].copy_to_host_async()
    self._pending.clear()

  def _push(self) -> None:
    self._pushed_at = time.monotonic()
    _listeners.notify(self)

  def _trailing(self) -> None:
    """The push a throttled call left for later, on the timer's thread: the steps since the
    last push, all of them landed first."""
    self._timer = None
    if self._called_at <= self._pushed_at:
      return
    with self._lock:
      if self._pending:
        self._flush()
      batches = list(self._batches)
    jax.block_until_ready(batches)
    self._push()

  def close(self) -> None:
    """A trailing push not yet made is cancelled (its thread ends)."""
    timer, self._timer = self._timer, None
    if timer is not None:
      timer.cancel()
      if timer is not threading.current_thread():
        timer.join()

  def _traced(self, *args, **kwargs):
    """The step's outputs, its first gradient's squared norm per leaf, and ``ARMED``
    carried on (``_guarded``)."""
    armed = kwargs.pop(ARMED, None)
    # flattened before the step runs: an nnx step updates its modules in place, and the
    # copy ``_guarded`` makes must be of the arguments it was called with
    call = jax.tree_util.tree_flatten((args, kwargs))
    box: list = []
    taps: list = []   # the tapped function's Taps, or why it could not tap
    flows: list = []  # the taps' logs
    group = lambda paths, scopes: block_members(paths, scopes, by_path=True)
    tapper = values_flow.Tapper(group, taps) if self.flow_on else None
    with grad_calls.seen_through(box, tapper, flows):
      out = self._fun(*args, **kwargs)
    if not box:
      raise ValueError("vv.watch: the step took no gradient (jax.grad, jax.value_and_grad, "
                       "eqx.filter_value_and_grad, nnx.value_and_grad)")
    grads, live = box[0]
    self._live = live
    flat = [(leaf_paths.without_value(kp) if live else kp, g)
            for kp, g in jax.tree_util.tree_flatten_with_path(grads)[0]
            if isinstance(g, jax.Array) and jnp.issubdtype(g.dtype, jnp.inexact)]
    self.paths = [leaf_paths.attribute_path(kp) if live else jax.tree_util.keystr(kp)
                  for kp, _ in flat]
    self._keypaths = [kp for kp, _ in flat]
    health = jnp.stack([rows.health(g) for _, g in flat])   # float32[leaves]
    armed = None if armed is None else self._guarded(health, armed, call)
    if self.logs_of is not None:
      health = jnp.concatenate([health, safely(self._log_stats, out, default=rows.NO_LOGS)])
    if self.flow_on:
      health = jnp.concatenate([health, self._flow.row(taps, flows)])
    return out, health, armed

  def flow(self) -> list[dict]:
    """One row per step and block (``step``, ``block``, ``norm``, ``max_abs``,
    ``finite_fraction``, ``zero_fraction``) of the cotangent of each block's output,
    measured in the compiled step (``watch(step, flow=True)``; [] without, or where the
    step could not be tapped: ``flow_note`` says why)."""
    return self._flow.table(self._flow_cols())

  @property
  def flow_blocks(self) -> list[str]:
    """The blocks whose output cotangents a step's row carries, from the input to the loss."""
    return self._flow.blocks

  @property
  def flow_note(self) -> str | None:
    """Why, with the flow on, the step could not be tapped (None: it was)."""
    return self._flow.note

  def _flow_cols(self, s: np.ndarray | None = None) -> np.ndarray:
    s = self._every_row() if s is None else s
    start = len(self.paths) + 3 * len(self.log_names)
    return s[:, start:start + self._flow.width]

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

      def keep(step, *arrays):
        watched = me()
        if watched is not None and watched._first_bad is None:
          leaves = list(statics)
          for k, x in zip(at, arrays):
            leaves[k] = np.array(x)
          # built afresh for each run: the step may update them in place (nnx modules)
          watched._first_bad = (int(step), lambda: jax.tree_util.tree_unflatten(
              tree, [jnp.asarray(x) if isinstance(x, np.ndarray) else x for x in leaves]))
        return np.int32(0)
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
      self._compiled[key] = self._split(leaves, tree, dynamic)
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

  @property
  def steps(self) -> np.ndarray:
    """float32[steps, leaves]: each leaf's squared gradient norm per step."""
    return self._every_row()[:, :len(self.paths)]

  @property
  def logs(self) -> dict[str, np.ndarray]:
    """name -> float32[steps, 3]: each gradient log's mean, min and max per step
    (``watch(step, logs=...)``; {} without)."""
    return rows.logs_of(self._every_row(), len(self.paths), self.log_names)

  def _every_row(self) -> np.ndarray:
    """Every step's row (``steps``, then the logs' summaries), waiting for the copies."""
    safely(self._locate, True)
    with self._lock:
      self._rows += [*(row for b in self._batches for row in np.asarray(b)),
                     *(np.asarray(h) for h in self._pending)]
      self._pending.clear()
      self._batches.clear()
      return self._stacked()

  def landed(self) -> np.ndarray:
    """The steps' rows already on the host, in order, without waiting for any copy: each
    leaf's squared norm, then the logs' summaries (``series`` reads both)."""
    with self._lock:
      while self._batches and self._batches[0].is_ready():
        self._rows.extend(np.asarray(self._batches.pop(0)))
      return self._stacked()

  def _stacked(self) -> np.ndarray:
    width = len(self.paths) + 3 * len(self.log_names) + self._flow.width
    return np.stack(self._rows) if self._rows else np.zeros((0, width), np.float32)

  @property
  def norms(self) -> np.ndarray:
    return np.sqrt(self.steps)

  def events(self, s: np.ndarray | None = None) -> list[rows.LeafEvents]:
    """Per leaf with anything to say: the first zero, stuck and non-finite steps (of
    ``s``, the squared norms, every step's by default)."""
    s = self.steps if s is None else s
    found = []
    for k, path in enumerate(self.paths):
      zero, bad = s[:, k] == 0, ~np.isfinite(s[:, k])
      e = rows.LeafEvents(path, rows.first(zero), rows.first_run(zero, self.stayed), rows.first(bad))
      if e.first_zero is not None or e.first_nonfinite is not None:
        found.append(e)
    return found

  def block_events(self, s: np.ndarray | None = None) -> list[rows.BlockEvent]:
    """The events of ``s`` (every step's by default) grouped per block and event: the
    leaves of one parent path that went zero at the same steps (or non-finite at the same
    step) make one, named by that path; in step order."""
    groups: dict[tuple, list[str]] = {}
    blocks = dict(zip(self.paths, rows.layers(self._keypaths)))
    for e in self.events(s):
      if e.first_zero is not None:
        groups.setdefault((e.first_zero, blocks[e.path], "zero", e.stayed_zero), []).append(e.path)
      if e.first_nonfinite is not None:
        groups.setdefault((e.first_nonfinite, blocks[e.path], "first_nonfinite", None),
                          []).append(e.path)
    return [rows.BlockEvent(step, block if len(paths) > 1 else paths[0], len(paths),
                       kind if kind != "zero" else "first_zero" if stayed is None else "stayed_zero",
                       stayed, self._nonfinite_shards(step) if kind == "first_nonfinite" else "")
            for (step, block, kind, stayed), paths in sorted(
                groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2]))]

  def to_dict(self) -> dict:
    return {"paths": self.paths, "norms": self.norms.tolist(),
            "events": [dataclasses.asdict(e) for e in self.events()]}

  def series(self, s: np.ndarray | None = None) -> dict:
    """The panel's WatchSeries (protocol.schema.json) of ``s`` (every step's rows by
    default): at most ``POINTS`` steps drawn, every event's step among them, one norm line
    per layer (at most ``LINES``: past that, per top-level key), at most ``EVENTS``
    events, the first ``LINES`` logs' mean, min and max at the steps drawn."""
    s = self._every_row() if s is None else s
    events = self.block_events(s)[:EVENTS]
    points = rows.points(len(s), [e.step for e in events])
    groups = rows.layers(self._keypaths)
    if len(set(groups)) > LINES:
      groups = rows.layers([kp[:1] for kp in self._keypaths])
    lines = []
    for g in list(dict.fromkeys(groups))[:LINES]:
      norm = np.sqrt(s[points][:, [i for i, x in enumerate(groups) if x == g]].sum(axis=1))
      lines.append({"group": g, "norms": rows.finite_or_none(norm)})
    return {"id": self.id, "steps": len(s), "stayed": self.stayed, "process": processes.index(),
            "points": [int(p) for p in points], "lines": lines,
            "events": [{"step": e.step, "path": e.path, "leaves": e.leaves, "kind": e.kind,
                        "text": e.text(self.stayed)} for e in events],
            "kept_steps": self.kept_steps(),
            "logs": [{"name": name, **{k: rows.finite_or_none(v[points, i]) for i, k in enumerate(
                ("mean", "min", "max"))}} for name, v in list(rows.logs_of(
                    s, len(self.paths), self.log_names).items())[:LINES]],
            **({"flow": self._flow.series(self._flow_cols(s)[points])} if self.flow_on else {})}

  def kept_steps(self) -> list[int]:
    """The steps whose arguments are kept (``nans`` runs on them): the last call's and the
    first non-finite one's (where it was seen: the module's docstring)."""
    self._promote()
    return sorted({kept[0] for kept in (self._kept, self._first_bad) if kept is not None})

  def nans(self, step: int):
    """``vv.nans`` on call ``step`` of this step, if its arguments are still kept (the
    last call's, the first non-finite one's): the nonfinite_cotangent Diagnosis, or None
    when its gradient is finite. ValueError when that call's arguments are gone (donated,
    or live nnx modules the step updated in place: replayed, they would be the next
    step's). Arguments spanning a job's processes are read as this process holds them
    (it is asked alone: the others run no step meanwhile)."""
    self._promote()
    if self._first_bad is not None and self._first_bad[0] == step:
      return self._localised_nans(step, *self._first_bad[1]())
    if self._kept is None or self._kept[0] != step:
      raise ValueError(f"step {step}'s arguments are no longer kept: vv.watch keeps the last "
                       "call's and the first non-finite one's where it saw it in time (steps "
                       f"{', '.join(map(str, self.kept_steps())) or 'none'}); "
                       "vv.watch(step, keep_first_nonfinite=True) keeps the first for sure, "
                       "or run vv.nans(step, *args, argnums=None) on that call's arguments")
    _, args, kwargs, *_ = self._kept
    if self._live:
      raise ValueError(f"step {step} updated its nnx modules in place: the arguments it was "
                       "called with are gone; vv.watch(step, keep_first_nonfinite=True) keeps "
                       "the first non-finite step's as they were")
    if any(_deleted(x) for x in jax.tree_util.tree_leaves((args, kwargs))):
      raise ValueError(f"step {step}'s arguments were donated to the step: they are gone")
    return self._localised_nans(step, args, kwargs)

  def _localised_nans(self, step: int, args, kwargs):
    """``vv.nans`` of the step's eager re-run on ``args``; where the backward flow saw
    ``step``'s cotangents non-finite in the compiled step, one line says at which block,
    and that the re-run did not reproduce it when its gradient is finite (jax#4275)."""
    (args, kwargs), _ = hosts.localised((args, kwargs))
    found = localise_nans(self.__wrapped__, *args, argnums=None, **kwargs)
    seen = self.flow_nonfinite(step)
    if seen is not None:
      print(f"vjpviz: in the compiled step {step}, the cotangent first went non-finite at "
            f"{seen[1]}'s output, made in {seen[2]}" + ("" if found is not None else
            "; the eager re-run's gradient is finite: it did not reproduce what the compiled "
            "step computed (XLA's fused arithmetic differs from the eager run's, jax#4275), "
            "so no line is named"))
    return found

  def flow_nonfinite(self, step: int | None = None) -> tuple[int, str, str] | None:
    """(step, block, where) of the first non-finite cotangent the backward flow saw (at
    ``step``, or the first such step): ``block``, the one nearest the loss whose output's
    cotangent was not all finite, and ``where`` the non-finite values were made, after it
    (the next block, or the loss)."""
    return self._flow.first_nonfinite(self._flow_cols(), step)

  def __str__(self) -> str:
    n = len(self.steps)
    if not self.recording:
      return (f"vjpviz watch: process {processes.index()} of a job: process 0 keeps the "
              "series of the global gradient's norms")
    lines = [f"vjpviz watch: {n} step(s), {len(self.paths)} gradient leaves"]
    for e in self.block_events():
      nans = f" (.nans({e.step}) finds where)" if e.kind == "first_nonfinite" else ""
      lines.append(f"  {e.text(self.stayed)}{nans}")
    if len(lines) == 1 and n:
      last = self.norms[-1]
      lines.append(f"  every leaf's gradient finite and non-zero; ‖g‖ last step "
                   f"{float(last.min()):.3g} .. {float(last.max()):.3g}")
    lines += [f"  log {name}, step {n - 1}: mean {v[-1, 0]:.4g}, min {v[-1, 1]:.4g}, "
              f"max {v[-1, 2]:.4g}" for name, v in self.logs.items() if n]
    if self.flow_on:
      lines.append(f"  {self._flow.line(self._flow_cols(), self._nonfinite_shards)}")
    return "\n".join(lines)

  def _repr_html_(self) -> str:
    return (f'<div class="vjpviz"><style>{STYLE}</style><pre>{html.escape(str(self))}</pre>'
            "</div>")


def watch(step, *, stayed: int = STAYED, keep: bool = True,
          keep_first_nonfinite: bool = False, logs=None, flow: bool = False) -> Watched:
  """``step`` (a train step that takes one gradient, jitted or not) with its gradient's
  health recorded per call: ``.norms`` [steps, leaves], ``.events()``, ``.paths``; its
  non-array arguments are static, as under ``eqx.filter_jit``. ``keep``: hold the last
  call's arguments (one more reference to them) for ``.nans(step)``, and the first
  non-finite call's where its health is seen in time (not donated arguments, not live
  nnx modules). ``keep_first_nonfinite``: that call's arguments copied to the host for
  sure, donated or live ones too, by a host callback compiled into the step, which costs
  every step (~2 ms a step on a TPU v5e, against a step's ~0.6 ms). ``logs``: a function
  of the step's outputs that picks the gradient logs it returned (``lambda out: out[-1]``
  for a step returning ``jax.grad(..., with_logs=True)``'s logs last): each log's mean,
  min and max recorded per step, ``.logs``. ``flow``: the backward flow, each block's
  output cotangent measured inside the compiled step (``.flow()``)."""
  return Watched(step, stayed, keep, keep_first_nonfinite, logs, flow)


_ids = itertools.count(1)
_watches: weakref.WeakValueDictionary[str, Watched] = weakref.WeakValueDictionary()
"""The watches alive, by id: what the panel asks for."""


def watches() -> list[Watched]:
  return list(_watches.values())


_listeners = Listeners()
"""f(watched), called from a watched step at most every ``PUSH_EVERY`` seconds."""
add_listener = _listeners.add


def remove_listener(listener) -> None:
  """The last listener gone (the panel's channel closed), no trailing push is left pending."""
  _listeners.discard(listener)
  if not _listeners:
    for w in watches():
      w.close()


def _merged(out_static: list, arrays: list):
  tree, leaves = out_static
  it = iter(arrays)
  return jax.tree_util.tree_unflatten(tree, [next(it) if x is None else x for x in leaves])


def _jitted_as(step, traced):
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


def _nonfinite_view(x) -> hosts.HostView | None:
  """The shards held here of ``x``, an array sharded across processes (not replicated:
  a replica's non-finite values are every process's), if any of their values is
  non-finite."""
  if not hosts.spans_processes(x) or x.is_fully_replicated or _deleted(x):
    return None
  view = hosts.host_view(x)
  return view if jnp.issubdtype(view.value.dtype, jnp.inexact) and not np.isfinite(
      view.value).all() else None


def _deleted(x) -> bool:
  """An array donated to a call since (its buffer gone)."""
  return isinstance(x, jax.Array) and x.is_deleted()




