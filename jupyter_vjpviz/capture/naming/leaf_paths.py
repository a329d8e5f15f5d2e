"""A cotangent tree's leaves as data: each at its key path, expected beside got.

Check sites hand these over instead of ``str(PyTreeDef)``, so no later stage (nor
the panel) parses a tree's text. A path is JAX's own key path as entries, read
by flattening the trees JAX itself flattens (or unflattens around sentinels):
the user's pytree code is called as JAX calls it.
"""
from __future__ import annotations

import dataclasses
from typing import Any
from collections.abc import Callable, Iterable

import jax

from ...base.kinds import MISSING  # noqa: F401 - a leaf one side of the comparison lacks
from ..compat.private import core


@dataclasses.dataclass(frozen=True)
class Key:
  """One step of a key path: ``index`` (a sequence's), ``key`` (a dict's str or int key),
  ``attr`` (a named field), ``flat`` (a custom node's child without a key), or
  ``other`` (any other key, ``key`` being how ``keystr`` spells it)."""
  kind: str
  key: int | str

  def text(self) -> str:
    """As ``jax.tree_util.keystr`` spells this step."""
    if self.kind == "index":
      return f"[{self.key}]"
    if self.kind == "key":
      return f"[{self.key!r}]"
    if self.kind == "attr":
      return f".{self.key}"
    if self.kind == "flat":
      return f"[<flat index {self.key}>]"
    return str(self.key)


Path = tuple[Key, ...]


@dataclasses.dataclass(frozen=True)
class Leaf:
  """One leaf of an expected-vs-got comparison: each side's type (``aval.str_short()``,
  ``None`` for a cotangent given as None, a Python type's name) or ``MISSING``."""
  path: Path
  expected: str
  got: str


def keys(path) -> Path:
  """A JAX key path as ``Key`` entries."""
  return tuple(_key(k) for k in path)


def _key(k) -> Key:
  tu = jax.tree_util
  if isinstance(k, tu.SequenceKey):
    return Key("index", k.idx)
  if isinstance(k, tu.DictKey):
    ok = isinstance(k.key, (str, int)) and not isinstance(k.key, bool)
    return Key("key", k.key) if ok else Key("other", str(k))
  if isinstance(k, tu.GetAttrKey):
    return Key("attr", k.name)
  if isinstance(k, tu.FlattenedIndexKey):
    return Key("flat", k.key)
  return Key("other", str(k))


def without_value(path) -> tuple:
  """A flax nnx State's JAX key path without its Variable's ``.value``."""
  last = path[-1] if path else None
  return tuple(path[:-1]) if isinstance(last, jax.tree_util.GetAttrKey) and \
      last.name == "value" else tuple(path)


def attribute_path(path) -> str:
  """A JAX key path as the user reaches the leaf on a live module (flax nnx's State of it):
  ``.layers[2].kernel`` for ``['layers'][2]['kernel']``."""
  return "".join(f".{k.key}" if isinstance(k, jax.tree_util.DictKey) and isinstance(k.key, str)
                 and k.key.isidentifier() else _key(k).text() for k in path)


def keystr(path: Path) -> str:
  """``jax.tree_util.keystr`` of a path of entries."""
  return "".join(k.text() for k in path)


def described(x) -> str:
  """A leaf's type as a comparison shows it."""
  if x is None:
    return "None"
  aval = x if isinstance(x, core.AbstractValue) else getattr(x, "aval", None)  # a zero's
  if isinstance(aval, core.AbstractValue):
    return aval.str_short()
  try:
    return core.typeof(x).str_short()
  except Exception:  # noqa: BLE001 - not an array: the user returned something else
    return type(x).__name__


def of_tree(tree, is_leaf: Callable[[Any], bool] | None = None) -> list[tuple[Path, str]]:
  """(path, type) of each leaf of ``tree``; None is a leaf (it stands for a zero subtree)."""
  leaf = lambda x: x is None or (is_leaf is not None and is_leaf(x))
  return [(keys(p), described(x))
          for p, x in jax.tree_util.tree_leaves_with_path(tree, is_leaf=leaf)]


def compared(expected: Iterable[tuple[Path, str]], got: Iterable[tuple[Path, str]]
             ) -> tuple[Leaf, ...]:
  """Every leaf of either tree, matched by path: the expected ones in order, then the
  extra ones. A None in ``got`` answers for every expected leaf under it, as JAX reads it."""
  want, have = dict(expected), dict(got)
  nones = [p for p, t in have.items() if t == "None"]
  out = [Leaf(p, t, have.get(p, "None" if any(p[:len(n)] == n for n in nones) else MISSING))
         for p, t in want.items()]
  out += [Leaf(p, MISSING, t) for p, t in have.items()
          if p not in want and not (t == "None" and any(w[:len(p)] == p for w in want))]
  return tuple(out)
