"""The failing rule's definition as its file has it (``Diagnosis.rule_text``), found once
per diagnosis with its fixes (``suggest.attach``): finding the return that produced the
failing cotangent may run the rule abstractly, so it is not done again each time the
diagnosis is sent."""
from __future__ import annotations

import inspect
import linecache

from ..analysis.diagnosis import Diagnosis, RuleText
from ..base import kinds
from ..base.safety import safely
from . import returns

MAX_LINES = 400
"""A longer definition is cut here (the panel's editor shows its first lines)."""


def of(d: Diagnosis, rule) -> RuleText | None:
  """The live rule's definition (``rule``: the fixes' ``suggest.Rule``, None without one)
  with its bad line, else the block at ``d.rule_source`` (a rule no longer live, or a
  lambda's statement)."""
  return (safely(_live, d, rule) if rule is not None else None) or located(d.rule_source)


def _live(d: Diagnosis, rule) -> RuleText | None:
  kind = kinds.of(d.kind)
  fn = inspect.unwrap(getattr(rule.user_rules, kind.role))
  if fn.__name__ == "<lambda>":   # a lambda's def is made up: no lines of its own
    return None
  lines, start = inspect.getsourcelines(fn)
  if d.raised_at:   # the rule raised on its own line: no return ran
    return _text(lines, start, int(d.raised_at.rpartition(":")[2]))
  rets = rule.src.returns()
  hits = None
  if kind.channel == kinds.RETURNED and rets:
    hits = [0] if len(rets) == 1 else returns.failing_returns(rule) if kind.role == "bwd" else None
  return _text(lines, start, start + rets[hits[0]].lineno - 1 if hits else None)


def located(location: str | None) -> RuleText | None:
  """The block at ``file:line``, with no bad line known."""
  filename, _, line = (location or "").rpartition(":")
  lines = linecache.getlines(filename) if line.isdigit() else []
  start = int(line) if lines else 0
  if not 1 <= start <= len(lines):
    return None
  try:   # decorators sit above the def; the location may point at either
    block = inspect.getblock(lines[start - 1:])
  except Exception:  # noqa: BLE001 - text that does not tokenize: its one line
    block = lines[start - 1:start]
  return _text(block, start, None)


def _text(lines: list[str], start: int, bad: int | None) -> RuleText | None:
  lines = lines[:MAX_LINES]
  if not lines:
    return None
  end = start + len(lines) - 1
  return RuleText("".join(lines), start, end, bad if bad is not None and bad <= end else None)
