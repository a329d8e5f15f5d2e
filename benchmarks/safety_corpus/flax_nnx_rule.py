"""A flax nnx model whose custom_vjp layer norm returns the scale's cotangent as float16 (JAX lets it through)."""
import jax
import jax.numpy as jnp
from flax import nnx


@jax.custom_vjp
def rms_norm(x, scale):
  return x * jax.lax.rsqrt((x ** 2).mean(-1, keepdims=True) + 1e-6) * scale


def fwd(x, scale):
  r = jax.lax.rsqrt((x ** 2).mean(-1, keepdims=True) + 1e-6)
  return x * r * scale, (x, r, scale)


def bwd(res, g):
  x, r, scale = res
  n = x * r
  gn = g * scale
  gx = r * (gn - n * (gn * n).mean(-1, keepdims=True))
  return gx, (g * n).sum(0).astype(jnp.float16)   # the bug: float16


rms_norm.defvjp(fwd, bwd)


class Net(nnx.Module):
  def __init__(self, rngs):
    self.lin = nnx.Linear(6, 6, rngs=rngs)
    self.scale = nnx.Param(jnp.ones(6))

  def __call__(self, x):
    return rms_norm(self.lin(x), self.scale.value)


model = Net(nnx.Rngs(0))
x = jnp.ones((3, 6))
print(nnx.grad(lambda m: m(x).sum())(model))
