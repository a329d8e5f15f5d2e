"""Alias package: ``%load_ext vjpviz`` loads jupyter_vjpviz, and ``import vjpviz``
gives its whole API (``vjpviz.last()``, as the note on a diagnosed error says)."""

import jupyter_vjpviz as _package

__all__ = _package.__all__


def __getattr__(name: str):
  return getattr(_package, name)


def __dir__() -> list[str]:
  return sorted(set(globals()) | set(__all__))
