"""Where code is, as the user reads it: the one spelling of a source everywhere vjpviz shows one.

IPython compiles each notebook cell into a file of its own in the temp folder
(``/tmp/ipykernel_356/1457590596.py``) and its tracebacks name the cell instead
(``Cell In[2], line 7``): vjpviz's text, HTML, panel and notes say what the traceback says.
The data keeps the machine-readable ``file:line`` (the fixes read that file, the panel
finds the cell by the ``place``'s execution count); only what is shown is spelled here.
"""
from __future__ import annotations

import re
import sys

_CELL = re.compile(r"In\[(\d+)\]")


def split(where: str) -> tuple[str, int | None]:
  """``file:line`` (as JAX and vjpviz write it) as (file, line); line None without one."""
  path, _, line = where.rpartition(":")
  return (path, int(line)) if path and line.isdigit() else (where, None)


def cell(filename: str) -> tuple[str, int | None] | None:
  """IPython's name for the code it compiled into ``filename`` (``Cell In[2]``) and the
  cell's execution count; None for a file IPython did not make (or outside IPython).
  Read through ``compile.format_code_name``, the name IPython's own tracebacks use."""
  ipython = sys.modules.get("IPython")
  shell = ipython.get_ipython() if ipython is not None else None
  name = getattr(getattr(shell, "compile", None), "format_code_name", None)
  found = name(filename) if name is not None else None
  if not found:
    return None
  label, which = found
  count = _CELL.fullmatch(which)
  return f"{label} {which}", int(count.group(1)) if count else None


def spelled(where: str | None, short: bool = False) -> str | None:
  """``where`` (``file:line``) as shown: ``Cell In[2], line 7`` for a notebook cell, else
  as given (``short``: the file's name only, ``model.py:57``, beside a graph)."""
  if not where:
    return where
  path, line = split(where)
  named = cell(path)
  if named is not None:
    return named[0] + (f", line {line}" if line is not None else "")
  return f"{path.rsplit('/', 1)[-1]}:{line}" if short and line is not None else where


def place(where: str) -> dict:
  """The protocol's Place of ``where``: its spelling, and the cell (execution count) and
  line a click goes to, where it is a notebook cell's."""
  path, line = split(where)
  named = cell(path)
  return {"text": spelled(where), "cell": named[1] if named else None, "line": line}


def places(wheres) -> dict[str, dict]:
  """Each distinct ``file:line`` of ``wheres`` (Nones skipped) to its ``place``: what the
  panel shows and goes to for each source a message carries."""
  return {w: place(w) for w in dict.fromkeys(filter(None, wheres))}
