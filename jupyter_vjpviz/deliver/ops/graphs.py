"""The panel's requests about a graph: its view, a box opened or closed, a search.

A graph is a diagnosis's or a ``vv.grads`` report's (``report_id`` names either: both
have a ``graph`` and the ``node`` its default view centres on). The panel keeps which
boxes the user opened and closed and sends them with every request, so the kernel keeps
no view state; each reply is the view drawn (render.views + render.svg).
"""
from __future__ import annotations

from ...api.grads import reports as grads_reports
from ...render import svg, views
from .diagnoses import diagnosis


def op_view(args: dict) -> dict:
  d, view = _requested_view(args)
  return drawn(d, view)


def op_expand(args: dict) -> dict:
  d, view = _requested_view(args)
  return drawn(d, views.expand(view, args["node"]))


def op_collapse(args: dict) -> dict:
  d, view = _requested_view(args)
  return drawn(d, views.collapse(view, args["node"]))


def op_search(args: dict) -> dict:
  d, view = _requested_view(args)
  matches = list(views.search(d.graph, args["query"]))
  for m in matches[:3]:  # open clusters until the first hits are drawn as themselves
    view = views.reveal(view, m)
  return {"matches": matches, "view": drawn(d, view)}


def drawn(d, view) -> dict:
  """The schema's View of a diagnosis's or report's graph (also pushed with it, drawn)."""
  return {"svg": svg.of_view(view), "expanded": sorted(view.expanded),
          "collapsed": sorted(view.collapsed), "failed_node": d.node,
          "shown": len(view.nodes) + sum(len(c.members) for c in view.clusters),
          "total": len(d.graph.nodes), "boxes": view.size}


def _graphed(report_id: str):
  """What a view op's ``report_id`` names: a ``vv.grads`` report, else a diagnosis."""
  found = next((r for r in grads_reports() if r.id == report_id), None)
  return found if found is not None else diagnosis(report_id)


def _requested_view(args: dict):
  """The diagnosis (or grads report) asked about, and its view with the panel's opened
  and closed boxes."""
  d = _graphed(args["report_id"])
  return d, views.default_view(d.graph, d.node, expanded=frozenset(args.get("expanded", [])),
                               collapsed=frozenset(args.get("collapsed", [])))
