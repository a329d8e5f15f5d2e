"""The user's pytrees, walked without calling their code in ways JAX never does.

A user's pytree class may check what it is built from (``__init__`` raising on
anything without a shape). JAX rebuilds user nodes only around arrays, tracers,
ShapeDtypeStructs and avals (lowering), and ``object()`` placeholders in its own checks; so
vjpviz never puts leaf indices, names or flags into ``tree_unflatten``: which
leaves belong to which argument comes from the treedef's children, key paths from
a tree rebuilt around the leaves' own types.
"""
from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import jax


def shape_struct(aval):
  """A ShapeDtypeStruct of ``aval``: what abstract re-runs (eval_shape) are called with.
  Its sharding is kept where its type names mesh axes (a ``set_mesh`` context's Explicit
  axes: ``float32[4@data,3]``), so a re-run types its values as the program did."""
  sharding = getattr(aval, "sharding", None)
  explicit = sharding is not None and any(p is not None for p in getattr(sharding, "spec", ()))
  return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type,
                              **({"sharding": sharding} if explicit else {}))


def substituted(items: Sequence, positions: Sequence[int], values) -> list:
  """``items`` as a list with ``values`` put at ``positions``, in order: a function's
  arguments with the differentiated ones replaced (the partial functions JAX's
  transforms, the oracle and the replays are given)."""
  out = list(items)
  for i, v in zip(positions, values):
    out[i] = v
  return out


def arg_slices(args_tree) -> list[slice]:
  """The flat leaf range of each child of ``args_tree`` (an args tuple's treedef)."""
  slices, start = [], 0
  for child in args_tree.children():
    slices.append(slice(start, start + child.num_leaves))
    start += child.num_leaves
  return slices


def split_args(args_tree, flat: Sequence) -> list[list]:
  """``flat`` (one item per leaf) as one list per argument."""
  return [list(flat[s]) for s in arg_slices(args_tree)]


def leaf_paths(tree, leaves: Sequence[Any]) -> list[tuple]:
  """The key path of each leaf of ``tree``, in flat order, from the tree rebuilt around
  ``leaves``: the values, avals or ``object()`` placeholders JAX itself builds it of."""
  rebuilt = jax.tree_util.tree_unflatten(tree, list(leaves))
  paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(rebuilt)[0]]
  if len(paths) != tree.num_leaves:
    raise ValueError(f"the tree rebuilt has {len(paths)} leaves, not {tree.num_leaves}")
  return paths


def builtin_only(tree) -> bool:
  """Every node of ``tree`` is a tuple, list, dict or None: rebuilding it runs no user code."""
  data = tree.node_data()
  return data is None or (data[0] in (tuple, list, dict, type(None))
                          and all(builtin_only(c) for c in tree.children()))
