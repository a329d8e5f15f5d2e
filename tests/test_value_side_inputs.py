"""``vv.grads`` and ``vv.nans`` take what the same ``jax.grad`` call takes (issue 37): any
floating scalar loss, ``has_aux``, tuples of ``argnums``, equinox modules with non-array
fields as ``eqx.filter_grad`` treats them; and say what they found instead of raising.
"""
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jupyter_vjpviz as vv


def mlp_with_a_function_field():
  return eqx.nn.MLP(3, 1, 4, 2, activation=jax.nn.gelu, key=jax.random.PRNGKey(0))


def test_a_bfloat16_loss_is_reported_as_jax_grad_takes_it():
  p = {"w": jnp.ones((3, 2), jnp.bfloat16), "unused": jnp.ones(2, jnp.bfloat16)}
  loss = lambda p, x: (x @ p["w"]).sum()
  x = jnp.ones((4, 3), jnp.bfloat16)
  assert jax.grad(loss)(p, x)["w"].dtype == jnp.bfloat16
  report = vv.grads(loss, p, x)
  assert [(z.path, z.reason) for z in report.zero] == [("['unused']", "unused")]


def test_has_aux_and_argnums_tuples_are_jax_grads():
  def loss(w, b, x):
    return (x @ w + b).sum(), {"logits": x @ w}
  w, b, x = jnp.ones((3, 2)), jnp.ones(2), jnp.ones((4, 3))
  jax.grad(loss, argnums=(0, 1), has_aux=True)(w, b, x)
  report = vv.grads(loss, w, b, x, argnums=(0, 1), has_aux=True)
  assert [z.path for z in report.zero] == []
  bad = lambda w, x: (jnp.sqrt(x @ w).sum(), None)
  d = vv.nans(bad, w.at[:, 0].set(0.0), x, has_aux=True)
  assert d is not None and d.function == "sqrt"


def test_an_equinox_module_with_a_function_field_is_differentiated_in_its_arrays():
  model = mlp_with_a_function_field()
  x = jnp.ones(3)
  nan_loss = lambda m, x: jnp.sqrt(jnp.sum(m(x) ** 2) * 0.0)
  assert not np.isfinite(jax.tree_util.tree_leaves(eqx.filter_grad(nan_loss)(model, x))[0]).all()
  d = vv.nans(nan_loss, model, x)
  assert d is not None and d.function == "sqrt" and d.fixes
  report = vv.grads(lambda m, x: m(x).sum(), model, x)
  assert report.judged and not report.zero


def test_a_block_beside_one_without_a_gradient_is_not_a_division_by_zero():
  """The next block's gradient norm is 0 (a frozen block): that is a zero leaf, not a
  ratio to divide by."""
  p = {"layers": [{"w": jnp.ones((3, 3))}, {"w": jnp.ones((3, 3))}, {"w": jnp.ones((3, 3))}]}

  def loss(p, x):
    h = x @ p["layers"][0]["w"] @ p["layers"][1]["w"]
    return h.sum() + 0 * jax.lax.stop_gradient(p["layers"][2]["w"]).sum()
  report = vv.grads(loss, p, jnp.ones((2, 3)))
  assert [(z.path, z.reason) for z in report.zero] == [("['layers'][2]['w']", "stopped")]
  assert [layer.grad_norm for layer in report.layers][-1] == 0.0


@pytest.mark.parametrize("loss, message", [
    (lambda w: (w * 2).astype(jnp.int32).sum(), "real scalar"),
    (lambda w: w * 2, "real scalar"),
])
def test_what_jax_grad_refuses_is_a_clear_error(loss, message):
  with pytest.raises(TypeError):
    jax.grad(loss)(jnp.ones(3))
  with pytest.raises(TypeError, match=message):
    vv.grads(loss, jnp.ones(3))
