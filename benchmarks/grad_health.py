"""vv.grads on a corpus of real zero-gradient patterns, and vv.watch's overhead.

Part 1 prints, per program, the zero-gradient reason expected for one named leaf (or
the layer flag / partly-zero unit expected) against the one ``vv.grads`` found, and a
final count. Part 2 times three training loops (optax with equinox, flax linen, flax
nnx) wrapped by ``vv.watch`` against the same step unwrapped, interleaved in one
process: the median of per-round ratios (target <= 1.05).

    PYTHONPATH=$PWD python benchmarks/grad_health.py [--corpus | --watch [WIDTH ...]]
"""
from __future__ import annotations

import statistics
import sys
import time

import jax
import jax.numpy as jnp

from jupyter_vjpviz.grads import grads
from jupyter_vjpviz.watch import watch

KEY = jax.random.PRNGKey(0)


def _dense(key, n, m, scale=1.0):
  return jax.random.normal(key, (n, m)) * scale / n ** 0.5


def unused_head():
  p = {"trunk": _dense(KEY, 8, 8), "head": _dense(KEY, 8, 2), "aux_head": _dense(KEY, 8, 2)}
  return (lambda p, x: (jnp.tanh(x @ p["trunk"]) @ p["head"]).sum()), p, "['aux_head']", "unused"


def frozen_encoder():
  p = {"encoder": _dense(KEY, 8, 8), "decoder": _dense(KEY, 8, 1)}
  return (lambda p, x: (jax.lax.stop_gradient(jnp.tanh(x @ p["encoder"])) @ p["decoder"]).sum(),
          p, "['encoder']", "stopped")


def integer_path():
  p = {"bins": jnp.linspace(0, 3, 8), "w": jnp.ones(8)}
  return (lambda p, x: (p["bins"].astype(jnp.int32) * p["w"] * x[0, :8]).sum()), p, "['bins']", \
      "non_differentiable"


def quantised_weights():
  p = {"w": jax.random.normal(KEY, (8, 4))}
  return (lambda p, x: (x @ jnp.round(p["w"] * 4) / 4).sum()), p, "['w']", "non_differentiable"


def dead_relu_layer():
  p = {"w1": _dense(KEY, 8, 8), "b1": -100.0 * jnp.ones(8), "w2": _dense(KEY, 8, 1)}
  return (lambda p, x: (jax.nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"]).sum()), p, "['w2']", "dead"


def saturated_gate():
  p = {"gate": 50.0 * jnp.ones((8, 8)), "value": _dense(KEY, 8, 8)}
  return (lambda p, x: (jax.nn.sigmoid(jnp.abs(x) @ p["gate"] + 20.0) * (x @ p["value"])).sum(),
          p, "['gate']", "saturated")


def bf16_underflow():
  p = {"w": jnp.ones((8, 8), jnp.bfloat16)}
  return (lambda p, x: (x.astype(jnp.bfloat16) @ p["w"] * jnp.bfloat16(1e-30)
                        * jnp.bfloat16(1e-30)).astype(jnp.float32).sum()), p, "['w']", "underflow"


def vanishing_tanh_stack():
  ws = [3.0 * jnp.eye(8) for _ in range(6)]

  def deep(ws, x):
    x = jnp.abs(x) + 1.0        # positive inputs: every block in tanh's flat tail
    for w in ws:
      x = jnp.tanh(x @ w)
    return x.sum()
  return deep, ws, "[0]", "layer: vanishing"


def exploding_residual_stack():
  ws = [30.0 * jnp.eye(8) for _ in range(6)]

  def deep(ws, x):
    for w in ws:
      x = x + jnp.sin(x @ w)    # bounded branch, Jacobian I + 30 cos(.): |ct| grows per block
    return x.sum()
  return deep, ws, "[0]", "layer: exploding"


def unused_embedding_rows():
  p = {"emb": jax.random.normal(KEY, (32, 8)), "out": _dense(KEY, 8, 1)}
  ids = jnp.array([1, 5, 5, 9])
  return (lambda p, x: (p["emb"][ids] @ p["out"]).sum()), p, "['emb']", "partly: not gathered"


def custom_rule_zeros():
  @jax.custom_vjp
  def straight(x):
    return jnp.sign(x)
  straight.defvjp(lambda x: (jnp.sign(x), None), lambda _, g: (jnp.zeros_like(g),))
  p = {"w": jax.random.normal(KEY, (8, 4))}
  return (lambda p, x: (x @ straight(p["w"])).sum()), p, "['w']", "rule_zero"


def equinox_model():
  import equinox as eqx

  class Net(eqx.Module):
    body: eqx.nn.Linear
    probe: eqx.nn.Linear

    def __call__(self, x):
      return self.body(x).sum()
  net = Net(eqx.nn.Linear(8, 8, key=KEY), eqx.nn.Linear(8, 1, key=KEY))
  return (lambda m, x: jax.vmap(m)(x).sum()), net, ".probe.weight", "unused"


def flax_model():
  import flax.linen as nn

  class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
      h = nn.relu(nn.Dense(8, name="hidden", bias_init=nn.initializers.constant(-100.0))(x))
      return nn.Dense(1, name="out")(h).sum()
  net = Net()
  params = net.init(KEY, jnp.ones((4, 8)))
  return (lambda p, x: net.apply(p, x)), params, "['params']['out']['kernel']", "dead"


def nnx_model():
  from flax import nnx

  class Net(nnx.Module):
    def __init__(self, rngs):
      self.body, self.head = nnx.Linear(8, 8, rngs=rngs), nnx.Linear(8, 1, rngs=rngs)

    def __call__(self, x):
      return jax.lax.stop_gradient(self.body(x)).sum() + self.head(x).sum()
  graphdef, state = nnx.split(Net(nnx.Rngs(0)))
  return (lambda s, x: nnx.merge(graphdef, s)(x)), state, "['body']['kernel'].value", "stopped"


CORPUS = [unused_head, frozen_encoder, integer_path, quantised_weights, dead_relu_layer,
          saturated_gate, bf16_underflow, vanishing_tanh_stack, exploding_residual_stack,
          unused_embedding_rows, custom_rule_zeros, equinox_model, flax_model, nnx_model]


def found_for(report, path: str, expected: str) -> str:
  if expected.startswith("layer"):
    layer = next((l for l in report.layers if l.name == path), None)
    return f"layer: {layer.flag}" if layer else "no layer"
  if expected.startswith("partly"):
    part = next((p for p in report.partly_zero if p.path == path), None)
    return f"partly: {part.reason}" if part else "none"
  zero = next((z for z in report.zero if z.path == path), None)
  return zero.reason if zero else "has a gradient"


def corpus() -> None:
  x = jax.random.normal(jax.random.PRNGKey(1), (4, 8))
  print(f"{'program':<26} {'leaf':<30} {'expected':<22} {'found':<22} s")
  right = 0
  for make in CORPUS:
    fn, params, path, expected = make()
    t0 = time.perf_counter()
    report = grads(fn, params, x)
    seconds = time.perf_counter() - t0
    found = found_for(report, path, expected)
    right += found == expected
    print(f"{make.__name__:<26} {path:<30} {expected:<22} {found:<22} {seconds:.2f}"
          f"{'' if found == expected else '  ✖'}")
  print(f"{right}/{len(CORPUS)} as expected")


# ------------------------------------------------------------------ watch overhead


def _equinox_loop(width: int):
  import equinox as eqx
  import optax
  model = eqx.nn.MLP(64, 8, width, 3, key=KEY)
  opt = optax.adam(1e-3)
  state = opt.init(eqx.filter(model, eqx.is_array))
  x, y = jax.random.normal(KEY, (256, 64)), jnp.zeros((256, 8))

  @eqx.filter_jit
  def step(model, state):
    loss, g = eqx.filter_value_and_grad(lambda m: ((jax.vmap(m)(x) - y) ** 2).mean())(model)
    updates, state = opt.update(g, state, model)
    return eqx.apply_updates(model, updates), state, loss
  return step, (model, state)


def _linen_loop(width: int):
  import flax.linen as nn
  import optax

  class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
      for _ in range(3):
        x = nn.relu(nn.Dense(width)(x))
      return nn.Dense(8)(x)
  net, opt = MLP(), optax.adam(1e-3)
  x, y = jax.random.normal(KEY, (256, 64)), jnp.zeros((256, 8))
  params = net.init(KEY, x)
  state = opt.init(params)

  @jax.jit
  def step(params, state):
    loss, g = jax.value_and_grad(lambda p: ((net.apply(p, x) - y) ** 2).mean())(params)
    updates, state = opt.update(g, state, params)
    return optax.apply_updates(params, updates), state, loss
  return step, (params, state)


def _nnx_loop(width: int):
  import optax
  from flax import nnx

  class MLP(nnx.Module):
    def __init__(self, rngs):
      self.layers = nnx.List([nnx.Linear(64 if i == 0 else width, width, rngs=rngs)
                              for i in range(3)])
      self.out = nnx.Linear(width, 8, rngs=rngs)

    def __call__(self, x):
      for layer in self.layers:
        x = nnx.relu(layer(x))
      return self.out(x)
  graphdef, params = nnx.split(MLP(nnx.Rngs(0)))
  opt = optax.adam(1e-3)
  state = opt.init(params)
  x, y = jax.random.normal(KEY, (256, 64)), jnp.zeros((256, 8))

  @jax.jit
  def step(params, state):
    loss, g = jax.value_and_grad(lambda p: ((nnx.merge(graphdef, p)(x) - y) ** 2).mean())(params)
    updates, state = opt.update(g, state, params)
    return optax.apply_updates(params, updates), state, loss
  return step, (params, state)


def _time(step, carry, n: int) -> float:
  t0 = time.perf_counter()
  for _ in range(n):
    *carry, loss = step(*carry)
  jax.block_until_ready(loss)
  return (time.perf_counter() - t0) / n


def watch_overhead(width: int, rounds: int = 7, n: int = 30) -> None:
  """Three 3-hidden-layer MLPs of ``width`` on a batch of 256, adam."""
  print(f"{'loop':<10} {'width':>6} {'step ms':>8} {'watched ms':>11} {'ratio':>6}")
  for name, make in (("equinox", _equinox_loop), ("linen", _linen_loop), ("nnx", _nnx_loop)):
    step, carry = make(width)
    watched = watch(step)
    _time(step, carry, 2), _time(watched, carry, 2)    # compile both outside the timing
    plain, wrapped = [], []
    for _ in range(rounds):
      plain.append(_time(step, carry, n))
      wrapped.append(_time(watched, carry, n))
      _ = watched.steps   # what a user reading the record pays, once per round
    ratio = statistics.median(b / a for a, b in zip(plain, wrapped))
    print(f"{name:<10} {width:>6} {statistics.median(plain) * 1e3:8.2f} "
          f"{statistics.median(wrapped) * 1e3:11.2f} {ratio:6.3f}")


if __name__ == "__main__":
  which = sys.argv[1:] or ["--corpus", "--watch"]
  if "--corpus" in which:
    corpus()
  if "--watch" in which:
    for width in [int(w) for w in which if w.isdigit()] or [256]:
      watch_overhead(width)
