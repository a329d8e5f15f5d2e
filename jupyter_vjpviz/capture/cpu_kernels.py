"""vjpviz's reductions inside a watched step, on the CPU: one kernel and one pass each.

XLA:CPU runs every reduction as a kernel of its own, fused with no other: a flow tap's
summary (sum of squares, max |.|, the zero count) ~50 us per 65k elements, 12-20% of a
width-256 MLP's training step for three taps; a watch's leaves' norms, one or two
kernels a leaf. ``cpu_kernels.cc`` makes a summary in one pass (~4 us) and every leaf's
norm in one call. It is compiled once per machine with the C++ compiler found there
(``$CXX``, ``c++``, ``g++``, ``clang++``) into the user's cache, checked against numpy,
and registered with XLA's FFI for the CPU. Where any of that fails (no compiler, headers
of a jaxlib it does not build with), ``usable`` is False, ``why_not`` says why, and the
watch keeps XLA's reductions: the same numbers, at XLA's cost.

Used only where the computation is on one device (a custom call over a sharded array
would be gathered whole by XLA's partitioner) and, through ``platform_dependent``, only
where the step is compiled for the CPU (``on_cpu``).
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

SUMMARY, NORMS = "vjpviz_flow_summary", "vjpviz_squared_norms"
SOURCE = Path(__file__).with_name("cpu_kernels.cc")
COMPILE_SECONDS = 120
SMALL = 1 << 20
"""Arrays of fewer elements go to the kernels: a pass on one thread, ~60 us at this size,
beats XLA's reductions' fixed costs below it; above it XLA's reductions, which run on
every core, are left to make the numbers."""

_lock = threading.Lock()
_state: list = []    # [None] once registered and checked; [why not] once that failed


def usable() -> bool:
  """Whether the kernels may be traced into a step now: one device in the job (none
  built otherwise), and ``built``."""
  return jax.device_count() == 1 and built() is None


def why_not() -> str | None:
  """Why the watch uses XLA's reductions instead (None: it need not)."""
  return "more than one device" if jax.device_count() != 1 else built()


def built() -> str | None:
  """None once the kernels are built, registered and checked (the first call does it);
  else why not. Done on a thread of its own: the caller may be tracing (the check runs
  a jit)."""
  with _lock:
    if not _state:
      worker = threading.Thread(target=_prepare, name="vjpviz-cpu-kernels", daemon=True)
      worker.start()
      worker.join(COMPILE_SECONDS + 60)
      if not _state:
        _state.append(f"the build took over {COMPILE_SECONDS + 60} s")
    return _state[0]


def on_cpu(kernel, xla, *args) -> jax.Array:
  """``kernel(*args)`` where the step is compiled for the CPU, the kernels are
  ``usable`` and every array is ``SMALL``, else ``xla(*args)``."""
  if not usable() or any(x.size >= SMALL for x in args):
    return xla(*args)
  return jax.lax.platform_dependent(*args, cpu=kernel, default=xla)


def summary(x) -> jax.Array:
  """float32[5]: ``flow_taps.SUMMARY`` of float32 ``x`` (not empty), by the kernel."""
  call = jax.ffi.ffi_call(SUMMARY, jax.ShapeDtypeStruct((1, 5), jnp.float32),
                          vmap_method="broadcast_all")
  return call(x.reshape(1, -1))[0]


def squared_norms(*xs) -> jax.Array:
  """float32[len(xs)]: each float32 array's sum of squares, by one call of the kernel."""
  call = jax.ffi.ffi_call(NORMS, jax.ShapeDtypeStruct((len(xs),), jnp.float32),
                          vmap_method="sequential")
  return call(*xs)


def cache_dir() -> Path:
  """``$VJPVIZ_CACHE_DIR``, else ``$XDG_CACHE_HOME/jupyter_vjpviz`` (~/.cache)."""
  if os.environ.get("VJPVIZ_CACHE_DIR"):
    return Path(os.environ["VJPVIZ_CACHE_DIR"])
  home = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
  return Path(home) / "jupyter_vjpviz"


def _prepare() -> None:
  try:
    _register(_built())
    _state.append(None)
  except Exception as e:  # noqa: BLE001 - any failure: XLA's reductions instead
    _state.append(f"{type(e).__name__}: {e}"[:300])


def _compiler() -> str:
  for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
    if name and shutil.which(name):
      return shutil.which(name)
  raise FileNotFoundError("no C++ compiler ($CXX, c++, g++, clang++)")


def _built() -> Path:
  """The kernel's library, compiled into the cache unless there already: named by what
  it is built from, written under a temporary name and renamed (processes racing)."""
  cxx, source = _compiler(), SOURCE.read_bytes()
  key = hashlib.sha256(b"\0".join(
      [source, cxx.encode(), jax.__version__.encode(), importlib.metadata.version("jaxlib").encode(),
       platform.machine().encode(), sys.platform.encode()])).hexdigest()[:16]
  path = cache_dir() / f"cpu_kernels-{key}.so"
  if not path.exists():
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    done = subprocess.run(
        [cxx, "-O3", "-shared", "-fPIC", "-std=c++17", "-w", "-I", jax.ffi.include_dir(),
         str(SOURCE), "-o", str(partial)], capture_output=True, text=True,
        timeout=COMPILE_SECONDS, check=False)
    if done.returncode:
      partial.unlink(missing_ok=True)
      raise RuntimeError(f"{Path(cxx).name} failed: {done.stderr.strip()[-200:]}")
    os.replace(partial, path)
  return path


def _register(path: Path) -> None:
  """Registers the library's handlers and checks them against numpy on every kind of
  element and a vmapped call (raises where they disagree: XLA's reductions instead)."""
  library = ctypes.cdll.LoadLibrary(str(path))
  for name, handler in ((SUMMARY, library.VjpvizFlowSummary),
                        (NORMS, library.VjpvizSquaredNorms)):
    jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(handler), platform="cpu")
  rows = np.array([[0.0, -0.0, 1.5, -3.0, 2.0e15, 7.0, 0.0, -1.0, 0.25] * 3,
                   [1.0, np.inf, -2.0, 0.0, 5.0, -np.inf, 0.0, 3.0, 1.0] * 3,
                   [1.0, np.nan, -2.0, 0.0, np.inf, 4.0, 0.0, 3.0, 1.0] * 3], np.float32)
  with jax.default_device(jax.devices("cpu")[0]):
    got = np.asarray(jax.jit(jax.vmap(summary))(rows))
    norms = np.asarray(jax.jit(squared_norms)(rows[0], rows[0, :5], rows[1]))
  finite = np.isfinite(rows)
  want = np.stack([np.where(finite.all(1), (rows.astype(np.float64) ** 2).sum(1), 0.0),
                   np.abs(rows).max(1), finite.sum(1), (rows == 0).sum(1),
                   np.full(3, rows.shape[1])], axis=1)
  nan, inf = got[2, [0, 1]], got[1, [0, 1]]
  if not (np.allclose(got[0], want[0], rtol=1e-6) and np.array_equal(got[:, 2:], want[:, 2:])
          and np.isnan(nan).all() and (inf == np.inf).all()
          and np.allclose(norms[:2], [want[0, 0], (rows[0, :5] ** 2).sum()], rtol=1e-6)
          and norms[2] == np.inf):
    raise RuntimeError(f"the kernels disagree with numpy: {got.tolist()}, {norms.tolist()}")
