"""Diagnoses assembled from a captured session: records merged and grouped per rule
application, the graph built once, each group located in it."""
from __future__ import annotations

import collections
import dataclasses
import functools
import itertools

from ..base import kinds
from ..capture.naming.leaf_paths import MISSING, Path
from ..capture import grad_logs
from ..capture.records import ERROR, WARNING, Record, Session
from . import fallback, program
from .diagnosis import Diagnosis, MismatchedLeaf
from .locate import distinct_inputs, instance, locate, mark_got, named_as_site


def diagnose(session: Session, exc: BaseException | None,
             skip: set | None = None) -> list[Diagnosis]:
  """Diagnoses for a session, errors first; records whose key is in ``skip`` are dropped."""
  recs = session.records
  if not recs and exc is not None:
    recs = fallback.records_from_text(str(exc))
  repeats = collections.Counter(key(r) for r in recs)
  recs = [r for r in merge(recs) if skip is None or key(r) not in skip]
  if not recs:
    return []
  recs.sort(key=lambda r: r.severity != ERROR)
  groups = applications(recs)
  graph, nodes = program.build(session.origin, lambda g: [locate(g, grp[0]) for grp in groups])
  message = str(exc) if exc is not None else None
  # JAX raised, yet every check site accepted what it saw: what they let through
  # failed further on (a dtype meeting a scan carry or an add), so it is the error.
  failed_later = exc is not None and all(r.severity != ERROR for r in recs)
  out = []
  for group, node in zip(groups, nodes):
    group = _spelled_by_the_program(group, graph, node)
    rec, site = group[0], group[0].site
    own = named_as_site(graph, node, site)
    argument, primal = _argument(rec, own.node(node) if node else None)
    leaves = tuple(leaf for r in group for leaf in _leaves(r))
    out.append(Diagnosis(
        # Whatever the check site expected, if JAX raised nothing it let it through.
        kind=rec.kind, severity=_severity(rec, exc, failed_later),
        function=rec.function or (session.origin.name if session.origin else None),
        rule=rec.rule,
        source=rec.source or (session.origin.source if session.origin else None),
        path=rec.path, expected=rec.expected, got=rec.got, message=message, node=node,
        graph=_graph(own, node, group, argument, session),
        rule_source=site.rule_source if site else rec.rule_source,
        call_site=site.call_site if site else None, argument=argument, primal=primal,
        name_stack=site.name_stack if site else "", instance=_instance(own, node, rec, repeats[key(rec)]),
        detail=rec.detail or _swapped(leaves) or (_FAILED_LATER if failed_later else None),
        hijax=site.hijax if site else False, raised_at=rec.raised_at,
        expected_aval=rec.expected_aval, got_aval=rec.got_aval, site=site, leaves=leaves,
        solver=rec.solver, operation=rec.operation,
        logs=grad_logs.of_site(session, site) if site else ()))
  return out


def _spelled_by_the_program(group: list[Record], graph, node: str | None) -> list[Record]:
  """The group with its rule's inputs that a library spelled by its own parameters (flax's
  ``grad_variables[0]['params']['bias']``: a scan's slice of the user's parameters, not
  them) named as the program input they are in the graph (``p['params']['layers']...``)."""
  site = group[0].site
  if site is None or not site.unnamed or not graph.operands_of(node):
    return group
  names = list(site.in_names)
  for k in site.unnamed:
    source = graph.node(_operand(graph, node, site, k) or "")
    names[k] = source.label if source is not None else names[k]
  renamed = dataclasses.replace(site, in_names=tuple(names))
  return [dataclasses.replace(r, site=renamed) if r.site == site else r for r in group]


def _graph(graph, node: str | None, group: list[Record], argument: str | None,
           session: Session):
  """The diagnosis's own graph: its edges marked, and, when it is about a rule's input,
  no program input labelled like that input."""
  marked = functools.reduce(lambda g, r: mark_got(g, node, r), group, graph)
  about_rule = kinds.of(group[0].kind).subject == kinds.RULE and group[0].site is not None
  function = session.origin.name if session.origin else None
  if not about_rule:
    return marked
  site, i = group[0].site, group[0].flat_index
  named_by_it = _operand(graph, node, site, i) if i in site.unnamed else None   # its label
  return distinct_inputs(marked, argument, function, named_by_it)


def _operand(graph, node: str | None, site, i: int | None) -> str | None:
  """The id of the program input that rule input ``i`` is (or a scan slices it from)."""
  operands = graph.operands_of(node)
  position = len(operands) - len(site.in_names) + i if i is not None else -1
  return operands[position] if 0 <= position < len(operands) else None


def _instance(graph, node: str | None, rec: Record, times: int) -> str | None:
  """Which application of the rule this is; for a problem JAX let through, how many
  other applications returned the same (each of a dozen blocks, say)."""
  one = instance(graph, node)
  if times <= 1 or rec.severity == ERROR:
    return one
  return f"{one} and {times - 1} more" if one else f"{times} applications"


def applications(recs: list[Record]) -> list[list[Record]]:
  """Records grouped into one per rule application and kind, each group in leaf order.

  A rule that swaps two outputs fails at two leaves; that is one failure, and JAX
  names the first leaf it checked, so the group leads with it.
  """
  groups: dict = {}
  for r in recs:
    one = r.site is not None and r.flat_index is not None
    groups.setdefault((r.site, r.kind) if one else id(r), []).append(r)
  return [sorted(g, key=lambda r: -1 if r.flat_index is None else r.flat_index)
          for g in groups.values()]


def _leaves(rec: Record) -> list[MismatchedLeaf]:
  """The record's leaves for the diagnosis's table, each named as the user would type it."""
  site, i = rec.site, rec.flat_index
  if rec.leaves:
    one = len(rec.leaves) == 1 and rec.path
    inputs = site if kinds.of(rec.kind).role == "bwd" else None   # a fwd's are its outputs
    return [MismatchedLeaf(l.path, *_input(inputs, l.path, rec.path if one else None),
                           l.expected, l.got) for l in rec.leaves]
  if site is not None and i is not None and i < len(site.in_keys):
    return [MismatchedLeaf(site.in_keys[i], site.in_names[i], site.in_avals[i].str_short(),
                           rec.expected, rec.got)]
  return []


def _input(site, path: Path, spelled: str | None) -> tuple[str | None, str | None]:
  """(the user's name, primal aval) of the rule input at ``path``; else the site's own
  spelling of the leaf (``out[0]``), without a primal."""
  if site is not None and path in site.in_keys:
    j = site.in_keys.index(path)
    return site.in_names[j], site.in_avals[j].str_short()
  return spelled, None


def _swapped(leaves: tuple[MismatchedLeaf, ...]) -> str | None:
  for a, b in itertools.combinations(leaves, 2):
    if a.expected == b.got and b.expected == a.got and MISSING not in (a.expected, b.expected):
      return (f"{a.name} and {b.name} look swapped: each got "
              "the other's cotangent type")
  return None


_FAILED_LATER = "JAX accepted this where the rule returned it; the error above is where it failed"


def _severity(rec: Record, exc: BaseException | None, failed_later: bool) -> str:
  if exc is None:
    return WARNING
  return ERROR if failed_later else rec.severity


def _argument(rec: Record, node) -> tuple[str | None, str | None]:
  """The input the record is about, by the user's name, and its primal aval."""
  site, i = rec.site, rec.flat_index
  if site is not None and i is not None and i < len(site.in_names):
    return site.in_names[i], site.in_avals[i].str_short()
  if site is not None and rec.path in site.in_paths:   # a structure's first difference
    j = site.in_paths.index(rec.path)
    return site.in_names[j], site.in_avals[j].str_short()
  if node is not None and node.kind == "input":
    return node.label, node.out_avals[0]
  return None, None


def key(found) -> tuple:
  """What makes two records, or the diagnoses made of them, the same finding (a warning
  shows once per key)."""
  return (found.kind, found.function, found.rule, found.path, found.expected, found.got)


def merge(recs: list[Record]) -> list[Record]:
  """Drop repeats, and accumulator echoes of a dtype a custom rule already explains."""
  seen, out = set(), []
  explained = {(r.expected, r.got) for r in recs if r.site is not None}
  for r in recs:
    if r.site is None and kinds.of(r.kind).silent and (r.expected, r.got) in explained:
      continue
    if key(r) in seen:
      continue
    seen.add(key(r))
    out.append(r)
  return out
