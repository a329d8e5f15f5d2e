"""Fixes for a gradient that goes NaN or Inf: a catalogue of stable rewrites, keyed by
what went non-finite and why, each family one module appended to ``REGISTRY``.

Overflow (``overflow``: the loss scaled by a power of two where finite cotangents
overflowed; ``logspace``: a hand-written softplus, logsumexp, logaddexp, log-sigmoid or
log1mexp computed by JAX's stable function), domain edges (``roots``: sqrt and rsqrt at 0,
a safe norm, ``|x|`` for ``sqrt(x**2)``; ``domains``: the double ``where`` for arccos,
arcsin, atanh at ±1, log at 0, atan2 at the origin, a power at 0; ``logs``: log_softmax,
a clamp before log), division (``division``: 0/0, x/0, a normalisation by a norm or a
sum), clamps and masks that hide a non-finite branch (``clamps``: ``maximum(log(p), c)``;
the masks after the fact are the ``where`` the guards leave to the user), and custom rules
(``rules``: JAX's derivative of the primal). ``checklist`` says, for each primitive JAX
lists as NaN-producing, which family answers for it or why none can.

A candidate rewrites the user's line, found from the culprit (the equation that made the
non-finite value, or whose derivative is infinite), following the user's variables back
to the expression to rewrite, possibly at a line downstream (the ``log`` around an ``exp``
that overflowed). Each is judged in turn until one is verified: a rewrite of the program's
equation first where the family gives one (re-running the gradient from where the search
stopped: finite, and equal to the original where that was finite), then always as written
(``fixes.pasted``): the function with the line replaced keeps the forward values (where
finite, or the original's own in float64), its gradient is finite and equals float64
central differences of the original. One that changes the model is offered as type-only,
saying what it breaks; one that cannot be pasted or judged, as unverifiable.
"""
from __future__ import annotations

from typing import NamedTuple

from ...analysis.diagnosis import TYPE_ONLY, UNVERIFIABLE, VERIFIED, Fix
from ...analysis.values import nonfinite, oracle, replay
from ...analysis.values.nonfinite import Culprit, Localisation
from ...analysis.values.nonfinite_eval import Patch
from ...analysis.values.nonfinite_explain import overflowed
from ...capture.compat.private import core
from .. import pasted
from ..pasted import STILL_NONFINITE
from . import clamps, division, domains, logs, logspace, overflow, roots, rules
from .candidate import Candidate, Family

REGISTRY: list[Family] = [
    Family("overflow", overflow.PRIMITIVES, overflow.propose),
    Family("custom rule", rules.PRIMITIVES, rules.propose),
    Family("log space", logspace.PRIMITIVES, logspace.propose),
    Family("log of a softmax", logs.PRIMITIVES, logs.propose_softmax),
    Family("roots", roots.PRIMITIVES, roots.propose),
    Family("clamps", clamps.PRIMITIVES, clamps.propose),
    Family("domain edges", domains.PRIMITIVES, domains.propose),
    Family("division", division.PRIMITIVES, division.propose),
    Family("clamp before log", logs.PRIMITIVES, logs.propose_clamp),
]
"""Tried in this order; a family proposes nothing for a culprit it does not fit."""


class Program(NamedTuple):
  """The differentiated call, as the localiser ran it (arrays: for this call only)."""
  jaxpr: core.Jaxpr
  args: list
  active: list
  out_cts: list
  names: list       # the differentiated inputs as the user names them
  function: str = "loss"
  argnums: tuple = (0,)
  found: Localisation | None = None   # the search's state, for a fix's gradient to resume
  call: tuple | None = None           # (fun, args, kwargs, where the gradient was finite)


class Suggested(NamedTuple):
  fixes: list
  at: str | None = None     # "file:line" the leading fix rewrites, where not the culprit's
  none: str = ""            # why no rewrite of the line alone can work, where established


def gradient(p: Program, patch: Patch | None = None) -> list:
  """The gradient of ``p`` w.r.t. its active inputs, with ``patch`` applied, by the search's
  own backward pass (eager: the pullbacks it traced are reused, and a patched program is
  not compiled whole for one use)."""
  return nonfinite.gradient(p.jaxpr, p.args, p.active, p.out_cts, patch)


def candidates(c: Culprit, p: Program) -> list[Candidate]:
  """The registry's candidates for ``c``, best first; an overflow gets only the rescale."""
  if overflowed(c):
    return overflow.propose(c, p)
  found, codes = [], set()
  for family in REGISTRY:
    for cand in family.propose(c, p):
      if (cand.at, cand.code) not in codes:
        codes.add((cand.at, cand.code))
        found.append(cand)
  return found


def suggest(c: Culprit, p: Program, original: list) -> Suggested:
  """The first candidate for ``c`` (or for the equation that made its non-finite
  operand) that is verified, else the ones judged, each saying why not: each one judged
  costs a whole backward pass, so the rest are not tried. Judging is
  vjpviz's own run of the rewritten program (``analysis.values.replay``: within the call's
  account, loops capped, no effect repeated); a candidate it could not judge is offered
  unverifiable, its note saying why."""
  c = c.origin or c
  unjudged, still = [], 0
  with replay.account():
    for cand in candidates(c, p):
      try:
        verdict = _judge(cand, c, p, original) if cand.fn or not cand.in_place else "as written"
        broken = verdict and cand.in_place and _as_written(cand, c, p)
      except (replay.NotJudged, pasted.Unpastable) as e:
        unjudged.append(Fix(cand.title, cand.code, cand.reason, exact=False,
                            verdict=UNVERIFIABLE, note=str(e)))
        if str(e) == replay.TIME_BUDGET:
          break
        continue
      still += verdict == ""
      if broken:
        unjudged.append(Fix(cand.title, cand.code, cand.reason, exact=False,
                            verdict=TYPE_ONLY, note=f"the gradient is finite, but {broken}"
                            if broken != STILL_NONFINITE else broken))
      elif verdict:
        note = (AS_WRITTEN if cand.in_place else verdict)
        fix = Fix(cand.title, cand.code, cand.reason, exact=True, verdict=VERIFIED, note=note)
        return Suggested([fix], cand.at if cand.at != c.source else None)
  return Suggested(unjudged, none=_no_single_line(unjudged, still))


def _no_single_line(judged: list, still: int) -> str:
  """Why no rewrite of the line alone can work, where every one tried left the gradient
  non-finite (``still``: those the program's rewrite did): another line is a trap too."""
  if not (judged or still) or any(f.note != STILL_NONFINITE for f in judged):
    return ""
  return ("no rewrite of this line alone makes the gradient finite (each one tried leaves it "
          "non-finite): another line (a norm, a division, a where-guarded branch) goes "
          "non-finite too: rewrite them "
          "together, or the whole expression (a Taylor expansion near the singular point)")


AS_WRITTEN = ("pasted at the line: the forward values are kept, the gradient is finite and "
              "equals central differences of the original (float64 where it runs so)")


def _as_written(cand: Candidate, c: Culprit, p: Program) -> str | None:
  """What the fix's code, pasted at its line, breaks (None: nothing)."""
  if cand.template:
    raise pasted.Unpastable("the line could not be read and rewritten: the code is a pattern "
                            "to adapt, not a line to paste")
  if p.call is None:
    raise pasted.Unpastable("the differentiated call is not known")
  fun, args, kwargs, finite = p.call
  try:
    fixed = pasted.pasted(fun, cand.at or c.source, cand.code, args)
    return pasted.judge(fun, fixed, args, kwargs, p.argnums, finite)
  except (replay.NotJudged, pasted.Unpastable):
    raise
  except Exception as e:  # noqa: BLE001 - the program with the line replaced does not run
    raise pasted.Unpastable(f"with its code in place of the line, the program raised "
                            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e


def _judge(cand: Candidate, c: Culprit, p: Program, original: list) -> str | None:
  """Why the rewritten program's gradient is right (None: it is not; "": it is still not
  finite)."""
  try:
    with replay.replaying():
      patch = cand.fn and Patch(c.path, cand.fn)
      got = patch and p.found and nonfinite.resumed(p.found, patch)
      if not got:
        scaled = p._replace(out_cts=[None if o is None else o * cand.scale for o in p.out_cts])
        got = [g / cand.scale for g in gradient(scaled, patch)]
  except replay.NotJudged:
    raise
  except Exception:  # noqa: BLE001 - a rewrite that does not apply here is no fix
    return None
  if not nonfinite.all_finite(got):
    return ""
  kept = [oracle.compare(i, n, o, g, core.typeof(o))
          for i, (n, o, g) in enumerate(zip(p.names, original, got))]
  if not all(k.ok for k in kept):
    return None
  return "the gradient is finite, and equal to the original wherever that was finite"
