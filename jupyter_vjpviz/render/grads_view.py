"""A gradient-health report (``vv.grads``) as terminal text and as a notebook fragment.

The fragment follows ``html``'s policy: everything inline, nothing scripted, every string
from the user's program escaped; the graph is the diagnosis graph's own SVG (each edge's
measured cotangent norm as its colour and hover text, the cutting operations marked),
beside a small plot of the gradient norm per block against depth.
"""
from __future__ import annotations

import html
import math

from ..analysis.grad_report import GradReport, Layer, ZeroLeaf
from ..base.places import spelled
from . import norm_strip, svg
from .html import STYLE
from .views import default_view


def headline(r: GradReport) -> str:
  """``vjpviz grads of loss: 2 leaves with no gradient, 1 block vanishing``, or healthy;
  a non-finite gradient first; ``could not check: why`` where it was not established."""
  if r.unchecked is not None:
    return f"vjpviz grads of {r.function}: {r.unchecked.headline}"
  flags = [layer.flag for layer in r.layers if layer.flag]
  n = len(r.nonfinite)
  parts = [f"{n} {what}" for n, what in (
      (n, f"lea{'f' if n == 1 else 'ves'} with a NaN/Inf gradient"),
      (len(r.zero), "leaf with no gradient" if len(r.zero) == 1 else "leaves with no gradient"),
      (sum(p.alarm for p in r.partly_zero), "leaf with dead units"),
      *((flags.count(f), f"block(s) {f}") for f in ("vanishing", "exploding"))) if n]
  return f"vjpviz grads of {r.function}: {', '.join(parts) or 'healthy'}"


def text(r: GradReport) -> str:
  lines = [headline(r)]
  lines += [f"  NaN/Inf  {n.line()}" for n in r.nonfinite]
  if r.cause:
    lines.append(f"  cause: {r.cause}")
  for z in r.zero:
    at = f" at {z.op}" if z.op else ""
    lines.append(f"  zero  {z.path}: {z.reason}{at}" + (f" ({spelled(z.source)})" if z.source else "")
                 + (f"; {z.factor} is all zero" if z.factor else ""))
  for p in r.partly_zero:
    at = (f" at {p.op}" if p.op else "") + (f", {spelled(p.source)}" if p.source else "")
    lines.append(f"  part  {p.path}: {p.fraction:.0%} of {p.units} get none ({p.reason}{at})")
  for layer in r.layers:
    ratio = f"{layer.ratio:.3g}" if layer.ratio is not None else "-"
    flag = f"  ✖ {layer.flag}: {layer.why}" if layer.flag else ""
    lines.append(f"  layer {layer.name}: ‖g‖ {layer.grad_norm:.3g}  ‖w‖ {layer.param_norm:.3g}"
                 f"  ratio {ratio}{flag}")
  if not r.layers:
    lines += [f"  {line}" for line in norm_strip.lines(r.graph.strip)]
  if r.note:
    lines.append(f"  note: {r.note}")
  return "\n".join(lines)


def html_fragment(r: GradReport) -> str:
  rows = "".join(
      f"<tr><td><code>{html.escape(z.path)}</code></td><td class=got>{html.escape(z.reason)}"
      f"</td><td>{html.escape(cut_at(z))}</td><td>{html.escape(spelled(z.source) or '')}</td></tr>"
      for z in r.zero)
  parts = "".join(
      f"<tr><td><code>{html.escape(p.path)}</code></td><td>{p.fraction:.0%} of "
      f"{html.escape(p.units)}</td><td>{html.escape(p.reason)}</td></tr>" for p in r.partly_zero)
  bad = "".join(f"<li>{html.escape(n.line())}</li>" for n in r.nonfinite)
  return (f'<div class="vjpviz"><style>{STYLE}</style><h2>{html.escape(headline(r))}</h2>'
          + (f"<ul class=got>{bad}</ul>" if bad else "")
          + (f"<p>{html.escape(r.cause)}</p>" if r.cause else "")
          + (f"<table><tr><td>leaf</td><td>reason</td><td>cut at</td><td>line</td></tr>"
             f"{rows}</table>" if rows else "")
          + (f"<table>{parts}</table>" if parts else "")
          + plot(r.layers)
          + f'<div class="graph">{svg.of_view(default_view(r.graph, r.node))}</div></div>')


def cut_at(z: ZeroLeaf) -> str:
  """The operation that cut a leaf, with the all-zero factor it multiplied by."""
  return (z.op or "") + (f" ({z.factor} all zero)" if z.factor else "")


def plot(layers: tuple[Layer, ...], width: int = 320, height: int = 120) -> str:
  """The gradient norm per block against depth, log scale, as inline SVG; flagged blocks
  marked ✖ (colour is never the only cue)."""
  norms = [(layer.name, layer.grad_norm, layer.flag) for layer in layers if layer.grad_norm > 0]
  if len(norms) < 2:
    return ""
  logs = [math.log10(n) for _, n, _ in norms]
  lo, hi = min(logs), max(logs)
  span = (hi - lo) or 1.0
  step = (width - 40) / (len(norms) - 1)
  pts = [(30 + k * step, 10 + (hi - v) / span * (height - 30)) for k, v in enumerate(logs)]
  line = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
  marks = "".join(
      f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{"#D55E00" if flag else "#0072B2"}">'
      f"<title>{html.escape(name)}: ‖g‖ {n:.3g}{' ' + flag if flag else ''}</title></circle>"
      + (f'<text x="{x + 4:.1f}" y="{y - 4:.1f}" font-size="10">✖</text>' if flag else "")
      for (x, y), (name, n, flag) in zip(pts, norms))
  return (f'<svg xmlns="http://www.w3.org/2000/svg" class="vjpviz-norms" width="{width}" '
          f'height="{height}"><text x="2" y="10" font-size="10">‖g‖ 1e{hi:.0f}</text>'
          f'<text x="2" y="{height - 14}" font-size="10">1e{lo:.0f}</text>'
          f'<polyline points="{line}" fill="none" stroke="#0072B2"/>{marks}'
          f'<text x="30" y="{height - 2}" font-size="10">depth →</text></svg>')
