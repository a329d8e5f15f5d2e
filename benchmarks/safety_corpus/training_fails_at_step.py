"""A training loop that writes a log line per step; the rule only breaks on step 2 (a
Python-side switch retraces it), so two steps' output and log lines precede the error."""
import jax
import jax.numpy as jnp


def make(broken):
  @jax.custom_vjp
  def act(x):
    return jnp.tanh(x)

  def bwd(y, g):
    d = g * (1 - y ** 2)
    return (d.T if broken else d,)   # the bug, from step 2

  act.defvjp(lambda x: (jnp.tanh(x), jnp.tanh(x)), bwd)
  return act


w, x = jnp.full((3, 4), 0.1), jnp.ones((2, 3))
for step in range(4):
  act = make(broken=step == 2)
  l, g = jax.value_and_grad(lambda w: act(x @ w).sum())(w)
  w = w - 0.01 * g
  with open("train.log", "a") as f:
    f.write(f"{step} {float(l):.5f}\n")
  print("step", step, float(l))
