"""Wrappers around JAX's VJP entry points and private check sites.

The entry points (``jax.vjp``, building the VJP function, running its backward
pass) open a ``Session``; the check sites add ``Record``s to it, built from the
arguments JAX checks (avals, trees, indices), never from its message text. Each
wrapper calls the original unchanged, so JAX raises exactly what it would have.
Private names are looked up with ``getattr`` by ``PatchSet``: a JAX without one
simply loses that check site.
"""
from __future__ import annotations

import contextlib
import weakref
from typing import Callable

import jax
from jax._src import api, core
from jax._src import custom_derivatives as cd
from jax._src import traceback_util
from jax._src.interpreters import ad

from . import custom_rules, frames, names, records
from .patches import PatchSet
from .records import ERROR, WARNING, Origin, Record, RuleSite, Session

Sink = Callable[[Session, BaseException | None], None]

_origins: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Boundary:
  """Opens a session for one entry into JAX's VJP machinery.

  On exit the session goes to the sink, with the exception if one is passing
  through; the exception itself always propagates untouched.
  """

  def __init__(self, entry: str, origin: Origin | None, sink: Sink):
    self.session = Session(entry, origin)
    self.sink = sink

  def __enter__(self):
    records.state.sessions.append(self.session)
    return self.session

  def __exit__(self, typ, exc, tb):
    records.state.sessions.pop()
    if self.session.records or exc is not None:
      records.safely(self.sink, self.session, exc)
    if exc is not None:
      records.safely(frames.strip, exc)
    return False


def install(patches: PatchSet, sink: Sink) -> None:
  original_vjp = api.vjp
  vjp = _wrap_vjp(original_vjp, sink)
  patches.apply(api, "vjp", lambda _: vjp)
  patches.apply(jax, "vjp", lambda o: vjp if o is original_vjp else o)
  patches.apply(api, "_vjp3_callable", lambda o: _wrap_vjp_callable(o, sink))
  patches.apply(api, "_vjp3_bwd", lambda o: _wrap_backward(o, sink))
  patches.apply(api, "_vjp_accum", _wrap_vjp_accum)
  patches.apply(ad, "ct_check", _wrap_ct_check)
  patches.apply(cd.custom_vjp, "__call__", _wrap_custom_vjp_call)
  _patch_hi_primitive_transpose(patches)


def _active() -> bool:
  return not records.state.suspended


# ------------------------------------------------------------- entry points

def _wrap_vjp(original, sink):
  @traceback_util.api_boundary
  def vjp(fun, *primals, **kwargs):
    if not _active():
      return original(fun, *primals, **kwargs)
    with Boundary("vjp", records.safely(_origin, fun, primals), sink) as session:
      result = original(fun, *primals, **kwargs)
    if session.origin is not None:
      _origins[result[1].jaxpr] = session.origin
    return result
  vjp.__wrapped__ = original
  return vjp


def _origin(fun, primals) -> Origin:
  user_fun, args, kwargs, diff_args = _unwrap_argnums(fun, primals)
  paths_leaves, tree = jax.tree_util.tree_flatten_with_path((tuple(args), kwargs))
  leaves = tuple(_aval_or_value(x) for _, x in paths_leaves)
  by_arg: dict[int, list[int]] = {}
  for j, (path, _) in enumerate(paths_leaves):
    if path[0].idx == 0:
      by_arg.setdefault(path[1].idx, []).append(j)
  diff = tuple(j for i in diff_args for j in by_arg.get(i, ()))
  return Origin(fun=user_fun, leaves=leaves, tree=tree, diff_leaves=diff,
                name=names.function_name(user_fun), source=names.function_source(user_fun))


def _unwrap_argnums(fun, primals):
  """See through ``jax.grad``'s argnums wrapper to the user's function and all its args.

  ``argnums_partial2`` closes over the user's ``f``, the other arguments and
  the kwargs; reading its closure cells costs nothing and gives the graph the
  whole program with the user's own argument names.
  """
  code, cells = getattr(fun, "__code__", None), getattr(fun, "__closure__", None)
  if code is not None and cells and code.co_name == "f_wrapped":
    free = dict(zip(code.co_freevars, (c.cell_contents for c in cells)))
    if {"f", "static_args", "dyn_argnums", "kwargs"} <= free.keys():
      args = list(free["static_args"])
      for i, x in zip(free["dyn_argnums"], primals):
        args[i] = x
      return free["f"], args, dict(free["kwargs"]), tuple(free["dyn_argnums"])
  return fun, list(primals), {}, tuple(range(len(primals)))


def _aval_or_value(x):
  try:
    return core.typeof(x)
  except TypeError:
    return x


def _origin_of(jaxpr) -> Origin | None:
  try:
    return _origins.get(jaxpr)
  except TypeError:
    return None


def _wrap_vjp_callable(original, sink):
  def vjp3_callable(*args):
    if not _active():
      return original(*args)
    with Boundary("vjp_call", _origin_of(args[2]), sink):
      return original(*args)
  vjp3_callable.__wrapped__ = original
  return vjp3_callable


def _wrap_backward(original, sink):
  def vjp3_bwd(in_tree, out_tree, out_zeros, jaxpr, out_primal_avals, *rest):
    if not _active():
      return original(in_tree, out_tree, out_zeros, jaxpr, out_primal_avals, *rest)
    with Boundary("backward", _origin_of(jaxpr), sink):
      for rec in records.safely(_check_out_cotangent, jaxpr, out_tree,
                                out_primal_avals, rest[-1], default=[]):
        records.record(rec)
      return original(in_tree, out_tree, out_zeros, jaxpr, out_primal_avals, *rest)
  vjp3_bwd.__wrapped__ = original
  return vjp3_bwd


def _function_of(jaxpr) -> tuple[str | None, str | None]:
  """Name and ``file:line`` of the differentiated function, from debug info."""
  info = getattr(jaxpr, "debug_info", None)
  if info is None:
    return None, None
  name, _, where = (info.func_src_info or "").partition(" at ")
  return (name or info.func_name), (where or None)


def _check_out_cotangent(jaxpr, out_tree, out_avals, out_ct) -> list[Record]:
  """What is wrong with the cotangent handed to ``f_vjp``."""
  function, source = _function_of(jaxpr)
  base = dict(function=function, source=source)
  is_zero = lambda x: isinstance(x, ad.Zero)
  ct_tree = jax.tree_util.tree_structure(out_ct, is_leaf=is_zero)
  if ct_tree != out_tree:
    return [Record(kind="vjp_cotangent_structure", severity=ERROR, path="out",
                   expected=str(out_tree), got=str(ct_tree), **base)]
  found = []
  paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(
      jax.tree_util.tree_unflatten(out_tree, range(out_tree.num_leaves)))]
  for i, (path, ct, aval) in enumerate(zip(paths, out_tree.flatten_up_to(out_ct), out_avals)):
    if isinstance(ct, ad.Zero):
      continue
    expected, got = aval.to_ct_aval(), core.typeof(ct)
    if core.typematch(expected, got) and expected.dtype == got.dtype:
      continue
    accepted = core.typecompat(got, expected) or api._temporary_dtype_exception(got, expected)
    found.append(Record(
        kind="vjp_cotangent_type", severity=WARNING if accepted else ERROR,
        path=f"out{path}", expected=expected.str_short(), got=got.str_short(),
        flat_index=i, expected_aval=expected, got_aval=got, **base))
  return found


# -------------------------------------------------------------- check sites

def _wrap_vjp_accum(original):
  def vjp_accum(jaxpr, in_tree, explicit_refs, idx, v, x):
    try:
      return original(jaxpr, in_tree, explicit_refs, idx, v, x)
    except Exception:
      if _active():
        records.record(records.safely(_accum_record, jaxpr, in_tree, explicit_refs, idx, v, x))
      raise
  vjp_accum.__wrapped__ = original
  return vjp_accum


def _accum_record(jaxpr, in_tree, explicit_refs, idx, v, x) -> Record:
  """Classify a rejected ``with_refs`` entry from what was given for it."""
  expected = custom_rules.ct_aval(v.aval)
  function, source = _function_of(jaxpr)
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
    dummy = jax.tree_util.tree_unflatten(tree, list(range(tree.num_leaves)))
    return jax.tree_util.keystr(jax.tree_util.tree_leaves_with_path(dummy)[idx][0])
  except Exception:
    return f"[flat {idx}]"


def _wrap_ct_check(original):
  def ct_check(accum, ct):
    try:
      original(accum, ct)
    except Exception:
      if _active():
        records.record(records.safely(_ct_check_record, accum, ct, ERROR))
      raise
    # JAX skips dtypes here; only rules that push into accumulators themselves
    # (defvjp_with_accums, hijax primitives) can slip one through, so the hot
    # path of ordinary accumulation pays one list lookup.
    if (records.state.rule_stack and _active() and records.current_session() is not None
        and not jax.config.jax_disable_bwd_checks):
      got = ct.aval if isinstance(ct, ad.Zero) else core.typeof(ct)
      if getattr(got, "dtype", None) != getattr(accum.aval, "dtype", None):
        records.record(records.safely(_ct_check_record, accum, ct, WARNING))
  ct_check.__wrapped__ = original
  return ct_check


def _ct_check_record(accum, ct, severity) -> Record:
  got = ct.aval if isinstance(ct, ad.Zero) else core.typeof(ct)
  site = records.state.rule_stack[-1] if records.state.rule_stack else None
  path = _accum_path(site, accum.aval)
  return Record(
      kind="accumulator_type" if severity == ERROR else "silent_dtype",
      severity=severity, function=site.function if site else None,
      source=site.source if site else None, rule=site.rule if site else None,
      site=site, path=path, expected=accum.aval.str_short(), got=got.str_short(),
      expected_aval=accum.aval, got_aval=got,
      flat_index=site.in_paths.index(path) if site and path in site.in_paths else None)


def _accum_path(site: RuleSite | None, aval) -> str | None:
  """The rule input whose cotangent type is ``aval``, when only one fits."""
  if site is None:
    return None
  fits = [p for p, a in zip(site.in_paths, site.in_avals)
          if custom_rules.ct_aval(a) == aval]
  return fits[0] if len(fits) == 1 else None


# ------------------------------------------------------------- custom rules

_application_observers: list[Callable] = []


@contextlib.contextmanager
def observe_applications(callback: Callable):
  """Call ``callback(custom_vjp, args, kwargs)`` on every custom_vjp application meanwhile."""
  _application_observers.append(callback)
  try:
    yield
  finally:
    _application_observers.remove(callback)


def _wrap_custom_vjp_call(original):
  def __call__(self, *args, **kwargs):
    if not _active():
      return original(self, *args, **kwargs)
    for observe in _application_observers:
      records.safely(observe, self, args, kwargs)
    try:
      return original(custom_rules.instrumented(self), *args, **kwargs)
    except BaseException as e:
      records.safely(frames.strip, e)
      raise
  __call__.__wrapped__ = original
  return __call__


def _patch_hi_primitive_transpose(patches: PatchSet) -> None:
  """Name the hijax primitive whose backward rule is running (for ``ct_check``)."""
  try:
    from jax._src import hijax
    prim = hijax.call_hi_primitive_linearized_p
  except (ImportError, AttributeError):
    return

  def wrap(original):
    def transpose(cts, *args, _prim, **params):
      site = _hi_site(_prim) if _active() and not _is_custom_vjp3(_prim) else None
      if site is None:
        return original(cts, *args, _prim=_prim, **params)
      records.state.rule_stack.append(site)
      try:
        return original(cts, *args, _prim=_prim, **params)
      finally:
        records.state.rule_stack.pop()
    transpose.__wrapped__ = original
    return transpose
  patches.apply(ad.fancy_transposes, prim, wrap)


def _is_custom_vjp3(prim) -> bool:
  return type(prim).__name__ == "CustomVJPTraced"


def _hi_site(prim) -> RuleSite | None:
  try:
    paths = tuple(jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(
        jax.tree_util.tree_unflatten(prim.in_tree, range(prim.in_tree.num_leaves))))
    name = type(prim).__name__
    rule = "vjp_bwd_retval" if "vjp_bwd_retval" in type(prim).__dict__ else "vjp_bwd"
    return RuleSite(function=name, source=names.function_source(type(prim).__init__),
                    rule=f"{name}.{rule}", fwd_rule=f"{name}.vjp_fwd",
                    rule_source=names.function_source(getattr(type(prim), rule)),
                    call_site=None, name_stack="", occurrence=None, in_paths=paths,
                    in_names=tuple(f"args{p}" for p in paths),
                    in_avals=tuple(prim.in_avals_flat), in_tree=prim.in_tree, hijax=True)
  except Exception:
    return None
