"""jupyter_vjpviz: a visual gradient debugger for JAX.

``%load_ext vjpviz`` in a notebook, or ``vjpviz.install()`` anywhere, and every
VJP type error (and every wrong gradient dtype JAX lets through) comes with a
Diagnosis: what was expected, what the backward pass produced, and where in the
forward program it happened.

Importing this package touches no JAX internals: they are imported when the
hook is installed, so a JAX we cannot hook costs one line at ``%load_ext``,
never a failing import.
"""
from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the API as type checkers and IDEs see it; at run time, imported on first use
  from .analysis.diagnosis import Diagnosis, Fix
  from .base.surrogates import surrogate
  from .api.check import apply_fix, check, verify_fix
  from .api.gradcheck import gradcheck
  from .api.grads import grads
  from .api.nans import nans
  from .api.watch import watch
  from .base.unchecked import Unchecked, unchecked

__all__ = ["Diagnosis", "Fix", "install", "uninstall", "installed", "last",
           "diagnoses", "clear", "Unchecked", "unchecked",
           "check", "gradcheck", "nans", "grads", "watch", "surrogate", "verify_fix",
           "apply_fix", "load_ipython_extension", "unload_ipython_extension"]
__version__ = "0.1.0"

_LAZY = {"Diagnosis": ".analysis.diagnosis", "Fix": ".analysis.diagnosis", "surrogate": ".base.surrogates",
         "check": ".api.check", "verify_fix": ".api.check", "apply_fix": ".api.check",
         "gradcheck": ".api.gradcheck",
         "nans": ".api.nans", "grads": ".api.grads", "watch": ".api.watch",
         "Unchecked": ".base.unchecked", "unchecked": ".base.unchecked"}
"""The names imported on first use, from the modules above (which import JAX's internals)."""


def __getattr__(name: str):
  if name in _LAZY:
    return getattr(importlib.import_module(_LAZY[name], __name__), name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def install(budget: float | None = None) -> None:
  """Watch every VJP from now on; idempotent. In IPython use ``%load_ext vjpviz``.

  ``budget``: seconds vjpviz may spend running your code again after each failing call
  (to judge fixes; default 2); past it your exception is raised with what is known."""
  pipeline = _pipeline()
  if pipeline is None:
    return
  pipeline.install(budget=budget)
  from .deliver import headless
  headless.install()   # VJPVIZ_REPORT_DIR: this process's records written there
  if not _in_ipython():
    from .deliver import console
    console.install()


def uninstall() -> None:
  """Restore every patched JAX object by identity; idempotent."""
  pipeline = _pipeline_if_loaded()
  if pipeline is None:
    return  # never installed
  from .deliver import console, headless
  console.uninstall()
  headless.uninstall()
  pipeline.uninstall()


def installed() -> bool:
  pipeline = _pipeline_if_loaded()
  return pipeline is not None and pipeline.installed()


def clear() -> None:
  """Forget every diagnosis (and which warnings were already shown)."""
  pipeline = _pipeline_if_loaded()
  if pipeline is not None:
    pipeline.clear()


def last():
  """The diagnosis of the most recent failing call or warning, or None: of one call's
  several, its first error (the one the exception's note names); an ``Unchecked`` where
  vjpviz could not diagnose it."""
  pipeline = _pipeline_if_loaded()
  return pipeline.latest() if pipeline is not None else None


def diagnoses() -> list:
  """The diagnoses since install (or ``clear()``), oldest first; the newest 200 are kept;
  then an ``Unchecked`` for each problem vjpviz could not diagnose, saying why."""
  pipeline = _pipeline_if_loaded()
  return pipeline.answers() if pipeline is not None else []


def load_ipython_extension(ipython) -> None:
  deliver = _import(".deliver.ipython")
  if deliver is None:
    _register_unavailable(ipython)
    return
  deliver.load(ipython)


def unload_ipython_extension(ipython) -> None:
  deliver = sys.modules.get(f"{__name__}.deliver.ipython")
  if deliver is not None:
    deliver.unload(ipython)


def _pipeline():
  return _import(".api.pipeline")


def _pipeline_if_loaded():
  """The pipeline if anything installed it; without it there is nothing to ask or undo."""
  return sys.modules.get(f"{__name__}.api.pipeline")


_unavailable: list[str] = []


def _import(module: str):
  """Our module, or None with one line saying why this JAX cannot be hooked."""
  try:
    return importlib.import_module(module, __name__)
  except Exception as e:  # noqa: BLE001 - an unfamiliar JAX must not break the user's session
    import jax
    reason = (f"off: cannot hook jax {jax.__version__} "
              f"({type(e).__name__}: {e}); your code runs as it would without vjpviz.")
    if reason not in _unavailable:
      _unavailable.append(reason)
      print(f"vjpviz: {reason}", file=sys.stderr)
    return None


def _register_unavailable(ipython) -> None:
  """``%vjpviz`` still answers, with the reason the hook is off."""
  ipython.register_magic_function(lambda line, cell=None: print(f"vjpviz: {_unavailable[-1]}"),
                                  "line_cell", "vjpviz")


def _in_ipython() -> bool:
  try:
    from IPython import get_ipython
  except ImportError:
    return False
  return get_ipython() is not None


def _jupyter_labextension_paths():
  return [{"src": "labextension", "dest": "jupyter-vjpviz"}]
