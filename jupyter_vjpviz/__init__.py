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

__all__ = ["Diagnosis", "Fix", "install", "uninstall", "installed", "last",
           "diagnoses", "clear", "check", "gradcheck", "nans", "grads", "watch", "surrogate", "verify_fix", "apply_fix",
           "load_ipython_extension", "unload_ipython_extension"]
__version__ = "0.1.0"

_LAZY = {"Diagnosis": ".analysis.diagnosis", "Fix": ".analysis.diagnosis",
         "gradcheck": ".deliver.value_check", "nans": ".deliver.value_check",
         "grads": ".deliver.grads", "watch": ".deliver.watch", "surrogate": ".base.surrogates",
         "check": ".deliver.type_check", "verify_fix": ".deliver.type_check", "apply_fix": ".deliver.type_check"}


def __getattr__(name: str):
  if name in _LAZY:
    return getattr(importlib.import_module(_LAZY[name], __name__), name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def install() -> None:
  """Watch every VJP from now on; idempotent. In IPython use ``%load_ext vjpviz``."""
  runtime = _runtime()
  if runtime is None:
    return
  runtime.install()
  if not _in_ipython():
    from .deliver import console
    console.install()


def uninstall() -> None:
  """Restore every patched JAX object by identity; idempotent."""
  runtime = _runtime_if_loaded()
  if runtime is None:
    return  # never installed
  from .deliver import console
  console.uninstall()
  runtime.uninstall()


def installed() -> bool:
  runtime = _runtime_if_loaded()
  return runtime is not None and runtime.installed()


def clear() -> None:
  """Forget every diagnosis (and which warnings were already shown)."""
  runtime = _runtime_if_loaded()
  if runtime is not None:
    runtime.clear()


def last():
  """The diagnosis of the most recent failing call or warning, or None: of one call's
  several, its first error (the one the exception's note names)."""
  runtime = _runtime_if_loaded()
  return runtime.latest() if runtime is not None else None


def diagnoses() -> list:
  """The diagnoses since install (or ``clear()``), oldest first; the newest 200 are kept."""
  runtime = _runtime_if_loaded()
  return runtime.history() if runtime is not None else []


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


def _runtime():
  return _import(".deliver.runtime")


def _runtime_if_loaded():
  """The runtime if anything installed it; without it there is nothing to ask or undo."""
  return sys.modules.get(f"{__name__}.deliver.runtime")


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
