"""A watch's backward flow (``vv.watch(step, flow=True)``): which blocks a step's row
carries (five columns each, their taps' summaries, after the leaves' norms and the logs'
summaries; ``stats`` makes them the four ``w.flow()`` gives), why none
where the step could not be tapped, and what the columns say: ``w.flow()``'s rows, the
first non-finite block, the printed line, the panel's WatchFlow."""
from __future__ import annotations

import dataclasses

import jax
import numpy as np

from ...capture import flow_taps
from . import flow as values_flow
from ..watch_rows import finite_or_none

BLOCKS = 256   # the most blocks the panel's WatchFlow draws


@dataclasses.dataclass
class FlowColumns:
  blocks: list[str] = dataclasses.field(default_factory=list)
  note: str | None = None   # why the step could not be tapped

  def columns(self, taps: list, flows: list) -> list[jax.Array]:
    """float32[5] per block, traced into the step: its output cotangent's summary
    (``flow_taps.SUMMARY``) from its taps' (``flows``); none,
    and ``note`` says why, where the step's gradient could not be tapped (``taps``: the
    tapper's finds: a ``Taps``, or why not)."""
    self.blocks, self.note = [], None
    if not taps or not flows:
      self.note = "the step's first gradient was taken by no jax.grad or value_and_grad"
    elif not isinstance(taps[0], values_flow.Taps):
      self.note = f"vjpviz could not place its taps: {taps[0]}"
    elif not taps[0].blocks:
      self.note = "the gradient is of no floating parameters"
    else:
      self.blocks = list(taps[0].blocks)
      return taps[0].columns(flows[0])
    return []

  @property
  def width(self) -> int:
    """The row's columns of the flow (``columns``)."""
    return len(flow_taps.SUMMARY) * len(self.blocks)

  @staticmethod
  def stats(raw: np.ndarray) -> np.ndarray:
    """float32[steps, 4 * blocks]: ``values_flow.STATS`` per block from the row's flow
    columns ``raw`` (float32[steps, 5 * blocks], ``columns``): the norm, max |.|, finite
    and zero fractions."""
    n = len(flow_taps.SUMMARY)
    s = np.asarray(raw, np.float32).reshape(len(raw), raw.shape[1] // n, n)
    with np.errstate(invalid="ignore", divide="ignore"):
      return np.stack([np.sqrt(s[..., 0]), s[..., 1], s[..., 2] / s[..., 4],
                       s[..., 3] / s[..., 4]], axis=-1).reshape(len(raw), 4 * s.shape[1])

  def table(self, cols: np.ndarray) -> list[dict]:
    return values_flow.table(cols, self.blocks)

  def first_nonfinite(self, cols: np.ndarray, step: int | None = None
                      ) -> tuple[int, str, str] | None:
    """(step, block, where) of the first non-finite cotangent the flow saw (at ``step``
    of ``cols``, or the first such step): ``block``, the one nearest the loss whose
    output's cotangent was not all finite; ``where`` the values were made, after it (the
    next block, or the loss)."""
    first = values_flow.first_nonfinite(cols if step is None else cols[step:step + 1])
    if first is None:
      return None
    t, k = first
    made = self.blocks[k + 1] if k + 1 < len(self.blocks) else "the loss, after the last block"
    return (t if step is None else step), self.blocks[k], made

  def line(self, cols: np.ndarray, shards) -> str:
    """The flow's verdict: could not check (why), the first non-finite block (with
    ``shards(step)``: where a job's processes held non-finite values), or every block's
    cotangent finite, with the last step's norms from the loss to the input."""
    if self.note:
      return f"backward flow: could not check: {self.note}"
    first = self.first_nonfinite(cols)
    if first is not None:
      step, block, made = first
      where = shards(step)
      return (f"backward flow: step {step}: the cotangent first went non-finite at {block}'s "
              f"output{' ' + where if where else ''}: made in {made}")
    if not len(cols):
      return "backward flow: no step yet"
    norms = ", ".join(f"{b} {cols[-1, 4 * k]:.3g}" for k, b in reversed(list(enumerate(
        self.blocks))))
    return f"backward flow: every block's cotangent finite; ‖ct‖ last step, from the loss: {norms}"

  def series(self, cols: np.ndarray) -> dict:
    """The panel's WatchFlow of ``cols`` (the steps drawn): each block's norm and finite
    fraction (the first ``BLOCKS`` blocks), or why there are none."""
    blocks = self.blocks[:BLOCKS]
    return {"blocks": blocks, "note": self.note,
            "norm": [finite_or_none(cols[:, 4 * k]) for k in range(len(blocks))],
            "finite_fraction": [finite_or_none(cols[:, 4 * k + 2]) for k in range(len(blocks))]}
