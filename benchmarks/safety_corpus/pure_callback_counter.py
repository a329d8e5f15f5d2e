"""An impure pure_callback (a numpy kernel that also counts its calls) inside a rule's
primal; the bwd returns float64 where float32 is expected."""
import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)
count = [0]


def np_tanh(x):
  count[0] += 1
  return np.tanh(x)


@jax.custom_vjp
def host_tanh(x):
  return jax.pure_callback(np_tanh, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


def fwd(x):
  y = host_tanh(x)
  return y, y


def bwd(y, g):
  return ((g * (1 - y ** 2)).astype(jnp.float64),)   # the bug: float64 (JAX lets it through)


host_tanh.defvjp(fwd, bwd)
try:
  print(jax.grad(lambda x: host_tanh(x).sum())(jnp.linspace(-2, 2, 5, dtype=jnp.float32)))
finally:
  print("host kernel ran", count[0], "times")
