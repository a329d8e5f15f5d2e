"""The panel's side of the protocol, for the tests playing it (test_comm*, test_hostile_names).

Validators for protocol.schema.json's definitions, and a real ipykernel:
``panel`` starts one per test module through jupyter_client; ``Panel``
executes cells, reads iopub, and sends comm messages as the JupyterLab panel
does, matching each reply to its message by parent header.
"""
from __future__ import annotations

import json
import os
import queue
import time
import uuid
from pathlib import Path

import jsonschema
import pytest
import softclip

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "jupyter_vjpviz" / "protocol.schema.json").read_text())
EXAMPLES = json.loads((ROOT / "src" / "__tests__" / "protocol-examples.json").read_text())


def validator(definition: str) -> jsonschema.Draft7Validator:
  """A validator for one of the schema's definitions."""
  schema = {**SCHEMA, "$ref": f"#/definitions/{definition}"}
  schema.pop("oneOf")
  return jsonschema.Draft7Validator(schema)


REQUEST = validator("RequestMessage")
REPLY = validator("ReplyMessage")
DIAGNOSIS = validator("DiagnosisMessage")
VERIFY = validator("VerifyResult")

SETUP = "%load_ext vjpviz\n" + softclip.SOURCE + "x = jnp.ones((4, 5)); w = jnp.ones((5, 3))\n"
"""A cell loading vjpviz and defining softclip with its broken rule, and its inputs."""
FAIL = softclip.GRAD


class Panel:
  """The panel's side of the comm, over jupyter_client."""

  def __init__(self, kc):
    self.kc = kc
    self.iopub: list[dict] = []
    self.control: str | None = None
    """The id of the comm the panel opened itself, once it heard the kernel's hello."""

  def execute(self, code: str, timeout: float = 120) -> dict:
    msg_id = self.kc.execute(code)
    reply = self.kc.get_shell_msg(timeout=timeout)
    while reply["parent_header"].get("msg_id") != msg_id:
      reply = self.kc.get_shell_msg(timeout=timeout)
    start = len(self.iopub)
    self._drain_until_idle(msg_id, timeout)
    if self.control is None and any(_is_hello(m) for m in self.iopub[start:]):
      self.open_control()
    return reply["content"]

  def open_control(self) -> dict:
    """Answer a hello as the panel does: open a comm asking for the history (the kernel
    pushes diagnoses from then on); its reply."""
    self.control = uuid.uuid4().hex
    msg_id = self.send("comm_open", {"comm_id": self.control, "target_name": "vjpviz",
                                     "data": {"v": 1, "type": "request", "request_id": "hello",
                                              "op": "history", "args": {}}})
    return self.replies([msg_id], 60)[0]

  def hellos(self) -> list[dict]:
    return [m for m in self.iopub if _is_hello(m)]

  def _drain_until_idle(self, msg_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      msg = self.kc.get_iopub_msg(timeout=timeout)
      self.iopub.append(msg)
      if (msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"
          and msg["parent_header"].get("msg_id") == msg_id):
        return
    raise TimeoutError("kernel did not go idle")

  def opened(self) -> list[dict]:
    return [m for m in self.iopub
            if m["msg_type"] == "comm_open" and m["content"].get("target_name") == "vjpviz"]

  def outputs(self, msg_type: str) -> list[dict]:
    """Contents of the iopub messages of one type seen so far."""
    return [m["content"] for m in self.iopub if m["msg_type"] == msg_type]

  def send(self, msg_type: str, content: dict) -> str:
    msg = self.kc.session.msg(msg_type, content)
    self.kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]

  def request(self, comm_id: str, data, timeout: float = 60) -> dict:
    return self.burst(comm_id, [data], timeout)[0]

  def burst(self, comm_id: str, messages: list, timeout: float = 120) -> list[dict]:
    """Send every message at once on the comm, then collect one reply each, in order."""
    ids = [self.send("comm_msg", {"comm_id": comm_id, "data": data}) for data in messages]
    return self.replies(ids, timeout)

  def replies(self, msg_ids: list[str], timeout: float) -> list[dict]:
    """The comm reply to each of ``msg_ids`` (TimeoutError naming how many never came)."""
    found: dict[str, dict] = {}
    deadline = time.monotonic() + timeout
    while len(found) < len(msg_ids) and time.monotonic() < deadline:
      try:
        msg = self.kc.get_iopub_msg(timeout=1)
      except queue.Empty:
        continue
      self.iopub.append(msg)
      parent = msg["parent_header"].get("msg_id")
      if msg["msg_type"] == "comm_msg" and parent in msg_ids:
        found[parent] = msg["content"]["data"]
    if len(found) < len(msg_ids):
      raise TimeoutError(f"no reply to {len(msg_ids) - len(found)} of {len(msg_ids)} messages")
    return [found[i] for i in msg_ids]


def _is_hello(msg: dict) -> bool:
  data = msg["content"].get("data") if msg["msg_type"] == "comm_msg" else None
  return isinstance(data, dict) and data.get("type") == "hello"


@pytest.fixture(scope="module")
def panel():
  """One real kernel for the test module (import this fixture where it is used)."""
  jupyter_client = pytest.importorskip("jupyter_client")
  km = jupyter_client.KernelManager(kernel_name="python3")
  km.start_kernel(env={**os.environ, "JAX_PLATFORMS": "cpu"})
  kc = km.client()
  kc.start_channels()
  kc.wait_for_ready(timeout=60)
  try:
    yield Panel(kc)
  finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
