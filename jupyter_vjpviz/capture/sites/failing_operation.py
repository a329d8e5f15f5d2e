"""Which operation of a statement raised, and the types it was given, found abstractly.

A bwd rule's statement that raises while computing a cotangent (``jnp.zeros(5).at[1:3]
.set(2.0 * g)`` with ``g: float32[3]``) raises from deep inside JAX; the user's line
holds several operations. Each sub-expression is evaluated on the statement's locals as
avals (``jax.eval_shape``), innermost first: the first that raises while its operands
evaluate is the one that failed, and a failure the types alone reproduce is a type
error, not one of values. Its operands' types are what it was asked: for an indexed
update (``x.at[i].set(v)``) the update's type and the type of ``x[i]`` it goes into.
"""
from __future__ import annotations

import ast
import dataclasses

from typing import Any

import jax

from ...base import syntax
from ..compat.private import core

MAX_NODES = 48     # sub-expressions evaluated per statement at most
_UPDATES = ("set", "add", "subtract", "multiply", "divide", "power", "min", "max", "apply")
_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.MatMult: "@",
            ast.Pow: "**", ast.FloorDiv: "//", ast.Mod: "%"}


@dataclasses.dataclass(frozen=True)
class Failed:
  """The operation that raised: its text and place in the rule's dedented source (the
  line counted from the source's first line), and the types it was given."""
  text: str
  lineno: int
  col_offset: int
  operands: tuple          # (source text, aval) of each array operand it was given
  asked: str               # ".at[1:3].set of float32[3] into float32[2]", "float32[3] @ float32[4,2]"
  update: Any = None       # an indexed update: (index text, aval of x[i], aval of the update)


def locate(expr: ast.expr, text: str, filename: str, glb: dict, env: dict,
           raised: type) -> Failed | None:
  """The innermost sub-expression of ``expr`` (a statement's, in rule source ``text``)
  that raises ``raised`` on ``env`` (locals as ShapeDtypeStructs) while its operands do
  not; None when the types alone do not make it raise (a failure of values)."""
  nodes = [n for n in _post_order(expr) if _operation(n)][:MAX_NODES]
  for node in nodes:
    error = _error(node, filename, glb, env)
    if error is None:
      continue
    if not isinstance(error, raised):
      return None
    operands = [(o, _type_of(o, filename, glb, env)) for o in _operands(node)]
    if any(aval is _RAISES for _, aval in operands):
      continue   # an operand raises itself: it is the operation that failed
    return _failed(node, text, filename, glb, env, operands)
  return None


def _post_order(node: ast.AST):
  for child in ast.iter_child_nodes(node):
    if not isinstance(child, (ast.Lambda, ast.comprehension)):
      yield from _post_order(child)
  yield node


def _operation(node: ast.AST) -> bool:
  return isinstance(node, (ast.Call, ast.BinOp, ast.Subscript)) and isinstance(
      getattr(node, "ctx", ast.Load()), ast.Load)


def _operands(node: ast.expr) -> list[ast.expr]:
  if isinstance(node, ast.BinOp):
    return [node.left, node.right]
  if isinstance(node, ast.Subscript):
    return [node.value]
  receiver = [node.func.value] if isinstance(node.func, ast.Attribute) else []
  return receiver + [a.value if isinstance(a, ast.Starred) else a for a in node.args] + \
      [k.value for k in node.keywords]


_RAISES = object()


def _evaluated(node: ast.expr, filename: str, glb: dict, env: dict):
  """The value of ``node`` on the abstract locals, its arrays as avals; an exception
  raised is returned, not raised."""
  code = compile(ast.fix_missing_locations(ast.Expression(node)), filename, "eval")
  seen = []

  def run(e):
    value = eval(code, glb, dict(e))  # noqa: S307 - the user's own expression, on avals
    seen.append(jax.tree_util.tree_map(lambda l: jax.typeof(l) if _array(l) else l, value))
  try:
    jax.eval_shape(run, env)
  except Exception as e:  # noqa: BLE001 - what the operation raises is the finding
    return e
  return seen[0] if seen else None


def _error(node, filename, glb, env) -> Exception | None:
  value = _evaluated(node, filename, glb, env)
  return value if isinstance(value, Exception) else None


def _type_of(node, filename, glb, env):
  value = _evaluated(node, filename, glb, env)
  return _RAISES if isinstance(value, Exception) else value


def _array(leaf) -> bool:
  return isinstance(leaf, jax.Array)   # a tracer is one too


def _failed(node, text, filename, glb, env, operands) -> Failed:
  segment = lambda n: ast.get_source_segment(text, n) or ast.unparse(n)
  # avals of values only: a ShapeDtypeStruct operand (a callback's result spec) is no value
  avals = [(segment(o), a) for o, a in operands if isinstance(a, core.AbstractValue)
           and hasattr(a, "shape")]
  update = _update(node, filename, glb, env, segment)
  if update is not None:
    index, slot, value = update
    asked = f".at[{index}].{node.func.attr} of {value.str_short()} into {slot.str_short()}"
  elif isinstance(node, ast.BinOp) and len(avals) == 2 and type(node.op) in _SYMBOLS:
    asked = f"{avals[0][1].str_short()} {_SYMBOLS[type(node.op)]} {avals[1][1].str_short()}"
  else:
    head = segment(node.func) if isinstance(node, ast.Call) else segment(node)
    asked = f"{head}({', '.join(a.str_short() for _, a in avals)})"
  return Failed(segment(node), node.lineno, node.col_offset, tuple(avals), asked, update)


def _update(node, filename, glb, env, segment):
  """(index text, aval of ``x[i]``, aval of the update) of ``x.at[i].method(v)``."""
  if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr in _UPDATES and isinstance(node.func.value, ast.Subscript)
          and isinstance(node.func.value.value, ast.Attribute)
          and node.func.value.value.attr == "at" and node.args):
    return None
  ref = node.func.value
  indexed = ast.Subscript(ref.value.value, ref.slice, ast.Load())
  ast.copy_location(indexed, ref)
  slot = _type_of(indexed, filename, glb, env)
  value = _type_of(node.args[0], filename, glb, env)
  if not all(hasattr(a, "shape") for a in (slot, value)):
    return None
  return segment(ref.slice), slot, value


def reaching(fn: ast.FunctionDef, stmt: ast.stmt) -> set[str]:
  """The locals that hold what ``stmt`` computes, directly or through later assignments."""
  tainted = syntax.names_stored(stmt)
  later = [s for s in syntax.own_nodes(fn) if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign))
           and s.lineno > stmt.lineno and s.value is not None]
  for _ in range(8):
    grown = tainted | {name for s in later if syntax.names_read(s.value) & tainted
                       for name in syntax.names_stored(s)}
    if grown == tainted:
      break
    tainted = grown
  return tainted
