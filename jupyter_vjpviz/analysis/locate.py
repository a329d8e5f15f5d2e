"""Which node of the graph a record is about.

A custom rule used many times (a GELU in every layer) gives many candidate
equations; the one that failed is the one whose call site, name stack and
order of application match what the hook saw when its fwd ran.
"""
from __future__ import annotations

import dataclasses
import functools
import re

from ..base import kinds
from ..capture.records import Record
from .graph import Edge, Graph, Node


def locate(graph: Graph, rec: Record) -> str | None:
  if rec.site is not None and rec.site.call_site is not None:
    return _custom_node(graph, rec)
  subject = kinds.of(rec.kind).subject
  if subject == kinds.INPUT and rec.flat_index is not None:
    return _existing(graph, f"in{rec.flat_index}")
  if subject == kinds.OUTPUT:
    return _existing(graph, f"out{rec.flat_index or 0}")
  if rec.function is not None:  # hijax primitives and custom_jvp rules: by name
    return next((n.id for n in graph.nodes if n.rule and n.function == rec.function), None)
  return None


def _custom_node(graph: Graph, rec: Record) -> str | None:
  site = rec.site
  custom = [n for n in graph.nodes if n.custom]
  candidates = [n for n in custom if n.function == site.function]
  if not candidates:   # staged under a library's names (a rule made per call): where it was called
    candidates = [n for n in custom if n.call_site == site.call_site]
  avals = tuple(a.str_short() for a in site.in_avals)
  for narrow in (lambda n: n.call_site == site.call_site,
                 lambda n: n.name_stack == site.name_stack):
    narrowed = [n for n in candidates if narrow(n)]
    if narrowed:
      candidates = narrowed
  if not candidates:
    return None
  # The occurrence counts applications at this call site and name stack, whatever their
  # types (layers of one loop that differ in width); the types only confirm it, where the
  # graph shows them as the rule saw them (not inside a vmap).
  typed = [n for n in candidates if n.in_avals[len(n.in_avals) - len(avals):] == avals]
  traced = (site.traced or {}).get((site.function, site.call_site, site.name_stack), 0)
  if 0 < traced < len(candidates):
    # Fewer traces than applications: a traced body was reused (a checkpoint's or a jit's,
    # cached for its types), its rule's site shared; the backward pass reaches the last first.
    return (typed or candidates)[-1].id
  k = (site.occurrence or 0) - 1
  if 0 <= k < len(candidates) and (candidates[k] in typed or not typed):
    return candidates[k].id
  return (typed or candidates)[0].id


def named_as_site(graph: Graph, node_id: str | None, site) -> Graph:
  """The graph with the located rule's equations named as the hook saw the rule: a
  library that makes its custom_vjp per call (flax linen) stages its own ``f``/``f_bwd``.
  Every equation staged like it from the same line is an application of the same rule."""
  node = graph.node(node_id) if node_id else None
  if node is None or site is None or (node.function, node.rule) == (site.function, site.rule):
    return graph
  same = (node.function, node.rule, node.call_site)
  nodes = tuple(n._replace(label=site.function, function=site.function, rule=site.rule)
                if n.custom and (n.function, n.rule, n.call_site) == same else n
                for n in graph.nodes)
  return dataclasses.replace(graph, nodes=nodes)


def instance(graph: Graph, node_id: str | None) -> str | None:
  """Which of several identical blocks the failing node is, as the user names it.

  From the inputs that feed it (``Graph.upstream``): the deepest part of their
  common path that has siblings built alike, named alike up to a number
  (``model.layers[3]``, ``params['params']['blocks_3']``). A scanned stack of
  layers fails in every iteration alike, so the stack is named. Blocks without
  parameters of their own are told apart by the order they run in. A label names only
  where the failing application is: one application of its function in the program is
  in no block of several, whichever parameter it reads; in a scan, only the inputs it
  reaches as slices of what the scan iterates over (``Graph.sliced``) say where it is:
  one that reads only what every iteration shares (a parameter its body closes over)
  is in every iteration, in no parameter.
  """
  node = graph.node(node_id) if node_id else None
  if node is None or node.kind != "eqn":
    return None
  inputs = {n.id: n for n in graph.nodes if n.kind in ("input", "static")}
  paths = [_parts(n.label) for n in inputs.values()]
  feeding = [inputs[i] for i in graph.upstream_of(node_id) if i in inputs]
  common = (_common([_parts(n.label) for n in feeding])   # else the parameters, not the data
            or _common([_parts(n.label) for n in feeding if n.kind == "input"]))
  same = [n.id for n in graph.nodes if n.custom and n.function == node.function]
  # A rule applied once is in no block of several; an operation of the program is where
  # its operands come from (a partial graph holds only some applications).
  several = not node.custom or len(same) > 1 or graph.note is not None
  block = _repeated(common, paths) if several else None
  if block is not None:
    return block
  if _in_scan(graph, node):
    sliced = set(graph.sliced_of(node_id))
    named = common and sliced and all(n.id in sliced for n in feeding
                                      if _parts(n.label)[:len(common)] == common)
    return f"{_enclosing(common, paths)}, in every iteration of its scan" if named \
        else "every iteration of its scan"
  if len(same) > 1 and graph.note is None:
    return f"{node.function} call {same.index(node.id) + 1} of {len(same)}"
  return None


_PART = re.compile(r"\[[^\]]*\]|\.[^.\[]+|[^.\[]+")


def _parts(label: str) -> tuple[str, ...]:
  """``m.layers[3].w`` -> ``('m', '.layers', '[3]', '.w')``: a path as written."""
  return tuple(_PART.findall(label))


def _common(paths: list[tuple[str, ...]]) -> tuple[str, ...]:
  if not paths:
    return ()
  first = paths[0]
  n = min(len(p) for p in paths)
  i = next((i for i in range(n) if any(p[i] != first[i] for p in paths)), n)
  return first[:i]


def _repeated(common: tuple[str, ...], paths: list[tuple[str, ...]]) -> str | None:
  """The deepest prefix of ``common`` ending in a part that has a sibling named alike up
  to a number and holding some of the same paths: one block of several. An input is no
  block (``w2`` beside ``w1``): a block holds paths below it."""
  found = None
  for i, own in enumerate(common):
    head, below = common[:i], {}
    for p in paths:
      if len(p) > i + 1 and p[:i] == head and _stem(p[i]) == _stem(own):
        below.setdefault(p[i], set()).add(p[i + 1:])
    mine = below.get(own, set())
    if any(part != own and inside & mine for part, inside in below.items()):
      found = i
  return "".join(common[:found + 1]) if found is not None else None


@functools.lru_cache(maxsize=4096)
def _stem(part: str) -> str:
  """A path part without its numbers; memoised: asked per input and part, of few parts."""
  return re.sub(r"\d+", "", part)


def _enclosing(common: tuple[str, ...], paths: list[tuple[str, ...]]) -> str:
  """The smallest part of the tree around ``common`` that holds more than one input, short
  of a whole argument (``p`` says nothing that ``p['ws']`` does not)."""
  for i in range(len(common), 1 if len(common) > 1 else 0, -1):
    if sum(p[:i] == common[:i] for p in paths) > 1:
      return "".join(common[:i])
  return "".join(common)


def _in_scan(graph: Graph, node) -> bool:
  parents = {n.id: n for n in graph.nodes}
  while node.parent is not None and node.parent in parents:
    node = parents[node.parent]
    if node.primitive == "scan":
      return True
  return False


def _existing(graph: Graph, node_id: str) -> str | None:
  return node_id if graph.node(node_id) is not None else None


def mark_got(graph: Graph, node_id: str | None, rec: Record) -> Graph:
  """The graph with the edges ``rec`` is about labelled with what the backward pass produced:
  the rule's input edge, or every edge of a program input or output whose gradient (an
  accumulator, a Ref, the cotangent given to a VJP) had the wrong type."""
  node = graph.node(node_id) if node_id else None
  if node is None or rec.got is None:
    return graph
  if node.kind in ("input", "static", "output") and rec.got_aval is not None:
    end = "src" if node.kind != "output" else "dst"   # spelled as the diagnosis spells it
    marked = lambda e: e._replace(cotangent=rec.expected or e.cotangent, cotangent_got=rec.got)
    about = lambda e: getattr(e, end) == node.id
  elif rec.flat_index is not None and rec.site is not None:
    return _mark_rule_input(graph, node, rec)
  else:
    return graph
  edges = tuple(marked(e) if about(e) else e for e in graph.edges)
  return dataclasses.replace(graph, edges=edges)


def _mark_rule_input(graph: Graph, node: Node, rec: Record) -> Graph:
  """The graph with the edge into ``node`` of the rule input ``rec`` is about marked, and
  named by the rule's argument (the loss's ``m`` feeds the rule's ``model``). An input
  that is a constant of the program (an array the loss closes over) has no edge to mark:
  it gets a box of its own, so the failure is drawn wherever it entered."""
  site, i = rec.site, rec.flat_index
  position = len(node.in_avals) - len(site.in_paths) + i
  argument = site.in_names[i] if i < len(site.in_names) else None
  about = lambda e: e.dst == node.id and e.position == position
  if any(about(e) for e in graph.edges):
    edges = tuple(e._replace(cotangent_got=rec.got, argument=argument) if about(e) else e
                  for e in graph.edges)
    return dataclasses.replace(graph, edges=edges)
  primal = site.in_avals[i].str_short() if i < len(site.in_avals) else ""
  const = Node(id=f"k{node.id}.{position}", kind="static", label="constant",
               parent=node.parent, out_avals=(primal,))
  edge = Edge(src=const.id, dst=node.id, var="", primal=primal, cotangent=rec.expected or "",
              cotangent_got=rec.got, position=position, argument=argument)
  return dataclasses.replace(graph, nodes=(*graph.nodes, const), edges=(*graph.edges, edge))


def distinct_inputs(graph: Graph, argument: str | None, function: str | None,
                    same: str | None = None) -> Graph:
  """The graph with each program input spelled like a rule's input ``argument`` (the
  loss's ``x`` beside the rule's ``x``) labelled with its function: ``x of loss``. The
  diagnosis spells the rule's input one way everywhere; no other box may read the same.
  Input ``same``, whose label names the rule's input (the array a scan slices it from), is kept."""
  if not argument or not function:
    return graph
  nodes = tuple(n._replace(label=f"{n.label} of {function}")
                if n.kind in ("input", "static") and n.label == argument and n.id != same else n
                for n in graph.nodes)
  return dataclasses.replace(graph, nodes=nodes) if nodes != graph.nodes else graph


def source_line(where: str | None) -> tuple[str, int] | None:
  """Split ``file:line`` (as JAX and we write it) into its parts."""
  m = re.match(r"^(.*):(\d+)$", where or "")
  return (m.group(1), int(m.group(2))) if m else None
