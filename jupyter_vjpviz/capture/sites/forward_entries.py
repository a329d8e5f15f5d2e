"""JAX's forward-mode entry points, each opening a ``Session`` for the check sites to fill.

Every forward-mode differentiation a user asks for enters JAX at one of two functions:
``api._jvp`` (``jax.jvp``; ``jax.jacfwd``, which vmaps it over a basis, and so
``jax.hessian``) and ``api.linearize`` (``jax.linearize``). Whatever runs a custom rule
below them (jit, vmap, the bodies of scan, while_loop and cond, checkpoint, a nested
``jax.vjp``) runs while that frame is open, so the check sites (custom_jvp's tangent
check, hijax's ``custom_jvp3``, a custom_vjp refusing forward mode) record into a session
as they do under ``jax.vjp``; outside one they cost what they did. Followed like the VJP
entry points (``entry_points``): no frame of ours on the user's stack, wrappers only where
no monitoring slot is free.
"""
from __future__ import annotations

import inspect

import jax

from ..compat.private import api, lu
from ..compat import private
from ...base import safety
from .. import records
from ..code_events import CodeEvents
from ..compat.patches import PatchSet
from ..naming import user_calls
from ..records import Origin
from . import entry_points, entry_points_before_0_10

ENTRIES = {"_jvp": "jvp", "linearize": "linearize"}
"""JAX's function (in ``api``) -> the session's ``entry``."""


def install(patches: PatchSet, sink: entry_points.Sink, events: CodeEvents | None) -> None:
  for name, entry in ENTRIES.items():
    if not private.has(f"api.{name}"):
      continue   # its capability is off, and the capabilities line says so
    if events is not None:
      events.follow(inspect.unwrap(getattr(api, name)).__code__,
                    lambda frame, entry=entry: _started(frame, entry, sink), _finish)
    else:
      original = getattr(api, name)
      wrapped = _wrap(original, entry, sink)
      patches.apply(api, name, lambda _, wrapped=wrapped: wrapped)
      if getattr(jax, name.lstrip("_"), None) is original:   # jax.linearize is api's own
        patches.apply(jax, name.lstrip("_"), lambda o, wrapped=wrapped: wrapped if o is original else o)


def _started(frame, entry: str, sink):
  if not records.active():
    return None
  args = frame.f_locals
  return _open(entry, args["fun"], args["primals"], sink)


def _open(entry, fun, primals, sink):
  boundary = entry_points.Boundary(entry, safety.safely(origin, fun, primals), sink)
  boundary.__enter__()
  follow = user_calls.Follow(boundary.session, tuple(primals)).__enter__()
  return boundary, follow


def _finish(opened, value, exc) -> None:
  boundary, follow = opened
  info = (type(exc), exc, exc.__traceback__) if exc is not None else (None, None, None)
  follow.__exit__(*info)
  boundary.__exit__(*info)


def origin(fun, primals) -> Origin | None:
  """The user's call: ``fun`` as jax.jvp and jacfwd hand it (a callable from JAX 0.10, an
  ``lu.WrappedFun`` before), applied to ``primals``."""
  if isinstance(fun, lu.WrappedFun):
    return entry_points_before_0_10.origin(fun, primals)
  return entry_points.call_origin(*entry_points.unwrap_argnums(fun, list(primals)))


def _wrap(original, entry: str, sink):
  def forward(fun, *args, **kwargs):
    if not records.active():
      return original(fun, *args, **kwargs)
    primals = args[0] if entry == "jvp" else args
    opened = _open(entry, fun, primals, sink)
    try:
      value = original(fun, *args, **kwargs)
    except BaseException as e:
      _finish(opened, None, e)   # the session told, our frames stripped from ``e``
      raise
    _finish(opened, value, None)
    return value
  forward.__wrapped__ = original
  return forward
