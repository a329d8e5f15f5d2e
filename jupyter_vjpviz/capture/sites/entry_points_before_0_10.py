"""The VJP entry points of JAX before 0.10, where ``jax.grad`` never calls ``jax.vjp``.

There grad hands ``api._vjp`` an ``lu.WrappedFun``: the user's function (``.f``),
their keyword arguments (``.params``) and, when some arguments are not
differentiated, grad's ``_argnums_partial`` transformation, whose static
arguments are the positions differentiated and the other arguments' values.
Read from those, the session knows the function and every argument, as
``jax.vjp``'s does on newer JAX: the graph, re-runs and applied fixes need it.

Before 0.8 the VJP function is ``_vjp_pullback_wrapper`` around ``ad.vjp``'s
pullback (no ``_vjp3_bwd``): it is followed here, with the cotangent the user hands
it checked against the output types (``vjp_cotangent_*``) before JAX's own check
raises, and the origin found again by the linearized jaxpr it closes over.

Before 0.10 the outermost ``jit`` traces, lowers and runs in ``_python_pjit_helper``
(no ``_run_python_pjit``): it is followed as check_sites follows the newer one, so what
JAX accepted while tracing is told once the program ran (or failed lowering).
"""
from __future__ import annotations

from ..compat.private import api, pjit
from ..compat import private

from ...base import safety
from .. import records
from ..compat.patches import PatchSet
from ..records import Origin, Session
from . import check_sites, entry_points


def install(patches: PatchSet, sink: entry_points.Sink) -> None:
  if private.has("api._vjp"):
    patches.apply(api, "_vjp", lambda o: _wrap_vjp(o, sink))
  if private.has("api._vjp_pullback_wrapper"):
    patches.apply(api, "_vjp_pullback_wrapper", lambda o: _wrap_pullback(o, sink))
  if private.has("pjit._python_pjit_helper"):
    patches.apply(pjit, "_python_pjit_helper", lambda o: check_sites.wrap_run_staged(o, sink))


def _wrap_vjp(original, sink):
  """``api._vjp(fun, *primals, has_aux=...)``: a session with the user's call, unless
  ``jax.vjp``'s wrapper opened one for this same call."""
  def _vjp(fun, *primals, **kwargs):
    if not records.active():
      return original(fun, *primals, **kwargs)
    session = records.current_session()
    if session is not None:
      result = original(fun, *primals, **kwargs)
      if session.entry == "vjp" and session.origin is not None and session.origin.fun is fun.f:
        safety.safely(_remember, result, session)
      return result
    return entry_points.in_session(original, fun, primals, kwargs,
                                   safety.safely(origin, fun, primals), sink, _remember)
  _vjp.__wrapped__ = original
  return _vjp


def _wrap_pullback(original, sink):
  """``_vjp_pullback_wrapper(name, out_primal_avals, io_tree, fun, *cts)``, the VJP
  function of JAX before 0.8: a backward session, its cotangent checked first."""
  def pullback(name, out_primal_avals, io_tree, fun, *cts):
    if not records.active() or records.current_session() is not None:
      return original(name, out_primal_avals, io_tree, fun, *cts)
    origin = safety.safely(lambda: entry_points.origin_of(_linear_jaxpr(fun)))
    with entry_points.Boundary("backward", origin, sink):
      if len(cts) == 1:   # else JAX says how to call it, and there is nothing to compare
        found = safety.safely(check_sites.check_out_cotangent, None, io_tree[0],
                              out_primal_avals, cts[0], default=[])
        for rec in found:
          records.record(rec)
      return original(name, out_primal_avals, io_tree, fun, *cts)
  pullback.__wrapped__ = original
  return pullback


def origin(fun, primals) -> Origin | None:
  """The user's call behind grad's ``lu.WrappedFun``; None for a transformation not
  known here (its arguments need not be the user's)."""
  call = _call(fun, primals)
  return entry_points.call_origin(*call) if call is not None else None


_ONLY_RECORDING = {"_get_result_paths_thunk"}
"""Transformations that change neither the arguments nor the result (debug info's output paths)."""


def _call(fun, primals):
  """(user's function, all its arguments, keyword arguments, differentiated positions)."""
  kwargs = dict(fun.params)
  transforms = [t for t in fun.transforms if t[0].__name__ not in _ONLY_RECORDING]
  if not transforms:
    return fun.f, list(primals), kwargs, tuple(range(len(primals)))
  if len(transforms) != 1 or transforms[0][0].__name__ != "_argnums_partial":
    return None
  dyn_argnums, fixed = transforms[0][1]
  values = iter(f.val for f in fixed)
  position = dict(zip(dyn_argnums, primals))
  args = [position[i] if i in position else next(values)
          for i in range(len(fixed) + len(primals))]
  return fun.f, args, kwargs, tuple(dyn_argnums)


def _remember(result, session: Session) -> None:
  """So applying the VJP function finds the user's call: by ``VJP.jaxpr`` from JAX 0.8,
  by the linearized jaxpr its pullback holds before."""
  f_vjp = result[1]
  jaxpr = f_vjp.jaxpr if hasattr(f_vjp, "jaxpr") else _linear_jaxpr(f_vjp.args[0])
  entry_points.remember(jaxpr, session)


def _linear_jaxpr(pullback):
  """The jaxpr ``ad.vjp``'s pullback (``Partial(partial(unbound_vjp, pvals, jaxpr))``) holds."""
  return pullback.func.args[1]
