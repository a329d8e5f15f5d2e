"""Install and uninstall the capture hook; identity-restoring, idempotent, thread-safe.

Both clear JAX's caches (``jax.clear_caches()``): a trace cached before install
(a checkpointed or jitted function already run) would bypass the hook and hide
a silent wrong dtype, and one cached while hooked would keep calling our rule
wrappers after uninstall. The price is one re-trace (and compile) per function.

JAX's traceback exclusion of our package stays registered after uninstall: JAX
has no way to unregister one, and no user frame lives in our package.
"""
from __future__ import annotations

import sys
import threading

import jax

from .code_events import CodeEvents
from .compat import capabilities, private
from .compat.private import source_info_util, traceback_util
from .compat.patches import PatchSet
from .naming import frames
from .sites import (check_sites, custom_rules, entry_points, entry_points_before_0_10,
                    forward_entries, forward_refusals, linear_maps)

_patches = PatchSet()
_events = CodeEvents()
_lock = threading.Lock()
_excluded = False


def install(sink: entry_points.Sink, announce: bool = False) -> None:
  """Hook JAX. What this JAX gets is said in one line when something is missing (on
  stderr), or always when ``announce`` (``%load_ext``: the user asked, and should see
  that it took)."""
  with _lock:
    if not _patches.active:
      _install(sink, announce)
      jax.clear_caches()


def _install(sink: entry_points.Sink, announce: bool) -> None:
  global _excluded
  core = [n.key for n in private.missing() if n.capability == private.EVERYTHING]
  if core:   # JAX's data model moved: nothing of vjpviz can read a program
    print(f"vjpviz is off on jax {jax.__version__}: JAX lacks {', '.join(core)} "
          "(capture/compat/private.py).", file=sys.stderr)
    return
  if not _excluded:
    # Our wrapper frames must look like JAX's own: hidden from filtered
    # tracebacks and never taken for the user's call site.
    traceback_util.register_exclusion(frames.PACKAGE_DIR)
    source_info_util.register_exclusion(frames.PACKAGE_DIR)
    _excluded = True
  events = _events if _events.start() else None
  if events is None:
    _patches.skip("sys.monitoring", capabilities.no_monitoring())
  entry_points.install(_patches, sink, events)
  entry_points_before_0_10.install(_patches, sink)
  forward_entries.install(_patches, sink, events)
  forward_refusals.install(_patches, sink, events)
  check_sites.install(_patches, sink, events)
  linear_maps.install(_patches, sink, events)
  caps = capabilities.of(hook_points()[0])
  if not caps.tested or caps.missing or caps.off or _patches.skipped:
    print(f"{caps.line()}; {len(_patches.skipped)} hook points skipped (%vjpviz says why).",
          file=sys.stderr)
  elif announce:
    print(f"{caps.line()}.")


def uninstall() -> None:
  with _lock:
    if _patches.active:
      _events.stop()
      _patches.restore()
      custom_rules.clear_caches()
      jax.clear_caches()


def installed() -> bool:
  return _patches.active


def hook_points() -> tuple[list[str], list[tuple[str, str]]]:
  """The JAX objects wrapped or watched now, and those skipped with the reason."""
  return _patches.points + _events.points, list(_patches.skipped)

