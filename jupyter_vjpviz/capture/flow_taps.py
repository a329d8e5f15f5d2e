"""Taps on activations: the identity forward, a backward that logs its cotangent's summary.

A tap is a ``custom_vjp`` identity registered with ``defvjp_with_logs`` (JAX 0.12.1): its
backward passes the cotangent through and logs five numbers about it under its key, which
JAX hands back beside the gradient to a caller asking ``with_logs=True``, and drops (dead
code under jit) otherwise. The summary is reduced where the cotangent is, inside the
compiled backward pass: no callback, no transfer. ``AVAILABLE`` is False on older JAX.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

PREFIX = "vjpviz_flow/"
"""The log keys of vjpviz's taps: told apart from the user's own logs by it."""

AVAILABLE = hasattr(jax.custom_vjp, "defvjp_with_logs")

SUMMARY = ("sumsq", "max_abs", "finite", "zero", "size")
"""What a tap logs of its cotangent, float32 each: the sum of squares and max |.| over
every element (NaN or Inf where any is), the counts of finite and of zero elements, and
the element count."""


def summary(ct) -> jax.Array:
  """float32[5]: ``SUMMARY`` of ``ct``."""
  x = ct.astype(jnp.float32)
  return jnp.stack([jnp.sum(x * x), jnp.max(jnp.abs(x)), jnp.sum(jnp.isfinite(x), dtype=jnp.float32),
                    jnp.sum(x == 0, dtype=jnp.float32), jnp.float32(x.size)])


def tap(x, key: str):
  """``x``, its cotangent's ``summary`` logged under ``PREFIX + key`` in the backward pass."""
  @jax.custom_vjp
  def identity(x):
    return x
  identity.defvjp_with_logs(lambda x: (x, None),
                            lambda _, ct: ((ct,), {PREFIX + key: summary(ct)}))
  return identity(x)


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
