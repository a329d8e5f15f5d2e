"""Where a rule application ran: the mesh of the shard_map around it, as plain data.

A rule differentiated inside ``shard_map`` is typed by the mesh (its inputs and
cotangents vary over some manual axes, ``{V:dp}``) and may call collectives over
its axis names: a fix of it can only be type-checked and judged inside a shard_map
over an equivalent mesh (``analysis.values.on_mesh``). The fwd records here what that
takes, read from JAX's public abstract mesh while the application is traced:
names, sizes and types of the axes, which are manual, the platform, and the
varying axes of each primal output (its cotangent's type). Avals and strings only.
"""
from __future__ import annotations

import dataclasses
import math

import jax

from .compat import changed_signatures
from .compat.private import core


@dataclasses.dataclass(frozen=True)
class MeshContext:
  """The mesh a rule application ran in (nothing of it outlives the call but these)."""
  axis_names: tuple[str, ...]
  axis_sizes: tuple[int, ...]
  manual: tuple[str, ...]                  # the shard_map's own (manual) axes
  axis_types: tuple[str, ...]
  platform: str | None
  device_kind: str | None
  out_varying: tuple[frozenset, ...]       # per primal output leaf: the axes it varies over

  @property
  def size(self) -> int:
    return math.prod(self.axis_sizes)

  def sizes(self, axes) -> int:
    """How many devices the axes ``axes`` span."""
    return math.prod(self.axis_sizes[self.axis_names.index(a)] for a in axes)

  def ordered(self, axes) -> tuple[str, ...]:
    """``axes`` in the mesh's order (how a spec names them)."""
    return tuple(a for a in self.axis_names if a in axes)

  def describe(self) -> str:
    axes = ", ".join(f"{n!r}: {s}" for n, s in zip(self.axis_names, self.axis_sizes))
    return f"mesh ({axes}) of {self.size} {self.platform or ''} devices".replace("  ", " ")


def of(out) -> MeshContext | None:
  """The mesh being traced in, with ``out`` (the primal output) typed by it; None outside
  any shard_map, or where JAX has no abstract mesh to read."""
  get = getattr(jax.sharding, "get_abstract_mesh", None)
  mesh = get() if get is not None else None
  manual = tuple(getattr(mesh, "manual_axes", None) or ())
  if not manual:
    return None
  device = getattr(mesh, "abstract_device", None)   # JAX 0.6 has none: any platform
  return MeshContext(
      axis_names=tuple(mesh.axis_names), axis_sizes=tuple(int(s) for s in mesh.axis_sizes),
      manual=manual, axis_types=tuple(getattr(t, "name", str(t)) for t in getattr(mesh, "axis_types", ())),
      platform=getattr(device, "platform", None), device_kind=getattr(device, "device_kind", None),
      out_varying=tuple(changed_signatures.varying_axes(core.typeof(o))
                        for o in jax.tree_util.tree_leaves(out)))
