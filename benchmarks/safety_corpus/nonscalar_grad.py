"""jax.grad of a function with a vector output: JAX's TypeError, no rule at fault."""
import jax
import jax.numpy as jnp


@jax.custom_vjp
def f(x):
  return jnp.sin(x)


f.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x),))
print(jax.grad(f)(jnp.ones(3)))
