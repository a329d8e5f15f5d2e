"""DOT to SVG within a deadline, in a worker process, never hanging the kernel.

Engine (measured on a 2-core box, 26-box default view of the 48-layer
benchmark): pygraphviz's bundled libgraphviz in a warm worker lays it out in
6-19 ms; the Debian ``dot`` binary, spawned per call, 16-54 ms; a fresh Python
per call to import pygraphviz, 85-300 ms. So one long-lived worker running the
pygraphviz wheel: it needs no ``dot`` on PATH (``pip install`` alone works),
is the fastest warm path, and is one code path to test. ``warm()`` starts it
ahead of the first diagnosis.
"""
from __future__ import annotations

import atexit
import os
import select
import struct
import subprocess
import sys
import threading
import time

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layout_worker.py")


class LayoutError(RuntimeError):
  """Graphviz could not lay the graph out (or could not start)."""


class LayoutTimeout(LayoutError):
  """The layout ran past its deadline; the worker was killed."""


_lock = threading.Lock()
_proc: subprocess.Popen | None = None


def warm() -> None:
  """Start the worker now (it loads libgraphviz while the caller goes on)."""
  with _lock:
    _worker()


def svg(dot: str, timeout: float) -> str:
  """The SVG of ``dot``; LayoutTimeout if it takes longer than ``timeout`` seconds."""
  deadline = time.monotonic() + timeout
  with _lock:
    proc = _worker()
    data = dot.encode()
    try:
      proc.stdin.write(struct.pack(">Q", len(data)) + data)
      proc.stdin.flush()
      size = struct.unpack(">Q", _read(proc, 8, deadline))[0]
      status, _, body = _read(proc, size, deadline).partition(b"\n")
    except LayoutTimeout:
      _stop()
      raise LayoutTimeout(f"layout took longer than {timeout:.1f} s") from None
    except (OSError, struct.error, LayoutError) as e:
      _stop()
      raise LayoutError(f"the layout worker failed: {e}") from None
  if status != b"ok":
    raise LayoutError(body.decode(errors="replace"))
  return body.decode()


def _worker() -> subprocess.Popen:
  global _proc
  if _proc is None or _proc.poll() is not None:
    _proc = subprocess.Popen([sys.executable, "-I", WORKER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
  return _proc


def _read(proc: subprocess.Popen, n: int, deadline: float) -> bytes:
  fd, chunks, got = proc.stdout.fileno(), [], 0
  while got < n:
    left = deadline - time.monotonic()
    if left <= 0 or not select.select([fd], [], [], left)[0]:
      raise LayoutTimeout
    chunk = os.read(fd, n - got)
    if not chunk:
      raise LayoutError("the layout worker exited")
    chunks.append(chunk)
    got += len(chunk)
  return b"".join(chunks)


def _stop() -> None:
  global _proc
  if _proc is not None:
    _proc.kill()
    _proc.wait()
    _proc = None


atexit.register(_stop)
