"""The kernel's end of the comm to the panel: its lifecycle, what it pushes, and the
dispatch of each request to its op (the protocol: jupyter_vjpviz/protocol.schema.json).

Kernel -> panel: ``%load_ext`` says hello on a comm it never opens (see ``_say_hello``); a
panel answers by opening its own comm, and only from then on (``listening()``) is each
diagnosis the IPython delivery shows pushed on a FRESH comm opened on the ``vjpviz``
target (data = the diagnosis message); the previous push comm is closed. A frontend
without a panel (nbconvert, JupyterLab without the extension) is never sent a comm it
has no handler for; a panel that comes later asks for the history. A long-lived comm
goes stale after a page reload (the new page never saw its id), so nothing here keeps
one for pushing.

Panel -> kernel: requests arrive as comm messages on any vjpviz comm (a push
comm, or one the panel opened itself to ask for the history after a reload)
and each gets exactly one reply on the comm it came in on. ``requests`` checks them
against the schema and words what is wrong; ``ops`` answers them, one module per panel
feature. Malformed requests and failing operations become error replies; nothing raises
into the kernel.

Nothing here blocks: with no frontend listening, comm_open messages simply go
unanswered.
"""
from __future__ import annotations

import traceback
from typing import Any

from ..api.grads import add_listener as add_grads_listener
from ..api.grads import remove_listener as remove_grads_listener
from ..api.watch import add_listener as add_watch_listener
from ..api.watch import remove_listener as remove_watch_listener
from ..base.safety import safely
from ..render import views
from .ops import HANDLERS
from .ops.graphs import drawn
from .ops.grads import grads_message
from .requests import VERSION, Refused, error_reply, malformed, request_id

TARGET = "vjpviz"
OPS = tuple(HANDLERS)
"""The ops a panel may ask for, in the schema's order."""

_state = {"registered": False, "listening": False, "push_comm": None}


# --------------------------------------------------------------------------- lifecycle

def register() -> None:
  """Start pushing diagnoses and answering panel requests (from ``%load_ext vjpviz``)."""
  if not _state["registered"]:
    manager = _comm_manager()
    if manager is not None:
      manager.register_target(TARGET, _on_panel_open)
    add_watch_listener(push_watch)
    add_grads_listener(push_grads)
    _state["registered"] = True
  safely(_say_hello)


def _say_hello() -> None:
  """Tell a panel that vjpviz is loaded, as a message on a comm never opened: a frontend drops
  a message to a comm id it does not know, unread and unlogged, so only a panel, which reads
  it off the kernel's iopub, hears it (a comm_open would make every other frontend complain
  that it has no handler for the target)."""
  import comm
  hello = comm.create_comm(target_name=TARGET, primary=False)
  hello.send({"v": VERSION, "type": "hello"})
  hello._closed = True   # never opened, so never closed (a comm closes itself when collected)


def unregister() -> None:
  if _state["registered"]:
    manager = _comm_manager()
    if manager is not None:
      safely(manager.unregister_target, TARGET, _on_panel_open)
    remove_watch_listener(push_watch)
    remove_grads_listener(push_grads)
    _state["registered"] = False
  _close_push_comm()


def listening() -> bool:
  """True once a panel has sent any message to this kernel."""
  return _state["listening"]


def _comm_manager():
  try:
    import comm
    manager = comm.get_comm_manager()
  except Exception:
    return None
  return manager if hasattr(manager, "register_target") else None


# --------------------------------------------------------------------------- pushing

def push(d) -> None:
  """Open a fresh comm carrying ``d`` and its default view, drawn; close the previous one.
  Nothing while no panel listens: the history keeps ``d`` for one that comes later."""
  if _state["listening"]:
    _open_push_comm(_with_view({"v": VERSION, "type": "diagnosis", "diagnosis": d.to_dict()}, d))


def push_watch(watched) -> None:
  """A ``vv.watch``'s series landed so far (watch.py ``Watched.series``) to a listening
  panel, on a fresh comm."""
  if _state["listening"]:
    series = watched.series(watched.landed())
    _open_push_comm({"v": VERSION, "type": "watch", "watch": series})


def push_grads(report) -> None:
  """A ``vv.grads`` report, with its default view drawn, to a listening panel."""
  if _state["listening"]:
    _open_push_comm(_with_view({"v": VERSION, "type": "grads", "grads": grads_message(report)},
                               report))


def _with_view(message: dict, subject) -> dict:
  """``message`` with its subject's default view, drawn (the panel shows the graph at once: a
  request would wait until the kernel is idle); without it when drawing fails."""
  view = safely(lambda: drawn(subject, views.default_view(subject.graph, subject.node)))
  return message if view is None else {**message, "view": view}


def _open_push_comm(message: dict) -> None:
  import comm
  new = comm.create_comm(target_name=TARGET, data=message)
  _attach(new)
  _close_push_comm()
  _state["push_comm"] = new


def _close_push_comm() -> None:
  old, _state["push_comm"] = _state["push_comm"], None
  if old is not None:
    safely(old.close)


def _attach(c) -> None:
  on_msg = getattr(c, "on_msg", None)
  if on_msg is not None:
    on_msg(lambda msg, c=c: _on_comm_msg(c, msg))


def _on_panel_open(c, open_msg) -> None:
  _state["listening"] = True
  _attach(c)
  data = (open_msg.get("content") or {}).get("data") if isinstance(open_msg, dict) else None
  if data not in (None, {}):  # an open carrying anything but "no request" gets its reply
    _reply_on(c, data)


def _on_comm_msg(c, msg) -> None:
  _state["listening"] = True
  data = (msg.get("content") or {}).get("data") if isinstance(msg, dict) else None
  _reply_on(c, data)


def _reply_on(c, data) -> None:
  reply = handle(data)
  try:
    c.send(reply)
  except Exception:  # an unserialisable result: still answer
    safely(c.send, error_reply(reply.get("request_id", ""), "reply could not be serialised"))


# --------------------------------------------------------------------------- requests

def handle(data: Any) -> dict:
  """The reply to one panel message; never raises."""
  rid = request_id(data)
  try:
    problem = malformed(data)
    if problem:
      return error_reply(rid, problem)
    result = HANDLERS[data["op"]](data["args"])
    return {"v": VERSION, "type": "reply", "request_id": rid, "ok": True, "result": result}
  except Refused as e:
    return error_reply(rid, str(e))
  except Exception as e:  # the kernel must never see an exception from the panel
    return error_reply(rid, f"{type(e).__name__}: {e}",
                       "".join(traceback.format_exception(e)[-3:]))
