"""A training step whose loss appends a metric to metrics.log through io_callback and
prints it with jax.debug.print; the rule's bwd returns a cotangent of the wrong shape."""
import jax
import jax.numpy as jnp
from jax.experimental import io_callback


def log_metric(v):
  with open("metrics.log", "a") as f:
    f.write(f"loss={float(v):.4f}\n")
  return v


@jax.custom_vjp
def huber(r):
  return jnp.where(jnp.abs(r) < 1, 0.5 * r ** 2, jnp.abs(r) - 0.5)


def fwd(r):
  return huber(r), r


def bwd(r, g):
  return (jnp.clip(r, -1, 1).sum() * g,)   # the bug: summed to a scalar


huber.defvjp(fwd, bwd)


def loss(w, x, y):
  l = huber(x @ w - y).mean()
  io_callback(log_metric, jax.ShapeDtypeStruct((), jnp.float32), l, ordered=True)
  jax.debug.print("loss {l}", l=l)
  return l


w, x, y = jnp.ones(4), jnp.ones((6, 4)), jnp.zeros(6)
jax.jit(jax.grad(loss))(w, x, y)
