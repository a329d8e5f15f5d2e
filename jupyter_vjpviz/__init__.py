"""jupyter_vjpviz: a visual gradient debugger for JAX.

``%load_ext vjpviz`` in a notebook, or ``vjpviz.install()`` anywhere, and every
VJP type error (and every wrong gradient dtype JAX lets through) comes with a
Diagnosis: what was expected, what the backward pass produced, and where in the
forward program it happened.
"""
from __future__ import annotations

from .analysis.diagnosis import Diagnosis, Fix
from .check import check
from .fixes.verify import apply_fix, verify_fix
from .runtime import clear, installed
from . import runtime as _runtime

__all__ = ["Diagnosis", "Fix", "install", "uninstall", "installed", "last",
           "diagnoses", "clear", "check", "verify_fix", "apply_fix", "load_ipython_extension",
           "unload_ipython_extension"]
__version__ = "0.1.0"


def install() -> None:
  """Watch every VJP from now on; idempotent. In IPython use ``%load_ext vjpviz``."""
  _runtime.install()
  if not _in_ipython():
    from .deliver import console
    console.install()


def uninstall() -> None:
  """Restore every patched JAX object by identity; idempotent."""
  from .deliver import console
  console.uninstall()
  _runtime.uninstall()


def _in_ipython() -> bool:
  try:
    from IPython import get_ipython
  except ImportError:
    return False
  return get_ipython() is not None


def last() -> Diagnosis | None:
  """The most recent error or warning, or None."""
  found = _runtime.history()
  return found[-1] if found else None


def diagnoses() -> list[Diagnosis]:
  """Every diagnosis since install (or the last ``clear()``), oldest first."""
  return _runtime.history()


def load_ipython_extension(ipython) -> None:
  from .deliver import ipython as _ipython
  _ipython.load(ipython)


def unload_ipython_extension(ipython) -> None:
  from .deliver import ipython as _ipython
  _ipython.unload(ipython)


def _jupyter_labextension_paths():
  return [{"src": "labextension", "dest": "jupyter-vjpviz"}]
