"""JAX's own backward-pass logs (``defvjp_with_logs``), kept beside the rule that wrote them.

A rule registered with ``defvjp_with_logs`` returns ``(cotangents, logs)``; JAX merges every
rule's dict (keys unique in a pass) and hands it back only to a caller that asked
(``f_vjp.with_logs(ct)``, ``jax.grad(..., with_logs=True)``), stacked along a leading axis
per scan iteration or vmap element, concatenated along the mesh axis per shard_map shard.
The instrumented bwd notes which rule application wrote each key and the types it wrote
(``noted``); the backward pass's result, when it carries logs, is summarised per rule
(``received``): host numbers, never the user's arrays, and never a change to what JAX
returns. Under jit the logs are tracers there: only their types are known.
"""
from __future__ import annotations

import dataclasses

import jax
import numpy as np

from .compat.private import core
from .naming.leaf_paths import keys, keystr
from .records import RuleSite, Session, current_session

FIRST = 6            # first values shown of a log
SLICES = 16          # stacked slices shown (per iteration, per shard)
MAX_SIZE = 1 << 22   # larger logs keep their type alone: a summary must stay cheap


@dataclasses.dataclass(frozen=True)
class LogLeaf:
  """One leaf of a logged pytree, as plain text and numbers (formatted: NaN and inf stay
  readable in JSON). ``stacked`` says what each axis JAX added stands for; ``slices``
  is each slice's mean along the first such axis (the value itself for a scalar log)."""
  name: str                          # "gnorm", "stats['mu']"
  shape: tuple[int, ...]
  dtype: str
  stacked: tuple[str, ...] = ()      # "axis 0: per iteration", "axis 0: per shard over 'i' (4)"
  traced: bool = False               # under jit: only the type is known here
  min: str | None = None
  max: str | None = None
  mean: str | None = None
  first: tuple[str, ...] = ()
  slices: tuple[str, ...] = ()

  def to_dict(self) -> dict:
    return {**dataclasses.asdict(self), "shape": list(self.shape), "stacked": list(self.stacked),
            "first": list(self.first), "slices": list(self.slices)}


def noted(site: RuleSite, returned) -> None:
  """A ``defvjp_with_logs`` bwd returned ``(cts, logs)`` at ``site``: which keys it wrote,
  with each leaf's type as the rule saw it (stacking adds axes to it later)."""
  session = current_session()
  if session is None or not isinstance(returned, (tuple, list)) or len(returned) != 2:
    return
  logs = returned[1]
  if not isinstance(logs, dict):   # None, or what JAX refuses (a list): JAX says so
    return
  for name, tree in logs.items():
    types = {keys(p): core.typeof(x) for p, x in jax.tree_util.tree_leaves_with_path(tree)}
    session.log_sources.append((name, site, types))


def received(session: Session, logs) -> None:
  """The backward pass returned ``logs`` (the caller asked): each noted key's summary."""
  if not isinstance(logs, dict):
    return
  for name, site, types in session.log_sources:
    if name in logs:
      leaves = jax.tree_util.tree_leaves_with_path(logs[name])
      session.logs.append((site, tuple(_leaf(name, p, x, types.get(keys(p)), site)
                                       for p, x in leaves)))


def of_site(session: Session, site) -> tuple[LogLeaf, ...]:
  """The logs the rule application ``site`` wrote, as the caller received them."""
  return tuple(leaf for at, leaves in session.logs if at == site for leaf in leaves)


def _leaf(name: str, path, x, seen, site: RuleSite) -> LogLeaf:
  aval = core.typeof(x)
  shape, dtype = tuple(aval.shape), str(aval.dtype)
  label = f"{name}{keystr(keys(path))}"
  traced = isinstance(x, core.Tracer)
  spec = () if traced else _spec(x)
  added = _stacking(shape, tuple(getattr(seen, "shape", shape)), spec, site.name_stack)
  stacked = tuple(f"axis {axis}: per {what}" for axis, what, _ in added)
  if traced or int(np.prod(shape)) > MAX_SIZE:
    return LogLeaf(label, shape, dtype, stacked, traced=traced)
  values = np.asarray(x)
  flat = values.reshape(-1)
  if not flat.size or values.dtype.kind not in "biuf":
    return LogLeaf(label, shape, dtype, stacked, first=tuple(str(v) for v in flat[:FIRST]))
  flat = flat.astype(np.float64)
  return LogLeaf(label, shape, dtype, stacked, min=_n(flat.min()), max=_n(flat.max()),
                 mean=_n(flat.mean()), first=tuple(_n(v) for v in flat[:FIRST]),
                 slices=_slices(values, *added[0][::2]) if added else ())


def _stacking(shape: tuple, seen: tuple, spec: tuple, name_stack: str) -> list[tuple[int, str, int]]:
  """(axis, what it stands for, how many) of each axis JAX added or grew: the shards of a mesh axis
  where the result is split over one (shard_map concatenates them), else a leading axis
  per scan iteration (per element under vmap)."""
  extra = len(shape) - len(seen)
  per = "batch element" if "vmap" in name_stack else "iteration"
  out = []
  for axis, size in enumerate(shape):
    mesh_axes = spec[axis] if axis < len(spec) else None
    own = 1 if axis < extra else seen[axis - extra]
    if size != own or axis < extra:
      out.append((axis, f"shard over {mesh_axes}" if mesh_axes else per, size // max(own, 1)))
  return out


def _spec(x) -> tuple:
  """Per axis, the mesh axes (and their sizes) the array is split over: ``'i' (4)``."""
  sharding = getattr(x, "sharding", None)
  spec, mesh = getattr(sharding, "spec", None), getattr(sharding, "mesh", None)
  if spec is None or mesh is None:
    return ()
  names = lambda e: () if e is None else (e,) if isinstance(e, str) else tuple(e)
  return tuple(", ".join(f"'{n}' ({mesh.shape[n]})" for n in names(e)) or None for e in spec)


def _slices(values: np.ndarray, axis: int, count: int) -> tuple[str, ...]:
  """The mean of each of ``count`` equal slices along ``axis`` (a scalar log's own value
  per iteration or shard)."""
  means = np.moveaxis(values, axis, 0).reshape(count, -1).astype(np.float64).mean(1)
  return tuple(_n(v) for v in means[:SLICES])


def _n(v) -> str:
  return f"{float(v):.4g}"
