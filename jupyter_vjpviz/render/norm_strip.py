"""The per-layer gradient-norm strip drawn beside the graph of a stacked model.

One row per layer (``Graph.strip``, in the model's order): its name, a bar one cell
shorter per decade below the strip's largest finite norm (so a layer whose gradient
vanishes or explodes stands out at a glance, and layers alike look alike), the norm, and
its NaN/Inf count marked ✖ when it has any: colour is never the only cue.
Rows are padded to one width, so in a monospace font the bars line up.
"""
from __future__ import annotations

import math

WIDTH = 12              # bar cells of the largest norm: one per decade
VANISHING, EXPLODING = 1e-8, 1e8


def lines(strip: tuple) -> list[str]:
  """``layers[3]  ████████····  ‖g‖ 0.031``, one per layer; a title line first."""
  if not strip:
    return []
  top = max((r[4] for r in strip if not (r[2] or r[3])), default=0.0)
  name = max(len(r[0]) for r in strip)
  return ["‖gradient‖ per layer", *(f"{r[0]:<{name}}  {_row(r, top)}" for r in strip)]


def failing(strip: tuple) -> bool:
  return any(r[2] or r[3] for r in strip)


def _row(row: tuple, top: float) -> str:
  _, size, nan, inf, norm, _ = row
  if nan or inf:
    bad = ", ".join(f"{n} {w}" for n, w in ((nan, "NaN"), (inf, "Inf")) if n)
    return f"{'✖' + '·' * (WIDTH - 1)}  {bad} of {size}"
  cells = max(1, WIDTH + round(math.log10(norm / top))) if norm > 0 else 0
  word = " (vanishing)" if 0 < norm < VANISHING else " (exploding)" if norm > EXPLODING else ""
  return f"{'█' * cells}{'·' * (WIDTH - cells)}  ‖g‖ {norm:.3g}{word}"
