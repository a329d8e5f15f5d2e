"""A Diagnosis's graph as inline SVG, within a time budget.

The default view lays out in tens of milliseconds; what can run long is a view
the user expanded. Past two thirds of the budget the layout is killed and a
simpler view (the failing neighbourhood only, no edge labels, dot's fast
knobs) gets the rest; the SVG says so. Past the whole budget the SVG is a
message, never a hung kernel.
"""
from __future__ import annotations

import collections
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
  """The view laid out; the last few are kept (views are immutable, and each holds its graph)."""
  key = (id(view), timeout, legend)
  kept = _recent.pop(key, None)
  image = kept[1] if kept is not None else _laid_out(view, timeout, legend)
  _recent[key] = (view, image)   # the view kept beside its image keeps its id its own
  while len(_recent) > RECENT:
    _recent.popitem(last=False)
  return image


RECENT = 8
_recent: collections.OrderedDict = collections.OrderedDict()


def _laid_out(view: View, timeout: float, legend: bool) -> str:
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


PX_PER_PT = 4 / 3   # how browsers draw the pt units graphviz sizes its SVG in


def focus(svg: str, node_id: str | None) -> tuple[float, float] | None:
  """Where box ``node_id``'s label sits in ``svg``, in CSS pixels from its top-left corner
  (graphviz's own coordinates, moved by the graph's translate), or None if it is not drawn."""
  shift = re.search(r'class="graph" transform="[^"]*translate\(([-\d.]+) ([-\d.]+)\)', svg)
  box = svg.find(f'id="{html.escape(node_id)}"') if node_id else -1
  label = re.compile(r'<text[^>]* x="([-\d.]+)" y="([-\d.]+)"').search(svg, box) if box >= 0 else None
  if shift is None or label is None:
    return None
  x, y = (float(label[k]) + float(shift[k]) for k in (1, 2))
  return x * PX_PER_PT, y * PX_PER_PT


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
