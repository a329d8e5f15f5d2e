"""Install and uninstall the capture hook; identity-restoring and idempotent."""
from __future__ import annotations

import os

from jax._src import source_info_util, traceback_util

from . import check_sites, custom_rules
from .patches import PatchSet

_patches = PatchSet()
_package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_excluded = False


def install(sink: check_sites.Sink) -> None:
  global _excluded
  if _patches.active:
    return
  if not _excluded:
    # Our wrapper frames must look like JAX's own: hidden from filtered
    # tracebacks and never taken for the user's call site.
    traceback_util.register_exclusion(_package_dir)
    source_info_util.register_exclusion(_package_dir)
    _excluded = True
  check_sites.install(_patches, sink)


def uninstall() -> None:
  _patches.restore()
  custom_rules.clear_caches()


def installed() -> bool:
  return _patches.active
