"""From a captured session to Diagnoses: merge records, build the graph once, locate."""
from __future__ import annotations

from ..base import kinds
from ..capture.records import ERROR, WARNING, Record, Session
from . import fallback, program
from .diagnosis import Diagnosis
from .locate import instance, locate, mark_got


def diagnose(session: Session, exc: BaseException | None,
             skip: set | None = None) -> list[Diagnosis]:
  """Diagnoses for a session, errors first; records whose key is in ``skip`` are dropped."""
  recs = session.records
  if not recs and exc is not None:
    recs = fallback.records_from_text(str(exc))
  recs = [r for r in merge(recs) if skip is None or key(r) not in skip]
  if not recs:
    return []
  recs.sort(key=lambda r: r.severity != ERROR)
  graph, nodes = program.build(session.origin, lambda g: [locate(g, r) for r in recs])
  message = str(exc) if exc is not None else None
  # JAX raised, yet every check site accepted what it saw: what they let through
  # failed further on (a dtype meeting a scan carry or an add), so it is the error.
  failed_later = exc is not None and all(r.severity != ERROR for r in recs)
  out = []
  for rec, node in zip(recs, nodes):
    site = rec.site
    argument, primal = _argument(rec, graph.node(node) if node else None)
    out.append(Diagnosis(
        # Whatever the check site expected, if JAX raised nothing it let it through.
        kind=rec.kind, severity=_severity(rec, exc, failed_later),
        function=rec.function or (session.origin.name if session.origin else None),
        rule=rec.rule,
        source=rec.source or (session.origin.source if session.origin else None),
        path=rec.path, expected=rec.expected, got=rec.got, message=message, node=node,
        graph=mark_got(graph, node, rec),
        rule_source=site.rule_source if site else None,
        call_site=site.call_site if site else None, argument=argument, primal=primal,
        name_stack=site.name_stack if site else "", instance=instance(graph, node),
        detail=rec.detail or (_FAILED_LATER if failed_later else None),
        hijax=site.hijax if site else False,
        expected_aval=rec.expected_aval, got_aval=rec.got_aval, site=site))
  return out


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
  if node is not None and node.kind == "input":
    return node.label, node.out_avals[0]
  return None, None


def key(rec: Record) -> tuple:
  """What makes two records the same finding (warnings show once per key)."""
  return (rec.kind, rec.function, rec.rule, rec.path, rec.expected, rec.got)


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
