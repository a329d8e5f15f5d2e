"""A sweep that catches each failing configuration's error, prints it and moves on."""
import jax
import jax.numpy as jnp


@jax.custom_vjp
def norm_scale(x, s):
  return x / jnp.linalg.norm(x) * s


def fwd(x, s):
  return norm_scale(x, s), (x, s)


def bwd(res, g):
  x, s = res
  n = jnp.linalg.norm(x)
  gx = (g - x * (g @ x) / n ** 2) * s / n
  return gx, (g @ x / n)[None]   # the bug: s's cotangent gets an extra axis


norm_scale.defvjp(fwd, bwd)
for n in (3, 5, 7):
  try:
    jax.grad(lambda x: norm_scale(x, 2.0).sum())(jnp.arange(1., n + 1))
  except Exception as e:
    print(n, type(e).__name__, str(e).splitlines()[0])
print("sweep done")
