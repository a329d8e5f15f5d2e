"""Views of real diagnoses: what the default view shows, and expand/collapse/search.

Each nested case puts a custom_vjp whose bwd returns ``g.T`` inside one kind of
sub-jaxpr, so the failing node is nested and the view must open its way to it.
"""
import collections
import contextlib
import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

import jupyter_vjpviz as vv
from jupyter_vjpviz.analysis import program
from jupyter_vjpviz.render import dot, svg, views

ROOT = Path(__file__).resolve().parents[1]


def _bench():
  spec = importlib.util.spec_from_file_location("graph_scale", ROOT / "benchmarks/graph_scale.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _bad():
  @jax.custom_vjp
  def bad(x):
    return x * 2.0
  bad.defvjp(lambda x: (bad(x), None), lambda _, g: (g.T,))
  return bad


def _shard_map(f):
  """Replicated specs: the analysis re-traces from unsharded avals, so sharded ones fail."""
  return jax.shard_map(f, in_specs=P(), out_specs=P())


WRAPPERS = {
    "pjit": jax.jit,
    "remat": jax.checkpoint,
    "scan": lambda f: lambda x: jax.lax.scan(lambda c, _: (f(c), None), x, None, length=2)[0],
    "cond": lambda f: lambda x: jax.lax.cond(x.sum() > 0, f, lambda y: y * 3.0, x),
    "shard_map": _shard_map,
}


def _diagnose(fun, *args):
  try:
    jax.grad(fun)(*args)
  except Exception:  # noqa: BLE001 - the failure is what we inspect
    pass
  d = vv.last()
  assert d is not None and d.node is not None
  return d


def _nested(wrapper: str):
  """A diagnosis whose failing node sits inside a sub-jaxpr, plus an unrelated jitted cos."""
  wrap, bad = WRAPPERS[wrapper], _bad()

  def f(x):
    y = jax.jit(jnp.cos)(jnp.sin(x))
    return (wrap(lambda z: bad(z) + 1.0)(y) * 3.0).sum()
  mesh = jax.make_mesh((4,), ("i",))   # 4 CPU devices: conftest sets XLA_FLAGS
  with jax.set_mesh(mesh) if wrapper == "shard_map" else contextlib.nullcontext():
    return _diagnose(f, jnp.ones((8, 4)))


@pytest.fixture(params=sorted(WRAPPERS))
def nested(request, hook):
  return _nested(request.param)


@pytest.fixture(params=sorted(WRAPPERS))
def nested_neighbourhood(request, hook, monkeypatch):
  """The same failures, every program over the equation limit: a one-hop neighbourhood.

  (tests/test_huge.py has a real 100k-equation program; this is every kind of nesting.)
  """
  monkeypatch.setattr(program, "LIMITS", program.LIMITS._replace(max_eqns=0, hops=1))
  return _nested(request.param)


def _top(graph, node_id):
  node = graph.node(node_id)
  while node.parent is not None:
    node = graph.node(node.parent)
  return node.id


def test_default_view_opens_the_way_to_a_nested_failure(nested):
  v = views.default_view(nested.graph, nested.node)
  top = _top(nested.graph, nested.node)
  assert nested.node != top and nested.node in v.nodes and top in v.nodes
  other = next(n for n in nested.graph.nodes if n.label == "jit" and n.id != top)
  inside = [n.id for n in nested.graph.nodes if n.parent == other.id]
  assert inside and not set(inside) & set(v.nodes)
  assert all(v.box_of[i] == other.id for i in inside)
  opened = views.expand(v, other.id)
  assert set(inside) <= set(opened.nodes) and nested.node in opened.nodes


def test_collapse_folds_the_failing_sub_jaxpr_into_its_equation(nested):
  top = _top(nested.graph, nested.node)
  v = views.collapse(views.default_view(nested.graph, nested.node), top)
  assert nested.node not in v.nodes and v.box_of[nested.node] == top and top in v.nodes
  drawn = set(v.nodes) | {c.id for c in v.clusters}
  assert all(e.src in drawn and e.dst in drawn and e.src != e.dst for e in v.edges)
  assert nested.node in views.expand(v, top).nodes


def test_neighbourhood_of_a_nested_failure_holds_the_way_to_it(nested_neighbourhood):
  d = nested_neighbourhood
  g, top = d.graph, _top(d.graph, d.node)
  assert "neighbourhood only" in g.note and d.node != top and g.node(d.node).custom
  ids = {n.id for n in g.nodes}
  assert all(n.parent is None or n.parent in ids for n in g.nodes)
  assert all(e.src in ids and e.dst in ids for e in g.edges)
  assert any(e.mismatch and e.dst == d.node for e in g.edges)
  jitted_cos = next(n.id for n in g.nodes if n.label == "jit" and n.id != top)
  assert (jitted_cos, top) in {(e.src, e.dst) for e in g.edges}   # one hop away: its body isn't
  assert g.node(jitted_cos).n_eqns == 1 and not [n for n in g.nodes if n.parent == jitted_cos]
  v = views.default_view(g, d.node)
  assert d.node in v.nodes and top in v.nodes and g.note in v.note


def test_a_neighbourhood_keeps_every_program_input_and_output(hook, monkeypatch):
  """Fixes that rebuild the call (f_vjp.with_refs) read the whole argument list from the graph."""
  monkeypatch.setattr(program, "LIMITS", program.LIMITS._replace(max_eqns=0, hops=1))
  bad = jax.custom_vjp(lambda x: x * 2.)
  bad.defvjp(lambda x: (x * 2., None), lambda r, g: (g[:1],))

  def loss(a, b, c, d, e):
    far = jnp.sin(jnp.cos(jnp.tanh(b * c * d * e)))    # many hops from the failure
    return bad(a).sum() + far.sum(), far
  with pytest.raises(ValueError):
    jax.grad(loss, argnums=(0, 1, 2, 3, 4), has_aux=True)(*[jnp.ones(3)] * 5)
  g = vv.last().graph
  assert "neighbourhood only" in g.note
  assert {f"in{k}" for k in range(5)} | {"out0", "out1"} <= {n.id for n in g.nodes}


@pytest.fixture(scope="module")
def deep():
  """A 48-layer transformer-like stack (small dims), layer 30's GELU bwd wrong."""
  bench = _bench()
  params, x = bench.inputs(48, batch=2, seq=4, d_model=16, ffn=32)
  vv.install()
  vv.clear()
  try:
    yield _diagnose(bench.model(48, 30, heads=2), params, x)
  finally:
    vv.uninstall()
    vv.clear()


def test_48_layers_default_view_is_small_and_shows_the_failure(deep):
  v = views.default_view(deep.graph, deep.node)
  assert deep.node in v.nodes and deep.graph.node(deep.node).name_stack == "layer30/mlp"
  assert v.size <= views.BUDGET < len(deep.graph.nodes) / 50
  groups = {c.label: c.repeat for c in v.clusters if c.kind == "group"}
  assert groups == {"layer0 … layer29": 30, "layer31 … layer47": 17}
  assert any(e.mismatch and e.dst == deep.node for e in v.edges)
  out = next(n.id for n in deep.graph.nodes if n.kind == "output")
  assert out in v.nodes


def test_48_layers_failure_is_highlighted_in_dot_and_svg(deep):
  source = dot.render(deep)
  assert f'id={deep.node}' in source and "vjpviz-node-failed" in source
  image = svg.render(deep)
  failed = image[image.index('class="node vjpviz-node vjpviz-node-failed"') - 40:]
  assert f'id="{deep.node}"' in failed[:80]
  assert "vjpviz-edge-mismatch" in image and "✖" in image
  assert "P float32[2,4,32] / CT float32[2,4,32]" in image


def test_groups_and_scopes_expand_and_collapse(deep):
  v = views.default_view(deep.graph, deep.node)
  group = next(c for c in v.clusters if c.kind == "group" and c.repeat == 30)
  layers = views.expand(v, group.id)
  scopes = [c for c in layers.clusters if c.id.startswith("scope:layer") and c.kind == "scope"]
  assert {c.label for c in scopes} >= {f"layer{i}" for i in range(30)}
  layer3 = views.expand(layers, "scope:layer3")
  assert {"scope:layer3/attn", "scope:layer3/mlp"} <= {c.id for c in layer3.clusters}
  assert views.collapse(layer3, "scope:layer3") == layers
  zone = views.collapse(v, "scope:layer30")
  held = zone.cluster("scope:layer30")
  assert held.failing and deep.node not in zone.nodes and zone.box_of[deep.node] == held.id


def test_search_and_reveal(deep):
  g = deep.graph
  assert views.search(g, "GELU_BAD") == [deep.node]
  hits = views.search(g, "float32[2,4,48]")   # the qkv projection of every layer
  assert len([h for h in hits if g.node(h).primitive == "dot_general"]) == 48
  target = next(h for h in views.search(g, "layer7/attn") if g.node(h).primitive == "dot_general")
  v = views.default_view(g, deep.node)
  assert target not in v.nodes
  shown = views.reveal(v, target)
  assert target in shown.nodes and deep.node in shown.nodes


def test_budget_folds_unscoped_programs_into_runs(hook):
  bad = _bad()

  def f(x):
    for _ in range(100):
      x = jnp.sin(x) * 1.5
    x = bad(x)
    for _ in range(100):
      x = jnp.cos(x) + 1.0
    return x.sum()
  d = _diagnose(f, jnp.ones((2, 4)))
  v = views.default_view(d.graph, d.node)
  assert d.node in v.nodes and v.size <= views.BUDGET + 2
  runs = [c for c in v.clusters if c.kind == "run"]
  assert runs and sum(c.n_eqns for c in runs) + len(v.nodes) >= 400
  opened = views.expand(v, runs[0].id)
  assert set(runs[0].members) <= set(opened.nodes)


def test_a_densely_connected_program_stays_within_the_box_and_edge_budgets(hook):
  """Each step reads every earlier one (a DenseNet's skips): the failing node feeds
  all later steps, and runs of hidden equations lie between any two shown nodes."""
  bad = _bad()

  def f(x):
    xs = [x]
    for k in range(40):
      y = jnp.sin(xs[-1])
      for z in xs[:-1]:
        y = y + z * 0.5
      xs.append(bad(y) if k == 20 else y)
    return xs[-1].sum()
  d = _diagnose(f, jnp.ones((3, 4)))
  v = views.default_view(d.graph, d.node)
  assert d.node in v.nodes and v.size <= views.BUDGET and len(v.edges) <= views.EDGE_BUDGET
  assert any(e.mismatch and e.dst == d.node for e in v.edges) and v.budget == views.BUDGET
  assert v.size + len(v.edges) < len(d.graph.nodes) / 10   # folded, not dropped
  opened = views.expand(v, next(c.id for c in v.clusters))
  assert opened.budget == views.BUDGET and d.node in opened.nodes


# ------------------------------------------------- code without named scopes: the user's calls

SMALL = dict(batch=2, seq=4, d_model=16, ffn=32)


def _bounded(d):
  """The default view of ``d``, checked against the bounds every model's view keeps."""
  v = views.default_view(d.graph, d.node)
  assert d.node in v.nodes and v.size <= views.BUDGET and len(v.edges) <= 100
  return v


def _groups(v):
  return sorted((c.label, c.repeat) for c in v.clusters if c.kind == "group")


def test_a_plain_python_loop_folds_into_its_calls(hook):
  """48 layers, each a plain function calling a custom_vjp GELU, no named scope anywhere."""
  bench = _bench()
  params, x = bench.plain_inputs(48, **SMALL)
  d = _diagnose(bench.plain_model(48, 30, heads=2), params, x)
  assert not any(n.name_stack for n in d.graph.nodes)
  v = _bounded(d)
  assert _groups(v) == [("layer 0–29 of 48", 30), ("layer 31–47 of 48", 17)]
  assert v.instance.label == "layer 30 of 48"
  line = next(i for i, text in enumerate(Path(bench.__file__).read_text().splitlines(), 1)
              if "x = layer(p, x" in text)
  assert v.instance.site == f"{bench.__file__}:{line}"
  assert d.node in v.instance.boxes
  beside = {c.label for c in v.clusters if c.id in v.instance.boxes}
  assert beside == {"attention", "layer_norm 0 of 2", "layer_norm 1 of 2"}
  # The 288 parameters of the folded layers go inside their groups; layer 30's are drawn.
  drawn = [n for n in v.nodes if d.graph.node(n).kind == "input"]
  assert drawn and all(d.graph.node(n).label.startswith("params['layers'][30]") for n in drawn)
  source = dot.source(v)
  assert "layer 30 of 48 · called at graph_scale.py:" in source
  # Parallel edges between two boxes are one, labelled with their count; no fan-out wall.
  bundled = [e for e in v.edges if len(e.edges) > 1]
  assert bundled and all(f'label="×{len(e.edges)} P ' in source for e in bundled)
  degree = collections.Counter(b for e in v.edges for b in (e.src, e.dst))
  assert max(degree.values()) <= 6


def test_a_build_walks_each_equations_params_once(hook, monkeypatch):
  """Counting a program's equations and building its graph share what each equation holds:
  on the error path, finding an equation's bodies costs as much as making its node."""
  bench, walked = _bench(), []
  find = program.sub_jaxprs
  monkeypatch.setattr(program, "sub_jaxprs", lambda eqn: walked.append(id(eqn)) or find(eqn))
  params, x = bench.plain_inputs(4, **SMALL)
  d = _diagnose(bench.plain_model(4, 2, heads=2), params, x)
  assert len(d.graph.nodes) > 200 and len(walked) > 200
  assert max(collections.Counter(walked).values()) == 1


def test_calls_inside_named_scopes_are_counted_within_each_scope(hook):
  """48 named layers, each calling the same helpers: a helper is the one call in its named
  scope ("layer30/mlp/layer_norm"), not one of the 96 calls of the whole program, and the
  failing call inside a named layer is named by that layer, with its own call site."""
  bench = _bench()

  def block(p, x, act):
    return act(bench.layer_norm(x, p["ln2"]) @ p["up"]) @ p["down"]

  def loss(layers, x):
    for i, p in enumerate(layers):
      with jax.named_scope(f"layer{i}"):
        with jax.named_scope("attn"):
          x = x + bench.attention(p, bench.layer_norm(x, p["ln1"]), 2)
        x = x + block(p, x, bench.gelu_bad if i == 30 else bench.gelu)
    return (x ** 2).mean()

  d = _diagnose(loss, *bench.inputs(48, **SMALL))
  v = _bounded(d)
  assert d.graph.node(d.node).scope == "layer30/block"
  assert v.instance.label == "layer30/block"
  lines = Path(__file__).read_text().splitlines()
  line = next(i for i, text in enumerate(lines, 1) if "x = x + block(p, x" in text)
  assert v.instance.site == f"{__file__}:{line}"
  scopes = {n.scope for n in d.graph.nodes}
  assert {"layer30/attn/layer_norm", "layer30/block/layer_norm"} <= scopes
  assert not any(" of 96" in s or " of 48" in s for s in scopes)
  line = next(i for i, text in enumerate(lines, 1) if "bench.layer_norm(x, p[\"ln1\"])" in text)
  assert d.graph.site_of("layer30/attn/layer_norm") == f"{__file__}:{line}"


def _equinox_model(n, bad):
  import equinox as eqx
  gelu, gelu_bad = _bench().gelu, _bench().gelu_bad

  class Block(eqx.Module):
    up: eqx.nn.Linear
    down: eqx.nn.Linear
    bad: bool = eqx.field(static=True)

    def __call__(self, x):
      act = gelu_bad if self.bad else gelu
      return x + jax.vmap(self.down)(act(jax.vmap(self.up)(x)))

  class Model(eqx.Module):
    blocks: list

    def __call__(self, x):
      for block in self.blocks:
        x = block(x)
      return x

  keys = jax.random.split(jax.random.key(0), 2 * n)
  return Model([Block(eqx.nn.Linear(8, 16, key=keys[2 * i]),
                      eqx.nn.Linear(16, 8, key=keys[2 * i + 1]), i == bad) for i in range(n)])


def test_equinox_blocks_fold_and_the_failing_one_is_named(hook):
  import equinox as eqx
  model = _equinox_model(12, 6)
  try:
    eqx.filter_grad(lambda m, x: (m(x) ** 2).mean())(model, jnp.ones((4, 8)))
  except Exception:  # noqa: BLE001 - the failure is what we inspect
    pass
  d = vv.last()
  v = _bounded(d)
  assert _groups(v) == [("Block.__call__ 0–5 of 12", 6), ("Block.__call__ 7–11 of 12", 5)]
  line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
              if text.strip() == "x = block(x)")
  assert v.instance.label == "Block.__call__ 6 of 12" and v.instance.site == f"{__file__}:{line}"
  assert {c.label for c in v.clusters if c.id in v.instance.boxes} == {
      "Linear.__call__ 0 of 2", "Linear.__call__ 1 of 2"}   # equinox's own modules


def test_flax_nnx_blocks_fold_and_the_failing_one_is_named(hook):
  bench = _bench()
  model = bench.nnx_model(12, 6, heads=2, d_model=16, ffn=32)
  try:
    bench.nnx_grad(bench.nnx_loss(), model, jnp.ones((2, 4, 16)))
  except Exception:  # noqa: BLE001 - the failure is what we inspect
    pass
  d = vv.last()
  v = _bounded(d)
  assert [repeat for _, repeat in _groups(v)] == [6, 5]
  assert v.instance.label == "Block.__call__ 6 of 12"
  assert {"MultiHeadAttention.__call__", "LayerNorm.__call__ 0 of 2", "Linear.__call__ 0 of 2"} \
      <= {c.label for c in v.clusters if c.id in v.instance.boxes}
