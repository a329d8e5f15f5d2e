"""A watch's series: each step's row (its health array) kept on the device until ``BATCH``
steps stack into one array copied to the host asynchronously (per-step copies cost a
dispatch-bound step ~0.1 ms each), and what the rows say: the leaves' norms, the logs'
summaries, the flow's columns, the events per leaf and block, the panel's WatchSeries,
the printed report.
"""
from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np

from ..capture import processes
from . import watch_rows as rows

BATCH = 32    # steps whose arrays are stacked and sent to the host at once
LINES = 64         # the most lines (layers) it draws
EVENTS = 256       # the most events it lists

# A full batch stacked by one compiled call: op by op, ``jnp.stack`` of BATCH arrays costs a
# small step a quarter of its time again (benchmarks/watch_overhead.py, width 64 on CPU).
_stack_batch = jax.jit(jnp.stack)


class Recording:
  """The rows of ``step``'s calls (a ``values.watch_step.WatchedStep``: its ``paths``,
  ``log_names`` and flow say what a row's columns are); ``stayed``: a leaf zero this many
  steps running is named as stuck; ``where``: step -> a job's non-finite shards at it (``Shards.where``)."""

  def __init__(self, step, stayed: int, where):
    self.step, self.stayed, self.where = step, stayed, where
    self.lock = threading.Lock()    # the arrays, read by a trailing push's thread
    self._pending: list = []     # the last steps' arrays, still on the device
    self._batches: list = []     # BATCH steps' stacked, on their way to the host
    self._rows: list[np.ndarray] = []

  def add(self, health) -> None:
    """One call's row, still on the device: one dispatch and one copy per BATCH of them."""
    with self.lock:
      self._pending.append(health)
      if len(self._pending) == BATCH:
        self._flush()

  def _flush(self) -> None:
    """The pending steps' arrays stacked and copied to the host (held: ``lock``)."""
    stack = _stack_batch if len(self._pending) == BATCH else jnp.stack
    self._batches.append(stack(self._pending))
    self._batches[-1].copy_to_host_async()
    self._pending.clear()

  def land(self) -> None:
    """Every row sent on its way to the host, and waited for (a trailing push's)."""
    with self.lock:
      if self._pending:
        self._flush()
      batches = list(self._batches)
    jax.block_until_ready(batches)

  def every_row(self) -> np.ndarray:
    """Every step's row (the squared norms, the logs' summaries, the flow's columns),
    waiting for the copies."""
    with self.lock:
      self._rows += [*(row for b in self._batches for row in np.asarray(b)),
                     *(np.asarray(h) for h in self._pending)]
      self._pending.clear()
      self._batches.clear()
      return self._stacked()

  def landed(self) -> np.ndarray:
    """The steps' rows already on the host, in order, without waiting for any copy."""
    with self.lock:
      while self._batches and self._batches[0].is_ready():
        self._rows.extend(np.asarray(self._batches.pop(0)))
      return self._stacked()

  def _stacked(self) -> np.ndarray:
    width = len(self.step.paths) + 3 * len(self.step.log_names) + self.step.flow.width
    return np.stack(self._rows) if self._rows else np.zeros((0, width), np.float32)

  def finite(self, row: np.ndarray) -> bool:
    """Every leaf's norm of a step's ``row`` finite (its logs' summaries not judged)."""
    return bool(np.isfinite(row[:len(self.step.paths)]).all())

  def flow_cols(self, s: np.ndarray) -> np.ndarray:
    """float32[steps, 4 * blocks]: the flow's ``STATS`` of the rows ``s``."""
    start = len(self.step.paths) + 3 * len(self.step.log_names)
    return self.step.flow.stats(s[:, start:start + self.step.flow.width])

  def events(self, s: np.ndarray) -> list[rows.LeafEvents]:
    """Per leaf with anything to say: the first zero, stuck and non-finite steps (of
    ``s``, the squared norms)."""
    found = []
    for k, path in enumerate(self.step.paths):
      zero, bad = s[:, k] == 0, ~np.isfinite(s[:, k])
      e = rows.LeafEvents(path, rows.first(zero), rows.first_run(zero, self.stayed), rows.first(bad))
      if e.first_zero is not None or e.first_nonfinite is not None:
        found.append(e)
    return found

  def block_events(self, s: np.ndarray) -> list[rows.BlockEvent]:
    """The events of ``s`` grouped per block and event: the leaves of one parent path that
    went zero at the same steps (or non-finite at the same step) make one, named by that
    path; in step order."""
    groups: dict[tuple, list[str]] = {}
    blocks = dict(zip(self.step.paths, rows.layers(self.step.keypaths)))
    for e in self.events(s):
      if e.first_zero is not None:
        groups.setdefault((e.first_zero, blocks[e.path], "zero", e.stayed_zero), []).append(e.path)
      if e.first_nonfinite is not None:
        groups.setdefault((e.first_nonfinite, blocks[e.path], "first_nonfinite", None),
                          []).append(e.path)
    return [rows.BlockEvent(step, block if len(paths) > 1 else paths[0], len(paths),
                       kind if kind != "zero" else "first_zero" if stayed is None else "stayed_zero",
                       stayed, self.where(step) if kind == "first_nonfinite" else "")
            for (step, block, kind, stayed), paths in sorted(
                groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2]))]

  def series(self, s: np.ndarray) -> dict:
    """The panel's WatchSeries (protocol.schema.json) of the rows ``s``, less what the
    watch itself says (its id, kept steps): at most ``POINTS`` steps drawn, every event's
    step among them, one norm line per layer (at most ``LINES``: past that, per top-level
    key), at most ``EVENTS`` events, the first ``LINES`` logs' mean, min and max at the
    steps drawn."""
    step = self.step
    events = self.block_events(s[:, :len(step.paths)])[:EVENTS]
    points = rows.points(len(s), [e.step for e in events])
    groups = rows.layers(step.keypaths)
    if len(set(groups)) > LINES:
      groups = rows.layers([kp[:1] for kp in step.keypaths])
    lines = []
    for g in list(dict.fromkeys(groups))[:LINES]:
      norm = np.sqrt(s[points][:, [i for i, x in enumerate(groups) if x == g]].sum(axis=1))
      lines.append({"group": g, "norms": rows.finite_or_none(norm)})
    return {"steps": len(s), "stayed": self.stayed, "process": processes.index(),
            "points": [int(p) for p in points], "lines": lines,
            "events": [{"step": e.step, "path": e.path, "leaves": e.leaves, "kind": e.kind,
                        "text": e.text(self.stayed)} for e in events],
            "logs": [{"name": name, **{k: rows.finite_or_none(v[points, i]) for i, k in enumerate(
                ("mean", "min", "max"))}} for name, v in list(rows.logs_of(
                    s, len(step.paths), step.log_names).items())[:LINES]],
            **({"flow": step.flow.series(self.flow_cols(s)[points])} if step.flow_on else {})}

  def text(self, s: np.ndarray, unchecked=None) -> str:
    """What ``print(w)`` says of the rows ``s``: its events per block, else the all-clear
    with the last step's norms (only while it checks: ``unchecked``, the ``Unchecked`` it
    stopped at, says why not), the logs' last summaries, the flow's line."""
    step, n = self.step, len(s)
    lines = [f"vjpviz watch: {n} step(s), {len(step.paths)} gradient leaves"]
    for e in self.block_events(s[:, :len(step.paths)]):
      nans = f" (.nans({e.step}) finds where)" if e.kind == "first_nonfinite" else ""
      lines.append(f"  {e.text(self.stayed)}{nans}")
    if len(lines) == 1 and n and unchecked is None:
      last = np.sqrt(s[-1, :len(step.paths)])
      lines.append(f"  every leaf's gradient finite and non-zero; ‖g‖ last step "
                   f"{float(last.min()):.3g} .. {float(last.max()):.3g}")
    lines += [f"  log {name}, step {n - 1}: mean {v[-1, 0]:.4g}, min {v[-1, 1]:.4g}, "
              f"max {v[-1, 2]:.4g}" for name, v in rows.logs_of(
                  s, len(step.paths), step.log_names).items() if n]
    if step.flow_on:
      lines.append(f"  {step.flow.line(self.flow_cols(s), self.where)}")
    if unchecked is not None:
      lines.append(f"  {unchecked}")
    return "\n".join(lines)
