"""The instrumented rules in place of a frame of JAX's, not beneath it.

An instrumented rule is one frame of ours (``custom_rules.InstrumentedRule``): the rule's
result must pass through it. JAX calls a custom_vjp's fwd and bwd and a custom_jvp's rule
through the ``lu.WrappedFun`` its ``_flatten_fwd``, ``_flatten_bwd`` and ``_flatten_jvp``
make, as ``flat.call_wrapped(*args)``, a frame that only calls the transformed function.
That ``WrappedFun`` is handed to JAX calling its transformed function itself, so the
frame of ours takes the place of JAX's ``call_wrapped`` and the user's rule runs exactly
as deep in the stack as without vjpviz (JAX's own tests count that stack:
``TracebackTest::test_custom_vjp_traceback``). An exception leaving such a call gets
JAX's ``call_wrapped`` entry back in its traceback (``frames.called_around``), so it reads
as without vjpviz with JAX's traceback filtering off too.
"""
from __future__ import annotations

import operator
from types import TracebackType

from ...base import safety
from ..compat.patches import PatchSet
from ..naming import frames
from ..compat.private import cd, lu


def _called_directly_class():
  """``lu.WrappedFun`` whose ``call_wrapped`` is its transformed function; None where
  JAX's ``call_wrapped`` does more than call it."""
  base = lu.WrappedFun
  if getattr(base.call_wrapped, "__code__", None) is None or (
      base.call_wrapped.__code__.co_names != ("f_transformed",)):
    return None

  class CalledDirectly(base):
    """So are the ``WrappedFun``s JAX makes of one (a transformation more, other debug
    info: how ``jit``, ``checkpoint`` and ``scan`` trace the rule)."""
    __slots__ = ()
    call_wrapped = property(operator.attrgetter("f_transformed"))

    def wrap(self, *args, **kwargs):
      return _as_direct(super().wrap(*args, **kwargs))

    def replace_debug_info(self, *args, **kwargs):
      return _as_direct(super().replace_debug_info(*args, **kwargs))

  return CalledDirectly


def _as_direct(fun):
  direct(fun)
  return fun


_CalledDirectly = safety.safely(_called_directly_class)


class _Marker(Exception):
  pass


class _Raising:
  """What a ``call_wrapped`` frame calls to leave a traceback entry of its own."""

  def f_transformed(self, *args, **kwargs):
    raise _Marker


def _call_wrapped_frame():
  """A frame of JAX's ``call_wrapped`` stopped at the line that calls the transformed
  function, with its place there: (frame, last instruction, line)."""
  try:
    _CalledDirectly.__base__.call_wrapped(_Raising())
  except _Marker as e:
    tb = e.__traceback__.tb_next
    return tb.tb_frame, tb.tb_lasti, tb.tb_lineno
  return None


def call_wrapped_entry() -> TracebackType | None:
  """A traceback entry of that frame: what an exception leaving a rule called directly
  carries there without vjpviz."""
  return TracebackType(None, *_frame) if _frame else None


_frame = None


def install(patches: PatchSet, fwd_type: type, bwd_type: type) -> None:
  global _frame
  if _CalledDirectly is not None:
    _frame = _frame or _call_wrapped_frame()
    frames.called_around(_CalledDirectly.__base__.call_wrapped.__code__, call_wrapped_entry,
                         _outermost, _transformations)
  patches.apply(cd, "_flatten_fwd", lambda original: flattening(original, fwd_type))
  patches.apply(cd, "_flatten_bwd", lambda original: flattening(original, bwd_type))


def flattening(original, rule_type: type):
  """JAX's ``_flatten_fwd`` or ``_flatten_bwd``, its ``WrappedFun`` called directly
  where the rule inside is an instrumented one (``rule_type``)."""
  def flatten(fun, *args, **kwargs):
    made = original(fun, *args, **kwargs)
    if isinstance(getattr(fun, "f", None), rule_type):
      safety.safely(direct, made[0] if isinstance(made, tuple) else made)
    return made
  flatten.__wrapped__ = original
  return flatten


# The code of the transformations of the WrappedFuns called directly: all of them, and
# the outermost of each (what its ``call_wrapped`` would have called).
_transformations: set = set()
_outermost: set = set()


def direct(fun) -> None:
  """Make ``fun``, a ``WrappedFun`` JAX just made, one called without JAX's frame."""
  if _CalledDirectly is not None and type(fun) is _CalledDirectly.__base__:
    fun.__class__ = _CalledDirectly
    codes = [getattr(gen, "__code__", None) for gen, _ in fun.transforms]
    _transformations.update(c for c in codes if c is not None)
    if codes and codes[0] is not None:
      _outermost.add(codes[0])
