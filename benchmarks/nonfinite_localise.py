"""Where a gradient goes NaN, on a ~4k-equation model: vjpviz.nans against jax_debug_nans.

A jitted stack of 160 dense + layer-norm layers (3,844 equations in its body) in
which one layer's activation is ``where(r > 0, sqrt(r), 0)`` of a masked ReLU: the
forward pass is finite, and the gradient is NaN wherever the mask makes ``r`` exactly
0 (0 x the infinite derivative of sqrt). In one process, each pair measured from the
same state:

- one ``jax_debug_nans`` re-run of the gradient (it raises at the first NaN it meets;
  text only). With the user's program in JAX's caches it checks nothing and does not
  raise (JAX 0.12): the warm round then also times it after ``jax.clear_caches()``, as
  a user must run it,
- ``vv.nans``: the same gradient, the search (levels and bodies, only where the
  poison is), the graph, and the first fix that is verified by re-running the gradient,
- of which the search alone (``nonfinite.localise``).

*warm*: as after the user's own NaN gradient (their program compiled; vjpviz's first
use in the process). *cold*: JAX's caches, and vjpviz's traced pullbacks, cleared
before each. Prints the equation count, wall and CPU seconds, and the ratios (wall / CPU)
to the re-run.

    PYTHONPATH=. .venv/bin/python benchmarks/nonfinite_localise.py [layers]
"""
from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp

import jupyter_vjpviz as vv
from jupyter_vjpviz.analysis.values import nonfinite, nonfinite_eval


def model(layers: int, trap: int):
  def layer_norm(h):
    m = h.mean(-1, keepdims=True)
    v = ((h - m) ** 2).mean(-1, keepdims=True)
    return (h - m) / jnp.sqrt(v + 1e-5)

  @jax.jit
  def loss(params, x):
    h = x
    for i, (w, b) in enumerate(params):
      z = layer_norm(h @ w + b)
      r = jax.nn.relu(z) * (jnp.arange(z.shape[-1]) % 4 != 0)   # exact zeros, none below
      h = jnp.where(r > 0, jnp.sqrt(r), 0.0) if i == trap else jnp.tanh(z) + h
    return (h ** 2).mean()
  return loss


def params_of(layers: int, width: int):
  keys = jax.random.split(jax.random.PRNGKey(0), layers)
  return [(jax.random.normal(k, (width, width)) / width ** 0.5, jnp.zeros(width)) for k in keys]


def _timed(fn, cold: bool):
  """(wall seconds, CPU seconds of the process, fn's result); CPU time is steadier on a
  loaded machine."""
  if cold:
    jax.clear_caches()
    nonfinite_eval._PULLBACKS.clear()
  start, cpu = time.perf_counter(), time.process_time()
  out = fn()
  return time.perf_counter() - start, time.process_time() - cpu, out


def debug_nans_rerun(loss, params, x):
  jax.config.update("jax_debug_nans", True)
  try:
    jax.grad(loss)(params, x)
    return "no FloatingPointError"
  except FloatingPointError as e:
    return str(e).splitlines()[0][:90]
  finally:
    jax.config.update("jax_debug_nans", False)


def search_only(loss, params, x):
  jaxpr = jax.make_jaxpr(loss)(params, x)
  leaves = jax.tree_util.tree_leaves((params, x))
  active = [True] * (len(leaves) - 1) + [False]
  return nonfinite.localise(jaxpr, leaves, active, [jnp.ones(())]).culprit


def main(layers: int = 160, width: int = 32) -> None:
  loss, params = model(layers, trap=layers // 3), params_of(layers, width)
  x = jax.random.normal(jax.random.PRNGKey(1), (8, width))
  jaxpr = jax.make_jaxpr(loss)(params, x)
  n = sum(len(e.params["jaxpr"].eqns) for e in jaxpr.eqns if "jaxpr" in e.params)
  print(f"model: {layers} layers, {n:,} equations in the jitted body; trap in layer "
        f"{layers // 3}", flush=True)
  for cold in (False, True):
    grad = jax.grad(loss)(params, x)                  # the user's own NaN gradient
    assert not all(bool(jnp.isfinite(g).all()) for g in jax.tree_util.tree_leaves(grad))
    del grad
    print("cold (caches cleared before each):" if cold else "warm (after the user's gradient):")
    t_debug, c_debug, raised = _timed(lambda: debug_nans_rerun(loss, params, x), cold)
    print(f"  jax_debug_nans re-run:  {t_debug:6.2f} s wall {c_debug:6.2f} s CPU   ({raised})",
          flush=True)
    t_nans, c_nans, d = _timed(lambda: vv.nans(loss, params, x), cold)
    print(f"  vv.nans:                {t_nans:6.2f} s wall {c_nans:6.2f} s CPU   ratio "
          f"{t_nans / t_debug:.2f} / {c_nans / c_debug:.2f}   ({len(d.fixes)} fix verified)",
          flush=True)
    if not cold and not raised.startswith("invalid"):
      # JAX's cached executables skip the check: the user must clear the caches first.
      t_clear, c_clear, raised = _timed(lambda: debug_nans_rerun(loss, params, x), True)
      print(f"  jax_debug_nans re-run, JAX's caches cleared (as it must be to raise): "
            f"{t_clear:6.2f} s wall {c_clear:6.2f} s CPU   ({raised}); vv.nans' ratio to it "
            f"{t_nans / t_clear:.2f} / {c_nans / c_clear:.2f}", flush=True)
    if cold:                       # warm, it would reuse what vv.nans just traced
      t_search, c_search, culprit = _timed(lambda: search_only(loss, params, x), cold)
      print(f"  search alone:           {t_search:6.2f} s wall {c_search:6.2f} s CPU   ratio "
            f"{t_search / t_debug:.2f} / {c_search / c_debug:.2f}   culprit {culprit.node} "
            f"{culprit.eqn.primitive.name} at {culprit.source}", flush=True)
  print(f"  {d.headline}")


if __name__ == "__main__":
  main(*(int(a) for a in sys.argv[1:]))
