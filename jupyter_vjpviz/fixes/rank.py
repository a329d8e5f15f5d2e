"""Judging candidate fixes by the primal's own derivative, and ranking them by the verdict.

Every candidate, whichever generator wrote it, is judged the same way: compiled
(bodies only, in a copy of the rules' namespace), run abstractly at the failing
call's types (cheap; a candidate that is ill-typed or raises is dropped), then
numerically against ``analysis.values.oracle`` (the primal's autodiff, or finite
differences). Its verdict replaces the generator's claim: verified fixes come
first, unverifiable ones (no oracle, or out of time) next in the generators'
order, and type-only ones last, each saying what it breaks.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import time

from ..analysis.values import on_mesh, oracle, replay, tangents
from ..analysis.diagnosis import TYPE_ONLY, UNVERIFIABLE, VERDICT_ORDER, VERIFIED, Fix
from ..base import kinds, surrogates
from ..capture.naming import library_wrappers
from . import exprs, returns, source, verify

VALUE_SHARE = 0.5
"""Of the failing call's budget (``analysis.values.replay``), the part after which fixes are no
longer run by value; abstract checks and the fallback, right whenever the primal is, have
the rest."""


@dataclasses.dataclass
class Judge:
  """One diagnosis's oracle and the rule it judges candidates for (lives for one ranking)."""
  rule: object                  # suggest.Rule
  oracle: oracle.Oracle | None
  why_not: str                  # why there is no oracle (or why nothing may run)
  deadline: float               # for judging by value
  end: float                    # for abstract checks and the reserved fallback
  runnable: bool = True         # False: candidates cannot be run (so none is dropped either)
  left_none: frozenset = frozenset()   # leaves the user's own rule returns None for

  @classmethod
  def of(cls, rule) -> Judge:
    account = replay.current()
    deadline = (account.share(VALUE_SHARE), account.deadline)
    if not _runs_as_written(rule):
      return cls(rule, None, "the rule's source no longer matches the code that runs "
                 "(edited since it was defined)", *deadline, runnable=False)
    if getattr(rule.user_rules, "with_accums", False):
      return cls(rule, None, "not judged: rules with gradient accumulators cannot be run "
                 "on their own yet", *deadline, runnable=False)
    site = rule.d.site
    try:
      judge = cls.reference(rule)
    except replay.NotJudged as e:   # out of time, loops past their cap, effects it won't repeat
      return cls(rule, None, str(e), *deadline)
    except Exception as e:  # noqa: BLE001 - a primal that cannot run at random inputs
      return cls(rule, None, f"no oracle: {site.function} could not be run at random inputs "
                 f"({type(e).__name__})", *deadline)
    if not judge.judge:
      return cls(rule, None, judge.reason, *deadline)
    return cls(rule, judge, judge.reason, *deadline, left_none=verify.left_none(rule.d))

  @staticmethod
  def reference(rule):
    """The judge of this rule's candidates: the primal's derivative at the site."""
    return verify.reference(rule.d.site, rule.user_rules)

  @property
  def differentiable(self) -> bool:
    """JAX itself differentiates the primal (so differentiating it is a fix)."""
    return self.oracle is not None and self.oracle.judge == "autodiff" and self.oracle.available

  def zero_reference(self) -> bool:
    """Every input's reference cotangent is zero (a zeros placeholder is then right)."""
    return self.oracle is not None and all(
        self.oracle.reference_zero(i) for i in range(len(self.rule.d.site.in_paths)))

  def typed(self, fix: Fix):
    """``fix``'s (fwd, bwd) when it type-checks abstractly; a Fix when it cannot be run
    here (judged unverifiable); None when it is ill-typed or raises."""
    if not self.runnable:
      return _unverifiable(fix, self.why_not)
    if time.monotonic() > self.end:
      return _unverifiable(fix, replay.TIME_BUDGET)
    site = self.rule.d.site
    try:
      rules = verify.compile_candidate(self.rule.user_rules, fix.code, self.rule.d.kind)
      problems = self.type_problems(rules)
    except Exception as e:  # noqa: BLE001 - a candidate that raises is no fix
      return _unverifiable(fix, _mesh_only(site, e)) if _mesh_only(site, e) else None
    return None if problems else rules

  def type_problems(self, rules: tuple) -> list:
    """What is ill-typed in the candidate ``rules`` (fwd, bwd), run abstractly at the site."""
    user_rules, site = self.rule.user_rules, self.rule.d.site
    fwd, bwd = rules
    return (verify.type_problems(site, fwd, verify.cotangents_of(user_rules, bwd),
                                 user_rules.symbolic_zeros, user_rules.primal)
            or verify.registration_problems(site, user_rules, fwd, bwd))

  def not_valued(self, fix: Fix, reserved: bool) -> Fix | None:
    """``fix`` unverifiable where there is no oracle or no time left to run it; else None."""
    if self.oracle is None:
      return _unverifiable(fix, self.why_not)
    if time.monotonic() > (self.end if reserved else self.deadline):
      return _unverifiable(fix, f"type-checked; {replay.TIME_BUDGET}")
    return None

  def valued(self, fix: Fix, fwd, bwd, reserved: bool = False) -> Fix | None:
    """A well-typed ``fix`` with the oracle's verdict on its values (``reserved``: the
    fallback, judged within a second budget, as it is right whenever the primal is)."""
    early = self.not_valued(fix, reserved)
    if early is not None:
      return early
    edited = verify.clone(self.rule.user_rules, fwd, bwd)
    own = self.rule_values if self.surrogate else None   # else only when needed
    if own is not None:
      return self.against_surrogate(fix, verify.value_verdict(self.rule.d.site, edited, own.oracle))
    if self.surrogate:
      return self.surrogate_unrun(fix, reserved)
    verdict = verify.value_verdict(self.rule.d.site, edited, self.oracle)
    filled = verify.fills_none(verdict, self.left_none)
    if filled and verdict.status == oracle.RIGHT:
      breaks = (f"it gives {', '.join(filled)} a gradient where your rule returns None (no "
                "gradient, by choice); equal to the primal's derivative otherwise")
      return dataclasses.replace(fix, title=f"{fix.title} (type-only: gradient for {', '.join(filled)})",
                                 exact=False, verdict=TYPE_ONLY, note=breaks)
    judged = with_verdict(fix, self.at_chosen_precision(verify.as_written(verdict, self.left_none)),
                           self.rule.d.site)
    if judged is not None and judged.verdict == TYPE_ONLY:
      own = self.rule_values
      return (self._keeping(fix, edited, own) if own is not None and own.differs else None) or judged
    return judged

  def at_chosen_precision(self, verdict: oracle.Verdict) -> oracle.Verdict:
    """``verdict``, right at the lower precision a rule computes in only where the rule
    chose it (it casts a value to it itself: ``x.astype(jnp.float16)``); a precision lost
    otherwise (a float32 cotangent written into a bfloat16 buffer) is the bug, not kept."""
    if not verdict.relaxed or _casts_down(self.rule.src):
      return verdict
    return dataclasses.replace(
        verdict, status=oracle.WRONG, relaxed=False, leaves=(),
        reason="equal to the primal's derivative only at the lower precision the rule loses "
        "its values to, which it does not cast to itself")

  def surrogate_unrun(self, fix: Fix, reserved: bool) -> Fix:
    """``fix`` for a surrogate whose own values are the reference but which cannot run as
    written: the fallback changes its values, any other candidate is not judged."""
    if reserved:
      return dataclasses.replace(
          fix, title=f"{fix.title} (type-only: changes your surrogate's values)", exact=False,
          verdict=TYPE_ONLY, note=f"it differentiates the primal, but {self.surrogate}")
    return _unverifiable(fix, f"{self.surrogate}: its own values are the reference, and it "
                         "cannot be run as written to compute them")

  def marked(self) -> str | None:
    """Why the rule is a surrogate, where the user marked it ``vjpviz.surrogate``."""
    rules = self.rule.user_rules
    if surrogates.is_surrogate(getattr(rules, "custom_vjp", getattr(rules, "custom_jvp", rules))):
      return (f"the rule is marked vjpviz.surrogate (its gradient differs from "
              f"{self.rule.d.function}'s on purpose)")
    return None

  @functools.cached_property
  def surrogate(self) -> str | None:
    """Why the rule's own values are the reference, not the primal's derivative: the user
    marked it ``vjpviz.surrogate``, or it gives a gradient where the primal's is zero at
    every draw though its output depends on that input (a straight-through estimator of
    sign, round, a comparison: autodiff cannot judge it). None for any other rule."""
    if self.marked():
      return self.marked()
    if self.oracle is None:
      return None
    flat = self.oracle.unjudged
    if not flat and self.oracle.identity():
      own = self.rule_values
      return None if own is None or own.differs is None else (
          f"your rule is a surrogate gradient: {self.rule.d.function} returns its input "
          f"unchanged, so a rule for it exists to change the gradient ({own.differs}); "
          "mark it with vjpviz.surrogate to say so")
    own = self.rule_values if flat else None
    given = [i for i in sorted(flat) if own is not None and not own.oracle.reference_zero(i)]
    if not given:
      return None
    names = ", ".join(f"`{self.rule.d.site.in_names[i]}`" for i in given)
    return (f"your rule is a surrogate gradient: {self.rule.d.function}'s own derivative is "
            f"zero at every draw for {names} (piecewise constant), where your rule's is not; "
            "mark it with vjpviz.surrogate to say so")

  def against_surrogate(self, fix: Fix, kept: oracle.Verdict) -> Fix | None:
    """A surrogate rule is judged by its own values (``kept``: the verdict against them)."""
    if kept.status == oracle.RIGHT:
      return dataclasses.replace(fix, exact=True, verdict=VERIFIED,
                                 note=f"keeps your rule's values ({kept.reason}): {self.surrogate}")
    if kept.status != oracle.WRONG:
      return with_verdict(fix, kept, self.rule.d.site)
    breaks = f"it changes the values of your surrogate gradient ({kept.reason})"
    return dataclasses.replace(fix, title=f"{fix.title} (type-only: changes your surrogate's values)",
                               exact=False, verdict=TYPE_ONLY, note=breaks)

  def _keeping(self, fix: Fix, edited, own: RuleValues) -> Fix | None:
    """``fix``, which the primal calls wrong, said to keep the rule's own values where the
    rule itself is not the primal's derivative (a clipped or straight-through gradient
    with a wrong dtype, not marked); None where it does not keep them."""
    kept = verify.value_verdict(self.rule.d.site, edited, own.oracle)
    if kept.status != oracle.RIGHT:
      return None
    function = self.rule.d.function
    return dataclasses.replace(
        fix, title=f"{fix.title} (type-only: keeps your rule's values, not {function}'s derivative)",
        exact=False, verdict=TYPE_ONLY, note=(
            f"keeps your rule's own values ({kept.reason}); the rule itself differs from "
            f"{function}'s derivative ({own.differs}): if that is on purpose (a clipped or "
            "straight-through gradient), mark the rule with vjpviz.surrogate"))

  @functools.cached_property
  def rule_values(self) -> RuleValues | None:
    """The user's rule's own values as a reference, where they can be run."""
    rules = self.rule.user_rules
    live = verify.clone(rules, rules.fwd, rules.bwd)    # as JAX runs it, library parts and all
    found = self.oracle.of_rule(live.fwd, verify.cotangents_of(live, live.bwd), live.symbolic_zeros,
                                self.rule.d.site.perturbed)
    if found is None:
      return None
    wrong = self.oracle.agrees(found)
    return RuleValues(found, wrong.breaks() if wrong.status == oracle.WRONG else None)


@dataclasses.dataclass(frozen=True)
class RuleValues:
  """The failing rule's own cotangents at the oracle's draws, and what they are worth."""
  oracle: oracle.Oracle
  differs: str | None          # how they differ from the primal's derivative (None: they don't)


def rank(judge: Judge, candidates: list[Fix], fallbacks: list[Fix] = (),
         placeholders: list[Fix] = ()) -> list[Fix]:
  """Judge every candidate and order them by verdict (then fallbacks, then generators' order).

  ``fallbacks`` (differentiating the primal: right but costly) rank after other
  verified fixes; ``placeholders`` (zeros) are offered only where the reference
  is zero, or where there is no oracle to say.
  """
  if placeholders and judge.oracle is not None and not judge.zero_reference():
    placeholders = []
  tiers = [(f, 0) for f in candidates] + [(f, 1) for f in fallbacks] + \
      [(f, 2) for f in placeholders]
  unique = list({f.code: (n, f, tier) for n, (f, tier) in reversed(list(enumerate(tiers)))}
                .values())
  # Types first for all (cheap), then values, the likeliest first while time lasts.
  typed = [(n, f, tier, judge.typed(f)) for n, f, tier in sorted(unique, key=lambda u: u[0])]
  likeliest = sorted((t for t in typed if t[3] is not None),
                     key=lambda t: (not t[1].exact, t[2], t[0]))
  ranked = []
  by_value = kinds.of(judge.rule.d.kind).wrong == kinds.VALUE
  first = True   # the likeliest candidate has the fallback's budget too: building the
  for n, fix, tier, rules in likeliest:   # oracle may have spent the first share
    judged = rules if isinstance(rules, Fix) else \
        judge.valued(fix, *rules, reserved=tier == 1 or first)
    first = first and isinstance(rules, Fix)
    if judged is not None and not (by_value and judged.verdict == TYPE_ONLY):
      # a rule wrong in value was well-typed already: a fix still wrong mends nothing
      ranked.append(((VERDICT_ORDER[judged.verdict], tier, not fix.exact, n), judged))
  return [fix for _, fix in sorted(ranked, key=lambda r: r[0])]


def unjudged(fixes: list[Fix], why: str) -> list[Fix]:
  """Calls to write, not rules: those their generator judged (``with_verdict``) by verdict,
  the rest unverifiable (``why``), in the generators' order within each verdict."""
  given = [f if f.verdict else _unverifiable(f, why) for f in fixes]
  return sorted(given, key=lambda f: VERDICT_ORDER[f.verdict])


def with_verdict(fix: Fix, verdict: oracle.Verdict, site) -> Fix | None:
  if verdict.status == oracle.RIGHT and _varying(site) and not verdict.where:
    return _unverifiable(fix, "its values equal the primal's derivative, judged outside its "
                         "shard_map: the varying mesh axes it returns are not checked there")
  if verdict.status == oracle.RIGHT:   # not exact where equal only at the rule's precision
    return dataclasses.replace(fix, exact=not verdict.relaxed, verdict=VERIFIED,
                               note=verdict.reason)
  if verdict.status == oracle.WRONG:
    breaks = verdict.breaks() or verdict.reason or "its cotangents differ from the primal's derivative"
    return dataclasses.replace(fix, title=f"{fix.title} (type-only: {breaks})", exact=False,
                               verdict=TYPE_ONLY, note=breaks)
  if verdict.status == oracle.UNVERIFIABLE:
    return _unverifiable(fix, verdict.reason)
  return _unverifiable(fix, _mesh_only(site, verdict.reason)) \
      if _mesh_only(site, verdict.reason) else None


def _casts_down(src) -> bool:
  """The rule casts a value to a 16-bit float itself (``.astype``, ``convert_element_type``)."""
  return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.args
             and n.func.attr in ("astype", "convert_element_type")
             and "float16" in src.segment(n.args[-1]) for n in ast.walk(src.node))


def _unverifiable(fix: Fix, why: str) -> Fix:
  return dataclasses.replace(fix, exact=False, verdict=UNVERIFIABLE, note=why)


def _varying(site) -> bool:
  """The rule runs inside a shard_map: its inputs vary over manual mesh axes."""
  return any(exprs.varying(a) for a in site.in_avals)


def _mesh_only(site, error) -> str | None:
  """Why a candidate that raised is kept anyway: it can only run inside its shard_map, and
  no equivalent mesh could be made here (where one is, it raised there: no fix)."""
  if not _varying(site) or on_mesh.runs_there(site):
    return None
  return f"not judged: it runs only inside its shard_map ({on_mesh.why_not(site) or str(error)[:120]})"


def _runs_as_written(rule) -> bool:
  """The rule's source is what the live rule was compiled from: else a candidate made from
  it would run code that never ran (a file edited since it was imported)."""
  role = kinds.of(rule.d.kind).role
  tree = ast.parse(rule.src.text)
  source.bare(tree.body[0])
  live = inspect.unwrap(getattr(rule.user_rules, role))
  return returns.compiles_to(tree, live if library_wrappers.user_code(live) else verify.home(rule.user_rules))


class TangentJudge(Judge):
  """A custom_jvp rule's judge: its candidates' tangents against the primal's JVP
  (``analysis.values.tangents``), a surrogate's against its own tangents."""

  @staticmethod
  def reference(rule):
    return tangents.Tangents.of(rule.d.site, rule.user_rules.primal)

  def type_problems(self, rules: tuple) -> list:
    return verify.tangent_type_problems(self.rule.d.site, self.rule.user_rules, *rules)

  def zero_reference(self) -> bool:
    return False

  def valued(self, fix: Fix, jvp, reserved: bool = False) -> Fix | None:
    early = self.not_valued(fix, reserved)
    if early is not None:
      return early
    symbolic_zeros = self.rule.user_rules.symbolic_zeros
    if self.surrogate:
      own = self.rule_values
      return (self.against_surrogate(fix, own.verdict(jvp, symbolic_zeros)) if own is not None
              else self.surrogate_unrun(fix, reserved))
    return with_verdict(fix, self.at_chosen_precision(self.oracle.verdict(jvp, symbolic_zeros)),
                         self.rule.d.site)

  @functools.cached_property
  def surrogate(self) -> str | None:
    """The rule is marked, or gives a tangent where the primal's JVP is zero at every draw
    (round, sign, comparisons: a straight-through estimator)."""
    if self.marked():
      return self.marked()
    if self.oracle is None or not self.oracle.unjudged:
      return None
    own = self.rule_values
    if own is not None and own.differs(self.oracle) is None:
      return None   # the rule's own tangents are zero there too
    names = ", ".join(f"`{self.oracle.out_names[k]}`" for k in sorted(self.oracle.unjudged))
    return (f"your rule is a surrogate: {self.rule.d.function}'s own JVP is zero at every draw "
            f"for {names} (piecewise constant), where your rule's is not; mark it with "
            "vjpviz.surrogate to say so")

  @functools.cached_property
  def rule_values(self):
    """The user's rule's own tangents as a reference, where it runs."""
    rules = self.rule.user_rules
    return self.oracle.of_rule(rules.jvp, rules.symbolic_zeros)
