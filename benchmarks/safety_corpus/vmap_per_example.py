"""Per-example gradients (vmap of grad) through a rule whose bwd drops the batch-free
parameter's shape (returns w's cotangent flattened)."""
import jax
import jax.numpy as jnp


@jax.custom_vjp
def dense(w, x):
  return jnp.tanh(x @ w)


def fwd(w, x):
  y = dense(w, x)
  return y, (w, x, y)


def bwd(res, g):
  w, x, y = res
  d = g * (1 - y ** 2)
  return jnp.outer(x, d).ravel(), w @ d   # the bug: w's cotangent flattened


dense.defvjp(fwd, bwd)
w, xs = jnp.ones((4, 2)) * 0.1, jnp.ones((8, 4))
print(jax.vmap(jax.grad(lambda w, x: dense(w, x).sum()), (None, 0))(w, xs).shape)
