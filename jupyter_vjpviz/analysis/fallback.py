"""Records read from JAX's message text: only when no check site reported.

The hook captures structured data wherever JAX checks types; this is the
safety net for a check site it does not wrap (another JAX version, a new code
path). A record made here says so in its ``detail``. Each pattern reads every tested
JAX's wording (0.6 says "shape/dtype" and "vjp function"; before 0.12 JAX names no rule).

A type is matched whole, however ``str_short`` writes it (``float32[2,3]``,
``float32<pinned_host>[8,4]{V:dp, U:x}``, ``Ref{float32[3]}``, a hijax type's
``QArray(int8[3,3])``): commas and spaces inside brackets belong to it, so a
type is never cut in half.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from ..capture.records import ERROR, Record

_TYPE = r"(?:[^\s,()\[\]{}<>]|<\w+>|\([^()]*\)|\[[^\[\]]*\]|\{[^{}]*\})+?"
"""A type token: bracketed groups are taken whole; it ends where the message goes on."""
_END = r"(?=[,.;:]?(?:\s|$))"


def _type(name: str) -> str:
  return f"(?P<{name}>{_TYPE})"


class _Pattern(NamedTuple):
  kind: str
  regex: re.Pattern


_PATTERNS = (
    _Pattern(kind="bwd_type", regex=re.compile(
        r"(?:attached to (?P<function>\S+) at (?P<source>\S+) )?must produce an output with the "
        rf"same (?:type|shape/dtypes).*?at output(?P<path>\S*) the bwd rule produced an output of "
        rf"(?:type|shape/dtype) {_type('got')} corresponding to an input of (?:type|shape/dtype) "
        rf"{_type('expected')}{_END}", re.S)),
    _Pattern(kind="bwd_type", regex=re.compile(
        r"(?:at output(?P<path>\S*) )?the bwd rule (?:attached to (?P<function>\S+) at "
        rf"(?P<source>\S+) )?produced an output of type {_type('got')} which doesn't match "
        rf"expected type {_type('expected')}{_END}")),
    _Pattern(kind="accumulator_type", regex=re.compile(
        rf"Accumulator aval mismatch: expected {_type('expected')}, got {_type('got')}{_END}")),
    _Pattern(kind="accumulator_type", regex=re.compile(
        rf"Expected cotangent type {_type('expected')} but got {_type('got')}{_END}")),
    _Pattern(kind="grad_ref_type", regex=re.compile(
        r"for the argument at position (?P<path>\S+) of the differentiated function "
        rf"(?P<function>\S+) at (?P<source>\S+?): the given ref has type {_type('got')}, but "
        rf"accumulating this argument's gradient requires a ref of type {_type('expected')}"
        rf"{_END}")),
    _Pattern(kind="vjp_cotangent_type", regex=re.compile(
        rf"for argument to (?:VJP|vjp) function: got {_type('got')}, but expected {_type('expected')}"
        rf"{_END}")),
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
