"""Taps on activations: the identity forward, a backward that logs its cotangent's summary.

A tap is a ``custom_vjp`` identity registered with ``defvjp_with_logs`` (JAX 0.12.1): its
backward passes the cotangent through and logs five numbers about it under its key, which
JAX hands back beside the gradient to a caller asking ``with_logs=True``, and drops (dead
code under jit) otherwise. The summary is reduced where the cotangent is, inside the
compiled backward pass: no callback, no transfer. On older JAX (``AVAILABLE`` False) a
``sink_tap`` takes a row of an extra input instead, whose cotangent its backward sets to
the summary: the gradient is taken w.r.t. that input too, and its part taken out.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from . import cpu_kernels

PREFIX = "vjpviz_flow/"
"""The log keys of vjpviz's taps: told apart from the user's own logs by it."""

AVAILABLE = hasattr(jax.custom_vjp, "defvjp_with_logs")

SUMMARY = ("sumsq", "max_abs", "finite", "zero", "size")
"""What a tap logs of its cotangent, float32 each: the sum of squares and max |.| over
every element (NaN or Inf where any is), the counts of finite and of zero elements, and
the element count."""


def summary(ct) -> jax.Array:
  """float32[5]: ``SUMMARY`` of ``ct``: on the CPU of a one-device job, in one pass by
  ``cpu_kernels`` (where it built); elsewhere by XLA (``reduced``). Never differentiated
  (a tap's backward taken again, under ``jax.hessian``, sees a constant)."""
  x = jax.lax.stop_gradient(ct).astype(jnp.float32)
  return cpu_kernels.on_cpu(cpu_kernels.summary, reduced, x) if x.size else reduced(x)


def reduced(x) -> jax.Array:
  """float32[5]: ``SUMMARY`` of float32 ``x``, in three sum/max reductions of elementwise
  arithmetic that XLA:CPU runs vectorised, each fused with its read of the cotangent (no
  copy written): the sum of squares, max |.|, and the nonzero count as the sum of
  ``nonzero``. That count and "all finite" hold where the sum of squares is finite;
  where it is not, the exact counts come from ``_counts``, under a ``cond`` that runs
  only then. Not one variadic ``lax.reduce`` for all four: one read in XLA's cost model,
  but XLA:CPU runs it unvectorised, ~30x slower per element than a sum; not ``x == 0``
  summed: XLA:CPU writes the mask out and reads it again (benchmarks/watch_overhead.py
  --flow, docs/benchmarks.md)."""
  sumsq = jnp.sum(x * x)
  nonzero = jnp.sum(_nonzero(x))
  counts = jax.lax.cond(jnp.isfinite(sumsq),
                        lambda: jnp.stack([jnp.float32(x.size), x.size - nonzero]),
                        lambda: _counts(x))
  return jnp.stack([sumsq, jnp.max(jnp.abs(x)), counts[0], counts[1], jnp.float32(x.size)])


def _nonzero(x) -> jax.Array:
  """1 where finite ``x`` is nonzero, else 0, as XLA's ``x != 0`` says (a subnormal is
  zero where the backend flushes it), in arithmetic a reduction fuses: tanh keeps every
  positive number positive, at most 1 (ceil: 1), and has no constant operand (a constant
  is an array XLA:CPU broadcasts and reads beside x). ``max(x, -x)``, not abs: a second
  abs would be shared with max |.|'s, and written out."""
  return jnp.ceil(jnp.tanh(jnp.maximum(x, -x)))


def _counts(x) -> jax.Array:
  """float32[2]: the finite and the zero elements of ``x``, counted in one pass."""
  add = lambda a, b: (a[0] + b[0], a[1] + b[1])
  zero = jnp.float32(0)
  return jnp.stack(jax.lax.reduce(
      (jnp.isfinite(x).astype(jnp.float32), (x == 0).astype(jnp.float32)),
      (zero, zero), add, tuple(range(x.ndim))))


CHAINED = 1 << 15
"""A cotangent of fewer elements has its summary chained into the backward pass (an
optimization barrier: the pass goes on once it is made). Left apart, XLA:CPU runs the
step's kernels on several threads, and handing them over costs more than a small tap's
summary: a width-64 MLP step 1.36x unwrapped apart, 1.09x chained; at width 256 the
summaries run beside the pass (1.04x apart, 1.10x chained; benchmarks/watch_overhead.py
--flow)."""


def summarised(ct) -> tuple[jax.Array, jax.Array]:
  """(``ct``, its ``summary``), chained where ``ct`` is small (``CHAINED``)."""
  s = summary(ct)
  return jax.lax.optimization_barrier((ct, s)) if ct.size < CHAINED else (ct, s)


def tap(x, key: str):
  """``x``, its cotangent's ``summary`` logged under ``PREFIX + key`` in the backward pass."""
  @jax.custom_vjp
  def identity(x):
    return x

  def bwd(_, ct):
    ct, s = summarised(ct)
    return (ct,), {PREFIX + key: s}
  identity.defvjp_with_logs(lambda x: (x, None), bwd)
  return identity(x)


def sink_tap(x, sink):
  """``x``, its cotangent's ``summary`` the cotangent of ``sink`` (float32[5], an extra
  differentiated input of the gradient: the channel JAX before 0.12.1 has)."""
  @jax.custom_vjp
  def identity(x, sink):
    return x
  identity.defvjp(lambda x, sink: (x, None), lambda _, ct: summarised(ct))
  return identity(x, sink)


def split_sinks(res, value_and_grad: bool, has_aux: bool, single: bool):
  """(the result as the caller asked for it, the sinks' cotangent) of a ``jax.grad`` or
  ``jax.value_and_grad`` taken with the sinks as its last differentiated argument (the
  caller's ``argnums`` a ``single`` int or a tuple)."""
  if value_and_grad:
    value, grads = res
  elif has_aux:
    grads, aux = res
  else:
    grads = res
  theirs = grads[0] if single else tuple(grads[:-1])
  if value_and_grad:
    return (value, theirs), grads[-1]
  return ((theirs, aux) if has_aux else theirs), grads[-1]


def split_logs(res, value_and_grad: bool, has_aux: bool, asked: bool):
  """(the result as the caller asked for it, vjpviz's taps' logs) of a ``jax.grad`` or
  ``jax.value_and_grad`` called ``with_logs=True`` on the caller's behalf: the logs left
  in only where the caller ``asked`` for them, without vjpviz's keys."""
  if value_and_grad:
    value, (grads, logs) = res
  elif has_aux:
    grads, aux, logs = res
  else:
    grads, logs = res
  ours = {k: v for k, v in logs.items() if k.startswith(PREFIX)}
  theirs = {k: v for k, v in logs.items() if not k.startswith(PREFIX)}
  if value_and_grad:
    return (value, (grads, theirs) if asked else grads), ours
  head = (grads, aux) if has_aux else (grads,)
  return ((*head, theirs) if asked else head if has_aux else grads), ours
