"""Hijax primitives (subclasses of ``jax.experimental.hijax.HiPrim``) and their VJP rules.

A primitive's ``vjp_fwd`` runs in JAX's linearize rule; its residuals then travel
(flattened, as the ``residuals_tree`` param) to the transpose rule, which calls
``vjp_bwd``: the user's, pushing cotangents into accumulators, or JAX's default,
which hands what the user's ``vjp_bwd_retval`` returned to ``_accum_args_grad``.

The linearize wrapper tags the residuals with a ``RuleSite`` through a pytree
node that unflattens to the residuals themselves: the rule always receives
exactly what ``vjp_fwd`` returned, even from a trace made before uninstall. The
transpose wrapper reads the site back from the tree; ``_accum_args_grad`` is
where a returned value meets its inputs' accumulators, so it is compared there
with JAX's own predicate, and JAX then raises (or not) exactly as it would.
"""
from __future__ import annotations

import dataclasses
import threading
import weakref

import jax
from ..compat.private import ad, core, hijax
from ..compat import private

from ...base import safety
from .. import avals, records
from ..compat import jax_flags
from ..compat.patches import PatchSet
from ..naming import frames, function_names, leaf_paths
from ..records import ERROR, WARNING, Record, RuleSite
from . import bwd_raises, custom_rules, hijax_rules
from .retained_rules import retained


class _SiteTag:
  """Residuals plus a site as aux data; unflattening yields the bare residuals."""
  __slots__ = ("res", "site")

  def __init__(self, res, site):
    self.res, self.site = res, site


jax.tree_util.register_pytree_node(
    _SiteTag, lambda t: ((t.res,), t.site), lambda site, children: children[0])


@dataclasses.dataclass
class Transpose:
  """One hijax primitive's transpose in progress (per thread)."""
  site: RuleSite | None               # None: a custom_vjp on the hijax path (custom_rules checks it)
  accums: dict                        # id(accumulator) -> flat input index
  handing_over: bool = False          # JAX is accumulating a returned value we already checked


class _Local(threading.local):
  def __init__(self):
    self.transposes: list[Transpose] = []


_local = _Local()


def install(patches: PatchSet) -> None:
  if not all(map(private.has, ("hijax.call_hi_primitive_p", "hijax.call_hi_primitive_linearized_p",
                               "ad.primitive_linearizations", "ad.fancy_transposes"))):
    patches.skip("hijax primitives", "absent in this JAX")
    return
  patches.apply(ad.primitive_linearizations, hijax.call_hi_primitive_p, _wrap_linearize)
  patches.apply(ad.fancy_transposes, hijax.call_hi_primitive_linearized_p, _wrap_transpose)
  if private.has("hijax._accum_args_grad"):
    patches.apply(hijax, "_accum_args_grad", _wrap_accum_args_grad)
  elif hijax_rules.HiPrim is not None:   # before JAX 0.12 the default vjp_bwd accumulates inline
    patches.apply(hijax_rules.HiPrim, "vjp_bwd", _wrap_default_vjp_bwd)


def current() -> Transpose | None:
  return _local.transposes[-1] if _local.transposes else None


def input_index(accum) -> int | None:
  """Which input of the primitive being transposed ``accum`` accumulates for."""
  top = current()
  return top.accums.get(id(accum)) if top is not None else None


# ------------------------------------------------------------------ forward

def _prim_of(params: dict):
  """The primitive applied: param ``_prim``, or ``prim`` (JAX 0.8)."""
  return params.get("_prim", params.get("prim"))


def _wrap_linearize(original):
  """JAX's linearize rule, whose result's third item is the residuals (JAX 0.8's takes no
  ``is_vjp``: it always runs ``vjp_fwd``)."""
  def linearize(*args, **params):
    out = original(*args, **params)
    prim = _prim_of(params)
    if not (args[0] is not False and records.active() and _is_users(prim)):
      return out
    site = safety.safely(site_of, prim)
    if site is None:
      return out
    return (*out[:2], _SiteTag(out[2], site), *out[3:])
  linearize.__wrapped__ = original
  return linearize


def _is_custom_vjp3(prim) -> bool:
  return type(prim).__name__ == "CustomVJPTraced"


def _is_users(prim) -> bool:
  """A primitive the user wrote: a HiPrim subclass, not a custom_vjp3's (its site is the
  custom_vjp's) nor what JAX 0.9/0.10 make of one under a transform (no HiPrim there)."""
  return hijax_rules.is_primitive(prim) and not _is_custom_vjp3(hijax_rules.unwrapped(prim))


def site_of(prim) -> RuleSite:
  """The site of one application of ``prim``, at its call in the user's forward pass."""
  cls = type(prim)
  static = _static(cls)
  leaves = jax.tree_util.tree_leaves_with_path(
      jax.tree_util.tree_unflatten(prim.in_tree, range(prim.in_tree.num_leaves)))
  call_site, name_stack = custom_rules.call_site_and_scope()
  occurrence = None
  session = records.current_session()
  if session is not None and session.entry == "vjp":
    key = (cls, call_site, name_stack)
    session.occurrences[key] += 1
    occurrence = session.occurrences[key]
  params = static["params"]
  return RuleSite(
      function=static["function"], source=static["source"], rule=static["rule"],
      fwd_rule=static["fwd_rule"], rule_source=static["rule_source"],
      call_site=call_site, name_stack=name_stack, occurrence=occurrence,
      in_keys=tuple(leaf_paths.keys(p) for p, _ in leaves),
      in_names=tuple(function_names.argument_name(params, p[0].idx, jax.tree_util.keystr(p[1:]))
                     for p, _ in leaves),
      in_avals=tuple(prim.in_avals_flat), in_tree=prim.in_tree, hijax=True,
      method=(weakref.ref(cls), static["method"]), custom_rule=_weakly(prim))


def _weakly(prim):
  """The application, held weakly (fixes are verified against it), if it can be."""
  try:
    return weakref.ref(prim)
  except TypeError:   # a class with __slots__ and no __weakref__
    return None


_statics: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _static(cls) -> dict:
  """Names and sources of a primitive class and its rules: computed once per class, and
  again once its rules are rebound (an applied fix)."""
  key = (cls.vjp_fwd, cls.vjp_bwd, cls.vjp_bwd_retval, cls.expand)
  cached = _statics.get(cls)
  if cached is not None and cached[0] == key:
    return cached[1]
  method = hijax_rules.rule_method(cls)
  rule_source = function_names.function_source(getattr(cls, method))
  found = dict(
      function=cls.__name__, source=function_names.class_source(cls) or rule_source,
      rule=f"{cls.__name__}.{method}", fwd_rule=f"{cls.__name__}.vjp_fwd",
      rule_source=rule_source, method=method, params=_input_names(cls))
  _statics[cls] = (key, found)
  return found


def _input_names(cls) -> tuple[str, ...]:
  """The primitive's inputs as the user named them: ``vjp_fwd(self, nzs_in, x, w)``'s
  ``x, w``, else ``expand(self, x, w)``'s; JAX's derived rules name nothing."""
  for method, bound in (("vjp_fwd", 2), ("expand", 1)):
    fn = getattr(cls, method, None)
    if fn is None or function_names.inside_jax(function_names.function_source(fn)):
      continue
    params = function_names.positional_names(fn)[bound:]
    if params:
      return params
  return ()


# ----------------------------------------------------------------- backward

def _wrap_transpose(original):
  def transpose(cts, *args, **params):
    call = lambda: original(cts, *args, **params)
    if not records.active():
      return call()
    entry = safety.safely(_transpose_entry, _prim_of(params), params["residuals_tree"],
                          params["nz_in_flat"], args, params)
    if entry is None:
      return call()
    _local.transposes.append(entry)
    session = records.current_session()
    seen = len(session.records) if session is not None else 0
    if entry.site is not None:
      records.state.rule_stack.append(entry.site)
    try:
      return call()
    except Exception as e:
      if entry.site is not None:
        safety.safely(_raised, entry.site, e)
      safety.safely(frames.strip, e)
      raise
    finally:
      if entry.site is not None:
        records.state.rule_stack.pop()
        if session is not None:
          safety.safely(_retain_since, session, seen, entry.site)
      _local.transposes.pop()
  transpose.__wrapped__ = original
  return transpose


def _raised(site: RuleSite, exc: Exception) -> None:
  """The primitive's bwd method raised: ``bwd_raises`` reads its statement as a bwd rule's."""
  cls, method = site.method[0](), site.method[1]
  code = getattr(getattr(cls, method, None), "__code__", None) if cls is not None else None
  if code is not None:
    bwd_raises.raised(site, None, code, exc, kind="bwd_raised")


def _retain_since(session, start: int, site: RuleSite) -> None:
  """The records this application's rule caused (here, or at JAX's accumulators) keep
  the application alive if that is safe: it is usually gone once the backward pass is."""
  session.records[start:] = [retained(r) if r.site is site else r
                             for r in session.records[start:]]


def _transpose_entry(prim, residuals_tree, nz_in_flat, args, params) -> Transpose:
  if _is_custom_vjp3(prim):
    return Transpose(site=None, accums={})
  tree = residuals_tree.children()[0] if params.get("has_sres") else residuals_tree
  data = tree.node_data()
  site = data[1] if data is not None and data[0] is _SiteTag else None
  accums = iter(args[residuals_tree.num_leaves:])
  return Transpose(site=site, accums={id(next(accums)): i for i, nz in enumerate(nz_in_flat) if nz})


def _wrap_accum_args_grad(original):
  def accum_args_grad(arg_accums, args_grad):
    top = current()
    if top is None or top.site is None or not records.active():
      return original(arg_accums, args_grad)
    found = safety.safely(returned_records, top.site, arg_accums, args_grad, default=[])
    top.handing_over = True
    try:
      original(arg_accums, args_grad)
    except Exception:
      for rec in found:
        records.record(rec)
      raise
    finally:
      top.handing_over = False
    for rec in found:
      records.record(rec)
  accum_args_grad.__wrapped__ = original
  return accum_args_grad


def _wrap_default_vjp_bwd(original):
  """The base class's ``vjp_bwd`` (JAX 0.8 to 0.11): it calls the user's
  ``vjp_bwd_retval`` and accumulates what it returned, inline. Here the rule runs once,
  its value is checked as ``_accum_args_grad`` checks it (JAX 0.12), and JAX's own
  ``vjp_bwd`` accumulates that very value."""
  def vjp_bwd(self, res, outgrad, *arg_accums):
    top = current()
    if top is None or top.site is None or not records.active():
      return original(self, res, outgrad, *arg_accums)
    try:   # the rule called from JAX's own frame, so that its errors read as without us
      original(_Rule(self), res, outgrad, *arg_accums)
    except _Made as e:
      made, logs = e.args
    given, out = _Rule(self, made), []
    accumulate = lambda accums, _: out.append(original(given, res, outgrad, *accums))
    _wrap_accum_args_grad(accumulate)(arg_accums, made[0] if logs else made)
    return out[0] if out else None
  vjp_bwd.__wrapped__ = original
  return vjp_bwd


class _Made(Exception):
  """What the rule returned, and whether with its logs (JAX 0.11's
  ``vjp_bwd_retval_logs``), stopping JAX's ``vjp_bwd`` before it accumulates."""


class _Rule:
  """The primitive as JAX's default ``vjp_bwd`` sees it: one whose rule runs and stops
  there with its value (``_Made``), or, given that value (``made``), hands it back."""

  def __init__(self, prim, made=None):
    self._prim, self._made = prim, made

  def vjp_bwd_retval(self, res, outgrad):
    if self._made is None:
      raise _Made(self._prim.vjp_bwd_retval(res, outgrad), False)
    return self._made

  def vjp_bwd_retval_logs(self, res, outgrad):
    if self._made is None:
      raise _Made(self._prim.vjp_bwd_retval_logs(res, outgrad), True)
    return self._made

  def __getattr__(self, name):
    return getattr(self._prim, name)


def returned_records(site: RuleSite, arg_accums, args_grad) -> list[Record]:
  """What is wrong with a ``vjp_bwd_retval``'s returned value, by JAX's own checks.

  The structure must be the inputs' (``flatten_up_to``, as JAX does it); each
  cotangent JAX accumulates must match its accumulator's aval up to dtype (JAX's
  ``ct_check``), and one whose dtype differs goes through silently.
  """
  base = dict(function=site.function, source=site.source, rule=site.rule, site=site)
  accums, treedef = jax.tree_util.tree_flatten(arg_accums)
  try:
    cts = treedef.flatten_up_to(args_grad)
  except (ValueError, TypeError) as e:
    got = jax.tree_util.tree_structure(args_grad, is_leaf=lambda x: isinstance(x, ad.Zero))
    return [Record(kind="bwd_structure", severity=ERROR, path="", expected=site.in_structure,
                   got=str(got), leaves=custom_rules.compared(site, args_grad),
                   detail=f"{site.rule} must return one cotangent per input of "
                   f"{site.function}, structured like its inputs: {e}", **base)]
  found = []
  for i, (acc, ct) in enumerate(zip(accums, cts)):
    if not isinstance(acc, ad.GradAccum) or isinstance(acc, ad.NullAccum) or ct is None:
      continue
    got, want = ct.aval if isinstance(ct, ad.Zero) else core.typeof(ct), acc.aval
    if avals.same_type(want, got) is not False:
      continue
    accepted = (jax_flags.on("jax_disable_bwd_checks")
                or core.typematch(got, want, no_dtype_check=True))
    found.append(Record(
        kind="silent_dtype" if accepted and avals.same_shape(want, got) else "bwd_type",
        severity=WARNING if accepted else ERROR,
        path=site.in_paths[i], expected=want.str_short(), got=got.str_short(), flat_index=i,
        expected_aval=want, got_aval=got, **base))
  return found
