"""Rules made by a factory: one custom_vjp per layer, each a new object, all alike.

The failing one must be the one highlighted and named, although every layer's
primal is a different function object with the same name, source and call site.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import jupyter_vjpviz as vv


def make_act(scale, broken):
  @jax.custom_vjp
  def act(x):
    return jnp.tanh(x) * scale

  def fwd(x):
    return act(x), x

  def bwd(x, g):
    d = g * scale * (1 - jnp.tanh(x) ** 2)
    return (d.T,) if broken else (d,)
  act.defvjp(fwd, bwd)
  return act


@pytest.mark.parametrize("broken", [0, 3, 5])
def test_the_failing_layer_among_identical_made_per_call_is_the_one_shown(hook, broken):
  acts = [make_act(1. + i, broken=i == broken) for i in range(6)]

  def model(ws, x):
    for w, act in zip(ws, acts):
      x = act(x @ w)
    return x.sum()
  with pytest.raises(ValueError):
    jax.grad(model)([jnp.eye(3) * .5] * 6, jnp.ones((4, 3)))
  d = vv.last()
  assert d.kind == "bwd_type"
  assert d.instance in (f"ws[{broken}]", f"act call {broken + 1} of 6"), d.instance
  acts_in_graph = [n.id for n in d.graph.nodes if n.custom and n.function == "act"]
  assert d.node == acts_in_graph[broken]
  assert d.fixes and d.fixes[0].verdict == "verified"


@jax.custom_vjp
def half_act(x):
  return jnp.tanh(x)


half_act.defvjp(lambda x: (jnp.tanh(x), x),
                lambda x, g: ((g * (1 - jnp.tanh(x) ** 2)).astype(jnp.bfloat16),))


@pytest.mark.parametrize("layers", [1, 4])
def test_a_rule_wrong_alike_in_every_layer_is_one_warning_that_says_how_many(hook, layers):
  def model(ws, x):
    for w in ws:
      x = half_act(x @ w)
    return x.sum()
  jax.grad(model)([jnp.eye(3) * .5] * layers, jnp.ones((4, 3)))
  found = [d for d in vv.diagnoses() if d.kind == "silent_dtype"]
  assert len(found) == 1
  if layers == 1:
    assert " more" not in found[0].headline
  else:
    assert found[0].instance.endswith(f" and {layers - 1} more"), found[0].instance
    assert f" and {layers - 1} more" in found[0].headline


def make_affine(broken):
  @jax.custom_vjp
  def affine(x, w):
    return x @ w

  def affine_bwd(res, g):
    x, w = res
    return g @ w.T, (x.T @ g).T if broken else x.T @ g
  affine.defvjp(lambda x, w: (affine(x, w), (x, w)), affine_bwd)
  return affine


def test_the_failing_layer_is_found_among_layers_of_other_widths_made_in_the_loss(hook):
  """Made in the loss, in a loop over layers whose widths differ: the failing one is the
  fourth application at its call site, though only the second shares its types."""
  widths = [3, 4, 5, 4, 5, 2]
  ws = [jnp.ones((a, b)) / a for a, b in zip(widths[:-1], widths[1:])]

  def model(ws, x):
    for i, w in enumerate(ws):
      x = make_affine(broken=i == 3)(x, w)
    return x.sum()
  with pytest.raises(ValueError):
    jax.grad(model)(ws, jnp.ones((6, 3)))
  d = vv.last()
  assert (d.kind, d.argument) == ("bwd_type", "w")
  assert d.instance in ("ws[3]", "affine call 4 of 5"), d.instance
  affines = [n.id for n in d.graph.nodes if n.custom and n.function == "affine"]
  assert d.node == affines[3]


def make_softplus(beta):
  """A factory whose wrong bwd forgot ``beta``: only the primal closes over it."""
  @jax.custom_vjp
  def softplus(x):
    return jnp.logaddexp(beta * x, 0.0) / beta

  def fwd(x):
    return softplus(x), x

  def bwd(x, g):
    return (g * jax.nn.sigmoid(x),)
  softplus.defvjp(fwd, bwd)
  return softplus


def test_a_fix_may_use_what_only_the_factorys_primal_closes_over(hook):
  def loss(ws, x):
    for i, w in enumerate(ws):
      x = make_softplus(2.0 + i)(x @ w)
    return jnp.mean(x ** 2)
  found = list(vv.gradcheck(loss, [jnp.eye(3) * .5] * 2, jnp.linspace(-1, 1, 6).reshape(2, 3)))
  assert found and found[0].kind == "bwd_value"
  fixed = "def bwd(x, g):\n  return (g * jax.nn.sigmoid(beta * x),)\n"
  assert vv.verify_fix(found[0], fixed) == []
  assert vv.verify_fix(found[0], fixed.replace("beta * x", "x"))[0].kind == "bwd_value"


@jax.custom_vjp
def swapped(q, k):
  return jnp.tanh(q @ k.T)


swapped.defvjp(lambda q, k: (swapped(q, k), (q, k)),
               lambda res, g: (g.T @ res[0], g @ res[1]))     # the two cotangents swapped


@pytest.mark.parametrize("wrap", [jax.checkpoint, jax.jit])
def test_a_body_traced_once_and_applied_twice_fails_first_at_its_last_application(hook, wrap):
  """Alike in types, the second application reuses the first one's traced body (JAX caches
  it), and with it the rule's one site; the backward pass reaches the second first."""
  block = wrap(lambda x, mem: x + swapped(x, mem) @ mem)

  def loss(x, mem):
    for _ in range(2):
      x = block(x, mem)
    return x.sum()
  with pytest.raises(ValueError):
    jax.jit(jax.grad(loss))(jnp.ones((3, 4)), jnp.ones((7, 4)))
  d = vv.last()
  applications = [n.id for n in d.graph.nodes if n.custom and n.function == "swapped"]
  assert len(applications) == 2 and d.node == applications[-1]
  assert d.instance == "swapped call 2 of 2"
