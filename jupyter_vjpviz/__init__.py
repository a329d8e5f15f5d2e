"""jupyter_vjpviz: a visual gradient debugger for JAX.

``%load_ext vjpviz`` in a notebook, or ``vjpviz.install()`` anywhere, and every
VJP type error (and every wrong gradient dtype JAX lets through) comes with a
Diagnosis: what was expected, what the backward pass produced, and where in the
forward program it happened.
"""
from __future__ import annotations

from .analysis.diagnosis import Diagnosis, Fix
from .check import check
from .runtime import clear, install, installed, uninstall
from . import runtime as _runtime

__all__ = ["Diagnosis", "Fix", "install", "uninstall", "installed", "last",
           "diagnoses", "clear", "check", "load_ipython_extension",
           "unload_ipython_extension"]
__version__ = "0.1.0"


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
