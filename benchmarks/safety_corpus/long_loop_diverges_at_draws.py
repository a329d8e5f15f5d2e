"""A rule whose primal runs a while loop that needs thousands of iterations at the user's
values (a slowly converging series) and never ends at the oracle's random draws (it stops
only once the term is small, which it never is where |x| >= 1); its bwd returns the wrong
shape. The draws' loops are capped at a multiple of what the user's run needed."""
import jax
import jax.numpy as jnp


@jax.custom_vjp
def series(x):
  def cond(c):
    _, term, _ = c
    return jnp.max(jnp.abs(term)) > 1e-6

  def body(c):
    i, term, s = c
    return i + 1, term * x * (i / (i + 1.)), s + term
  _, _, s = jax.lax.while_loop(cond, body, (1., x, jnp.zeros_like(x)))
  return s   # -log(1 - x), term by term


def fwd(x):
  return series(x), x


def bwd(x, g):
  return ((g / (1 - x)).sum(),)   # the bug: summed to a scalar


series.defvjp(fwd, bwd)
x = jnp.full(4, 0.998)
print("series:", series(x)[0])
print(jax.grad(lambda x: series(x).sum())(x))
