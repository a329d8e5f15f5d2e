"""Hostile or broken panel messages: fuzzed through ``comm.handle``, then sent to a real kernel.

For every message, ``handle`` returns (never raises) a reply valid against the
schema's ReplyMessage; it echoes a request_id the schema allows, else "". A
message that is not a valid request (the schema's RequestMessage, within its
x-maxBytes) is refused before anything runs: ok=False, and not with the "no
diagnosis" of a lookup. A valid one is never refused as malformed: it is
answered, or finds no diagnosis.
"""
from __future__ import annotations

import functools
import json
import math

import jax
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_helpers import DIAGNOSIS, EXAMPLES, FAIL, REPLY, REQUEST, SCHEMA, SETUP

import jupyter_vjpviz as vv
from jupyter_vjpviz.deliver import comm

DEFS = SCHEMA["definitions"]
MAX_BYTES = DEFS["RequestMessage"]["x-maxBytes"]
TOKEN = DEFS["token"]["maxLength"]
ARGS = DEFS["RequestArgs"]["properties"]
LIMIT_OF = {"request_id": TOKEN, "report_id": TOKEN, "node": DEFS["nodeId"]["maxLength"],
            "query": ARGS["query"]["maxLength"], "code": ARGS["code"]["maxLength"],
            "expanded": DEFS["nodeIds"]["maxItems"], "collapsed": DEFS["nodeId"]["maxLength"]}
"""Each limit as the schema states it (for collapsed: the length of one id)."""
NEEDS = {"history": (), "view": ("report_id",), "expand": ("report_id", "node"),
         "collapse": ("report_id", "node"), "search": ("report_id", "query"),
         "verify": ("report_id", "code"), "apply": ("report_id", "code"),
         "watch": (), "watch_nans": ("watch_id", "step"), "grads": ()}
"""The arguments each op needs (the schema's if/then rules), written out to test them."""
FUZZ = settings(deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.large_base_example])


def json_bytes(data) -> float:
  """The size the schema's x-maxBytes bounds: compact UTF-8 JSON (too deep for JSON: infinite)."""
  try:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
  except RecursionError:
    return math.inf
  return len(text.encode("utf-8", "surrogatepass"))


def valid(data) -> bool:
  """The schema's verdict. Only an invalid deep value makes jsonschema recurse (quoting it)."""
  try:
    return json_bytes(data) <= MAX_BYTES and REQUEST.is_valid(data)
  except RecursionError:
    return False


def echoed(data) -> str:
  found = data.get("request_id") if isinstance(data, dict) else None
  return found if isinstance(found, str) and len(found) <= TOKEN else ""


def check_reply(data, reply: dict) -> None:
  """The properties every reply has, whatever came in: an invalid message is refused unrun."""
  REPLY.validate(reply)
  assert reply["request_id"] == echoed(data)
  if not valid(data):
    assert reply["ok"] is False and not reply["error"].startswith("no diagnosis"), reply


# ----------------------------------------------------------------------------- strategies

def nested(depth: int):
  return functools.reduce(lambda inner, _: [inner], range(depth), "x")


scalars = (st.none() | st.booleans() | st.integers() | st.floats()
           | st.text(max_size=20))
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)
# Lengths at and just past each limit, and past the byte limit; wide and escaped characters
# make a string's JSON bytes differ from its length.
LENGTHS = sorted({n for limit in LIMIT_OF.values() for n in (limit, limit + 1)}
                 | {MAX_BYTES // 4, MAX_BYTES + 1})
big_strings = st.builds(lambda c, n: c * n, st.sampled_from(["x", "é", "🙂", "\0", '"']),
                        st.sampled_from(LENGTHS))
deep = st.integers(1, 5000).map(nested)
NODES = LIMIT_OF["expanded"]
id_lists = (st.lists(st.text(max_size=6), max_size=4)
            | st.builds(lambda n, s: [s] * n, st.sampled_from([NODES - 1, NODES, NODES + 1]),
                        st.text(max_size=3))
            | st.builds(lambda s: ["e0", s], big_strings))
protocol_words = st.sampled_from([0, 1, 1.0, 2, -1, True, False, "1", "", "request", "reply",
                                  "hello", "diagnosis", *comm.OPS, "rm -rf"]) \
    | st.builds(list) | st.builds(dict)   # fresh each draw: near_valid writes into a drawn args
hostile = json_values | big_strings | deep | id_lists | protocol_words

TOP = ("v", "type", "request_id", "op", "args")
ARG_KEYS = tuple(ARGS)
valid_requests = st.fixed_dictionaries({
    "v": st.just(1), "type": st.just("request"), "request_id": st.text(min_size=1, max_size=12),
    "op": st.sampled_from(comm.OPS),
    "args": st.fixed_dictionaries({}, optional={
        "report_id": st.text(max_size=8), "node": st.text(max_size=8),
        "query": st.text(max_size=8), "code": st.text(max_size=30),
        "expanded": st.lists(st.text(max_size=6), max_size=3),
        "collapsed": st.lists(st.text(max_size=6), max_size=3)}),
})


@st.composite
def near_valid(draw, base=valid_requests, values=hostile):
  """A valid request with up to three keys (top level or in args) set to ``values`` or deleted."""
  message = draw(base)
  for _ in range(draw(st.integers(0, 3))):
    args = message.get("args")
    inside = isinstance(args, dict) and draw(st.booleans())
    target = args if inside else message
    key = draw(st.sampled_from(ARG_KEYS if inside else TOP) | st.text(max_size=4))
    if draw(st.booleans()):
      target.pop(key, None)
    else:
      target[key] = draw(values)
  return message


# ----------------------------------------------------------------------------- in-process fuzz

@settings(FUZZ, max_examples=1500)
@given(json_values | big_strings | deep)
def test_any_json_value_gets_a_well_formed_error_reply(data):
  reply = comm.handle(data)
  check_reply(data, reply)
  assert reply["ok"] is False


@settings(FUZZ, max_examples=2500)
@given(near_valid())
def test_near_valid_requests_are_refused_exactly_when_the_schema_refuses_them(data):
  vv.clear()  # no diagnosis exists, so no request can run a view, a verify or an apply
  reply = comm.handle(data)
  check_reply(data, reply)
  if valid(data):
    assert reply["ok"] or reply["error"].startswith("no diagnosis"), reply


@pytest.fixture
def diagnosis(hook):
  """A real diagnosis (a bwd rule returning g.T inside a named scope), in the history.

  The rule comes along: the diagnosis holds it weakly.
  """
  @jax.custom_vjp
  def flip(x):
    return x * 2.0
  flip.defvjp(lambda x: (flip(x), None), lambda _, g: (g.T,))

  def model(x):
    for i in range(3):
      with jax.named_scope(f"layer{i}"):
        x = flip(jnp.tanh(x)) if i == 1 else jnp.tanh(x) * 2.0
    return x.sum()
  with pytest.raises(ValueError):
    jax.grad(model)(jnp.ones((2, 3)))
  return vv.last(), flip


def _graph_requests(d):
  """Near-valid graph requests about a live diagnosis: real ids mixed with hostile ones.

  Never verify or apply: those would run the fuzzed text as the rule's code.
  """
  ids = [n.id for n in d.graph.nodes] + ["scope:layer1", "scope:layer0", "e999"]
  real = st.sampled_from(ids)
  base = st.fixed_dictionaries({
      "v": st.just(1), "type": st.just("request"), "request_id": st.text(min_size=1, max_size=8),
      "op": st.sampled_from(("history", "view", "expand", "collapse", "search")),
      "args": st.fixed_dictionaries({"report_id": st.sampled_from([d.id, "d0"]), "node": real},
                                    optional={"query": st.text(max_size=6) | real,
                                              "expanded": st.lists(real, max_size=4),
                                              "collapsed": st.lists(real, max_size=4)})})
  mutated = near_valid(base, hostile | real | st.lists(real, max_size=4))
  return mutated.filter(lambda m: m.get("op") not in ("verify", "apply"))


def test_graph_requests_about_a_live_diagnosis(diagnosis):
  d, _ = diagnosis
  assert d.node is not None

  @settings(FUZZ, max_examples=300)
  @given(_graph_requests(d))
  def run(data):
    reply = comm.handle(data)
    check_reply(data, reply)
    if valid(data):   # answered, unless it names another diagnosis
      assert reply["ok"] or (reply["error"].startswith("no diagnosis")
                             and data["args"]["report_id"] != d.id), reply
  run()


# ----------------------------------------------------------------------------- limits, order

def _request(key: str, value) -> dict:
  """A verify request (every argument present, no diagnosis to find) with ``key`` set."""
  args = {"report_id": "d0", "node": "e0", "query": "q", "code": "", "expanded": [],
          "collapsed": []}
  message = {"v": 1, "type": "request", "request_id": "r", "op": "verify", "args": args}
  (message if key == "request_id" else args)[key] = value
  return message


SIZED = {"request_id": lambda n: "r" * n, "report_id": lambda n: "d" * n,
         "node": lambda n: "n" * n, "query": lambda n: "q" * n, "code": lambda n: "c" * n,
         "expanded": lambda n: ["e0"] * n, "collapsed": lambda n: ["x" * n]}


@pytest.mark.parametrize("key", SIZED)
def test_each_limit_is_the_schemas_to_the_character(key):
  vv.clear()
  limit = LIMIT_OF[key]
  at, over = _request(key, SIZED[key](limit)), _request(key, SIZED[key](limit + 1))
  assert valid(at) and not valid(over)
  assert comm.handle(at)["error"].startswith("no diagnosis")
  reply = comm.handle(over)
  check_reply(over, reply)
  assert str(limit) in reply["error"]


def test_the_byte_limit_counts_utf8_json():
  vv.clear()
  room = MAX_BYTES - json_bytes(_request("pad", ""))   # any extra argument counts
  at = _request("pad", "é" * (room // 2))     # two bytes each in UTF-8, one character
  over = _request("pad", "é" * (room // 2) + "xx")
  assert json_bytes(at) <= MAX_BYTES < json_bytes(over) and valid(at) and not valid(over)
  assert comm.handle(at)["error"].startswith("no diagnosis")
  assert comm.handle(over)["error"] == (f"the request is {json_bytes(over)} bytes of JSON, "
                                        f"over the limit of {MAX_BYTES}")


def test_out_of_order_messages_get_error_replies(diagnosis):
  d, _ = diagnosis
  view = lambda d_id: comm.handle({"v": 1, "type": "request", "request_id": "o1", "op": "view",
                                   "args": {"report_id": d_id}})
  not_yet = f"d{int(d.id[1:]) + 1000}"
  assert view(not_yet)["error"] == (f"no diagnosis '{not_yet}' in this kernel "
                                    "(restarted, cleared, or older than the history keeps)")
  assert view(d.id)["ok"]
  vv.clear()
  cleared = view(d.id)
  assert cleared["ok"] is False and cleared["error"].startswith(f"no diagnosis '{d.id}'")
  for stray in ({"v": 1, "type": "reply", "request_id": "o2", "ok": True, "result": None},
                {"v": 1, "type": "hello"}, {"v": 1, "type": "diagnosis", "diagnosis": d.to_dict()}):
    reply = comm.handle(stray)
    check_reply(stray, reply)
    assert "the kernel only answers requests" in reply["error"]


# ----------------------------------------------------------------------------- a real kernel

TOP_BREAKS = [("v", 0), ("v", 2), ("v", "1"), ("v", True), ("v", None), ("type", "reply"),
              ("type", "hello"), ("type", "diagnosis"), ("type", None), ("request_id", ""),
              ("request_id", 7), ("request_id", "r" * (TOKEN + 1)), ("op", "rm -rf"),
              ("op", ["view"]), ("args", []), ("args", "x")]
ARG_BREAKS = [("report_id", 5), ("report_id", "d" * (TOKEN + 1)), ("node", None),
              ("query", ["q"]), ("code", ["def f(): pass"]),
              ("code", "c" * (LIMIT_OF["code"] + 1)), ("expanded", "e0"),
              ("expanded", ["e0"] * (NODES + 1)), ("expanded", [nested(50)]),
              ("collapsed", ["x" * (LIMIT_OF["node"] + 1)]), ("pad", "x" * (MAX_BYTES + 1))]
ABSENT = {"report_id": "d999999", "node": "e0", "query": "q", "code": "def f():\n  pass\n",
          "watch_id": "w999999", "step": 0}
"""Valid arguments about a diagnosis (or a watch) that does not exist."""


def hostile_burst() -> list:
  """A few hundred messages no panel sends, each of which must get an error reply."""
  def request(op: str, **args) -> dict:
    return {"v": 1, "type": "request", "request_id": "h", "op": op,
            "args": {k: ABSENT[k] for k in NEEDS[op]} | args}
  broken = [request("view") | {key: value} for key, value in TOP_BREAKS]
  broken += [request(op, **{key: value}) for op in comm.OPS for key, value in ARG_BREAKS]
  assert not any(valid(m) for m in broken)
  out_of_order = [request(op) for op in comm.OPS if NEEDS[op]]  # valid, about no diagnosis
  garbage = [*EXAMPLES["invalid_requests"], "not an object", 5, 1.5, True, None, [1, 2],
             nested(200), {}]
  burst = (broken + out_of_order + garbage) * 3
  return [{**m, "request_id": f"h{i}"} if isinstance(m, dict) and m.get("request_id") == "h"
          else m for i, m in enumerate(burst)]


def test_a_burst_of_hostile_messages_over_a_real_comm(panel):
  assert panel.execute(SETUP)["status"] == "ok"
  comm_id = panel.control   # the comm the panel opened on hearing hello
  burst = hostile_burst()
  assert len(burst) >= 300 and any(json_bytes(m) > MAX_BYTES for m in burst)
  replies = panel.burst(comm_id, burst, timeout=300)
  for data, reply in zip(burst, replies):
    check_reply(data, reply)
    assert reply["ok"] is False, (data, reply)
    assert reply["error"].startswith(("no diagnosis", "no watch")) == valid(data), (data, reply)
  # Panel-opened comms carrying anything but a request get an error reply too.
  opens = [panel.send("comm_open", {"comm_id": f"hostile-{i}", "target_name": "vjpviz",
                                    "data": data})
           for i, data in enumerate(["x", 5, [1], {"v": 9}])]
  assert all(r["ok"] is False for r in panel.replies(opens, 60))

  # The kernel lives, and vjpviz still diagnoses and answers.
  alive = panel.execute("print('alive', 1 + 1)")
  assert alive["status"] == "ok"
  assert any("alive 2" in s.get("text", "") for s in panel.outputs("stream"))
  assert panel.execute(FAIL)["status"] == "error"
  pushed = panel.opened()[-1]["content"]
  DIAGNOSIS.validate(pushed["data"])
  d = pushed["data"]["diagnosis"]
  assert (d["function"], d["expected"], d["got"]) == ("softclip", "float32[5,3]", "float32[3,5]")
  view = panel.request(pushed["comm_id"], {"v": 1, "type": "request", "request_id": "v",
                                           "op": "view", "args": {"report_id": d["id"]}})
  assert view["ok"] and "vjpviz-node-failed" in view["result"]["svg"], view
