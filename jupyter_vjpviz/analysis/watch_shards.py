"""A watch in a ``jax.distributed`` job: which process holds a step's non-finite values.

Every process computes the same global norms; only process 0 keeps the series. At the
first non-finite call each process checks its own shards of that call's sharded arrays
(host copies: no collective) and publishes which hold non-finite values (``processes``);
process 0 names them in the event.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..base import hosts
from ..capture import processes
from ..capture.naming import function_names


class Shards:
  """One watch's record of the non-finite shards, here and (on process 0) the others'."""

  def __init__(self, key: str):
    self.key = key            # the channel its records pass on: ``watch/<id>``
    self.located: int | None = None   # the step whose non-finite shards this process told
    self._shards: dict[int, dict] = {}   # on process 0: process -> its record of that step
    self._waited = False   # process 0 waited (once) for the others' records

  def locate(self, fun, kept, finite, wait: bool) -> None:
    """In a job: once the last call's global norms (``kept``'s health, the same on every
    process, so every process takes this branch alike) are seen non-finite (``finite`` of
    its row says not), its arrays sharded across the processes (arguments and outputs) are
    checked here, on the shards this process holds, and which hold non-finite values is
    published for process 0. Best-effort: the health is read where it is ready (``wait``:
    waited for, by a read), until the first non-finite call."""
    if self.located is not None or kept is None or processes.count() == 1:
      return
    step, args, kwargs, health, out = kept
    if not (wait or health.is_ready()) or finite(hosts.host(health)):
      return
    self.located = step
    labels = [*function_names.call_labels(fun, (args, kwargs)),
              *(f"out{jax.tree_util.keystr(kp)}"
                for kp, _ in jax.tree_util.tree_flatten_with_path(out)[0])]
    processes.publish(self.key, {"step": step, "held": [
        f"{label}{view.span()}" for label, x in zip(labels, jax.tree_util.tree_leaves(
            (args, kwargs, out))) if (view := nonfinite_view(x)) is not None]})

  def where(self, step: int) -> str:
    """On process 0, where a job's processes found non-finite shards at ``step``:
    ``on process 1 only (x[2:4, 0:3])``; waits for their records once, at most
    ``processes.WAIT``; "" elsewhere, or where none did."""
    if self.located != step or processes.index() != 0:
      return ""
    if len(self._shards) < processes.count():
      wait = 0.0 if self._waited else processes.WAIT
      self._waited = True
      self._shards = processes.gathered({self.key}, wait).get(self.key, {})
    held = {p: r["held"] for p, r in self._shards.items() if r["step"] == step and r["held"]}
    spans = "; ".join(", ".join(h) for _, h in sorted(held.items()))
    return f"{processes.spelled(held)} ({spans})" if held else ""


def nonfinite_view(x) -> hosts.HostView | None:
  """The shards held here of ``x``, an array sharded across processes (not replicated:
  a replica's non-finite values are every process's), if any of their values is
  non-finite."""
  if not hosts.spans_processes(x) or x.is_fully_replicated or deleted(x):
    return None
  view = hosts.host_view(x)
  return view if jnp.issubdtype(view.value.dtype, jnp.inexact) and not np.isfinite(
      view.value).all() else None


def deleted(x) -> bool:
  """An array donated to a call since (its buffer gone)."""
  return isinstance(x, jax.Array) and x.is_deleted()
