"""Text that builds a pytree in its own type from the expressions of its leaves.

A rule that returns the right leaves in another container (a tuple ``(dW, db)`` where
the cotangent of an equinox layer belongs) is fixed by building that cotangent as the
input's own type: a pytree's cotangent is a pytree of the same type. What builds one
depends on the type, and on what the rule can name:

- builtin containers: a literal (``(a, b)``, ``{'w': a}``);
- a NamedTuple or a dataclass whose fields are its children, its class in the rule's
  globals: the constructor (``Affine(scale=a, shift=b)``);
- an equinox Module: ``eqx.tree_at(lambda l: (l.weight, l.bias), layer, (dW, db))``,
  ``layer`` a value of that type the rule holds (its primal input, mostly);
- a dataclass (a flax struct) or NamedTuple from such a value: ``dataclasses.replace``,
  ``._replace``;
- any registered node, the last resort: ``jax.tree_util.tree_unflatten`` of that value's
  structure.

Each candidate is judged like any fix, so a constructor that takes other arguments (a
custom ``__init__``) is dropped there, not guessed here.
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator

import jax


def built(want, leaves: list[str], bases, names: dict) -> list[str]:
  """Expressions of ``want``'s type with ``leaves`` (texts, in ``want``'s flattening
  order), best first: one per way of building its user-defined nodes. ``bases(node)``:
  the rule's expressions holding a value of that node's structure; ``names``: the rule's
  globals (how it spells jax, equinox, dataclasses and the classes)."""
  if jax.tree_util.tree_structure(want).num_leaves != len(leaves):
    return []
  found = []
  for way in range(len(_WAYS)):
    text = _text(want, iter(leaves), way, bases, names)
    if text is not None and text not in found:
      found.append(text)
  return found


def _text(tree, leaves: Iterator[str], way: int, bases, names: dict) -> str | None:
  if _is_leaf(tree):
    return next(leaves)
  if tree is None:
    return "None"
  if type(tree) in (tuple, list, dict):
    return _literal(tree, leaves, way, bases, names)
  n = jax.tree_util.tree_structure(tree).num_leaves
  own = [next(leaves) for _ in range(n)]
  return _WAYS[way](tree, own, bases, names)


def _literal(tree, leaves, way, bases, names) -> str | None:
  if isinstance(tree, dict):
    items = {k: _text(tree[k], leaves, way, bases, names) for k in sorted(tree)}
    if None in items.values():
      return None
    return "{" + ", ".join(f"{k!r}: {v}" for k, v in items.items()) + "}"
  items = [_text(x, leaves, way, bases, names) for x in tree]
  if None in items:
    return None
  if isinstance(tree, list):
    return f"[{', '.join(items)}]"
  return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


# ---------------------------------------------------------- ways to build a node

def _constructed(node, leaves: list[str], bases, names) -> str | None:
  """``Cls(a, b)`` / ``Cls(a=..., b=...)``: a NamedTuple's or a dataclass's own constructor,
  where its children are exactly its fields, each a leaf."""
  cls = _spelled(type(node), names)
  fields = _fields(node)
  if cls is None or fields is None or _is_equinox(node):
    return None
  if _is_namedtuple(node):
    return f"{cls}({', '.join(leaves)})"
  return f"{cls}({', '.join(f'{f}={v}' for f, v in zip(fields, leaves))})"


def _replaced(node, leaves: list[str], bases, names) -> str | None:
  """``x._replace(a=...)``, ``dataclasses.replace(x, a=...)`` or a flax struct's
  ``x.replace(a=...)``, from a value of the node's structure the rule holds."""
  fields, base = _fields(node), _base(node, bases)
  if fields is None or base is None or _is_equinox(node):
    return None
  items = ", ".join(f"{f}={v}" for f, v in zip(fields, leaves))
  if _is_namedtuple(node):
    return f"{base}._replace({items})"
  module = _spelled(dataclasses, names)
  if module is not None:
    return f"{module}.replace({base}, {items})"
  return f"{base}.replace({items})" if callable(getattr(type(node), "replace", None)) else None


def _tree_at(node, leaves: list[str], bases, names) -> str | None:
  """``eqx.tree_at(lambda l: (l.weight, l.bias), layer, (dW, db))`` for an equinox Module."""
  eqx, base = _spelled(sys.modules.get("equinox"), names), _base(node, bases)
  if not _is_equinox(node) or eqx is None or base is None:
    return None
  var = next(c for c in (base[:1].lower(), "t", "m") if c.isidentifier() and c not in names)
  paths = [_path_text(p) for p, _ in jax.tree_util.tree_flatten_with_path(node)[0]]
  if None in paths:
    return None
  where = f"{var}{paths[0]}" if len(paths) == 1 else f"({', '.join(var + p for p in paths)})"
  new = leaves[0] if len(leaves) == 1 else f"({', '.join(leaves)})"
  return f"{eqx}.tree_at(lambda {var}: {where}, {base}, {new})"


def _unflattened(node, leaves: list[str], bases, names) -> str | None:
  """``jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(x), [...])``: any node."""
  jax_name, base = _spelled(jax, names), _base(node, bases)
  if jax_name is None or base is None:
    return None
  return (f"{jax_name}.tree_util.tree_unflatten({jax_name}.tree_util.tree_structure({base}), "
          f"[{', '.join(leaves)}])")


_WAYS = (_constructed, _tree_at, _replaced, _unflattened)


# ------------------------------------------------------------------- helpers

def _is_leaf(x) -> bool:
  return hasattr(x, "shape") and hasattr(x, "dtype")


def _is_namedtuple(node) -> bool:
  return isinstance(node, tuple) and hasattr(type(node), "_fields")


def _is_equinox(node) -> bool:
  module = sys.modules.get("equinox")
  return module is not None and isinstance(node, module.Module)


def _fields(node) -> list[str] | None:
  """The node's field names in its flattening order, where its children are exactly its
  fields (init fields, for a dataclass) and each child is one leaf; else None."""
  children = [p for p, _ in jax.tree_util.tree_flatten_with_path(node)[0]]
  if any(len(p) != 1 for p in children):
    return None
  if _is_namedtuple(node):   # its children keyed by position or by field name
    names = list(type(node)._fields)
    keys = [getattr(p[0], "name", getattr(p[0], "idx", None)) for p in children]
    return names if keys in (names, list(range(len(names)))) else None
  if not dataclasses.is_dataclass(node):
    return None
  keys = [getattr(p[0], "name", None) for p in children]
  names = [f.name for f in dataclasses.fields(node) if f.init]
  return keys if None not in keys and sorted(keys) == sorted(names) else None


def _path_text(path) -> str | None:
  """``.layers[2].weight``: a leaf's path as Python reads it."""
  parts = []
  for key in path:
    if isinstance(key, jax.tree_util.GetAttrKey):
      parts.append(f".{key.name}")
    elif isinstance(key, jax.tree_util.SequenceKey):
      parts.append(f"[{key.idx}]")
    elif isinstance(key, jax.tree_util.DictKey):
      parts.append(f"[{key.key!r}]")
    else:
      return None
  return "".join(parts)


def _base(node, bases) -> str | None:
  """The first expression of the rule holding a value of the node's structure."""
  found = bases(node)
  return found[0] if found else None


def _spelled(obj, names: dict) -> str | None:
  """The rule's global name of ``obj`` (a module or a class), or None."""
  if obj is None:
    return None
  return next((k for k, v in names.items() if v is obj and not k.startswith("_")), None)
