"""The programs ``speed.py`` times: a flax nnx transformer (healthy, or with a NaN gradient
in one block's MLP) and a few small NaN programs, each a fresh function per call so that
nothing about it is in JAX's caches."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def nnx_transformer(blocks: int, d_model: int = 64, ffn: int = 256, heads: int = 4,
                    nan_block: int | None = None):
  """A pre-norm transformer of ``blocks`` blocks (610k parameters at 12 blocks, the issue's
  model); the MLP of block ``nan_block`` is ``sqrt(h * (h > 0))``: a finite loss whose
  gradient is NaN wherever the mask makes an exact zero (0 x sqrt's infinite derivative)."""
  from flax import nnx

  class Block(nnx.Module):
    def __init__(self, nan: bool, rngs):
      self.ln1, self.ln2 = nnx.LayerNorm(d_model, rngs=rngs), nnx.LayerNorm(d_model, rngs=rngs)
      self.attn = nnx.MultiHeadAttention(heads, d_model, decode=False, rngs=rngs)
      self.up, self.down = nnx.Linear(d_model, ffn, rngs=rngs), nnx.Linear(ffn, d_model, rngs=rngs)
      self.nan = nan

    def __call__(self, x):
      y = self.ln1(x)
      x = x + self.attn(y, y, y)
      h = self.up(self.ln2(x))
      h = jnp.sqrt(h * (h > 0)) if self.nan else jax.nn.gelu(h)
      return x + self.down(h)

  class Model(nnx.Module):
    def __init__(self, rngs):
      self.blocks = nnx.List([Block(i == nan_block, rngs) for i in range(blocks)])

    def __call__(self, x):
      for block in self.blocks:
        x = block(x)
      return x

  return Model(nnx.Rngs(0)), jax.random.normal(jax.random.key(1), (2, 16, d_model))


def nnx_loss():
  """A fresh loss over an nnx model."""
  def loss(model, x):
    return (model(x) ** 2).mean()
  return loss


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
