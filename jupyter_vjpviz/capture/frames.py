"""Keep vjpviz's own frames out of the user's traceback.

The user's exception must read as it would without vjpviz. Our wrappers sit on
the call path, so an exception passing through them carries their frames; as
it leaves our code we unlink them (``tb_next`` is writable), so even the
"skipping hidden N frames" count IPython prints stays the same.
"""
from __future__ import annotations

import os
from types import TracebackType

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ours(tb: TracebackType) -> bool:
  return tb.tb_frame.f_code.co_filename.startswith(PACKAGE_DIR + os.sep)


def strip(exc: BaseException) -> None:
  """Remove our frames from ``exc``'s traceback, in place."""
  head = tb = exc.__traceback__
  while head is not None and _ours(head):
    head = head.tb_next
  tb = head
  while tb is not None:
    nxt = tb.tb_next
    while nxt is not None and _ours(nxt):
      nxt = nxt.tb_next
    tb.tb_next = nxt
    tb = nxt
  exc.__traceback__ = head
