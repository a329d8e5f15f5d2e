"""vv.watch(step, flow=True): each block's output cotangent measured inside the compiled
step, against an independent computation (the model split at its blocks by hand, jax.vjp
of each piece), on the benchmark's equinox, flax linen and flax nnx loops; the first
non-finite block named on a model whose gradient goes NaN, and handed to vv.nans."""
from __future__ import annotations

import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_helpers import validator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import watch_overhead  # noqa: E402 - the benchmark's loops

from jupyter_vjpviz.analysis.values import flow as values_flow
import jupyter_vjpviz as vv
from jupyter_vjpviz.api.watch import watch
from jupyter_vjpviz.capture import cpu_kernels, flow_taps



@pytest.fixture(params=["logs", "sinks", "kernels"])
def channel(request, monkeypatch):
  """The backward-pass channel the taps use: JAX's logs (0.12.1), or the sinks older JAX
  has (forced here where JAX has both); and the summaries and norms by the CPU kernels
  (``kernels``: the channel this JAX has; this process has several devices, where the
  watch would keep XLA's reductions, but each step here runs on one)."""
  if request.param == "logs" and not flow_taps.AVAILABLE:
    pytest.skip("this JAX has no defvjp_with_logs")
  if request.param == "sinks":
    monkeypatch.setattr(flow_taps, "AVAILABLE", False)
  traced = []   # the kernels' calls traced into a step
  if request.param == "kernels":
    if cpu_kernels.built() is not None:
      pytest.skip(f"no CPU kernels here: {cpu_kernels.built()}")
    monkeypatch.setattr(cpu_kernels, "usable", lambda: traced.append(True) or True)
    for name in ("summary", "squared_norms"):
      real = getattr(cpu_kernels, name)
      monkeypatch.setattr(cpu_kernels, name,
                          lambda *a, real=real: (traced.append(real), real(*a))[1])
  yield request.param
  assert not traced or len(set(traced)) == 3   # a step traced (a test skipped traces none)

KEY = jax.random.key(0)
X = jax.random.normal(KEY, (16, 5))
Y = jax.random.normal(jax.random.key(1), (16, 2))
WIDTH = 16   # the benchmark's models, narrower


def _loss(out, y=Y):
  return ((out - y) ** 2).mean()


def _expected(pieces, x=X, y=Y, head=lambda h: h) -> list[dict]:
  """Per piece (a block: its output from its input), the cotangent of its output, by
  ``jax.vjp`` of each piece in turn from the loss (of ``head`` of the last) back: norm,
  max |.|, fractions."""
  h, pulls = x, []
  for piece in pieces:
    h, pull = jax.vjp(piece, h)
    pulls.append(pull)
  ct, found = jax.grad(lambda h: _loss(head(h), y))(h), []
  for pull in reversed(pulls):
    found.append(ct)
    ct, = pull(ct)
  return [{"norm": float(jnp.linalg.norm(c)), "max_abs": float(jnp.abs(c).max()),
           "finite_fraction": float(jnp.isfinite(c).mean()),
           "zero_fraction": float((c == 0).mean())} for c in reversed(found)]


def _check(rows: list[dict], blocks: list[str], expected: list[dict], step: int = 0):
  got = [r for r in rows if r["step"] == step]
  assert [r["block"] for r in got] == blocks
  for r, e in zip(got, expected):
    for k, v in e.items():
      assert r[k] == pytest.approx(v, rel=1e-5, abs=1e-12), (r["block"], k)


def _relu_of(layer):
  return lambda h: jax.nn.relu(layer(h))


def _equinox_pieces(model) -> list:
  return [*(jax.vmap(_relu_of(lin)) for lin in model.layers[:-1]), jax.vmap(model.layers[-1])]


def _linen_pieces(params) -> list:
  """Each Dense by hand (``h @ kernel + bias``), a ReLU after all but the last."""
  dense = [lambda h, p=p: h @ p["kernel"] + p["bias"] for p in params["params"].values()]
  return [*(_relu_of(d) for d in dense[:-1]), dense[-1]]


def _nnx_pieces(model) -> list:
  nnx = pytest.importorskip("flax.nnx")
  return [*(_relu_of(nnx.clone(lin)) for lin in model.layers), nnx.clone(model.out)]


LOOPS = {"equinox": (_equinox_pieces, [f".layers[{i}]" for i in range(4)]),
         "linen": (_linen_pieces, [f"MLP/Dense_{i}" for i in range(4)]),
         "nnx": (_nnx_pieces, [".layers[0]", ".layers[1]", ".layers[2]", ".out"])}


@pytest.mark.parametrize("name", list(LOOPS))
def test_flow_equals_each_blocks_vjp_on_the_benchmarks_loops(name, channel):
  """Two steps of benchmarks/watch_overhead.py's loop (adam, batch 256): each block's
  output cotangent, per step, equals jax.vjp of the model split at its blocks by hand,
  on the model as that step was called with it."""
  pytest.importorskip("optax")
  pytest.importorskip({"equinox": "equinox", "linen": "flax.linen", "nnx": "flax.nnx"}[name])
  step, run = watch_overhead.LOOPS[name](WIDTH)
  pieces, blocks = LOOPS[name]
  w, x, y = watch(step, flow=True), *watch_overhead._data()
  for t in range(2):
    expected = _expected(pieces(run.carry[0]), x, y)
    run(w)
    assert w.flow_note is None
    _check(w.flow(), blocks, expected, t)
  assert "every block's cotangent finite" in str(w)


def test_a_plain_jax_stack_of_layers_on_every_jax(channel):
  """No library: a dict of three alike layers in a Python loop, sgd by hand under
  jax.jit; its blocks are the stacked model's (``['layers'][i]``), each row equal to
  jax.vjp of its layer; the last block's output is what its last equation reading its
  parameters makes (the tanh after it is the loss's: nothing tells them apart). Runs on
  the older JAX releases too (the sinks)."""
  k = jax.random.split(KEY, 3)
  params = {"layers": [{"w": jax.random.normal(k[i], (5 if i == 0 else 8, 8 if i < 2 else 2)),
                        "b": jnp.full((8 if i < 2 else 2,), 0.1)} for i in range(3)]}
  layer = lambda p: (lambda h: jnp.tanh(h @ p["w"] + p["b"]))

  def forward(params, h):
    for p in params["layers"]:
      h = layer(p)(h)
    return h

  @jax.jit
  def step(params):
    loss, g = jax.value_and_grad(lambda p: _loss(forward(p, X)))(params)
    return jax.tree_util.tree_map(lambda p, d: p - 0.1 * d, params, g), loss
  w = watch(step, flow=True)
  for t in range(2):
    last = params["layers"][-1]
    expected = _expected([*(layer(p) for p in params["layers"][:-1]),
                          lambda h: h @ last["w"] + last["b"]], head=jnp.tanh)
    params, _ = w(params)
    _check(w.flow(), [f"['layers'][{i}]" for i in range(3)], expected, t)


def test_the_first_nonfinite_block_is_named_and_handed_to_nans(capsys, channel):
  """z + sqrt(0 * z) in the middle block: forward finite, its backward 0 * inf = NaN. The
  middle block's output cotangent is finite, the first block's is not: the flow names the
  middle block as where it was made, and vv.nans on that step names the sqrt."""
  eqx = pytest.importorskip("equinox")

  class Root(eqx.Module):
    lin: eqx.nn.Linear

    def __call__(self, h):
      z = self.lin(h)
      return z + jnp.sqrt(z * 0.0)

  class Net(eqx.Module):
    layers: list

    def __call__(self, x):
      for layer in self.layers:
        x = layer(x)
      return x
  k = jax.random.split(KEY, 3)
  model = Net([eqx.nn.Linear(5, 8, key=k[0]), Root(eqx.nn.Linear(8, 8, key=k[1])),
               eqx.nn.Linear(8, 2, key=k[2])])

  @eqx.filter_jit
  def step(model):
    loss, g = eqx.filter_value_and_grad(lambda m: _loss(jax.vmap(m)(X)))(model)
    return jax.tree_util.tree_map(lambda p, d: p - 1e-3 * d, model, g), loss
  w = watch(step, flow=True)
  w(model)
  first = w.flow_nonfinite()
  assert first == (0, ".layers[0]", ".layers[1]")
  rows = {r["block"]: r for r in w.flow()}
  assert rows[".layers[1]"]["finite_fraction"] == 1.0 > rows[".layers[0]"]["finite_fraction"]
  assert "non-finite at .layers[0]'s output: made in .layers[1]" in str(w)
  flow = w.series()["flow"]   # the panel's WatchFlow: the NaN block's norm is null
  validator("WatchMessage").validate(json.loads(json.dumps(
      {"v": 1, "type": "watch", "watch": w.series()})))
  assert flow["blocks"] == [".layers[0]", ".layers[1]", ".layers[2]"] and flow["note"] is None
  assert flow["norm"][0] == [None] and flow["finite_fraction"][1] == [1.0]
  d = w.nans(0)
  assert d is not None and "sqrt" in d.headline
  assert "made in .layers[1]" in capsys.readouterr().out


def test_a_gradient_taken_inside_the_loss_is_not_tapped_too(channel):
  """A gradient penalty: the loss takes jax.grad of its own; only the step's gradient is
  tapped (the inner one, traced inside it, is left as written), and its rows are right."""
  w0, w1 = jax.random.normal(KEY, (5, 8)), jax.random.normal(jax.random.key(2), (8, 2))
  head = lambda h, w1: (h @ w1) ** 2 / 2   # h read by block ['b'] alone

  def loss(p):
    h = X @ p["a"]["w"]
    penalty = jnp.sum(jax.grad(lambda h: head(h, p["b"]["w"]).sum())(h) ** 2)
    return _loss(head(h, p["b"]["w"])) + 1e-3 * penalty

  @jax.jit
  def step(p):
    value, g = jax.value_and_grad(loss)(p)
    return g, value
  w = watch(step, flow=True)
  w({"a": {"w": w0}, "b": {"w": w1}})
  assert w.flow_note is None and w.flow_blocks == ["['a']", "['b']"]
  after_a = lambda h: _loss(head(h, w1)) + 1e-3 * jnp.sum(
      jax.grad(lambda h: head(h, w1).sum())(h) ** 2)
  ct = jax.grad(after_a)(X @ w0)   # the cotangent of ['a']'s output, by hand
  assert w.flow()[0]["norm"] == pytest.approx(float(jnp.linalg.norm(ct)), rel=1e-5)


def test_an_aux_that_is_not_arrays_comes_back_as_it_was(channel):
  """eqx.filter_value_and_grad(has_aux=True) whose aux holds a name and a count: the
  tapped function returns them as the user's does."""
  eqx = pytest.importorskip("equinox")
  model = eqx.nn.MLP(5, 2, 4, 2, key=KEY)

  @eqx.filter_jit
  def step(m):
    (loss, aux), g = eqx.filter_value_and_grad(
        lambda m: (_loss(jax.vmap(m)(X)), {"name": "mse", "n": 3}), has_aux=True)(m)
    return loss, aux
  w = watch(step, flow=True)
  assert w(model)[1] == {"name": "mse", "n": 3}
  assert w.flow_note is None and len(w.flow_blocks) == 3


def test_where_vjpviz_cannot_place_its_taps_the_step_runs_as_written(monkeypatch):
  """vjpviz's own failure choosing the taps: the step's outputs and gradient are as
  without the flow, and the watch says it could not check, and why."""
  def broken(*args):
    raise RuntimeError("a bug of vjpviz's")
  monkeypatch.setattr(values_flow, "_outputs", broken)

  @jax.jit
  def step(p):
    value, g = jax.value_and_grad(lambda p: _loss(jnp.tanh(X @ p["a"]) @ p["b"]))(p)
    return g, value
  p = {"a": jnp.ones((5, 3)) / 5, "b": jnp.ones((3, 2))}
  w = watch(step, flow=True)
  got, want = w(p), step(p)
  assert jax.tree_util.tree_all(jax.tree_util.tree_map(
      lambda a, b: bool(jnp.allclose(a, b, rtol=1e-6)), got, want))
  assert w.flow() == [] and "a bug of vjpviz's" in w.flow_note
  assert "backward flow: could not check: vjpviz could not place its taps" in str(w)


def test_flow_off_leaves_the_row_as_it_was_and_a_step_without_blocks_says_so():
  @jax.jit
  def step(p):
    loss, g = jax.value_and_grad(lambda p: jnp.sum(p * X[0]))(p)
    return p - g, loss
  plain, tapped = watch(step), watch(step, flow=True)
  p = jnp.ones(5)
  plain(p)
  tapped(p)
  assert plain.flow() == [] and plain.steps.shape == (1, 1)
  assert tapped.steps.shape == (1, 1) and np.allclose(plain.steps, tapped.steps)
  assert len(tapped.flow()) == 1 and tapped.flow()[0]["block"] == ""


@pytest.mark.parametrize("extra", [[], [jnp.inf], [jnp.nan, -jnp.inf], [3e30]])
def test_a_taps_summary_counts_exactly(extra):
  """The tap's summary, inside a compiled function, equals JAX's own op-by-op counts:
  zeros (and -0.0) and numbers of every size counted as what they are (a subnormal as
  JAX's ``== 0`` on this backend counts it: XLA:CPU flushes it to zero), on the
  vectorised path (all finite) and the exact one (non-finite, or a sum of squares that
  overflows)."""
  values = np.array([0.0, -0.0, 1e-45, -2.5, 1e-30, 7.0, 0.0, 1e15, *extra], np.float32)
  x = jnp.asarray(np.resize(values, (5, 7)))
  got = np.asarray(jax.jit(flow_taps.summary)(x))
  want = np.asarray(x)
  zeros = int(jnp.sum(x == 0))
  assert 0 < zeros and got[2:] == pytest.approx([np.isfinite(want).sum(), zeros, want.size])
  assert got[:2] == pytest.approx(
      [float(jnp.sum(x * x)), float(jnp.abs(x).max())], rel=1e-5, nan_ok=True)


def test_the_nonzero_indicator_is_xlas_own_on_every_exponent():
  """The tap's fused nonzero indicator equals XLA's ``x != 0`` on float32 numbers of
  every exponent (both signs, subnormals, the largest finite), compiled as in a step."""
  bits = np.concatenate([np.arange(0, 0x7F800000, 99991, dtype=np.uint32),
                         np.arange(0, 2048, dtype=np.uint32), np.arange(
                             0x00800000 - 1024, 0x00800000 + 1024, dtype=np.uint32),
                         np.array([0x7F7FFFFF], np.uint32)])
  x = jnp.asarray(np.concatenate([bits.view(np.float32), -bits.view(np.float32)]))
  got, want = jax.jit(lambda x: (flow_taps._nonzero(x), x != 0))(x)
  assert np.array_equal(np.asarray(got), np.asarray(want).astype(np.float32))


@pytest.mark.parametrize("reverse", [False, True])
def test_a_stack_of_layers_under_lax_scan_has_a_row_per_layer(channel, reverse):
  """A residual stack of four layers applied by lax.scan over stacked parameters (one
  equation in the step): one block per layer, named by its slice (``['blocks'][2]``, in
  the order the scan applies them), each row equal to jax.vjp of that layer, the scan
  unrolled by hand; the summaries are made inside the scan's body, in the step."""
  k = jax.random.split(KEY, 3)
  params = {"embed": jax.random.normal(k[0], (5, 8)) / 3,
            "blocks": {"w": jax.random.normal(k[1], (4, 8, 8)) / 3, "b": jnp.full((4, 8), 0.1)},
            "head": jax.random.normal(k[2], (8, 2))}
  layer = lambda w, b: (lambda h: jnp.tanh(h @ w + b) + h)

  def forward(p, h):
    h, _ = jax.lax.scan(lambda h, l: (layer(l["w"], l["b"])(h), None), h @ p["embed"],
                        p["blocks"], reverse=reverse)
    return h @ p["head"]

  @jax.jit
  def step(p):
    loss, g = jax.value_and_grad(lambda p: _loss(forward(p, X)))(p)
    return jax.tree_util.tree_map(lambda a, d: a - 0.1 * d, p, g), loss
  order = [3, 2, 1, 0] if reverse else [0, 1, 2, 3]
  w = watch(step, flow=True)
  for t in range(2):
    blocks = params["blocks"]
    pieces = [lambda h, e=params["embed"]: h @ e,
              *(layer(blocks["w"][i], blocks["b"][i]) for i in order),
              lambda h, o=params["head"]: h @ o]
    expected = _expected(pieces)
    params, _ = w(params)
    assert w.flow_note is None
    _check(w.flow(), ["['embed']", *(f"['blocks'][{i}]" for i in order), "['head']"],
           expected, t)


def test_equinox_scan_over_layers_has_a_row_per_layer(channel):
  """equinox's scan-over-layers pattern (a vmapped stack of Linear layers, partitioned
  and applied by lax.scan): one row per layer (``.layers[i]``), each equal to jax.vjp of
  that layer, the scan unrolled by hand."""
  eqx = pytest.importorskip("equinox")

  class Net(eqx.Module):
    embed: eqx.nn.Linear
    layers: eqx.nn.Linear
    head: eqx.nn.Linear

    def __init__(self, key):
      k = jax.random.split(key, 3)
      self.embed = eqx.nn.Linear(5, 8, key=k[0])
      self.layers = eqx.filter_vmap(lambda k: eqx.nn.Linear(8, 8, key=k))(jax.random.split(k[1], 3))
      self.head = eqx.nn.Linear(8, 2, key=k[2])

    def __call__(self, x):
      dynamic, static = eqx.partition(self.layers, eqx.is_array)

      def body(h, d):
        return jax.nn.relu(eqx.combine(d, static)(h)), None
      h, _ = jax.lax.scan(body, self.embed(x), dynamic)
      return self.head(h)

  @eqx.filter_jit
  def step(model):
    loss, g = eqx.filter_value_and_grad(lambda m: _loss(jax.vmap(m)(X)))(model)
    return jax.tree_util.tree_map(lambda p, d: p - 1e-2 * d, model, g), loss
  model = Net(KEY)
  w = watch(step, flow=True)
  for t in range(2):
    one = lambda i, m=model: jax.tree_util.tree_map(lambda a: a[i], m.layers)
    expected = _expected([jax.vmap(model.embed), *(jax.vmap(_relu_of(one(i))) for i in range(3)),
                          jax.vmap(model.head)])
    model, _ = w(model)
    assert w.flow_note is None
    _check(w.flow(), [".embed", *(f".layers[{i}]" for i in range(3)), ".head"], expected, t)


def _linen_scanned():
  """(step, model, its layers by hand, blocks): flax linen's nn.scan over three Dense
  layers, its parameters stacked (variable_axes)."""
  nn = pytest.importorskip("flax.linen")

  class Block(nn.Module):
    @nn.compact
    def __call__(self, h, _):
      return nn.relu(nn.Dense(8)(h)), None

  class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
      h = nn.Dense(8)(x)
      h, _ = nn.scan(Block, variable_axes={"params": 0}, split_rngs={"params": True},
                     length=3)()(h, None)
      return nn.Dense(2)(h)
  net = Net()

  @jax.jit
  def step(p):
    return jax.value_and_grad(lambda p: _loss(net.apply(p, X)))(p)

  def pieces(params):
    p = params["params"]
    dense = lambda d: (lambda h: h @ d["kernel"] + d["bias"])
    stack = p["ScanBlock_0"]["Dense_0"]
    return [dense(p["Dense_0"]),
            *(_relu_of(dense(jax.tree_util.tree_map(lambda a: a[i], stack))) for i in range(3)),
            dense(p["Dense_1"])]
  blocks = ["Net/Dense_0", *(f"Net/ScanBlock_0[{i}]" for i in range(3)), "Net/Dense_1"]
  return step, net.init(jax.random.key(1), X), pieces, blocks


def _nnx_scanned():
  """The same with flax nnx: layers made by nnx.vmap, applied by nnx.scan."""
  nnx = pytest.importorskip("flax.nnx")

  class Block(nnx.Module):
    def __init__(self, rngs):
      self.lin = nnx.Linear(8, 8, rngs=rngs)

    def __call__(self, h):
      return nnx.relu(self.lin(h))

  class Net(nnx.Module):
    def __init__(self, rngs):
      self.embed = nnx.Linear(5, 8, rngs=rngs)

      @nnx.split_rngs(splits=3)
      @nnx.vmap(in_axes=(0,), out_axes=0)
      def make(rngs):
        return Block(rngs)
      self.blocks = make(rngs)
      self.head = nnx.Linear(8, 2, rngs=rngs)

    def __call__(self, x):
      @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
      def body(h, block):
        return block(h)
      return self.head(body(self.embed(x), self.blocks))

  @nnx.jit
  def step(model):
    return nnx.value_and_grad(lambda m: _loss(m(X)))(model)

  def pieces(model):
    lin = model.blocks.lin
    layer = lambda i: (lambda h: jax.nn.relu(h @ lin.kernel[...][i] + lin.bias[...][i]))
    return [nnx.clone(model.embed), *(layer(i) for i in range(3)), nnx.clone(model.head)]
  blocks = [".embed", *(f".blocks[{i}]" for i in range(3)), ".head"]
  return step, Net(nnx.Rngs(0)), pieces, blocks


@pytest.mark.parametrize("make", [_linen_scanned, _nnx_scanned], ids=["linen", "nnx"])
def test_flax_scanned_layers_have_a_row_each(make, channel):
  """flax's own scans over layers (linen nn.scan, nnx.scan of an nnx.vmap-made stack):
  one row per layer, equal to jax.vjp of each layer with the scan unrolled by hand."""
  step, model, pieces, blocks = make()
  expected = _expected(pieces(model))
  w = watch(step, flow=True)
  w(model)
  assert w.flow_note is None
  _check(w.flow(), blocks, expected)
  if make is _linen_scanned:   # the stack named as vv.grads names it (its body's scope)
    named = {layer.name for layer in vv.grads(lambda p: step(p)[0], model).layers}
    assert {b.split("[")[0] for b in blocks} == named
