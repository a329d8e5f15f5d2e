"""The forward program of a differentiated call, as a Graph with an edge table.

Every edge carries its primal aval and the cotangent aval the backward pass
must produce for it, ``aval.to_ct_aval()``: that holds for every primitive, so
no per-equation VJP is traced. Only custom rules can break it, and the capture
stage already measured what theirs produced. Nested jaxprs (pjit, scan, cond,
while, remat, custom_vjp_call, shard_map, hijax primitives) become child nodes
whose ``parent`` is the enclosing equation.

All of this runs on the user's error path, so it is bounded (``LIMITS``). A
program of more equations than a whole graph is worth building (or one whose
whole graph runs out of time) gets the failing node's neighbourhood instead:
the failure is located on a skeleton of custom-rule equations, and only what
lies a few data edges around it, at its nesting level and each one enclosing
it, becomes nodes. The Graph's ``note`` says so; views work on it unchanged.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import time
import weakref
from typing import Any, NamedTuple
from collections.abc import Callable, Iterator

import jax

from ..capture.compat.private import core, state
from ..capture import avals, records
from ..capture.compat import changed_signatures
from ..capture.naming import frames, function_names
from ..capture.records import Origin
from ..capture.sites import custom_rules, hijax_rules
from . import user_scopes
from .graph import Edge, Graph, Node
from ..base.trees import substituted

CUSTOM_PRIMITIVES = ("custom_vjp_call", "call_hi_primitive")
RULE_CALLS = ("custom_vjp_call", "custom_jvp_call")


def rule_call(eqn) -> bool:
  """Whether ``eqn`` applies a custom_vjp or custom_jvp: JAX's classic primitive, or the
  hijax primitive each is under ``jax_custom_vjp3``/``jax_custom_jvp3``."""
  return eqn.primitive.name in RULE_CALLS or (
      "_prim" in eqn.params and hijax_rules.jax_rule(eqn.params["_prim"]) is not None)
# The walk makes an equation's Node fields but its last two, frames and scope (see framed).
_NAME_STACK, _CALL_SITE, _N_EQNS = (Node._fields.index(f) for f in ("name_stack", "call_site",
                                                                    "n_eqns"))


class Limits(NamedTuple):
  """How much of a program the error path turns into a graph (``LIMITS``, read on each build)."""
  max_eqns: int = 20_000   # a whole graph up to this many equations (graph_scale's 96 layers: 16k)
  hops: int = 12           # else: nodes this many data edges from the failing one, per level,
  max_nodes: int = 1_000   # at most this many whatever the fan-out
  seconds: float = 4.0     # our own loops: half for a whole graph, the rest for a neighbourhood


LIMITS = Limits()

Locate = Callable[[Graph], list]
"""A graph -> the ids of the failing nodes on it (None where not found)."""

_now = time.monotonic   # what our deadlines read (tests replace it)


def trace(origin: Origin) -> core.Jaxpr:
  """The forward jaxpr of ``origin.fun`` over its array arguments, from avals alone."""
  arrays = [j for j, leaf in enumerate(origin.leaves) if _is_aval(leaf)]

  def flat(*values):
    leaves = substituted(origin.leaves, arrays, values)
    args, kwargs = jax.tree_util.tree_unflatten(origin.tree, leaves)
    return origin.fun(*args, **kwargs)

  with records.suspended():
    return jax.make_jaxpr(flat)(*[_shape_struct(origin.leaves[j]) for j in arrays])


def build(origin: Origin | None, locate: Locate) -> tuple[Graph, list[str | None]]:
  """The graph of ``origin``'s forward program, and ``locate`` applied to it.

  The failing nodes must be in the graph, so locating is part of building: a
  small program's whole graph is what ``locate`` sees; a big one's skeleton
  (inputs, outputs, custom-rule equations), and the graph is then the
  neighbourhood of what it found.
  """
  if origin is None:
    return _bare("the differentiated function was not seen by the hook", locate)
  try:
    jaxpr = _open(trace(origin))
  except Exception as e:  # noqa: BLE001 - the diagnosis stands without its graph
    return _bare(f"could not trace {origin.name} for its graph: {type(e).__name__}: {e}", locate)
  return _bounded(jaxpr, _input_nodes(origin), locate, LIMITS)


def _bounded(jaxpr: core.Jaxpr, inputs: list[Node], locate: Locate,
             limits: Limits) -> tuple[Graph, list[str | None]]:
  """``build`` past the trace: the whole graph if within ``limits``, else a neighbourhood."""
  start = _now()
  whole, total = _Clock(start + limits.seconds / 2), _Clock(start + limits.seconds)
  memo = _Memo()
  try:
    try:
      # Counted as it is built (a separate count would walk the program once more);
      # a top level over the limit is too big before any walk.
      if len(jaxpr.eqns) > limits.max_eqns:
        raise _TooMany
      graph = _graph(jaxpr, inputs, _ALL, whole, memo, limits.max_eqns)
      found = locate(graph)
      return _with_upstream(graph, jaxpr, inputs, found, total), found
    except OutOfTime:
      why = f"the whole graph took over {limits.seconds / 2:g} s"
    except _TooMany:
      why = f"a program of {_count(jaxpr, memo, total):,} equations"
    found = locate(_graph(jaxpr, inputs, _CUSTOM, total, memo))
    graph = _neighbourhood(jaxpr, inputs, found, why, limits, total, memo)
    return _with_upstream(graph, jaxpr, inputs, found, total), found
  except OutOfTime:
    return _bare(f"no graph: building it took over {limits.seconds:g} s", locate)


def _bare(note: str, locate: Locate) -> tuple[Graph, list[str | None]]:
  graph = Graph(note=note)
  return graph, locate(graph)


def _input_nodes(origin: Origin) -> list[Node]:
  """One node per array argument leaf, named as the user named it.

  Differentiated leaves get ids ``in0, in1, ...`` in the VJP's input order (the
  order JAX's own paths like ``args[0]`` count in); the rest are ``static``.
  """
  names = function_names.leaf_labels(origin)
  arrays = [j for j, leaf in enumerate(origin.leaves) if _is_aval(leaf)]
  # a dict, not list.index: a model has thousands of leaves
  position = {j: k for k, j in enumerate(origin.differentiated_leaves)}
  nodes = []
  for j in arrays:
    aval = (_short(origin.leaves[j]),)
    if j in position:
      nodes.append(Node(id=f"in{position[j]}", kind="input", label=names[j], out_avals=aval))
    else:
      nodes.append(Node(id=f"arg{j}", kind="static", label=names[j], out_avals=aval))
  return nodes


class OutOfTime(Exception):
  """Our own graph building ran past its deadline."""


class _TooMany(Exception):
  """A whole graph would hold more equations than ``Limits.max_eqns``."""


class _Clock:
  """A deadline for our loops over a program's equations: each tick, every 1024th looks."""

  def __init__(self, at: float):
    self.at, self.ticks = at, 0

  def tick(self) -> None:
    if not self.ticks & 1023 and _now() >= self.at:
      raise OutOfTime
    self.ticks += 1


class _Select(NamedTuple):
  """Which parts of a program become nodes: all, the custom rules, or a neighbourhood."""
  eqn: Callable[[str, Any], bool]    # (equation id, equation): a node?
  body: Callable[[str], bool]        # walk this equation's sub-jaxprs?
  io: Callable[[str], bool]          # this input or output: a node?


_ALL = _Select(lambda nid, eqn: True, lambda nid: True, lambda nid: True)
_CUSTOM = _Select(lambda nid, eqn: eqn.primitive.name in CUSTOM_PRIMITIVES,
                  lambda nid: True, lambda nid: True)


def _graph(jaxpr: core.Jaxpr, inputs: list[Node], select: _Select, clock: _Clock,
           memo: _Memo, max_eqns: float = math.inf) -> Graph:
  builder = _GraphBuilder(select, clock, memo, max_eqns)
  for node, v in zip(inputs, jaxpr.invars):
    if select.io(node.id):
      builder.nodes.append(node)
      builder.env[v] = node.id
  builder.walk(jaxpr, parent=None)
  for i, v in enumerate(jaxpr.outvars):
    if select.io(_out_id(i)):
      builder.nodes.append(Node(id=_out_id(i), kind="output", label=f"out[{i}]",
                                in_avals=(_short(v.aval),)))
      builder.add_edge(v, _out_id(i), 0)
  nodes, sites = builder.framed()
  return Graph(nodes=nodes, edges=tuple(builder.edges), sites=sites)


class _Memo:
  """What one build reads of a program more than once: each jaxpr's equation count and
  each equation's bodies (found by walking its params, as costly as the rest of a node)."""

  def __init__(self):
    self.counts: dict = {}
    self._subs: dict[int, tuple] = {}   # by id: the program outlives the build

  def subs(self, eqn) -> tuple:
    found = self._subs.get(id(eqn))
    if found is None:   # a whole graph's walk asks once per equation: no raise per miss
      found = self._subs[id(eqn)] = tuple(sub_jaxprs(eqn))
    return found


def _count(jaxpr: core.Jaxpr, memo: _Memo, clock: _Clock) -> int:
  """Equations in ``jaxpr``, sub-jaxprs included; a body many equations share is read once."""
  if jaxpr not in memo.counts:
    n = 0
    for eqn in jaxpr.eqns:
      clock.tick()
      n += 1 + sum(_count(sub, memo, clock) for sub in memo.subs(eqn))
    memo.counts[jaxpr] = n
  return memo.counts[jaxpr]


def eqn_id(prefix: str | None, i: int) -> str:
  """Equation ``i`` of a jaxpr: ``e12`` at the top, ``e12.3`` in e12's body."""
  return f"{prefix}.{i}" if prefix else f"e{i}"


def body_prefix(nid: str, branch: int, n_bodies: int) -> str:
  """Ids inside an equation's sub-jaxprs; cond branches are numbered: ``e3.0.1``."""
  return f"{nid}.{branch}" if n_bodies > 1 else nid


def _out_id(i: int) -> str:
  return f"out{i}"


def _neighbourhood(jaxpr: core.Jaxpr, inputs: list[Node], foci: list[str | None], why: str,
                   limits: Limits, clock: _Clock, memo: _Memo) -> Graph:
  """The graph of what lies around ``foci`` only, with a note saying so and why."""
  near, chain = set(), set()
  for focus in dict.fromkeys(f for f in foci if f):
    levels = _levels(jaxpr, focus)
    chain.update(nid for _, _, nid in levels[:-1])
    for level, prefix, center in reversed(levels):   # the focus's own level first
      top = prefix is None
      links = _links(level, prefix, [n.id for n in inputs] if top else [],
                     [_out_id(i) for i in range(len(level.outvars))] if top else [], clock)
      near.update(_nearest(links, center, limits.hops, limits.max_nodes - len(near)))
  # Every program input and output stays (one per argument leaf): fixes that rebuild
  # the call (f_vjp.with_refs) read the whole argument list from the graph.
  select = _Select(lambda nid, eqn: nid in near, chain.__contains__,
                   lambda nid: nid in near or not nid.startswith("e"))
  graph = _graph(jaxpr, inputs, select, clock, memo)
  shown = (f"showing the failing node's neighbourhood only, {len(graph.nodes)} nodes within "
           f"{limits.hops} data edges of it" if near else "the failing node was not found in it")
  return dataclasses.replace(graph, note=f"{why}: {shown}")


def _with_upstream(graph: Graph, jaxpr: core.Jaxpr, inputs: list[Node],
                   found: list[str | None], clock: _Clock) -> Graph:
  ids = [n.id for n in inputs]
  differentiated = {n.id for n in inputs if n.kind == "input"}
  located = [f for f in dict.fromkeys(found) if f]
  walked = [(f, _upstream(jaxpr, ids, f, clock, differentiated)) for f in located]
  upstream = tuple((f, found) for f, (found, _) in walked)
  sliced = tuple((f, tuple(i for i in found if i in through)) for f, (found, through) in walked)
  operands = tuple((f, _operands(jaxpr, ids, f, clock)) for f in located)
  return dataclasses.replace(graph, upstream=upstream, operands=operands, sliced=sliced)


def _operands(jaxpr: core.Jaxpr, inputs: list[str], focus: str,
              clock: _Clock) -> tuple[str | None, ...]:
  """For each operand of equation ``focus``, the program input it is, through the bodies
  enclosing it (a scan's slice of it too), else None."""
  if not focus.startswith("e"):
    return ()
  walk = _Upstream(_levels(jaxpr, focus), clock)
  found = []
  for v in walk.path[-1].invars:
    walk.seen.clear()
    depth, position, _ = walk.outermost(len(walk.bodies) - 1, v, False)
    found.append(inputs[position] if depth < 0 else None)
  return tuple(found)


def _upstream(jaxpr: core.Jaxpr, inputs: list[str], focus: str, clock: _Clock,
              differentiated: set[str], max_hops: int = 64) -> tuple[tuple[str, ...], set]:
  """The parameters nearest upstream of equation ``focus``: the differentiated program
  inputs the fewest equations away, through the bodies that enclose it, not reached
  through a scan's carry; else, with none, the nearest inputs of any kind.

  They say which instance of a block the equation belongs to: in a dozen
  identical layers, the failing rule's nearest inputs are its own layer's
  parameters (``model.layers[3].w``), however deep in scans and remats it sits.
  Data added nearer (``h @ w + x`` in a scan over ``(ws, xs)``) and the state a scan
  carries (``h0``) are the same in every block, so the walk goes on past them. Also
  returned: the inputs reached as a slice of what an enclosing scan iterates over.
  """
  if not focus.startswith("e"):
    return (), set()
  walk = _Upstream(_levels(jaxpr, focus), clock)
  frontier = [(len(walk.bodies) - 1, v, False) for v in walk.path[-1].invars]
  nearest: tuple[str, ...] = ()
  for _ in range(max_hops):
    deeper, found = [], {}
    for depth, v, carried in frontier:
      depth, v, carried = walk.outermost(depth, v, carried)
      if depth < 0:
        found[inputs[v]] = carried
      elif v is not None:
        eqn = walk.producer(depth, v)
        deeper += [(depth, u, carried) for u in eqn.invars] if eqn is not None else []
    params = tuple(i for i, carried in found.items() if i in differentiated and not carried)
    nearest = nearest or tuple(found)
    if params:
      return params, {inputs[k] for k in walk.sliced}
    if not deeper:
      break
    frontier = deeper
  return nearest, {inputs[k] for k in walk.sliced}


class _Upstream:
  """Walking data edges backwards from one equation, out through its enclosing bodies."""

  def __init__(self, levels, clock: _Clock):
    self.bodies = [level for level, _, _ in levels]
    self.path = [level.eqns[_index(nid)] for level, _, nid in levels]
    self.clock = clock
    self.seen: set = set()
    self._made: dict[int, dict] = {}
    self._positions: dict[int, dict] = {}
    self.sliced: set[int] = set()   # program inputs reached as a slice a scan iterates over

  def outermost(self, depth: int, v, carried: bool):
    """Follow ``v`` out of each body whose input it is, to its equation's operand (a
    body's inputs are its equation's last operands: scan, cond, while, pjit, remat):
    (depth, variable) where it is made, (-1, position) for a program input, or
    (depth, None) for a constant or a variable already walked; and whether the way
    out went through a scan's carry (or already had)."""
    sliced = False
    while True:
      self.clock.tick()
      if isinstance(v, core.Literal) or (depth, v) in self.seen:
        return depth, None, carried
      self.seen.add((depth, v))
      position = self._positions_in(depth).get(v)
      if position is None:
        return depth, v, carried
      if depth == 0:
        if sliced:
          self.sliced.add(position)
        return -1, position, carried
      eqn, body = self.path[depth - 1], self.bodies[depth]
      carried = carried or _is_carry(eqn, position)
      sliced = sliced or _is_slice(eqn, position)
      position += len(eqn.invars) - len(body.invars)
      if position < 0:
        return depth, None, carried
      depth, v = depth - 1, eqn.invars[position]

  def producer(self, depth: int, v):
    """The equation of body ``depth`` that makes ``v`` (None for its constants)."""
    if depth not in self._made:
      made = self._made[depth] = {}
      tick = self.clock.tick
      for eqn in self.bodies[depth].eqns:
        tick()
        for out in eqn.outvars:   # one or two: no generator, no update call per equation
          made[out] = eqn
    return self._made[depth].get(v)

  def _positions_in(self, depth: int) -> dict:
    if depth not in self._positions:
      self._positions[depth] = {v: i for i, v in enumerate(self.bodies[depth].invars)}
    return self._positions[depth]


def scan_groups(eqn) -> tuple[int, int, int]:
  """(constants, carry, xs) counts of a scan's operands: JAX 0.12 keeps them as a flat
  tree (``ft_in``), older ones as counts."""
  params = eqn.params
  if "ft_in" in params:
    return tuple(len(g) for g in params["ft_in"].update(list(eqn.invars)).unpack())
  consts, carry = params["num_consts"], params["num_carry"]
  return consts, carry, len(eqn.invars) - consts - carry


def _is_carry(eqn, position: int) -> bool:
  """Whether a scan body's input ``position`` is its carry (neither a constant nor a slice)."""
  if eqn.primitive.name != "scan":
    return False
  consts, carry, _ = scan_groups(eqn)
  return consts <= position < consts + carry


def _is_slice(eqn, position: int) -> bool:
  """Whether a scan body's input ``position`` is a slice of what it iterates over."""
  return eqn.primitive.name == "scan" and position >= sum(scan_groups(eqn)[:2])


def _index(nid: str) -> int:
  """The equation's index in its own jaxpr (see ``eqn_id``)."""
  return int(nid[1:].rsplit(".", 1)[-1])


def _levels(jaxpr: core.Jaxpr, focus: str) -> list[tuple[core.Jaxpr, str | None, str]]:
  """(jaxpr, its id prefix, the node in it on the way to ``focus``), top level first.

  Equation ids read backwards (see ``eqn_id``, ``body_prefix``); inputs and
  outputs are at the top.
  """
  if not focus.startswith("e"):
    return [(jaxpr, None, focus)]
  parts = [int(p) for p in focus[1:].split(".")]
  levels, prefix = [], None
  while parts:
    i = parts.pop(0)
    nid = eqn_id(prefix, i)
    levels.append((jaxpr, prefix, nid))
    if parts:
      subs = list(sub_jaxprs(jaxpr.eqns[i]))
      branch = parts.pop(0) if len(subs) > 1 else 0
      jaxpr, prefix = subs[branch], body_prefix(nid, branch, len(subs))
  return levels


def _links(jaxpr: core.Jaxpr, prefix: str | None, ins: list[str], outs: list[str],
           clock: _Clock) -> dict[str, list[str]]:
  """Data edges between one level's nodes, both ways; ``ins``/``outs`` name its boundary."""
  source: dict[Any, str] = dict(zip(jaxpr.invars, ins))
  links: dict[str, list[str]] = collections.defaultdict(list)

  def link(v, dst: str) -> None:
    src = None if isinstance(v, core.Literal) else source.get(v)
    if src is not None:
      links[src].append(dst)
      links[dst].append(src)
  for i, eqn in enumerate(jaxpr.eqns):
    clock.tick()
    nid = eqn_id(prefix, i)
    for v in eqn.invars:
      link(v, nid)
    for v in eqn.outvars:
      source[v] = nid
  for v, out in zip(jaxpr.outvars, outs):
    link(v, out)
  return links


def _nearest(links: dict[str, list[str]], start: str, hops: int, room: int) -> list[str]:
  """``start`` and the nodes at most ``hops`` links from it, nearest first, ``room`` at most
  (``start`` always: the failing node and the equations around it must be drawn)."""
  distance = {start: 0}
  queue = collections.deque([start])
  while queue:
    nid = queue.popleft()
    if distance[nid] == hops:
      break
    for other in links.get(nid, ()):
      if other not in distance:
        if len(distance) >= room:
          return list(distance)
        distance[other] = distance[nid] + 1
        queue.append(other)
  return list(distance)


class _GraphBuilder:
  """One walk over a program's selected equations: its nodes, edges and call sites."""

  def __init__(self, select: _Select, clock: _Clock, memo: _Memo, max_eqns: float = math.inf):
    self.select, self.clock, self.memo, self.max_eqns = select, clock, memo, max_eqns
    self.n_eqns = 0   # equation nodes made so far
    self.nodes: list[Node] = []
    self.edges: list[Edge] = []
    self.env: dict[Any, str] = {}    # variable -> the node that produced it, for selected nodes
    self._vars: dict[Any, tuple[str, str, str]] = {}   # see _carried
    self._avals: dict[Any, tuple[str, str]] = {}
    self._scopes: dict[Any, str] = {}
    self._chains: dict[str | None, list[tuple[int, tuple]]] = collections.defaultdict(list)
    # By traceback (hashed and compared by its frames, in C): a loop's iterations trace
    # under the same stack, so a 48-layer model's ~4k equations have ~50 distinct ones.
    self._traced: dict[Any, Any] = {}
    self._sites: dict[str, str | None] = {}   # equation with a body -> its call site

  def framed(self) -> tuple[tuple[Node, ...], tuple[tuple[str, str], ...]]:
    """The nodes, each equation made with its scope from the user's frames (per jaxpr
    level): the walk keeps an equation's other fields in a list until then."""
    nodes, sites = list(self.nodes), {}
    for chains in self._chains.values():
      found = user_scopes.of_level([c for _, c in chains],
                                   [nodes[k][_NAME_STACK] for k, _ in chains])
      for (k, _), path, scope in zip(chains, found.frames, found.scopes):
        nodes[k] = Node._make((*nodes[k], path, scope))   # _make: no keyword handling
      sites.update(found.sites)
    return tuple(nodes), tuple(sites.items())

  def add_edge(self, var, dst: str, position: int) -> None:
    src = None if isinstance(var, core.Literal) else self.env.get(var)
    if src is not None:
      self.edges.append(Edge(src, dst, *self._carried(var), None, position))

  def _carried(self, var) -> tuple[str, str, str]:
    """(name, primal, expected cotangent) of a variable an edge carries, made once per
    variable (a layer's activations feed several equations)."""
    found = self._vars.get(var)
    if found is None:
      found = self._vars[var] = (f"v{len(self._vars)}", *self.aval_strings(var.aval))
    return found

  def aval_strings(self, aval) -> tuple[str, str]:
    """(primal, expected cotangent) as written; memoised, as a model repeats few types."""
    try:
      strings = self._avals.get(aval)
    except TypeError:  # an unhashable aval
      return _short(aval), _ct_short(aval)
    if strings is None:
      strings = self._avals[aval] = (_short(aval), _ct_short(aval))
    return strings

  def walk(self, jaxpr: core.Jaxpr, parent: str | None, prefix: str | None = None) -> None:
    """Add jaxpr's selected equations under ``parent`` (ids: ``eqn_id``)."""
    tick, subs_of, env, chains = self.clock.tick, self.memo.subs, self.env, self._chains[parent]
    edges, carried = self.edges, self._carried
    everything = self.select is _ALL
    for i, eqn in enumerate(jaxpr.eqns):
      tick()
      nid = eqn_id(prefix, i)
      kept = everything or self.select.eqn(nid, eqn)
      descend = everything or self.select.body(nid)
      if not (kept or descend):
        continue
      subs = subs_of(eqn)
      if kept:
        self.n_eqns += 1
        if self.n_eqns > self.max_eqns:
          raise _TooMany
        made = self.n_eqns
        for k, v in enumerate(eqn.invars):   # add_edge, inlined: once per operand
          src = None if isinstance(v, core.Literal) else env.get(v)
          if src is not None:
            edges.append(Edge(src, nid, *carried(v), None, k))
        # With every equation a node, its bodies' are counted as they are walked.
        inner = sum(_count(sub, self.memo, self.clock) for sub in subs) \
            if subs and not everything else 0
        fields, chain = self._eqn_node(eqn, nid, parent, inner)
        chains.append((len(self.nodes), chain))
        self.nodes.append(fields)
        if subs:
          self._sites[nid] = fields[_CALL_SITE]
      for b, sub in enumerate(subs if descend else ()):
        if kept:
          for v in sub.invars:
            env[v] = nid
        self.walk(sub, parent=nid, prefix=body_prefix(nid, b, len(subs)))
      if kept and subs and everything:
        fields[_N_EQNS] = self.n_eqns - made
      if kept:
        for v in eqn.outvars:
          env[v] = nid

  def _eqn_node(self, eqn, nid: str, parent: str | None, n_eqns: int) -> tuple[list, Any]:
    """The equation's Node fields up to its frames (``framed`` adds those), and its chain
    of user frames (``user_scopes.chain``)."""
    name = eqn.primitive.name
    info = eqn.source_info
    if name in CUSTOM_PRIMITIVES or "_prim" in eqn.params or name == "custom_jvp_call":
      function, rule = custom_names(eqn)
      custom = name in CUSTOM_PRIMITIVES
      chain, call_site = self._traced_by(info, _calls_user_function(eqn), custom)
      # a rule jitted itself (jax.jit(rule)) has no user frame in its traceback: it is
      # called where the user calls the jit around it
      call_site = call_site or (self._sites.get(parent) if custom else None)
    else:
      function = rule = None
      custom = False
      chain, call_site = self._traced_by(info, False, False)
    strings = self.aval_strings
    return [nid, "eqn", function or name, name, parent, self.scopes(info.name_stack), call_site,
            function, rule, tuple([strings(v.aval)[0] for v in eqn.invars]),
            tuple([strings(v.aval)[0] for v in eqn.outvars]), n_eqns, custom], chain

  def _traced_by(self, info, calls_user: bool, custom: bool) -> tuple[Any, str | None]:
    """(user frames chain, call site) of an equation's traceback: made once per distinct
    traceback and kind of equation (hashed and compared by its frames, in C)."""
    key = (info.traceback, calls_user, custom)
    try:
      found = self._traced.get(key)
    except TypeError:  # an unhashable traceback
      return user_scopes.chain(info.traceback, calls_user), _call_site(info, custom)
    if found is None:
      found = self._traced[key] = (user_scopes.chain(info.traceback, calls_user),
                                   _call_site(info, custom))
    return found

  def scopes(self, name_stack) -> str:
    try:
      return self._scopes[name_stack]
    except KeyError:
      names = self._scopes[name_stack] = function_names.scope_names(name_stack)
      return names


def _call_site(info, custom: bool) -> str | None:
  """``file:line`` where an equation (its source ``info``) was made; a custom rule is called
  where the hook saw it called: the user's frame, not a library's."""
  frame = ((custom and frames.user_frame(info.traceback))
           or changed_signatures.user_frame(info))
  return f"{frame.file_name}:{frame.start_line}" if frame else None


def custom_names(eqn) -> tuple[str | None, str | None]:
  """(primal function, rule) names of a custom-rule equation (a custom_jvp's rule is its jvp)."""
  params = eqn.params
  if eqn.primitive.name == "custom_vjp_call":
    bwd = params.get("bwd")
    seen = custom_rules.seen_names(getattr(bwd, "f", bwd))   # behind a library's wrappers
    if seen is not None:
      return seen["function"], seen["rule"]
    return (function_names.function_of(params.get("call_jaxpr"))[0],
            function_names.function_of(bwd)[0])
  if eqn.primitive.name == "custom_jvp_call":
    return (function_names.function_of(params.get("call_jaxpr"))[0],
            function_names.function_of(params.get("jvp_jaxpr_fun"))[0])
  prim = hijax_rules.unwrapped(params.get("_prim"))
  if prim is None:
    return None, None
  kind = hijax_rules.jax_rule(prim)
  if kind is not None:  # hijax custom_vjp3 / custom_jvp3
    rule = hijax_rules.jvp_rule(prim) if kind == "custom_jvp" else prim.bwd
    return prim.traced.fun_name, getattr(rule, "__name__", None)
  return type(prim).__name__, f"{type(prim).__name__}.{hijax_rules.rule_method(type(prim))}"


def _calls_user_function(eqn) -> bool:
  """Whether a custom-rule equation is a call of a function the user wrote, bound by a
  library's wrapper of it (equinox's filter_custom_vjp): its primal's source is theirs."""
  if eqn.primitive.name != "custom_vjp_call":
    return False
  bwd = eqn.params.get("bwd")
  source = (custom_rules.seen_names(getattr(bwd, "f", bwd)) or {}).get("source")
  return bool(source) and not frames.library_file(source.rsplit(":", 1)[0])


def sub_jaxprs(eqn) -> Iterator[core.Jaxpr]:
  """The jaxprs nested in an equation's params, in a stable order (collected into a
  list, not yielded: asked of every equation, and most have none)."""
  found: list = []
  params = eqn.params
  for value in params.values():
    kind = type(value)
    if kind in _PLAIN or kind in _NO_JAXPRS or (kind is tuple and (
        not value or type(value[0]) in _PLAIN)):   # most params, decided here
      continue
    if not (issubclass(kind, (core.Jaxpr, tuple, list)) or kind.__name__ == "ClosedJaxpr"):
      _NO_JAXPRS.add(kind)   # a dtype, a sharding, an enum: never holds a jaxpr
      continue
    _jaxprs_in(value, found)
  traced = getattr(params.get("_prim"), "traced", None)
  if traced is not None:
    _jaxprs_in(getattr(traced, "jaxpr", None), found)
  return iter(found)


_PLAIN = frozenset({int, float, bool, str, type(None)})
_NO_JAXPRS: set[type] = set()   # other param types seen that are no jaxpr, tuple or list


def consts(jaxpr) -> list:
  """The values of ``jaxpr``'s constvars: its own on JAX 0.12, which folded ClosedJaxpr
  into Jaxpr; before, those of the ClosedJaxpr it was found in (``sub_jaxprs``)."""
  own = getattr(jaxpr, "consts", None)
  return list(own) if own is not None else _closed_consts.get(jaxpr, [])


_closed_consts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Before JAX 0.12: an open jaxpr -> its ClosedJaxpr's consts (alive no longer than it)."""


def _jaxprs_in(value, found: list) -> None:
  if isinstance(value, core.Jaxpr):
    found.append(_open(value))
  elif type(value).__name__ == "ClosedJaxpr":  # JAX versions that still have it
    found.append(opened(value))
  elif isinstance(value, (tuple, list)) and value and type(value[0]) not in _PLAIN:
    for v in value:  # cond branches; skips axes=(0, 1)-style params cheaply
      if type(v) not in _PLAIN:
        _jaxprs_in(v, found)


def opened(jaxpr) -> core.Jaxpr:
  """The open jaxpr of a ClosedJaxpr (JAX before 0.12), its consts kept for ``consts``;
  a Jaxpr as it is."""
  inner = _open(jaxpr)
  if inner is not jaxpr and jaxpr.consts:
    _closed_consts[inner] = jaxpr.consts
  return inner


def _open(jaxpr):
  """The jaxpr itself: JAX 0.12 folded ClosedJaxpr into Jaxpr, older ones wrap it."""
  inner = getattr(jaxpr, "jaxpr", jaxpr)
  return inner if isinstance(inner, core.Jaxpr) else jaxpr


def _short(aval) -> str:
  try:
    return aval.str_short()
  except Exception:
    return str(aval)


def _ct_short(aval) -> str:
  try:
    return avals.ct_aval(aval).str_short()
  except Exception:
    return "?"


def _is_aval(leaf) -> bool:
  return isinstance(leaf, core.AbstractValue)


def _shape_struct(aval):
  """A ShapeDtypeStruct for ``aval``, keeping an explicit sharding (shard_map checks it)."""
  if isinstance(aval, state.AbstractRef):
    inner = aval.inner_aval
    return jax.ShapeDtypeStruct(inner.shape, inner.dtype, is_ref=True)
  sharding = getattr(aval, "sharding", None)
  if sharding is None or getattr(sharding.mesh, "empty", True):
    sharding = None
  return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type, sharding=sharding)
