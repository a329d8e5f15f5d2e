"""The panel's requests about diagnoses: the history, and verifying or applying a fix.

A fix is checked in the kernel that recorded the diagnosis (its types, its failing call):
``verify`` says whether the edited rule passes and what its values are worth, ``apply``
rebinds the rule after the same check (``check.apply_fix``).
"""
from __future__ import annotations

from ...api import pipeline
from ...analysis.values import oracle
from ...analysis.diagnosis import TYPE_ONLY, UNVERIFIABLE, VERIFIED
from ...api.check import apply_fix, check
from ...fixes import verify as fix_verify
from ..requests import Refused


def diagnosis(report_id: str):
  """The diagnosis of that id in the history, or a refusal saying why it may be gone."""
  for d in pipeline.history():
    if d.id == report_id:
      return d
  raise Refused(f"no diagnosis {report_id!r} in this kernel (restarted, cleared, "
                "or older than the history keeps)")


def op_history(args: dict) -> dict:
  return {"diagnoses": [d.to_dict() for d in pipeline.history()]}


def op_verify(args: dict) -> dict:
  return verify_result(diagnosis(args["report_id"]), args["code"])


def op_apply(args: dict) -> dict:
  result = apply_fix(diagnosis(args["report_id"]), args["code"])
  return {"applied": result.applied, "problems": [_problem(x) for x in result.problems],
          "patch": result.patch, "path": result.path}


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
  """A problem the fix still has, as the schema's FixProblem."""
  found = {k: getattr(d, k) for k in ("id", "kind", "headline", "path", "expected", "got")}
  if d.leaf_errors:
    found["leaf_errors"] = [l.to_dict() for l in d.leaf_errors]
  return found
