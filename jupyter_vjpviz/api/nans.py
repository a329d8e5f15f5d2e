"""``vjpviz.nans``: where the gradient goes NaN, and the screen that finds which gradient did.

The gradient is re-run equation by equation from the failing call's own values
(``analysis.values.nonfinite``), and the first equation whose backward rule turned a finite
cotangent non-finite is the culprit, explained from the primal values there, with
fixes verified by re-running the gradient (``fixes.nonfinite``). ``gradients`` screens
every gradient a cell or a train step takes, and ``nans`` the first that is not finite.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import time
import weakref

import jax
import numpy as np

from ..capture import records
from ..capture.compat.private import core
from . import pipeline
from ..analysis import locate, program
from ..analysis.values import nonfinite, nonfinite_explain, replay
from ..analysis.diagnosis import Diagnosis
from ..analysis.values.flows import flow_dicts, input_names, mark_flows, program_inputs
from ..analysis.values.nonfinite_eval import inexact
from ..analysis.values.partial_vjp import arrays_only, as_input, pull_ones, without_aux
from ..base import hosts, safety, unchecked
from ..base.places import spelled
from ..capture.naming import frames, function_names, user_calls
from ..capture.records import ERROR, WARNING
from ..capture.sites import entry_points, jit_calls
from ..fixes import nonfinite as nonfinite_fixes

def nans(fun, *args, argnums=0, has_aux=False, **kwargs) -> Diagnosis | unchecked.Unchecked | None:
  """Differentiate ``fun`` w.r.t. ``argnums``; if a gradient leaf is NaN or Inf, the
  ``nonfinite_cotangent`` Diagnosis: the equation whose backward rule first turned a
  finite cotangent non-finite, why (from the primal values there), and fixes verified
  by re-running the gradient. None when the gradient is finite (nothing else runs).

  With ``jax_debug_nans`` on, JAX's FloatingPointError makes the diagnosis an error;
  the search itself runs with it off. ``argnums=None``: ``fun`` takes its gradients
  itself (a train step, jitted or not): it is run with jit disabled and the first
  gradient it takes that is not finite is localised. ``has_aux``: ``fun`` returns
  ``(loss, aux)``, as for ``jax.grad``. Differentiated arguments are taken as
  ``eqx.filter_grad`` takes them: their floating arrays, the rest held as they are.

  The gradient taken first is the user's own (their prints and callbacks happen, once);
  every later run (JAX's again without ``jax_debug_nans``, the search, each fix's
  gradient) is vjpviz's (``analysis.values.replay``): quiet, its effects not repeated.

  Where finiteness was not established (vjpviz failed inside, its run of ``fun`` raised,
  no time left, a step whose gradient it could not see) an ``Unchecked`` saying why,
  never None.
  """
  with unchecked.attempt(f"vv.nans of {function_names.function_name(fun)}") as trial:
    if argnums is None:
      found = stepped(fun, args, kwargs)
    else:
      found = _nans(without_aux(fun) if has_aux else fun, args, argnums, kwargs, ran=False)
  if isinstance(found, Diagnosis):
    return pipeline.recorded(found)
  return found or trial.clear_or(None)


def _nans(fun, args, argnums, kwargs, ran: bool) -> Diagnosis | unchecked.Unchecked | None:
  """``nans``; ``ran``: the user's call took this gradient already (a screened one).

  Arrays spanning the processes of a job: the user's gradient is taken on them as they
  are, and whether it is finite is one reduction every process reads alike; only a
  gradient that is not is searched, on the arrays copied whole to each process
  (``hosts.whole_here``), so that each process finds the same answer alone."""
  nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
  args = tuple(jax.tree_util.tree_map(as_input, a) if i in nums else a
               for i, a in enumerate(args))   # a Python float differentiated is an input
  fun, args = arrays_only(fun, args, nums)
  spans = hosts.any_spans((args, kwargs))
  if ran and spans:   # taken again, by vjpviz: on the whole arrays, here
    return _on_whole(fun, (args, kwargs, None), nums, False, 0.0)
  raised = False
  start = time.monotonic()
  try:
    try:
      grads = _gradient(fun, args, nums, kwargs, ran)
    except FloatingPointError:
      raised = True
      with jax.debug_nans(False):
        grads = _gradient(fun, args, nums, kwargs, ran=True)
  except replay.NotJudged as e:   # taken again, it would repeat an effect the program uses
    # (taken again only where it is not finite: screened, or JAX's NaN check raised)
    return _unlocalised(fun, None, raised, f"not localised: {e}")
  # Unread (our failure): not called finite, so the search runs and says what it can.
  finite = _finite if spans else lambda g: nonfinite.all_finite(jax.tree_util.tree_leaves(g))
  if safety.safely(finite, grads, default=False):
    return None
  took = 0.0 if ran else time.monotonic() - start   # the user's own gradient's time
  if spans:
    return _on_whole(fun, (args, kwargs, grads), nums, raised, took)
  return _searched(fun, args, nums, kwargs, raised, grads, took)


def _searched(fun, args, nums, kwargs, raised: bool, grads, took: float) -> Diagnosis:
  """The search for where ``grads`` (not finite) went non-finite; where vjpviz fails at
  it, the diagnosis says the gradient is not finite and that where is unknown, and why."""
  with jax.debug_nans(False), replay.account(replay.main_pass(took)):
    failed = []
    found = safety.safely(_nonfinite, fun, args, nums, kwargs, raised, grads,
                          default=failed)
  if found is not failed:
    return found
  return _unlocalised(fun, grads, raised, "vjpviz failed at it (an internal error)")


def _on_whole(fun, call, nums, raised: bool, took: float) -> Diagnosis | None:
  """``nans`` of a call whose arrays span processes, on them copied whole to this
  process (``grads`` None: the gradient taken again here, by vjpviz)."""
  try:
    args, kwargs, grads = hosts.whole_here(call)
  except hosts.TooLarge as e:
    return _unlocalised(fun, call[2], raised, f"not searched: {e}")
  with hosts.on_one_device():
    if grads is None:
      try:
        with jax.debug_nans(False):
          grads = _gradient(fun, args, nums, kwargs, True)
      except replay.NotJudged as e:   # an effect the program uses, repeated
        return _unlocalised(fun, None, False, f"not localised: {e}")
      if nonfinite.all_finite(jax.tree_util.tree_leaves(grads)):
        return None
    return _searched(fun, args, nums, kwargs, raised, grads, took)


def _unlocalised(fun, grads, raised: bool, why: str) -> Diagnosis:
  """The gradient is not finite (``grads``, where at hand), where it went so unknown."""
  what = "the gradient is not finite"
  if grads is not None and not any(hosts.spans_processes(g) for g in jax.tree_util.tree_leaves(grads)):
    flows = [nonfinite.summary(g) for g in jax.tree_util.tree_leaves(grads)]
    what = f"the gradient has {nonfinite.Summary.joined(flows).bad()}"
  return Diagnosis(kind="nonfinite_cotangent", severity=ERROR if raised else WARNING,
                   function=function_names.function_name(fun), rule=None,
                   source=function_names.function_source(fun), path=None,
                   expected="a finite gradient", message=None, got=what,
                   detail=f"where it went non-finite is unknown: {why}")


def _gradient(fun, args, nums, kwargs, ran: bool):
  """The gradient (a cotangent of ones on every output): the user's own run of ``fun``,
  or where that ran already, vjpviz's, at the same values (so its loops end as the
  user's did), quiet and without the program's effects."""
  if not ran:
    return pull_ones(fun, args, nums, kwargs)
  with replay.account(replay.main_pass()), replay.replaying(capped=False):
    return pull_ones(replay.bounded(fun), args, nums, kwargs)


def _nonfinite(fun, args, nums, kwargs, raised: bool, grads) -> Diagnosis | None:
  with records.suspended(), replay.quiet():   # traced again: the user's Python prints were seen
    origin = user_calls.user_origin(fun, tuple(args), kwargs, tuple(args[i] for i in nums))
    jaxpr, invals, active, out_cts = program_inputs(origin, (tuple(args), kwargs))
    original = _in_program_order(args, nums, grads, origin, active)
    finite = _finite_where(grads)
    del grads
    found, unjudged = _localised(jaxpr, invals, active, out_cts)
    c = found.culprit
    graph, (node,) = program.build(origin, lambda g: [c.node if c else None])
    labels = input_names(graph, origin)
    run = nonfinite_fixes.Program(jaxpr, invals, active, out_cts, labels, origin.name, nums,
                                  found, (fun, tuple(args), kwargs, finite))
    given = _nonfinite_input(c, fun, args, kwargs, origin, invals)
    fixes, at, none = (nonfinite_fixes.suggest(c, run, original) if c is not None and not given
                       else ((), None, ""))
  bad = next(i for i, g in enumerate(original) if not np.isfinite(g).all())
  grad = nonfinite.summary(original[bad])
  strip = nonfinite.strip(labels, [nonfinite.Flow.of(f, g.size) for f, g in zip(
      [nonfinite.flow(g) for g in original], original)])
  del original, invals, run
  found.frames.clear()                  # the search's arrays: this call's only
  graph = dataclasses.replace(graph, strip=strip)
  d = _nonfinite_diagnosis(c, found, graph, node, labels[bad], grad, tuple(fixes), raised,
                           origin, unjudged, at)
  moved = at and f"the fix goes at {spelled(at)}, where that value is used"
  detail = "; ".join(x for x in (given, d.detail, moved, none) if x)
  return dataclasses.replace(d, detail=detail)


def _nonfinite_input(c, fun, args, kwargs, origin, invals) -> str | None:
  """``the input x is already non-finite: NaN at x[2, 1]...`` where the culprit's
  non-finite operand was made by nothing in the program (it came in) and an input holds a
  NaN or Inf: no rewrite of the program can fix that, the data must be."""
  if c is None or c.origin is not None or all(s is None or s.finite for s in c.operands):
    return None
  labels = function_names.call_labels(fun, (tuple(args), kwargs))
  arrays = [j for j, leaf in enumerate(origin.leaves) if isinstance(leaf, core.AbstractValue)]
  for j, x in zip(arrays, invals):
    x = hosts.host(x)
    if inexact(x) and not np.isfinite(x).all():
      at = tuple(int(i) for i in np.argwhere(~np.isfinite(x))[0])
      what = "NaN" if np.isnan(x[at]) else "Inf"
      index = f"[{', '.join(map(str, at))}]" if at else ""
      return (f"the input {labels[j]} is already non-finite ({what} at {labels[j]}{index}, "
              f"{int((~np.isfinite(x)).sum())} of {x.size}): the gradient is not finite "
              "because an input is; no rewrite of the program fixes that, the data must be")
  return None


def _finite_where(grads):
  """Where the user's gradient is finite (booleans): the coordinates where a fix's gradient
  can be judged against central differences when the loss is smooth along none other."""
  return [np.isfinite(hosts.host(g)) for g in jax.tree_util.tree_leaves(grads)]


def _localised(jaxpr, invals, active, out_cts) -> tuple[nonfinite.Localisation, str]:
  """The search, at the user's values (its loops end as the user's did), and why it
  found nothing when it could not run: an effect whose result the program uses."""
  try:
    with replay.replaying(capped=False):
      return nonfinite.localise(jaxpr, invals, active, out_cts), ""
  except replay.NotJudged as e:
    return nonfinite.Localisation(None, {}, []), str(e)


def _in_program_order(args, nums, grads, origin, active) -> list:
  """The gradient already computed (the fixes' reference: no second backward pass), one
  array per differentiated program input: the leaf of ``args[i]`` is the program's input
  at ``args[i]``'s offset in the flattened call, plus its own index."""
  start = np.cumsum([0, *(len(jax.tree_util.tree_leaves(a)) for a in args)])
  by_flat = {int(start[i]) + k: hosts.host(g) for i, tree in zip(nums, grads)
             for k, g in enumerate(jax.tree_util.tree_leaves(tree))}
  arrays = [j for j, leaf in enumerate(origin.leaves) if isinstance(leaf, core.AbstractValue)]
  return [by_flat[j] for j, a in zip(arrays, active) if a]


def _nonfinite_diagnosis(c, found, graph, node, name, grad, fixes, raised, origin,
                         unjudged: str = "", at: str | None = None) -> Diagnosis:
  """``at``: the line the leading fix rewrites, where not the one that made the value
  (the ``log`` around an ``exp`` that overflowed): the diagnosis's ``source``, where
  ``vv.apply_fix`` writes it; ``call_site`` stays the line that made it."""
  graph = mark_flows(graph, found.edges)
  cotangents = {**flow_dicts(found.edges, graph.strip),
                "iterations": [{"node": n, "t": t, "norm": norm, "finite": ok}
                               for n, t, norm, ok in found.iterations]}
  where = f"the gradient of {name} has {grad.bad()}"
  if c is None:
    return Diagnosis(kind="nonfinite_cotangent", severity=ERROR if raised else WARNING, function=origin.name,
                     rule=None, source=origin.source, path=name, expected="a finite gradient",
                     got=where, message=None, graph=graph, argument=name, cotangents=cotangents,
                     detail=f"where it went non-finite is {unjudged}" if unjudged else
                     "no single equation made it non-finite: the forward pass may be "
                     "non-finite already, or finite cotangents overflowed as they added up")
  function, rule = program.custom_names(c.eqn) if program.rule_call(c.eqn) else (c.eqn.primitive.name, None)
  made = (c.origin or c).source
  inner = c.inner[1] if c.inner else None
  primal = function_names.function_of(c.eqn.params.get("call_jaxpr"))[1] if c.inner else None
  if c.inner and c.inner[4] and primal and frames.library_file(primal.rpartition(":")[0]):
    function = c.inner[4]       # a library's rule (diffrax's loop): name the user's function
  return Diagnosis(
      kind="nonfinite_cotangent", severity=ERROR if raised else WARNING, function=function, rule=rule,
      source=inner or at or made, path=name, argument=name,
      expected=f"a finite cotangent out of {function}, given a finite one in (max |ct| "
               f"{c.ct_in.max_abs:.3g})",
      got=f"{c.ct_out.bad()} out of {function}; {where}", message=None, node=node,
      graph=graph, fixes=fixes, call_site=made, instance=locate.instance(graph, node),
      detail=nonfinite_explain.explain(c), cotangents=cotangents)


class GradientScreen:
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
    if jaxpr is not None:   # rebuilt (no array copied): the step may update its containers
      args, kwargs = _snapshot((tuple(args), kwargs))   # (nnx Variables) in place later
      self.calls[jaxpr] = (fun, args, kwargs, diff_argnums, has_aux)

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
      return _nans(main, args, diff_argnums, kwargs, ran=True)
    return stepped(*steps[0], ran=True) if steps else None


def stepped(fun, args, kwargs, ran: bool = False) -> Diagnosis | unchecked.Unchecked | None:
  """``fun`` (a train step: it takes its gradients itself) run again with jit disabled,
  so that each gradient it takes is eager and screened: ``nans`` of the first one that is
  not finite. Its inputs donated to the jitted call are gone: then None, said. ``ran``:
  the user's call ran the step already; this run's output is captured and its effects
  held back (``replay.quiet``): where the step uses an effect's result, None, said."""
  name = function_names.function_name(fun)
  if any(getattr(x, "is_deleted", lambda: False)() for x in jax.tree_util.tree_leaves(args)):
    return _said(unchecked.Unchecked(f"vv.nans of {name}", "its inputs were donated to it; call "
                                     "it without donate_argnums to localise its NaN"))
  args, kwargs = _detached(args, kwargs)
  try:
    with (_hooked(), pipeline.collecting(), gradients(jit=False) as screen, jax.disable_jit(),
          _replayable_nnx(), replay.quiet() if ran else contextlib.nullcontext()):
      fun(*args, **kwargs)
  except replay.NotJudged as e:
    return _not_taken_again(fun, e)
  if not screen.checked:   # no gradient seen: nothing established about one
    return unchecked.Unchecked(f"vv.nans of {name}", "it took no gradient vjpviz could see "
                               "(argnums=None runs a step that takes its own gradients)")
  return screen.diagnose()


def _not_taken_again(fun, e: replay.NotJudged) -> unchecked.Unchecked:
  """A gradient vjpviz could not take again (an effect the program uses, no time left)."""
  name = function_names.function_name(fun)
  return _said(unchecked.Unchecked(f"vv.nans of {name}", f"the gradient was not localised: {e}"))


def _said(u: unchecked.Unchecked) -> unchecked.Unchecked:
  print(u)
  return u


def _snapshot(tree):
  """``tree`` rebuilt around the same arrays: mutable containers in it (flax nnx
  Variables, which an optimizer's update writes in place) are new ones, as they are now."""
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  return jax.tree_util.tree_unflatten(treedef, leaves)


def _detached(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
  """The call's flax nnx modules cloned (their arrays shared, not copied), so that running
  the step again leaves the user's own model and optimizer as they were."""
  nnx = sys.modules.get("flax.nnx")
  if nnx is None or not any(isinstance(x, nnx.Pytree) for x in (*args, *kwargs.values())):
    return args, kwargs
  return nnx.clone((args, kwargs))


@contextlib.contextmanager
def _replayable_nnx():
  """flax's ``nnx.grad``/``nnx.value_and_grad`` meanwhile (where flax is loaded) hand
  ``jax.vjp`` their tree-mode function (``graph_updates=False``), which takes the modules'
  states and can be run again: their graph-mode one reads the 'grad' update context of
  the call it came from and pops a deque of its states."""
  nnx = sys.modules.get("flax.nnx")
  names = ("grad", "value_and_grad") if nnx is not None else ()
  originals = [getattr(nnx, name) for name in names]
  for name, original in zip(names, originals):
    setattr(nnx, name, functools.partial(original, graph_updates=False))
  try:
    yield
  finally:
    for name, original in zip(names, originals):
      setattr(nnx, name, original)


@jax.jit
def _all_finite(leaves) -> jax.Array:
  return jax.numpy.all(jax.numpy.stack([jax.numpy.isfinite(x).all() for x in leaves]))


def _finite(tree) -> bool:
  """Whether every floating array in ``tree`` is finite: one dispatch, one transfer."""
  leaves = [x for x in jax.tree_util.tree_leaves(tree) if isinstance(x, jax.Array) and inexact(x)]
  return not leaves or bool(_all_finite(leaves))


@contextlib.contextmanager
def gradients(jit: bool = True):
  """A ``GradientScreen`` of every jax.vjp (jax.grad, value_and_grad) called meanwhile;
  with ``jit``, of every top-level jitted call in this thread too (a train step)."""
  screen = GradientScreen()
  with (entry_points.vjp_finished.listening(screen.vjp),
        entry_points.backward_finished.listening(screen.backward),
        jit_calls.observing(screen.jitted) if jit else contextlib.nullcontext()):
    yield screen


@contextlib.contextmanager
def _hooked():
  """The hook installed meanwhile (the screen is told of gradients through it)."""
  was = pipeline.installed()
  pipeline.install()
  try:
    yield
  finally:
    if not was:
      pipeline.uninstall()
