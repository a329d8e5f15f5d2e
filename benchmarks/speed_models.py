"""The programs ``speed.py`` times: a flax nnx transformer (healthy, or with a NaN gradient
in one block's MLP) and a few small NaN programs (a fresh function per call, so nothing
about it is in JAX's caches)."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def nnx_transformer(blocks: int, d_model: int = 64, ffn: int = 256, heads: int = 4,
                    nan_block: int | None = None):
  """graph_scale's nnx stack, pre-norm, of ``blocks`` blocks (610k parameters at 12 blocks,
  the issue's model) with gelu MLPs; block ``nan_block``'s is ``sqrt(h * (h > 0))``: a
  finite loss whose gradient is NaN wherever the mask makes an exact zero (0 x sqrt's
  infinite derivative). The model and an input."""
  from graph_scale import nnx_model

  def activation(i):
    return masked_sqrt if i == nan_block else jax.nn.gelu
  model = nnx_model(blocks, None, heads, d_model, ffn, activation=activation)
  return model, jax.random.normal(jax.random.key(1), (2, 16, d_model))


def masked_sqrt(h):
  return jnp.sqrt(h * (h > 0))


def small_nan_programs():
  """(fresh loss, argument) pairs: a few lines each, each with a NaN gradient and a finite
  value, as users write them."""
  x = jnp.array([0.0, 1.0, 4.0, -2.0])

  def norm():
    def loss(x):
      return jnp.sqrt((x * x).sum(0)).sum()
    return loss, jnp.zeros((3, 2))

  def masked_log():
    def loss(x):
      return jnp.where(x > 0, jnp.log(x), 0.0).sum()
    return loss, x

  def masked_sqrt():
    def loss(x):
      return jnp.where(x > 0, jnp.sqrt(x), 0.0).sum()
    return loss, x

  def safe_div():
    def loss(x):
      return jnp.where(x != 0, 1.0 / x, 0.0).sum()
    return loss, x

  def std():
    def loss(x):
      return jnp.std(x * 0.0 + 1.0) + x.sum()
    return loss, x

  return (norm, masked_log, masked_sqrt, safe_div, std)
