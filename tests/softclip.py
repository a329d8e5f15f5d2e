"""The broken rule the kernel, widget, fix and browser tests share.

softclip's bwd returns the cotangent of ``w`` transposed: float32[3,5] for a
float32[5,3] input. ``SOURCE`` is cell text; ``define`` runs it the way IPython
runs a cell (source in linecache, no file on disk) so fixes can read the rule.
"""
import itertools
import linecache

SOURCE = '''import jax, jax.numpy as jnp

@jax.custom_vjp
def softclip(x, w):
    return jnp.tanh(x @ w)

def softclip_fwd(x, w):
    y = jnp.tanh(x @ w)
    return y, (x, w, y)

def softclip_bwd(res, g):
    x, w, y = res
    gy = g * (1 - y**2)
    return gy @ w.T, (x.T @ gy).T

softclip.defvjp(softclip_fwd, softclip_bwd)
'''

GRAD = "jax.grad(lambda x, w: softclip(x, w).sum(), argnums=(0, 1))(x, w)"

_cells = itertools.count()


def define(code: str = SOURCE) -> dict:
  """Run ``code`` as a notebook cell; returns its namespace."""
  name = f"<ipython-input-{next(_cells)}-softclip>"
  linecache.cache[name] = (len(code), None, code.splitlines(keepends=True), name)
  ns: dict = {}
  exec(compile(code, name, "exec"), ns)
  return ns
