"""Fixes for a rule's statement that raised for the types it was given (``bwd_raised``).

The capture stage found the operation that raised and what it was given
(``Diagnosis.operation``). An indexed update ``x.at[i].set(v)`` whose ``v`` does not fit
``x[i]`` has two readings, both read off the two types: the index selects the wrong
region (each slice widened or narrowed to ``v``'s extent, from its start or to its end),
or ``v`` is the wrong value for it (rewritten to ``x[i]``'s type as a returned cotangent
is: transposed, summed, reshaped). A binary operation whose operands do not fit gets them
transposed, or a product's swapped, where their types then fit. Each is only a candidate: the oracle judges it against
the primal's own derivative like any fix.
"""
from __future__ import annotations

import ast
import inspect
import math
import operator

import jax
import numpy as np

from ..analysis.diagnosis import Fix
from ..base import kinds, syntax
from . import exprs


def fixes(rule) -> list[Fix]:
  failed = rule.d.operation
  node = _node(rule, failed) if failed is not None else None
  narrowed = _narrowed(rule, node) if node is not None else []
  if narrowed:
    return narrowed
  if isinstance(node, ast.BinOp) and len(failed.operands) == 2:
    return _fitted_operands(rule, node, failed)
  if node is None or failed.update is None:
    return []
  _, slot, value = failed.update
  return _fitted_index(rule, node, slot, value) + _fitted_value(rule, node, slot, value)


def _narrowed(rule, node: ast.expr) -> list[Fix]:
  """A 64-bit dtype the operation names while JAX runs without x64 (a host callback's result
  declared ``np.float64``, which JAX refuses): the dtype JAX computes in instead, to which
  it casts what the callback returns."""
  names = [n for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr in _WIDE]
  narrow = {w: jax.dtypes.canonicalize_dtype(np.dtype(w)).name for w in _WIDE}
  if not names or all(narrow[w] == w for w in _WIDE):
    return []
  edits = [(n, f"{rule.src.segment(n.value)}.{narrow[n.attr]}") for n in names]
  return [rule.fix(f"Declare {', '.join(sorted({narrow[n.attr] for n in names}))} where "
                   f"{', '.join(sorted({n.attr for n in names}))} is refused", edits,
                   "without jax_enable_x64 JAX computes in 32 bits and refuses 64-bit types; "
                   "a callback's result is cast to the type declared", exact=False)]


_WIDE = ("float64", "complex128")


def _node(rule, failed) -> ast.expr | None:
  """The failing operation in the rule's source: the text that raised, at its place, or
  the one node with that text (a lambda rule's source is the def it stands for)."""
  same = [n for n in ast.walk(rule.src.node) if isinstance(n, (ast.Call, ast.BinOp))
          and rule.src.segment(n) == failed.text]
  placed = [n for n in same if (n.lineno, n.col_offset) == (failed.lineno, failed.col_offset)]
  found = placed or same
  return found[0] if len(found) == 1 else None


def _fitted_operands(rule, node: ast.BinOp, failed) -> list[Fix]:
  """A binary operation whose operands do not fit: each matrix operand transposed, and a
  product's operands swapped, where that fits their types (evaluated on them); where the
  operation is the whole value of a cotangent whose type is known, only those giving it."""
  (_, a), (_, b) = failed.operands
  sides = [(node.left, a), (node.right, b)]
  orders = [sides, sides[::-1]] if isinstance(node.op, ast.MatMult) else [sides]
  symbol, apply = _OPS.get(type(node.op), (None, None))
  if symbol is None:
    return []
  whole = _whole_value(rule, node)
  found = []
  for (l, la), (r, ra) in orders:
    for tl, tr in ((False, False), (True, False), (False, True), (True, True)):
      if (l is node.left and not tl and not tr) or any(t and len(x.shape) != 2
                                                        for t, x in ((tl, la), (tr, ra))):
        continue
      out = _result(apply, la, ra, tl, tr)
      if out is None or (whole and rule.d.expected_aval is not None
                         and tuple(out.shape) != tuple(rule.d.expected_aval.shape)):
        continue
      text = f"{_side(rule, l, tl)} {symbol} {_side(rule, r, tr)}"
      found.append(rule.fix(f"Fit the operands: {text}", [(node, text)],
                            f"{failed.asked} does not fit; {text} is {out.str_short()}",
                            exact=False))
  return found + _summed_product(rule, node, a, b, whole)


def _summed_product(rule, node: ast.BinOp, a, b, whole: bool) -> list[Fix]:
  """A matrix product of two operands of one shape where the gradient of a broadcast
  parameter was meant: their elementwise product summed over the leading axes the
  parameter was broadcast along, to the cotangent's type (``(sin(x) * g).sum(0)``)."""
  want = rule.d.expected_aval
  if not (isinstance(node.op, ast.MatMult) and whole and want is not None
          and tuple(a.shape) == tuple(b.shape)):
    return []
  lead = len(a.shape) - len(want.shape)
  if lead <= 0 or tuple(a.shape[lead:]) != tuple(want.shape):
    return []
  axes = lead - 1 if lead == 1 else tuple(range(lead))
  text = f"({exprs.paren(rule.src, node.left)} * {exprs.paren(rule.src, node.right)}).sum({axes})"
  return [rule.fix(f"Multiply elementwise and sum: {text}", [(node, text)],
                   f"{want.str_short()} is the shape of the trailing axes: a parameter broadcast "
                   "along the leading ones, whose gradient sums the elementwise product", exact=False)]


_OPS = {ast.MatMult: ("@", operator.matmul), ast.Add: ("+", operator.add),
        ast.Sub: ("-", operator.sub), ast.Mult: ("*", operator.mul), ast.Div: ("/", operator.truediv)}


def _side(rule, node: ast.expr, transpose: bool) -> str:
  return exprs.transposed(rule.src, node, (1, 0)) if transpose else exprs.paren(rule.src, node)


def _result(apply, a, b, ta: bool, tb: bool):
  """The type of ``a op b`` with the operands transposed as asked; None where it raises."""
  seen = []

  def run(x, y):
    seen.append(jax.typeof(apply(x.T if ta else x, y.T if tb else y)))
  try:
    jax.eval_shape(run, jax.ShapeDtypeStruct(a.shape, a.dtype), jax.ShapeDtypeStruct(b.shape, b.dtype))
  except Exception:  # noqa: BLE001 - operands that do not fit this way either
    return None
  return seen[0]


def _whole_value(rule, node: ast.expr) -> bool:
  """``node`` is all a cotangent slot gets: the value of a write into one, or of a local
  returned as it is."""
  returned = {e.id for value in _cotangents_returned(rule) for e in value.elts
              if isinstance(e, ast.Name)}
  return any(isinstance(s, ast.Assign) and s.value is node and len(s.targets) == 1
             and (isinstance(s.targets[0], (ast.Subscript, ast.Attribute))
                  or isinstance(s.targets[0], ast.Name) and s.targets[0].id in returned)
             for s in ast.walk(rule.src.node))


def _cotangents_returned(rule) -> list[ast.Tuple | ast.List]:
  """The tuples of cotangents the rule's returns spell out (``Rule.cotangents``)."""
  values = [rule.cotangents(r.value) for r in rule.src.returns()]
  return [v for v in values if isinstance(v, (ast.Tuple, ast.List))]


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


def dropped(rule, replaced: list[ast.expr]) -> list | None:
  """For a fix that rewrites ``replaced`` (return elements) whole: the edit removing the
  statement that raised (its lines), where what it stores is read nowhere else; ``[]``
  where no statement of the rule raised, or it is a return (the rewrite is in it); None
  where it cannot go (its result is read elsewhere): the fix would still raise."""
  stmt = _raising_statement(rule)
  if stmt is None or isinstance(stmt, ast.Return):
    return [] if not rule.d.raised_at or stmt is not None else None
  stored = syntax.names_stored(stmt) if isinstance(stmt, ast.Assign) else set()
  inside = {id(n) for node in [*replaced, stmt] for n in ast.walk(node)}
  read = [n for n in syntax.own_nodes(rule.src.node) if isinstance(n, ast.Name)
          and isinstance(n.ctx, ast.Load) and n.id in stored and id(n) not in inside]
  if not stored or read or stmt.end_lineno >= len(rule.src.text.splitlines()):
    return None
  lines = ast.Pass(lineno=stmt.lineno, col_offset=0, end_lineno=stmt.end_lineno + 1, end_col_offset=0)
  return [(lines, "")]


def _raising_statement(rule) -> ast.stmt | None:
  """The rule's statement on the line that raised (``Diagnosis.raised_at``); a rule whose
  body is one return (a lambda's), that return."""
  body = rule.src.node.body
  if rule.d.raised_at and len(body) == 1 and isinstance(body[0], ast.Return):
    return body[0]
  line = (rule.d.raised_at or "").rpartition(":")[2]
  try:
    start = inspect.getsourcelines(inspect.unwrap(getattr(rule.user_rules, kinds.of(rule.d.kind).role)))[1]
  except (OSError, TypeError, AttributeError):
    return None
  if not line.isdigit():
    return None
  at = int(line) - start + 1
  hits = [n for n in syntax.own_nodes(rule.src.node) if isinstance(n, ast.stmt)
          and n.lineno <= at <= (n.end_lineno or n.lineno)]
  return min(hits, key=lambda n: (n.end_lineno or n.lineno) - n.lineno, default=None)
