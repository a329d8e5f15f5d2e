"""Which node of the graph a record is about.

A custom rule used many times (a GELU in every layer) gives many candidate
equations; the one that failed is the one whose call site, name stack and
order of application match what the hook saw when its fwd ran.
"""
from __future__ import annotations

import dataclasses
import re

from ..capture.records import Record
from .graph import Graph

_INPUT_KINDS = ("ref_grad_unbound", "ref_grad_as_value", "grad_ref_type", "accumulator_type")
_OUTPUT_KINDS = ("vjp_cotangent_type", "vjp_cotangent_structure")


def locate(graph: Graph, rec: Record) -> str | None:
  if rec.site is not None and rec.site.call_site is not None:
    return _custom_node(graph, rec)
  if rec.kind in _INPUT_KINDS and rec.flat_index is not None:
    return _existing(graph, f"in{rec.flat_index}")
  if rec.kind in _OUTPUT_KINDS:
    return _existing(graph, f"out{rec.flat_index or 0}")
  if rec.function is not None:  # hijax primitives: by name
    return next((n.id for n in graph.nodes if n.custom and n.function == rec.function), None)
  return None


def _custom_node(graph: Graph, rec: Record) -> str | None:
  site = rec.site
  candidates = [n for n in graph.nodes if n.custom and n.function == site.function]
  avals = tuple(a.str_short() for a in site.in_avals)
  for narrow in (lambda n: n.call_site == site.call_site,
                 lambda n: n.name_stack == site.name_stack,
                 lambda n: n.in_avals[len(n.in_avals) - len(avals):] == avals):
    narrowed = [n for n in candidates if narrow(n)]
    if narrowed:
      candidates = narrowed
  if not candidates:
    return None
  k = (site.occurrence or 1) - 1
  return candidates[k].id if k < len(candidates) else candidates[0].id


def _existing(graph: Graph, node_id: str) -> str | None:
  return node_id if graph.node(node_id) is not None else None


def mark_got(graph: Graph, node_id: str | None, rec: Record) -> Graph:
  """The graph with the edge into ``node_id`` that ``rec`` is about labelled with what the backward pass produced."""
  node = graph.node(node_id) if node_id else None
  if node is None or rec.flat_index is None or rec.got is None or rec.site is None:
    return graph
  position = len(node.in_avals) - len(rec.site.in_paths) + rec.flat_index
  edges = tuple(e._replace(cotangent_got=rec.got)
                if e.dst == node.id and e.position == position else e
                for e in graph.edges)
  return dataclasses.replace(graph, edges=edges)


def source_line(where: str | None) -> tuple[str, int] | None:
  """Split ``file:line`` (as JAX and we write it) into its parts."""
  m = re.match(r"^(.*):(\d+)$", where or "")
  return (m.group(1), int(m.group(2))) if m else None
