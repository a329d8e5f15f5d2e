"""No error: a correct rule in a 5-step training loop that prints its losses and saves a
checkpoint file."""
import jax
import numpy as np


@jax.custom_vjp
def gelu(x):
  return x * jax.nn.sigmoid(1.702 * x)


def fwd(x):
  return gelu(x), x


def bwd(x, g):
  s = jax.nn.sigmoid(1.702 * x)
  return (g * (s + 1.702 * x * s * (1 - s)),)


gelu.defvjp(fwd, bwd)


def loss(p, x, y):
  return ((gelu(x @ p["w1"]) @ p["w2"] - y) ** 2).mean()


k = jax.random.split(jax.random.key(0), 4)
p = {"w1": jax.random.normal(k[0], (8, 16)) * 0.3, "w2": jax.random.normal(k[1], (16, 1)) * 0.3}
x, y = jax.random.normal(k[2], (32, 8)), jax.random.normal(k[3], (32, 1))
step = jax.jit(jax.value_and_grad(loss))
for i in range(5):
  l, g = step(p, x, y)
  p = jax.tree.map(lambda a, b: a - 0.1 * b, p, g)
  print(f"step {i} loss {float(l):.6f}")
np.save("checkpoint.npy", np.asarray(p["w1"]))
