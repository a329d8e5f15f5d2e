"""vv.watch's overhead on three training loops: optax with equinox, flax linen, flax nnx.

Each loop trains a 3-hidden-layer MLP of ``--width`` on a batch of 256 with adam: the
equinox step under ``eqx.filter_jit``, the linen step under ``jax.jit``, the nnx step under
``nnx.jit`` with a live model and an ``nnx.Optimizer`` updated in place. Per round, the
step is timed unwrapped then wrapped by ``vv.watch`` (``--steps`` calls each, in the same
process, the record read once per round as a user would); the table gives the median
step times and the median of the per-round ratios (issue 29's target: <= 1.05); beside
them the watched step's compiled computation called alone (what the per-leaf norms cost on
the device, apart from the recording's host work).

    PYTHONPATH=$PWD python benchmarks/watch_overhead.py [--width 256 4096] [--rounds 7]

``--flow``: the backward flow's cost instead (``vv.watch(step, flow=True)``, issue 49's
target <= 1.05x the unwrapped step): the step unwrapped, watched, and watched with flow.
"""
from __future__ import annotations

import argparse
import functools
import statistics
import time

import jax
import jax.numpy as jnp

from jupyter_vjpviz.api.watch import watch

KEY = jax.random.PRNGKey(0)
BATCH, IN, OUT = 256, 64, 8


def _data():
  return jax.random.normal(KEY, (BATCH, IN)), jnp.zeros((BATCH, OUT))


def equinox_loop(width: int):
  """(step, run): ``run(step)`` takes one training step and returns its loss."""
  import equinox as eqx
  import optax
  x, y = _data()
  model = eqx.nn.MLP(IN, OUT, width, 3, key=KEY)
  opt = optax.adam(1e-3)
  carry = [model, opt.init(eqx.filter(model, eqx.is_array))]

  @eqx.filter_jit
  def step(model, state):
    loss, g = eqx.filter_value_and_grad(lambda m: ((jax.vmap(m)(x) - y) ** 2).mean())(model)
    updates, state = opt.update(g, state, model)
    return eqx.apply_updates(model, updates), state, loss

  return step, _carrying(carry)


def _carrying(carry: list):
  """A runner of a functional step ``(params, state) -> (params, state, loss)``: each call
  carries the new params and optimizer state into the next (``run.carry``: them now)."""
  def run(step):
    carry[0], carry[1], loss = step(*carry)
    return loss
  run.carry = carry
  return run


def linen_loop(width: int):
  import flax.linen as nn
  import optax
  x, y = _data()

  class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
      for _ in range(3):
        x = nn.relu(nn.Dense(width)(x))
      return nn.Dense(OUT)(x)
  net, opt = MLP(), optax.adam(1e-3)
  params = net.init(KEY, x)
  carry = [params, opt.init(params)]

  @jax.jit
  def step(params, state):
    loss, g = jax.value_and_grad(lambda p: ((net.apply(p, x) - y) ** 2).mean())(params)
    updates, state = opt.update(g, state, params)
    return optax.apply_updates(params, updates), state, loss

  return step, _carrying(carry)


def nnx_loop(width: int):
  import optax
  from flax import nnx
  x, y = _data()

  class MLP(nnx.Module):
    def __init__(self, rngs):
      self.layers = nnx.List([nnx.Linear(IN if i == 0 else width, width, rngs=rngs)
                              for i in range(3)])
      self.out = nnx.Linear(width, OUT, rngs=rngs)

    def __call__(self, x):
      for layer in self.layers:
        x = nnx.relu(layer(x))
      return self.out(x)
  model = MLP(nnx.Rngs(0))
  optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

  @nnx.jit
  def step(model, optimizer, x, y):
    loss, g = nnx.value_and_grad(lambda m: ((m(x) - y) ** 2).mean())(model)
    optimizer.update(model, g)
    return loss

  def run(step):
    return step(model, optimizer, x, y)
  run.carry = [model, optimizer]
  return step, run


LOOPS = {"equinox": equinox_loop, "linen": linen_loop, "nnx": nnx_loop}


CLOCK = time.perf_counter
"""``--clock process``: this process's CPU time instead (every thread's), which other
processes on a shared machine disturb far less than the wall clock."""


def _seconds_per_step(step, run, n: int) -> float:
  t0 = CLOCK()
  for _ in range(n):
    loss = run(step)
  jax.block_until_ready(loss)
  return (CLOCK() - t0) / n


def overhead(name: str, width: int, rounds: int, steps: int) -> dict[str, float]:
  """Median seconds per step: ``plain``, ``watched``, and ``compiled`` (the watched step's
  compiled computation alone, nothing recorded: its norms and jit dispatch, without the
  recording's host work); ``ratio`` and ``compiled_ratio``: medians of per-round ratios."""
  step, run = LOOPS[name](width)
  watched = watch(step)
  compiled = lambda *args, **kwargs: watched.compiled_call(args, kwargs)[0]
  sides = {"plain": step, "watched": watched, "compiled": compiled}
  times: dict[str, list[float]] = {side: [] for side in sides}
  for fn in sides.values():
    _seconds_per_step(fn, run, 3)   # compiled outside the rounds
  for _ in range(rounds):
    for side, fn in sides.items():
      times[side].append(_seconds_per_step(fn, run, steps))
    _ = watched.steps   # what a user reading the record pays, once per round
  found = {side: statistics.median(t) for side, t in times.items()}
  for side in ("watched", "compiled"):
    ratios = (b / a for a, b in zip(times["plain"], times[side]))
    found["ratio" if side == "watched" else "compiled_ratio"] = statistics.median(ratios)
  return found


def flow_overhead(name: str, width: int, rounds: int, steps: int) -> dict[str, float]:
  """Median seconds per step of the unwrapped step (``plain``), watched with the flow off
  (``off``) and on (``on``: each block's output cotangent reduced in the step), rounds
  interleaved; ``ratio_off`` and ``ratio_on``: medians of the per-round ratios to ``plain``."""
  step, run = LOOPS[name](width)
  sides = {"plain": step, "off": watch(step), "on": watch(step, flow=True)}
  times: dict[str, list[float]] = {}
  for side, fn in sides.items():
    _seconds_per_step(fn, run, 3)   # compiled outside the rounds
    times[side] = []
  for _ in range(rounds):
    for side, fn in sides.items():
      times[side].append(_seconds_per_step(fn, run, steps))
    _ = sides["on"].flow()   # what a user reading the record pays, once per round
  ratio = lambda side: statistics.median(b / a for a, b in zip(times["plain"], times[side]))
  return {**{side: statistics.median(t) for side, t in times.items()},
          "ratio_off": ratio("off"), "ratio_on": ratio("on")}


def _kernels(hlo: str) -> int:
  """The kernels a compiled step launches: its entry computation's fusions and
  conditionals (XLA:CPU runs each as one thunk; a tap's few reductions are a few)."""
  entry = hlo[hlo.index("ENTRY"):]
  return sum(entry.count(f" {op}(") for op in ("fusion", "conditional", "custom-call", "while"))


def flow_cost(name: str, width: int) -> dict[str, float] | None:
  """XLA's own cost model of the compiled step (flops, bytes accessed), watched with the
  flow off and on, as ratios to the unwrapped step, and the kernels each launches
  (``kernels_plain``, ``_off``, ``_on``): what the taps add, free of the machine's load.
  Functional loops only (equinox, linen: their carry is arrays); None for nnx (its
  modules are updated in place)."""
  step, run = LOOPS[name](width)
  if name == "nnx":
    return None
  compiled = lambda w: (lambda *a: w.compiled_call(a, {})[:2])   # the outputs and the row
  sides = {"plain": step, "off": compiled(watch(step)), "on": compiled(watch(step, flow=True))}
  flat, tree = jax.tree_util.tree_flatten(run.carry)
  at = [k for k, x in enumerate(flat) if isinstance(x, jax.Array)]

  def arrays_only(fn, *arrays):   # an equinox model's functions held as they are
    leaves = list(flat)
    for k, x in zip(at, arrays):
      leaves[k] = x
    out = fn(*jax.tree_util.tree_unflatten(tree, leaves))
    return [x for x in jax.tree_util.tree_leaves(out) if isinstance(x, jax.Array)]
  costs = {}
  for side, fn in sides.items():
    lowered = jax.jit(functools.partial(arrays_only, fn)).lower(*(flat[k] for k in at))
    compiled = lowered.compile()
    found = compiled.cost_analysis()
    found = found[0] if isinstance(found, list) else found
    costs[side] = (found["flops"], found["bytes accessed"], _kernels(compiled.as_text()))
  return {**{f"{what}_{side}": costs[side][k] / costs["plain"][k]
             for k, what in enumerate(("flops", "bytes")) for side in ("off", "on")},
          **{f"kernels_{side}": costs[side][2] for side in sides}}


FLOW_COLUMNS = (("step ms", "plain", 1e3), ("flow off ms", "off", 1e3), ("ratio", "ratio_off", 1),
                ("flow on ms", "on", 1e3), ("ratio", "ratio_on", 1))


def _flow_table(args) -> None:
  print(f"{'loop':<10} {'width':>6} " + " ".join(f"{head:>11}" for head, _, _ in FLOW_COLUMNS))
  for width, name in ((w, n) for w in args.width for n in args.loops):
    t = flow_overhead(name, width, args.rounds, args.steps)
    print(f"{name:<10} {width:>6} " + " ".join(
        f"{t[key] * scale:11.3f}" for _, key, scale in FLOW_COLUMNS), flush=True)
  print("XLA's cost model, ratio to the unwrapped step (flops off/on, bytes accessed off/on),"
        " and the kernels the step launches (unwrapped/off/on):")
  for width, name in ((w, n) for w in args.width for n in args.loops):
    c = flow_cost(name, width)
    if c is not None:
      print(f"{name:<10} {width:>6} flops {c['flops_off']:.3f} / {c['flops_on']:.3f}   "
            f"bytes {c['bytes_off']:.3f} / {c['bytes_on']:.3f}   kernels "
            f"{c['kernels_plain']}/{c['kernels_off']}/{c['kernels_on']}", flush=True)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--width", type=int, nargs="+", default=[256])
  parser.add_argument("--rounds", type=int, default=7)
  parser.add_argument("--steps", type=int, default=30, help="steps per round and side")
  parser.add_argument("--loops", nargs="+", choices=list(LOOPS), default=list(LOOPS))
  parser.add_argument("--flow", action="store_true",
                      help="the backward flow's table instead: flow off vs on vs unwrapped")
  parser.add_argument("--clock", choices=["wall", "process"], default="wall",
                      help="time steps by the wall clock, or by this process's CPU time")
  args = parser.parse_args(argv)
  global CLOCK
  CLOCK = time.process_time if args.clock == "process" else time.perf_counter
  print(f"{jax.devices()[0].platform}: median of {args.rounds} rounds x {args.steps} steps, "
        f"{args.clock} clock")
  if args.flow:
    return _flow_table(args)
  print(f"{'loop':<10} {'width':>6} {'step ms':>8} {'watched ms':>11} {'ratio':>6} "
        f"{'compiled ms':>12} {'ratio':>6}")
  for width in args.width:
    for name in args.loops:
      t = overhead(name, width, args.rounds, args.steps)
      print(f"{name:<10} {width:>6} {t['plain'] * 1e3:8.2f} {t['watched'] * 1e3:11.2f} "
            f"{t['ratio']:6.3f} {t['compiled'] * 1e3:12.2f} {t['compiled_ratio']:6.3f}",
            flush=True)


if __name__ == "__main__":
  main()
