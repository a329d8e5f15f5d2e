"""A View as DOT text, authored with the ``graphviz`` package.

Everything user-named (functions, scopes, argument names) goes through
``_text``: backslashes doubled so DOT escapes can't be forged, ampersands
escaped so HTML entities in a name aren't decoded, ``nohtml`` so a name like
``<img ...>`` is never taken for an HTML-like label; graphviz then XML-escapes
it into the SVG. DOT node names are our own ``n0, n1, ...``
(a ``:`` in a scope id would read as a port); the panel finds boxes by the
``id`` attribute, which carries the graph node or cluster id.

Highlighting must survive colour blindness and greyscale printing, so colour
(Okabe-Ito vermillion) always comes with a second cue: a ✖ marker, a double
border, a bold dashed line.

Edges whose cotangent values were measured (``vv.nans``: ``Edge.flow``) also say
them: the norm and max |value|, or how many NaN/Inf; a non-finite one is drawn
bold, the first one (into the culprit) marked ✖, a vanishing or exploding one
coloured (Okabe-Ito blue, orange) with the word for it. Edges without values
are drawn exactly as before. A stacked model's per-layer gradient norms
(``Graph.strip``) are a box of their own beside the graph (``norm_strip``).
"""
from __future__ import annotations

import graphviz

from ..analysis.graph import Node
from ..base.places import spelled
from . import norm_strip
from .views import Cluster, View, ViewEdge, default_view

FAIL = "#D55E00"        # Okabe-Ito vermillion
CUSTOM = "#E1EEF8"      # custom-rule equations: pale blue
TINY_CT = "#0072B2"     # Okabe-Ito blue: a vanishing cotangent
HUGE_CT = "#E69F00"     # Okabe-Ito orange: an exploding one
ZERO_CT = "#999999"     # grey: exactly zero (vv.grads: the gradient is cut here)
VANISHING, EXPLODING = 1e-8, 1e8   # |ct| bounds past which an edge is coloured so
FOLDED = "#EEEEEE"
INK = "#444444"
FAILED_CLASS = "vjpviz-node-failed"
MAX_AVALS = 3           # boundary avals listed on a cluster box

FAST = dict(nslimit="1", nslimit1="1", mclimit="0.1", splines="line")
"""dot knobs that trade layout quality for time (10x on 2k nodes, measured)."""


def render(d, view: View | None = None, *, labels: bool = True, legend: bool = True,
           **view_args) -> str:
  """DOT for a Diagnosis: ``view`` or its default view (``view_args`` as for default_view)."""
  return source(view or default_view(d.graph, d.node, **view_args),
                labels=labels, legend=legend)


def source(view: View, *, labels: bool = True, legend: bool = True, fast: bool = False,
           note: str | None = None) -> str:
  """DOT text of a view; ``fast`` adds the FAST knobs, ``note`` goes under the graph."""
  g = graphviz.Digraph("vjpviz", graph_attr=dict(
      rankdir="TB", fontname="Helvetica", fontsize="10", labelloc="b", nodesep="0.25",
      ranksep="0.35", **(FAST if fast else {})),
      node_attr=dict(fontname="Helvetica", fontsize="10", shape="box", style="rounded,filled",
                     fillcolor="white", color=INK, margin="0.08,0.04", height="0.3"),
      edge_attr=dict(fontname="Helvetica", fontsize="8", color=INK, fontcolor=INK,
                     arrowsize="0.6"))
  names = {box: f"n{i}" for i, box in enumerate((*view.nodes, *(c.id for c in view.clusters)))}
  opened = {view.node(n).parent for n in view.nodes} | {c.parent for c in view.clusters}
  _add_level(g, view, None, names, opened)
  for e in view.edges:
    g.edge(names[e.src], names[e.dst], **_edge_attrs(e, labels, view.failing))
  _strip(g, view.graph.strip)
  if legend:
    _legend(g, view, labels)
  caption = " · ".join(t for t in (view.note, note) if t)
  if caption:
    g.attr(label=_text(caption))
  return g.source


def _add_level(g, view: View, parent: str | None, names: dict, opened: set) -> None:
  """Boxes of one nesting level; an opened equation becomes a DOT cluster around its body,
  the failing instance one labelled with its index and call site."""
  instance = view.instance
  if instance is not None and view.node(view.failing).parent == parent:
    with g.subgraph(name="cluster_instance") as sub:
      sub.attr(label=_text(instance.label + (f" · called at {spelled(instance.site, short=True)}"
                                             if instance.site else "")),
               style="dashed,bold", color=FAIL, fontcolor=FAIL, id="vjpviz-instance", labelloc="t")
      _add_boxes(sub, view, parent, names, opened, instance.boxes.__contains__)
    _add_boxes(g, view, parent, names, opened, lambda box: box not in instance.boxes)
  else:
    _add_boxes(g, view, parent, names, opened, lambda box: True)


def _add_boxes(g, view: View, parent: str | None, names: dict, opened: set, wanted) -> None:
  for nid in view.nodes:
    node = view.node(nid)
    if node.parent != parent or not wanted(nid):
      continue
    if nid in opened:
      with g.subgraph(name=f"cluster_{names[nid]}") as sub:
        sub.attr(label=_text(f"{node.label}: {node.n_eqns} eqns"), style="dashed",
                 color=INK, fontcolor=INK, id=_text(f"body:{nid}"))
        sub.node(names[nid], **_node_attrs(node, view.failing, opened))
        _add_level(sub, view, nid, names, opened)
    else:
      g.node(names[nid], **_node_attrs(node, view.failing, opened))
  for c in view.clusters:
    if c.parent == parent and wanted(c.id):
      g.node(names[c.id], **_cluster_attrs(c))


def _node_attrs(node: Node, failing: str | None, opened: set) -> dict:
  failed = node.id == failing
  first = ("✖ " if failed else "") + node.label
  detail = []
  if node.kind == "eqn" and node.primitive != node.label:
    detail.append(node.primitive)
  if node.n_eqns and node.id not in opened:
    detail.append(f"▸ {node.n_eqns} eqns inside")
  if node.kind != "eqn":
    detail.append(", ".join(node.out_avals or node.in_avals))
  attrs = dict(label=_text(first, " · ".join(detail)), id=_text(node.id),
               tooltip=_text(*_tooltip(node), passes=2),
               **{"class": "vjpviz-node" + (f" {FAILED_CLASS}" if failed else "")})
  if node.kind in ("input", "static"):
    attrs.update(shape="invhouse", style="filled" + (",dashed" if node.kind == "static" else ""))
  elif node.kind == "output":
    attrs.update(shape="house", style="filled")
  elif node.custom:
    attrs.update(fillcolor=CUSTOM)
  if failed:
    attrs.update(color=FAIL, fontcolor=FAIL, fillcolor="#FBE3D6", penwidth="3", peripheries="2",
                 style="rounded,filled,bold")
  return attrs


def _tooltip(node: Node) -> list[str]:
  return [f"{node.id}: {node.label}",
          f"scope {node.name_stack}" if node.name_stack else "",
          f"{node.function} / bwd {node.rule}" if node.rule else "",
          f"at {spelled(node.call_site)}" if node.call_site else "",
          f"in: {', '.join(node.in_avals)}" if node.in_avals else "",
          f"out: {', '.join(node.out_avals)}" if node.out_avals else ""]


def _cluster_attrs(c: Cluster) -> dict:
  head = ("✖ " if c.failing else "▸ ") + c.label + (f"  ×{c.repeat}" if c.repeat > 1 else "")
  attrs = dict(label=_text(head, f"{c.n_eqns} eqns", _avals("in", c.inputs),
                           _avals("out", c.outputs)),
               id=_text(c.id), tooltip=_text(f"{c.id}: expand to see inside", passes=2),
               shape={"group": "box3d", "run": "component"}.get(c.kind, "folder"),
               style="filled", fillcolor=FOLDED,
               **{"class": f"vjpviz-node vjpviz-cluster vjpviz-{c.kind}"})
  if c.failing:
    attrs.update(color=FAIL, fontcolor=FAIL, penwidth="3", style="filled,bold,dashed")
  return attrs


def _avals(side: str, avals: tuple[str, ...]) -> str:
  if not avals:
    return ""
  more = f" +{len(avals) - MAX_AVALS}" if len(avals) > MAX_AVALS else ""
  return f"{side}: {', '.join(avals[:MAX_AVALS])}{more}"


def _edge_attrs(e: ViewEdge, labels: bool, failing: str | None = None) -> dict:
  differs = next((x for x in e.edges if x.value_error), None)   # well-typed, wrong values
  shown = e.shown if e.mismatch or differs is None else differs
  flagged = e.mismatch or differs is not None
  flows = [x for x in e.edges if x.flow is not None]
  bad = [x for x in flows if _nonfinite(x.flow)]
  first = any(x.dst == failing for x in bad)       # the culprit's own non-finite output
  count = f"×{len(e.edges)} " if len(e.edges) > 1 else ""
  text = f"{'✖ ' if flagged or first else ''}{count}P {shown.primal} / CT {shown.cotangent}"
  got = (f"got {shown.cotangent_got}" if e.mismatch else
         f"CT value differs: {differs.value_error}" if differs else "")
  values = _flow_text((bad or flows)[0].flow, first) if flows else ""
  attrs = dict(label=_text(shown.argument or "", text, got, values) if labels or flagged or bad else "",
               **{"class": "vjpviz-edge" + (" vjpviz-edge-mismatch" if flagged else "")
                  + (" vjpviz-edge-value" if differs else "")
                  + (" vjpviz-edge-nonfinite" if bad else "")
                  + (" vjpviz-edge-first-nonfinite" if first else "")})
  if differs:
    attrs.update(tooltip=_text(f"{got}: the rule's cotangent has the expected type, but its "
                               "values are not the primal's derivative", passes=2))
  if flagged or first:
    attrs.update(color=FAIL, fontcolor=FAIL, penwidth="2.5", style="bold,dashed")
  elif bad:
    attrs.update(color=FAIL, fontcolor=FAIL, penwidth="1.5", style="bold")
  elif flows:
    colour = _magnitude_colour(flows[0].flow)
    primal = flows[0].primal_norm
    attrs.update(tooltip=_text(values, f"‖P‖ {primal:.3g}" if primal is not None else "",
                               passes=2))   # the values on hover, labels or not
    if colour:
      attrs.update(color=colour, fontcolor=colour, penwidth="1.5",
                   **({"style": "dashed"} if colour == ZERO_CT else {}))
  return attrs


def _nonfinite(flow: tuple) -> bool:
  return bool(flow[1] or flow[2])


def _flow_text(flow: tuple, first: bool) -> str:
  """``CT 2 NaN of 5 · max |ct| 0.5`` or ``|CT| 3.2 · max 1.1``, with the word for a
  vanishing or exploding one (colour is never the only cue)."""
  size, nan, inf, norm, peak = flow
  bad = ", ".join(f"{n} {w}" for n, w in ((nan, "NaN"), (inf, "Inf")) if n)
  if bad:
    return f"{'first non-finite: ' if first else ''}CT {bad} of {size} · max |ct| {peak:.3g}"
  word = {TINY_CT: " (vanishing)", HUGE_CT: " (exploding)",
          ZERO_CT: " (zero)"}.get(_magnitude_colour(flow), "")
  return f"‖CT‖ {norm:.3g} · max {peak:.3g}{word}"


def _magnitude_colour(flow: tuple) -> str | None:
  peak = flow[4]
  return (HUGE_CT if peak > EXPLODING else TINY_CT if 0 < peak < VANISHING else
          ZERO_CT if peak == 0 and flow[0] else None)


_LEGEND_BOXES = (   # (legend node, label, attributes), drawn only when the view has one
    ("failed", "✖ failing node", dict(color=FAIL, fontcolor=FAIL, fillcolor="#FBE3D6",
                                      penwidth="3", peripheries="2", style="rounded,filled,bold",
                                      **{"class": "vjpviz-legend-failed"})),
    ("scope", "▸ collapsed scope (expandable)", dict(shape="folder", style="filled",
                                                     fillcolor=FOLDED)),
    ("group", "▸ identical blocks ×N", dict(shape="box3d", style="filled", fillcolor=FOLDED)),
    ("run", "▸ folded run of nodes", dict(shape="component", style="filled", fillcolor=FOLDED)),
    ("custom", "custom rule", dict(fillcolor=CUSTOM)),
    ("static", "input not differentiated", dict(shape="invhouse", style="filled,dashed")),
)


def _legend(g, view: View, labels: bool) -> None:
  """What this view draws, and nothing else: a legend is for reading this graph."""
  drawn = {c.kind for c in view.clusters}
  flows = [x for e in view.edges for x in e.edges if x.flow is not None]
  drawn.update("failed" if n == view.failing else "custom"
               for n in view.nodes if view.node(n).custom or n == view.failing)
  drawn.update("static" for n in view.nodes if view.node(n).kind == "static")
  boxes = [(key, label, attrs) for key, label, attrs in _LEGEND_BOXES if key in drawn]
  edges = [(text, attrs) for text, attrs, present in (
      ("✖ mismatched cotangent", dict(color=FAIL, fontcolor=FAIL, penwidth="2.5",
                                      style="bold,dashed", **{"class": "vjpviz-legend-mismatch"}),
       any(e.mismatch for e in view.edges)),
      ("P primal / CT cotangent aval", {}, labels and bool(view.edges)),
      ("✖ first non-finite cotangent", dict(color=FAIL, fontcolor=FAIL, penwidth="2.5",
                                           style="bold,dashed"), any(
          _nonfinite(x.flow) and x.dst == view.failing for x in flows)),
      ("‖CT‖ cotangent norm · max |value|", {}, labels and bool(flows)))
      if present]
  if not boxes and not edges:
    return
  # A narrow column of small samples, unframed, one a row (held in order by invisible
  # edges); an edge sample is a short stroke from a point to its meaning, no arrowhead.
  with g.subgraph(name="cluster_legend") as lg:
    lg.attr(label="", peripheries="0", id="vjpviz-legend", margin="4")
    lg.attr("node", fontsize="8", height="0.2", margin="0.05,0.02")
    rows = [f"legend_{key}" for key, _, _ in boxes] + [f"legend_e{k}a" for k in range(len(edges))]
    for key, label, attrs in boxes:
      lg.node(f"legend_{key}", label=label, **attrs)
    for k, (text, attrs) in enumerate(edges):
      with lg.subgraph() as row:
        row.attr(rank="same")
        row.node(f"legend_e{k}a", label="", shape="point", width="0.03")
        row.node(f"legend_e{k}b", label=text, shape="plaintext", fontcolor=attrs.get("fontcolor", INK))
        row.edge(f"legend_e{k}a", f"legend_e{k}b", arrowhead="none", **attrs)
    for above, below in zip(rows, rows[1:]):
      lg.edge(above, below, style="invis", minlen="1")


def _strip(g, strip: tuple) -> None:
  """The per-layer gradient-norm strip (``norm_strip``), a box beside the graph."""
  if not strip:
    return
  bad = norm_strip.failing(strip)
  with g.subgraph(name="cluster_norm_strip") as sub:
    sub.attr(label="", color="#BBBBBB", id="vjpviz-norm-strip")
    sub.node("norm_strip", label=_text(*norm_strip.lines(strip), left=True), shape="box", style="filled",
             fontname="Courier", fillcolor="white", **({"color": FAIL, "penwidth": "2"}
                                                       if bad else {}),
             **{"class": "vjpviz-norm-strip" + (" vjpviz-norm-strip-nonfinite" if bad else "")})


def _text(*lines: str, passes: int = 1, left: bool = False) -> graphviz.nohtml:
  """A DOT string that shows ``lines`` literally, whatever characters they hold.

  Graphviz expands escapes (``\\N`` is the node name) once in labels and ids but
  twice in tooltips, hence ``passes``. It also decodes HTML entities in labels
  and tooltips (``&lt;`` would be drawn as ``<``) and writes them raw into ids
  (where the browser decodes them), so ``&`` goes in as ``&amp;``: a name is
  drawn, and its box found by id, as exactly itself. ``left``: each line left-justified.
  """
  shown = [s.replace("\\", "\\" * 2 ** passes).replace("&", "&amp;") for s in lines if s]
  return graphviz.nohtml("".join(s + "\\l" for s in shown) if left else "\\n".join(shown))
