"""A Diagnosis as a compact plain-text report: for terminals, logs and text/plain.

It says what a reader needs to act without the graph: the headline, where the
rule and the call are, expected against got, and the failing node with the
edges around it (the mismatched one marked).
"""
from __future__ import annotations

import math

from ..analysis.graph import Edge, Graph
from ..base import kinds
from ..base.places import spelled
from ..capture.naming.leaf_paths import MISSING

MAX_EDGES = 8      # per direction around the failing node


def render(d) -> str:
  lines = [f"vjpviz {d.severity}: {d.headline}", ""]
  lines += [f"  {k:<9} {v}" for k, v in facts(d) if v]
  lines += _neighbourhood(d.graph, d.node)
  if d.fixes:
    lines += ["", "  fixes:"] + [f"    {i}. {fix_label(f)}{f.title}" for i, f in enumerate(d.fixes, 1)]
  return "\n".join(lines)


def fix_label(f) -> str:
  """``[verified] ``, ``[type-only] ``, ``[unverifiable: why] ``: what the oracle said of it."""
  if not f.verdict:
    return ""
  why = f": {f.note}" if f.verdict == "unverifiable" and f.note else ""
  return f"[{f.verdict}{why}] "


def facts(d) -> list[tuple[str, str | None]]:
  """(label, value) rows shared with the HTML table; empty values are skipped by both."""
  return [("kind", d.kind), ("processes", d.where), ("function", _at(d.function, d.source)),
          (f"{kinds.of(d.kind).role or 'bwd'} rule", _at(d.rule, d.rule_source)), ("called at", spelled(d.call_site)),
          ("scope", d.name_stack), ("instance", d.instance),
          ("output" if kinds.of(d.kind).subject == kinds.OUTPUT else "input", d.argument or d.path),
          ("expected", d.expected), ("got", d.got), *_leaf_rows(d),
          *((f"  {l.name}", leaf_values(l)) for l in d.leaf_errors),
          *((f"log {l.name}", log_text(l)) for l in d.logs), ("note", d.detail)]


def _leaf_rows(d) -> list[tuple[str, str]]:
  """The other mismatched leaves; for a structure, each leaf one tree has and the other
  lacks (the trees themselves are the expected and got rows)."""
  if not kinds.of(d.kind).structural:
    return [(f"also {l.name}", f"expected {l.expected}, got {l.got}") for l in d.leaves[1:]]
  return [(f"{'missing' if l.got == MISSING else 'extra'} {l.name}",
           l.expected if l.got == MISSING else l.got)
          for l in d.leaves if MISSING in (l.expected, l.got)]


def leaf_values(leaf) -> str:
  """A bwd_value leaf: the reference beside the rule's value where they differ most."""
  error = f"max abs error {leaf.max_abs:.3g}, rel {leaf.max_rel:.2g}"
  if leaf.got_zero:
    return f"zero, where the reference reaches {leaf.scale:.4g}"
  if leaf.reference_at == leaf.got_at:   # judged along random directions, not per element
    return f"{error} (finite differences along random directions)"
  return (f"reference {leaf.reference_at:.4g}, rule {leaf.got_at:.4g} at "
          f"{list(leaf.where)}; {error}")


def log_text(leaf) -> str:
  """A log the rule wrote (``defvjp_with_logs``), as the caller received it: its type and
  what each axis JAX stacked stands for, each stacked slice's mean, then its range (its
  values, when that few); the panel's log table says the same (logTable.ts)."""
  head = f"{leaf.dtype}[{','.join(map(str, leaf.shape))}]" + "".join(f"; {s}" for s in leaf.stacked)
  if leaf.traced:
    return f"{head}; traced under jit: its values are the jitted call's to return"
  parts = [f"means {', '.join(leaf.slices)}"] if leaf.slices else []
  if leaf.mean is not None and math.prod(leaf.shape) > len(leaf.first):
    parts.append(f"min {leaf.min}, max {leaf.max}, mean {leaf.mean}")
  elif leaf.first:
    parts.append(", ".join(leaf.first))
  return "; ".join([head, *parts])


def edge_text(e: Edge) -> str:
  mark = (f"  ✖ got {e.cotangent_got}" if e.mismatch else
          f"  ✖ CT value differs: {e.value_error}" if e.value_error else "")
  into = f"{e.argument}  " if e.argument else ""
  return f"{into}P {e.primal} / CT {e.cotangent}{mark}"


def _at(name: str | None, where: str | None) -> str | None:
  return f"{name} ({spelled(where)})" if name and where else name


def _neighbourhood(graph: Graph, node_id: str | None) -> list[str]:
  node = graph.node(node_id) if node_id else None
  note = [f"  graph     {graph.note}"] if graph.note else []
  if node is None:
    return note
  labels = {n.id: n.label for n in graph.nodes}
  ins = [e for e in graph.edges if e.dst == node_id][:MAX_EDGES]
  inside = {n.id for n in graph.nodes if n.parent == node_id}   # its own body's edges
  outs = [e for e in graph.edges if e.src == node_id and e.dst not in inside][:MAX_EDGES]
  where = f" in {node.name_stack}" if node.name_stack else ""
  lines = [*note, "", f"  node {node.id} {node.label} ({node.primitive or node.kind}){where}"]
  lines += [f"    in   {e.src} {labels.get(e.src, '')} -> {edge_text(e)}" for e in ins]
  lines += [f"    out  -> {e.dst} {labels.get(e.dst, '')}  {edge_text(e)}" for e in outs]
  return lines
