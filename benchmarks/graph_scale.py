"""How long vjpviz takes to turn a failing ``jax.grad`` into a displayable graph.

Builds transformer-like stacks (d_model=256, 8 heads, T=64, B=2, FFN=1024, one
custom_vjp GELU per layer, one layer's bwd rule wrong) and prints, per size:
cold make_jaxpr, edge table (analysis.program.from_jaxpr), default view, SVG
render, the node counts of the default view, and the latency ratio

    (grad-raise-to-displayable-diagnosis with vjpviz - plain grad raise) / cold make_jaxpr

which issue 3 wants at most 1.5. Every timed trace uses a fresh function
object, so JAX's trace caches cannot hide a cold trace. ``huge_program.py``
runs the same model at 100k equations.

    PYTHONPATH=. .venv/bin/python benchmarks/graph_scale.py [n_layers ...]
"""
from __future__ import annotations

import statistics
import sys
import time

import jax
import jax.numpy as jnp


def _gelu(x):
  return x * jax.nn.sigmoid(1.702 * x)


@jax.custom_vjp
def gelu(x):
  return _gelu(x)


def _gelu_fwd(x):
  return _gelu(x), x


def _gelu_bwd(x, g):
  s = jax.nn.sigmoid(1.702 * x)
  return (g * (s + 1.702 * x * s * (1 - s)),)


gelu.defvjp(_gelu_fwd, _gelu_bwd)


@jax.custom_vjp
def gelu_bad(x):
  return _gelu(x)


def _gelu_bad_bwd(x, g):
  return (g.T,)  # the bug: a transposed cotangent


gelu_bad.defvjp(_gelu_fwd, _gelu_bad_bwd)


def params(n_layers, d_model=256, ffn=1024, seed=0):
  k = jax.random.split(jax.random.key(seed), 4)
  def w(key, shape):
    return jax.random.normal(key, shape) * shape[0] ** -0.5
  layer = dict(qkv=w(k[0], (d_model, 3 * d_model)), out=w(k[1], (d_model, d_model)),
               up=w(k[2], (d_model, ffn)), down=w(k[3], (ffn, d_model)),
               ln1=jnp.ones(d_model), ln2=jnp.ones(d_model))
  return [layer] * n_layers


def model(n_layers, bad_layer, heads=8):
  """A fresh loss function (a new object, so nothing about it is cached)."""
  def layer_norm(x, scale):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * scale

  def attention(p, x):
    b, t, d = x.shape
    q, k, v = jnp.split(x @ p["qkv"], 3, axis=-1)
    q, k, v = (a.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3) for a in (q, k, v))
    logits = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(d // heads)
    mask = jnp.tril(jnp.ones((t, t), bool))
    att = jax.nn.softmax(jnp.where(mask, logits, -1e9), axis=-1)
    return (att @ v).transpose(0, 2, 1, 3).reshape(b, t, d) @ p["out"]

  def loss(layers, x):
    for i, p in enumerate(layers[:n_layers]):
      with jax.named_scope(f"layer{i}"):
        with jax.named_scope("attn"):
          x = x + attention(p, layer_norm(x, p["ln1"]))
        with jax.named_scope("mlp"):
          act = gelu_bad if i == bad_layer else gelu
          x = x + act(layer_norm(x, p["ln2"]) @ p["up"]) @ p["down"]
    return (x ** 2).mean()
  return loss


def inputs(n_layers, batch=2, seq=64, d_model=256, ffn=1024):
  x = jax.random.normal(jax.random.key(1), (batch, seq, d_model))
  return params(n_layers, d_model, ffn), x


def bad_layer_for(n_layers):
  return 30 if n_layers > 30 else n_layers // 2


def _ms(seconds: float) -> str:
  return f"{seconds * 1e3:7.1f}"


def measure(n_layers: int, repeats: int = 3) -> dict:
  """Medians over ``repeats`` fresh models of one size (after one warm-up)."""
  params_, x = inputs(n_layers)
  rows = [run(n_layers, bad_layer_for(n_layers), params_, x) for _ in range(repeats + 1)]
  return {k: statistics.median(r[k] for r in rows[1:]) for k in rows[0]}


def run(n_layers: int, bad: int, params_, x, heads: int = 8) -> dict:
  """One fresh model's failing grad: seconds per stage and what the default view shows."""
  import jupyter_vjpviz as vv
  from jupyter_vjpviz.analysis import program
  from jupyter_vjpviz.render import html, svg, views

  t = time.perf_counter()
  jaxpr = jax.make_jaxpr(model(n_layers, bad, heads))(params_, x).jaxpr
  make_jaxpr = time.perf_counter() - t
  t = time.perf_counter()
  program.from_jaxpr(jaxpr)
  edge_table = time.perf_counter() - t
  del jaxpr
  _Handler.seconds = 0.0
  try:
    jax.grad(model(n_layers, bad, heads))(params_, x)
  except Exception:  # noqa: BLE001 - the failure is the point
    pass
  d = vv.last()
  t = time.perf_counter()
  view = views.default_view(d.graph, d.node)
  view_s = time.perf_counter() - t
  t = time.perf_counter()
  svg.of_view(view)
  svg_s = time.perf_counter() - t
  t = time.perf_counter()
  html.fragment(d)   # what the notebook displays: view + layout + HTML
  display = time.perf_counter() - t
  return dict(make_jaxpr=make_jaxpr, edge_table=edge_table, diagnose=_Handler.seconds,
              view=view_s, svg=svg_s, display=display,
              ratio=(_Handler.seconds + display) / make_jaxpr,
              nodes=len(d.graph.nodes), boxes=view.size, shown=len(view.nodes),
              clusters=len(view.clusters), edges=len(view.edges),
              failing_shown=d.node in view.nodes)


class _Handler:
  """Times vjpviz's error path: the hook's session handler (graph, locate, diagnosis, fixes).

  Keeps the last (session, exception) it handled, so the analysis can be re-run on it.
  """
  seconds = 0.0
  last: tuple = ()

  def __init__(self, inner):
    self.inner = inner

  def __call__(self, *args):
    _Handler.last = args
    t = time.perf_counter()
    try:
      return self.inner(*args)
    finally:
      _Handler.seconds += time.perf_counter() - t


def install() -> None:
  """The hook, with its session handler timed, and a warm layout worker."""
  import jupyter_vjpviz as vv
  from jupyter_vjpviz import runtime
  from jupyter_vjpviz.render import layout

  runtime._on_session = _Handler(runtime._on_session)   # before install: the hook binds it
  vv.install()
  layout.warm()


HEADER = (f"{'layers':>6} {'nodes':>6} {'make_jaxpr':>10} {'edge_tbl':>8} {'diagnose':>8} "
          f"{'view':>7} {'svg':>7} {'display':>7} {'ratio':>5}  default view")


def row(n_layers: int, r: dict) -> str:
  return (f"{n_layers:>6} {r['nodes']:>6} {_ms(r['make_jaxpr']):>10} {_ms(r['edge_table']):>8} "
          f"{_ms(r['diagnose']):>8} {_ms(r['view'])} {_ms(r['svg'])} {_ms(r['display'])} "
          f"{r['ratio']:5.2f}  {r['boxes']:.0f} boxes ({r['shown']:.0f} nodes + "
          f"{r['clusters']:.0f} clusters), {r['edges']:.0f} edges, failing node shown: "
          f"{bool(r['failing_shown'])}")


def main(sizes: list[int]) -> None:
  install()
  print("ms, medians of 3 fresh models after a warm-up; ratio = (diagnose + display) / make_jaxpr")
  print(HEADER)
  for n in sizes:
    print(row(n, measure(n)))


if __name__ == "__main__":
  main([int(a) for a in sys.argv[1:]] or [12, 48, 96])
