"""The panel's requests about ``vv.watch``: every watch's series, and ``vv.nans`` on a
watched step's kept call (its diagnosis joins the history, as any other)."""
from __future__ import annotations

from ...api import pipeline
from ...api.watch import watches
from ..requests import Refused


def op_watch(args: dict) -> dict:
  return {"watches": [w.series() for w in watches()]}


def op_watch_nans(args: dict) -> dict:
  w = next((w for w in watches() if w.id == args["watch_id"]), None)
  if w is None:
    raise Refused(f"no watch {args['watch_id']!r} in this kernel (restarted, or collected)")
  try:
    d = w.nans(args["step"])
  except ValueError as e:
    raise Refused(str(e)) from None
  if d is None:
    return {"summary": f"step {args['step']}: the gradient is finite", "diagnosis": None}
  pipeline.remember(d)
  return {"summary": d.headline, "diagnosis": d.to_dict()}
