"""vv.grads on a corpus of real zero-gradient patterns (vv.watch's overhead:
watch_overhead.py).

Prints, per program, the zero-gradient reason expected for one named leaf (or the layer
flag / partly-zero unit expected) against the one ``vv.grads`` found, and a final count.

    PYTHONPATH=$PWD python benchmarks/grad_health.py
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from jupyter_vjpviz.api.grads import grads

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


def named_scope_stack():
  ws = {f"w{i}": 3.0 * jnp.eye(8) for i in range(4)}

  def deep(ws, x):
    x = jnp.abs(x) + 1.0
    for i in range(4):
      with jax.named_scope(f"block{i}"):   # the blocks by name, not by path
        x = jnp.tanh(x @ ws[f"w{i}"])
    return x.sum()
  return deep, ws, "block0", "layer: vanishing"


def unused_embedding_rows():
  p = {"emb": jax.random.normal(KEY, (32, 8)), "out": _dense(KEY, 8, 1)}
  ids = jnp.array([1, 5, 5, 9])
  return (lambda p, x: (p["emb"][ids] @ p["out"]).sum()), p, "['emb']", "partly: not gathered"


def positional_table_longer_than_the_batch():
  p = {"pos": jax.random.normal(KEY, (16, 8)), "out": _dense(KEY, 8, 1)}
  return (lambda p, x: ((x + p["pos"][:x.shape[0]]) @ p["out"]).sum()), p, "['pos']", \
      "partly: not read"


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


def lora_zero_init():
  """LoRA as initialised: B = 0, so A gets no gradient until B has moved."""
  p = {"w": _dense(KEY, 8, 8), "lora_a": _dense(KEY, 8, 2), "lora_b": jnp.zeros((2, 8))}
  return (lambda p, x: jnp.tanh(x @ p["w"] + (x @ p["lora_a"]) @ p["lora_b"]).sum(),
          p, "['lora_a']", "zero_factor")


def rezero_gate():
  """ReZero residual blocks under jit, their gates at 0: the blocks' weights get none."""
  p = {"blocks": [{"w": _dense(KEY, 8, 8), "alpha": jnp.zeros(())} for _ in range(2)]}

  @jax.jit
  def loss(p, x):
    for b in p["blocks"]:
      x = x + b["alpha"] * jnp.tanh(x @ b["w"])
    return (x ** 2).sum()
  return loss, p, "['blocks'][1]['w']", "zero_factor"


CORPUS = [unused_head, frozen_encoder, integer_path, quantised_weights, dead_relu_layer,
          saturated_gate, lora_zero_init, rezero_gate, bf16_underflow, vanishing_tanh_stack, exploding_residual_stack,
          named_scope_stack, unused_embedding_rows, positional_table_longer_than_the_batch,
          custom_rule_zeros, equinox_model, flax_model, nnx_model]


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


if __name__ == "__main__":
  corpus()
