"""Records read from JAX's message text: only when no check site reported.

The hook captures structured data wherever JAX checks types; this is the
safety net for a check site it does not wrap (another JAX version, a new code
path). A record made here says so in its ``detail``.
"""
from __future__ import annotations

import re

from ..capture.records import ERROR, Record

_PATTERNS = (
    ("bwd_type", re.compile(
        r"attached to (?P<function>\S+) at (?P<source>\S+) must produce an output with the same "
        r"type.*?at output(?P<path>\S*) the bwd rule produced an output of type "
        r"(?P<got>\S+) corresponding to an input of type (?P<expected>[^\s,]+)", re.S)),
    ("bwd_type", re.compile(
        r"(?:at output(?P<path>\S*) )?the bwd rule attached to (?P<function>\S+) at "
        r"(?P<source>\S+) produced an output of type (?P<got>\S+) which doesn't match "
        r"expected type (?P<expected>[^\s.]+)")),
    ("accumulator_type", re.compile(
        r"Accumulator aval mismatch: expected (?P<expected>.+?), got (?P<got>\S+)")),
    ("accumulator_type", re.compile(
        r"Expected cotangent type (?P<expected>\S+) but got (?P<got>\S+)")),
    ("grad_ref_type", re.compile(
        r"for the argument at position (?P<path>\S+) of the differentiated function "
        r"(?P<function>\S+) at (?P<source>\S+?): the given ref has type (?P<got>\S+), but "
        r"accumulating this argument's gradient requires a ref of type (?P<expected>\S+)")),
    ("vjp_cotangent_type", re.compile(
        r"for argument to VJP function: got (?P<got>\S+), but expected (?P<expected>\S+)")),
)


def records_from_text(message: str) -> list[Record]:
  for kind, pattern in _PATTERNS:
    m = pattern.search(message)
    if m:
      found = m.groupdict()
      return [Record(
          kind=kind, severity=ERROR, function=found.get("function"),
          source=found.get("source"), path=found.get("path") or None,
          expected=found["expected"], got=found["got"],
          detail="read from JAX's message: no check site reported structured data")]
  return []
