"""An equinox MLP with an eqx.filter_custom_vjp activation whose bwd returns a wrong shape."""
import equinox as eqx
import jax
import jax.numpy as jnp


@eqx.filter_custom_vjp
def leaky(x, slope):
  return jnp.where(x > 0, x, slope * x)


@leaky.def_fwd
def leaky_fwd(perturbed, x, slope):
  return leaky(x, slope), x


@leaky.def_bwd
def leaky_bwd(x, g, perturbed, xx, slope):
  return jnp.where(x > 0, g, slope * g).sum(0)   # the bug: summed over the batch


class MLP(eqx.Module):
  a: eqx.nn.Linear
  b: eqx.nn.Linear

  def __init__(self, key):
    k1, k2 = jax.random.split(key)
    self.a, self.b = eqx.nn.Linear(4, 8, key=k1), eqx.nn.Linear(8, 1, key=k2)

  def __call__(self, x):
    return jax.vmap(self.b)(leaky(jax.vmap(self.a)(x), 0.1))


model = MLP(jax.random.key(0))
x = jnp.ones((5, 4))
print(eqx.filter_grad(lambda m: m(x).sum())(model))
