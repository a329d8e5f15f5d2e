"""An array as this process can read it: the one door from a device array to the host.

In a ``jax.distributed`` job an array may span other processes' devices: fetching it
whole raises (JAX cannot), and any computation on it is a collective every process must
issue in the same order. vjpviz reads only what is here, the addressable shards, with the
global index range they cover (``host_view``). What it runs of the user's code on its own
account (searches stepped equation by equation, bounded by a deadline, branching on the
values they read) would, on global arrays, be collectives whose order depends on each
process's clock: one process past its deadline and the others wait forever. So an entry
point that every process calls, as a job calls everything, takes the arrays whole once
(``whole_here``: one collective, issued by every process at the same point, before any
decision of vjpviz's own) and from then on runs as one process does, on this process's
device, under the user's mesh shrunk to it (``on_one_device``): the same axis names and
types, each of size one, so that code written for the mesh (``reshard``, ``out_sharding``,
specs naming its axes) traces as it did. Each process then reaches the same answer alone.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools

import jax
import numpy as np


@dataclasses.dataclass(frozen=True)
class HostView:
  """The part of an array held here: its values and the global index range they cover."""
  value: np.ndarray
  start: tuple[int, ...]      # global index of value[0, 0, ...]
  shape: tuple[int, ...]      # the global array's shape

  def span(self) -> str:
    """The global index range held: ``[2:4, 0:3]`` (``[]`` for a scalar)."""
    return "[" + ", ".join(f"{a}:{a + n}" for a, n in zip(self.start, self.value.shape)) + "]"


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
  array of this process's first device: what a check one process runs alone (the watch's
  ``nans``, asked from process 0's panel: no collective can be issued by it alone) runs
  the user's code on; and the ``HostView`` of each one replaced (by flat position)."""
  flat, treedef = jax.tree_util.tree_flatten(tree)
  views = {k: host_view(x) for k, x in enumerate(flat) if spans_processes(x)}
  device = jax.local_devices()[0]
  flat = [jax.device_put(views[k].value, device) if k in views else x for k, x in enumerate(flat)]
  return jax.tree_util.tree_unflatten(treedef, flat), views


def _bounds(index: tuple, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
  return tuple(s.indices(n)[:2] for s, n in zip(index, shape))


WHOLE_LIMIT = 1 << 30
"""Bytes of arrays spanning processes ``whole_here`` copies to each process, at most."""


class TooLarge(Exception):
  """The arrays spanning processes are more than ``WHOLE_LIMIT`` bytes: not copied."""


def whole_here(tree):
  """``tree`` with each array that spans processes copied whole to this process's first
  device: one all-gather (``process_allgather``) that every process must issue with this
  one, in the same order, as it must the user's own computations. Raises ``TooLarge``
  (every process alike: the global sizes are the same everywhere) past ``WHOLE_LIMIT``.
  An array of a mesh is placed on that mesh shrunk to the device (``one_device``), with
  its own spec, so its type names the same axes."""
  flat, treedef = jax.tree_util.tree_flatten(tree)
  spanning = [k for k, x in enumerate(flat) if spans_processes(x)]
  if not spanning:
    return tree
  size = sum(flat[k].size * flat[k].dtype.itemsize for k in spanning)
  if size > WHOLE_LIMIT:
    raise TooLarge(f"its arrays spanning processes ({size / 2**30:.1f} GiB) are more than "
                   f"vjpviz copies to one process ({WHOLE_LIMIT / 2**30:.0f} GiB)")
  from jax.experimental import multihost_utils
  values = multihost_utils.process_allgather([flat[k] for k in spanning], tiled=True)
  for k, value in zip(spanning, values):
    flat[k] = jax.device_put(value, _one_device_sharding(flat[k].sharding))
  return jax.tree_util.tree_unflatten(treedef, flat)


def _one_device_sharding(sharding):
  device = jax.local_devices()[0]
  if isinstance(sharding, jax.sharding.NamedSharding):
    return jax.sharding.NamedSharding(one_device(sharding.mesh), sharding.spec)
  return jax.sharding.SingleDeviceSharding(device)


def one_device(mesh):
  """``mesh`` shrunk to this process's first device: its axis names and types, each of
  size one (a spec naming its axes still divides every dimension)."""
  return _one_device(tuple(mesh.axis_names), tuple(getattr(mesh, "axis_types", ()) or ()))


@functools.lru_cache(maxsize=8)
def _one_device(names: tuple, types: tuple):
  devices = np.array(jax.local_devices()[:1]).reshape((1,) * len(names))
  kwargs = {"axis_types": types} if types else {}
  return jax.sharding.Mesh(devices, names, **kwargs)


@contextlib.contextmanager
def on_one_device():
  """The user's mesh context (``jax.set_mesh``), if one is set and it spans other
  processes' devices, replaced meanwhile by that mesh shrunk to this process's device:
  what runs on ``whole_here``'s copies runs under the mesh its code names."""
  mesh = _context_mesh()
  if mesh is None or all(d.process_index == jax.process_index() for d in mesh.devices.flat):
    yield
    return
  with jax.sharding.set_mesh(one_device(mesh)):
    yield


def _context_mesh():
  get = getattr(jax.sharding, "get_mesh", None)
  mesh = get() if get is not None else None
  return mesh if mesh is not None and not getattr(mesh, "empty", False) and \
      hasattr(mesh, "devices") else None
