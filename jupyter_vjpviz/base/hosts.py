"""An array as this process can read it: the one door from a device array to the host.

In a ``jax.distributed`` job an array may span other processes' devices: fetching it
whole raises (JAX cannot), and any computation on it is a collective every process must
issue in the same order. vjpviz reads only what is here, the addressable shards, with the
global index range they cover; and what it runs of the user's code on its own account it
runs on those local values (``localised``), never on the global array, so one process's
checks (bounded by its own budget) never wait on, or hold, another process.
"""
from __future__ import annotations

import dataclasses

import jax
import numpy as np


@dataclasses.dataclass(frozen=True)
class HostView:
  """The part of an array held here: its values and the global index range they cover."""
  value: np.ndarray
  start: tuple[int, ...]      # global index of value[0, 0, ...]
  shape: tuple[int, ...]      # the global array's shape

  @property
  def whole(self) -> bool:
    return self.value.shape == self.shape

  def span(self) -> str:
    """The global index range held: ``[2:4, 0:3]`` (``[]`` for a scalar)."""
    return "[" + ", ".join(f"{a}:{a + n}" for a, n in zip(self.start, self.value.shape)) + "]"

  def at(self, flat_local: int) -> tuple[int, ...]:
    """The global index of the element at ``flat_local`` in ``value``."""
    local = np.unravel_index(flat_local, self.value.shape) if self.value.ndim else ()
    return tuple(int(a + i) for a, i in zip(self.start, local))


def spans_processes(x) -> bool:
  """A concrete jax.Array placed on another process's devices too (replicated there, or
  sharded): any computation on it is one every process takes part in."""
  return (isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer)
          and not x.is_fully_addressable)


def any_spans(tree) -> bool:
  return any(spans_processes(x) for x in jax.tree_util.tree_leaves(tree))


def host_view(x) -> HostView:
  """``x``'s values held here, without a transfer from another process: the addressable
  shards placed in the box they cover together (one shard's alone where they do not make
  one box: ownership JAX allows but no data-parallel layout uses)."""
  shape = tuple(np.shape(x))
  if not spans_processes(x) or x.is_fully_replicated:
    return HostView(np.asarray(x), (0,) * len(shape), shape)
  shards = {_bounds(s.index, shape): s for s in x.addressable_shards}   # replicas: one each
  lo = tuple(min(b[d][0] for b in shards) for d in range(len(shape)))
  hi = tuple(max(b[d][1] for b in shards) for d in range(len(shape)))
  volume = sum(int(np.prod([b - a for a, b in box])) for box in shards)
  if volume != int(np.prod([b - a for a, b in zip(lo, hi)])):
    box, shard = next(iter(shards.items()))
    return HostView(np.asarray(shard.data), tuple(a for a, _ in box), shape)
  value = np.empty([b - a for a, b in zip(lo, hi)], x.dtype)
  for box, shard in shards.items():
    value[tuple(slice(a - l, b - l) for (a, b), l in zip(box, lo))] = np.asarray(shard.data)
  return HostView(value, lo, shape)


def host(x) -> np.ndarray:
  """``np.asarray(x)``, of the part held here where ``x`` spans other processes."""
  return host_view(x).value


def localised(tree):
  """``tree`` with each array spanning processes replaced by the values held here, as an
  array of this process's first device: what vjpviz runs the user's code on for its own
  checks; and the ``HostView`` of each one replaced (by flat position)."""
  flat, treedef = jax.tree_util.tree_flatten(tree)
  views = {k: host_view(x) for k, x in enumerate(flat) if spans_processes(x)}
  device = jax.local_devices()[0]
  flat = [jax.device_put(views[k].value, device) if k in views else x for k, x in enumerate(flat)]
  return jax.tree_util.tree_unflatten(treedef, flat), views


def _bounds(index: tuple, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
  return tuple(s.indices(n)[:2] for s, n in zip(index, shape))


def held(views: dict[int, HostView], labels: list[str]) -> str:
  """The parts held here of the arrays ``localised`` replaced, as the user names them:
  ``x[2:4, 0:3]`` (those held whole left out; "every array whole" if all are)."""
  parts = [f"{labels[k]}{v.span()}" for k, v in sorted(views.items()) if not v.whole]
  return ", ".join(parts) or "every array whole"
