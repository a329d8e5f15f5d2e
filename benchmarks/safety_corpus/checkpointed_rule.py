"""jax.checkpoint around a block with a rule whose bwd returns the wrong dtype (int32), which JAX lets through."""
import jax
import jax.numpy as jnp


@jax.custom_vjp
def round_ste(x):
  return jnp.round(x)


round_ste.defvjp(lambda x: (jnp.round(x), None),
                 lambda _, g: (g.astype(jnp.int32),))   # the bug: int32, the gradient silently zero


@jax.checkpoint
def block(w, x):
  return jnp.sin(round_ste(x @ w) * 0.1)


w, x = jnp.ones((4, 4)), jnp.arange(8.).reshape(2, 4)
print(jax.grad(lambda w: block(w, x).sum())(w))
