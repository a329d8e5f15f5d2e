"""Fixes judged after their diagnosis was delivered reach the panel and the inline output.

A real kernel (jupyter_client) plays the panel: the diagnosis is pushed with its
default view drawn and no fixes yet; its fixes follow as a fixes message on the
same comm, and the output shown after the cell has them. Fixes that come after the
output was shown redraw that output in place (its display id).
"""
from __future__ import annotations

from kernel_helpers import DIAGNOSIS, FAIL, SETUP, panel, validator  # noqa: F401 - fixture

FIXES = validator("FixesMessage")
VIEW = validator("View")
MIME = "application/vnd.vjpviz.diagnosis+json"


def _fixes_messages(panel_):
  return [m["content"]["data"] for m in panel_.iopub
          if m["msg_type"] == "comm_msg" and m["content"]["data"].get("type") == "fixes"]


def test_the_diagnosis_comes_drawn_before_its_fixes_and_they_follow_it(panel):
  assert panel.execute(SETUP)["status"] == "ok"
  assert panel.execute(FAIL)["status"] == "error"
  pushed = panel.opened()[-1]["content"]["data"]
  DIAGNOSIS.validate(pushed)
  d = pushed["diagnosis"]
  assert d["fixes"] == []   # pushed as soon as its graph existed, before fixes were judged
  VIEW.validate(pushed["view"])
  assert pushed["view"]["svg"].startswith("<svg") and pushed["view"]["failed_node"] == d["node"]
  (fixes,) = _fixes_messages(panel)
  FIXES.validate(fixes)
  assert fixes["diagnosis_id"] == d["id"] and fixes["fixes"]
  (shown,) = [o for o in panel.outputs("display_data") if MIME in o["data"]]
  assert shown["data"][MIME]["fixes"] == fixes["fixes"]   # the output waited for them
  assert shown["transient"]["display_id"] == f"vjpviz-{d['id']}"


def test_fixes_judged_after_the_output_was_shown_redraw_it(panel):
  # A judge finishing after the cell: the pipeline publishes the fixed diagnosis again.
  late = ("import dataclasses, jupyter_vjpviz as vv\n"
          "from jupyter_vjpviz import pipeline\n"
          "d = vv.last()\n"
          "pipeline._publish([dataclasses.replace(d, fixes=d.fixes[:1])], None, "
          "pipeline._fixes_listeners)\n")
  before = len(_fixes_messages(panel))
  assert panel.execute(late)["status"] == "ok"
  (update,) = panel.outputs("update_display_data")
  d = update["data"][MIME]
  assert update["transient"]["display_id"] == f"vjpviz-{d['id']}" and len(d["fixes"]) == 1
  assert "<svg" in update["data"]["text/html"]
  (fixes,) = _fixes_messages(panel)[before:]
  assert fixes["diagnosis_id"] == d["id"] and fixes["fixes"] == d["fixes"]
