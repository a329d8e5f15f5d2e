"""Transformer-like stacks in plain jax.numpy with one custom_vjp GELU per layer.

Shared by the benchmarks: d_model=256, 8 heads, T=64, B=2, FFN=1024.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

D, HEADS, T, B, FFN = 256, 8, 64, 2, 1024


def make_gelu(bad: bool = False):
  @jax.custom_vjp
  def gelu(x):
    return x * jax.nn.sigmoid(1.702 * x)

  def gelu_fwd(x):
    return gelu(x), x

  def gelu_bwd(x, g):
    s = jax.nn.sigmoid(1.702 * x)
    dx = g * (s + 1.702 * x * s * (1 - s))
    return (dx[..., :-1],) if bad else (dx,)
  gelu.defvjp(gelu_fwd, gelu_bwd)
  return gelu


def init(n_layers: int, key=jax.random.PRNGKey(0)):
  def layer(k):
    k1, k2, k3, k4 = jax.random.split(k, 4)
    s = 0.02
    return {"qkv": jax.random.normal(k1, (D, 3 * D)) * s, "o": jax.random.normal(k2, (D, D)) * s,
            "w1": jax.random.normal(k3, (D, FFN)) * s, "w2": jax.random.normal(k4, (FFN, D)) * s}
  return [layer(k) for k in jax.random.split(key, n_layers)]


def make_model(n_layers: int, bad_layer: int | None = None):
  good, bad = make_gelu(), make_gelu(bad=True)

  def block(p, x, gelu):
    q, k, v = jnp.split(x @ p["qkv"], 3, axis=-1)
    heads = lambda t: t.reshape(B, T, HEADS, D // HEADS).transpose(0, 2, 1, 3)
    att = jax.nn.softmax(heads(q) @ heads(k).transpose(0, 1, 3, 2) / (D // HEADS) ** 0.5)
    x = x + (att @ heads(v)).transpose(0, 2, 1, 3).reshape(B, T, D) @ p["o"]
    return x + gelu(x @ p["w1"]) @ p["w2"]

  def loss(params, x):
    for i, p in enumerate(params):
      with jax.named_scope(f"layer{i}"):
        x = block(p, x, bad if i == bad_layer else good)
    return (x ** 2).mean()
  return loss


def batch():
  return jax.random.normal(jax.random.PRNGKey(1), (B, T, D))
