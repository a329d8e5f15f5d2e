"""Speed as a tested property: issue 48's figures as ratios measured in one run, against
a committed baseline (``speed_baseline.json``).

Each figure is a ratio of two things timed in this process, interleaved (A, B, A, B, ...)
so that a neighbour's load (CI runs two lanes on two cores) hits both alike, and its value
is the median of the per-round ratios. A figure fails when it exceeds its baseline by more
than its tolerance (a relative margin, wide where compiles make the ratio noisy). Sizes are
smaller than the issue's (its table is in ``docs/benchmarks.md``) so the whole run takes
minutes; ``--full`` runs the issue's sizes.

    PYTHONPATH=$PWD:$PWD/benchmarks python benchmarks/speed.py [--only NAME ...] [--full]
        [--update]       # write the measured ratios as the new baseline

Ends with "N passed, M failed" (one per figure measured: one that cannot be here says
why) and exits non-zero on a regression.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable

import jax

HERE = pathlib.Path(__file__).resolve().parent
BASELINE = HERE / "speed_baseline.json"


def _seconds(fn) -> float:
  t = time.perf_counter()
  jax.block_until_ready(fn())
  return time.perf_counter() - t


def interleaved(a: Callable, b: Callable, rounds: int) -> tuple[float, float, float]:
  """(median a, median b, median of the per-round b/a) seconds, a and b alternating."""
  ta, tb = [], []
  for _ in range(rounds):
    ta.append(a())
    tb.append(b())
  return statistics.median(ta), statistics.median(tb), statistics.median(
      y / x for x, y in zip(ta, tb))


# The figures. Each takes ``full`` (the sizes) and returns (a, b, ratio).

def _compile_cache() -> None:
  """The hook's (un)install clears JAX's caches, so each round recompiles: a persistent
  compilation cache (a temporary folder) makes those reads. The hook's figures run last,
  so no cold compile is timed after this."""
  jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="vjpviz-speed-"))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def hook_eager(full: bool):
  """Hook on / off, CPU time (a neighbour's load stretches wall time unevenly; the hook's
  cost is this process's work): eager jax.grad of a 12-layer stack with 12 custom_vjp rules."""
  import hook_overhead
  _compile_cache()
  from graph_scale import inputs, model
  dims = {} if full else dict(seq=16, d_model=64, ffn=128)
  loss, (params, x) = model(12, bad_layer=None), inputs(12, **dims)
  grad = jax.grad(loss)
  return hook_overhead.measure(lambda: grad(params, x), 5 if full else 3, 15 if full else 7,
                               time.process_time, warm=2)


def hook_jit(full: bool):
  """Hook on / off, CPU time: a cached jit(grad) call of the same stack."""
  import hook_overhead
  _compile_cache()
  from graph_scale import inputs, model
  dims = {} if full else dict(seq=16, d_model=64, ffn=128)
  jitted, (params, x) = jax.jit(jax.grad(model(12, bad_layer=None))), inputs(12, **dims)
  return hook_overhead.measure(lambda: jitted(params, x), 30, 7 if full else 5, time.process_time,
                               warm=2)


def diagnosis(full: bool):
  """Error -> displayable diagnosis (graph, types, failing node, drawn) over one cold
  make_jaxpr of the failing program: graph_scale's plain stack (65 layers: 4,133 nodes)."""
  import graph_scale
  n = 65 if full else 24
  spec, bad = graph_scale.MODELS["plain"], graph_scale.bad_layer_for(n)
  graph_scale.install()
  args = spec.args(n, bad, 8)
  rows = [graph_scale.run(spec, n, bad, args) for _ in range(6 if full else 5)][1:]
  return (statistics.median(r["make_jaxpr"] for r in rows),
          statistics.median(r["diagnose"] + r["display"] for r in rows),
          statistics.median(r["ratio"] for r in rows))


def _nnx_split(blocks: int, nan_block: int | None):
  from flax import nnx
  from speed_models import nnx_transformer
  model, x = nnx_transformer(blocks, nan_block=nan_block)
  graphdef, state = nnx.split(model)

  def fresh():
    def loss(state, x):
      return (nnx.merge(graphdef, state)(x) ** 2).mean()
    return loss
  return fresh, state, x


def _cold_jit_grad(fresh, *args) -> float:
  return _seconds(lambda: jax.jit(jax.grad(fresh()))(*args))


def grads_model(full: bool):
  """vv.grads on a healthy flax nnx transformer / one cold jit(grad) of it."""
  import jupyter_vjpviz as vv
  fresh, state, x = _nnx_split(12 if full else 2, None)
  vv.grads(fresh(), state, x)   # vjpviz's own first use outside the timing
  return interleaved(lambda: _cold_jit_grad(fresh, state, x),
                     lambda: _seconds(lambda: vv.grads(fresh(), state, x).leaves), 3)


def nans_model(full: bool):
  """vv.nans on the same transformer with a NaN gradient in one block / one cold jit(grad)."""
  import jupyter_vjpviz as vv
  blocks = 12 if full else 2
  fresh, state, x = _nnx_split(blocks, blocks // 2)

  def nans():
    d = vv.nans(fresh(), state, x)
    assert d is not None, "the gradient is NaN: vv.nans must find it"
    return d.node
  _seconds(nans)
  return interleaved(lambda: _cold_jit_grad(fresh, state, x), lambda: _seconds(nans), 3)


def nans_small(full: bool):
  """vv.nans on small NaN programs / one cold jit(value_and_grad) of each."""
  import jupyter_vjpviz as vv
  from speed_models import small_nan_programs
  programs = small_nan_programs()

  def nans(program):
    loss, x = program()
    assert vv.nans(loss, x) is not None, f"{program.__name__}: vv.nans must find its NaN"
    return 0
  nans(programs[0])
  ta, tb = [], []
  for _ in range(2 if full else 1):
    for program in programs:
      ta.append(_seconds(lambda: jax.jit(jax.value_and_grad(program()[0]))(program()[1])))
      tb.append(_seconds(lambda: nans(program)))
  return statistics.median(ta), statistics.median(tb), statistics.median(
      y / x for x, y in zip(ta, tb))


SCRIPT = textwrap.dedent("""
    import sys
    import jax
    import jax.numpy as jnp
    if sys.argv[1] == "vjpviz":
      import jupyter_vjpviz as vv
      vv.install()

    @jax.custom_vjp
    def clip(x):
      return jnp.clip(x, -1, 1)

    clip.defvjp(lambda x: (clip(x), x), lambda x, g: (g.sum(0),))   # the bug: summed

    @jax.jit
    def step(w, x):
      return w - 0.1 * jax.grad(lambda w: (clip(x @ w) ** 2).mean())(w)

    try:
      step(jnp.ones((8, 4)), jnp.ones((16, 8)))
    except Exception as e:
      print(type(e).__name__)
""")


def script(full: bool):
  """A script whose jitted step hits a wrong rule: its whole process with vjpviz / plain."""
  with tempfile.TemporaryDirectory() as d:
    path = pathlib.Path(d) / "step.py"
    path.write_text(SCRIPT)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}

    def run(mode):
      return lambda: _seconds(lambda: subprocess.run(
          [sys.executable, str(path), mode], env=env, capture_output=True, check=True))
    return interleaved(run("plain"), run("vjpviz"), 5 if full else 3)


def watch(full: bool):
  """vv.watch'd step / the unwrapped step: a flax linen MLP under jax.jit with adam."""
  import watch_overhead
  t = watch_overhead.overhead("linen", 256 if full else 64, 7 if full else 5, 30)
  return t["plain"], t["watched"], t["ratio"]


def watch_flow(full: bool):
  """vv.watch(flow=True)'d step / the unwrapped step: the same linen loop, width 256."""
  import watch_overhead
  t = watch_overhead.flow_overhead("linen", 256, 9 if full else 5, 30)
  return t["plain"], t["on"], t["ratio_on"]


def watch_flow_kernels(full: bool):
  """Kernels the flow-watched step launches / the unwrapped step's (XLA's compiled
  program, free of the machine's load): the CPU kernels' single pass per tap and the
  row assembled in few fusions keep it near 1; XLA's reductions alone were 1.85.
  Not measured (None) where the CPU kernels could not be built here."""
  import watch_overhead
  from jupyter_vjpviz.capture import cpu_kernels
  if cpu_kernels.why_not() is not None:
    print(f"watch_flow_kernels: not measured: the CPU kernels are not used here "
          f"({cpu_kernels.why_not()})")
    return None
  c = watch_overhead.flow_cost("linen", 256)   # counts, shown in the table's ms columns
  return c["kernels_plain"] / 1e3, c["kernels_on"] / 1e3, c["kernels_on"] / c["kernels_plain"]


FIGURES: dict[str, Callable] = {f.__name__: f for f in (
    diagnosis, grads_model, nans_model, nans_small, script, watch, watch_flow,
    watch_flow_kernels, hook_eager, hook_jit)}
"""In the order they run: the hook's last (``_compile_cache``)."""


def check(name: str, ratio: float, baseline: dict) -> bool | None:
  """Passed (the ratio within the baseline's tolerance), or None: no baseline for it."""
  if name not in baseline:
    return None
  return ratio <= baseline[name]["ratio"] * (1 + baseline[name]["tolerance"])


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--only", nargs="+", choices=list(FIGURES), default=list(FIGURES))
  parser.add_argument("--full", action="store_true", help="the issue's sizes (slow)")
  parser.add_argument("--update", action="store_true", help="write the ratios as the baseline")
  args = parser.parse_args(argv)
  baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
  key = "full" if args.full else "ci"
  table = baseline.get(key, {})
  print(f"jax {jax.__version__}, {os.cpu_count()} cores, {key} sizes; a, b: medians in ms; "
        "ratio: median of per-round b/a")
  print(f"{'figure':<18} {'a ms':>9} {'b ms':>9} {'ratio':>7} {'baseline':>9} {'limit':>7}  verdict")
  passed = failed = 0
  for name in (name for name in FIGURES if name in args.only):
    t = time.perf_counter()
    measured = FIGURES[name](args.full)
    if measured is None:   # said why; neither passed nor failed
      continue
    a, b, ratio = measured
    ok = check(name, ratio, table)
    if name in table:
      limit = table[name]["ratio"] * (1 + table[name]["tolerance"])
      base = f"{table[name]['ratio']:9.3f} {limit:7.3f}"
    else:
      base = f"{'-':>9} {'-':>7}"
    verdict = {True: "ok", False: "REGRESSED", None: "no baseline"}[ok]
    print(f"{name:<18} {a * 1e3:9.1f} {b * 1e3:9.1f} {ratio:7.3f} {base}  {verdict} "
          f"({time.perf_counter() - t:.0f} s)", flush=True)
    passed += ok is not False
    failed += ok is False
    if args.update:
      tolerance = table.get(name, {}).get("tolerance", 0.25)
      table[name] = {"ratio": round(ratio, 3), "tolerance": tolerance}
  if args.update:
    BASELINE.write_text(json.dumps({**baseline, key: table}, indent=1, sort_keys=True) + "\n")
  print(f"{passed} passed, {failed} failed")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
