"""A failing cell's diagnosis reaches the panel and the inline output once, whole.

A real kernel (jupyter_client) plays the panel: the diagnosis is pushed once, on a
fresh comm, with its fixes judged, its rule's source span and its default view drawn;
nothing follows it on that comm, and the output shown after the cell is the same
diagnosis.
"""
from __future__ import annotations

from kernel_helpers import DIAGNOSIS, FAIL, SETUP, panel, validator  # noqa: F401 - fixture

VIEW = validator("View")
MIME = "application/vnd.vjpviz.diagnosis+json"


def test_the_diagnosis_comes_once_drawn_with_its_fixes_and_rule_text(panel):
  assert panel.execute(SETUP)["status"] == "ok"
  assert panel.execute(FAIL)["status"] == "error"
  (opened,) = panel.opened()
  pushed = opened["content"]["data"]
  DIAGNOSIS.validate(pushed)
  d = pushed["diagnosis"]
  bad = d["rule_source_text"].splitlines()[d["rule_source_bad_line"] - d["rule_source_start"]]
  assert bad.strip() == "return gy @ w.T, (x.T @ gy).T"
  assert d["fixes"] and "(x.T @ gy).T" not in d["fixes"][0]["code"]
  VIEW.validate(pushed["view"])
  assert pushed["view"]["svg"].startswith("<svg") and pushed["view"]["failed_node"] == d["node"]
  push_comm = opened["content"]["comm_id"]
  assert not [m for m in panel.iopub if m["msg_type"] == "comm_msg"
              and m["content"]["comm_id"] == push_comm]   # nothing follows the push
  (shown,) = [o for o in panel.outputs("display_data") if MIME in o["data"]]
  assert shown["data"][MIME] == d   # the output has the same diagnosis, its fixes included
