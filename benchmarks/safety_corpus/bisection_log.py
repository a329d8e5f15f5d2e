"""Bisection on log(x) = c by while_loop until the bracket is narrow: a rule whose primal
diverges off its domain (negative inputs give NaN brackets that never narrow). The bwd
returns a cotangent of the wrong shape."""
import jax
import jax.numpy as jnp


@jax.custom_vjp
def inv_log(c):
  def cond(s):
    lo, hi = s
    return jnp.any(hi - lo > 1e-4)

  def body(s):
    lo, hi = s
    mid = 0.5 * (lo + hi)
    below = jnp.log(mid) < c
    return jnp.where(below, mid, lo), jnp.where(below, hi, mid)

  lo, hi = jax.lax.while_loop(cond, body, (jnp.sqrt(c) * 0 + 1e-3, jnp.exp(c) + 1.0 + jnp.sqrt(c)))
  return 0.5 * (lo + hi)


def inv_log_fwd(c):
  y = inv_log(c)
  return y, y


def inv_log_bwd(y, g):
  return ((g * y)[None],)   # the bug: an extra axis


inv_log.defvjp(inv_log_fwd, inv_log_bwd)
c = jnp.array([0.5, 1.0, 2.0])
print("exp(c) ~", inv_log(c))
print(jax.grad(lambda c: inv_log(c).sum())(c))
