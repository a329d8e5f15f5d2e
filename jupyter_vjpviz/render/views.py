"""Which part of a program's Graph to lay out: the neighbourhood of the failure.

A 48-layer transformer has ~4k equations; dot needs seconds for 2k boxes and a
person can't read them. A View keeps a few dozen nodes around the failing one
(its scope, its inputs, the path to the loss) and folds everything else into
clusters: by scope (``Node.scope``: named scopes, else the user's own calls,
``layer 30 of 48/attention``), by sub-jaxpr (a nested equation stands for its
body until expanded), into runs of unscoped equations (inputs named by their
pytree) once the node budget is spent, and identical consecutive scopes
(layer0..layer29, or layer 0..29 of 48) into one "x30" group. The failing
scope is open, the calls beside the failing one in it folded; its instance
(``View.instance``) is drawn as a labelled cluster with its call site. Clusters are ids
the panel can expand or collapse; edges between them are aggregated. Everything here is
pure: plain Graph in, plain View out.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping

from ..analysis.graph import Edge, Graph, Node

BUDGET = 60        # laid-out nodes in a default view: dot lays this out in tens of ms
EDGE_BUDGET = 100  # drawn edges in a default view
MAX_NODES = 300    # hard ceiling even for what the user expanded explicitly


@dataclasses.dataclass(frozen=True)
class Cluster:
  """Graph nodes drawn as one box."""
  id: str                          # "scope:layer3", "scope:e12:attn", "group:scope:layer0", "run:e5..e9"
  kind: str                        # "scope" | "group" | "run"
  label: str
  members: tuple[str, ...]         # graph node ids folded in (not counting their sub-jaxprs)
  n_eqns: int                      # equations inside, sub-jaxprs included
  parent: str | None = None        # the expanded equation whose body holds it
  inputs: tuple[str, ...] = ()     # distinct primal avals entering / leaving
  outputs: tuple[str, ...] = ()
  repeat: int = 1                  # groups: how many identical scopes
  failing: bool = False            # the failing node is folded in here


@dataclasses.dataclass(frozen=True)
class ViewEdge:
  """One drawn edge: the graph edges between two drawn boxes."""
  src: str
  dst: str
  edges: tuple[Edge, ...]

  @property
  def mismatch(self) -> bool:
    return any(e.mismatch for e in self.edges)

  @property
  def shown(self) -> Edge:
    """The edge whose avals the label shows: a mismatched one if any."""
    return next((e for e in self.edges if e.mismatch), self.edges[0])


@dataclasses.dataclass(frozen=True)
class Instance:
  """The failing instance of a repeated block, drawn open around the failing node."""
  label: str                       # "layer 30 of 48", "Block.__call__ 6 of 12", "layer30/mlp"
  site: str | None                 # file:line of its call, for the user's own calls
  boxes: frozenset                 # the drawn boxes inside it


@dataclasses.dataclass(frozen=True)
class View:
  failing: str | None
  nodes: tuple[str, ...]            # visible graph node ids, program order
  clusters: tuple[Cluster, ...]
  edges: tuple[ViewEdge, ...]
  expanded: frozenset = frozenset()
  collapsed: frozenset = frozenset()
  budget: int = BUDGET
  note: str | None = None
  instance: Instance | None = None
  graph: Graph = dataclasses.field(default_factory=Graph, repr=False, compare=False)
  box_of: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False, compare=False)
  """graph node id -> the visible node or cluster id that draws it"""
  index: Mapping[str, Node] = dataclasses.field(default_factory=dict, repr=False, compare=False)

  def node(self, node_id: str) -> Node:
    return self.index[node_id]

  @property
  def size(self) -> int:
    """Boxes to lay out."""
    return len(self.nodes) + len(self.clusters)

  def cluster(self, cluster_id: str) -> Cluster | None:
    return next((c for c in self.clusters if c.id == cluster_id), None)


def default_view(graph: Graph, failing: str | None, expanded: Iterable[str] = frozenset(),
                 collapsed: Iterable[str] = frozenset(), budget: int = BUDGET) -> View:
  """The view around ``failing`` with the given clusters or equations opened or closed.

  ``expanded`` holds cluster ids and equation ids (open that sub-jaxpr);
  ``collapsed`` closes what is open by default (the failing scope, the
  sub-jaxprs around the failing node).
  """
  key = (id(graph), failing, frozenset(expanded), frozenset(collapsed), budget)
  view = _recent.pop(key, None)
  if view is None:
    view = _within(graph, failing, *key[2:])
  _recent[key] = view   # newest last; it holds its graph, so the graph's id stays its own
  while len(_recent) > RECENT:
    _recent.popitem(last=False)
  return view


RECENT = 8
_recent: collections.OrderedDict = collections.OrderedDict()
"""The last views made: a diagnosis's default view is drawn for the panel's push, the
inline output and the panel's first request; a graph and its views never change."""


def _within(graph, failing, expanded, collapsed, budget) -> View:
  """The view, drawn with fewer shown nodes while its boxes (runs of hidden equations
  between shown ones included) or edges exceed the budget: a densely connected program
  (each step reading every earlier one) has ~2 boxes per shown node and edges between
  most pairs. The view keeps the budget asked for: expanding it starts from that again."""
  room = budget
  while True:
    view = _ViewBuilder(graph, failing, expanded, collapsed, room).view()
    if (view.size <= budget and len(view.edges) <= EDGE_BUDGET) or room <= 1:
      return dataclasses.replace(view, budget=budget)
    room = room * 2 // 3


def expand(view: View, cluster_id: str) -> View:
  """The same view with one more cluster (or nested equation) opened."""
  if cluster_id in view.collapsed:   # open by default: undo the collapse
    return _again(view, view.expanded, view.collapsed - {cluster_id})
  return _again(view, view.expanded | {cluster_id}, view.collapsed)


def collapse(view: View, cluster_id: str) -> View:
  """The same view with a cluster or equation closed (the failing scope too)."""
  if cluster_id in view.expanded:
    return _again(view, view.expanded - {cluster_id}, view.collapsed)
  return _again(view, view.expanded, view.collapsed | {cluster_id})


def reveal(view: View, node_id: str) -> View:
  """Open clusters until ``node_id`` (say, a search hit) is drawn as itself."""
  for _ in range(16):  # each step opens one nesting level
    box = view.box_of.get(node_id, node_id)
    if box == node_id or box in view.expanded:
      return view
    view = expand(view, box)
  return view


def search(graph: Graph, query: str) -> list[str]:
  """Ids of nodes whose id, name, primitive, scope, call site or an aval contains ``query``."""
  q = query.strip().lower()
  if not q:
    return []
  return [n.id for n in graph.nodes
          if any(q in (s or "").lower() for s in
                 (n.id, n.label, n.primitive, n.function, n.rule, n.name_stack, n.frames,
                  n.call_site,
                  *n.in_avals, *n.out_avals))]


def _again(view: View, expanded: frozenset, collapsed: frozenset) -> View:
  return default_view(view.graph, view.failing, expanded, collapsed, view.budget)


@functools.lru_cache(maxsize=4096)
def _split(name_stack: str) -> tuple[str, ...]:
  return tuple(s for s in name_stack.split("/") if s)


def _scope_id(parent: str | None, scope: tuple[str, ...]) -> str:
  return "scope:" + (f"{parent}:" if parent else "") + "/".join(scope)


def _starts(a: tuple, prefix: tuple) -> bool:
  return a[:len(prefix)] == prefix


class _ViewBuilder:
  """One pass per opened nesting level, outermost first, sharing the node budget."""

  def __init__(self, graph, failing, expanded, collapsed, budget):
    self.graph, self.failing = graph, failing
    self.expanded, self.collapsed, self.budget = expanded, collapsed, budget
    self.by_id: dict[str, Node] = {}
    self.scope: dict[str, tuple[str, ...]] = {}
    self.order: dict[str, int] = {}
    self.children: dict[str | None, list[Node]] = defaultdict(list)
    for i, n in enumerate(graph.nodes):   # one pass: every view of a big graph starts here
      self.by_id[n.id], self.order[n.id] = n, i
      self.scope[n.id] = _split(n.scope or n.name_stack)
      self.children[n.parent].append(n)
    self.succs: dict[str, list[str]] = defaultdict(list)
    self.preds: dict[str, list[str]] = defaultdict(list)
    for e in graph.edges:
      self.succs[e.src].append(e.dst)
      self.preds[e.dst].append(e.src)
    self.path = []                  # the failing node and the equations around it
    node = self.by_id.get(failing)
    while node is not None:
      self.path.append(node.id)
      node = self.by_id.get(node.parent)
    self.box_of: dict[str, str] = {}
    self.visible: list[str] = []
    self.clusters: dict[str, Cluster] = {}
    self._relatives: dict[tuple, tuple] = {}

  def view(self) -> View:
    self._level(None)
    for n in self.graph.nodes:   # bodies of closed equations go where their equation went
      if n.id not in self.box_of:
        self.box_of[n.id] = self.box_of.get(n.parent, n.parent)
    edges = self._edges()
    clusters = _with_boundaries(self.clusters.values(), edges)
    folded = (f"{len(self.visible) + len(clusters)} boxes for {len(self.graph.nodes)} nodes; "
              f"{len(clusters)} collapsed (expand to see inside)") if clusters else None
    note = " · ".join(t for t in (self.graph.note, folded) if t) or None   # a partial graph says so
    return View(failing=self.failing, nodes=tuple(sorted(self.visible, key=self.order.get)),
                clusters=clusters, edges=edges, expanded=self.expanded,
                collapsed=self.collapsed, budget=self.budget, note=note,
                instance=self._instance(), graph=self.graph, box_of=self.box_of,
                index=self.by_id)

  def _instance(self) -> Instance | None:
    """The outermost numbered call around the failing node (``layer 30 of 48``), else
    its innermost scope, if it is drawn open; with the call's site where we have it."""
    node = self.by_id.get(self.failing)
    scope = self.scope.get(self.failing, ())
    if node is None or not scope or self.box_of.get(node.id) != node.id:
      return None
    depth = next((k + 1 for k, part in enumerate(scope) if _COUNTED.match(part)), len(scope))
    inside = scope[:depth]
    site = self.graph.site_of("/".join(inside)) if inside[-1] in _split(node.frames) else None
    boxes = frozenset(b for b in (*self.visible, *self.clusters)
                      if self._level_of(b) == node.parent and self._inside(b, inside))
    label = scope[depth - 1] if _COUNTED.match(scope[depth - 1]) else "/".join(inside)
    return Instance(label, site, boxes)

  def _level_of(self, box: str) -> str | None:
    return self.clusters[box].parent if box in self.clusters else self.by_id[box].parent

  def _inside(self, box: str, scope: tuple) -> bool:
    members = self.clusters[box].members if box in self.clusters else (box,)
    eqns = [m for m in members if self.by_id[m].kind == "eqn"]   # its arguments may sit inside
    return bool(eqns) and all(_starts(self.scope[m], scope) for m in eqns)

  def _open_eqn(self, node_id: str) -> bool:
    if node_id in self.collapsed:
      return False
    return node_id in self.expanded or node_id in self.path[1:]

  # -- one level: the equations of one (opened) jaxpr --------------------------------------

  def _level(self, parent: str | None) -> None:
    nodes = self.children.get(parent, [])
    focus = next((i for i in self.path if self.by_id[i].parent == parent), None)
    zone = self._zone(focus)
    folded: dict[str, list[str]] = defaultdict(list)
    candidates = []
    closed: dict[tuple, str | None] = {}   # scope -> its cluster: a level's share few
    for n in nodes:
      scope = self.scope[n.id]
      if scope not in closed:
        outer = self._closed_scope(parent, scope, zone)
        closed[scope] = None if outer is None else _scope_id(parent, outer)
      if closed[scope] is None:
        candidates.append(n)
      else:
        folded[closed[scope]].append(n.id)
    where = {m: cid for cid, members in folded.items() for m in members}
    for n in [n for n in candidates if _is_arg(n)]:   # arguments feeding one scope go inside it
      boxes = {where.get(d) for d in self.succs.get(n.id, ())}
      if len(boxes) == 1 and None not in boxes:
        folded[boxes.pop()].append(n.id)
        candidates.remove(n)
    self._group_scopes(parent, nodes, folded, focus)
    self._select(parent, nodes, candidates, focus, zone)
    for n in nodes:
      if self.box_of.get(n.id) == n.id and n.n_eqns and self._open_eqn(n.id):
        self._level(n.id)

  def _zone(self, focus) -> tuple[str, ...] | None:
    """The focus's own scope (None: no scope): open, with every scope around it; the
    scopes inside it (the calls beside the failing one) stay folded."""
    return self.scope.get(focus, ()) or None

  def _closed_scope(self, parent, scope, zone) -> tuple[str, ...] | None:
    """The outermost closed part of ``scope``; None if all are open."""
    for depth in range(1, len(scope) + 1):
      sid = _scope_id(parent, scope[:depth])
      near = zone is not None and _starts(zone, scope[:depth])
      if sid in self.collapsed or not (near or sid in self.expanded):
        return scope[:depth]
    return None

  def _group_scopes(self, parent, nodes, folded, focus) -> None:
    """Scope clusters; consecutive ones with the same structure become one "xN" group."""
    where = {m: cid for cid, members in folded.items() for m in members}
    held = where.get(focus)
    run: list[str] = []
    done: set[str] = set()
    shape, last = None, None   # of the scope that joins, and of the run's last one
    for cid in [*dict.fromkeys(where.get(n.id) for n in nodes if n.kind == "eqn"), None]:
      joins = cid in folded and cid != held
      shape = self._shape(cid, folded) if joins else None
      if run and shape != last:
        self._add_scopes(run, folded, parent, held)
        done.update(run)
        run = []
      if joins:
        run.append(cid)
        last = shape
    for cid in [c for c in folded if c not in done]:   # the one holding the failure, say
      self._add_scopes([cid], folded, parent, held)

  def _shape(self, cid, folded) -> tuple:
    """What makes two scopes identical: relative scopes, ops, avals and bodies, in order."""
    depth = cid.count("/") + 1
    return (depth, *((self._relative(self.scope[n.id], depth), n.label, n.in_avals,
                      n.out_avals, n.n_eqns)
                     for n in (self.by_id[m] for m in folded[cid]) if n.kind == "eqn"))

  def _relative(self, scope: tuple, depth: int) -> tuple:
    """``scope`` below ``depth``, its calls unnumbered; once per scope (scopes repeat)."""
    key = (scope, depth)
    if key not in self._relatives:
      self._relatives[key] = tuple(map(_uncounted, scope[depth:]))
    return self._relatives[key]

  def _add_scopes(self, run, folded, parent, held) -> None:
    members = tuple(m for cid in run for m in folded[cid])
    gid = f"group:{run[0]}"
    if len(run) == 1 or gid in self.expanded:
      for cid in run:
        self._add(cid, "scope", _last(cid), folded[cid], parent, failing=cid == held)
      return
    self._add(gid, "group", _span(_last(run[0]), _last(run[-1])), members, parent,
              repeat=len(run))

  def _add(self, cid, kind, label, members, parent, repeat=1, failing=False) -> None:
    for m in members:
      self.box_of[m] = cid
    self.clusters[cid] = Cluster(
        id=cid, kind=kind, label=label, members=tuple(members),
        n_eqns=sum((self.by_id[m].kind == "eqn") + self.by_id[m].n_eqns for m in members),
        parent=parent, repeat=repeat, failing=failing)

  def _select(self, parent, nodes, candidates, focus, zone) -> None:
    """Show candidates by priority within the budget; fold the rest into runs."""
    near = {focus, *self.preds.get(focus, ()), *self.succs.get(focus, ())}
    below = self._descendants(focus)
    forced = self._forced_runs(parent)
    base = self.order.get(focus, 0)

    def tier(n: Node) -> int:   # 0 and 1 whatever the budget
      if n.id == focus or n.kind == "output":
        return 0
      if self.order[n.id] in forced:
        return 1
      if n.id in near:   # a failing node read by every later step has hundreds
        return 2
      if zone is not None and _starts(self.scope[n.id], zone):
        return 3
      if n.id in below or (_is_arg(n) and not near.isdisjoint(self.succs[n.id])):
        return 4
      return 5

    ranked = sorted((tier(n), abs(self.order[n.id] - base), n.id) for n in candidates)
    room = self.budget - len(self.visible) - len(self.clusters)
    shown = set()
    for t, _, nid in ranked:
      if len(self.visible) + len(shown) >= MAX_NODES or (len(shown) >= room and t > 1):
        break
      shown.add(nid)
    self._runs(parent, nodes, {n.id for n in candidates} - shown, shown)

  def _descendants(self, start) -> set[str]:
    seen, todo = set(), [start] if start else []
    while todo:
      for d in self.succs.get(todo.pop(), ()):
        if d not in seen:
          seen.add(d)
          todo.append(d)
    return seen

  def _forced_runs(self, parent) -> set[int]:
    """Program positions inside runs the user expanded ("run:first..last")."""
    forced = set()
    for cid in self.expanded:
      first, _, last = cid.removeprefix("run:").partition("..")
      if cid.startswith("run:") and first in self.order and last in self.order \
          and self.by_id[first].parent == parent:
        forced.update(range(self.order[first], self.order[last] + 1))
    return forced

  def _runs(self, parent, nodes, hidden, shown) -> None:
    """Consecutive hidden candidates become one run; a run of one is just shown."""
    run: list[str] = []
    for n in [*nodes, None]:
      if n is not None and n.id in hidden:
        run.append(n.id)
        continue
      if len(run) == 1:
        shown.add(run[0])
      elif run:
        self._add(f"run:{run[0]}..{run[-1]}", "run", self._run_label(run), run, parent)
      run = []
    for nid in shown:
      self.box_of[nid] = nid
    self.visible.extend(shown)

  def _run_label(self, run: list[str]) -> str:
    """Inputs by the pytree they share (``params['layers'] (288 inputs)``), else ids."""
    if not _is_arg(self.by_id[run[0]]):
      return f"{run[0]} … {run[-1]} ({len(run)} eqns)"
    tree = _pytree_prefix([self.by_id[m].label for m in run])
    return f"{tree or run[0] + ' … ' + run[-1]} ({len(run)} inputs)"

  def _edges(self) -> tuple[ViewEdge, ...]:
    agg: dict[tuple[str, str], list[Edge]] = {}
    for e in self.graph.edges:
      s, d = self.box_of.get(e.src, e.src), self.box_of.get(e.dst, e.dst)
      if s != d:
        agg.setdefault((s, d), []).append(e)
    return tuple(ViewEdge(s, d, tuple(es)) for (s, d), es in agg.items())


def _with_boundaries(clusters, edges) -> tuple[Cluster, ...]:
  """Each cluster with the distinct avals crossing its boundary, in and out."""
  ins, outs = defaultdict(dict), defaultdict(dict)
  for ve in edges:
    for e in ve.edges:
      ins[ve.dst][e.primal] = outs[ve.src][e.primal] = None
  return tuple(dataclasses.replace(c, inputs=tuple(ins[c.id]), outputs=tuple(outs[c.id]))
               for c in clusters)


def _last(cid: str) -> str:
  """A scope cluster's label: its innermost scope (the box sits inside the others)."""
  return cid.rsplit(":", 1)[-1].rsplit("/", 1)[-1]


_COUNTED = re.compile(r"^(.*) (\d+) of (\d+)$")


def _uncounted(part: str) -> str:
  """A user call without its instance number: ``layer 3 of 48`` -> ``layer``."""
  match = _COUNTED.match(part)
  return match[1] if match else part


def _span(first: str, last: str) -> str:
  """A group's label: ``layer 0–29 of 48`` for numbered calls, else ``layer0 … layer29``."""
  a, b = _COUNTED.match(first), _COUNTED.match(last)
  if a and b and (a[1], a[3]) == (b[1], b[3]):
    return f"{a[1]} {a[2]}–{b[2]} of {a[3]}"
  return f"{first} … {last}"


def _pytree_prefix(labels: list[str]) -> str:
  """The longest pytree path all ``labels`` start with (``params['layers']``), cut at a key."""
  common = os.path.commonprefix(labels)
  cut = max(common.rfind("["), common.rfind(".")) if not all(l == common for l in labels) else -1
  return (common[:cut] if cut > 0 else common).rstrip(".")


def _is_arg(node: Node) -> bool:
  return node.kind in ("input", "static")
