"""The Diagnosis: what went wrong in a backward pass, where, and how to fix it."""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
from typing import Any
from collections.abc import Callable

from ..base import kinds, places
from ..capture.processes import spelled
from ..capture.naming import leaf_paths
from .graph import Graph

_ids = itertools.count(1)


VERIFIED, TYPE_ONLY, UNVERIFIABLE = "verified", "type-only", "unverifiable"
"""A fix's verdict: equal to the primal's own derivative; well-typed but wrong (``note``
says what it breaks); or not judged (``note`` says why: no oracle, out of time)."""
VERDICT_ORDER = {VERIFIED: 0, UNVERIFIABLE: 1, TYPE_ONLY: 2}   # which fixes lead


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
class MismatchedLeaf:
  """One row of the diagnosis's expected-vs-got table: a leaf the rule application got
  wrong, or for the structure kinds each leaf of either tree (``missing`` on the side
  without it). The path is data (``leaf_paths.Key`` entries), never text to parse."""
  path: tuple
  argument: str | None               # as the user would type it: "k", "p['w']", "out[0]"
  primal: str | None
  expected: str | None
  got: str | None

  @property
  def name(self) -> str:
    """The leaf as a sentence names it."""
    return self.argument or leaf_paths.keystr(self.path) or "the top"

  def to_dict(self) -> dict:
    return {**dataclasses.asdict(self), "path": [dataclasses.asdict(k) for k in self.path]}


@dataclasses.dataclass(frozen=True)
class RuleText:
  """The failing rule's definition as its file has it (fixes/rule_text.py finds it, once):
  what the panel's fix editor opens on and Apply replaces. Lines are the file's numbering;
  ``bad_line`` is the line that made the failing cotangent (its expression, followed back
  from the return through the locals holding it), or the rule's statement that raised,
  None when not known."""
  text: str
  start: int
  end: int
  bad_line: int | None = None

  def to_dict(self) -> dict:
    """As the protocol names it, flat on the diagnosis."""
    return {"rule_source_text": self.text, "rule_source_start": self.start,
            "rule_source_end": self.end, "rule_source_bad_line": self.bad_line}


NO_RULE_TEXT = dict.fromkeys(RuleText("", 0, 0).to_dict())


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
  raised_at: str | None = None       # "file:line": the rule raised there, before returning it
  id: str = dataclasses.field(default_factory=lambda: f"d{next(_ids)}")
  expected_aval: Any = dataclasses.field(default=None, repr=False, compare=False)
  got_aval: Any = dataclasses.field(default=None, repr=False, compare=False)
  site: Any = dataclasses.field(default=None, repr=False, compare=False)
  """The capture stage's RuleSite (avals, paths, a weakref to the custom_vjp)."""
  solver: Any = dataclasses.field(default=None, repr=False, compare=False)
  """A custom_linear_solve solve at fault (``records.Solver``: weak references)."""
  operation: Any = dataclasses.field(default=None, repr=False, compare=False)
  """bwd_raised: the operation of the rule's statement that raised, with the types it was
  given (``capture.sites.failing_operation.Failed``: text and avals, no array)."""
  leaves: tuple = ()
  """Every ``MismatchedLeaf`` of this rule application, the one the fields above are
  about first: one failure is one diagnosis. Empty for one read from JAX's message."""
  leaf_errors: tuple = ()
  """bwd_value: per input leaf, how the rule's cotangent differs from the primal's
  derivative (``oracle.LeafError``: numbers and strings, never arrays)."""
  cotangents: dict = dataclasses.field(default_factory=dict, compare=False)
  """nonfinite_cotangent: the backward pass's values, plain data: ``edges`` maps
  ``"dst#position"`` (a graph edge) to its cotangent's summary (size, nan, inf, norm,
  ...), ``iterations`` lists each scan iteration searched (node, t, norm, finite)."""
  rule_text: RuleText | None = None
  """The rule's definition and its bad line, attached with the fixes (``fixes.suggest``)."""
  process: int = 0
  """The ``jax.distributed`` process that recorded it (0 outside such a job)."""
  logs: tuple = ()
  """The logs this rule application wrote with ``defvjp_with_logs``, as the caller received
  them (``capture.grad_logs.LogLeaf``: shapes, what each stacked axis stands for, numbers
  as text); () where the rule logs nothing or nobody asked JAX for its logs."""
  processes: tuple[int, ...] = ()
  """In a job of several processes, those that recorded the same problem (``fingerprint``),
  as process 0 gathered them (``capture.processes``); () elsewhere, and outside a job."""

  @property
  def fingerprint(self) -> str:
    """The problem whatever process records it: its kind, function and rule, the input,
    and its types (for a value kind, the source where it went wrong: its numbers are the
    process's own)."""
    value = kinds.of(self.kind).wrong == kinds.VALUE
    parts = (self.kind, self.function, self.rule, self.argument or self.path,
             *((self.source,) if value else (self.expected, self.got)))
    return "d" + hashlib.sha1(repr(parts).encode()).hexdigest()[:16]

  def summary(self) -> dict:
    """What another process needs to show this problem: its words (no graph, fixes or avals)."""
    return {name: getattr(self, name) for name in _SUMMARY}

  @classmethod
  def from_summary(cls, summary: dict, processes: tuple[int, ...] = ()) -> Diagnosis:
    """A problem another process recorded, as its ``summary`` says (no graph)."""
    return cls(**{k: v for k, v in summary.items() if k in _SUMMARY}, processes=processes)

  @property
  def where(self) -> str:
    """``on processes 0-3``, ``on process 2 only``; "" outside a job of several."""
    return spelled(self.processes)

  @property
  def headline(self) -> str:
    """One sentence in plain words."""
    more = [] if kinds.of(self.kind).structural else [l.name for l in self.leaves[1:]]
    return (kinds.of(self.kind).headline(self)
            + (f" (in {self.instance})" if self.instance else "")
            + (f"; also {', '.join(more)}" if more else "") + ".")

  def to_dict(self) -> dict:
    d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _NOT_FLAT}
    d["headline"] = self.headline
    d["processes"] = list(self.processes)
    d["traits"] = kinds.of(self.kind).traits()
    d["graph"] = self.graph.to_dict()
    d["fixes"] = [f.to_dict() for f in self.fixes]
    d["leaf_errors"] = [l.to_dict() for l in self.leaf_errors]
    d["leaves"] = [l.to_dict() for l in self.leaves]
    d["logs"] = [l.to_dict() for l in self.logs]
    d.update(self.rule_text.to_dict() if self.rule_text else NO_RULE_TEXT)
    d["places"] = places.places((self.source, self.rule_source, self.call_site, self.raised_at,
                                 *self.graph.call_sites()))
    return d

  def __str__(self) -> str:
    """``print(d)``: the readable text (its headline where the render stage is not loaded)."""
    return self.to_text() if "text" in RENDERINGS else f"vjpviz: {self.headline}"

  def __repr__(self) -> str:
    """Short and informative: ``print(d)`` and ``to_dict()`` have the rest."""
    where = self.call_site or self.source
    return (f"<Diagnosis {self.id} {self.kind} ({self.severity}) in {self.function}"
            + (f" at {where}" if where else "") + f": {len(self.fixes)} fixes>")

  # Renderings: the public spellings of the render stage's renderers, which that stage
  # (above this one) registers in RENDERINGS when it is imported.
  def to_text(self) -> str:
    return rendered("text", self)

  def to_dot(self, **view) -> str:
    return rendered("dot", self, **view)

  def to_svg(self, **view) -> str:
    return rendered("svg", self, **view)

  def to_html(self) -> str:
    return rendered("html", self)


_NOT_FLAT = ("graph", "fixes", "expected_aval", "got_aval", "site", "leaf_errors", "leaves", "logs", "rule_text",
             "operation", "solver")
"""Fields to_dict does not copy as they are: serialised by their own to_dict, or never sent."""


_SUMMARY = ("kind", "severity", "function", "rule", "source", "path", "expected", "got", "message",
            "rule_source", "call_site", "argument", "primal", "name_stack", "instance", "detail",
            "hijax", "raised_at", "process")
"""The fields a process publishes of each problem it records (``summary``): its words."""


RENDERINGS: dict[str, Callable[..., str]] = {}
"""format -> renderer(subject, **view): a Diagnosis's dot/html/svg/text, a gradient
report's grads_text/grads_html; filled by ``jupyter_vjpviz.render``."""


def rendered(fmt: str, subject, **view) -> str:
  """``subject`` (a Diagnosis or a gradient report) drawn by the render stage as ``fmt``."""
  return _rendering(fmt)(subject, **view)


def _rendering(fmt: str) -> Callable[..., str]:
  try:
    return RENDERINGS[fmt]
  except KeyError:
    raise RuntimeError(f"no {fmt} renderer: import jupyter_vjpviz.render first") from None
