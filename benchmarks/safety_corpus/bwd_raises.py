"""A bwd rule that raises a Python error of its own (indexing a residual tuple past its end)."""
import jax
import jax.numpy as jnp


@jax.custom_vjp
def mul(x, y):
  return x * y


def fwd(x, y):
  return x * y, (y,)


def bwd(res, g):
  return res[1] * g, res[0] * g   # the bug: the residuals are (y,), not (x, y)


mul.defvjp(fwd, bwd)
print(jax.grad(lambda x, y: mul(x, y).sum())(jnp.ones(3), jnp.ones(3)))
