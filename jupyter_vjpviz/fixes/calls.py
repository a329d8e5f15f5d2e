"""Fixes for the user's *call* of a VJP function (``f_vjp(ct)``, ``f_vjp.with_refs``).

These diagnoses have no rule to edit, so each fix is the call to write instead.
JAX matches ``with_refs``' arguments and the cotangent against the primal
arguments' and outputs' pytrees, so the fix is written in those trees: the
argument trees are rebuilt from the graph's input labels (``params['w']``), and
the failing leaf is found by its path (``args[0]['w']``, ``out['a']``).
``f_vjp``, ``ct`` and ``out`` stand for the user's own names, which the
diagnosis does not know.
"""
from __future__ import annotations

import dataclasses
import re

from ..analysis.diagnosis import UNVERIFIABLE, Diagnosis, Fix
from ..analysis.values import reverse_mode
from ..base import kinds
from ..base.safety import safely
from ..capture.sites import ref_accums, vjp3_rules
from . import rank, source

_AVAL = re.compile(r"^(Ref\{)?(\w+)\[([\d,\s]*)\]\}?$")
# An input label is a parameter name, or ``args[i]`` past the named ones, then a keystr.
_LABEL = re.compile(r"^(args\[\d+\]|[A-Za-z_]\w*)(.*)$")


@dataclasses.dataclass(frozen=True)
class Leaf:
  """One differentiated input: its label split into argument and keys, and its type."""
  argument: str
  entries: tuple              # path_entries of the keys inside the argument
  dtype: str
  shape: tuple[int, ...]
  ref: bool

  @classmethod
  def parse(cls, label: str, aval: str) -> Leaf | None:
    m, name = _AVAL.match(aval or ""), _LABEL.match(label)
    if m is None or name is None:
      return None
    shape = tuple(int(s) for s in m.group(3).split(",") if s.strip())
    return cls(name.group(1), tuple(source.path_entries(name.group(2))), m.group(2), shape,
               bool(m.group(1)))

  @property
  def label(self) -> str:
    return self.argument + "".join(f".{k}" if attr else f"[{k!r}]" for k, attr in self.entries)

  @property
  def zeros(self) -> str:
    return f"jnp.zeros({self.shape}, jnp.{self.dtype})"

  @property
  def new_ref(self) -> str:
    return f"jax.new_ref({self.zeros})"


def suggestions(d: Diagnosis) -> list[Fix]:
  return [f for family in kinds.of(d.kind).call_fixers for f in CALL_FIXERS[family](d)]


def _inputs(d: Diagnosis) -> list[Leaf] | None:
  """The differentiated inputs in the VJP's leaf order (ids ``in0, in1, ...``)."""
  nodes = sorted((n for n in d.graph.nodes if n.kind == "input"), key=lambda n: int(n.id[2:]))
  leaves = [Leaf.parse(n.label, n.out_avals[0] if n.out_avals else "") for n in nodes]
  return leaves if leaves and None not in leaves else None


def _with_refs(d: Diagnosis, replace) -> list[Fix]:
  """``f_vjp.with_refs(...)`` in the arguments' trees, the failing leaf's entry from ``replace``."""
  inputs = _inputs(d)
  if inputs is None:
    return []
  arguments = list(dict.fromkeys(leaf.argument for leaf in inputs))
  path = source.path_entries(d.path)
  failing = [leaf for leaf in inputs
             if [(arguments.index(leaf.argument), False), *leaf.entries] == path]
  if len(failing) != 1:
    return []
  fixes = []
  for title, entry, reason, exact in replace(failing[0]):
    texts = {leaf: entry if leaf is failing[0] else
             (leaf.new_ref if leaf.ref else "jax.ad.GradValue()") for leaf in inputs}
    trees = [_tree([(list(leaf.entries), texts[leaf]) for leaf in inputs if leaf.argument == a])
             for a in arguments]
    if None in trees:
      return []
    code = f"f_vjp.with_refs({', '.join(trees)})(ct)"
    fixes.append(Fix(title if exact else title + " (only type-correct)", code, reason, exact))
  return fixes


def _tree(items: list[tuple[list, str]]) -> str | None:
  """Python text of one argument's tree from (entries, text) per leaf; None if not literal.

  String keys make a dict and integer keys a tuple (what a ``[i]`` key means in
  almost every JAX program; a list argument would need ``[...]``). Attribute
  keys (dataclasses, namedtuples) have no literal spelling here.
  """
  if len(items) == 1 and not items[0][0]:
    return items[0][1]
  if any(not entries or entries[0][1] for entries, _ in items):
    return None
  children: dict = {}
  for entries, text in items:
    children.setdefault(entries[0][0], []).append((entries[1:], text))
  sub = {k: _tree(v) for k, v in children.items()}
  if None in sub.values():
    return None
  if all(isinstance(k, str) for k in sub):
    return "{" + ", ".join(f"{k!r}: {v}" for k, v in sub.items()) + "}"
  if sorted(sub) == list(range(len(sub))):
    items = [sub[k] for k in range(len(sub))]
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
  return None


def _ref_fixes(d: Diagnosis) -> list[Fix]:
  skip = lambda leaf: (f"Don't compute the gradient of {leaf.label}", "jax.ad.DontWant()",
                       "DontWant skips this input's gradient", False)
  if d.expected == ref_accums.GRAD_VALUE:   # no ref can take it: vmap hands the rule values
    return _with_refs(d, lambda leaf: [
        (f"Get the gradient of {leaf.label} as a value", ref_accums.GRAD_VALUE,
         "under vmap the rule takes accumulators for values only; add the gradient returned "
         "into your ref yourself (ref[...] += ...), or apply vmap after differentiation", True),
        skip(leaf)])
  return _with_refs(d, lambda leaf: [
      (f"Accumulate the gradient of {leaf.label} into a new ref", leaf.new_ref,
       f"a Ref-typed input's gradient is added into a Ref{{{leaf.dtype}{list(leaf.shape)}}}; "
       "read it afterwards with ref[...]", True), skip(leaf)])


def _accumulator_fixes(d: Diagnosis) -> list[Fix]:
  return _with_refs(d, lambda leaf: [
      (f"Build the accumulator from {leaf.label}'s type",
       f"ValAccum(jax.typeof({leaf.label}))",
       "an accumulator has the type of its input (ValAccum from jax.experimental.hijax)", True)])


def _cotangent_fixes(d: Diagnosis) -> list[Fix]:
  """The failing cotangent leaf cast or reshaped in place, or ones shaped like the output."""
  want, got = d.expected_aval, d.got_aval
  if want is None or got is None:
    return []
  path = source.path_entries(d.path)
  dtype = f"jnp.{want.dtype}"
  at = f" at {d.path}" if path else ""
  fixes = []
  if got.shape == want.shape:
    fixed = _replaced("ct", path, lambda e: f"{e}.astype({dtype})")
    if fixed is not None:
      fixes.append(Fix(f"Cast the cotangent{at} to {want.dtype}", f"f_vjp({fixed})",
                       f"the output{at} is {want.str_short()}, so its cotangent is too", True))
  elif got.size == want.size:
    fixed = _replaced("ct", path, lambda e: f"{e}.reshape({tuple(want.shape)}).astype({dtype})")
    if fixed is not None:
      fixes.append(Fix(f"Reshape the cotangent{at} (only type-correct)", f"f_vjp({fixed})",
                       "same number of elements; check that the order is the output's", False))
  ones = "jax.tree.map(jnp.ones_like, out)" if path else "jnp.ones_like(out)"
  fixes.append(Fix("A cotangent shaped like the output (only type-correct)", f"f_vjp({ones})",
                   f"{ones} has exactly the output's type", False))
  return fixes


def _replaced(expr: str, path: list[tuple], new) -> str | None:
  """``expr`` rebuilt with ``new(leaf)`` at ``path``: ``{**ct, 'a': ...}``, tuples by slicing."""
  if not path:
    return new(expr)
  (key, attr), rest = path[0], path[1:]
  inner = None if attr else _replaced(f"{expr}[{key!r}]", rest, new)
  if inner is None:
    return None
  if isinstance(key, str):
    return f"{{**{expr}, {key!r}: {inner}}}"
  return f"(*{expr}[:{key}], {inner}, *{expr}[{key + 1}:])"


def _cotangent_tree_fixes(d: Diagnosis) -> list[Fix]:
  return [Fix("A cotangent tree shaped like the output (only type-correct)",
              "f_vjp(jax.tree.map(jnp.ones_like, out))",
              f"the cotangent must have the output's structure {d.expected}", False)]


_FORWARD_CALLS = {"jax.jvp": "jax.jvp({}, primals, tangents)", "jax.linearize": "jax.linearize({}, *primals)",
                  "jax.jacfwd": "jax.jacfwd({})(x)", "jax.hessian": "jax.hessian({})(x)"}
_REVERSE_CALLS = {"jax.jacfwd": "jax.jacrev({})(x)", "jax.hessian": "jax.jacrev(jax.jacrev({}))(x)"}


def _reverse_mode_fixes(d: Diagnosis) -> list[Fix]:
  """The user's forward-mode call in reverse mode (jacfwd, hessian) or, with no reverse-mode
  twin (jvp, linearize), a custom_jvp; and the primal differentiated by JAX, rule dropped."""
  f, transformation = d.function or "f", d.got or "jax.jvp"
  fun = f"{f}.{_primal_attribute(d)}"
  if transformation in _REVERSE_CALLS:
    first = _run_reverse_mode(d, Fix(
        f"Differentiate {f} in reverse mode", _REVERSE_CALLS[transformation].format(f),
        f"{d.expected} computes what {transformation} does, in reverse mode, through "
        f"{f}'s own bwd rule"))
  else:
    first = Fix(f"Give {f} a custom_jvp rule in place of its custom_vjp",
                f"@jax.custom_jvp\ndef {f}(...): ...\n@{f}.defjvp\ndef {f}_jvp(primals, tangents): ...",
                f"{transformation} needs a forward-mode rule; JAX transposes a custom_jvp's "
                "for reverse mode too")
  primal = Fix(f"Differentiate {f}'s primal itself (its custom rule dropped)",
               _FORWARD_CALLS.get(transformation, "jax.jvp({}, primals, tangents)").format(fun),
               f"{fun} is the undecorated function, which JAX differentiates in any mode",
               verdict=UNVERIFIABLE, note=f"{fun}'s own derivative is the reference a rule "
               "is judged by: nothing independent of it judges it")
  return [first, primal]


def _primal_attribute(d: Diagnosis) -> str:
  """The attribute holding the user's custom_vjp's undecorated function: ``fun``, or
  ``f`` on the ``custom_vjp3`` JAX 0.9 to 0.11 make under ``jax_custom_vjp3``."""
  cvjp = d.site.custom_rule() if d.site is not None and d.site.custom_rule is not None else None
  user = cvjp._user() if isinstance(cvjp, vjp3_rules.CustomVjp3) else cvjp
  return "f" if user is not None and not hasattr(user, "fun") and hasattr(user, "f") else "fun"


def _run_reverse_mode(d: Diagnosis, fix: Fix) -> Fix:
  """``fix`` with its verdict from running it (``reverse_mode``) against the primal's own
  derivative, where the refused application's custom_vjp is still held; else as it is."""
  cvjp = d.site.custom_rule() if d.site is not None and d.site.custom_rule is not None else None
  if cvjp is None or not reverse_mode.judged(d.got):
    return fix
  verdict = safely(reverse_mode.verdict, d.site, cvjp, d.got)
  return fix if verdict is None else rank.with_verdict(fix, verdict, d.site)


CALL_FIXERS = {"refs": _ref_fixes, "accumulator": _accumulator_fixes,
           "cotangent": _cotangent_fixes, "cotangent_tree": _cotangent_tree_fixes,
           "reverse_mode": _reverse_mode_fixes}
"""The call-fix families a kind's ``call_fixers`` name."""
