"""How long vjpviz takes to turn a failing ``jax.grad`` into a displayable graph.

Builds transformer-like stacks (d_model=256, 8 heads, T=64, B=2, FFN=1024, one
custom_vjp GELU per layer, one layer's bwd rule wrong) and prints, per size:
cold make_jaxpr, edge table (analysis.program.build less its trace), default view, SVG
render, the node counts of the default view, and the latency ratio

    (grad-raise-to-displayable-diagnosis with vjpviz - plain grad raise) / cold make_jaxpr

which issue 3 wants at most 1.5, and ``raise``: what the user's exception waited
on vjpviz (the hook's handler, to the re-raise) over the same make_jaxpr; issue
27 wants the first at most 1.5 for 4k equations without named scopes
(``graph_scale.py 65 plain``: 4k equations) and the rest (views, fixes) after
the exception. Every timed trace uses a fresh function
object, so JAX's trace caches cannot hide a cold trace. ``huge_program.py``
runs the same model at 100k equations.

    PYTHONPATH=. .venv/bin/python benchmarks/graph_scale.py [n_layers ...] [scoped|plain|nnx ...]

Three ways of writing the same stack: ``scoped`` (``jax.named_scope`` per layer),
``plain`` (plain functions in a Python loop, no names) and ``nnx`` (flax nnx modules).
"""
from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from typing import NamedTuple
from collections.abc import Callable

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


def layer_norm(x, scale):
  mu = x.mean(-1, keepdims=True)
  return (x - mu) * jax.lax.rsqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * scale


def attention(p, x, heads):
  b, t, d = x.shape
  q, k, v = jnp.split(x @ p["qkv"], 3, axis=-1)
  q, k, v = (a.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3) for a in (q, k, v))
  logits = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(d // heads)
  mask = jnp.tril(jnp.ones((t, t), bool))
  att = jax.nn.softmax(jnp.where(mask, logits, -1e9), axis=-1)
  return (att @ v).transpose(0, 2, 1, 3).reshape(b, t, d) @ p["out"]


def model(n_layers, bad_layer, heads=8):
  """A fresh loss function (a new object, so nothing about it is cached)."""
  def loss(layers, x):
    for i, p in enumerate(layers[:n_layers]):
      with jax.named_scope(f"layer{i}"):
        with jax.named_scope("attn"):
          x = x + attention(p, layer_norm(x, p["ln1"]), heads)
        with jax.named_scope("mlp"):
          act = gelu_bad if i == bad_layer else gelu
          x = x + act(layer_norm(x, p["ln2"]) @ p["up"]) @ p["down"]
    return (x ** 2).mean()
  return loss


def plain_model(n_layers, bad_layer, heads=8):
  """The same stack written as most code is: plain functions, a Python loop, no named scopes."""
  def layer(p, x, act):
    x = x + attention(p, layer_norm(x, p["ln1"]), heads)
    return x + act(layer_norm(x, p["ln2"]) @ p["up"]) @ p["down"]

  def loss(params, x):
    for i, p in enumerate(params["layers"][:n_layers]):
      x = layer(p, x, gelu_bad if i == bad_layer else gelu)
    return (x ** 2).mean()
  return loss


def plain_inputs(n_layers, **dims):
  layers, x = inputs(n_layers, **dims)
  return {"layers": layers}, x


def nnx_model(n_layers, bad_layer, heads=8, d_model=256, ffn=1024, seed=0, activation=None):
  """The same stack as a flax nnx Module (nnx.Linear, nnx.LayerNorm, nnx.MultiHeadAttention);
  ``activation(i)``: layer i's MLP activation (default: ``gelu``, ``gelu_bad`` at ``bad_layer``)."""
  from flax import nnx
  activation = activation or (lambda i: gelu_bad if i == bad_layer else gelu)

  class Block(nnx.Module):
    def __init__(self, act, rngs):
      self.ln1, self.ln2 = nnx.LayerNorm(d_model, rngs=rngs), nnx.LayerNorm(d_model, rngs=rngs)
      self.attn = nnx.MultiHeadAttention(heads, d_model, decode=False, rngs=rngs)
      self.up, self.down = nnx.Linear(d_model, ffn, rngs=rngs), nnx.Linear(ffn, d_model, rngs=rngs)
      self.act = act

    def __call__(self, x):
      y = self.ln1(x)
      x = x + self.attn(y, y, y)
      return x + self.down(self.act(self.up(self.ln2(x))))

  class Model(nnx.Module):
    def __init__(self, rngs):
      self.blocks = nnx.List([Block(activation(i), rngs) for i in range(n_layers)])

    def __call__(self, x):
      for block in self.blocks:
        x = block(x)
      return x

  return Model(nnx.Rngs(seed))


def nnx_loss():
  """A fresh loss over an nnx model (a new object, so nothing about it is cached)."""
  def loss(model, x):
    return (model(x) ** 2).mean()
  return loss


def nnx_grad(loss, model, x):
  from flax import nnx
  return nnx.grad(loss)(model, x)


def inputs(n_layers, batch=2, seq=64, d_model=256, ffn=1024):
  x = jax.random.normal(jax.random.key(1), (batch, seq, d_model))
  return params(n_layers, d_model, ffn), x


def bad_layer_for(n_layers):
  return 30 if n_layers > 30 else n_layers // 2


def _ms(seconds: float) -> str:
  return f"{seconds * 1e3:7.1f}"


class Model(NamedTuple):
  """One way of writing the stack: a fresh loss, its arguments, and the failing grad."""
  loss: Callable    # (n_layers, bad_layer, heads) -> a fresh loss function
  args: Callable    # (n_layers, bad_layer, heads) -> its arguments
  grad: Callable = jax.grad


MODELS = {
    "scoped": Model(model, lambda n, bad, heads: inputs(n)),
    "plain": Model(plain_model, lambda n, bad, heads: plain_inputs(n)),
    "nnx": Model(lambda n, bad, heads: nnx_loss(),
                 lambda n, bad, heads: (nnx_model(n, bad, heads), inputs(1)[1]),
                 lambda loss: lambda *args: nnx_grad(loss, *args)),
}


def _origin(loss: Callable, args):
  """The call as the hook records it: avals for arrays, every array leaf differentiated."""
  from jupyter_vjpviz.capture.records import Origin
  leaves, tree = jax.tree_util.tree_flatten((args, {}))
  avals = tuple(jax.typeof(x) if isinstance(x, jax.Array) else x for x in leaves)
  return Origin(fun=loss, leaves=avals, tree=tree, name=getattr(loss, "__name__", "loss"),
                differentiated_leaves=tuple(i for i, x in enumerate(leaves) if isinstance(x, jax.Array)),
                source=None)


def measure(kind: str, n_layers: int, repeats: int = 3) -> dict:
  """Medians over ``repeats`` fresh models of one size (after one warm-up)."""
  spec, bad, heads = MODELS[kind], bad_layer_for(n_layers), 8
  args = spec.args(n_layers, bad, heads)
  rows = [run(spec, n_layers, bad, args, heads) for _ in range(repeats + 1)]
  return {k: statistics.median(r[k] for r in rows[1:]) for k in rows[0]}


def run(spec: Model, n_layers: int, bad: int, args, heads: int = 8) -> dict:
  """One fresh model's failing grad: seconds per stage and what the default view shows.

  ``diagnose`` runs from the hook's first call to the diagnosis (its graph built);
  ``raised`` is the whole handler, what the exception waited on; ``fixes`` adds what
  followed the exception (listeners, fixes judged), finished by ``vv.last()``.
  """
  import jupyter_vjpviz as vv
  from jupyter_vjpviz.analysis import program
  from jupyter_vjpviz.render import html, svg, views

  t = time.perf_counter()
  jaxpr = jax.make_jaxpr(spec.loss(n_layers, bad, heads))(*args).jaxpr
  make_jaxpr = time.perf_counter() - t
  eqns = len(jaxpr.eqns)
  origin = _origin(spec.loss(n_layers, bad, heads), args)
  t = time.perf_counter()
  program.trace(origin)
  t, trace = time.perf_counter(), time.perf_counter() - t
  program.build(origin, lambda graph: [])
  edge_table = max(time.perf_counter() - t - trace, 0.0)   # build traces it again, warm
  del origin
  del jaxpr
  _Handler.started = _Handler.diagnosed = None
  _Handler.seconds = 0.0
  try:
    spec.grad(spec.loss(n_layers, bad, heads))(*args)
  except Exception:  # noqa: BLE001 - the failure is the point
    pass
  raised = _Handler.seconds   # what the exception waited for
  t = time.perf_counter()
  d = vv.last()   # finishes what followed the exception (listeners, fixes), if anything did
  fixes = raised + time.perf_counter() - t
  diagnose = _Handler.diagnosed - _Handler.started
  t = time.perf_counter()
  html.fragment(d)   # what the notebook displays: view + layout + HTML, drawn cold
  display = time.perf_counter() - t
  graph = dataclasses.replace(d.graph)   # a new object: its parts drawn cold, not kept ones
  t = time.perf_counter()
  view = views.default_view(graph, d.node)
  view_s = time.perf_counter() - t
  t = time.perf_counter()
  svg.of_view(view)
  svg_s = time.perf_counter() - t
  return dict(make_jaxpr=make_jaxpr, eqns=eqns, edge_table=edge_table, diagnose=diagnose,
              raised=raised, fixes=fixes, view=view_s, svg=svg_s, display=display,
              ratio=(diagnose + display) / make_jaxpr, raise_ratio=raised / make_jaxpr,
              nodes=len(d.graph.nodes), boxes=view.size, shown=len(view.nodes),
              clusters=len(view.clusters), edges=len(view.edges),
              failing_shown=d.node in view.nodes)


class _Handler:
  """Times vjpviz's error path: the hook's session handler (graph, locate, diagnosis, and
  whatever else runs before the exception is re-raised) from the first session with
  something to report, and when its diagnosis existed (``diagnosed``: first published).

  Keeps the last (session, exception) it handled, so the analysis can be re-run on it.
  """
  seconds = 0.0
  started: float | None = None
  diagnosed: float | None = None   # the diagnosis existed (its first publishing)
  last: tuple = ()

  def __init__(self, inner):
    self.inner = inner

  def __call__(self, *args):
    session, exc = args
    t = time.perf_counter()
    if exc is None and not session.records:   # an empty "run" session: a jit ran, nothing to say
      return self.inner(*args)
    _Handler.last = args
    _Handler.started = _Handler.started or t
    try:
      return self.inner(*args)
    finally:
      _Handler.seconds += time.perf_counter() - t


def install() -> None:
  """The hook, with its session handler timed, and a warm layout worker."""
  import jupyter_vjpviz as vv
  from jupyter_vjpviz.api import pipeline
  from jupyter_vjpviz.render import layout

  pipeline._on_session = _Handler(pipeline._on_session)   # before install: the hook binds it
  publish = pipeline._publish

  def _published(*args):
    _Handler.diagnosed = _Handler.diagnosed or time.perf_counter()
    return publish(*args)
  pipeline._publish = _published
  vv.install()
  layout.warm()


HEADER = (f"{'model':>6} {'layers':>6} {'eqns':>6} {'nodes':>6} {'make_jaxpr':>10} "
          f"{'edge_tbl':>8} {'diagnose':>8} {'raise':>7} {'+fixes':>7} {'view':>7} {'svg':>7} "
          f"{'display':>7} {'ratio':>5} {'raise':>5}  default view")


def row(kind: str, n_layers: int, r: dict) -> str:
  return (f"{kind:>6} {n_layers:>6} {r['eqns']:>6.0f} {r['nodes']:>6} {_ms(r['make_jaxpr']):>10} "
          f"{_ms(r['edge_table']):>8} {_ms(r['diagnose']):>8} {_ms(r['raised'])} {_ms(r['fixes'])} "
          f"{_ms(r['view'])} {_ms(r['svg'])} {_ms(r['display'])} "
          f"{r['ratio']:5.2f} {r['raise_ratio']:5.2f}  {r['boxes']:.0f} boxes ({r['shown']:.0f} nodes + "
          f"{r['clusters']:.0f} clusters), {r['edges']:.0f} edges, failing node shown: "
          f"{bool(r['failing_shown'])}")


def main(sizes: list[int], kinds: list[str]) -> None:
  install()
  print("ms, medians of 3 fresh models after a warm-up; diagnose = hook to diagnosis, "
        "raise = what the exception waited on (the hook's handler), +fixes = raise and what "
        "followed it (listeners, fixes judged); ratio = (diagnose + display) / make_jaxpr, "
        "raise = raise / make_jaxpr")
  print(HEADER)
  for kind in kinds:
    for n in sizes:
      print(row(kind, n, measure(kind, n)), flush=True)


if __name__ == "__main__":
  words = sys.argv[1:]
  main([int(a) for a in words if a.isdigit()] or [12, 48, 96],
       [a for a in words if not a.isdigit()] or list(MODELS))
