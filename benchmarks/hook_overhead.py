"""Hook overhead, as ratios measured in one process: hook on vs off.

Prints eager ``jax.grad`` time of a 12-layer stack (one custom_vjp per layer)
and a cached ``jit(grad)`` call, each as on/off: the median over rounds of each
round's ratio (a minimum over rounds hides the rounds the hook is slow in).
Also, eager, a ``jax.linear_transpose`` function's call and the gradients of
``lax.custom_root`` and ``lax.custom_linear_solve``, whose checks are watched at their
raise statements only (``capture/sites/linear_maps.py``). Targets: eager <= 1.01, cached 1.00.
(Un)install clears JAX's caches, so each jit round compiles twice outside the timing: that
line has fewer rounds, to finish in minutes.
"""
from __future__ import annotations

import statistics
import time

import jax

import jupyter_vjpviz as vv
from graph_scale import inputs, model


def median_time(fn, repeats: int, clock=time.perf_counter) -> float:
  times = []
  for _ in range(repeats):
    t0 = clock()
    jax.block_until_ready(fn())
    times.append(clock() - t0)
  return statistics.median(times)


def measure(fn, repeats: int, rounds: int = 9, clock=time.perf_counter,
            warm: int = 1) -> tuple[float, float, float]:
  """Interleaved off/on rounds, so drift on a shared machine hits both alike:
  median off and on times, and the median of the per-round on/off ratios. ``clock``:
  ``time.process_time`` for this process's CPU time (steadier beside a neighbour's load);
  ``warm``: calls after each toggle outside the timing ((un)install clears JAX's caches)."""
  off, on = [], []
  for _ in range(rounds):
    for toggle, times in ((vv.uninstall, off), (vv.install, on)):
      toggle()
      for _ in range(warm):
        fn()
      times.append(median_time(fn, repeats, clock))
  vv.uninstall()
  ratios = [b / a for a, b in zip(off, on)]
  return statistics.median(off), statistics.median(on), statistics.median(ratios)


def _linear_maps():
  """A linear transpose's call, and gradients through custom_root and custom_linear_solve."""
  jnp = jax.numpy
  a = jnp.array([[2., 1., 0.], [1., 3., 0.], [0., 0., 4.]])
  f_t = jax.linear_transpose(lambda x: a @ x, jnp.ones(3))

  def newton(f, x0):
    for _ in range(5):
      x0 = x0 - f(x0) / (2 * x0)
    return x0

  root = jax.grad(lambda y: jax.lax.custom_root(
      lambda x: x * x - y, jnp.ones(3), newton, lambda g, t: t / g(jnp.ones_like(t))).sum())
  solve = jax.grad(lambda b: jax.lax.custom_linear_solve(
      lambda x: a @ x, b, lambda mv, b: jnp.linalg.solve(a, b), symmetric=True).sum())
  return (("linear_transpose f_t(ct)", lambda: f_t(jnp.ones(3)), 200, 9),
          ("eager grad of custom_root", lambda: root(jnp.full(3, 4.)), 10, 9),
          ("eager grad, custom_linear_solve", lambda: solve(jnp.ones(3)), 10, 9))


def main():
  loss = model(12, bad_layer=None)
  params, x = inputs(12)
  grad = jax.grad(loss)
  jitted = jax.jit(grad)
  for label, fn, repeats, rounds in (
      ("eager jax.grad, 12 layers", lambda: grad(params, x), 5, 9),
      ("cached jit(grad) call", lambda: jitted(params, x), 30, 5), *_linear_maps()):
    t0 = time.perf_counter()
    fn()
    off, on, ratio = measure(fn, repeats, rounds)
    print(f"{label:32s} off {off * 1e3:8.2f} ms   on {on * 1e3:8.2f} ms   "
          f"median per-round ratio {ratio:.3f} ({rounds} rounds, {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
  main()
