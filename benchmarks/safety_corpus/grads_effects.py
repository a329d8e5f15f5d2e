"""A user asks for their gradient's health (vv.grads; plain: jax.grad) of a recurrent
loss whose step prints with jax.debug.print and which logs its value to metrics.log
through an io_callback. The backward pass differentiates the scan again (its body's
forward with it): vjpviz's run, which must print and log nothing more."""
import jax
import jax.numpy as jnp
from jax.experimental import io_callback

from _mode import HOOKED


def log_metric(v):
  with open("metrics.log", "a") as f:
    f.write(f"loss={float(v):.4f}\n")


def loss(w, xs):
  def step(h, x):
    jax.debug.print("step input {x}", x=x)
    return jnp.tanh(h * w + x), None
  l = jax.lax.scan(step, jnp.zeros(2), xs)[0].sum()
  io_callback(log_metric, None, jax.lax.stop_gradient(l), ordered=True)
  return l


w, xs = jnp.ones(2), jnp.arange(3.)
if HOOKED:
  import jupyter_vjpviz as vv
  vv.grads(loss, w, xs)
else:
  jax.grad(loss)(w, xs)
