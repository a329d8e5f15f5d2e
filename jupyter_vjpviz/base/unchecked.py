"""``Unchecked``: the answer of a check that could not establish one, and why.

Every check has three outcomes (docs/design.md, "Three answers, never two"): found (a
diagnosis), clear (None, "healthy", an empty list: established), and unchecked. A script
that tests ``vv.nans(loss, w, x) is None`` or ``not vv.check(f, x)`` must never be told
all is well when the check failed inside vjpviz, ran out of time, or met an input it
cannot read: it gets an ``Unchecked`` instead, which is not None, is truthy (it is
something to look at, as a diagnosis is), and prints the one line a person reads.

Where an answer is a list (``vv.check``, ``vv.diagnoses()``) the ``Unchecked`` is an
entry of it; where it is a report (``vv.grads``'s ``GradReport``, ``vv.gradcheck``'s
``GradCheck``) the report carries it (``.unchecked``) and is not healthy.

``attempt`` is how an entry point learns that its answer was not established: every
internal error ``base.safety.safely`` absorbs meanwhile in this thread (a stage that
failed and returned its default, which would otherwise read as "nothing found").
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools

from . import safety

_ids = itertools.count(1)


@dataclasses.dataclass(frozen=True)
class Unchecked:
  """What vjpviz could not check (``check``: ``vv.nans of loss``), and why (``reason``).

  Truthy and never None, so a script's all-clear test fails on it; ``vv.unchecked(answer)``
  finds it in any entry point's answer."""
  check: str
  reason: str
  id: str = dataclasses.field(default_factory=lambda: f"u{next(_ids)}", compare=False)

  kind = "unchecked"          # where it sits among diagnoses (``vv.diagnoses()``)
  severity = "unchecked"
  fixes = ()

  def __bool__(self) -> bool:
    return True

  @property
  def headline(self) -> str:
    return f"could not check {self.check}: {self.reason}"

  def __str__(self) -> str:
    return f"vjpviz {self.headline}"

  def to_text(self) -> str:
    return str(self)

  def to_dict(self) -> dict:
    return {"id": self.id, "kind": self.kind, "check": self.check, "reason": self.reason,
            "headline": self.headline}


class Attempt:
  """The internal errors absorbed while one check ran (``attempt``): its answer is clear
  only if there were none."""

  def __init__(self, check: str):
    self.check = check
    self.reasons: list[str] = []

  def heard(self, doing: str, where: str, error: BaseException) -> None:
    why = " ".join(f"{type(error).__name__}: {error or repr(error)}".split())[:300]
    self.reasons.append(f"{doing} failed (internal error in {where}: {why})"
                        if not isinstance(error, safety.Unavailable) else
                        f"{doing} needs what this JAX lacks ({why})")

  @property
  def failed(self) -> bool:
    return bool(self.reasons)

  def unchecked(self, reason: str | None = None) -> Unchecked | None:
    """The ``Unchecked`` this attempt comes to (``reason``, else its first internal
    error), or None where it ran clean."""
    why = reason or (self.reasons[0] if self.reasons else None)
    return Unchecked(self.check, why) if why else None

  def clear_or(self, clear):
    """``clear`` (the all-clear answer: None, []) where established, else the ``Unchecked``."""
    return self.unchecked() or clear


@contextlib.contextmanager
def attempt(check: str):
  """An ``Attempt`` hearing every internal error ``safely`` absorbs meanwhile (this thread)."""
  trial = Attempt(check)
  with safety.absorbed.listening(trial.heard):
    yield trial


def raised(check: str, error: BaseException) -> Unchecked:
  """A check that raised inside vjpviz's own run (not the user's call): why, in one line."""
  why = " ".join(f"{type(error).__name__}: {error or repr(error)}".split())[:300]
  return Unchecked(check, f"vjpviz's own run failed ({why})")


def unchecked(answer) -> Unchecked | None:
  """The ``Unchecked`` in an entry point's ``answer``: itself, the first in a list, or a
  report's ``.unchecked``; None where the answer was established."""
  if isinstance(answer, Unchecked):
    return answer
  if isinstance(answer, (list, tuple)):
    return next((a for a in answer if isinstance(a, Unchecked)), None)
  return getattr(answer, "unchecked", None)
