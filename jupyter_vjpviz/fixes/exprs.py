"""Shape arithmetic and expression rewrites: from (got, expected) types to new text.

Pure functions: shapes are tuples, expressions are ``ast`` nodes of a
``RuleSource``. Each rewrite is one the types justify on their own.
"""
from __future__ import annotations

import ast
import itertools

import jax

from ..capture.compat import changed_signatures
from .source import RuleSource

_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)


def paren(src: RuleSource, node: ast.expr) -> str:
  return wrap(src.segment(node))


def permutation(got: tuple, want: tuple) -> tuple[int, ...] | None:
  """Axes ``p`` with ``got[p[i]] == want[i]``; the reversal first (a plain transpose)."""
  if got == want or sorted(got) != sorted(want):
    return None
  reverse = tuple(range(len(got)))[::-1]
  candidates = itertools.chain([reverse], itertools.permutations(range(len(got))))
  return next(p for p in candidates if tuple(got[i] for i in p) == want)


def transposed(src: RuleSource, node: ast.expr, perm: tuple[int, ...]) -> str:
  """``node`` transposed; ``A.T @ B`` becomes ``B.T @ A``, ``outer(a, b)`` ``outer(b, a)``,
  and ``E.T`` becomes ``E``."""
  if len(perm) != 2:
    return f"{paren(src, node)}.transpose({perm})"
  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
    return f"{_t(src, node.right)} @ {_t(src, node.left)}"
  if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)) \
      and getattr(node.func, "attr", getattr(node.func, "id", "")) == "outer" \
      and len(node.args) == 2 and not node.keywords:
    a, b = (src.segment(x) for x in node.args)
    return f"{src.segment(node.func)}({b}, {a})"
  return _t(src, node)


def _t(src: RuleSource, node: ast.expr) -> str:
  if isinstance(node, ast.Attribute) and node.attr == "T":
    return paren(src, node.value)
  return f"{paren(src, node)}.T"


def summed_axes(got: tuple, want: tuple) -> tuple[int, ...] | None:
  """Axes of ``got`` that broadcasting ``want`` created: leading ones, and 1 -> n ones."""
  extra = len(got) - len(want)
  if extra < 0 or got == want:
    return None
  axes = list(range(extra))
  for k, (g, w) in enumerate(zip(got[extra:], want)):
    if g != w and w != 1:
      return None
    if g != w:
      axes.append(extra + k)
  return tuple(axes)


def reduced_axis(got: tuple, want: tuple) -> int | None:
  """The one axis of ``got`` whose removal leaves ``want`` (a reduction left out: a
  tangent of ``logsumexp`` over the last axis that was never summed), where it is not
  what broadcasting made (``summed_axes``)."""
  if len(got) != len(want) + 1 or summed_axes(got, want) is not None:
    return None
  return next((k for k in range(len(got)) if got[:k] + got[k + 1:] == want), None)


def summed(src: RuleSource, node: ast.expr, axes: tuple[int, ...], want: tuple) -> str:
  """``node`` reduced over ``axes`` back to ``want`` (the un-broadcast gradient)."""
  text = f"{paren(src, node)}.sum(axis={axes[0] if len(axes) == 1 else axes})"
  leading = axes == tuple(range(len(axes)))
  return text if leading else f"{text}.reshape({want})"


def typed_rewrites(src: RuleSource, node: ast.expr, want, got, dtype: str | None, why: str):
  """(title, new text, reason) for ``node`` of aval ``got`` where ``want`` is due: each
  shape rewrite (or the node itself, without its cast, where the shapes agree), followed
  by a cast to ``dtype`` (its spelling) where the dtypes differ, ``why`` its reason."""
  rewrites = list(reshapes(src, node, tuple(got.shape), tuple(want.shape)))
  if got.shape == want.shape:
    rewrites.append(("", uncast(src, node), ""))
  if dtype is None:
    return rewrites
  return [((t + " and " if t else "") + f"cast to {want.dtype}", cast(text, dtype),
           (r + "; " if r else "") + why) for t, text, r in rewrites]


def common(per_node: list[list[tuple]]):
  """(Title, texts per node, reason) for each titled rewrite every node has: one fix
  edits every return that produced the failing leaf the same way."""
  options = [{t: (text, r) for t, text, r in rewrites if t} for rewrites in per_node]
  for title, (_, reason) in options[0].items():
    if all(title in o for o in options):
      yield title[0].upper() + title[1:], [o[title][0] for o in options], reason


def reshapes(src: RuleSource, node: ast.expr, got: tuple, want: tuple):
  """(title, new text, reason) for each shape rewrite the two shapes justify."""
  perm = permutation(got, want)
  if perm is not None:
    yield ("transpose", transposed(src, node, perm),
           f"{got} is {want} with its axes permuted: the gradient needs the transposed product")
  axes = summed_axes(got, want)
  if axes is not None:
    yield (f"sum over the broadcast axes {axes}", summed(src, node, axes, want),
           f"the primal {want} was broadcast to {got}: its gradient sums over the broadcast axes")
  axis = reduced_axis(got, want)
  if axis is not None:
    yield (f"sum over axis {axis}", f"{paren(src, node)}.sum(axis={axis})",
           f"{got} is {want} with axis {axis} kept: the output reduces over it, so must this")
  cut = slices(node)
  if cut and len(got) == len(want) and all(g <= w for g, w in zip(got, want)):
    yield ("remove the slice", unsliced(src, node),
           f"{src.segment(cut[0])} keeps only part of the gradient, which must be {want}")


def slices(node: ast.expr) -> list[ast.Subscript]:
  """The ``x[a:b]``-style subscripts inside ``node`` (not ``res[0]`` indexing)."""
  def sliced(s):
    parts = s.elts if isinstance(s, ast.Tuple) else [s]
    return any(isinstance(p, ast.Slice) for p in parts)
  return [n for n in ast.walk(node) if isinstance(n, ast.Subscript) and sliced(n.slice)]


def unsliced(src: RuleSource, node: ast.expr) -> str:
  return src.replace([(s, paren(src, s.value)) for s in _outermost(slices(node))], within=node)


def _outermost(subs: list[ast.Subscript]) -> list[ast.Subscript]:
  inner = {id(n) for s in subs for n in ast.walk(s.value)}
  return [s for s in subs if id(s) not in inner]


def wrap(text: str) -> str:
  """``text`` ready for a method call: parenthesised unless it is an atom."""
  return text if isinstance(ast.parse(text, mode="eval").body, _ATOMS) else f"({text})"


def cast(text: str, dtype_text: str) -> str:
  return f"{wrap(text)}.astype({dtype_text})"


def uncast(src: RuleSource, node: ast.expr) -> str:
  """``node`` without an outer ``.astype(...)``, which a cast fix replaces."""
  if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
      and node.func.attr == "astype"):
    return src.segment(node.func.value)
  return src.segment(node)


_COLLECTIVES = ("psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter")


def varying(aval) -> frozenset:
  """The manual mesh axes an aval varies over (``{V:dp}``); empty outside shard_map."""
  return changed_signatures.varying_axes(aval)


def revaried(text: str, axes: tuple) -> str:
  """``text`` marked varying over ``axes`` again, as this JAX spells it."""
  if hasattr(jax.lax, "pvary"):
    return f"jax.lax.pvary({text}, {axes})"
  return f"jax.lax.pcast({text}, {axes}, to='varying')"


def collective_transposed(src, call: ast.Call, axes: tuple) -> str | None:
  """``call``, a ``psum`` or ``pmean`` a bwd applied to a cotangent that must vary over
  ``axes``, replaced by the collective's own transpose: each device's share of the sum
  (the cotangent marked varying again), divided by the axes' size for a mean. None for
  other collectives."""
  how = _name(call)
  if how not in ("psum", "pmean"):
    return None
  given = call.args[1] if len(call.args) > 1 else next(
      (k.value for k in call.keywords if k.arg == "axis_name"), None)
  named = src.segment(given) if given is not None else repr(axes[0] if len(axes) == 1 else axes)
  varied = revaried(src.segment(call.args[0]), named)
  return varied if how == "psum" else f"{varied} / jax.lax.axis_size({named})"


def _name(call: ast.Call) -> str:
  f = call.func
  return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def collectives(node: ast.expr) -> list[ast.Call]:
  """Calls to a cross-device reduction inside ``node``, outermost first."""
  return [n for n in ast.walk(node)
          if isinstance(n, ast.Call) and _name(n) in _COLLECTIVES and n.args]
