"""A Diagnosis's graph as inline SVG, within a time budget.

The default view lays out in tens of milliseconds; what can run long is a view
the user expanded. Past two thirds of the budget the layout is killed and a
simpler view (the failing neighbourhood only, no edge labels, dot's fast
knobs) gets the rest; the SVG says so. Past the whole budget the SVG is a
message, never a hung kernel.
"""
from __future__ import annotations

import html
import re
import time

from . import dot, layout
from .views import View, default_view

TIMEOUT = 2.0       # seconds for the whole rendering
FALLBACK = 24       # boxes in the simpler view


def render(d, view: View | None = None, *, timeout: float = TIMEOUT, legend: bool = True,
           **view_args) -> str:
  """SVG for a Diagnosis: ``view`` or its default view (``view_args`` as for default_view)."""
  return of_view(view or default_view(d.graph, d.node, **view_args), timeout, legend)


def of_view(view: View, timeout: float = TIMEOUT, legend: bool = True) -> str:
  if not view.graph.nodes:
    return message(view.graph.note or "no graph was recorded")
  deadline = time.monotonic() + timeout
  try:
    return _inline(layout.svg(dot.source(view, legend=legend), timeout * 2 / 3))
  except layout.LayoutTimeout:
    pass
  except layout.LayoutError as e:
    return message(f"could not lay out the graph: {e}")
  simple = default_view(view.graph, view.failing, budget=FALLBACK)
  note = (f"the full layout took over {timeout * 2 / 3:.1f} s: showing a simpler view "
          f"({simple.size} boxes, no edge labels)")
  try:
    source = dot.source(simple, labels=False, legend=False, fast=True, note=note)
    return _inline(layout.svg(source, deadline - time.monotonic()))
  except layout.LayoutError as e:
    return message(f"could not lay out the graph in {timeout:.1f} s ({e}); "
                   "the text report has the failing node and its edges")


def message(text: str) -> str:
  """A small SVG that says ``text`` (escaped), where a graph would be."""
  return ('<svg xmlns="http://www.w3.org/2000/svg" class="vjpviz-graph-message" width="640" '
          f'height="40"><text x="8" y="24" font-family="Helvetica" font-size="13">'
          f'{html.escape(text)}</text></svg>')


def _inline(svg: str) -> str:
  """The <svg> element alone: no XML prolog, doctype or comments, so it can sit in HTML.

  Graphviz writes every "-" as "&#45;"; plain "-" (safe once comments are gone)
  keeps class and id values greppable.
  """
  svg = re.sub(r"<!--.*?-->\s*", "", svg[max(svg.find("<svg"), 0):], flags=re.S)
  return svg.replace("&#45;", "-")
