"""``vjpviz.gradcheck``: every custom rule a function reaches, judged by its primal's derivative.

``torch.autograd.gradcheck`` and ``jax.test_util.check_vjp`` check one function
in one random direction. Here the function is differentiated once, abstractly
(as ``vjpviz.check`` does), with the hook collecting the ``RuleSite`` of every
custom_vjp application whose fwd runs, at any depth (jit, vmap, scan, remat,
library models). Each rule is then judged as a function, at random inputs of
the types it was applied to (``analysis.values.oracle``), independently of where in
the model it sits: a rule whose cotangents are well-typed but differ from the
primal's derivative becomes a ``bwd_value`` warning, through the same
diagnose step as a type error (graph, located node, the differing edges marked).

Opt-in, since surrogate gradients are intentional: a rule marked with
``vjpviz.surrogate`` is never a warning, and a rule nothing can judge (a flat
primal: a straight-through estimator) is listed as not judged, never as wrong.
JAX's caches are cleared first, as ``install`` does: a jitted function traced
before would not run its rules' fwd again, and its rules would go unseen.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses

import jax

from . import pipeline
from ..analysis.values import oracle, replay
from ..analysis.assemble import diagnose, key
from ..analysis.diagnosis import Diagnosis
from ..analysis.graph import Graph
from ..base import safety
from ..base.unchecked import Unchecked, attempt
from ..capture.naming.function_names import function_name
from ..base.surrogates import is_surrogate
from ..capture import records
from ..capture.records import WARNING, Record, Session
from ..capture.sites import custom_rules
from .check import as_shape_struct, run

@dataclasses.dataclass(frozen=True)
class RuleCheck:
  """The verdict on one rule at one set of input types: words, no arrays."""
  function: str
  rule: str | None
  call_site: str | None
  status: str              # oracle.RIGHT | WRONG | UNVERIFIABLE | TYPE_ERROR | FAILED
  reason: str
  surrogate: bool = False

  @property
  def judged(self) -> bool:
    return self.status in (oracle.RIGHT, oracle.WRONG)

  def line(self) -> str:
    mark = " (marked surrogate)" if self.surrogate else ""
    return f"{self.function}'s bwd rule {self.rule}{mark}: {self.status}: {self.reason}"


@dataclasses.dataclass(frozen=True)
class GradCheck:
  """What ``gradcheck`` found: iterate it for the ``bwd_value`` warnings; ``rules`` has
  every rule checked, with why the unjudged ones were not (``not_judged``)."""
  diagnoses: tuple[Diagnosis, ...]
  rules: tuple[RuleCheck, ...]
  failed: Unchecked | None = None    # vjpviz failed inside while judging: why

  def __iter__(self):
    return iter(self.diagnoses)

  def __len__(self) -> int:
    return len(self.diagnoses)

  def __getitem__(self, i):
    return self.diagnoses[i]

  def __bool__(self) -> bool:
    """False only where every rule reached was judged right (or marked surrogate): the
    all-clear; a rule not judged is not one (``unchecked`` says which)."""
    return bool(self.diagnoses) or self.unchecked is not None

  @property
  def unchecked(self) -> Unchecked | None:
    """Why this is no all-clear though nothing differs: an internal failure, or the rules
    nothing could judge (a flat primal, loops past their cap, no time left)."""
    missed = [r for r in self.not_judged if not r.surrogate]
    if self.failed is not None or not missed:
      return self.failed
    return Unchecked("vv.gradcheck", f"{len(missed)} of {len(self.rules)} custom rule"
                     f"{'s' * (len(self.rules) != 1)} not judged; first: {missed[0].line()}")

  @property
  def not_judged(self) -> tuple[RuleCheck, ...]:
    return tuple(r for r in self.rules if not r.judged)

  @property
  def surrogates(self) -> tuple[RuleCheck, ...]:
    return tuple(r for r in self.rules if r.surrogate)

  def summary(self) -> str:
    n = len(self.rules)
    parts = [f"{len(self.diagnoses)} differ{'s' * (len(self.diagnoses) == 1)} from the "
             "primal's derivative"]
    if self.not_judged:
      parts.append(f"{len(self.not_judged)} not judged")
    if self.surrogates:
      parts.append(f"{len(self.surrogates)} marked surrogate")
    return f"{n} custom rule{'s' * (n != 1)} value-checked: " + ", ".join(parts)


def gradcheck(fun, *args, argnums=None, seed: int = 0, **kwargs) -> GradCheck:
  """Check the values of every custom rule ``fun`` reaches when differentiated.

  ``args`` may be arrays or ShapeDtypeStructs: they only decide which rules are
  reached and at which types; each rule is judged at random inputs of those
  types. ``argnums`` (default: every argument of floating arrays) says what is
  differentiated.
  """
  abstract_args = jax.tree_util.tree_map(as_shape_struct, args)
  nums = _floating_args(abstract_args) if argnums is None else (
      (argnums,) if isinstance(argnums, int) else tuple(argnums))
  jax.clear_caches()
  with applications() as applied:
    found = run(fun, abstract_args, nums, kwargs)
  with attempt(f"vv.gradcheck of {function_name(fun)}") as trial:
    result = judge(applied, seed)
  missed = trial.unchecked() or next((u for u in found if isinstance(u, Unchecked)), None)
  return dataclasses.replace(result, failed=missed) if missed else result


@contextlib.contextmanager
def applications():
  """Every rule application whose fwd runs meanwhile (this thread), one per rule and
  input types: (site, the origin of the VJP it ran in, the custom_vjp object)."""
  seen: dict = {}

  def observe(site, args):
    cvjp = site.custom_rule() if site.custom_rule is not None else None
    found = (id(cvjp), site.in_tree, site.in_avals, site.perturbed)
    if cvjp is not None and found not in seen:
      session = records.current_session()
      seen[found] = (site, session.origin if session else None, cvjp)
  with custom_rules.site_made.listening(observe):
    yield seen


def judge(applied: dict, seed: int = 0) -> GradCheck:
  """The oracle's verdict on each application ``applications`` collected; one warning
  per rule (its first wrong application), however many types it was applied at; each
  recorded (in a job, with the processes that found it; a headless job's files)."""
  checks, by_origin, warned = [], collections.defaultdict(list), set()
  for site, origin, cvjp in applied.values():
    surrogate = is_surrogate(cvjp)
    verdict = _verdict(site, cvjp, seed)
    checks.append(RuleCheck(site.function, site.rule, site.call_site, verdict.status,
                            verdict.reason, surrogate))
    if verdict.status == oracle.WRONG and not surrogate and id(cvjp) not in warned:
      warned.add(id(cvjp))
      by_origin[id(origin)].append((origin, _record(site, verdict), verdict))
  found = [pipeline.recorded(d) for group in by_origin.values() for d in _diagnosed(group)]
  return GradCheck(tuple(found), tuple(checks))


def _verdict(site, cvjp, seed: int) -> oracle.Verdict:
  try:
    judge_ = oracle.Oracle.of(site, cvjp.fun, seed=seed)
  except replay.NotJudged as e:   # loops past their cap, effects it won't repeat, no time
    return oracle.Verdict(oracle.UNVERIFIABLE, str(e), judge="")
  except Exception as e:  # noqa: BLE001 - a primal that cannot run at random inputs
    return oracle.Verdict(oracle.FAILED, f"{site.function} could not be run at random inputs "
                          f"({type(e).__name__}: {e})"[:300], judge="")
  return judge_.verdict(cvjp.fwd, cvjp.bwd, cvjp.symbolic_zeros, cvjp.nondiff_argnums,
                        site.perturbed)


def _record(site, verdict: oracle.Verdict) -> Record:
  bad = [l for l in verdict.leaves if l.judged and not l.ok]
  return Record(kind="bwd_value", severity=WARNING, function=site.function, source=site.source,
                path=site.in_paths[bad[0].index], expected=f"the primal's derivative "
                f"({verdict.judge})", got=verdict.breaks(), rule=site.rule, site=site,
                flat_index=bad[0].index, detail=verdict.reason)


def _diagnosed(group: list) -> list[Diagnosis]:
  """The records of one origin through the ordinary diagnose step, then their numbers."""
  origin = group[0][0]
  leaves = {key(rec): tuple(l for l in v.leaves if l.judged and not l.ok) for _, rec, v in group}
  found = safety.safely(diagnose, Session("vjp", origin, [rec for _, rec, _ in group]), None,
                         default=[])
  return [pipeline.with_fixes(dataclasses.replace(
      d, leaf_errors=leaves[key(d)], graph=mark_values(d.graph, d.node, d.site, leaves[key(d)])))
          for d in found]


def mark_values(graph: Graph, node_id: str | None, site, leaves) -> Graph:
  """The graph with each edge into ``node_id`` whose cotangent values differ labelled:
  its type is the one expected (``diagnose`` wrote the verdict where a type would go)."""
  node = graph.node(node_id) if node_id else None
  if node is None or site is None:
    return graph
  first = len(node.in_avals) - len(site.in_paths)   # the rule's consts come first
  rel = {first + l.index: value_text(l) for l in leaves}
  edges = tuple(e._replace(value_error=rel[e.position], cotangent_got=e.cotangent)
                if e.dst == node.id and e.position in rel else e for e in graph.edges)
  return dataclasses.replace(graph, edges=edges)


def value_text(leaf: oracle.LeafError) -> str:
  """How one leaf differs, for an edge label: ``rel 0.31`` (``zero`` when the rule's is)."""
  return "zero" if leaf.got_zero else f"rel {leaf.max_rel:.2g}"


def _floating_args(abstract_args) -> tuple[int, ...]:
  return tuple(i for i, a in enumerate(abstract_args) if floating(a))


def floating(tree) -> bool:
  """Whether ``tree`` is abstract values of floating arrays only: what a gradient is taken of."""
  leaves = jax.tree_util.tree_leaves(tree)
  return bool(leaves) and all(isinstance(l, jax.ShapeDtypeStruct)
                              and jax.numpy.issubdtype(l.dtype, jax.numpy.inexact)
                              for l in leaves)
