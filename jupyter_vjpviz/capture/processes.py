"""Which processes of a ``jax.distributed`` job recorded the same problem.

Gathered through the key-value store of the coordination service ``jax.distributed``
already runs (its client), never a device collective: each process publishes each problem
it records under the problem's fingerprint (one ``set``, no wait), and only process 0
reads, waiting at most ``WAIT`` seconds (less when the caller's budget has less left) for
the other processes to publish the same one; the others never wait. A problem recorded
later than that is counted when process 0 reads its records again (``gathered`` without
a wait: one request). Outside such a job (or on a JAX without the client) every process
is alone: process 0 of 1, nothing published.
"""
from __future__ import annotations

import json
import time

from .compat.private import distributed

PREFIX = "vjpviz/"
WAIT = 0.25        # seconds process 0 waits, at most, for the others to publish a problem
POLL = 0.005       # seconds between two reads of the store while it waits


def _client():
  """The coordination service's client, in a job of several processes; else None."""
  state = distributed.global_state
  return state.client if state.client is not None and state.num_processes > 1 else None


def index() -> int:
  """This process's index in the job (``jax.process_index()``, read without starting a
  backend: vjpviz may record before the user's ``jax.distributed.initialize``)."""
  return distributed.global_state.process_id if _client() is not None else 0


def count() -> int:
  return distributed.global_state.num_processes if _client() is not None else 1


def publish(fingerprint: str, record: dict) -> None:
  """``record`` (JSON data) as this process's of the problem ``fingerprint``."""
  client = _client()
  if client is not None:
    client.key_value_set(f"{PREFIX}{fingerprint}/{index()}", json.dumps(record),
                         allow_overwrite=True)


def published(fingerprint: str, process: int) -> bool:
  """Whether ``process`` has published the problem ``fingerprint`` (one request, no
  wait): a process other than 0 prints one line of a problem process 0 shows whole, and
  the whole diagnosis of one process 0 has not recorded (it may never: it may be waiting
  in a collective this process failed before)."""
  client = _client()
  if client is None:
    return False
  try:
    client.key_value_try_get(f"{PREFIX}{fingerprint}/{process}")
  except Exception:   # noqa: BLE001 - the store says NOT_FOUND by raising
    return False
  return True


def gathered(awaited: set[str] = frozenset(), wait: float = 0.0) -> dict[str, dict[int, dict]]:
  """fingerprint -> {process: its record} of every problem published in this job so far;
  on process 0, after waiting up to ``wait`` seconds for every process to have published
  each of ``awaited``. Elsewhere: {} (only process 0 gathers)."""
  client = _client()
  if client is None or index() != 0:
    return {}
  deadline = time.monotonic() + wait
  while True:
    found = _read(client)
    if (time.monotonic() >= deadline
        or all(len(found.get(f, ())) >= count() for f in awaited)):
      return found
    time.sleep(POLL)


def _read(client) -> dict[str, dict[int, dict]]:
  found: dict[str, dict[int, dict]] = {}
  for key, value in client.key_value_dir_get(PREFIX):
    fingerprint, _, process = key[len(PREFIX):].rpartition("/")
    found.setdefault(fingerprint, {})[int(process)] = json.loads(value)
  return found


def spelled(processes) -> str:
  """``on processes 0-3``, ``on processes 0, 2-3``, ``on process 2 only``; "" for none."""
  ps = sorted(processes)
  if not ps:
    return ""
  if len(ps) == 1:
    return f"on process {ps[0]} only"
  runs, start = [], ps[0]
  for a, b in zip(ps, ps[1:] + [None]):
    if b != a + 1:
      runs.append(f"{start}" if start == a else f"{start}-{a}")
      start = b
  return f"on processes {', '.join(runs)}"
