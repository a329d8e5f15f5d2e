"""Broken rules under the libraries' own transforms: flax nnx and linen, equinox.

Each model is a stack of identical blocks applying one custom rule, ``scale``,
whose bwd is right for every block but one: that block's parameter ``w`` has
another shape, so only its application fails. The diagnosis must draw the
graph (the libraries' grad wrappers are not safe to call twice), mark the
failing node, and say which block it is, as the library's user names it.
"""
import sys

import jax
import jax.numpy as jnp
import pytest
eqx = pytest.importorskip("equinox")   # not installed with an older JAX (scripts/test.sh)
nn = pytest.importorskip("flax.linen")
nnx = pytest.importorskip("flax.nnx")

import jupyter_vjpviz as vv
from jupyter_vjpviz.capture.naming import arguments

N, D = 4, 3
X = jnp.ones((2, D))


@jax.custom_vjp
def scale(x, w):
  return x * w


def scale_fwd(x, w):
  return x * w, (x, w)


def scale_bwd(res, g):
  x, w = res
  return g * w, (g * x).reshape(-1, x.shape[-1]).sum(0)   # right only for w: float32[D]


scale.defvjp(scale_fwd, scale_bwd)


def w_shape(bad: bool) -> tuple[int, ...]:
  return (1, D) if bad else (D,)


def diagnosed(run) -> vv.Diagnosis:
  with pytest.raises(ValueError):
    run()
  d = vv.last()
  assert d is not None and d.kind == "bwd_type" and d.function == "scale"
  assert d.graph.note is None and d.graph.nodes             # the graph is drawn
  node = d.graph.node(d.node)
  assert node.custom and node.function == "scale"           # the failing node is marked
  assert [e.cotangent_got for e in d.graph.edges if e.mismatch and e.dst == d.node] == ["float32[3]"]
  assert f"(in {d.instance})" in d.headline
  assert f"instance  {d.instance}" in d.to_text() and d.to_dict()["instance"] == d.instance
  return d


# ----------------------------------------------------------------------- nnx

class NBlock(nnx.Module):
  def __init__(self, bad, rngs):
    self.lin = nnx.Linear(D, D, rngs=rngs)
    self.w = nnx.Param(jnp.ones(w_shape(bad)))

  def __call__(self, x):
    return scale(self.lin(x), self.w[...])


class RematBlock(NBlock):
  @nnx.remat
  def __call__(self, x):
    return scale(self.lin(x), self.w[...])


class VmapBlock(NBlock):
  def __call__(self, x):    # x: [heads, batch, D], one vmapped application per head
    return nnx.vmap(lambda block, xi: scale(block.lin(xi), block.w[...]),
                    in_axes=(None, 0))(self, x)


class ScanBlock(NBlock):
  def __call__(self, x):    # x: [time, batch, D], scanned over time
    @nnx.scan(in_axes=(nnx.Carry, None, 0), out_axes=(nnx.Carry, 0))
    def step(h, block, xt):
      h = scale(block.lin(h + xt), block.w[...])
      return h, h
    return step(jnp.zeros(x.shape[1:]), self, x)[1]


class InputBlock(NBlock):
  def __call__(self, x):    # the first block's rule takes the model's input as it is
    return self.lin(scale(x, self.w[...]))


class NModel(nnx.Module):
  def __init__(self, block, bad, rngs):
    self.layers = nnx.List([block(i == bad, rngs) for i in range(N)])

  def __call__(self, x):
    for layer in self.layers:
      x = layer(x)
    return x


def nnx_loss(model, x):
  return model(x).sum()


@pytest.mark.parametrize("bad", [0, 2])
@pytest.mark.parametrize("transform", ["grad", "value_and_grad", "jit"])
def test_nnx_grad_names_the_broken_layer(hook, transform, bad):
  model = NModel(NBlock, bad, nnx.Rngs(0))
  grad = {"grad": nnx.grad(nnx_loss), "value_and_grad": nnx.value_and_grad(nnx_loss),
          "jit": nnx.jit(lambda m, x: nnx.grad(nnx_loss)(m, x))}[transform]
  d = diagnosed(lambda: grad(model, X))
  assert d.instance == f"model.layers[{bad}]"
  assert d.function == "scale" and d.graph.node("in0").label.startswith("model.layers[0].")


@pytest.mark.parametrize("block, x", [(RematBlock, X), (VmapBlock, jnp.ones((3, 2, D))),
                                      (ScanBlock, jnp.ones((5, 2, D)))],
                         ids=["remat", "vmap", "scan"])
def test_nnx_transformed_blocks_name_the_broken_layer(hook, block, x):
  model = NModel(block, 1, nnx.Rngs(0))
  d = diagnosed(lambda: nnx.grad(nnx_loss)(model, x))
  assert d.instance == "model.layers[1]"


def test_a_rule_on_the_data_is_named_by_its_parameters(hook):
  d = diagnosed(lambda: nnx.grad(nnx_loss)(NModel(InputBlock, 0, nnx.Rngs(0)), X))
  feeding = {d.graph.node(i).label for i in d.graph.upstream_of(d.node)}
  assert feeding == {"model.layers[0].w.value"}   # the data, as near, is the same in every layer
  assert d.instance == "model.layers[0]"


@pytest.mark.parametrize("block", [NBlock, RematBlock])
def test_nnx_scan_over_layers_fails_in_every_iteration(hook, block):
  """With an nnx.remat method, nnx hands the user's loss copies of the state it
  differentiates: the graph is still the user's call, traced again."""
  class Stack(nnx.Module):
    def __init__(self, rngs):
      @nnx.split_rngs(splits=N)
      @nnx.vmap(in_axes=(0,), out_axes=0)
      def make(rngs):
        return block(True, rngs)
      self.blocks = make(rngs)

    def __call__(self, x):
      @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
      def body(x, block):
        return block(x)
      return body(x, self.blocks)

  d = diagnosed(lambda: nnx.grad(nnx_loss)(Stack(nnx.Rngs(0)), X))
  assert d.instance == "model.blocks, in every iteration of its scan"


def test_a_block_without_parameters_is_named_by_its_order(hook):
  @jax.custom_vjp
  def act(x):
    return jnp.tanh(x)
  act.defvjp(lambda x: (jnp.tanh(x), x),   # right only when the features are last
             lambda x, g: ((g * (1 - jnp.tanh(x) ** 2)).reshape(-1, D),))

  class Act(nnx.Module):
    def __init__(self, flat):
      self.flat = flat

    def __call__(self, x):
      return act(x.reshape(1, -1) if self.flat else x).reshape(x.shape)

  class Acts(nnx.Module):
    def __init__(self):
      self.blocks = nnx.List([Act(i == 2) for i in range(N)])

    def __call__(self, x):
      for block in self.blocks:
        x = block(x)
      return x

  with pytest.raises(ValueError):
    nnx.grad(lambda m, x: m(x).sum(), argnums=1)(Acts(), X)
  d = vv.last()
  assert d.graph.note is None and d.graph.node(d.node).function == "act"
  assert d.instance == "act call 3 of 4"


def test_watching_the_user_call_leaves_no_monitoring_tool(hook):
  model = NModel(NBlock, 1, nnx.Rngs(0))
  with pytest.raises(ValueError):
    nnx.grad(nnx_loss)(model, X)
  assert vv.last().graph.note is None
  # While installed the hook holds one slot (its watch of JAX's entry points); the
  # user-call watcher's is free again, and the user's code has no events left.
  tools = lambda: [sys.monitoring.get_tool(i) for i in (3, 4, 5)]
  assert tools().count("vjpviz") == 1
  assert all(sys.monitoring.get_local_events(i, nnx_loss.__code__) == 0 for i in (3, 4, 5))
  vv.uninstall()
  assert tools() == [None, None, None]


# --------------------------------------------------------------------- linen

class LBlock(nn.Module):
  bad: bool = False

  @nn.compact
  def __call__(self, x):
    w = self.param("w", nn.initializers.ones, w_shape(self.bad))
    return scale(nn.Dense(D)(x), w)


class LModel(nn.Module):
  block: type = LBlock
  bad: int = 1

  @nn.compact
  def __call__(self, x):
    for i in range(N):
      x = self.block(bad=i == self.bad, name=f"blocks_{i}")(x)
    return x


@pytest.mark.parametrize("block", [LBlock, nn.remat(LBlock), nn.jit(LBlock)],
                         ids=["apply", "remat", "jit"])
def test_linen_names_the_broken_block(hook, block):
  model = LModel(block=block, bad=2)
  params = model.init(jax.random.key(0), X)
  d = diagnosed(lambda: jax.grad(lambda p: model.apply(p, X).sum())(params))
  assert d.instance == "p['params']['blocks_2']"


def test_linen_scan_over_layers_fails_in_every_iteration(hook):
  class Step(nn.Module):
    @nn.compact
    def __call__(self, c, _):
      return LBlock(bad=True)(c), None

  class Scanned(nn.Module):
    @nn.compact
    def __call__(self, x):
      return nn.scan(Step, variable_axes={"params": 0}, split_rngs={"params": True},
                     length=N)(name="layers")(x, None)[0]

  model = Scanned()
  params = model.init(jax.random.key(0), X)
  d = diagnosed(lambda: jax.grad(lambda p: model.apply(p, X).sum())(params))
  assert d.instance == "p['params']['layers']['LBlock_0'], in every iteration of its scan"


# ------------------------------------------------------------------ equinox

class EBlock(eqx.Module):
  lin: eqx.nn.Linear
  w: jax.Array

  def __init__(self, bad, key):
    self.lin = eqx.nn.Linear(D, D, key=key)
    self.w = jnp.ones(w_shape(bad))

  def __call__(self, x):
    return scale(jax.vmap(self.lin)(x), self.w)


class EModel(eqx.Module):
  layers: list

  def __init__(self, bad, key):
    self.layers = [EBlock(i == bad, k) for i, k in enumerate(jax.random.split(key, N))]

  def __call__(self, x):
    for layer in self.layers:
      x = layer(x)
    return x


def eqx_loss(model, x):
  return model(x).sum()


@pytest.mark.parametrize("transform", ["filter_grad", "filter_value_and_grad", "filter_jit"])
def test_equinox_names_the_broken_layer(hook, transform):
  grad = {"filter_grad": eqx.filter_grad(eqx_loss),
          "filter_value_and_grad": eqx.filter_value_and_grad(eqx_loss),
          "filter_jit": eqx.filter_jit(eqx.filter_grad(eqx_loss))}[transform]
  d = diagnosed(lambda: grad(EModel(3, jax.random.key(0)), X))
  assert d.instance == "model.layers[3]"


def test_equinox_filter_vmap_names_the_broken_layer(hook):
  def batched(model, xs):
    return eqx.filter_vmap(eqx_loss, in_axes=(None, 0))(model, xs).sum()
  d = diagnosed(lambda: eqx.filter_grad(batched)(EModel(1, jax.random.key(0)),
                                                 jnp.ones((3, 2, D))))
  assert d.instance == "model.layers[1]"
  # filter_vmap's wrapper called the user's eqx_loss: it is no scope above it.
  assert {n.scope.split("/")[0] for n in d.graph.nodes} == {"", "eqx_loss"}


def test_one_free_monitoring_slot_serves_every_watcher(hook):
  """A transform's forward pass (the user's call behind eqx.filter_grad) and a library
  rule's fwd inside it (the user's spelling of filter_custom_vjp's inputs) are watched
  through one tool slot: with a single one free (a profiler holds the rest), both see."""
  from test_library_rules import _model, run
  arguments.clear()
  held = [i for i in (3, 4, 5) if sys.monitoring.get_tool(i) is None][1:]
  for i in held:
    sys.monitoring.use_tool_id(i, "a profiler")
  try:
    with pytest.raises(ValueError):
      eqx.filter_grad(lambda m: run(m, jnp.ones(3)).sum())(_model())
  finally:
    for i in held:
      sys.monitoring.free_tool_id(i)
  d = vv.last()
  assert d.argument == "model.layers[2].weight"
  assert d.graph.note is None and d.graph.nodes


def test_a_scan_over_stacked_weights_is_named_by_them_not_by_the_whole_argument(hook):
  """The rule's nearest input is one stacked array of a dict of parameters: the instance
  is that array, not the dict holding it and the model's other weights."""
  def loss(p, x):
    def body(h, w):
      return scale(h, w), None
    return jax.lax.scan(body, x @ p["w_in"], p["ws"])[0].sum()

  p = {"w_in": jnp.ones((D, D)), "ws": jnp.ones((N, *w_shape(True)))}
  d = diagnosed(lambda: jax.grad(loss)(p, X))
  assert d.instance == "p['ws'], in every iteration of its scan"


# ------------------------------------------------- data added nearer than the weights

@jax.custom_vjp
def act(z):
  return jnp.tanh(z)


act.defvjp(lambda z: (jnp.tanh(z), z), lambda z, g: ((1 - jnp.tanh(z) ** 2) * g[None],))


def _scan_lax(xs):
  def loss(ws, h0, xs):
    def cell(h, inp):
      w, x = inp
      h = act(h @ w + x)
      return h, h.sum()
    h, ys = jax.lax.scan(cell, h0, (ws, xs))
    return h.sum() + ys.sum()
  return lambda: jax.grad(loss, argnums=(0, 1))(jnp.ones((N, D, D)), jnp.zeros(D), xs)


def _scan_nnx(xs):
  class Stack(nnx.Module):
    def __init__(self, rngs):
      @nnx.split_rngs(splits=N)
      @nnx.vmap(in_axes=(0,), out_axes=0)
      def make(rngs):
        return nnx.Linear(D, D, rngs=rngs)
      self.blocks = make(rngs)

    def __call__(self, xs):
      @nnx.scan(in_axes=(nnx.Carry, 0, 0), out_axes=nnx.Carry)
      def body(h, block, x):
        return act(block(h) + x)
      return body(jnp.zeros(D), self.blocks, xs)

  return lambda: nnx.grad(nnx_loss)(Stack(nnx.Rngs(0)), xs)


def _scan_linen(xs):
  class Step(nn.Module):
    @nn.compact
    def __call__(self, h, x):
      h = act(nn.Dense(D)(h) + x)
      return h, None

  class Scanned(nn.Module):
    @nn.compact
    def __call__(self, xs):
      return nn.scan(Step, variable_axes={"params": 0}, split_rngs={"params": True},
                     in_axes=0)(name="layers")(jnp.zeros(D), xs)[0]

  model = Scanned()
  params = model.init(jax.random.key(0), xs)
  return lambda: jax.grad(lambda p, xs: model.apply(p, xs).sum())(params, xs)


@pytest.mark.parametrize("run, instance", [
    (_scan_lax, "ws, in every iteration of its scan"),
    (_scan_nnx, "model.blocks, in every iteration of its scan"),
    (_scan_linen, "p['params']['layers']['Dense_0'], in every iteration of its scan")],
    ids=["lax", "nnx", "linen"])
def test_a_scanned_rule_with_the_data_added_nearer_is_named_by_the_weights(hook, run, instance):
  """``act(h @ w + x)`` in a scan over the layers' weights and the data: the data ``x`` is
  the rule's nearest input and the carried state ``h`` as near as ``w``, but both are the
  same in every layer: the instance is the scanned weights."""
  with pytest.raises(ValueError):
    run(jnp.ones((N, D)))()
  d = vv.last()
  assert (d.kind, d.function) == ("bwd_type", "act")
  assert d.graph.node(d.node).function == "act"
  assert d.instance == instance
  assert f"(in {instance})" in d.headline
