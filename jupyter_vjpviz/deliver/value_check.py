"""``vjpviz.gradcheck``: every custom rule a function reaches, judged by its primal's derivative.

``torch.autograd.gradcheck`` and ``jax.test_util.check_vjp`` check one function
in one random direction. Here the function is differentiated once, abstractly
(as ``vjpviz.check`` does), with the hook collecting the ``RuleSite`` of every
custom_vjp application whose fwd runs, at any depth (jit, vmap, scan, remat,
library models). Each rule is then judged as a function, at random inputs of
the types it was applied to (``analysis.oracle``), independently of where in
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
import weakref

import jax
import numpy as np
from jax._src import core

from . import runtime, type_check
from ..analysis import locate, nonfinite, nonfinite_explain, oracle, program
from ..analysis.nonfinite_eval import inexact
from ..analysis.assemble import diagnose, key
from ..analysis.diagnosis import Diagnosis
from ..analysis.graph import Graph
from ..analysis.partial_vjp import pull_ones
from ..capture import custom_rules, entry_points, frames, jit_calls, names, records, user_calls
from ..capture.records import ERROR, WARNING, Record, Session
from ..fixes import nonfinite as nonfinite_fixes
from ..base.surrogates import is_surrogate
from ..base import safety

KIND = "bwd_value"


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

  def __iter__(self):
    return iter(self.diagnoses)

  def __len__(self) -> int:
    return len(self.diagnoses)

  def __getitem__(self, i):
    return self.diagnoses[i]

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
  abstract_args = jax.tree_util.tree_map(type_check.as_shape_struct, args)
  nums = _floating_args(abstract_args) if argnums is None else (
      (argnums,) if isinstance(argnums, int) else tuple(argnums))
  jax.clear_caches()
  with applications() as applied:
    type_check.run(fun, abstract_args, nums, kwargs)
  return judge(applied, seed)


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
  with custom_rules.observe_sites(observe):
    yield seen


def judge(applied: dict, seed: int = 0) -> GradCheck:
  """The oracle's verdict on each application ``applications`` collected; one warning
  per rule (its first wrong application), however many types it was applied at."""
  checks, by_origin, warned = [], collections.defaultdict(list), set()
  for site, origin, cvjp in applied.values():
    surrogate = is_surrogate(cvjp)
    verdict = _verdict(site, cvjp, seed)
    checks.append(RuleCheck(site.function, site.rule, site.call_site, verdict.status,
                            verdict.reason, surrogate))
    if verdict.status == oracle.WRONG and not surrogate and id(cvjp) not in warned:
      warned.add(id(cvjp))
      by_origin[id(origin)].append((origin, _record(site, verdict), verdict))
  found = [d for group in by_origin.values() for d in _diagnosed(group)]
  return GradCheck(tuple(found), tuple(checks))


def _verdict(site, cvjp, seed: int) -> oracle.Verdict:
  try:
    judge_ = oracle.Oracle.of(site, cvjp.fun, seed=seed)
  except Exception as e:  # noqa: BLE001 - a primal that cannot run at random inputs
    return oracle.Verdict(oracle.FAILED, f"{site.function} could not be run at random inputs "
                          f"({type(e).__name__}: {e})"[:300], judge="")
  return judge_.verdict(cvjp.fwd, cvjp.bwd, cvjp.symbolic_zeros, cvjp.nondiff_argnums,
                        site.perturbed)


def _record(site, verdict: oracle.Verdict) -> Record:
  bad = [l for l in verdict.leaves if l.judged and not l.ok]
  return Record(kind=KIND, severity=WARNING, function=site.function, source=site.source,
                path=site.in_paths[bad[0].index], expected=f"the primal's derivative "
                f"({verdict.judge})", got=verdict.breaks(), rule=site.rule, site=site,
                flat_index=bad[0].index, detail=verdict.reason)


def _diagnosed(group: list) -> list[Diagnosis]:
  """The records of one origin through the ordinary diagnose step, then their numbers."""
  origin = group[0][0]
  leaves = {key(rec): tuple(l for l in v.leaves if l.judged and not l.ok) for _, rec, v in group}
  found = safety.safely(diagnose, Session("vjp", origin, [rec for _, rec, _ in group]), None,
                         default=[])
  return [runtime.with_fixes(dataclasses.replace(
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



# ------------------------------------------------------- where the gradient goes NaN

NONFINITE = "nonfinite_cotangent"


def nans(fun, *args, argnums=0, **kwargs) -> Diagnosis | None:
  """Differentiate ``fun`` w.r.t. ``argnums``; if a gradient leaf is NaN or Inf, the
  ``nonfinite_cotangent`` Diagnosis: the equation whose backward rule first turned a
  finite cotangent non-finite, why (from the primal values there), and fixes verified
  by re-running the gradient. None when the gradient is finite (nothing else runs).

  With ``jax_debug_nans`` on, JAX's FloatingPointError makes the diagnosis an error;
  the search itself runs with it off. ``argnums=None``: ``fun`` takes its gradients
  itself (a train step, jitted or not): it is run with jit disabled and the first
  gradient it takes that is not finite is localised.
  """
  if argnums is None:
    return stepped(fun, args, kwargs)
  nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
  args = tuple(jax.tree_util.tree_map(jax.numpy.asarray, a) if i in nums else a
               for i, a in enumerate(args))   # a Python float differentiated is an input
  raised = False
  try:
    grads = pull_ones(fun, args, nums, kwargs)
  except FloatingPointError:
    raised = True
    with jax.debug_nans(False):
      grads = pull_ones(fun, args, nums, kwargs)
  if nonfinite.all_finite(jax.tree_util.tree_leaves(grads)):
    return None
  with jax.debug_nans(False):
    return safety.safely(_nonfinite, fun, args, nums, kwargs, raised, grads)


def _nonfinite(fun, args, nums, kwargs, raised: bool, grads) -> Diagnosis | None:
  origin = user_calls.user_origin(fun, tuple(args), kwargs, tuple(args[i] for i in nums))
  jaxpr, invals, active, out_cts = program_inputs(origin, (tuple(args), kwargs))
  original = _in_program_order(args, nums, grads, origin, active)
  del grads
  with hook_aside():
    found = nonfinite.localise(jaxpr, invals, active, out_cts)
    c = found.culprit
    graph, (node,) = program.build(origin, lambda g: [c.node if c else None])
    labels = input_names(graph, origin)
    run = nonfinite_fixes.Program(jaxpr, invals, active, out_cts, labels, origin.name, nums,
                                  found)
    fixes = tuple(nonfinite_fixes.suggest(c, run, original)) if c is not None else ()
  bad = next(i for i, g in enumerate(original) if not np.isfinite(g).all())
  grad = nonfinite.summary(original[bad])
  strip = nonfinite.strip(labels, [nonfinite.Flow.of(f, g.size) for f, g in zip(
      [nonfinite.flow(g) for g in original], original)])
  del original, invals, run
  found.frames.clear()                  # the search's arrays: this call's only
  graph = dataclasses.replace(graph, strip=strip)
  return _nonfinite_diagnosis(c, found, graph, node, labels[bad], grad, fixes, raised, origin)


def _in_program_order(args, nums, grads, origin, active) -> list:
  """The gradient already computed (the fixes' reference: no second backward pass), one
  array per differentiated program input: the leaf of ``args[i]`` is the program's input
  at ``args[i]``'s offset in the flattened call, plus its own index."""
  start = np.cumsum([0, *(len(jax.tree_util.tree_leaves(a)) for a in args)])
  by_flat = {int(start[i]) + k: np.asarray(g) for i, tree in zip(nums, grads)
             for k, g in enumerate(jax.tree_util.tree_leaves(tree))}
  arrays = [j for j, leaf in enumerate(origin.leaves) if isinstance(leaf, core.AbstractValue)]
  return [by_flat[j] for j, a in zip(arrays, active) if a]


def program_inputs(origin, call) -> tuple:
  """(jaxpr, its array inputs' values, which are differentiated, ones for its outputs'
  cotangents: jax.grad's) of ``origin`` called with ``call``'s leaves."""
  jaxpr = program.trace(origin)
  flat = jax.tree_util.tree_leaves(call)
  arrays = [j for j, leaf in enumerate(origin.leaves) if isinstance(leaf, core.AbstractValue)]
  differentiated = set(origin.differentiated_leaves)
  out_cts = [jax.numpy.ones(v.aval.shape, v.aval.dtype) if inexact(v) else None
             for v in jaxpr.outvars]
  return (jaxpr, [jax.numpy.asarray(flat[j]) for j in arrays],
          [j in differentiated for j in arrays], out_cts)


def input_names(graph: Graph, origin) -> list[str]:
  """The differentiated inputs as the graph names them (``params[3].w``)."""
  return [(graph.node(f"in{k}").label if graph.node(f"in{k}") else f"args[{k}]")
          for k in range(len(origin.differentiated_leaves))]


def mark_flows(graph: Graph, flows: dict) -> Graph:
  """The graph with each edge whose cotangent the search measured carrying its values
  (``Edge.flow``), for the overlay; ``flows``: ``"dst#position"`` -> ``nonfinite.Flow``."""
  edges = tuple(e._replace(flow=dataclasses.astuple(flows[k])) if (k := f"{e.dst}#{e.position}")
                in flows else e for e in graph.edges)
  return dataclasses.replace(graph, edges=edges)


def flow_dicts(edges: dict, strip: tuple) -> dict:
  """``Diagnosis.cotangents``' edges and layers, as numbers."""
  return {"edges": {k: f.to_dict() for k, f in edges.items()},
          "layers": [{"layer": r[0], **nonfinite.Flow(*r[1:]).to_dict()} for r in strip]}


def _nonfinite_diagnosis(c, found, graph, node, name, grad, fixes, raised, origin) -> Diagnosis:
  graph = mark_flows(graph, found.edges)
  cotangents = {**flow_dicts(found.edges, graph.strip),
                "iterations": [{"node": n, "t": t, "norm": norm, "finite": ok}
                               for n, t, norm, ok in found.iterations]}
  where = f"the gradient of {name} has {grad.bad()}"
  if c is None:
    return Diagnosis(kind=NONFINITE, severity=ERROR if raised else WARNING, function=origin.name,
                     rule=None, source=origin.source, path=name, expected="a finite gradient",
                     got=where, message=None, graph=graph, argument=name, cotangents=cotangents,
                     detail="no single equation made it non-finite: the forward pass may be "
                            "non-finite already, or finite cotangents overflowed as they added up")
  function, rule = program.custom_names(c.eqn) if program.rule_call(c.eqn) else (c.eqn.primitive.name, None)
  inner = c.inner[1] if c.inner else None
  primal = names.function_of(c.eqn.params.get("call_jaxpr"))[1] if c.inner else None
  if c.inner and c.inner[4] and primal and frames.library_file(primal.rpartition(":")[0]):
    function = c.inner[4]       # a library's rule (diffrax's loop): name the user's function
  return Diagnosis(
      kind=NONFINITE, severity=ERROR if raised else WARNING, function=function, rule=rule,
      source=inner or c.source, path=name, argument=name,
      expected=f"a finite cotangent out of {function}, given a finite one in (max |ct| "
               f"{c.ct_in.max_abs:.3g})",
      got=f"{c.ct_out.bad()} out of {function}; {where}", message=None, node=node,
      graph=graph, fixes=fixes, call_site=c.source, instance=locate.instance(graph, node),
      detail=nonfinite_explain.explain(c), cotangents=cotangents)


class GradientWatch:
  """Every gradient computed meanwhile, checked for NaN/Inf: an eager one as its backward
  pass returns (one reduction per leaf), one taken inside a jitted call (tracers, no
  values) by that call's outputs, each time it is called (one reduction). The user's call
  behind the first that is not finite is kept until ``diagnose``."""

  def __init__(self):
    self.calls: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    self.checked = 0
    self.bad: list = []          # (fun, args, kwargs, diff_argnums, has_aux) per bad gradient
    self.traced = self._traced_seen = 0    # gradients taken on tracers, and as of the last call
    self.steps: weakref.WeakSet = weakref.WeakSet()   # jitted functions that take gradients
    self.steps_checked = 0
    self.bad_steps: list = []    # (fun, args, kwargs) per jitted call with NaN/Inf outputs

  def vjp(self, fun, args, kwargs, diff_argnums, has_aux, f_vjp) -> None:
    if any(isinstance(x, core.Tracer) for x in jax.tree_util.tree_leaves((args, kwargs))):
      self.traced += 1
      return
    jaxpr = getattr(f_vjp, "jaxpr", None)
    if jaxpr is not None:
      self.calls[jaxpr] = (fun, tuple(args), kwargs, diff_argnums, has_aux)

  def backward(self, jaxpr, cotangents) -> None:
    call = self.calls.get(jaxpr)
    if call is None:
      return
    self.checked += 1
    if not _finite(cotangents):
      self.bad.append(call)

  def jitted(self, fun, args, kwargs, outs) -> None:
    """A top-level jitted call returned: if its trace took a gradient (one was taken on
    tracers since the last call), it is a step whose outputs are checked, now and later."""
    if self.traced > self._traced_seen:
      self._traced_seen = self.traced
      self.steps.add(fun)
    if fun not in self.steps:
      return
    self.steps_checked += 1
    if not self.bad_steps and not _finite(outs):
      self.bad_steps.append((fun, tuple(args), dict(kwargs)))

  def diagnose(self) -> Diagnosis | None:
    """``nans`` of the first gradient that was not finite (later ones usually inherit its
    NaN through the parameters), else of the first gradient taken by the first jitted
    call whose outputs were not; the calls are dropped, and their arrays with them."""
    bad, steps = self.bad, self.bad_steps
    self.bad, self.bad_steps, self.calls = [], [], weakref.WeakKeyDictionary()
    if bad:
      fun, args, kwargs, diff_argnums, has_aux = bad[0]
      main = (lambda *a, **k: fun(*a, **k)[0]) if has_aux else fun
      return nans(main, *args, argnums=diff_argnums, **kwargs)
    return stepped(*steps[0]) if steps else None


def stepped(fun, args, kwargs) -> Diagnosis | None:
  """``fun`` (a train step: it takes its gradients itself) run again with jit disabled,
  so that each gradient it takes is eager and watched: ``nans`` of the first one that is
  not finite. Its inputs donated to the jitted call are gone: then None, said."""
  if any(getattr(x, "is_deleted", lambda: False)() for x in jax.tree_util.tree_leaves(args)):
    print(f"vjpviz: {names.function_name(fun)}'s inputs were donated to it; call it without "
          "donate_argnums to localise its NaN")
    return None
  with _hooked(), runtime.collecting(), gradients(jit=False) as watch, jax.disable_jit():
    fun(*args, **kwargs)
  return watch.diagnose()


@jax.jit
def _all_finite(leaves) -> jax.Array:
  return jax.numpy.all(jax.numpy.stack([jax.numpy.isfinite(x).all() for x in leaves]))


def _finite(tree) -> bool:
  """Whether every floating array in ``tree`` is finite: one dispatch, one transfer."""
  leaves = [x for x in jax.tree_util.tree_leaves(tree) if isinstance(x, jax.Array) and inexact(x)]
  return not leaves or bool(_all_finite(leaves))


@contextlib.contextmanager
def gradients(jit: bool = True):
  """A ``GradientWatch`` of every jax.vjp (jax.grad, value_and_grad) called meanwhile;
  with ``jit``, of every top-level jitted call in this thread too (a train step)."""
  watch = GradientWatch()
  entry_points.gradient_watchers.append(watch)
  try:
    with jit_calls.watching(watch.jitted) if jit else contextlib.nullcontext():
      yield watch
  finally:
    entry_points.gradient_watchers.remove(watch)


@contextlib.contextmanager
def _hooked():
  """The hook installed meanwhile (the watch is told of gradients through it)."""
  was = runtime.installed()
  runtime.install()
  try:
    yield
  finally:
    if not was:
      runtime.uninstall()


@contextlib.contextmanager
def hook_aside():
  """The hook stands aside while the search re-runs the user's rules."""
  records.state.suspended += 1
  try:
    yield
  finally:
    records.state.suspended -= 1
