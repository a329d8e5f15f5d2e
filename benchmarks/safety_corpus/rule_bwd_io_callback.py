"""A rule whose own bwd logs to grad.log through an io_callback and prints with
jax.debug.print (a user instrumenting their gradient); the bwd returns a cotangent of the
wrong shape. The oracle and the fix search run that bwd again: they must neither log nor
print."""
import jax
import jax.numpy as jnp
from jax.experimental import io_callback


def log_grad(g):
  with open("grad.log", "a") as f:
    f.write(f"|g|={float(g):.4f}\n")


@jax.custom_vjp
def softclip(x):
  return jnp.tanh(x)


def fwd(x):
  y = jnp.tanh(x)
  return y, y


def bwd(y, g):
  io_callback(log_grad, None, jnp.abs(g).sum(), ordered=True)
  jax.debug.print("bwd saw {n}", n=jnp.abs(g).sum())
  return ((g * (1 - y ** 2)).sum(),)   # the bug: summed to a scalar


softclip.defvjp(fwd, bwd)
x = jnp.linspace(-2., 2., 8)
print(jax.grad(lambda x: softclip(x).sum())(x))
