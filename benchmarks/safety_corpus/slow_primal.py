"""A primal that costs about a second (40 fixed iterations of 384x384 matmuls; fewer in
quick mode) under a rule whose bwd returns the wrong shape."""
import jax
import jax.numpy as jnp

from _size import pick

STEPS, D = pick(40, 10), pick(384, 128)


@jax.custom_vjp
def propagate(w, x):
  def body(i, x):
    return jnp.tanh(w @ x)
  return jax.lax.fori_loop(0, STEPS, body, x)


def fwd(w, x):
  y = propagate(w, x)
  return y, (w, y)


def bwd(res, g):
  w, y = res
  return g @ y.T, (w.T @ g)[:1]   # the bug: x's cotangent truncated


propagate.defvjp(fwd, bwd)
k1, k2 = jax.random.split(jax.random.key(1))
w = jax.random.normal(k1, (D, D)) / D ** 0.5
x = jax.random.normal(k2, (D, D))
print(jax.grad(lambda w, x: propagate(w, x).sum(), argnums=(0, 1))(w, x)[0].shape)
