"""``%%vjpviz --nans`` on a jitted training step (its watch, ``nans.gradients``, as the cell
magic opens it; plain: the step alone) whose loss appends to metrics.log through an
io_callback and counts its calls with jax.debug.callback: the step's gradient is NaN
(sqrt at 0). vjpviz runs the step again, eagerly, to find the gradient: it must not log
or count again."""
import jax
import jax.numpy as jnp
from jax.experimental import io_callback

from _mode import HOOKED

calls = [0]


def log_metric(v):
  with open("metrics.log", "a") as f:
    f.write(f"loss={float(v):.4f}\n")


def count(_):
  calls[0] += 1


def loss(w, x):
  l = jnp.sqrt(jnp.abs(x @ w)).sum()
  io_callback(log_metric, None, jax.lax.stop_gradient(l), ordered=True)
  jax.debug.callback(count, jax.lax.stop_gradient(l))
  return l


@jax.jit
def step(w, x):
  return w - 0.1 * jax.grad(loss)(w, x)


w, x = jnp.zeros(3), jnp.ones((4, 3))
if HOOKED:
  from jupyter_vjpviz.api.nans import gradients
  with gradients() as watch:
    step(w, x)
  watch.diagnose()
else:
  step(w, x)
print("callbacks:", calls[0])
