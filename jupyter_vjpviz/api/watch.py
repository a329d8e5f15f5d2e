"""``vv.watch(step)``: each parameter leaf's gradient norm per training step, cheaply.

The step is traced again with ``jax.grad``/``jax.value_and_grad`` (which equinox's
``filter_value_and_grad`` calls) and flax's ``nnx.grad``/``nnx.value_and_grad`` seen
through (an ``nnx.jit`` step jitted again by ``nnx.jit``: its modules are updated in place;
their leaves named as the user reaches them, ``.layers[2].kernel``): the
first gradient it takes is reduced inside the same jitted computation to one small
float32[leaves] array (each leaf's squared norm: zero, finite or not), returned beside the
step's own outputs; every ``watch_record.BATCH`` steps' are stacked and copied to the host
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
which hold non-finite values (``watch_shards.Shards.locate``): the event names that
process.

If vjpviz's instrumentation fails (making the compiled step, tracing it with our
reductions, lowering it, or recording a call's row), the call runs the user's step as it
is, the watch is marked ``unchecked`` (``vv.unchecked(w)``: why; its printout and
``flow()`` say so, never an all-clear) and every later call is the plain step. An error the
user's step raises (the plain step raises it too) reaches them unchanged. A call whose
failure came after its outputs were made (the recording) is not run again: an nnx step's
in-place updates are applied once.

The compiled step lives in ``analysis/values/watch_step.py``, the rows and what they say in
``analysis/watch_record.py``, a job's shards in ``analysis/watch_shards.py``.

``logs=``: the gradient logs a step returns (``jax.grad(..., with_logs=True)``) reduced
in the step to each log's mean, min and max, carried in the same row as the norms.
"""
from __future__ import annotations

import dataclasses
import html
import itertools
import sys
import threading
import time
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from ..base import hosts
from ..base.safety import Listeners, safely
from ..base.unchecked import Unchecked
from ..capture import processes
from .nans import nans as localise_nans
from ..render.html import STYLE
from ..analysis import watch_rows as rows
from ..analysis.watch_rows import POINTS, BlockEvent, LeafEvents  # noqa: F401 - their home was here
from ..analysis.watch_record import Recording
from ..analysis.watch_shards import Shards, deleted
from ..analysis.values.watch_step import ARMED, WatchedStep
from .grads import block_members

STAYED = 3    # a leaf zero this many steps running is named as stuck
PUSH_EVERY = 0.5   # seconds between two pushes of a watch's series to the panel
FALLBACK = ("compile", "trace", "lower")   # the phases (``WatchedStep.phase``) whose failure
                                           # may be ours: the plain step says whose


class Watched:
  """A jitted training step that records its gradient's health per call."""

  def __init__(self, step, stayed: int = STAYED, keep: bool = True,
               keep_first_nonfinite: bool = False, logs=None, flow: bool = False):
    self.__wrapped__, self.stayed, self.keep = step, stayed, keep
    self.keep_first_nonfinite = keep_first_nonfinite
    self.id = f"w{next(_ids)}"
    _watches[self.id] = self
    self._calls = 0
    self._kept: tuple | None = None   # (step, args, kwargs, health, out) of the last call
    self._armed = None    # on the device: [no non-finite step yet, calls so far]
    self._pushed_at = self._called_at = 0.0
    self._timer: threading.Timer | None = None
    self._fun = getattr(step, "__wrapped__", None) or getattr(step, "fn", None) or step
    group = lambda paths, scopes: block_members(paths, scopes, by_path=True)
    self._step = WatchedStep(step, self._fun, group, logs, flow)
    self._shards = Shards(f"watch/{self.id}")
    self._record = Recording(self._step, stayed, self._shards.where)
    self.unchecked: Unchecked | None = None   # why the watch stopped checking, if it did

  def __call__(self, *args, **kwargs):
    if self.unchecked is not None:
      return self.__wrapped__(*args, **kwargs)
    kept = (self._calls, args, kwargs)
    if self.keep_first_nonfinite:
      if self._armed is None:
        self._armed = jnp.array([1, 0], jnp.int32)
      kwargs = {**kwargs, ARMED: self._armed}
    try:
      out, health, armed = self.compiled_call(args, kwargs)
    except Exception as e:  # noqa: BLE001 - whose it is, the plain step says below
      if self._step.phase not in FALLBACK:   # the compiled step's own run: the user's
        raise
      failed = (self._step.phase, _why(e))   # no frame of ours held past the call
    else:
      failed = None
    if failed is not None:   # outside the except: the user's error carries no context of ours
      return self._plain(failed, kept)
    try:
      self._recorded(kept, health, armed, out)
    except Exception as e:  # noqa: BLE001 - the step ran: its outputs are the user's
      self._give_up("record its row", _why(e))
    return out

  def _plain(self, failed: tuple, kept: tuple):
    """The call as without vjpviz, after the instrumented one failed at ``failed``'s phase
    (nothing of the step ran): an error the plain step raises is the user's, and theirs
    unchanged; if it runs, the failure was vjpviz's, and the watch stops checking."""
    (phase, why), (_, args, kwargs) = failed, kept
    out = self.__wrapped__(*args, **kwargs)
    self._give_up(f"{phase} the watched step", why)
    return out

  def _give_up(self, doing: str, why: str) -> None:
    """vjpviz failed watching: one line, the watch ``unchecked`` from this call on."""
    self.unchecked = Unchecked(
        f"vv.watch of {getattr(self._fun, '__name__', 'the step')}",
        f"could not {doing} (internal error: {why}); the step runs unwatched from call "
        f"{self._calls} on")
    self._kept = None   # holds the user's arrays no longer
    print(f"vjpviz: {self.unchecked.headline}; your step ran as it would without vjpviz.",
          file=sys.stderr)

  def _recorded(self, kept, health, armed, out) -> None:
    self._calls += 1
    self._armed = armed if self.keep_first_nonfinite else None
    safely(self._shards.locate, self._fun, self._kept, self._record.finite, False)
    self._promote()
    self._kept = (*kept, health, out) if self.keep else None
    if not self.recording:   # the same global norms as process 0's, which keeps the series
      return
    self._record.add(health)
    if _listeners:
      self._called_at = time.monotonic()
      if self._called_at - self._pushed_at >= PUSH_EVERY:
        self._push()
      elif self._timer is None:   # the loop's last steps land even if no call follows
        self._timer = threading.Timer(self._pushed_at + PUSH_EVERY - self._called_at,
                                      self._trailing)
        self._timer.name, self._timer.daemon = "vjpviz-watch-push", True
        self._timer.start()

  @property
  def recording(self) -> bool:
    """Whether this process keeps the series: in a ``jax.distributed`` job only process 0
    does (every process computes the same global norms; the others copy no series to the
    host, only the last call's health until a non-finite one: ``Shards.locate``)."""
    return processes.index() == 0

  def compiled_call(self, args, kwargs):
    """(the step's outputs, its health array, ``ARMED``) of one call of the compiled
    watched step, nothing recorded (what a call costs past the step itself, without the
    recording: benchmarks/watch_overhead.py)."""
    return self._step(args, kwargs)

  @property
  def paths(self) -> list[str]:
    """The gradient's floating leaves, as the step reaches them."""
    return self._step.paths

  @property
  def log_names(self) -> list[str]:
    return self._step.log_names

  def _promote(self) -> None:
    """The last call's arguments kept as the first non-finite step's, if none is yet, its
    health array is on the host already and not finite, and they are intact (not donated,
    not live modules updated in place since)."""
    if self._kept is None or self._step.first_bad is not None or self.keep_first_nonfinite:
      return
    health = self._kept[3]
    if self._step.live or not health.is_ready() or self._record.finite(np.asarray(health)):
      return
    step, args, kwargs, *_ = self._kept
    if not any(deleted(x) for x in jax.tree_util.tree_leaves((args, kwargs))):
      self._step.first_bad = (step, lambda: (args, kwargs))

  def _push(self) -> None:
    self._pushed_at = time.monotonic()
    _listeners.notify(self)

  def _trailing(self) -> None:
    """The push a throttled call left for later, on the timer's thread: the steps since the
    last push, all of them landed first."""
    self._timer = None
    if self._called_at <= self._pushed_at:
      return
    self._record.land()
    self._push()

  def close(self) -> None:
    """A trailing push not yet made is cancelled (its thread ends)."""
    timer, self._timer = self._timer, None
    if timer is not None:
      timer.cancel()
      if timer is not threading.current_thread():
        timer.join()

  def flow(self) -> list:
    """One row per step and block (``step``, ``block``, ``norm``, ``max_abs``,
    ``finite_fraction``, ``zero_fraction``) of the cotangent of each block's output,
    measured in the compiled step (``watch(step, flow=True)``; [] without, or where the
    step could not be tapped: ``flow_note`` says why), the watch's ``Unchecked`` last where
    it stopped checking."""
    return [*self._step.flow.table(self._flow_cols()), *self._unchecked()]

  def _unchecked(self) -> list[Unchecked]:
    return [self.unchecked] if self.unchecked is not None else []

  @property
  def flow_blocks(self) -> list[str]:
    """The blocks whose output cotangents a step's row carries, from the input to the loss."""
    return self._step.flow.blocks

  @property
  def flow_note(self) -> str | None:
    """Why, with the flow on, the step could not be tapped (None: it was)."""
    return self._step.flow.note

  def _flow_cols(self, s: np.ndarray | None = None) -> np.ndarray:
    return self._record.flow_cols(self._every_row() if s is None else s)

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
    safely(self._shards.locate, self._fun, self._kept, self._record.finite, True)
    return self._record.every_row()

  def landed(self) -> np.ndarray:
    """The steps' rows already on the host, in order, without waiting for any copy: each
    leaf's squared norm, then the logs' summaries (``series`` reads both)."""
    return self._record.landed()

  @property
  def norms(self) -> np.ndarray:
    return np.sqrt(self.steps)

  def events(self, s: np.ndarray | None = None) -> list:
    """Per leaf with anything to say: the first zero, stuck and non-finite steps (of
    ``s``, the squared norms, every step's by default); the watch's ``Unchecked`` last
    where it stopped checking (no empty list for a watch that could not look)."""
    return [*self._record.events(self.steps if s is None else s), *self._unchecked()]

  def block_events(self, s: np.ndarray | None = None) -> list[rows.BlockEvent]:
    """The events of ``s`` (every step's by default) grouped per block and event: the
    leaves of one parent path that went zero at the same steps (or non-finite at the same
    step) make one, named by that path; in step order."""
    return self._record.block_events(self.steps if s is None else s)

  def to_dict(self) -> dict:
    return {"paths": self.paths, "norms": self.norms.tolist(),
            "events": [dataclasses.asdict(e) for e in self.events()]}

  def series(self, s: np.ndarray | None = None) -> dict:
    """The panel's WatchSeries (protocol.schema.json) of ``s`` (every step's rows by
    default): ``Recording.series``, with the steps whose arguments are kept."""
    return {"id": self.id, **self._record.series(self._every_row() if s is None else s),
            "kept_steps": self.kept_steps(),
            **({"unchecked": self.unchecked.reason} if self.unchecked is not None else {})}

  def kept_steps(self) -> list[int]:
    """The steps whose arguments are kept (``nans`` runs on them): the last call's and the
    first non-finite one's (where it was seen: the module's docstring)."""
    self._promote()
    return sorted({kept[0] for kept in (self._kept, self._step.first_bad) if kept is not None})

  def nans(self, step: int):
    """``vv.nans`` on call ``step`` of this step, if its arguments are still kept (the
    last call's, the first non-finite one's): the nonfinite_cotangent Diagnosis, or None
    when its gradient is finite. ValueError when that call's arguments are gone (donated,
    or live nnx modules the step updated in place: replayed, they would be the next
    step's). Arguments spanning a job's processes are read as this process holds them
    (it is asked alone: the others run no step meanwhile)."""
    self._promote()
    first_bad = self._step.first_bad
    if first_bad is not None and first_bad[0] == step:
      return self._localised_nans(step, *first_bad[1]())
    if self._kept is None or self._kept[0] != step:
      raise ValueError(f"step {step}'s arguments are no longer kept: vv.watch keeps the last "
                       "call's and the first non-finite one's where it saw it in time (steps "
                       f"{', '.join(map(str, self.kept_steps())) or 'none'}); "
                       "vv.watch(step, keep_first_nonfinite=True) keeps the first for sure, "
                       "or run vv.nans(step, *args, argnums=None) on that call's arguments")
    _, args, kwargs, *_ = self._kept
    if self._step.live:
      raise ValueError(f"step {step} updated its nnx modules in place: the arguments it was "
                       "called with are gone; vv.watch(step, keep_first_nonfinite=True) keeps "
                       "the first non-finite step's as they were")
    if any(deleted(x) for x in jax.tree_util.tree_leaves((args, kwargs))):
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
    return self._step.flow.first_nonfinite(self._flow_cols(), step)

  def __str__(self) -> str:
    if not self.recording:
      return (f"vjpviz watch: process {processes.index()} of a job: process 0 keeps the "
              "series of the global gradient's norms")
    return self._record.text(self._every_row(), self.unchecked)

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


def _why(error: BaseException) -> str:
  return " ".join(f"{type(error).__name__}: {error or repr(error)}".split())[:300]


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
