"""What a watch's rows say: per-leaf and per-block events, the steps a series draws, the
in-step reductions that make a row (a leaf's squared norm, a log's mean, min and max).

Pure functions of numbers and paths, apart from the reductions (traced into the step):
``watch_record.py`` keeps the rows, ``api/watch.py`` the calls.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..capture import cpu_kernels

POINTS = 512       # the most steps a series pushed draws
NO_LOGS = np.zeros(0, np.float32)


@dataclasses.dataclass(frozen=True)
class LeafEvents:
  """The first step (0-based) at which a leaf's gradient did each thing, None if never."""
  path: str
  first_zero: int | None
  stayed_zero: int | None      # the first step of its first run of ``STAYED`` zero steps
  first_nonfinite: int | None


@dataclasses.dataclass(frozen=True)
class BlockEvent:
  """One line of a watch's report: the leaves of one block (``layers``) whose gradient did
  the same thing at the same steps, as one event: a frozen block is one line, not one per
  leaf and condition. ``kind`` is ``first_zero``, ``stayed_zero`` (zero, and ``stayed``
  steps running from ``stayed_from``) or ``first_nonfinite``."""
  step: int
  path: str          # the leaf, or the block of ``leaves`` leaves
  leaves: int
  kind: str
  stayed_from: int | None = None
  where: str = ""    # a job's non-finite shards: ``on process 1 only (x[2:4, 0:3])``

  def text(self, stayed: int) -> str:
    """``step 0: ['params']['body'] (2 leaves): no gradient, for 3+ steps``."""
    who = f"{self.path} ({self.leaves} leaves)" if self.leaves > 1 else self.path or "the gradient"
    if self.kind == "first_nonfinite":
      what = f"non-finite {self.where}".rstrip()
    elif self.stayed_from is None:
      what = "no gradient"
    elif self.stayed_from == self.step:
      what = f"no gradient, for {stayed}+ steps"
    else:
      what = f"no gradient; none for {stayed}+ steps from step {self.stayed_from}"
    return f"step {self.step}: {who}: {what}"


def layers(keypaths: list) -> list[str]:
  """Each leaf's layer: its parent's path (``['Dense_1']`` of ``['Dense_1']['kernel']``),
  the leaf itself at the top."""
  return [jax.tree_util.keystr(kp[:-1] if len(kp) > 1 else kp) for kp in keypaths]


def points(n: int, keep: list[int]) -> np.ndarray:
  """At most ``POINTS`` of ``range(n)``, evenly spread, ``keep`` (capped first) among them."""
  keep = sorted(set(keep))[:POINTS // 2]
  if n <= POINTS:
    return np.arange(n)
  spread = np.linspace(0, n - 1, POINTS - len(keep)).round().astype(int)
  found = np.union1d(spread, keep)
  while len(found) > POINTS:   # rounding met a kept step: thin the spread ones
    spread = spread[::2]
    found = np.union1d(spread, keep)
  return found


def health(g) -> jax.Array:
  """One reduction per leaf, its squared norm: zero only if every element is (or all are
  below 1e-19 in magnitude), NaN or Inf if any is (or the sum overflows float32)."""
  g32 = g.astype(jnp.float32)
  return jnp.sum(g32 * g32)


def healths(grads: list) -> jax.Array:
  """float32[leaves]: each leaf's ``health``: on the CPU of a one-device job, the leaves
  below ``cpu_kernels.SMALL`` by one call of its kernel (where it built), the others by a
  reduction a leaf, ``assembled`` in their order."""
  xs = [jax.lax.stop_gradient(g).astype(jnp.float32) for g in grads]
  small = [x for x in xs if x.size < cpu_kernels.SMALL]
  if not small:
    return assembled([health(x) for x in xs])
  norms = cpu_kernels.on_cpu(
      cpu_kernels.squared_norms, lambda *s: assembled([health(x) for x in s]), *small)
  if len(small) == len(xs):
    return norms
  fast = iter(norms)
  return assembled([next(fast) if x.size < cpu_kernels.SMALL else health(x) for x in xs])


FUSED = 8
"""The most operands XLA:CPU fuses into a concatenation: past it, every operand is a kernel
of its own (two per leaf's norm), each a dispatch in the step."""


def assembled(parts: list) -> jax.Array:
  """float32[n]: ``parts`` (scalars and vectors, traced) concatenated, ``FUSED`` at a time
  into one part while more are left (each kept apart from the next by an optimization
  barrier: XLA would merge nested concatenations back into one): a kernel per
  ``FUSED - 1`` parts, not two per part (benchmarks/watch_overhead.py --flow)."""
  level = [jnp.reshape(p, (-1,)).astype(jnp.float32) for p in parts]
  if not level:
    return jnp.zeros(0, jnp.float32)
  while len(level) > FUSED:
    level = [jax.lax.optimization_barrier(jnp.concatenate(level[:FUSED])), *level[FUSED:]]
  return jnp.concatenate(level)


def named_logs(logs) -> list[tuple[str, jax.Array]]:
  """The numeric leaves of a logs tree, named as the diagnosis names them (``gnorm``,
  ``stats['cos']``: capture/grad_logs.py), the empty ones left out."""
  def name(path) -> str:
    head = path[0].key if path and isinstance(path[0], jax.tree_util.DictKey) else None
    return f"{head}{jax.tree_util.keystr(path[1:])}" if head is not None else jax.tree_util.keystr(path)
  return [(name(path), x) for path, x in jax.tree_util.tree_leaves_with_path(logs)
          if jnp.size(x) and (jnp.issubdtype(jnp.result_type(x), jnp.number))]


def stats(x) -> jax.Array:
  """float32[3]: the mean, min and max of ``x`` over every axis (stacked ones too)."""
  x32 = jnp.asarray(x).astype(jnp.float32)
  return jnp.stack([x32.mean(), x32.min(), x32.max()])


def logs_of(rows: np.ndarray, leaves: int, names: list[str]) -> dict[str, np.ndarray]:
  """name -> float32[steps, 3] of the logs' columns of ``rows`` (after the ``leaves``')."""
  return {name: rows[:, leaves + 3 * k:leaves + 3 * k + 3] for k, name in enumerate(names)}


def finite_or_none(values: np.ndarray) -> list[float | None]:
  """JSON numbers, a non-finite one as null."""
  return [float(x) if np.isfinite(x) else None for x in values]


def first(flags: np.ndarray) -> int | None:
  hit = np.flatnonzero(flags)
  return int(hit[0]) if hit.size else None


def first_run(flags: np.ndarray, n: int) -> int | None:
  """The first step of the first run of ``n`` set flags (vectorised: the panel's pushes
  recompute it over every step twice a second)."""
  if len(flags) < n:
    return None
  ran = np.concatenate([[0], np.cumsum(flags, dtype=np.int64)])
  return first(ran[n:] - ran[:-n] == n)
