"""A panel's request checked against the protocol schema, and what is wrong with it in words.

The schema (``protocol.schema.json``) is the one place the protocol is written: the kernel
validates every request against it with jsonschema here, and the panel's types and
validators are generated from it (scripts/protocol-codegen.js). A request the schema
refuses, or one an op cannot answer (``Refused``), becomes an error reply that says what
to change, quoting the input only briefly so a reply never amplifies hostile input.
"""
from __future__ import annotations

import functools
import json
import reprlib
from importlib import resources
from typing import Any

SCHEMA = json.loads((resources.files("jupyter_vjpviz") / "protocol.schema.json")
                    .read_text("utf-8"))
DEFS = SCHEMA["definitions"]
VERSION = DEFS["version"]["const"]
LIMITS = {"bytes": DEFS["RequestMessage"]["x-maxBytes"], "token": DEFS["token"]["maxLength"]}
"""What is checked besides the schema: a request's size as UTF-8 JSON (JSON Schema
cannot express it), and the longest request_id a reply echoes."""
_KNOWN_OPS = DEFS["RequestMessage"]["properties"]["op"]["enum"]
_TOP = tuple(DEFS["RequestMessage"]["required"])   # the order problems are reported in


class Refused(Exception):
  """A valid request an op cannot answer (an id this kernel does not keep): its message is
  the error reply, without a traceback."""


def request_id(data: Any) -> str:
  """What the reply echoes: the request's id when it is one the panel could have made.

  An oversized id is not echoed, so an error reply never amplifies hostile input.
  """
  found = data.get("request_id") if isinstance(data, dict) else None
  return found if isinstance(found, str) and len(found) <= LIMITS["token"] else ""


def error_reply(request_id: str, message: str, detail: str | None = None) -> dict:
  """The schema's failed ReplyMessage; ``detail`` (a traceback's tail) goes in its result."""
  reply = {"v": VERSION, "type": "reply", "request_id": request_id, "ok": False,
           "error": message}
  if detail:
    reply["result"] = {"traceback": detail}
  return reply


def malformed(data: Any) -> str | None:
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
  return jsonschema.Draft7Validator({**DEFS["RequestMessage"], "definitions": DEFS})


def _json_bytes(data: Any) -> int | None:
  """Size of ``data`` as compact UTF-8 JSON, as the panel's JSON.stringify sends it."""
  try:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
  except (TypeError, ValueError, RecursionError):
    return None
  return len(text.encode("utf-8", "surrogatepass"))


def _short(value: Any) -> str:
  """Quote a value in an error message without echoing a huge one back."""
  quote = reprlib.Repr()   # its keyword arguments are Python 3.12's
  quote.maxstring = quote.maxother = 40
  return quote.repr(value)


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
    return f"unknown op {_short(data.get('op'))} (known: {', '.join(_KNOWN_OPS)})"
  if top == "args" and (not error.absolute_path or error.validator == "type" and path == ["args"]):
    return "a request needs an object 'args'"
  if error.validator == "required":
    return f"op {data['op']!r} needs args.{_missing(error)[0]}"
  return _explain_argument(error, path)


def _explain_argument(error, path: list) -> str:
  """An argument of the wrong type or over its limit, named by its path (``args.expanded[1]``)."""
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
