"""vjpviz's error path on a 100k-equation program: time to a displayable diagnosis, and memory.

graph_scale's model with small dims (d_model=16, 2 heads, T=4, FFN=32) at 1340
layers, 75 equations each, the middle layer's GELU bwd wrong. Prints, in one
process, graph_scale's columns for it (cold make_jaxpr; the whole edge table,
as built before the limits; the hook's error path and display, and their ratio
to make_jaxpr), then the analysis re-run on the captured session as shipped
(the failing node's neighbourhood) and with ``analysis.program.LIMITS`` lifted
(the whole graph), past its re-trace (JAX's part, timed once): its time, then
in a second run tracemalloc's peak and what the diagnosis keeps.

    PYTHONPATH=. .venv/bin/python benchmarks/huge_program.py [n_layers]
"""
from __future__ import annotations

import gc
import math
import sys
import time
import tracemalloc

import graph_scale as scale

SMALL = dict(batch=2, seq=4, d_model=16, ffn=32)


def analysis(limits, jaxpr) -> dict:
  """diagnose() on the last captured session under ``limits``, its re-trace (JAX's part,
  timed apart) replaced by ``jaxpr``: seconds; then, in a second run, peak and kept bytes."""
  from jupyter_vjpviz.api import pipeline
  from jupyter_vjpviz.analysis import assemble, program

  session, exc = scale._Handler.last
  shipped = program.LIMITS, program.trace
  program.LIMITS, program.trace = limits, lambda origin: jaxpr
  try:
    t = time.perf_counter()
    with pipeline._gc_paused():
      assemble.diagnose(session, exc)
    seconds = time.perf_counter() - t
    gc.collect()
    tracemalloc.start()   # a second run: tracemalloc slows Python down several times
    with pipeline._gc_paused():
      found = assemble.diagnose(session, exc)
    gc.collect()
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
  finally:
    program.LIMITS, program.trace = shipped
  return dict(seconds=seconds, peak=peak, kept=kept, nodes=len(found[0].graph.nodes),
              note=found[0].graph.note)


def main(n_layers: int) -> None:
  from jupyter_vjpviz.analysis import program

  scale.install()
  scoped = scale.MODELS["scoped"]
  scale.run(scoped, 12, 6, scale.inputs(12, **SMALL), heads=2)   # warm-up: imports, eager kernels
  print("ms, one fresh model; ratio = (diagnose + display) / make_jaxpr")
  print(scale.HEADER)
  print(scale.row("scoped", n_layers, scale.run(scoped, n_layers, n_layers // 2,
                                                scale.inputs(n_layers, **SMALL), heads=2)))
  t = time.perf_counter()
  jaxpr = program.trace(scale._Handler.last[0].origin)
  print(f"\nthe analysis re-run on the captured session: its re-trace (JAX's part) "
        f"{(time.perf_counter() - t) * 1e3:.0f} ms, then graph, locate and diagnosis:")
  for label, limits in (("as shipped", program.LIMITS),
                        ("limits lifted", program.LIMITS._replace(max_eqns=math.inf,
                                                                  seconds=math.inf))):
    r = analysis(limits, jaxpr)
    print(f"  {label:14s} {r['seconds'] * 1e3:7.0f} ms  peak {r['peak'] / 1e6:6.1f} MB  "
          f"diagnosis keeps {r['kept'] / 1e6:6.2f} MB  {r['nodes']:>6} nodes  ({r['note']})")


if __name__ == "__main__":
  main(int(sys.argv[1]) if sys.argv[1:] else 1340)
