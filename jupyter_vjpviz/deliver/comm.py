"""The kernel side of the panel protocol (jupyter_vjpviz/protocol.schema.json).

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
and each gets exactly one reply on the comm it came in on. Malformed requests
and failing operations become error replies; nothing raises into the kernel.

Nothing here blocks: with no frontend listening, comm_open messages simply go
unanswered.
"""
from __future__ import annotations

import functools
import json
import reprlib
import traceback
from importlib import resources
from typing import Any
from collections.abc import Callable

from .. import pipeline
from ..grads import add_listener as add_grads_listener
from ..grads import remove_listener as remove_grads_listener
from ..grads import reports as grads_reports
from ..watch import add_listener as add_watch_listener
from ..watch import remove_listener as remove_watch_listener
from ..watch import watches
from ..analysis import oracle
from ..analysis.diagnosis import TYPE_ONLY, UNVERIFIABLE, VERIFIED
from ..base.safety import safely
from ..check import apply_fix, check
from ..fixes import verify as fix_verify
from ..render import grads_view, svg, views

TARGET = "vjpviz"
SCHEMA = json.loads((resources.files("jupyter_vjpviz") / "protocol.schema.json")
                    .read_text("utf-8"))
"""The protocol, written once: requests are validated against it, and the panel's
types and validators are generated from it (scripts/protocol-codegen.js)."""
_DEFS = SCHEMA["definitions"]
VERSION = _DEFS["version"]["const"]
LIMITS = {"bytes": _DEFS["RequestMessage"]["x-maxBytes"], "token": _DEFS["token"]["maxLength"]}
"""What is checked besides the schema: a request's size as UTF-8 JSON (JSON Schema
cannot express it), and the longest request_id a reply echoes."""
_TOP = tuple(_DEFS["RequestMessage"]["required"])   # the order problems are reported in

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
  """Open a fresh comm carrying ``d`` and its default view, drawn (the panel shows its
  graph at once: a request would wait until the kernel is idle); close the previous one.
  Nothing while no panel listens: the history keeps ``d`` for one that comes later."""
  if not _state["listening"]:
    return
  message = {"v": VERSION, "type": "diagnosis", "diagnosis": d.to_dict()}
  view = safely(lambda: _render_view(d, views.default_view(d.graph, d.node)))
  _open_push_comm(message if view is None else {**message, "view": view})


def push_watch(watched) -> None:
  """A ``vv.watch``'s series landed so far (watch.py ``Watched.series``) to a listening
  panel, on a fresh comm."""
  if _state["listening"]:
    series = watched.series(watched.landed())
    _open_push_comm({"v": VERSION, "type": "watch", "watch": series})


def push_grads(report) -> None:
  """A ``vv.grads`` report, with its default view drawn, to a listening panel."""
  if _state["listening"]:
    message = {"v": VERSION, "type": "grads", "grads": grads_message(report)}
    view = safely(lambda: _render_view(report, views.default_view(report.graph, report.node)))
    _open_push_comm(message if view is None else {**message, "view": view})


def grads_message(report) -> dict:
  """The schema's GradReport: ``to_dict()`` with its headline, without the per-leaf norms
  (thousands in a large model), its lists capped as the schema says."""
  found = {k: v for k, v in report.to_dict().items() if k != "leaves"}
  for key in ("zero", "partly_zero", "layers"):
    found[key] = found[key][:_GRADS_ITEMS[key]]
  return {**found, "headline": grads_view.headline(report)}


_GRADS_ITEMS = {k: _DEFS["GradReport"]["properties"][k]["maxItems"]
                for k in ("zero", "partly_zero", "layers")}


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
    safely(c.send, _error(reply.get("request_id", ""), "reply could not be serialised"))


# --------------------------------------------------------------------------- requests

def handle(data: Any) -> dict:
  """The reply to one panel message; never raises."""
  request_id = _request_id(data)
  try:
    problem = _malformed(data)
    if problem:
      return _error(request_id, problem)
    result = _OPS[data["op"]](data["args"])
    return {"v": VERSION, "type": "reply", "request_id": request_id, "ok": True,
            "result": result}
  except _Refused as e:
    return _error(request_id, str(e))
  except Exception as e:  # the kernel must never see an exception from the panel
    return _error(request_id, f"{type(e).__name__}: {e}",
                  "".join(traceback.format_exception(e)[-3:]))


class _Refused(Exception):
  pass


def _request_id(data: Any) -> str:
  """What the reply echoes: the request's id when it is one the panel could have made.

  An oversized id is not echoed, so an error reply never amplifies hostile input.
  """
  found = data.get("request_id") if isinstance(data, dict) else None
  return found if isinstance(found, str) and len(found) <= LIMITS["token"] else ""


def _error(request_id: str, message: str, detail: str | None = None) -> dict:
  reply = {"v": VERSION, "type": "reply", "request_id": request_id, "ok": False,
           "error": message}
  if detail:
    reply["result"] = {"traceback": detail}
  return reply


def _short(value: Any) -> str:
  """Quote a value in an error message without echoing a huge one back."""
  quote = reprlib.Repr()   # its keyword arguments are Python 3.12's
  quote.maxstring = quote.maxother = 40
  return quote.repr(value)


def _malformed(data: Any) -> str | None:
  """What makes ``data`` not a request this kernel runs (the schema's RequestMessage), or None."""
  if not isinstance(data, dict):
    return f"a vjpviz request must be a JSON object, got {type(data).__name__}"
  size = _json_bytes(data)
  if size is None:
    return _NOT_JSON
  if size > LIMITS["bytes"]:
    return f"the request is {size} bytes of JSON, over the limit of {LIMITS['bytes']}"
  try:
    errors = list(_request_validator().iter_errors(data))
  except RecursionError:
    return _NOT_JSON
  return _explain(min(errors, key=_reported_first), data) if errors else None


_NOT_JSON = "a vjpviz request must be plain JSON (nested too deeply, or not JSON at all)"


@functools.cache
def _request_validator():
  """The schema's RequestMessage as a validator (jsonschema is imported on the first request)."""
  import jsonschema
  return jsonschema.Draft7Validator({**_DEFS["RequestMessage"], "definitions": _DEFS})


def _json_bytes(data: Any) -> int | None:
  """Size of ``data`` as compact UTF-8 JSON, as the panel's JSON.stringify sends it."""
  try:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
  except (TypeError, ValueError, RecursionError):
    return None
  return len(text.encode("utf-8", "surrogatepass"))


def _reported_first(error) -> tuple:
  """Problems in the order a reader fixes them: top-level keys in the schema's order, and
  within args a wrong or oversized argument before a missing one."""
  path = list(error.absolute_path) or _missing(error)[:1]
  top = _TOP.index(path[0]) if path and path[0] in _TOP else len(_TOP)
  return top, error.validator == "required", [str(p) for p in path]


def _missing(error) -> list[str]:
  return [k for k in error.validator_value if k not in error.instance] \
      if error.validator == "required" else []


def _explain(error, data: dict) -> str:
  """One schema violation in words, quoting the input only briefly."""
  path = list(error.absolute_path) or _missing(error)[:1]
  top = path[0] if path else None
  if top == "v":
    return f"unsupported vjpviz protocol version {_short(data.get('v'))} (expected {VERSION})"
  if top == "type":
    return (f"expected a message of type 'request', got {_short(data.get('type'))}: "
            "the kernel only answers requests")
  if top == "request_id":
    return f"a request needs a 'request_id' string of 1 to {LIMITS['token']} characters"
  if top == "op":
    return f"unknown op {_short(data.get('op'))} (known: {', '.join(OPS)})"
  if top == "args" and (not error.absolute_path or error.validator == "type" and path == ["args"]):
    return "a request needs an object 'args'"
  if error.validator == "required":
    return f"op {data['op']!r} needs args.{_missing(error)[0]}"
  name = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)[1:]
  value, limit = error.instance, error.validator_value
  if error.validator == "type":
    return f"{name} must be {_TYPE_WORDS.get(limit, limit)}"
  if error.validator == "maxLength":
    return f"{name} is {len(value)} characters long, over the limit of {limit}"
  if error.validator == "maxItems":
    return f"{name} has {len(value)} items, over the limit of {limit}"
  return f"{name} breaks the protocol's {error.validator!r} rule"


_TYPE_WORDS = {"string": "a string", "array": "a list", "object": "an object",
               "integer": "an integer", "boolean": "true or false"}


def _diagnosis(args: dict):
  wanted = args["diagnosis_id"]
  for d in pipeline.history():
    if d.id == wanted:
      return d
  raise _Refused(f"no diagnosis {wanted!r} in this kernel (restarted, cleared, "
                 "or older than the history keeps)")


def _graphed(args: dict):
  """What a view op's ``diagnosis_id`` names: a diagnosis, or a ``vv.grads`` report
  (both have a ``graph`` and the ``node`` its default view centres on)."""
  wanted = args["diagnosis_id"]
  found = next((r for r in grads_reports() if r.id == wanted), None)
  return found if found is not None else _diagnosis(args)


def _op_history(args: dict) -> dict:
  return {"diagnoses": [d.to_dict() for d in pipeline.history()]}


def _op_verify(args: dict) -> dict:
  return verify_result(_diagnosis(args), args["code"])


def verify_result(d, code: str) -> dict:
  """verify_fix as {pass, summary, problems, verdict} (also used by the inline widgets).

  ``verdict`` says what the values are worth once the types are right: "verified"
  (equal to the primal's derivative), "type-only" (the bwd_value one of its problems
  has the per-leaf errors) or "unverifiable" (``note`` says why).
  """
  try:
    compile(code, "<vjpviz fix>", "exec")
  except SyntaxError as err:
    where = f" (line {err.lineno})" if err.lineno else ""
    return {"pass": False, "summary": f"the code does not parse: {err.msg}{where}", "problems": []}
  outcome = fix_verify.checked(d, code, check)
  problems = [_problem(x) for x in outcome.problems]
  if outcome.verdict is None:
    return {"pass": False, "summary": "; ".join(p["headline"] for p in problems),
            "problems": problems}
  verdict = _VERDICTS.get(outcome.verdict.status, UNVERIFIABLE)
  summary = {VERIFIED: f"the edited rule type-checks and is right: {outcome.verdict.reason}",
             TYPE_ONLY: "; ".join(p["headline"] for p in problems),
             UNVERIFIABLE: "the edited rule type-checks at the failing call's types; its "
                             f"values were not judged: {outcome.verdict.reason}"}[verdict]
  return {"pass": not problems, "summary": summary, "problems": problems, "verdict": verdict,
          "note": outcome.verdict.reason}


_VERDICTS = {oracle.RIGHT: VERIFIED, oracle.WRONG: TYPE_ONLY}


def _problem(d) -> dict:
  found = {k: getattr(d, k) for k in ("id", "kind", "headline", "path", "expected", "got")}
  if d.leaf_errors:
    found["leaf_errors"] = [l.to_dict() for l in d.leaf_errors]
  return found


def _op_apply(args: dict) -> dict:
  result = apply_fix(_diagnosis(args), args["code"])
  return {"applied": result.applied, "problems": [_problem(x) for x in result.problems],
          "patch": result.patch, "path": result.path}


# ---- graph views: render.views + render.svg (an error reply when they are missing)

def _op_view(args: dict) -> dict:
  d, view = _requested_view(args)
  return _render_view(d, view)


def _op_expand(args: dict) -> dict:
  d, view = _requested_view(args)
  return _render_view(d, views.expand(view, args["node"]))


def _op_collapse(args: dict) -> dict:
  d, view = _requested_view(args)
  return _render_view(d, views.collapse(view, args["node"]))


def _op_search(args: dict) -> dict:
  d, view = _requested_view(args)
  matches = list(views.search(d.graph, args["query"]))
  for m in matches[:3]:  # open clusters until the first hits are drawn as themselves
    view = views.reveal(view, m)
  return {"matches": matches, "view": _render_view(d, view)}


def _requested_view(args: dict):
  """The diagnosis (or grads report) asked about, and its view with the panel's opened
  and closed boxes."""
  d = _graphed(args)
  return d, views.default_view(d.graph, d.node, expanded=frozenset(args.get("expanded", [])),
                               collapsed=frozenset(args.get("collapsed", [])))


def _render_view(d, view) -> dict:
  return {"svg": svg.of_view(view), "expanded": sorted(view.expanded),
          "collapsed": sorted(view.collapsed), "failed_node": d.node,
          "shown": len(view.nodes) + sum(len(c.members) for c in view.clusters),
          "total": len(d.graph.nodes), "boxes": view.size}


def _op_grads(args: dict) -> dict:
  return {"reports": [grads_message(r) for r in grads_reports()]}


# ---- vv.watch: the series, and vv.nans on a watched step's kept call

def _op_watch(args: dict) -> dict:
  return {"watches": [w.series() for w in watches()]}


def _op_watch_nans(args: dict) -> dict:
  w = next((w for w in watches() if w.id == args["watch_id"]), None)
  if w is None:
    raise _Refused(f"no watch {args['watch_id']!r} in this kernel (restarted, or collected)")
  try:
    d = w.nans(args["step"])
  except ValueError as e:
    raise _Refused(str(e)) from None
  if d is None:
    return {"summary": f"step {args['step']}: the gradient is finite", "diagnosis": None}
  pipeline.remember(d)
  return {"summary": d.headline, "diagnosis": d.to_dict()}


_OPS: dict[str, Callable[[dict], Any]] = {
    "history": _op_history, "view": _op_view, "expand": _op_expand,
    "collapse": _op_collapse, "search": _op_search, "verify": _op_verify, "apply": _op_apply,
    "watch": _op_watch, "watch_nans": _op_watch_nans, "grads": _op_grads,
}
OPS = tuple(_OPS)
