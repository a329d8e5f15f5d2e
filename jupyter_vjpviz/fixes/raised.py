"""Fixes for a rule's statement that raised for the types it was given (``bwd_raised``).

The capture stage found the operation that raised and what it was given
(``Diagnosis.operation``). An indexed update ``x.at[i].set(v)`` whose ``v`` does not fit
``x[i]`` has two readings, both read off the two types: the index selects the wrong
region (each slice widened or narrowed to ``v``'s extent, from its start or to its end),
or ``v`` is the wrong value for it (rewritten to ``x[i]``'s type as a returned cotangent
is: transposed, summed, reshaped). Each is only a candidate: the oracle judges it against
the primal's own derivative like any fix.
"""
from __future__ import annotations

import ast
import math

from ..analysis.diagnosis import Fix
from . import exprs


def fixes(rule) -> list[Fix]:
  failed = rule.d.operation
  if failed is None or failed.update is None:
    return []
  call = _node(rule, failed)
  if call is None:
    return []
  _, slot, value = failed.update
  return _fitted_index(rule, call, slot, value) + _fitted_value(rule, call, slot, value)


def _node(rule, failed) -> ast.Call | None:
  """The failing call in the rule's source, where it is the text that raised."""
  found = [n for n in ast.walk(rule.src.node) if isinstance(n, ast.Call)
           and (n.lineno, n.col_offset) == (failed.lineno, failed.col_offset)
           and rule.src.segment(n) == failed.text]
  return found[0] if len(found) == 1 else None


def _fitted_index(rule, call: ast.Call, slot, value) -> list[Fix]:
  """Every slice of ``x.at[i]`` whose extent differs from the update's, made to fit it:
  kept from its start, then kept to its end."""
  ref = call.func.value
  parts = ref.slice.elts if isinstance(ref.slice, ast.Tuple) else [ref.slice]
  if len(value.shape) != len(slot.shape) or len(parts) > len(slot.shape) \
      or not all(isinstance(p, ast.Slice) and p.step is None for p in parts):
    return []
  wrong = [(p, value.shape[d]) for d, p in enumerate(parts) if slot.shape[d] != value.shape[d]]
  if not wrong or len(wrong) != sum(a != b for a, b in zip(slot.shape, value.shape)):
    return []   # an extent outside the slices written: no slice to change
  found = []
  for keep in ("start", "end"):
    edits = [_fitted(rule, p, n, keep) for p, n in wrong]
    if None in edits:
      continue
    index = rule.src.replace(edits, within=ref.slice)
    found.append(rule.fix(f"Fit the slice to the update: .at[{index}]", edits,
                          f"the update is {value.str_short()}; .at[{rule.src.segment(ref.slice)}] "
                          f"selects {slot.str_short()}", exact=False))
  return found


def _fitted(rule, part: ast.Slice, n: int, keep: str):
  """(the slice, its text with ``n`` elements kept from its start or to its end)."""
  lower, upper = part.lower, part.upper
  if keep == "start":
    start = rule.src.segment(lower) if lower is not None else "0"
    return part, f"{start}:{_plus(start, n)}"
  if upper is None:
    return None
  stop = rule.src.segment(upper)
  return part, f"{_plus(stop, -n)}:{stop}"


def _plus(text: str, n: int) -> str:
  try:
    return str(int(text) + n)
  except ValueError:
    return f"{text} {'+' if n >= 0 else '-'} {abs(n)}"


def _fitted_value(rule, call: ast.Call, slot, value) -> list[Fix]:
  """The update rewritten to the type of what it goes into."""
  arg = call.args[0]
  found = []
  for title, text, reason in exprs.reshapes(rule.src, arg, tuple(value.shape), tuple(slot.shape)):
    found.append(rule.fix(f"Fit the update to {slot.str_short()}: {title}", [(arg, text)],
                          reason, exact=False))
  if not found and math.prod(value.shape) == math.prod(slot.shape):
    text = f"{rule.jnp}.reshape({rule.src.segment(arg)}, {tuple(slot.shape)})"
    found.append(rule.fix(f"Reshape the update to {slot.str_short()}", [(arg, text)],
                          "same number of elements; check that the order is the gradient's",
                          exact=False))
  return found
