"""A primal with jax.debug.print; the rule's bwd returns a transposed cotangent."""
import jax
import jax.numpy as jnp


@jax.custom_vjp
def scale_rows(x, w):
  jax.debug.print("scale_rows sees |x| = {n}", n=jnp.linalg.norm(x))
  return x * w[:, None]


def fwd(x, w):
  return scale_rows(x, w), (x, w)


def bwd(res, g):
  x, w = res
  return (g * w[:, None]).T, (g * x).sum(1)   # the bug: x's cotangent transposed


scale_rows.defvjp(fwd, bwd)
x, w = jnp.ones((3, 5)), jnp.arange(3.)
print(jax.grad(lambda x, w: scale_rows(x, w).sum())(x, w))
