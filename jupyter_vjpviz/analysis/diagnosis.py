"""The Diagnosis: what went wrong in a backward pass, where, and how to fix it."""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from ..capture.records import ERROR
from .graph import Graph

KINDS = (
    "bwd_type", "bwd_structure", "fwd_type", "fwd_structure", "accumulator_type",
    "ref_grad_unbound", "ref_grad_as_value", "grad_ref_type",
    "vjp_cotangent_type", "vjp_cotangent_structure", "silent_dtype", "bwd_value",
)

_ids = itertools.count(1)


VERIFIED, TYPE_ONLY, UNVERIFIABLE = "verified", "type-only", "unverifiable"
"""A fix's verdict: equal to the primal's own derivative; well-typed but wrong (``note``
says what it breaks); or not judged (``note`` says why: no oracle, out of time)."""


@dataclasses.dataclass(frozen=True)
class Fix:
  """A suggested rewrite. Generators set ``exact`` to their own claim; ranking replaces it
  with the verdict: True means verified equal to the primal's derivative, nothing else."""
  title: str
  code: str
  reason: str = ""
  exact: bool = False
  verdict: str = ""        # VERIFIED | TYPE_ONLY | UNVERIFIABLE; "" before ranking
  note: str = ""           # what a type-only fix breaks, why a fix is unverifiable

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Diagnosis:
  """One mismatch, with the graph of the forward program around it.

  ``expected``/``got`` are ``aval.str_short()`` strings (or pytree structure
  strings for the structure kinds); the avals themselves are kept for the fix
  stage and are never serialised.
  """
  kind: str
  severity: str                      # "error" | "warning"
  function: str | None
  rule: str | None
  source: str | None                 # file:line of the primal definition
  path: str | None
  expected: str | None
  got: str | None
  message: str | None                # JAX's own text; None for warnings
  node: str | None = None
  graph: Graph = dataclasses.field(default_factory=Graph, repr=False)
  fixes: tuple = ()
  rule_source: str | None = None
  call_site: str | None = None
  argument: str | None = None        # the input as the user named it: "x", "p['w']"
  primal: str | None = None          # that input's primal aval
  name_stack: str = ""
  instance: str | None = None        # which of several identical blocks: "model.layers[3]"
  detail: str | None = None
  hijax: bool = False
  id: str = dataclasses.field(default_factory=lambda: f"d{next(_ids)}")
  expected_aval: Any = dataclasses.field(default=None, repr=False, compare=False)
  got_aval: Any = dataclasses.field(default=None, repr=False, compare=False)
  site: Any = dataclasses.field(default=None, repr=False, compare=False)
  """The capture stage's RuleSite (avals, paths, a weakref to the custom_vjp)."""
  leaf_errors: tuple = ()
  """bwd_value: per input leaf, how the rule's cotangent differs from the primal's
  derivative (``oracle.LeafError``: numbers and strings, never arrays)."""

  @property
  def headline(self) -> str:
    """One sentence in plain words."""
    who = f"{self.function}'s {'fwd' if self.kind.startswith('fwd') else 'bwd'} rule"
    if self.rule and self.kind in ("bwd_type", "silent_dtype", "bwd_structure", "fwd_type",
                                   "accumulator_type"):
      # A hijax primitive's rule is its method (``RMSNorm.vjp_bwd_retval``): it names both.
      method = self.function and self.rule.startswith(f"{self.function}.")
      who = self.rule if method else f"{who} {self.rule}"
    where = (f" for input {self.argument}: {self.primal}" if self.argument and self.primal
             else f" for input {self.path}" if self.path else "")
    text = {
        "bwd_type": f"{who} returned {self.got}{where}; the cotangent must be {self.expected}",
        "silent_dtype": (f"{who} returned {self.got}{where}; JAX let it through, so the "
                         f"gradient is {self.got} where it should be {self.expected}"
                         if self.severity != ERROR else
                         f"{who} returned {self.got}{where}; JAX accepted it there and "
                         f"failed further on; the cotangent must be {self.expected}"),
        "bwd_structure": f"{who} returned a cotangent tree of the wrong structure"
                         f"{' at ' + self.path if self.path else ''}",
        "fwd_type": f"{who} produced primal output {self.got} at {self.path or 'the top'}, "
                    f"but {self.function} produces {self.expected}",
        "fwd_structure": f"{who} returned the wrong structure",
        "accumulator_type": (f"{who} pushed {self.got} into the accumulator{where}; the "
                             f"cotangent must be {self.expected}" if self.rule else
                             f"a gradient accumulator for {self.path or 'an input'} of "
                             f"{self.function or 'the function'} expected {self.expected} "
                             f"but got {self.got}"),
        "ref_grad_unbound": f"{self.path} of {self.function} is a Ref: its gradient needs a "
                            "gradient ref bound with with_refs",
        "ref_grad_as_value": f"{self.path} of {self.function} is a Ref: its gradient can't "
                             "be returned as a value",
        "grad_ref_type": f"the gradient ref for {self.path} of {self.function} is "
                         f"{self.got}, but must be {self.expected}",
        "vjp_cotangent_type": f"the cotangent passed to {self.function}'s VJP function at "
                              f"{self.path} is {self.got}, but must be {self.expected}",
        "vjp_cotangent_structure": f"the cotangent passed to {self.function}'s VJP function "
                                   "has the wrong tree structure",
        "bwd_value": f"{self.function}'s bwd rule returns well-typed cotangents that are not "
                     f"{self.function}'s derivative: {self.got}",
    }.get(self.kind, f"{self.kind}: expected {self.expected}, got {self.got}")
    return text + (f" (in {self.instance})" if self.instance else "") + "."

  def to_dict(self) -> dict:
    d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
         if f.name not in ("graph", "fixes", "expected_aval", "got_aval", "site", "leaf_errors")}
    d["headline"] = self.headline
    d["graph"] = self.graph.to_dict()
    d["fixes"] = [f.to_dict() for f in self.fixes]
    d["leaf_errors"] = [l.to_dict() for l in self.leaf_errors]
    return d

  # Renderings (the render stage does the work; these are the public spellings).
  def to_text(self) -> str:
    from ..render import text
    return text.render(self)

  def to_dot(self, **view) -> str:
    from ..render import dot
    return dot.render(self, **view)

  def to_svg(self, **view) -> str:
    from ..render import svg
    return svg.render(self, **view)

  def to_html(self) -> str:
    from ..render import html
    return html.render(self)
