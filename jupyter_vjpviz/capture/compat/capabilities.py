"""What vjpviz diagnoses on the JAX it runs on, from the hook points it could wrap.

Each kind is recorded at known check sites; a JAX that lacks one (older JAX has
no Refs, accumulators or hijax primitives) cannot produce that kind, and the
user is told so in one line rather than left to wonder why nothing showed.
``tests/test_jax_versions.py`` checks these claims against real failures on
every tested JAX, and the README's table is written from its results.
"""
from __future__ import annotations

import dataclasses
import re
import sys

import jax

from ...base import kinds
from ..sites import vjp3_rules
from . import private

TESTED = ("0.6", "0.12")   # the oldest and newest JAX minor versions the test script runs

NEEDS: dict[str, tuple[str, ...]] = {k.name: k.needs for k in kinds.KINDS.values() if k.needs}
"""The hook points each kind is recorded at (``Kind.needs``): all must be hooked."""

SOURCES: dict[str, tuple[str, ...]] = {
    "hijax primitives": (kinds.HIJAX_BWD,),
}
"""Rules other than custom_vjp whose bwd is checked, and the hook points that takes."""


@dataclasses.dataclass(frozen=True)
class Capabilities:
  jax: str
  kinds: tuple[str, ...]          # diagnosed on this JAX
  missing: tuple[str, ...]        # not on this JAX: a hook point it needs is absent
  sources: tuple[str, ...]        # rule sources beyond custom_vjp that are watched
  hijax_path: bool                # custom_vjp under jax_custom_vjp3 is watched
  tested: bool                    # this JAX's minor version is in TESTED's range
  off: tuple[str, ...] = ()       # "name: what it costs", for each private name JAX lacks

  def line(self) -> str:
    """One line: what this JAX gets, for ``%load_ext`` and ``%vjpviz``."""
    rules = ", ".join(("custom_vjp", *self.sources))
    path = "" if self.hijax_path else "; its jax_custom_vjp3 path is not watched"
    missing = f"; not on this JAX: {', '.join(self.missing)}" if self.missing else ""
    tested = "" if self.tested else f" (tested on jax {TESTED[0]} to {TESTED[1]})"
    off = f"; off: {_grouped(self.off)}" if self.off else ""
    return (f"vjpviz on jax {self.jax}{tested}: diagnoses {', '.join(self.kinds)} "
            f"in {rules} rules{path}{missing}{off}")


def of(points: list[str]) -> Capabilities:
  """What the wrapped hook ``points`` let vjpviz diagnose on the running JAX, less what
  the private names it lacks cost (``private.missing()``: each entry's capability)."""
  hooked = {name for point in points for name in re.split(r"[.\s]", point)}
  gone = private.missing()
  lost = {alt for name in gone for alt in name.capability.split("|")}
  wrapped = lambda need: all(hooked.intersection(n.split("|")) for n in need)
  has = lambda need: wrapped(need) and not lost.intersection(a for n in need for a in n.split("|"))
  kinds = tuple(k for k, need in NEEDS.items() if has(need))
  return Capabilities(
      jax=jax.__version__, kinds=kinds,
      missing=tuple(k for k in NEEDS if not wrapped(NEEDS[k])),
      sources=tuple(s for s, need in SOURCES.items() if has(need)),
      hijax_path=_hijax_path_hooked(has), tested=_tested(),
      off=tuple(f"{name.key}: {_cost(name)}" for name in gone))


def _grouped(off: tuple[str, ...]) -> str:
  """``off``'s "name: cost" entries as "cost (JAX lacks name, name)", one per cost."""
  lacking: dict[str, list[str]] = {}
  for entry in off:
    name, cost = entry.split(": ", 1)
    lacking.setdefault(cost, []).append(name)
  return "; ".join(f"{cost} (JAX lacks {', '.join(names)})" for cost, names in lacking.items())


def _cost(name: private.Name) -> str:
  """What a private name's absence takes: the kinds recorded at its capability, or the
  capability itself (fixes, NaN localisation, ...)."""
  alts = set(name.capability.split("|"))
  lost = [k for k, need in {**NEEDS, **SOURCES}.items()
          if alts.intersection(a for n in need for a in n.split("|"))]
  return ", ".join(lost) or name.capability


def no_monitoring() -> str:
  """Why the entry points are wrapped rather than watched (``sys.monitoring``)."""
  if not hasattr(sys, "monitoring"):
    return (f"not in Python {sys.version_info.major}.{sys.version_info.minor} (new in 3.12): "
            "wrappers instead, with their frames")
  return "no free tool slot: wrappers instead, with their frames"


def _hijax_path_hooked(has) -> bool:
  """Whether a custom_vjp under jax_custom_vjp3 has its rules read where vjpviz reads them:
  through ``custom_vjp.__call__`` (JAX 0.12), or, where that flag makes ``jax.custom_vjp``
  build another class (JAX 0.9 to 0.11's ``custom_vjp3``), that class's rules hooked."""
  if "jax_custom_vjp3" not in jax.config.values:
    return False
  other = vjp3_rules.separate_class()
  return has((kinds.RULES,)) if other is None else has((other.__name__,))


def _tested() -> bool:
  minor = lambda v: tuple(int(p) for p in v.split(".")[:2])
  try:
    return minor(TESTED[0]) <= minor(jax.__version__) <= minor(TESTED[1])
  except ValueError:
    return False
