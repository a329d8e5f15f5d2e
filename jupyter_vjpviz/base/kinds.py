"""The registry of diagnosis kinds: everything a stage needs to know about a kind.

A kind is one ``Kind`` entry here plus the capture site that records it. Stages
never test kind names: they read an entry's fields (which rule is at fault, how
its node is found, which fixers apply), so a new kind that is like an old one
is diagnosed, located, fixed and rendered like it without touching them.
"""
from __future__ import annotations

import dataclasses
from typing import Any
from collections.abc import Callable

from .places import spelled

# What a finding is about, which is how the analysis finds its graph node when no
# custom-rule equation is known for it.
RULE = "rule"        # a custom rule's equation (or a hijax primitive's, by name)
INPUT = "input"      # an input leaf of the differentiated program (``in{flat_index}``)
OUTPUT = "output"    # an output leaf (``out{flat_index}``)

MISSING = "missing"
"""A leaf one tree has and the other lacks, as a MismatchedLeaf's ``expected``/``got`` says."""

# What is wrong with what the rule (or the caller) produced.
TYPE, STRUCTURE, VALUE, BINDING = "type", "structure", "value", "binding"

# Where the wrong cotangent went.
RETURNED = "returned"          # the rule's return value
ACCUMULATED = "accumulated"    # pushed into a gradient accumulator (hijax ``vjp_bwd``, Refs)
PASSED = "passed"              # handed by the user to a VJP function

# The JAX objects a kind is recorded at, named as in a hook point's label
# (``jax._src.api._vjp3_bwd``, ``custom_vjp.fwd``); ``a|b``: either one, where JAX versions differ.
RULES = "custom_vjp"                                  # its __call__, or its fwd and bwd
F_VJP = "_vjp3_bwd|_vjp_pullback_wrapper"             # before JAX 0.8, the pullback wrapper
WITH_REFS = "_vjp_accum"
ACCUMULATE = "ct_check"
JVP = "_flatten_jvp"
SOLVE = "transposed_fun|_check_shapes"
HIJAX_BWD = "_accum_args_grad|HiPrim|VJPHiPrimitive"   # before JAX 0.12, the base vjp_bwd
FORWARD_REFUSED = "raise_custom_vjp_error_on_jvp"      # custom_lin's impl, batching and lowering


@dataclasses.dataclass(frozen=True)
class Kind:
  """One kind of finding.

  ``headline`` makes the one-sentence summary from a Diagnosis (duck-typed: this
  module sits below the analysis). ``rule_fixers`` and ``call_fixers`` name the
  fixes stage's template families, tried in order, for a finding with a live user
  rule to rewrite and for one without (the fix is a call to write). The candidate
  search, the primal's derivative and zeros apply wherever ``rewrites_returns``.
  """
  name: str
  headline: Callable[[Any], str]
  role: str | None                  # the user's rule at fault: "fwd" | "bwd" | "jvp" | "solve" | None
  subject: str = RULE
  wrong: str = TYPE
  channel: str = RETURNED
  silent: bool = False              # JAX lets it through: a warning unless JAX fails further on
  rule_fixers: tuple[str, ...] = ()
  call_fixers: tuple[str, ...] = ()
  fixed_at: str = "rule"            # where its fixes are written: the rule, or the user's "line"
  needs: tuple[str, ...] = ()       # the hook points it is recorded at, all hooked (capabilities);
                                    # none: found by vjpviz's own checks (gradcheck, nans)

  @property
  def structural(self) -> bool:
    """``expected``/``got`` are pytree structures, not avals."""
    return self.wrong == STRUCTURE

  @property
  def rewrites_returns(self) -> bool:
    """The fix rewrites what a bwd rule returns (the candidate search and the
    differentiate-the-primal fallback apply)."""
    return self.role == "bwd" and self.channel == RETURNED and self.wrong != BINDING

  @property
  def has_reference(self) -> bool:
    """The primal's own derivative can stand in for the rule's output (and zeros
    where it is zero): a rule whose cotangents are wrong in type or structure."""
    return self.rewrites_returns and self.wrong != VALUE

  def traits(self) -> dict:
    """What the panel branches on (the protocol's ``traits``): it never compares kind names."""
    return {"role": self.role, "subject": self.subject, "wrong": self.wrong,
            "channel": self.channel, "silent": self.silent, "structural": self.structural}


def _who(d) -> str:
  """The rule as the headline names it: ``softclip's bwd rule clip_bwd``; a hijax
  primitive's rule is its method (``RMSNorm.vjp_bwd_retval``), which names both."""
  who = f"{d.function}'s {KINDS[d.kind].role or 'bwd'} rule"
  if not d.rule:
    return who
  return d.rule if d.function and d.rule.startswith(f"{d.function}.") else f"{who} {d.rule}"


def _input(d) -> str | None:
  """The input as the user would type it (their parameter, ``p['w']``), else its path."""
  return d.argument or d.path


def _missing(d) -> str:
  """``: no cotangent for input w``: the inputs the rule's tree left out, by the user's names."""
  names = [leaf.name for leaf in getattr(d, "leaves", ()) if leaf.got == MISSING]
  return f": no cotangent for input{'s' if len(names) > 1 else ''} {', '.join(names)}" if names else ""


def _where(d) -> str:
  if d.argument and d.primal:
    return f" for input {d.argument}: {d.primal}"
  return f" for input {d.path}" if d.path else ""


def _made(d) -> str:
  """How the rule gave its cotangent: returned it, or raised on its own line writing it."""
  raised_at = getattr(d, "raised_at", None)
  return f"raised at line {raised_at.rpartition(':')[2]} writing" if raised_at else "returned"


def _raised(d) -> str:
  """A statement of the rule raised for the types it was given, before any cotangent (a
  jvp rule's: before its tangent, of the primal output)."""
  line = (d.raised_at or "").rpartition(":")[2]
  role = KINDS[d.kind].role
  if role == "jvp":
    of = f"the tangent of output {d.path}" if d.path else "the tangent of its output"
  elif role == "fwd":
    of = "its primal output and residuals"
  else:
    of = f"the cotangent of input {_input(d)}" if _input(d) else "a cotangent"
  must = f" ({d.expected})" if d.expected else ""
  return f"{_who(d)} raised at line {line} computing {of}{must}: {d.got}"


def _silent_dtype(d) -> str:
  if d.severity != "error":
    return (f"{_who(d)} returned {d.got}{_where(d)}; JAX let it through, so the gradient is "
            f"{d.got} where it should be {d.expected}")
  return (f"{_who(d)} returned {d.got}{_where(d)}; JAX accepted it there and failed further "
          f"on; the cotangent must be {d.expected}")


def _solve(d) -> str:
  """A function the user handed to a JAX solver (``custom_root``'s ``tangent_solve``,
  ``custom_linear_solve``'s ``solve``), named as its own ``def`` is."""
  who = f"{d.function}'s {d.rule}" if d.function and d.rule else d.rule or "a linear function"
  return f"{who} returned {d.got}{' for ' + d.path if d.path else ''}; it must return {d.expected}"


def _solve_dtype(d) -> str:
  """A solve whose dtype JAX let through: the solution (and gradient) has that dtype."""
  who = f"{d.function}'s {d.rule}" if d.function and d.rule else d.rule or "a solve"
  if d.severity != "error":
    return (f"{who} returned {d.got}{' for ' + d.path if d.path else ''}; JAX let it through, "
            f"so the solution is {d.got} where it should be {d.expected}")
  return (f"{who} returned {d.got}{' for ' + d.path if d.path else ''}; JAX accepted it there "
          f"and failed further on; it must return {d.expected}")


def _accumulator(d) -> str:
  if d.rule:
    return f"{_who(d)} pushed {d.got} into the accumulator{_where(d)}; the cotangent must be {d.expected}"
  return (f"a gradient accumulator for {_input(d) or 'an input'} of {d.function or 'the function'} "
          f"expected {d.expected} but got {d.got}")


def _forward_refused(d) -> str:
  """A custom_vjp function under a forward-mode transformation (``d.got``), which JAX refuses."""
  who = d.function or "a custom_vjp function"
  rule = f" (its bwd rule {d.rule} runs in reverse mode only)" if d.rule else ""
  return (f"{d.got or 'forward mode'} differentiates {who} in forward mode, which JAX can't "
          f"apply to a custom_vjp function{rule}; {d.expected} differentiates it in reverse mode")


_ENTRIES = (
    Kind("bwd_type", lambda d: f"{_who(d)} {_made(d)} {d.got}{_where(d)}; the cotangent must be "
         f"{d.expected}", role="bwd", rule_fixers=("types",), needs=(RULES,)),
    Kind("bwd_raised", _raised, role="bwd", rule_fixers=("raised",), needs=(RULES,)),
    Kind("fwd_raised", _raised, role="fwd", rule_fixers=("raised",), needs=(RULES,)),
    Kind("silent_dtype", _silent_dtype, role="bwd", silent=True,
         rule_fixers=("types",), needs=(RULES,)),
    Kind("bwd_structure", lambda d: f"{_who(d)} returned a cotangent tree of the wrong structure"
         f"{' at ' + _input(d) if d.path else ''}{_missing(d)}", role="bwd", wrong=STRUCTURE,
         rule_fixers=("structure",), needs=(RULES,)),
    Kind("bwd_value", lambda d: f"{d.function}'s bwd rule returns well-typed cotangents that are "
         f"not {d.function}'s derivative: {d.got}", role="bwd", wrong=VALUE, silent=True),
    Kind("fwd_type", lambda d: f"{_who(d)} produced primal output {d.got} at {d.path or 'the top'}, "
         f"but {d.function} produces {d.expected}", role="fwd", rule_fixers=("fwd",),
         needs=(RULES,)),
    Kind("fwd_structure", lambda d: f"{_who(d)} returned the wrong structure", role="fwd",
         wrong=STRUCTURE, rule_fixers=("fwd",), needs=(RULES,)),
    Kind("accumulator_type", _accumulator, role="bwd", subject=INPUT, channel=ACCUMULATED,
         rule_fixers=("types",), call_fixers=("accumulator",), needs=(ACCUMULATE, WITH_REFS)),
    Kind("ref_grad_unbound", lambda d: f"{_input(d)} of {d.function} is a Ref: its gradient needs a "
         "gradient ref bound with with_refs", role=None, subject=INPUT, wrong=BINDING,
         channel=ACCUMULATED, call_fixers=("refs",), needs=(WITH_REFS,)),
    Kind("ref_grad_as_value", lambda d: f"{_input(d)} of {d.function} is a Ref: its gradient can't be "
         "returned as a value", role=None, subject=INPUT, wrong=BINDING, channel=ACCUMULATED,
         call_fixers=("refs",), needs=(WITH_REFS,)),
    Kind("grad_ref_type", lambda d: f"the gradient ref for {_input(d)} of {d.function} is {d.got}, but "
         f"must be {d.expected}", role=None, subject=INPUT, channel=ACCUMULATED,
         call_fixers=("refs",), needs=(WITH_REFS,)),
    Kind("vjp_cotangent_type", lambda d: f"the cotangent passed to {d.function}'s VJP function at "
         f"{d.path} is {d.got}, but must be {d.expected}", role=None, subject=OUTPUT,
         channel=PASSED, call_fixers=("cotangent",), needs=(F_VJP,)),
    Kind("vjp_cotangent_structure", lambda d: f"the cotangent passed to {d.function}'s VJP function "
         "has the wrong tree structure", role=None, subject=OUTPUT, wrong=STRUCTURE,
         channel=PASSED, call_fixers=("cotangent_tree",), needs=(F_VJP,)),
    Kind("nonfinite_cotangent", lambda d: f"the gradient goes non-finite at {d.function}"
         f"{' (' + spelled(d.source) + ')' if d.source else ''}: {d.detail}", role=None, wrong=VALUE,
         silent=True, fixed_at="line"),
    Kind("jvp_tangent_type", lambda d: f"{_who(d)} returned tangent {d.got}"
         f"{' for output ' + d.path if d.path else ''}; the tangent must be {d.expected}", role="jvp",
         rule_fixers=("types",), needs=(JVP,)),
    Kind("jvp_tangent_structure", lambda d: f"{_who(d)} returned a tangent tree {d.got}; it must "
         f"have the primal output's structure {d.expected}", role="jvp", wrong=STRUCTURE,
         rule_fixers=("tangent_tree",), needs=(JVP,)),
    Kind("jvp_raised", _raised, role="jvp", rule_fixers=("raised",), needs=(JVP,)),
    Kind("jvp_of_custom_vjp", _forward_refused, role=None, wrong=BINDING,
         call_fixers=("reverse_mode",), needs=(FORWARD_REFUSED,)),
    Kind("solve_type", _solve, role="solve", needs=(SOLVE,)),
    Kind("solve_dtype", _solve_dtype, role="solve", silent=True, needs=(SOLVE,)),
)

KINDS: dict[str, Kind] = {k.name: k for k in _ENTRIES}


def of(name: str) -> Kind:
  """The entry for ``name``; a name no entry has is a bug at its capture site."""
  return KINDS[name]
