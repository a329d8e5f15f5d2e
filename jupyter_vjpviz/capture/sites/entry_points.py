"""JAX's VJP entry points, each opening a ``Session`` for the check sites to fill.

``jax.vjp`` (and ``jax.grad``, which calls it), building the VJP function
(``_vjp3_callable``: ``f_vjp(ct)`` and ``f_vjp.with_refs(...)``) and running its
backward pass (``_vjp3_bwd``). Each is followed as its frame starts and ends
(``code_events``): nothing of ours is on the stack while the user's functions run,
and the exception propagates as JAX raised it. Where no monitoring slot is free,
wrappers around them do the same, at the price of their frames.
"""
from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable

import jax
from ..compat.private import api, core, traceback_util
from ..compat import private

from ...base import safety
from .. import grad_logs, records
from ..code_events import CodeEvents
from ..compat.patches import PatchSet
from ..naming import frames, function_names, user_calls
from ..records import Origin, Session
from . import check_sites
from ...base.trees import substituted

Sink = Callable[[Session, BaseException | None], None]

_origins: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
vjp_finished = safety.Listeners()
"""Told of each jax.vjp as it returns: ``(fun, args, kwargs, diff_argnums, has_aux, f_vjp)``,
the user's own call."""
backward_finished = safety.Listeners()
"""Told of each backward pass's result as it returns: ``(jaxpr, cotangents)``."""


_held: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Boundary:
  """Opens a session for one entry into JAX's VJP machinery.

  On exit the session goes to the sink, with the exception if one is passing
  through; the exception itself always propagates untouched.
  """

  call = jaxpr = None      # for vjp_finished: the vjp's (fun, primals, has_aux); for
                           # backward_finished: the backward pass's jaxpr
  want_logs = False        # the backward pass returns (cotangents, JAX's logs)

  def __init__(self, entry: str, origin: Origin | None, sink: Sink):
    self.session = Session(entry, origin)
    self.sink = sink

  def __enter__(self):
    records.state.sessions.append(self.session)
    return self.session

  def __exit__(self, typ, exc, tb):
    _pop(self.session)
    _run_deferred(self.session)
    if self.session.records or exc is not None:
      safety.safely(self.sink, self.session, exc)
    if exc is not None:
      safety.safely(frames.strip, exc)
    return False


def _run_deferred(session: Session) -> None:
  """The session's deferred checks, now that the user's functions have returned; the
  hook stands aside while they trace (``records.suspended``)."""
  try:
    with records.suspended():
      for at, check in reversed(session.deferred):
        session.records[at:at] = safety.safely(check, default=[])
  finally:
    session.deferred.clear()


def _pop(session: Session) -> None:
  """Close ``session``: the innermost one, unless a frame ended unfollowed (uninstall
  while another thread was inside JAX) and left one above it."""
  sessions = records.state.sessions
  if session in sessions:
    del sessions[len(sessions) - 1 - sessions[::-1].index(session):]


def install(patches: PatchSet, sink: Sink, events: CodeEvents | None = None) -> None:
  if events is not None and safety.safely(_follow, events, sink, default=False):
    return
  original_vjp = api.vjp
  vjp = _wrap_vjp(original_vjp, sink)
  patches.apply(api, "vjp", lambda _: vjp)
  patches.apply(jax, "vjp", lambda o: vjp if o is original_vjp else o)
  patches.apply(api, "_vjp3_callable", lambda o: _wrap_vjp_callable(o, sink))
  patches.apply(api, "_vjp3_bwd", lambda o: _wrap_backward(o, sink))


_WATCHED = ("vjp", "_vjp3_callable", "_vjp3_bwd")


def _follow(events: CodeEvents, sink: Sink) -> bool:
  """Follow the three entry points' frames; False (nothing followed) on a JAX whose
  functions do not have the parameters read here (``private``'s entries say which)."""
  if not all(private.has(f"api.{name}") for name in _WATCHED):
    return False
  codes = {name: inspect.unwrap(getattr(api, name)).__code__ for name in _WATCHED}
  finish = lambda opened, value, exc: _finish(opened, value, exc)
  events.follow(codes["vjp"], lambda frame: _vjp_started(frame, sink), finish)
  events.follow(codes["_vjp3_callable"], lambda frame: _call_started(frame, sink), finish)
  events.follow(codes["_vjp3_bwd"], lambda frame: _backward_started(frame, sink), finish)
  return True


def _vjp_started(frame, sink):
  if not records.active():
    return None
  args = frame.f_locals
  boundary = Boundary("vjp", safety.safely(_origin, args["fun"], args["primals"]), sink)
  boundary.call = (args["fun"], args["primals"], args.get("has_aux", False))
  boundary.__enter__()
  follow = user_calls.Follow(boundary.session, args["primals"]).__enter__()
  return boundary, follow


def _call_started(frame, sink):
  if not records.active():
    return None
  boundary = Boundary("vjp_call", origin_of(frame.f_locals["jaxpr"]), sink)
  boundary.__enter__()
  return boundary, None


def _backward_started(frame, sink):
  if not records.active():
    return None
  args = frame.f_locals
  boundary = Boundary("backward", origin_of(args["jaxpr"]), sink)
  boundary.jaxpr = args["jaxpr"]
  boundary.want_logs = private.has("api._vjp3_bwd_logs") and args.get("want_logs") is True
  boundary.__enter__()
  _check_out_cotangent(args["jaxpr"], args["out_tree"], args["out_primal_avals"], args["out_ct"])
  return boundary, None


def _finish(opened, value, exc) -> None:
  boundary, follow = opened
  info = (type(exc), exc, exc.__traceback__) if exc is not None else (None, None, None)
  if follow is not None:
    follow.__exit__(*info)
  if exc is None and boundary.session.entry == "vjp":
    safety.safely(_remember, value, boundary.session)
  if exc is None and boundary.want_logs:
    safety.safely(grad_logs.received, boundary.session, value[1])
  if exc is None and (vjp_finished or backward_finished):
    safety.safely(_tell_listeners, boundary, value)
  boundary.__exit__(*info)


def _tell_listeners(boundary: Boundary, value) -> None:
  if boundary.call is not None:
    fun, primals, has_aux = boundary.call
    vjp_finished.notify(*unwrap_argnums(fun, primals), has_aux, value[1])
  elif boundary.jaxpr is not None:
    backward_finished.notify(boundary.jaxpr, value)


def _check_out_cotangent(jaxpr, out_tree, out_primal_avals, out_ct) -> None:
  for rec in safety.safely(check_sites.check_out_cotangent, jaxpr, out_tree,
                            out_primal_avals, out_ct, default=[]):
    records.record(rec)


def _wrap_vjp(original, sink):
  @traceback_util.api_boundary
  def vjp(fun, *primals, **kwargs):
    if not records.active():
      return original(fun, *primals, **kwargs)
    return in_session(original, fun, primals, kwargs, safety.safely(_origin, fun, primals),
                      sink, _remember)
  vjp.__wrapped__ = original
  return vjp


def in_session(original, fun, primals, kwargs, origin, sink, remember):
  """``original(fun, *primals, **kwargs)``, a VJP of the user's call ``origin``, in a session;
  then ``remember(result, session)``, so applying its VJP function finds that call."""
  with (Boundary("vjp", origin, sink) as session, user_calls.Follow(session, primals)):
    result = original(fun, *primals, **kwargs)
  safety.safely(remember, result, session)
  return result


def _remember(vjp_result, session: Session) -> None:
  f_vjp = vjp_result[1]
  if hasattr(f_vjp, "jaxpr"):   # before JAX 0.8 a Partial: entry_points_before_0_10 finds its jaxpr
    remember(f_vjp.jaxpr, session)


def remember(jaxpr, session: Session) -> None:
  """So applying the VJP function of ``jaxpr`` later knows the user's function and argument
  types, and the custom rules it applied live as long as it can report on them."""
  if session.origin is not None:
    _origins[jaxpr] = session.origin
  if session.held:
    _held[jaxpr] = tuple(session.held.values())


def _origin(fun, primals) -> Origin:
  return call_origin(*unwrap_argnums(fun, primals))


def call_origin(user_fun, args: list, kwargs: dict, diff_argnums: tuple[int, ...]) -> Origin:
  """The call ``user_fun(*args, **kwargs)``, differentiated in the ``diff_argnums`` arguments."""
  paths_leaves, tree = jax.tree_util.tree_flatten_with_path((tuple(args), kwargs))
  leaves = tuple(_aval_or_value(x) for _, x in paths_leaves)
  by_arg: dict[int, list[int]] = {}
  for j, (path, _) in enumerate(paths_leaves):
    if path[0].idx == 0:
      by_arg.setdefault(path[1].idx, []).append(j)
  differentiated = tuple(j for i in diff_argnums for j in by_arg.get(i, ()))
  return Origin(fun=user_fun, leaves=leaves, tree=tree, differentiated_leaves=differentiated,
                name=function_names.function_name(user_fun), source=function_names.function_source(user_fun))


def unwrap_argnums(fun, primals):
  """See through ``jax.grad``'s argnums wrapper to the user's function and all its args.

  ``argnums_partial2`` closes over the user's ``f``, the other arguments and
  the kwargs; reading its closure cells costs nothing and gives the graph the
  whole program with the user's own argument names.
  """
  code, cells = getattr(fun, "__code__", None), getattr(fun, "__closure__", None)
  if code is not None and cells and code.co_name == "f_wrapped":
    free = dict(zip(code.co_freevars, (c.cell_contents for c in cells)))
    if {"f", "static_args", "dyn_argnums", "kwargs"} <= free.keys():
      args = substituted(free["static_args"], free["dyn_argnums"], primals)
      return free["f"], args, dict(free["kwargs"]), tuple(free["dyn_argnums"])
  return fun, list(primals), {}, tuple(range(len(primals)))


def _aval_or_value(x):
  try:
    return core.typeof(x)
  except TypeError:
    return x


def origin_of(jaxpr) -> Origin | None:
  try:
    return _origins.get(jaxpr)
  except TypeError:
    return None


def _wrap_vjp_callable(original, sink):
  def vjp3_callable(*args):
    if not records.active():
      return original(*args)
    with Boundary("vjp_call", origin_of(args[2]), sink):
      return original(*args)
  vjp3_callable.__wrapped__ = original
  return vjp3_callable


def _wrap_backward(original, sink):
  logs_at = safety.safely(_want_logs_position, original)
  def vjp3_bwd(in_tree, out_tree, out_zeros, jaxpr, out_primal_avals, *rest):
    if not records.active():
      return original(in_tree, out_tree, out_zeros, jaxpr, out_primal_avals, *rest)
    with Boundary("backward", origin_of(jaxpr), sink) as session:
      _check_out_cotangent(jaxpr, out_tree, out_primal_avals, rest[-1])
      value = original(in_tree, out_tree, out_zeros, jaxpr, out_primal_avals, *rest)
      if logs_at is not None and rest[logs_at] is True:
        safety.safely(grad_logs.received, session, value[1])
      return value
  vjp3_bwd.__wrapped__ = original
  return vjp3_bwd


def _want_logs_position(original) -> int | None:
  """Where ``want_logs`` comes after ``out_primal_avals`` among ``_vjp3_bwd``'s arguments;
  None on a JAX whose backward pass returns no logs."""
  if not private.has("api._vjp3_bwd_logs"):
    return None
  names = list(inspect.signature(original).parameters)
  return names.index("want_logs") - names.index("out_primal_avals") - 1
