"""Keep vjpviz's own frames out of the user's traceback.

The user's exception must read as it would without vjpviz. Our wrappers sit on
the call path, so an exception passing through them carries their frames; as
it leaves our code we unlink them (``tb_next`` is writable), so even the
"skipping hidden N frames" count IPython prints stays the same.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from types import TracebackType

from ..compat.private import source_info_util

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ours(tb: TracebackType) -> bool:
  return tb.tb_frame.f_code.co_filename.startswith(PACKAGE_DIR + os.sep)


# JAX's ``call_wrapped``, whose frame ``sites.direct_calls`` calls around: (its code, a
# thunk of a traceback entry of it, the codes of the transformations it would have called,
# and of every transformation of the functions called so).
_call_wrapped: list = []


def called_around(code, entry: Callable[[], TracebackType | None], outermost: set,
                  transformations: set) -> None:
  """JAX's ``call_wrapped`` (``code``) is called around: in the user's tracebacks, an
  ``entry()`` of it goes back above each of the ``outermost`` transformations called by
  a frame that is neither it nor one of the ``transformations``."""
  _call_wrapped[:] = [(code, entry, outermost, transformations)]


def strip(exc: BaseException) -> None:
  """Remove our frames from ``exc``'s traceback, in place, and put back JAX's
  ``call_wrapped`` frames called around (``called_around``)."""
  kept = []
  tb = exc.__traceback__
  while tb is not None:
    if not ours(tb):
      if _called_around(tb, kept[-1] if kept else None):
        kept.extend(filter(None, [_call_wrapped[0][1]()]))
      kept.append(tb)
    tb = tb.tb_next
  for tb, nxt in zip(kept, kept[1:] + [None]):
    tb.tb_next = nxt
  exc.__traceback__ = kept[0] if kept else None


def _called_around(tb: TracebackType, caller: TracebackType | None) -> bool:
  """``tb`` is a transformation ``call_wrapped`` would have called, by a frame not it."""
  if not _call_wrapped or caller is None:
    return False
  code, _, outermost, transformations = _call_wrapped[0]
  return (tb.tb_frame.f_code in outermost
          and caller.tb_frame.f_code is not code and caller.tb_frame.f_code not in transformations)


# ------------------------------------------------------------ the user's files

def _library_dirs() -> tuple[str, ...]:
  """Directories of code that is not the user's: the interpreter's and installed packages'."""
  import site
  import sysconfig
  found = {PACKAGE_DIR, os.path.dirname(os.path.abspath(os.__file__))}
  found.update(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib"))
  found.update(getattr(site, "getsitepackages", lambda: [])())
  found.add(getattr(site, "getusersitepackages", lambda: "")() or PACKAGE_DIR)
  return tuple(sorted(os.path.join(os.path.abspath(d), "") for d in found if d))


_LIBRARY_DIRS = _library_dirs()
_PACKAGE_PARTS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")
_is_library: dict[str, bool] = {}


def library_file(filename: str | None) -> bool:
  """Whether a file (or ``file:line``) is a library's (JAX, installed packages, Python's own)
  rather than the user's. Cached per name: call sites ask on every custom rule application."""
  if not filename:
    return False
  try:
    return _is_library[filename]
  except KeyError:
    pass
  found = _is_library[filename] = (filename.startswith(_LIBRARY_DIRS)
                                   or any(p in filename for p in _PACKAGE_PARTS))
  return found


def user_frame(traceback):
  """The innermost frame of the user's own code (JAX only skips its own files), or None."""
  if traceback is None:
    return None
  codes, lasti = traceback.raw_frames()
  for code, i in zip(codes, lasti):
    if _users(code.co_filename):
      return source_info_util.raw_frame_to_frame(code, i)
  return None


def live_user_frame(frame):
  """The innermost frame of the user's own code on the live stack from ``frame`` out, or
  None. JAX's traceback of a function jitted itself (``jax.jit(rule)``) starts at that
  function: the user's call of the jitted function is only on the live stack."""
  while frame is not None and not _users(frame.f_code.co_filename):
    frame = frame.f_back
  if frame is None:
    return None
  return source_info_util.Frame(frame.f_code.co_filename, frame.f_code.co_name,
                                frame.f_lineno, 0, frame.f_lineno, 0)


def _users(filename: str) -> bool:
  return not library_file(filename) and source_info_util.is_user_filename(filename)
