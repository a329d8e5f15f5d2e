"""The raw facts captured while JAX differentiates: plain data, avals only.

A ``Record`` is one thing that went wrong (or that JAX silently let through) at
one check site. A ``Session`` collects the records of one entry into JAX's VJP
machinery (``jax.vjp``, applying its VJP function, or ``with_refs``); the hook
hands the finished session to the next stage.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import threading
from typing import Any
from collections.abc import Callable

from ..base import kinds
from .naming.leaf_paths import Leaf, Path, keystr

ERROR = "error"
WARNING = "warning"


@dataclasses.dataclass(frozen=True)
class RuleSite:
  """Where one custom rule was applied: static, hashable, no arrays.

  It travels inside the residuals as pytree aux data, so the backward rule
  knows which application of the primal it is answering for.
  """
  function: str            # primal function __name__
  source: str | None       # file:line of the primal definition
  rule: str | None         # bwd rule __name__
  fwd_rule: str | None
  rule_source: str | None  # file:line of the bwd rule
  call_site: str | None    # file:line of the user's call of the primal
  name_stack: str
  occurrence: int | None   # n-th application of this primal at this call site
  in_keys: tuple[Path, ...]      # key path of each differentiable input leaf
  in_names: tuple[str, ...]      # the same leaves as the user named them: "x", "p['w']"
  in_avals: tuple[Any, ...]      # primal aval of each differentiable input leaf
  in_tree: Any                   # PyTreeDef of the differentiable args tuple
  hijax: bool = False
  unnamed: tuple[int, ...] = ()
  """Indexes of ``in_names`` spelled by a library's own parameters (flax's
  ``grad_variables``): no user spelling was found for them by identity (a scan's slice)."""
  perturbed: tuple[bool, ...] | None = None
  """Per input leaf, whether it was differentiated (symbolic_zeros rules are told; None: all)."""
  zero_cts: tuple[bool, ...] | None = None
  """Per output leaf, whether the bwd got a symbolic zero cotangent for it at the failing
  application (symbolic_zeros rules; None: none did): what a check of a fix replays."""
  nondiff: tuple[tuple[int, Any], ...] = dataclasses.field(default=(), compare=False)
  """(argnum, value) of each nondiff argument, so a fix can re-run the call: the value
  itself for Python data (scalars, strings, callables), a ShapeDtypeStruct for arrays."""
  custom_rule: Any = dataclasses.field(default=None, compare=False, repr=False)
  """The jax.custom_vjp object (or hijax primitive) whose rules ran, so fixes can be
  verified against it: a weakref (the site travels in JAX's residual trees and caches),
  or in a record's copy a ``Strong`` one (``retained_rules.retained``: kept as long as the
  diagnosis, if it holds no arrays)."""
  method: Any = dataclasses.field(default=None, compare=False, repr=False)
  """For a hijax primitive: (weakref to its class, the rule's attribute name), so fixes
  can read the rule (``getattr``) and rebind it (``setattr``)."""
  mesh: Any = dataclasses.field(default=None, compare=False, repr=False)
  """``mesh_context.MeshContext``: the shard_map mesh the application ran in (None outside
  one), where a fix of the rule is type-checked and judged."""
  traced: Any = dataclasses.field(default=None, compare=False, repr=False)
  """The forward session's count of fwd traces per (function, call site, name stack), still
  counting: fewer traces than the graph has applications means a traced body was reused."""

  @functools.cached_property
  def in_paths(self) -> tuple[str, ...]:
    """``keystr`` of each differentiable input leaf."""
    return tuple(keystr(p) for p in self.in_keys)

  @property
  def in_structure(self) -> str:
    return str(self.in_tree)


@dataclasses.dataclass(frozen=True)
class Weak:
  """A callable held by weak reference: a site must not keep its closure's arrays alive."""
  ref: Any

  def get(self):
    """The callable, or None once the user's program has dropped it."""
    return self.ref()


class Strong:
  """A strong reference that reads like a weakref (``site.custom_rule()``)."""
  __slots__ = ("obj",)

  def __init__(self, obj):
    self.obj = obj

  def __call__(self):
    return self.obj


@dataclasses.dataclass(frozen=True)
class Solver:
  """A solve the user handed ``custom_linear_solve`` (its ``solve`` or ``transpose_solve``),
  held weakly, and the matrix of the linear map it inverts (``matvec``'s, transposed for
  ``transpose_solve``), materialised on the host where the solve failed, so a fix of the
  solve can be judged by the system's solution; None, with ``why``, where it could not be."""
  solve: Weak
  b_tree: Any            # PyTreeDef of ``b``
  b_avals: tuple         # the aval of each leaf of ``b``
  matrix: Any = dataclasses.field(default=None, compare=False, repr=False)   # numpy, or None
  why: str = ""


@dataclasses.dataclass(frozen=True)
class Record:
  """One mismatch at one check site."""
  kind: str
  severity: str
  function: str | None
  source: str | None
  path: str | None
  expected: str | None
  got: str | None
  rule: str | None = None
  site: RuleSite | None = None
  flat_index: int | None = None    # index among the rule's (or function's) input leaves
  expected_aval: Any = None
  got_aval: Any = None
  detail: str | None = None        # one line from us, when JAX's own text is poor
  rule_source: str | None = None   # file:line of a rule that has no site (a custom_jvp's jvp)
  raised_at: str | None = None     # file:line of the rule's own statement that raised with it
  solver: Solver | None = None     # a custom_linear_solve solve at fault (fixes judge by it)
  operation: Any = None            # bwd_raised: the operation that raised (failing_operation.Failed)
  leaves: tuple[Leaf, ...] = ()
  """Expected beside got at each leaf this is about, by key path: for the structure kinds
  every leaf of either tree. Empty where the site knows no path (a rule's input leaf
  has its path in ``site.in_keys[flat_index]``)."""

  def __post_init__(self):
    kinds.of(self.kind)   # every kind a capture site records has its registry entry


@dataclasses.dataclass(frozen=True)
class Origin:
  """The user's function and the types of everything it was called with.

  ``leaves`` are the flattened ``(args, kwargs)``: an aval for each array,
  the value itself for anything else (strings, callables, Python constants).
  ``differentiated_leaves`` lists, in the VJP's own input order, which array leaves
  were differentiated (``jax.grad`` differentiates only some arguments).
  """
  fun: Callable
  leaves: tuple[Any, ...]
  tree: Any
  differentiated_leaves: tuple[int, ...]
  name: str
  source: str | None
  labels: tuple[str | None, ...] = ()
  """Per leaf, the user's spelling where ``fun`` is a library's and the user's call behind
  it could not be kept (it holds tracers): learned by identity (``user_calls``)."""


@dataclasses.dataclass
class Session:
  """Records of one entry into the VJP machinery."""
  entry: str                      # "vjp" | "vjp_call" | "backward" | "jvp" | "linearize" | "run"
  origin: Origin | None
  records: list[Record] = dataclasses.field(default_factory=list)
  occurrences: collections.Counter = dataclasses.field(
      default_factory=collections.Counter)
  held: dict = dataclasses.field(default_factory=dict)
  """id -> each custom_vjp applied here: a rule made for one call must outlive the call
  until the backward pass that may report on it (kept with the VJP function)."""
  deferred: list = dataclasses.field(default_factory=list)
  """(position in ``records``, check) to run as the session ends, off the user's stack: a
  check that must run the user's code abstractly does it after the user's functions
  return; its records go where they would have been, had it run at once."""
  log_sources: list = dataclasses.field(default_factory=list)
  """(key, RuleSite, {path: aval}) per log a ``defvjp_with_logs`` rule wrote here (``grad_logs``)."""
  logs: list = dataclasses.field(default_factory=list)
  """(RuleSite, its ``grad_logs.LogLeaf`` summaries) as the caller received them."""


class _State(threading.local):
  def __init__(self):
    self.sessions: list[Session] = []
    self.suspended = 0            # > 0 while vjpviz itself traces: written by ``suspended`` alone
    self.rule_stack: list[RuleSite] = []


state = _State()


@contextlib.contextmanager
def suspended():
  """vjpviz's own tracing (analysis, checks, fixes, deferred checks): the hook stands aside
  meanwhile, in this thread (``active`` is False, no session is current). Nests; the one
  writer of ``state.suspended`` (tests/test_architecture.py holds every other module to that)."""
  state.suspended += 1
  try:
    yield
  finally:
    state.suspended -= 1


def active() -> bool:
  """False while vjpviz itself traces (analysis, check): then the hook stands aside."""
  return not state.suspended


def current_session() -> Session | None:
  return state.sessions[-1] if state.sessions and not state.suspended else None


def record(rec: Record | None) -> None:
  session = current_session()
  if session is not None and rec is not None:
    session.records.append(rec)
