"""The failing rule's definition as its file has it (``Diagnosis.rule_text``), found once
per diagnosis with its fixes (``suggest.attach``): finding the return that produced the
failing cotangent may run the rule abstractly, so it is not done again each time the
diagnosis is sent."""
from __future__ import annotations

import ast
import inspect
import linecache

from ..analysis.diagnosis import Diagnosis, RuleText
from ..base import kinds
from ..base.safety import safely
from . import returns, verify

MAX_LINES = 400
"""A longer definition is cut here (the panel's editor shows its first lines)."""


def of(d: Diagnosis, rule) -> RuleText | None:
  """The live rule's definition (``rule``: the fixes' ``suggest.Rule``, None without one)
  with its bad line, else the block at ``d.rule_source`` (a rule no longer live, or a
  lambda's statement)."""
  return (safely(_live, d, rule) if rule is not None else None) or located(d.rule_source)


def _live(d: Diagnosis, rule) -> RuleText | None:
  kind = kinds.of(d.kind)
  # a closure the user's function returned (jax.custom_gradient): that function's text
  fn = verify.home(rule.user_rules) if rule.closure else inspect.unwrap(getattr(rule.user_rules, kind.role))
  if fn.__name__ == "<lambda>":   # a lambda's def is made up: no lines of its own
    return None
  lines, start = inspect.getsourcelines(fn)
  if d.raised_at:   # the rule raised on its own line: no return ran
    return _text(lines, start, int(d.raised_at.rpartition(":")[2]))
  rets = rule.src.returns()
  hits = None
  if kind.channel == kinds.RETURNED and rets:
    hits = [0] if len(rets) == 1 else returns.failing_returns(rule) if kind.role == "bwd" else None
  if not hits:
    return _text(lines, start, None)
  made = made_at(rule, rets[hits[0]]) if kind.wrong == kinds.TYPE else None
  return _text(lines, start, start + (made or rets[hits[0]].lineno) - 1)


def made_at(rule, ret: ast.Return) -> int | None:
  """The line (of the rule's text) where the failing value ``ret`` returns was made: the
  expression JAX's failing leaf came from, followed back through the locals that hold it
  (``d_scale = g.sum(0)``, not ``return d_scale``); None where it is not known."""
  elements = returns.failing_elements(rule) if rule.src.only_return() is ret else None
  if not elements or len(elements) != 1 or not hasattr(elements[0], "lineno"):
    return None
  return elements[0].lineno


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
