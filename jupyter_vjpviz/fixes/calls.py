"""Fixes for the user's *call* of a VJP function (``f_vjp(ct)``, ``f_vjp.with_refs``).

These diagnoses have no rule to edit, so each fix is the call to write instead,
built from the graph's input and output types. ``f_vjp``, ``ct`` and ``out``
stand for the user's own names, which the diagnosis does not know.
"""
from __future__ import annotations

import dataclasses
import re

from ..analysis.diagnosis import Diagnosis, Fix
from . import source

_AVAL = re.compile(r"^(Ref\{)?(\w+)\[([\d,\s]*)\]\}?$")


@dataclasses.dataclass(frozen=True)
class Leaf:
  """One primal input or output, from its ``str_short`` type."""
  label: str
  dtype: str
  shape: tuple[int, ...]
  ref: bool

  @classmethod
  def parse(cls, label: str, aval: str) -> Leaf | None:
    m = _AVAL.match(aval or "")
    if m is None:
      return None
    shape = tuple(int(s) for s in m.group(3).split(",") if s.strip())
    return cls(label, m.group(2), shape, bool(m.group(1)))

  @property
  def zeros(self) -> str:
    return f"jnp.zeros({self.shape}, jnp.{self.dtype})"

  @property
  def new_ref(self) -> str:
    return f"jax.new_ref({self.zeros})"


def suggestions(d: Diagnosis) -> list[Fix]:
  return _BY_KIND.get(d.kind, lambda d: [])(d)


def _leaves(d: Diagnosis, kind: str) -> list[Leaf]:
  return [Leaf.parse(n.label, n.out_avals[0] if kind == "input" else n.in_avals[0])
          for n in d.graph.nodes if n.kind == kind and (n.out_avals or n.in_avals)]


def _failing_index(d: Diagnosis, count: int) -> int | None:
  keys = source.path_keys(d.path)
  return keys[0] if keys and isinstance(keys[0], int) and keys[0] < count else None


def _with_refs(d: Diagnosis, replace) -> list[Fix]:
  """``f_vjp.with_refs(...)`` with the failing input's entry from ``replace(leaf)``."""
  inputs = _leaves(d, "input")
  i = _failing_index(d, len(inputs))
  if i is None or None in inputs:
    return []
  fixes = []
  for title, entry, reason, exact in replace(inputs[i]):
    args = [entry if k == i else (leaf.new_ref if leaf.ref else "jax.ad.GradValue()")
            for k, leaf in enumerate(inputs)]
    code = f"f_vjp.with_refs({', '.join(args)})(ct)"
    fixes.append(Fix(title if exact else title + " (only type-correct)", code, reason, exact))
  return fixes


def _ref_fixes(d: Diagnosis) -> list[Fix]:
  return _with_refs(d, lambda leaf: [
      (f"Accumulate the gradient of {leaf.label} into a new ref", leaf.new_ref,
       f"a Ref-typed input's gradient is added into a Ref{{{leaf.dtype}{list(leaf.shape)}}}; "
       "read it afterwards with ref[...]", True),
      (f"Don't compute the gradient of {leaf.label}", "jax.ad.DontWant()",
       "DontWant skips this input's gradient", False)])


def _accumulator_fixes(d: Diagnosis) -> list[Fix]:
  return _with_refs(d, lambda leaf: [
      (f"Build the accumulator from {leaf.label}'s type",
       f"ValAccum(jax.typeof({leaf.label}))",
       "an accumulator has the type of its input (ValAccum from jax.experimental.hijax)", True)])


def _cotangent_fixes(d: Diagnosis) -> list[Fix]:
  outputs = _leaves(d, "output")
  want, got = d.expected_aval, d.got_aval
  if want is None or got is None:
    return []
  dtype = f"jnp.{want.dtype}"
  fixes = []
  if got.shape == want.shape:
    fixes.append(Fix(f"Cast the cotangent to {want.dtype}", f"f_vjp(ct.astype({dtype}))",
                     f"the output is {want.str_short()}, so its cotangent is too", True))
  elif got.size == want.size:
    fixes.append(Fix("Reshape the cotangent (only type-correct)",
                     f"f_vjp(ct.reshape({tuple(want.shape)}).astype({dtype}))",
                     "same number of elements; check that the order is the output's", False))
  if len(outputs) == 1:
    fixes.append(Fix("A cotangent shaped like the output (only type-correct)",
                     "f_vjp(jnp.ones_like(out))", "ones_like(out) has exactly the output's type",
                     False))
  return fixes


def _cotangent_tree_fixes(d: Diagnosis) -> list[Fix]:
  return [Fix("A cotangent tree shaped like the output (only type-correct)",
              "f_vjp(jax.tree.map(jnp.ones_like, out))",
              f"the cotangent must have the output's structure {d.expected}", False)]


_BY_KIND = {
    "ref_grad_unbound": _ref_fixes, "ref_grad_as_value": _ref_fixes,
    "grad_ref_type": _ref_fixes, "accumulator_type": _accumulator_fixes,
    "vjp_cotangent_type": _cotangent_fixes, "vjp_cotangent_structure": _cotangent_tree_fixes,
}
