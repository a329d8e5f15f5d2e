"""vv.nans (plain: jax.grad) of a rule whose bwd runs a long while loop in which a term
goes Inf late (a decaying value underflows to 0): compiled, the user's loop takes a
fraction of a second; stepped on the host to find the iteration, minutes. The step
search stops at the budget and says "not judged: time budget"."""
import jax
import jax.numpy as jnp

from _mode import HOOKED
from _size import pick

N = pick(400_000, 150_000)


@jax.custom_vjp
def f(x):
  return jnp.sin(x)


def bwd(x, g):
  def body(c):
    i, v, w = c
    return i + 1, v * 0.999, w + 1. / v
  _, _, w = jax.lax.while_loop(lambda c: c[0] < N, body, (0, jnp.ones_like(g), jnp.zeros_like(g)))
  return (g * jnp.cos(x) + 0. * w,)


f.defvjp(lambda x: (f(x), x), bwd)
loss = lambda x: f(x).sum()
x = jnp.ones(3)
if HOOKED:
  import jupyter_vjpviz as vv
  vv.nans(loss, x)
else:
  jax.grad(loss)(x)
