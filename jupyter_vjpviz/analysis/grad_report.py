"""A gradient-health report (``vv.grads``): plain data, next to ``Diagnosis``.

``jupyter_vjpviz.api.grads`` makes it; the render stage draws it (``grads_text``,
``grads_html`` in ``diagnosis.RENDERINGS``) and the panel's channel sends ``to_dict()``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math

from ..base import places
from .diagnosis import rendered
from .graph import Graph
from ..base.unchecked import Unchecked

_ids = itertools.count(1)


@dataclasses.dataclass(frozen=True)
class ZeroLeaf:
  """A differentiated leaf whose gradient is exactly zero everywhere, and why."""
  path: str
  reason: str
  source: str | None = None     # the user's file:line of the operation that cut it
  op: str | None = None
  node: str | None = None       # the graph node of that operation
  factor: str | None = None     # zero_factor: the input that is the all-zero factor


@dataclasses.dataclass(frozen=True)
class PartlyZero:
  """A leaf whose whole units (rows, columns) along one axis get no gradient."""
  path: str
  units: str                    # "rows" | "columns" | "entries"
  fraction: float
  reason: str                   # "not gathered" (an embedding's rows this batch), "not read"
                                # (sliced away: ``w[:n]``), "dead"
  alarm: bool
  source: str | None = None     # dead: the user's line of the mask where those units die
  op: str | None = None


@dataclasses.dataclass(frozen=True)
class NonFinite:
  """A differentiated leaf whose gradient holds NaN or Inf: how many, and the first."""
  path: str
  nan: int
  inf: int
  size: int
  first: tuple[int, ...]        # the index of its first non-finite element

  def line(self) -> str:
    counts = " and ".join(f"{n} {what}" for n, what in ((self.nan, "NaN"), (self.inf, "Inf")) if n)
    return f"{self.path or 'the gradient'}: {counts} of {self.size}, first at {list(self.first)}"


@dataclasses.dataclass(frozen=True)
class Layer:
  """One block of a stacked model, in depth order."""
  name: str
  grad_norm: float
  param_norm: float
  ratio: float | None
  flag: str | None = None       # "vanishing" | "exploding"
  why: str | None = None        # what the flag was raised on


@dataclasses.dataclass(frozen=True)
class GradReport:
  function: str
  leaves: tuple[tuple[str, float, float], ...]      # (path, ‖grad‖, ‖param‖) of every leaf
  zero: tuple[ZeroLeaf, ...] = ()
  partly_zero: tuple[PartlyZero, ...] = ()
  layers: tuple[Layer, ...] = ()
  graph: Graph = dataclasses.field(default_factory=Graph, repr=False)
  note: str | None = None
  nonfinite: tuple[NonFinite, ...] = ()   # leaves whose gradient is NaN/Inf: reported first
  cause: str | None = None      # what made them: how to get ``vv.nans``'s answer
  unchecked: Unchecked | None = None   # the report was not established: why
  id: str = dataclasses.field(default_factory=lambda: f"g{next(_ids)}")
  process: int = 0              # the jax.distributed process that made it (as Diagnosis's)
  processes: tuple[int, ...] = ()   # those whose report found the same problems, gathered

  @property
  def fingerprint(self) -> str:
    """The problems found, whatever process finds them: which leaves get no gradient and
    why, which blocks are flagged (their norms are the process's own)."""
    parts = (self.function, self.judged, [n.path for n in self.nonfinite],
             [(z.path, z.reason) for z in self.zero],
             [(p.path, p.units, p.reason) for p in self.partly_zero],
             [(layer.name, layer.flag) for layer in self.layers if layer.flag])
    return "g" + hashlib.sha1(repr(parts).encode()).hexdigest()[:16]

  def summary(self) -> dict:
    """What another process's report is compared by: its fingerprint's words."""
    return {"function": self.function, "healthy": self.healthy, "process": self.process}

  @property
  def node(self) -> str | None:
    """The graph node the default view centres on: the first cut's."""
    return next((z.node for z in self.zero if z.node), None)

  @property
  def judged(self) -> bool:
    """Whether the report was established (else ``unchecked`` says why)."""
    return self.unchecked is None

  @property
  def healthy(self) -> bool:
    """The all-clear: established, a finite gradient, no leaf or unit without one, no
    block flagged."""
    return (self.judged and not self.nonfinite and not self.zero
            and not any(p.alarm for p in self.partly_zero)
            and not any(layer.flag for layer in self.layers))

  @property
  def notes(self) -> str:
    """Why it is unchecked, the non-finite leaves and what made them, the note: one line."""
    return "; ".join(filter(None, (self.unchecked and self.unchecked.headline,
                                   *(n.line() for n in self.nonfinite[:3]), self.cause,
                                   self.note)))

  def to_dict(self) -> dict:
    """Numbers and strings only (non-finite norms as None): ``json.dumps`` takes it."""
    return _finite({"id": self.id, "function": self.function, "healthy": self.healthy,
                    "judged": self.judged, "note": self.notes or None,
                    "leaves": [{"path": p, "grad_norm": g, "param_norm": w}
                               for p, g, w in self.leaves],
                    "zero": [dataclasses.asdict(z) for z in self.zero],
                    "partly_zero": [dataclasses.asdict(p) for p in self.partly_zero],
                    "layers": [dataclasses.asdict(layer) for layer in self.layers],
                    "graph": self.graph.to_dict(), "process": self.process,
                    "places": places.places((*(z.source for z in (*self.zero, *self.partly_zero)),
                                             *self.graph.call_sites())),
                    "processes": list(self.processes)})

  def __str__(self) -> str:
    return rendered("grads_text", self)

  def __repr__(self) -> str:
    """Short: ``print(report)`` has the whole text."""
    state = ("unchecked" if not self.judged else "not finite" if self.nonfinite else
             "healthy" if self.healthy else f"{len(self.zero)} zero, {len(self.layers)} blocks")
    return f"<GradReport {self.id} of {self.function}: {state}>"

  def _repr_html_(self) -> str:
    return rendered("grads_html", self)


def _finite(tree):
  """``tree`` with every non-finite float as None (JSON has no NaN)."""
  if isinstance(tree, dict):
    return {k: _finite(v) for k, v in tree.items()}
  if isinstance(tree, (list, tuple)):
    return [_finite(v) for v in tree]
  if isinstance(tree, float) and not math.isfinite(tree):
    return None
  return tree
