"""Cotangents that overflow where the gradient's true value is in range: the loss scaled
by a power of two while differentiating (exact: the backward pass is linear in its output
cotangent), the gradient divided by it after."""
from __future__ import annotations

from ...analysis.values.nonfinite import Culprit
from ...analysis.values.nonfinite_explain import overflowed
from .candidate import Candidate

SCALES = (32, 64, 100)   # 2**-k tried in turn: float32 spans 2**-126 to 2**128
PRIMITIVES = frozenset({"add", "sub", "mul", "dot_general", "conv_general_dilated",
                        "reduce_sum", "cumsum", "reduce_window_sum", "psum", "reduce_prod",
                        "cumprod", "integer_pow", "exp", "exp2", "expm1", "exp2m1", "cosh",
                        "sinh", "pad", "reduce", "reduce_window", "fft", "custom_linear_solve",
                        "cummax", "cummin"})


def propose(c: Culprit, p) -> list[Candidate]:
  return [_rescale(p.function, p.argnums, k) for k in SCALES] if overflowed(c) else []


def _rescale(function: str, argnums: tuple, k: int) -> Candidate:
  nums = "" if argnums == (0,) else f", argnums={argnums[0] if len(argnums) == 1 else argnums}"
  code = (f"scale = 2.0 ** -{k}   # a power of two: exact; the cotangents stay in range\n"
          f"grads = jax.grad(lambda *a: {function}(*a) * scale{nums})(*args)\n"
          "grads = jax.tree_util.tree_map(lambda g: g / scale, grads)")
  return Candidate(f"Scale the loss by 2^-{k} while differentiating (the gradient "
                   "explodes in range)", code,
                   "the backward pass is linear in its output cotangent: every cotangent is "
                   f"scaled by 2^-{k} exactly, none overflows, and dividing the gradient by the "
                   "same power of two restores its values", scale=2.0 ** -k)
