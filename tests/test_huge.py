"""Huge programs: a diagnosis within bounded time and memory, over the failing node's neighbourhood.

The 100,000-equation program is mostly a chain on an argument that is not
differentiated (a schedule, say). The analysis re-traces every equation of it,
as of any program; jax.grad only evaluates the chain, so the test doesn't pay
the ~25 s JAX itself needs to differentiate 100k equations, which is not
what is under test here.
"""
import gc
import itertools
import tracemalloc

import jax
import jax.numpy as jnp
from jax import lax

import softclip
from jupyter_vjpviz.analysis import program
from jupyter_vjpviz.render import views

EQNS = 100_000


def _fail(fun, *args):
  try:
    jax.grad(fun, argnums=(0, 1))(*args)
  except ValueError:   # softclip's bwd rule is wrong: JAX raises, vjpviz diagnoses
    return
  raise AssertionError("the broken rule did not fail")


def _huge_loss():
  """softclip (whose bwd rule transposes w's cotangent) in the middle of ~100k equations."""
  rule = softclip.define()["softclip"]

  def loss(x, w, schedule):
    for _ in range(EQNS // 2):
      schedule = lax.sin(schedule)
    y = rule(x * schedule, w)
    for _ in range(EQNS // 2):
      schedule = lax.cos(schedule)
    return y.sum() * schedule.sum()
  return loss


def test_100k_equations_give_a_diagnosis_over_a_bounded_neighbourhood(hook, monkeypatch):
  # tracemalloc slows our loops ~5x: time must not be what bounds the graph here
  monkeypatch.setattr(program, "LIMITS", program.LIMITS._replace(seconds=60.0))
  tracemalloc.start()
  try:
    _fail(_huge_loss(), jnp.ones((4, 5)), jnp.ones((5, 3)), jnp.ones((4, 5)))
    d = hook.last()
    assert (d.kind, d.function, d.expected, d.got) == \
        ("bwd_type", "softclip", "float32[5,3]", "float32[3,5]")
    graph = d.graph
    assert len(graph.nodes) <= program.LIMITS.max_nodes
    assert "a program of 100,00" in graph.note and "neighbourhood only" in graph.note
    failing = graph.node(d.node)
    assert failing.custom and failing.function == "softclip"
    assert int(d.node.removeprefix("e")) == EQNS // 2 + 1    # the middle of the program
    assert "in1" in {e.src for e in graph.edges if e.dst == d.node}   # w, an input it reaches
    assert any(e.mismatch and e.dst == d.node for e in graph.edges)
    assert d.node in views.default_view(graph, d.node).nodes
    source = d.to_dot()
    assert f"id={d.node}" in source and "vjpviz-node-failed" in source
    assert "neighbourhood only" in source
    del d, graph, failing, source
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    hook.clear()
    gc.collect()
    retained = held - tracemalloc.get_traced_memory()[0]
  finally:
    tracemalloc.stop()
  assert retained < 2_000_000, f"the diagnosis holds {retained / 1e6:.1f} MB"


def _small_failure():
  ns = softclip.define()
  _fail(lambda x, w: ns["softclip"](x, w).sum(), jnp.ones((4, 5)), jnp.ones((5, 3)))


def test_a_whole_graph_out_of_time_falls_back_to_the_neighbourhood(hook, monkeypatch):
  seconds = itertools.chain([0.0], itertools.repeat(3.0))   # start, then 3 s on: past half
  monkeypatch.setattr(program, "_now", lambda: next(seconds))    # the 4 s for the whole graph
  _small_failure()
  d = hook.last()
  assert d.graph.note.startswith("the whole graph took over 2 s: showing the failing node's "
                                 "neighbourhood only")
  assert d.graph.node(d.node).function == "softclip" and d.got == "float32[3,5]"


def test_out_of_time_the_diagnosis_stands_without_its_graph(hook, monkeypatch):
  monkeypatch.setattr(program, "LIMITS", program.LIMITS._replace(seconds=0.0))
  _small_failure()
  d = hook.last()
  assert (d.expected, d.got, d.argument) == ("float32[5,3]", "float32[3,5]", "w")
  assert d.graph.nodes == () and d.node is None
  assert d.graph.note == "no graph: building it took over 0 s"
  assert d.graph.note in d.to_text() and d.fixes


def test_a_4k_equation_model_without_named_scopes_has_a_small_default_view(hook):
  """Issue 27: a plain-Python stack (no named scopes) of 4k equations shows at most 60 boxes
  and 100 edges by default, the failing node among them."""
  import pathlib
  import sys
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
  import graph_scale

  layers, bad = 76, 38   # ~54 equations a layer on JAX 0.12.1 (62 before)
  loss = graph_scale.plain_model(layers, bad, heads=2)
  args = graph_scale.plain_inputs(layers, batch=2, seq=4, d_model=16, ffn=32)
  assert len(jax.make_jaxpr(loss)(*args).jaxpr.eqns) >= 4000
  try:
    jax.grad(graph_scale.plain_model(layers, bad, heads=2))(*args)
  except (TypeError, ValueError):   # gelu_bad's bwd returns g.T: JAX raises, vjpviz diagnoses
    pass
  d = hook.last()
  assert d.function == "gelu_bad"
  view = views.default_view(d.graph, d.node)
  assert view.size <= 60 and len(view.edges) <= 100, (view.size, len(view.edges))
  assert d.node in view.nodes
