"""JAX internals whose signature changed within the supported range (0.6 to 0.12), one way.

Each is called as the newest JAX has it and adapted here for the older ones, so the
stages above read one API and the version test lives in one place.
"""
from __future__ import annotations

import inspect

from .private import source_info_util

_FRAME_OF_SOURCE_INFO = "source_info" in inspect.signature(source_info_util.user_frame).parameters


def varying_axes(aval) -> frozenset:
  """The manual mesh axes an aval varies over (``{V:dp}``): its ``manual_axis_type`` on
  newer JAX, its ``vma`` before; empty outside shard_map."""
  manual = getattr(aval, "manual_axis_type", None)
  return frozenset(manual.varying if manual is not None else getattr(aval, "vma", None) or ())


def user_frame(source_info):
  """JAX's guess at the user's frame of an equation (``source_info_util.user_frame``): of
  its traceback on newer JAX, of the whole ``SourceInfo`` on JAX 0.6."""
  return source_info_util.user_frame(source_info if _FRAME_OF_SOURCE_INFO else source_info.traceback)


def bind(eqn, args) -> list:
  """The equation applied to ``args``, as JAX's own interpreter binds it: its bind
  params are ``(subfuns, params)`` before JAX 0.7, params alone after."""
  params = eqn.primitive.get_bind_params(eqn.params)
  if isinstance(params, tuple):
    subfuns, params = params
    args = (*subfuns, *args)
  out = eqn.primitive.bind(*args, **params)
  return list(out) if eqn.primitive.multiple_results else [out]
