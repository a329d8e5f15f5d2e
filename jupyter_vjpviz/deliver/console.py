"""Diagnoses in a terminal or a plain script: a compact text block on stderr.

Warnings print when they happen; errors print after Python's own traceback
(through ``sys.excepthook``) so the user's error reads first, unchanged.
"""
from __future__ import annotations

import sys

from ..api import pipeline
from ..analysis.diagnosis import Diagnosis
from ..base.safety import safely
from ..capture import processes
from ..capture.records import ERROR

_original_excepthook = None


def install() -> None:
  global _original_excepthook
  pipeline.add_listener(_on_diagnoses)
  if _original_excepthook is None:
    _original_excepthook = sys.excepthook
    sys.excepthook = _excepthook


def uninstall() -> None:
  global _original_excepthook
  pipeline.remove_listener(_on_diagnoses)
  if _original_excepthook is not None and sys.excepthook is _excepthook:
    sys.excepthook = _original_excepthook
  _original_excepthook = None


def report(d: Diagnosis) -> str:
  """The text block; on a process other than 0 of a ``jax.distributed`` job, one line of
  a problem process 0 has recorded too (it shows each problem whole, once, with the
  processes that recorded it); the whole block of one it has not (a process failing
  alone: process 0 may be waiting in a collective, and never show it)."""
  here = processes.index()
  if here != 0 and d.process == here and safely(processes.published, d.fingerprint, 0):
    return f"vjpviz (process {d.process}): {d.headline} (process 0 has the diagnosis)"
  return safely(d.to_text, default=None) or f"vjpviz: {d.headline}"


def _on_diagnoses(found: list[Diagnosis], exc) -> None:
  for d in found:
    if d.severity != ERROR and exc is None:
      print(report(d), file=sys.stderr)


def _excepthook(typ, exc, tb):
  (_original_excepthook or sys.__excepthook__)(typ, exc, tb)
  safely(pipeline.follow, exc)   # the error is shown: its diagnoses' fixes now
  for d in getattr(exc, "__vjpviz__", ()):
    print(report(d), file=sys.stderr)
