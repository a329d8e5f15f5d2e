"""vv.watch(step, flow=True): each block's output cotangent measured inside the compiled
step, against an independent computation (the model split at its blocks by hand, jax.vjp
of each piece), on equinox, flax linen and flax nnx training loops (optax); the first
non-finite block named on a model whose gradient goes NaN, and handed to vv.nans."""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_helpers import validator

from jupyter_vjpviz.api.watch import watch
from jupyter_vjpviz.capture import flow_taps

optax = pytest.importorskip("optax")
pytestmark = pytest.mark.skipif(not flow_taps.AVAILABLE, reason="needs defvjp_with_logs")

KEY = jax.random.key(0)
X = jax.random.normal(KEY, (16, 5))
Y = jax.random.normal(jax.random.key(1), (16, 2))


def _loss(out):
  return ((out - Y) ** 2).mean()


def _expected(pieces) -> list[dict]:
  """Per piece (a block: its output from its input), the cotangent of its output, by
  ``jax.vjp`` of each piece in turn from the loss back: norm, max |.|, fractions."""
  h, pulls = X, []
  for piece in pieces:
    h, pull = jax.vjp(piece, h)
    pulls.append(pull)
  ct, found = jax.grad(_loss)(h), []
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


def test_equinox_flow_equals_each_blocks_vjp():
  eqx = pytest.importorskip("equinox")
  model = eqx.nn.MLP(5, 2, 8, 3, key=KEY)
  opt = optax.adam(1e-2)

  @eqx.filter_jit
  def step(model, state):
    loss, g = eqx.filter_value_and_grad(lambda m: _loss(jax.vmap(m)(X)))(model)
    updates, state = opt.update(g, state, model)
    return eqx.apply_updates(model, updates), state, loss
  w, state, seen = watch(step, flow=True), opt.init(eqx.filter(model, eqx.is_array)), []
  for _ in range(2):
    seen.append(model)
    model, state, _ = w(model, state)
  assert w.flow_note is None
  for t, m in enumerate(seen):
    pieces = [jax.vmap(lambda h, lin=lin: jax.nn.relu(lin(h))) for lin in m.layers[:-1]]
    _check(w.flow(), [f".layers[{i}]" for i in range(4)],
           _expected([*pieces, jax.vmap(m.layers[-1])]), t)
  assert "every block's cotangent finite" in str(w)


def test_linen_flow_equals_each_blocks_vjp_and_names_its_scopes():
  nn = pytest.importorskip("flax.linen")

  class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
      for _ in range(2):
        x = nn.relu(nn.Dense(8)(x))
      return nn.Dense(2)(x)
  net, opt = MLP(), optax.sgd(1e-2)
  params = net.init(KEY, X)

  @jax.jit
  def step(params, state):
    loss, g = jax.value_and_grad(lambda p: _loss(net.apply(p, X)))(params)
    updates, state = opt.update(g, state)
    return optax.apply_updates(params, updates), state, loss
  w = watch(step, flow=True)
  w(params, opt.init(params))
  dense = lambda i: (lambda h: nn.Dense(8 if i < 2 else 2).apply(
      {"params": params["params"][f"Dense_{i}"]}, h))
  pieces = [lambda h, i=i: jax.nn.relu(dense(i)(h)) for i in range(2)] + [dense(2)]
  _check(w.flow(), [f"MLP/Dense_{i}" for i in range(3)], _expected(pieces))


def test_nnx_flow_names_blocks_as_the_live_module():
  nnx = pytest.importorskip("flax.nnx")

  class MLP(nnx.Module):
    def __init__(self, rngs):
      self.layers = nnx.List([nnx.Linear(5 if i == 0 else 8, 8, rngs=rngs) for i in range(3)])
      self.out = nnx.Linear(8, 2, rngs=rngs)

    def __call__(self, x):
      for layer in self.layers:
        x = nnx.relu(layer(x))
      return self.out(x)
  model = MLP(nnx.Rngs(0))
  optimizer = nnx.Optimizer(model, optax.sgd(1e-2), wrt=nnx.Param)
  relu = lambda lin: (lambda h: jax.nn.relu(lin(h)))
  expected = _expected([*(relu(nnx.clone(lin)) for lin in model.layers), nnx.clone(model.out)])

  @nnx.jit
  def step(model, optimizer):
    loss, g = nnx.value_and_grad(lambda m: _loss(m(X)))(model)
    optimizer.update(model, g)
    return loss
  w = watch(step, flow=True)
  w(model, optimizer)
  _check(w.flow(), [".layers[0]", ".layers[1]", ".layers[2]", ".out"], expected)


def test_the_first_nonfinite_block_is_named_and_handed_to_nans(capsys):
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
