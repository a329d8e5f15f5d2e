"""One candidate NaN fix, and the family record the registry holds."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class Candidate:
  title: str
  code: str
  reason: str
  fn: Callable | None = None   # (eqn, operands, producer) -> outputs, at the culprit: the
                               # rewrite applied to the program (None: judged as written only)
  scale: float = 1.0           # of the output cotangent; the gradient divided by it
  in_place: bool = False       # a rewrite of the user's line: judged as written there
  template: bool = False       # the line could not be rewritten: the code is a pattern
  at: str | None = None        # "file:line" it rewrites, where not the culprit's own


@dataclasses.dataclass(frozen=True)
class Family:
  """A kind of stable rewrite, keyed by what went non-finite: ``primitives`` it answers
  for (the checklist), ``propose(culprit, program)`` its candidates, best first."""
  name: str
  primitives: frozenset
  propose: Callable


def in_place(title: str, rewritten: str | None, template: str, reason: str, fn=None,
             helper: str = "", at: str | None = None) -> Candidate:
  """A rewrite of the user's line (``rewritten``: None where the line could not be read
  and rewritten, and ``template`` is shown, unverifiable: it cannot be pasted as it is)."""
  if rewritten is None:
    return Candidate(title, template, reason, fn, in_place=True, template=True, at=at)
  return Candidate(title, helper + rewritten, reason, fn, in_place=True, at=at)
