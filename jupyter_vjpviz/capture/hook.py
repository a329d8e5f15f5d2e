"""Install and uninstall the capture hook; identity-restoring and idempotent."""
from __future__ import annotations

import sys

import jax
from jax._src import source_info_util, traceback_util

from . import check_sites, custom_rules, entry_points, frames
from .patches import PatchSet

_patches = PatchSet()
_excluded = False
SUPPORTED_JAX = "0.12."


def install(sink: entry_points.Sink) -> None:
  global _excluded
  if _patches.active:
    return
  if not jax.__version__.startswith(SUPPORTED_JAX):
    print(f"vjpviz: built for jax {SUPPORTED_JAX}x, found {jax.__version__}; "
          "check sites this version lacks are skipped.", file=sys.stderr)
  if not _excluded:
    # Our wrapper frames must look like JAX's own: hidden from filtered
    # tracebacks and never taken for the user's call site.
    traceback_util.register_exclusion(frames.PACKAGE_DIR)
    source_info_util.register_exclusion(frames.PACKAGE_DIR)
    _excluded = True
  entry_points.install(_patches, sink)
  check_sites.install(_patches)


def uninstall() -> None:
  _patches.restore()
  custom_rules.clear_caches()


def installed() -> bool:
  return _patches.active
