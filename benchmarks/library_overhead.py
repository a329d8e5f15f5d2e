"""Hook overhead on real training steps with the libraries JAX users train with.

Each workload is one jitted training step (loss, gradients, optimizer update)
as its library's users write it: equinox + optax (an MLP, and a model with an
``eqx.filter_custom_vjp`` layer), flax nnx + optax (``nnx.Optimizer``,
``nnx.value_and_grad``, ``nnx.jit``, a ``jax.custom_vjp`` inside), flax linen
``nn.scan(nn.remat(Block))`` with an ``nn.custom_vjp`` in the block, diffrax
(``RecursiveCheckpointAdjoint`` and ``BacksolveAdjoint``), an optimistix root
find (implicit differentiation) and a lineax solve. Prints, per workload, the
steady-state step time with the hook off and on, in wall and in process-CPU
time, and the median of per-round on/off ratios (rounds interleaved, each on a
fresh step traced in that state, timed after warm-up). Target: <= 1.03.

``tests/test_libraries_unchanged.py`` runs the same steps with and without the
hook and checks that every output is bitwise equal.

    PYTHONPATH=. .venv/bin/python benchmarks/library_overhead.py [rounds]
"""
from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from typing import Any
from collections.abc import Callable

import diffrax
import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import lineax as lx
import optax
import optimistix as optx
from flax import nnx

import jupyter_vjpviz as vv

Step = Callable[[], tuple]
"""One training step on state it holds; returns (loss, grads, params after the update)."""


@dataclasses.dataclass(frozen=True)
class Workload:
  """A model and its data, built once (eager ops, nothing differentiated), and a
  training step on them, built fresh each time so that its first call traces
  under whatever hook state is current (no trace cached from another round)."""
  init: Callable[[], Any]
  steps: Callable[[Any], Step]


def _data(n_in: int = 4, n_out: int = 2, batch: int = 8):
  kx, ky = jax.random.split(jax.random.key(1))
  return jax.random.normal(kx, (batch, n_in)), jax.random.normal(ky, (batch, n_out))


def _mse(pred, y):
  return jnp.mean((pred - y) ** 2)


def _with_opt_state(params, tx: optax.GradientTransformation):
  return params, tx.init(params), tx


def _optax_steps(loss: Callable, init) -> Step:
  """A ``jax.jit``-ed value_and_grad of ``loss`` with an optax update."""
  params, opt_state, tx = init

  @jax.jit
  def train_step(params, opt_state):
    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value, grads

  state = [params, opt_state]

  def step():
    params, opt_state, value, grads = train_step(*state)
    state[:] = params, opt_state
    return value, grads, params
  return step


# ------------------------------------------------------------------ equinox

def _equinox_init(model):
  tx = optax.adam(1e-2)
  return model, tx.init(eqx.filter(model, eqx.is_array)), tx, _data()


def _equinox_steps(loss: Callable, init) -> Step:
  """``eqx.filter_jit`` over ``eqx.filter_value_and_grad`` and an optax update."""
  model, opt_state, tx, (x, y) = init

  @eqx.filter_jit
  def train_step(model, opt_state):
    value, grads = eqx.filter_value_and_grad(loss)(model, x, y)
    updates, opt_state = tx.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, value, grads

  state = [model, opt_state]

  def step():
    model, opt_state, value, grads = train_step(*state)
    state[:] = model, opt_state
    return value, grads, eqx.filter(model, eqx.is_array)
  return step


def _mlp_loss(model, x, y):
  return _mse(jax.vmap(model)(x), y)


EQUINOX_MLP = Workload(
    init=lambda: _equinox_init(eqx.nn.MLP(4, 2, 16, 2, key=jax.random.key(0))),
    steps=lambda init: _equinox_steps(_mlp_loss, init))


class Dense(eqx.Module):
  """tanh(W x + b) with a hand-written backward pass (``eqx.filter_custom_vjp``)."""
  weight: jax.Array
  bias: jax.Array

  def __call__(self, x):
    return _dense_tanh((self, x))


@eqx.filter_custom_vjp
def _dense_tanh(layer_and_x):
  layer, x = layer_and_x
  return jnp.tanh(layer.weight @ x + layer.bias)


@_dense_tanh.def_fwd
def _dense_tanh_fwd(perturbed, layer_and_x):
  out = _dense_tanh(layer_and_x)
  return out, out


@_dense_tanh.def_bwd
def _dense_tanh_bwd(out, g, perturbed, layer_and_x):
  layer, x = layer_and_x
  dz = g * (1 - out ** 2)
  return Dense(jnp.outer(dz, x), dz), layer.weight.T @ dz


def _dense_layers():
  k1, k2 = jax.random.split(jax.random.key(0))
  return (Dense(jax.random.normal(k1, (16, 4)) / 2, jnp.zeros(16)),
          Dense(jax.random.normal(k2, (2, 16)) / 4, jnp.zeros(2)))


def _dense_loss(layers, x, y):
  def forward(x):
    for layer in layers:
      x = layer(x)
    return x
  return _mse(jax.vmap(forward)(x), y)


EQUINOX_CUSTOM_VJP = Workload(
    init=lambda: _equinox_init(_dense_layers()),
    steps=lambda init: _equinox_steps(_dense_loss, init))


# ----------------------------------------------------------------- flax nnx

@jax.custom_vjp
def clip_gradient(x):
  return x


clip_gradient.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -0.1, 0.1),))


class NnxNet(nnx.Module):
  def __init__(self, rngs: nnx.Rngs):
    self.hidden = nnx.Linear(4, 16, rngs=rngs)
    self.out = nnx.Linear(16, 2, rngs=rngs)

  def __call__(self, x):
    return self.out(clip_gradient(nnx.gelu(self.hidden(x))))


def _nnx_init():
  model = NnxNet(nnx.Rngs(0))
  return model, nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param), _data()


def _nnx_steps(init) -> Step:
  """``nnx.jit`` over ``nnx.value_and_grad`` and ``nnx.Optimizer.update``."""
  (model, optimizer), (x, y) = nnx.clone(init[:2]), init[2]

  @nnx.jit
  def train_step(model, optimizer):
    value, grads = nnx.value_and_grad(lambda m: _mse(m(x), y))(model)
    optimizer.update(model, grads)
    return value, grads

  def step():
    value, grads = train_step(model, optimizer)
    return value, grads, nnx.state(model, nnx.Param)
  return step


NNX_CUSTOM_VJP = Workload(init=_nnx_init, steps=_nnx_steps)


# --------------------------------------------------------------- flax linen

class Block(nn.Module):
  """A residual Dense block whose parameter gradients are clipped (``nn.custom_vjp``)."""

  @nn.compact
  def __call__(self, x, _):
    def apply(module, x):
      return module(x)

    def fwd(module, x):
      return nn.vjp(apply, module, x)

    def bwd(vjp_fn, g):
      params_g, x_g = vjp_fn(g)
      return jax.tree.map(lambda p: jnp.clip(p, -1.0, 1.0), params_g), x_g

    clipped = nn.custom_vjp(apply, forward_fn=fwd, backward_fn=bwd)
    return x + jnp.tanh(clipped(nn.Dense(x.shape[-1]), x)), None


class Stack(nn.Module):
  @nn.compact
  def __call__(self, x):
    blocks = nn.scan(nn.remat(Block), variable_axes={"params": 0},
                     split_rngs={"params": True}, length=3)
    x, _ = blocks()(x, None)
    return nn.Dense(2)(x)


def _linen_init():
  x, y = _data()
  return _with_opt_state(Stack().init(jax.random.key(0), x), optax.adam(1e-2)), (x, y)


def _linen_steps(init) -> Step:
  opt, (x, y) = init
  return _optax_steps(lambda p: _mse(Stack().apply(p, x), y), opt)


LINEN_SCAN_REMAT = Workload(init=_linen_init, steps=_linen_steps)


# ----------------------------------------------- diffrax, optimistix, lineax

def _diffrax_loss(adjoint: diffrax.AbstractAdjoint) -> Callable:
  y0 = jnp.array([1.0, -0.5, 0.25])
  term = diffrax.ODETerm(lambda t, y, w: jnp.tanh(w @ y))

  def loss(w):
    sol = diffrax.diffeqsolve(term, diffrax.Euler(), 0.0, 1.0, 0.1, y0, args=w,
                              adjoint=adjoint, max_steps=16)
    return jnp.sum(sol.ys ** 2)
  return loss


def _diffrax(adjoint: diffrax.AbstractAdjoint) -> Workload:
  return Workload(
      init=lambda: _with_opt_state(jax.random.normal(jax.random.key(0), (3, 3)) / 2,
                                   optax.sgd(1e-1)),
      steps=lambda init: _optax_steps(_diffrax_loss(adjoint), init))


def _root_loss(theta):
  def fixed_point(y, theta):
    return y - jnp.tanh(theta["a"] * y + theta["b"])
  sol = optx.root_find(fixed_point, optx.Newton(rtol=1e-6, atol=1e-6), jnp.zeros(3), args=theta)
  return jnp.sum((sol.value - jnp.array([0.3, -0.2, 0.1])) ** 2)


OPTIMISTIX_ROOT_FIND = Workload(
    init=lambda: _with_opt_state({"a": jnp.array([0.5, 0.2, -0.3]),
                                  "b": jnp.array([0.1, 0.0, -0.1])}, optax.sgd(1e-1)),
    steps=lambda init: _optax_steps(_root_loss, init))


def _solve_loss(a):
  operator = lx.MatrixLinearOperator(a + 3 * jnp.eye(3))
  return jnp.sum(lx.linear_solve(operator, jnp.array([1.0, 2.0, -1.0]), solver=lx.LU()).value ** 2)


LINEAX_SOLVE = Workload(
    init=lambda: _with_opt_state(jax.random.normal(jax.random.key(0), (3, 3)) / 3,
                                 optax.sgd(1e-1)),
    steps=lambda init: _optax_steps(_solve_loss, init))


WORKLOADS: dict[str, Workload] = {
    "equinox MLP + optax": EQUINOX_MLP,
    "equinox filter_custom_vjp + optax": EQUINOX_CUSTOM_VJP,
    "nnx custom_vjp + optax": NNX_CUSTOM_VJP,
    "linen scan(remat) custom_vjp": LINEN_SCAN_REMAT,
    "diffrax RecursiveCheckpointAdjoint": _diffrax(diffrax.RecursiveCheckpointAdjoint()),
    "diffrax BacksolveAdjoint": _diffrax(diffrax.BacksolveAdjoint()),
    "optimistix root_find": OPTIMISTIX_ROOT_FIND,
    "lineax linear_solve": LINEAX_SOLVE,
}


# -------------------------------------------------------------- measurement

def steady_time(step: Step, calls: int, warmup: int = 2) -> tuple[float, float]:
  """Median wall and process-CPU seconds per call of ``step``, after its compile.

  CPU time (all our threads) is what another engineer's job on this shared
  machine does not inflate; wall time is what the user waits.
  """
  for _ in range(warmup):
    jax.block_until_ready(step())
  wall, cpu = [], []
  for _ in range(calls):
    w0, c0 = time.perf_counter(), time.process_time()
    jax.block_until_ready(step())
    wall.append(time.perf_counter() - w0)
    cpu.append(time.process_time() - c0)
  return statistics.median(wall), statistics.median(cpu)


def measure(workload: Workload, rounds: int, calls: int = 200) -> dict[str, tuple]:
  """Per clock (wall, cpu): median off, median on, and the median of per-round ratios.

  Each round times a fresh step with the hook off and one with it on; rounds
  alternate which goes first, so drift on a shared machine hits both alike.
  """
  init = workload.init()
  rows = []
  for r in range(rounds):
    times = {}
    for hooked in ((False, True) if r % 2 == 0 else (True, False)):
      vv.install() if hooked else vv.uninstall()
      times[hooked] = steady_time(workload.steps(init), calls)
    vv.uninstall()
    rows.append((times[False], times[True]))
  return {clock: (statistics.median(off[i] for off, _ in rows),
                  statistics.median(on[i] for _, on in rows),
                  statistics.median(on[i] / off[i] for off, on in rows))
          for i, clock in enumerate(("wall", "cpu"))}


def main(rounds: int = 5):
  for label, workload in WORKLOADS.items():
    result = measure(workload, rounds)
    print(f"{label:36s}" + "".join(
        f"   {clock} off {off * 1e3:6.3f} ms on {on * 1e3:6.3f} ms ratio {ratio:.3f}"
        for clock, (off, on, ratio) in result.items()), flush=True)


if __name__ == "__main__":
  main(*(int(a) for a in sys.argv[1:]))
