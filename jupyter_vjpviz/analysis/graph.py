"""The forward program as plain data: nodes and aval-labelled edges.

Nothing here holds a jaxpr, a tracer or an array: a Graph can outlive the
failing call without keeping any device buffer alive. Nodes and edges are
NamedTuples: a 4k-equation model makes ten thousand of them on the error path,
and a tuple builds several times faster than a frozen dataclass.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple


class Node(NamedTuple):
  id: str                  # "in0", "out0", "e12", "e12.3" (equation 3 inside e12's sub-jaxpr)
  kind: str                # "input" (differentiated) | "static" (an argument not
                           # differentiated) | "output" | "eqn"
  label: str               # primitive, or the custom function's name
  primitive: str | None = None
  parent: str | None = None        # id of the equation whose sub-jaxpr holds this node
  name_stack: str = ""
  call_site: str | None = None
  function: str | None = None      # custom rules: the primal function
  rule: str | None = None          # custom rules: the bwd rule
  in_avals: tuple[str, ...] = ()
  out_avals: tuple[str, ...] = ()
  n_eqns: int = 0                  # equations inside its sub-jaxprs, recursively
  custom: bool = False
  frames: str = ""                 # the user's calls that made it: "layer 30 of 48/attention"
  scope: str = ""                  # what views group by: named scopes and calls (user_scopes)

  def to_dict(self) -> dict:
    d = self._asdict()
    d["in_avals"], d["out_avals"] = list(self.in_avals), list(self.out_avals)
    return d


class Edge(NamedTuple):
  src: str
  dst: str
  var: str                 # the jaxpr variable carried
  primal: str              # its primal aval
  cotangent: str           # the cotangent aval the backward pass must produce for it
  cotangent_got: str | None = None   # what the backward pass actually produced, where known
  position: int = 0        # input position at dst
  value_error: str | None = None     # well-typed, wrong values: "rel 0.31" (vjpviz.gradcheck)
  flow: tuple | None = None          # vv.nans: its cotangent's (size, NaN, Inf, norm, max |value|)
  argument: str | None = None        # the failing rule's input it feeds, as the diagnosis spells it
  primal_norm: float | None = None   # vv.grads: its primal value's norm at the inputs measured

  @property
  def mismatch(self) -> bool:
    return self.cotangent_got is not None and self.cotangent_got != self.cotangent

  def to_dict(self) -> dict:
    return {**self._asdict(), "mismatch": self.mismatch}


@dataclasses.dataclass(frozen=True)
class Graph:
  nodes: tuple[Node, ...] = ()
  edges: tuple[Edge, ...] = ()
  note: str | None = None          # why the graph is empty or partial
  upstream: tuple[tuple[str, tuple[str, ...]], ...] = ()
  """(failing node, the ids of the program inputs nearest upstream of it), for the
  located nodes only: which instance of a repeated block it is (``locate.instance``)."""
  operands: tuple[tuple[str, tuple[str | None, ...]], ...] = ()
  """(failing node, for each of its operands the id of the program input it is, a scan's
  slice of it included, else None), for the located nodes only: a library rule's inputs
  spelled as the user's (``assemble``)."""
  sliced: tuple[tuple[str, tuple[str, ...]], ...] = ()
  """(failing node, the ids among its ``upstream`` inputs that reach it as a slice of what
  an enclosing scan iterates over), for the located nodes only: a scan's constants and
  carry are shared by its iterations, so only these name where in the scan it is."""
  sites: tuple[tuple[str, str], ...] = ()
  """(scope path up to a user call, ``file:line`` of that call): where each call in
  ``Node.frames`` was made, keyed as ``Node.scope`` spells it (a named scope may lead)."""

  strip: tuple[tuple, ...] = ()
  """(layer, size, NaN, Inf, norm, max |value|) of each layer's gradient in a stacked
  model, for the norm strip beside the graph (vv.nans, ``%vjpviz values on``)."""

  def node(self, node_id: str) -> Node | None:
    return next((n for n in self.nodes if n.id == node_id), None)

  def site_of(self, scope: str) -> str | None:
    return next((where for path, where in self.sites if path == scope), None)

  def upstream_of(self, node_id: str | None) -> tuple[str, ...]:
    return next((ids for nid, ids in self.upstream if nid == node_id), ())

  def sliced_of(self, node_id: str | None) -> tuple[str, ...]:
    return next((ids for nid, ids in self.sliced if nid == node_id), ())

  def operands_of(self, node_id: str | None) -> tuple[str | None, ...]:
    return next((ids for nid, ids in self.operands if nid == node_id), ())

  def call_sites(self) -> list[str]:
    """Every ``file:line`` the graph names: its nodes' call sites and its user calls'."""
    return [n.call_site for n in self.nodes if n.call_site] + [where for _, where in self.sites]

  def to_dict(self) -> dict:
    return {"nodes": [n.to_dict() for n in self.nodes],
            "edges": [e.to_dict() for e in self.edges], "note": self.note,
            "upstream": {nid: list(ids) for nid, ids in self.upstream},
            "sites": dict(self.sites)}
