"""The user's own call behind a library's transform, seen as it happens.

A library's grad (flax nnx's ``nnx.grad``, equinox's ``filter_grad``) hands
``jax.vjp`` a wrapper of its own, which turns the user's objects into flat
state and back, and need not survive a second call (nnx's pops a deque): the
analysis cannot re-trace it for the graph. The function the user wrote is
behind that wrapper (``__wrapped__``, partials, closure cells); while JAX runs
the forward pass, ``code_monitor`` watches that one code object start and
takes the arguments it was called with, as avals: an ``Origin`` that is safe to
trace again and names the inputs as the user does (``model.layers[3].w``).

Nothing else is watched (local events on one code object cost nothing
elsewhere), the tool slot is held only while a forward pass is watched, and a
failure here leaves the wrapper's own ``Origin`` in place.
"""
from __future__ import annotations

import dataclasses
import inspect
import threading
import types

import jax
import numpy as np

from ..compat.private import cd, core
from ...base import safety
from ..records import Origin, Session
from . import arguments, code_monitor, function_names, library_wrappers


class Follow:
  """A context manager around one forward pass: on exit, the session's origin is the user's
  call if it was seen. Only the first start of the user's function counts. While open, it
  names the pass's inputs for ``program_names``."""

  def __init__(self, session: Session, primals: tuple):
    self.session, self.primals = session, primals
    self.fun = safety.safely(_target, session.origin)
    code = getattr(self.fun, "__code__", None)
    self.monitor = code_monitor.Monitor(code, code_monitor.START, self._started) if code else None
    self.call = self.spelled = None    # (args, kwargs), and arguments.spelled, when seen
    self.positions = None        # id of each primal leaf -> its index, once asked

  def __enter__(self):
    _passes().append(self)
    if self.monitor is not None:
      safety.safely(self.monitor.__enter__)
    return self

  def __exit__(self, *exc):
    if self in _passes():
      _passes().remove(self)
    self.positions = None
    if self.monitor is None or not self.monitor.opened:
      return False
    safety.safely(self.monitor.__exit__)
    if self.call is not None:
      origin = (safety.safely(user_origin, self.fun, *self.call, self.primals)
                or safety.safely(relabelled, self.session.origin, self.spelled, self.primals))
      self.session.origin = origin or self.session.origin
    self.call = self.spelled = None    # their tracers must not outlive the forward pass
    return False

  def _started(self, frame):
    if self.call is None:
      self.call, self.spelled = _arguments(frame), arguments.spelled(frame.f_locals)


_local = threading.local()      # .passes: this thread's open forward passes, innermost last


def _passes() -> list:
  if not hasattr(_local, "passes"):
    _local.passes = []
  return _local.passes


def program_names(values: list) -> list[str | None]:
  """Each of ``values`` named as the user named it among the inputs of a forward pass in
  progress (innermost first), by identity, or None. A library's rule is handed the
  user's parameters untouched (flax's variables, as the user's ``p['params']...``)."""
  found: list = [None] * len(values)
  for watch in reversed(_passes()):
    origin = watch.session.origin
    if origin is None or all(found):
      continue
    if watch.positions is None:
      watch.positions = {id(p): k for k, p in enumerate(jax.tree_util.tree_leaves(watch.primals))}
    labels = None
    for i, x in enumerate(values):
      k = watch.positions.get(id(x), watch.positions.get(id(getattr(x, "primal", x))))
      if found[i] is None and k is not None and k < len(origin.differentiated_leaves):
        labels = labels or function_names.leaf_labels(origin)
        found[i] = labels[origin.differentiated_leaves[k]]
  return found


def _target(origin: Origin | None):
  """The user's function behind a library's ``origin.fun``, or None when ``origin.fun``
  is the user's own (then it is re-traced as it is)."""
  if origin is None or library_wrappers.user_code(origin.fun) or _defines_derivatives(origin.fun):
    return None
  user = _plain(function_names.unwrap(origin.fun))
  return user if user is not origin.fun and library_wrappers.user_code(user) else None


def _defines_derivatives(fun) -> bool:
  """A custom_vjp, custom_jvp or custom_gradient differentiated as it is (``jax.grad(f)``):
  the function behind it is only its primal, whose graph would hold no rule."""
  code = getattr(fun, "__code__", None)
  return isinstance(fun, (cd.custom_vjp, cd.custom_jvp)) or (
      code is not None and code.co_filename == cd.__file__)


def _plain(fun):
  """A bound method's function: ``self`` is then an argument, and its arrays inputs."""
  return fun.__func__ if isinstance(fun, types.MethodType) else fun


def _arguments(frame) -> tuple[tuple, dict]:
  """(args, kwargs) of a call, read from its frame before its first line runs."""
  code, local = frame.f_code, frame.f_locals
  n, given = code.co_argcount, code.co_varnames
  args = [local[v] for v in given[:n]]
  i = n + code.co_kwonlyargcount
  kwargs = {v: local[v] for v in given[n:i]}
  if code.co_flags & inspect.CO_VARARGS:
    args += list(local[given[i]])
    i += 1
  if code.co_flags & inspect.CO_VARKEYWORDS:
    kwargs.update(local[given[i]])
  return tuple(args), kwargs


def user_origin(fun, args: tuple, kwargs: dict, primals: tuple) -> Origin | None:
  """The user's call as an Origin: arrays (tracers of the forward pass) become avals; an
  array leaf that is one of the VJP's primals is differentiated, in the VJP's input order.
  None if an argument that is no pytree holds a tracer (keeping it would keep its arrays),
  or if no leaf is one of the primals."""
  flat, tree = jax.tree_util.tree_flatten((args, kwargs))
  position = {id(p): k for k, p in enumerate(jax.tree_util.tree_leaves(primals))}
  leaves, differentiated = [], {}
  for j, x in enumerate(flat):
    if isinstance(x, (jax.Array, np.ndarray)):
      k = position.get(id(getattr(x, "primal", x)))   # a linearize tracer carries its primal
      if k is not None:
        differentiated.setdefault(k, j)
      x = core.typeof(x)
    elif _holds_tracer(x):
      return None
    leaves.append(x)
  if position and not differentiated:
    differentiated = _copies_of_primals(flat, primals)
    if not differentiated:   # the call saw another trace's values (a jit's in between):
      return None            # the VJP's own function, re-traced, says more
  return Origin(fun=fun, leaves=tuple(leaves), tree=tree,
                differentiated_leaves=tuple(differentiated[k] for k in sorted(differentiated)),
                name=function_names.function_name(fun), source=function_names.function_source(fun))


def _copies_of_primals(flat: list, primals: tuple) -> dict:
  """{primal index: leaf index} when the call's differentiated arrays (tracers carrying a
  primal) are none of the VJP's primals but copies of them, all, in order and of their
  types (flax nnx hands a loss whose model has an ``nnx.remat`` method copies of its
  state); else {}."""
  pl = jax.tree_util.tree_leaves(primals)
  traced = [j for j, x in enumerate(flat) if isinstance(getattr(x, "primal", None), jax.Array)]
  if len(traced) != len(pl) or any(core.typeof(flat[j].primal) != core.typeof(p)
                                   for j, p in zip(traced, pl)):
    return {}
  return dict(enumerate(traced))


def relabelled(origin: Origin, spelled: dict, primals: tuple) -> Origin | None:
  """The library's ``origin``, its differentiated leaves named as the user's function
  named them (``spelled``: id -> ``x['w']``), matched by identity: a linearize tracer of
  the user's frame carries the VJP's primal."""
  by_id = {id(getattr(x, "primal", x)): name for x, name in spelled.values()}
  names_of = [by_id.get(id(p)) for p in jax.tree_util.tree_leaves(primals)]
  if origin is None or not any(names_of):
    return None
  labels = [None] * len(origin.leaves)
  for k, j in enumerate(origin.differentiated_leaves[:len(names_of)]):
    labels[j] = names_of[k]
  return dataclasses.replace(origin, labels=tuple(labels))


def _holds_tracer(x, depth: int = 6, budget: int = 256) -> bool:
  """Whether an object's attributes and items reach a tracer within ``depth`` steps
  (functions, classes and modules are not looked into: their globals are not the call's)."""
  layer = [x]
  for _ in range(depth):
    deeper = []
    for obj in layer:
      if isinstance(obj, core.Tracer):
        return True
      if isinstance(obj, (dict, list, tuple, set)):
        deeper += list(obj.values() if isinstance(obj, dict) else obj)
      elif not isinstance(obj, (type, types.FunctionType, types.ModuleType, str, bytes)):
        deeper += list(getattr(obj, "__dict__", {}).values())
    layer = deeper[:budget]
  return any(isinstance(obj, core.Tracer) for obj in layer)
