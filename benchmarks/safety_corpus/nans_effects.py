"""A user asks why their gradient is NaN (vv.nans; plain: jax.grad): the loss prints a
statistic with jax.debug.print and appends it to metrics.log through an io_callback, and
has the where-sqrt trap. The search and the fix's check are vjpviz's runs: they must
print and log nothing more than the user's gradient did."""
import jax
import jax.numpy as jnp
from jax.experimental import io_callback

from _mode import HOOKED


def log_metric(v):
  with open("metrics.log", "a") as f:
    f.write(f"mass={float(v):.4f}\n")


def loss(x):
  jax.debug.print("mass {m}", m=x.sum())
  io_callback(log_metric, None, jax.lax.stop_gradient(x).sum(), ordered=True)
  return jnp.where(x > 0, jnp.sqrt(x), 0.).sum()


x = jnp.array([0., 1., 4., 9.])
if HOOKED:
  import jupyter_vjpviz as vv
  vv.nans(loss, x)
else:
  jax.grad(loss)(x)
