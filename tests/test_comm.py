"""The kernel side of the panel protocol (deliver/comm.py) against protocol.schema.json.

Unit tests call ``handle`` directly; the kernel tests start a real ipykernel
through jupyter_client and play the panel: catch the ``comm_open`` a failing
grad causes, send requests as ``comm_msg`` and read the replies.
"""
from __future__ import annotations

import time
import uuid

import jax
import jsonschema
import pytest
from kernel_helpers import DIAGNOSIS, EXAMPLES, FAIL, REPLY, REQUEST, SCHEMA, SETUP, VERIFY, validator

from jupyter_vjpviz.deliver import comm
from jupyter_vjpviz.deliver.ops.diagnoses import verify_result


VIEW = validator("View")


# ----------------------------------------------------------------------------- schema + handle

def test_schema_is_valid():
  jsonschema.Draft7Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("message", EXAMPLES["valid_requests"])
def test_schema_accepts_valid_requests(message):
  REQUEST.validate(message)


@pytest.mark.parametrize("message", EXAMPLES["invalid_requests"])
def test_malformed_requests_get_an_error_reply(message):
  assert not REQUEST.is_valid(message)
  reply = comm.handle(message)
  REPLY.validate(reply)
  assert reply["ok"] is False and reply["error"]


@pytest.mark.parametrize("message", EXAMPLES["valid_kernel_messages"])
def test_kernel_examples_match_schema(message):
  assert jsonschema.Draft7Validator(SCHEMA).is_valid(message)


def test_unknown_diagnosis_is_an_error_reply_with_the_request_id():
  reply = comm.handle({"v": 1, "type": "request", "request_id": "r9", "op": "view",
                       "args": {"report_id": "no-such"}})
  REPLY.validate(reply)
  assert reply == {"v": 1, "type": "reply", "request_id": "r9", "ok": False,
                   "error": "no diagnosis 'no-such' in this kernel "
                            "(restarted, cleared, or older than the history keeps)"}


def test_handle_never_raises_on_garbage():
  for data in (None, 1, "x", [], {}, {"v": 1}, {"v": 1, "type": "request"},
               {"v": 1, "type": "request", "request_id": 3, "op": "view", "args": {}},
               {"v": 1, "type": "request", "request_id": "r", "op": "view",
                "args": {"report_id": "d1", "expanded": "e0"}}):
    reply = comm.handle(data)
    REPLY.validate(reply)
    assert reply["ok"] is False


def test_verify_result_matches_the_schema():
  import jax.numpy as jnp
  import jupyter_vjpviz as vv
  vv.install()
  try:
    @jax.custom_vjp
    def double(x):
      return 2. * x

    def double_bwd(r, g):
      return (2. * g[:2],)
    double.defvjp(lambda x: (double(x), None), double_bwd)
    try:
      jax.grad(lambda x: double(x).sum())(jnp.ones(3))
    except ValueError:
      pass
    d = vv.last()
    still = verify_result(d, "def double_bwd(r, g):\n    return (2. * g[:1],)\n")
    fixed = verify_result(d, "def double_bwd(r, g):\n    return (2. * g,)\n")
  finally:
    vv.uninstall()
    vv.clear()
  VERIFY.validate(still)
  VERIFY.validate(fixed)
  assert still["pass"] is False and "float32[1]" in still["summary"]
  assert fixed["pass"] is True and fixed["problems"] == [] and fixed["verdict"] == "verified"
  assert fixed["summary"].startswith("the edited rule type-checks and is right: equal to the primal's")


# ----------------------------------------------------------------------------- a real kernel

FIXED = '''def softclip_bwd(res, g):
    x, w, y = res
    gy = g * (1 - y**2)
    return gy @ w.T, x.T @ gy
'''


def test_failing_grad_opens_a_comm_without_blocking(panel):
  assert panel.execute(SETUP)["status"] == "ok"
  start = time.monotonic()
  reply = panel.execute(FAIL)
  # Nobody answers the comm_open: the cell still finishes at once, with JAX's error.
  assert reply["status"] == "error" and time.monotonic() - start < 60
  opened = panel.opened()
  # %load_ext says hello on a comm it never opens; the panel answered it by opening its own,
  # and then the diagnosis came on a fresh comm.
  assert len(panel.hellos()) == 1 and panel.control is not None
  assert [m["content"]["data"]["type"] for m in opened] == ["diagnosis"]
  data = opened[0]["content"]["data"]
  DIAGNOSIS.validate(data)
  d = data["diagnosis"]
  assert (d["kind"], d["function"], d["path"], d["expected"], d["got"]) == (
      "bwd_type", "softclip", "[1]", "float32[5,3]", "float32[3,5]")
  assert "def softclip_bwd" in d["rule_source_text"]
  bad = d["rule_source_text"].splitlines()[d["rule_source_bad_line"] - d["rule_source_start"]]
  assert "return gy @ w.T, (x.T @ gy).T" in bad


def test_requests_get_replies_on_the_push_comm(panel):
  comm_id = panel.opened()[-1]["content"]["comm_id"]
  d_id = panel.opened()[-1]["content"]["data"]["diagnosis"]["id"]

  reply = panel.request(comm_id, {"v": 1, "type": "request", "request_id": "v1", "op": "view",
                                  "args": {"report_id": d_id}})
  REPLY.validate(reply)
  assert reply["ok"], reply
  VIEW.validate(reply["result"])
  assert "vjpviz-node-failed" in reply["result"]["svg"]

  reply = panel.request(comm_id, {"v": 1, "type": "request", "request_id": "s1", "op": "search",
                                  "args": {"report_id": d_id, "query": "softclip"}})
  assert reply["ok"] and reply["result"]["matches"], reply

  reply = panel.request(comm_id, {"v": 1, "type": "request", "request_id": "f1", "op": "verify",
                                  "args": {"report_id": d_id, "code": FIXED}})
  REPLY.validate(reply)
  assert reply["ok"] and reply["result"]["pass"] is True, reply
  VERIFY.validate(reply["result"])

  reply = panel.request(comm_id, {"v": 1, "type": "request", "request_id": "f2", "op": "verify",
                                  "args": {"report_id": d_id,
                                           "code": FIXED.replace("x.T @ gy", "(x.T @ gy).T")}})
  assert reply["ok"] and reply["result"]["pass"] is False, reply


def test_malformed_message_gets_an_error_reply_and_the_kernel_lives(panel):
  comm_id = panel.opened()[-1]["content"]["comm_id"]
  for data in ({"v": 1, "type": "request", "request_id": "m1", "op": "rm -rf", "args": {}},
               {"v": 7}, "not an object"):
    reply = panel.request(comm_id, data)
    REPLY.validate(reply)
    assert reply["ok"] is False and reply["error"]
  assert panel.execute("print(1 + 1)")["status"] == "ok"


def test_panel_opened_comm_gets_the_history_and_listening_is_set(panel):
  comm_id = uuid.uuid4().hex
  msg_id = panel.send("comm_open", {"comm_id": comm_id, "target_name": "vjpviz",
                                    "data": {"v": 1, "type": "request", "request_id": "h1",
                                             "op": "history", "args": {}}})
  (reply,) = panel.replies([msg_id], 30)
  REPLY.validate(reply)
  assert reply["request_id"] == "h1" and reply["ok"]
  assert [d["function"] for d in reply["result"]["diagnoses"]] == ["softclip"]
  out = panel.execute("from jupyter_vjpviz.deliver import comm as _c; print('LISTENING', _c.listening())")
  assert out["status"] == "ok"
  text = "".join(m["content"].get("text", "") for m in panel.iopub if m["msg_type"] == "stream")
  assert "LISTENING True" in text


def test_apply_rebinds_the_rule(panel):
  comm_id = panel.opened()[-1]["content"]["comm_id"]
  d_id = panel.opened()[-1]["content"]["data"]["diagnosis"]["id"]
  reply = panel.request(comm_id, {"v": 1, "type": "request", "request_id": "a1", "op": "apply",
                                  "args": {"report_id": d_id, "code": FIXED}})
  assert reply["ok"] and reply["result"]["applied"] is True, reply
  assert panel.execute(FAIL)["status"] == "ok"


def test_each_push_opens_a_fresh_comm(panel):
  before = len(panel.opened())
  panel.execute('''
@jax.custom_vjp
def other(x):
    return x
other.defvjp(lambda x: (x, None), lambda r, g: (g[:1],))
try:
    jax.grad(lambda x: other(x).sum())(jnp.ones(3))
except Exception:
    pass
''')
  opened = panel.opened()
  assert len(opened) == before + 1
  assert opened[-1]["content"]["comm_id"] != opened[-2]["content"]["comm_id"]
  closed = [m["content"]["comm_id"] for m in panel.iopub if m["msg_type"] == "comm_close"]
  assert opened[-2]["content"]["comm_id"] in closed


def test_a_loop_failing_every_step_pushes_a_bounded_number_of_diagnoses(panel):
  from jupyter_vjpviz.deliver.ipython import SHOWN_PER_CELL
  loop = """
for step in range({n}):
    try:
        jax.grad(lambda x: other(x).sum())(jnp.ones(3))
    except Exception:
        pass
"""
  for n in (SHOWN_PER_CELL + 15, 3):             # the bound is per cell
    before = len(panel.opened())
    panel.execute(loop.format(n=n))
    assert len(panel.opened()) - before == min(n, SHOWN_PER_CELL)


# ----------------------------------------------------------------------------- inline widgets

def test_inline_widget_sanitizes_and_verifies():
  widgets = pytest.importorskip("jupyter_vjpviz.deliver.widgets")
  pytest.importorskip("ipywidgets")
  svg = ('<svg><script>alert(1)</script><g onclick="alert(2)"><a xlink:href="javascript:alert(3)">'
         '<text>x</text></a></g><foreignObject><div/></foreignObject></svg>')
  clean = widgets.sanitize_svg(svg)
  assert "script" not in clean and "onclick" not in clean and "javascript" not in clean
  assert "foreignObject" not in clean and "<text>x</text>" in clean

  import jupyter_vjpviz as v

  ns: dict = {}
  exec(compile(SETUP.replace("%load_ext vjpviz\n", ""), "<vjpviz-test>", "exec"), ns)
  v.install()
  try:
    with pytest.raises(Exception):
      jax.grad(lambda x, w: ns["softclip"](x, w).sum(), argnums=(0, 1))(ns["x"], ns["w"])
    d = v.last()
    box = widgets.fallback(d)
    view = next(c for c in box.children if hasattr(c, "value") and "softclip" in str(c.value))
    assert "float32[3,5]" in view.value
    widget = widgets.DiagnosisWidget(d, __import__("ipywidgets"))
    widget.editor.value = FIXED
    widget._verify()
    assert "data-vjpviz-verify='pass'" in widget.result.value, widget.result.value
  finally:
    v.uninstall()


def test_verify_of_code_that_does_not_parse_is_a_plain_fail():
  out = verify_result(None, "def softclip_bwd(res, g:\n    return")
  VERIFY.validate(out)
  assert out["pass"] is False and out["problems"] == []
  assert out["summary"].startswith("the code does not parse:") and "(line 1)" in out["summary"]


# ----------------------------------------------------------------------------- one schema

def test_the_kernel_runs_exactly_the_schemas_ops():
  assert comm.OPS == tuple(SCHEMA["definitions"]["RequestMessage"]["properties"]["op"]["enum"])


BROKEN = [
    ({"v": 2}, "unsupported vjpviz protocol version 2 (expected 1)"),
    ({"v": True}, "unsupported vjpviz protocol version True (expected 1)"),
    ({"type": "reply"}, "expected a message of type 'request', got 'reply'"),
    ({"request_id": ""}, "a request needs a 'request_id' string of 1 to 256 characters"),
    ({"op": "rm -rf"}, "unknown op 'rm -rf' (known: history, view"),
    ({"args": []}, "a request needs an object 'args'"),
    ({"args": {"report_id": "d1", "expanded": ["e0", 3]}}, "args.expanded[1] must be a string"),
    ({"args": {"report_id": "d1", "expanded": ["e0"] * 1001}},
     "args.expanded has 1001 items, over the limit of 1000"),
    ({"args": {"report_id": "d" * 300}}, "args.report_id is 300 characters long, over the limit of 256"),
    ({"args": {"expanded": "e0"}}, "args.expanded must be a list"),   # before the missing id
    ({"args": {}}, "op 'view' needs args.report_id"),
]


@pytest.mark.parametrize("change, error", BROKEN)
def test_a_schema_violation_is_named_in_plain_words(change, error):
  message = {"v": 1, "type": "request", "request_id": "r", "op": "view",
             "args": {"report_id": "d1"}} | change
  assert not REQUEST.is_valid(message)
  reply = comm.handle(message)
  assert reply["ok"] is False and reply["error"].startswith(error), reply["error"]


def test_a_missing_top_level_key_is_named_in_the_schemas_order():
  assert comm.handle({"type": "request"})["error"].startswith("unsupported vjpviz protocol version None")
  assert comm.handle({"v": 1, "type": "request", "request_id": "r", "op": "view"})["error"] == (
      "a request needs an object 'args'")


# ----------------------------------------------------------------------------- the rule's source

def _branching_diagnosis():
  """A bwd rule whose first return (the branch taken) is wrong and whose last one is right."""
  import jax.numpy as jnp
  import jupyter_vjpviz as vv

  @jax.custom_vjp
  def double(x):
    return 2. * x

  def double_bwd(r, g):
    if g.ndim == 1:
      return (2. * g[:2],)
    return (2. * g,)
  double.defvjp(lambda x: (double(x), None), double_bwd)
  vv.install()
  try:
    with pytest.raises(ValueError):
      jax.grad(lambda x: double(x).sum())(jnp.ones(3))
    return vv.last(), double
  finally:
    vv.uninstall()


def test_the_failing_return_is_the_one_that_ran_not_the_last():
  d, _keep = _branching_diagnosis()
  out = d.to_dict()
  DIAGNOSIS.validate({"v": 1, "type": "diagnosis", "diagnosis": out})
  lines = out["rule_source_text"].splitlines()
  assert lines[0].strip() == "def double_bwd(r, g):"
  assert lines[-1].strip() == "return (2. * g,)"
  assert out["rule_source_end"] - out["rule_source_start"] == len(lines) - 1
  assert lines[out["rule_source_bad_line"] - out["rule_source_start"]].strip() == (
      "return (2. * g[:2],)")
