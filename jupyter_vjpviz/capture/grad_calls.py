"""The first gradient a step's trace takes, seen (and its function tapped) as it is taken.

``vv.watch`` traces the user's step again with ``jax.grad``/``jax.value_and_grad`` (and
flax's ``nnx.grad``/``nnx.value_and_grad``, where flax is loaded) wrapped meanwhile: the
first gradient returned goes into a box, with whether it is of live nnx modules. With a
``tapper`` (backward flow), the function the first JAX-level transform differentiates is
replaced by the tapper's, the transform asked ``with_logs=True`` on the caller's behalf
(or, on JAX before 0.12.1, for the gradient of the taps' sinks too), and the taps'
summaries taken out of its result (``flow_taps``).
"""
from __future__ import annotations

import contextlib
import inspect
import sys
import threading
from collections.abc import Callable

import jax
import jax.numpy as jnp

from . import flow_taps

_lock = threading.Lock()


@contextlib.contextmanager
def seen_through(box: list, tapper: Callable | None = None, flows: list | None = None):
  """``box`` meanwhile gets ``(grads, live)`` of the first gradient returned; with a
  ``tapper`` (``analysis.values.flow.Tapper``), ``flows`` gets the taps' summaries of
  the first JAX-level gradient taken (the step's trace is the only caller: held
  under a lock). Asked ``with_logs``, JAX returns the logs beside the gradient: left out
  of ``box``."""
  of_grad = lambda res, k: res[0] if k.get("has_aux") or k.get("with_logs") else res
  of_value_and_grad = lambda res, k: res[1][0] if k.get("with_logs") else res[1]
  nnx = sys.modules.get("flax.nnx")
  seen = [(jax, "grad", of_grad), (jax, "value_and_grad", of_value_and_grad)] + (
      [(nnx, "grad", of_grad), (nnx, "value_and_grad", of_value_and_grad)] if nnx else [])
  tapping = [tapper is not None and flows is not None]   # until the first is tapped

  def seeing(transform, name: str, grads_of, live: bool, jax_level: bool):
    def wrapped(*a, **k):
      if tapping[0] and jax_level and a and callable(a[0]):
        tapping[0] = False   # one gradient tapped: not one its function takes inside
        return _tapped(transform, name, a, k, tapper, flows, grads_of, box, live)
      inner = transform(*a, **k)
      if not a or not callable(inner):    # nnx.grad(has_aux=True): the decorator itself
        return inner
      return _boxed(inner, grads_of, k, box, live)
    return wrapped
  with _lock:
    originals = [getattr(module, name) for module, name, _ in seen]
    for (module, name, grads_of), original in zip(seen, originals):
      setattr(module, name, seeing(original, name, grads_of, module is nnx, module is jax))
    try:
      yield
    finally:
      for (module, name, _), original in zip(seen, originals):
        setattr(module, name, original)


def _boxed(inner, grads_of, k: dict, box: list, live: bool):
  def call(*args, **kwargs):
    first = not box
    res = inner(*args, **kwargs)
    if first:   # the outermost: nnx.grad's State, not the jax.grad it calls
      box[:] = [(grads_of(res, k), live)]
    return res
  return call


def _tapped(transform, name, a, k, tapper, flows, grads_of, box, live):
  """``transform`` of the tapper's function: asked ``with_logs=True`` where JAX has the
  backward-pass logs, else w.r.t. one more argument, the taps' sinks (``flow_taps``); its
  result as the caller asked for it, the taps' summaries of its first call into
  ``flows``."""
  params = inspect.signature(transform).bind(*a, **k).arguments
  fun = params.pop(next(iter(inspect.signature(transform).parameters)))
  argnums, has_aux = params.get("argnums", 0), params.get("has_aux", False)
  value_and_grad = name == "value_and_grad"
  if flow_taps.AVAILABLE:
    asked = params.get("with_logs", False)
    inner = transform(tapper.logs(fun, argnums), **{**params, "with_logs": True})

    def call(*args, **kwargs):
      res, ours = flow_taps.split_logs(inner(*args, **kwargs), value_and_grad, has_aux, asked)
      if not flows:
        flows.append(ours)
      return res
  else:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    def call(*args, **kwargs):
      traced = tapper.traced(fun, args, kwargs, argnums)
      inner = transform(lambda *a, **kw: traced.run(a[:-1], kw, a[-1]),
                        **{**params, "argnums": (*nums, len(args))})
      sinks = jnp.zeros((traced.sink_rows, len(flow_taps.SUMMARY)), jnp.float32)
      res, cts = flow_taps.split_sinks(inner(*args, sinks, **kwargs), value_and_grad, has_aux,
                                       isinstance(argnums, int))
      if not flows:
        flows.append(traced.logs(cts))
      return res
  return _boxed(call, grads_of, k, box, live)
