"""A backward pass re-run at the user's values, and what it measured put on the graph.

Shared by ``vjpviz.nans`` (which localises a NaN on it) and ``%vjpviz values on`` (which
puts each edge's cotangent norms on a diagnosis's graph).
"""
from __future__ import annotations

import dataclasses

import jax

from ...capture.compat.private import core
from .. import program
from . import nonfinite
from ..graph import Graph
from .nonfinite_eval import inexact


def program_inputs(origin, call) -> tuple:
  """(jaxpr, its array inputs' values, which are differentiated, ones for its outputs'
  cotangents: jax.grad's) of ``origin`` called with ``call``'s leaves."""
  jaxpr = program.opened(program.trace(origin))
  flat = jax.tree_util.tree_leaves(call)
  arrays = [j for j, leaf in enumerate(origin.leaves) if isinstance(leaf, core.AbstractValue)]
  differentiated = set(origin.differentiated_leaves)
  out_cts = [jax.numpy.ones(v.aval.shape, v.aval.dtype) if inexact(v) else None
             for v in jaxpr.outvars]
  return (jaxpr, [jax.numpy.asarray(flat[j]) for j in arrays],
          [j in differentiated for j in arrays], out_cts)


def input_names(graph: Graph, origin) -> list[str]:
  """The differentiated inputs as the graph names them (``params[3].w``)."""
  return [(graph.node(f"in{k}").label if graph.node(f"in{k}") else f"args[{k}]")
          for k in range(len(origin.differentiated_leaves))]


def mark_flows(graph: Graph, flows: dict) -> Graph:
  """The graph with each edge whose cotangent the search measured carrying its values
  (``Edge.flow``), for the overlay; ``flows``: ``"dst#position"`` -> ``nonfinite.Flow``."""
  edges = tuple(e._replace(flow=dataclasses.astuple(flows[k])) if (k := f"{e.dst}#{e.position}")
                in flows else e for e in graph.edges)
  return dataclasses.replace(graph, edges=edges)


def flow_dicts(edges: dict, strip: tuple) -> dict:
  """``Diagnosis.cotangents``' edges and layers, as numbers."""
  return {"edges": {k: f.to_dict() for k, f in edges.items()},
          "layers": [{"layer": r[0], **nonfinite.Flow(*r[1:]).to_dict()} for r in strip]}
