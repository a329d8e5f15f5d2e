"""Wrappers around the places where JAX checks cotangent types.

Each wrapper records what it was handed (avals, trees, indices) into the
current ``Session``, never what JAX's message says, and calls the original
unchanged, so JAX raises exactly what it would have. Private names are looked
up with ``getattr`` by ``PatchSet``: a JAX without one simply loses that site.
"""
from __future__ import annotations

import contextlib
import inspect
import sys
import types
from collections.abc import Callable

import jax

from ..compat.private import ad, api, cd, core, pe, pjit
from ...base import safety, trees
from .. import avals, records
from ..code_events import CodeEvents
from ..compat import dtype_exemption, jax_flags, private
from ..compat.patches import PatchSet
from ..naming import frames, function_names, leaf_paths
from ..naming.leaf_paths import Leaf
from ..records import ERROR, WARNING, Record, Session
from . import (custom_rules, direct_calls, hijax_prims, jvp_rules, ref_accums, through_primal,
               vjp3_rules)


def install(patches: PatchSet, sink: Callable | None = None,
            events: CodeEvents | None = None) -> None:
  patches.apply(api, "_vjp_accum", _wrap_vjp_accum)
  patches.apply(ad, "ct_check", _wrap_ct_check)
  _install_custom_vjp(patches, events)
  direct_calls.install(patches, custom_rules.InstrumentedFwd, custom_rules.InstrumentedBwd)
  hijax_prims.install(patches)
  jvp_rules.install(patches)
  ref_accums.install(patches)
  if sink is not None and private.has("pjit._run_python_pjit"):
    if events is not None:   # no frame of ours under a jitted function run
      events.follow(inspect.unwrap(pjit._run_python_pjit).__code__, _run_started,
                   lambda _, __, exc: _run_finished(sink, exc))
    else:
      patches.apply(pjit, "_run_python_pjit", lambda o: wrap_run_staged(o, sink))


def staged() -> bool:
  """Whether JAX is building a jaxpr now (jit, scan, make_jaxpr, ...): what a rule returned
  has not run yet, and may still fail. Under vmap or jvp over eager evaluation it has run:
  nothing later will run it (before JAX 0.10 no jit follows a vmap of grad to say so)."""
  trace = core.trace_ctx.trace
  while not isinstance(trace, core.EvalTrace):
    if isinstance(trace, (pe.DynamicJaxprTrace, pe.JaxprTrace)) or not hasattr(trace, "parent_trace"):
      return True
    trace = trace.parent_trace
  return False


def _run_started(_frame):
  """Only the outermost run: not each jitted jnp call of an eager grad."""
  return True if records.active() and core.trace_state_clean() else None


def _run_finished(sink, exc: BaseException | None) -> None:
  safety.safely(sink, Session("run", None), exc)
  if exc is not None:
    safety.safely(frames.strip, exc)


def wrap_run_staged(original, sink):
  """The outermost ``jit`` lowering and running what it traced (on a cache miss only).

  A cotangent JAX accepted while tracing can fail here, in lowering (a scan's carry
  type check), after every VJP session has ended: the sink hears of the end of the
  run, with its exception, as an empty ``"run"`` session.
  """
  def run_python_pjit(*args, **kwargs):
    if not records.active() or not core.trace_state_clean():   # only the outermost run:
      return original(*args, **kwargs)    # not each jitted jnp call of an eager grad
    try:
      out = original(*args, **kwargs)
    except BaseException as e:
      _run_finished(sink, e)
      raise
    _run_finished(sink, None)
    return out
  run_python_pjit.__wrapped__ = original
  return run_python_pjit


def check_out_cotangent(jaxpr, out_tree, out_avals, out_ct) -> list[Record]:
  """What is wrong with the cotangent handed to ``f_vjp`` (``out_avals`` per output leaf,
  None for an output that is a symbolic zero: any cotangent goes)."""
  function, source = function_names.function_of(jaxpr)
  base = dict(function=function, source=source)
  is_zero = lambda x: isinstance(x, ad.Zero)
  ct_tree = jax.tree_util.tree_structure(out_ct, is_leaf=is_zero)
  if ct_tree != out_tree:
    return [Record(kind="vjp_cotangent_structure", severity=ERROR, path="out",
                   expected=str(out_tree), got=str(ct_tree),
                   leaves=_out_leaves(out_tree, out_avals, out_ct), **base)]
  found = []
  # The paths of the user's own cotangent tree (its structure is the output's): no
  # unflattening of the user's types around values JAX would not give them.
  cts = jax.tree_util.tree_leaves_with_path(out_ct, is_leaf=is_zero)
  for i, ((path, ct), aval) in enumerate(zip(cts, out_avals)):
    if isinstance(ct, ad.Zero) or aval is None:
      continue
    expected, got = avals.ct_aval(aval), core.typeof(ct)
    if avals.same_type(expected, got) is not False:
      continue
    accepted = core.typecompat(got, expected) or dtype_exemption.exempt(api, got, expected)
    found.append(Record(
        kind="vjp_cotangent_type", severity=WARNING if accepted else ERROR,
        path=f"out{jax.tree_util.keystr(path)}", expected=expected.str_short(),
        got=got.str_short(), flat_index=i, expected_aval=expected, got_aval=got,
        leaves=(Leaf(leaf_paths.keys(path), expected.str_short(), got.str_short()),), **base))
  return found


def _out_leaves(out_tree, out_avals, out_ct) -> tuple:
  """The output's leaves beside the cotangent's, by key path. JAX names them by rebuilding
  the output tree around sentinels as it reports this very mismatch; a user's type that
  refuses sentinels leaves them unnamed (the two trees are then shown as text)."""
  try:
    dummy = jax.tree_util.tree_unflatten(out_tree, [object()] * out_tree.num_leaves)
  except Exception:  # noqa: BLE001 - the user's unflatten, not our bug
    return ()
  paths = [leaf_paths.keys(p) for p, _ in jax.tree_util.tree_leaves_with_path(dummy)]
  expected = [(p, avals.ct_aval(a).str_short() if a is not None else "zero")
              for p, a in zip(paths, out_avals)]
  got = leaf_paths.of_tree(out_ct, is_leaf=lambda x: isinstance(x, ad.Zero))
  return leaf_paths.compared(expected, got)


def _wrap_vjp_accum(original):
  def vjp_accum(jaxpr, in_tree, explicit_refs, idx, v, x):
    try:
      return original(jaxpr, in_tree, explicit_refs, idx, v, x)
    except Exception:
      if records.active():
        records.record(safety.safely(_accum_record, jaxpr, in_tree, explicit_refs, idx, v, x))
      raise
  vjp_accum.__wrapped__ = original
  return vjp_accum


def _accum_record(jaxpr, in_tree, explicit_refs, idx, v, x) -> Record:
  """Classify a rejected ``with_refs`` entry from what was given for it."""
  expected = avals.ct_aval(v.aval)
  function, source = function_names.function_of(jaxpr)
  path = "args" + _leaf_path(in_tree, idx)
  ref_expected = f"Ref{{{expected.str_short()}}}"
  if isinstance(x, ad.GradAccum):
    kind, want, got, got_aval = "accumulator_type", expected.str_short(), x.aval.str_short(), x.aval
  elif api._is_ref(x):
    kind, want, got, got_aval = "grad_ref_type", ref_expected, core.typeof(x).str_short(), core.typeof(x)
  elif explicit_refs:
    kind, want, got, got_aval = "ref_grad_as_value", ref_expected, type(x).__name__ + "()", None
  else:
    kind, want, got, got_aval = "ref_grad_unbound", ref_expected, "no gradient ref", None
  return Record(kind=kind, severity=ERROR, function=function, source=source,
                path=path, expected=want, got=got, flat_index=idx,
                expected_aval=expected, got_aval=got_aval)


def _leaf_path(tree, idx) -> str:
  try:
    return jax.tree_util.keystr(trees.leaf_paths(tree, [object()] * tree.num_leaves)[idx])
  except Exception:
    return f"[flat {idx}]"


def _wrap_ct_check(original):
  def ct_check(accum, ct):
    try:
      original(accum, ct)
    except Exception:
      if records.active() and not _checked_already():
        records.record(safety.safely(_ct_check_record, accum, ct, ERROR))
      raise
    # JAX skips dtypes here; only rules that push into accumulators themselves
    # (defvjp_with_accums, hijax primitives) can slip one through, so the hot
    # path of ordinary accumulation pays one list lookup.
    if (records.state.rule_stack and records.active() and records.current_session() is not None
        and not jax_flags.on("jax_disable_bwd_checks") and not _checked_already()):
      records.record(safety.safely(_silent_dtype_record, accum, ct))
  ct_check.__wrapped__ = original
  return ct_check


def _checked_already() -> bool:
  """JAX is accumulating what a hijax ``vjp_bwd_retval`` returned: that check site has it."""
  top = hijax_prims.current()
  return top is not None and top.handing_over


def _silent_dtype_record(accum, ct) -> Record | None:
  got = ct.aval if isinstance(ct, ad.Zero) else core.typeof(ct)
  if getattr(got, "dtype", None) == getattr(accum.aval, "dtype", None):
    return None
  return _ct_check_record(accum, ct, WARNING)


def _ct_check_record(accum, ct, severity) -> Record:
  got = ct.aval if isinstance(ct, ad.Zero) else core.typeof(ct)
  site = records.state.rule_stack[-1] if records.state.rule_stack else None
  index = hijax_prims.input_index(accum) if site is not None and site.hijax else None
  path = site.in_paths[index] if index is not None else custom_rules.accum_path(site, accum.aval)
  return Record(
      kind="accumulator_type" if severity == ERROR else "silent_dtype",
      severity=severity, function=site.function if site else None,
      source=site.source if site else None, rule=site.rule if site else None,
      site=site, path=path, expected=accum.aval.str_short(), got=got.str_short(),
      expected_aval=accum.aval, got_aval=got,
      flat_index=site.in_paths.index(path) if site and path in site.in_paths else None)


# ------------------------------------------------------------- custom rules

rule_applied = safety.Listeners()
"""Told ``(custom_vjp, args, kwargs)`` of every custom_vjp application, as it starts."""


def _install_custom_vjp(patches: PatchSet, events: CodeEvents | None) -> None:
  """JAX's ``custom_vjp.__call__`` reads the instrumented rules; nothing of ours is on the
  stack while the primal runs. Applications are observed as that call starts (a wrapper
  where no monitoring slot is free). JAX 0.9 to 0.11's ``custom_vjp3`` class (what
  ``jax.custom_vjp`` makes under ``jax_custom_vjp3`` there) is read the same way."""
  for cls in (cd.custom_vjp, vjp3_rules.separate_class()):
    if cls is not None:
      _install_rules_of(cls, patches, events)


def _install_rules_of(cls, patches: PatchSet, events: CodeEvents | None) -> None:
  call = cls.__call__
  code = getattr(getattr(call, "__wrapped__", call), "__code__", None)
  if code is None:
    patches.skip(f"jax.{cls.__name__} rules", f"{cls.__name__}.__call__ is not a Python function here")
    return
  for name in ("fwd", "bwd", *(("remat_rules",) if hasattr(cls, "defremat") else ())):
    if name in vars(cls):   # custom_vjp3's class defaults (None), restored on uninstall
      patches.apply(cls, name, lambda default, name=name: RuleAttribute(name, code, default))
    else:
      patches.add(cls, name, RuleAttribute(name, code))
  if events is not None and private.has("cd.custom_vjp.__call__"):   # its locals read by name
    events.follow(code, _applied)
  else:
    patches.apply(cls, "__call__", _wrap_custom_vjp_call)


@contextlib.contextmanager
def rules_set_aside(matches: Callable):
  """``through_primal.differentiated_through(matches)``, with JAX's custom_vjp reading its
  rules through ``RuleAttribute`` meanwhile (installed for the while if the hook is not)."""
  patches = None
  if not isinstance(vars(cd.custom_vjp).get("fwd"), RuleAttribute):
    patches = PatchSet()
    _install_custom_vjp(patches, None)
  try:
    with through_primal.differentiated_through(matches):
      yield
  finally:
    if patches is not None:
      patches.restore()


_NO_DEFAULT = object()


class RuleAttribute:
  """``custom_vjp.fwd``, ``.bwd`` (and ``.remat_rules``) as data descriptors: JAX's own ``__call__`` reads
  the instrumented rule (``custom_rules.instrumented``), everyone else (the user, a
  library, ``defvjp``) the user's own, which stays in the instance's ``__dict__``
  (else ``default``, the class's own value it replaces)."""

  def __init__(self, name: str, call_code, default=_NO_DEFAULT):
    self.name, self.default = name, default
    self.call_codes = _with_nested(call_code)   # JAX 0.11 reads ``fwd`` in a lambda of __call__

  def __get__(self, obj, owner=None):
    if obj is None:
      return self
    value = obj.__dict__.get(self.name, self.default)
    if value is _NO_DEFAULT:
      raise AttributeError(self.name)
    if value is None or sys._getframe(1).f_code not in self.call_codes:
      return value
    aside = through_primal.matching and through_primal.rule(obj, self.name)
    if aside:
      return aside
    if not records.active():
      return value
    clone = safety.safely(_instrumented, obj, default=obj)
    return clone.__dict__.get(self.name, value)

  def __set__(self, obj, value):
    obj.__dict__[self.name] = value

  def __delete__(self, obj):
    del obj.__dict__[self.name]


def _with_nested(code) -> frozenset:
  """``code`` and the code of every function defined inside it."""
  nested = [c for c in code.co_consts if isinstance(c, types.CodeType)]
  return frozenset({code}).union(*map(_with_nested, nested))


def _instrumented(rule):
  return custom_rules.instrumented(vjp3_rules.as_custom_vjp(rule))


def _applied(frame) -> None:
  if rule_applied and records.active():
    args = frame.f_locals
    _observe(args["self"], args["args"], args["kwargs"])


def _observe(rule, args, kwargs) -> None:
  rule_applied.notify(safety.safely(vjp3_rules.as_custom_vjp, rule), args, kwargs)


def _wrap_custom_vjp_call(original):
  def __call__(self, *args, **kwargs):
    if records.active():
      _observe(self, args, kwargs)
    try:
      return original(self, *args, **kwargs)
    except BaseException as e:
      safety.safely(frames.strip, e)
      raise
  __call__.__wrapped__ = original
  return __call__
