"""The panel's request for the ``vv.grads`` reports the kernel keeps, and a report as the
protocol sends it (pushed, or in that reply)."""
from __future__ import annotations

from ...api.grads import reports
from ...render import grads_view
from ..requests import DEFS

_ITEMS = {k: DEFS["GradReport"]["properties"][k]["maxItems"]
          for k in ("zero", "partly_zero", "layers")}


def op_grads(args: dict) -> dict:
  return {"reports": [grads_message(r) for r in reports()]}


def grads_message(report) -> dict:
  """The schema's GradReport: ``to_dict()`` with its headline, without the per-leaf norms
  (thousands in a large model), its lists capped as the schema says."""
  found = {k: v for k, v in report.to_dict().items() if k != "leaves"}
  for key in ("zero", "partly_zero", "layers"):
    found[key] = found[key][:_ITEMS[key]]
  return {**found, "headline": grads_view.headline(report)}
