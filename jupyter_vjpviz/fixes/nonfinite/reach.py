"""Where a culprit's values go and come from in its level: the equations downstream of it
(the ``log`` a hand-written softplus wraps around the ``exp`` that overflowed) and the
user's lines they were written at, each a place a rewrite may go."""
from __future__ import annotations

from ...analysis.values.nonfinite import Culprit, eqn_source
from ...capture.compat.private import core

DOWNSTREAM = 12     # equations followed from the culprit's outputs


def lines(c: Culprit) -> list[str]:
  """The culprit's own line, then the lines of the equations its outputs reach (through
  at most ``DOWNSTREAM`` of them), each once, in program order."""
  found = [c.source] if c.source else []
  frontier, seen = set(c.eqn.outvars), 0
  after = False
  for eqn in c.level.eqns:
    if eqn is c.eqn:
      after = True
      continue
    if not after or not any(isinstance(v, core.Var) and v in frontier for v in eqn.invars):
      continue
    frontier.update(eqn.outvars)
    source = eqn_source(eqn)
    if source and source not in found:
      found.append(source)
    seen += 1
    if seen >= DOWNSTREAM:
      break
  return found


def made_by(c: Culprit, primitive: str) -> bool:
  """Whether the culprit's operand is made by ``primitive`` (through reshapes)."""
  made = {v: e for e in c.level.eqns for v in e.outvars}
  eqn = made.get(c.eqn.invars[0])
  while eqn is not None and eqn.primitive.name in SHAPE:
    eqn = made.get(eqn.invars[0])
  return eqn is not None and eqn.primitive.name == primitive


SHAPE = frozenset({"broadcast_in_dim", "reshape", "squeeze", "expand_dims",
                   "convert_element_type", "real"})
