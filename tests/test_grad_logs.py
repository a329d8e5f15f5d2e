"""JAX's own backward-pass logs (``defvjp_with_logs``) shown beside the rule's diagnosis
(capture/grad_logs.py): a real logging rule whose bfloat16 cotangent JAX lets through, its
logs asked for with ``jax.grad(..., with_logs=True)`` or ``f_vjp.with_logs``, plain, under
scan (stacked per iteration), jit (traced: types only) and shard_map (per shard). What the
diagnosis shows equals what JAX returned, and what JAX returned is unchanged."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from kernel_helpers import validator

import jax_features

jax_features.require(jax_features.WITH_LOGS)

DIAGNOSIS = validator("Diagnosis")


def _logging_rule():
  """sin with a bwd that logs its cotangent's norm and the cosines, returning bfloat16."""
  @jax.custom_vjp
  def f(x):
    return jnp.sin(x)

  def fwd(x):
    return jnp.sin(x), x

  def bwd(x, g):
    return ((g * jnp.cos(x)).astype(jnp.bfloat16),), {"gnorm": jnp.abs(g).sum(),
                                                       "stats": {"cos": jnp.cos(x)}}
  f.defvjp_with_logs(fwd, bwd)
  return f


def _shown(hook) -> dict:
  """name -> LogLeaf of the one diagnosis recorded, checked against the schema."""
  found = [d for d in hook.diagnoses() if d.logs]
  assert len(found) == 1, [(d.kind, d.logs) for d in hook.diagnoses()]
  DIAGNOSIS.validate(found[0].to_dict())
  assert "log gnorm" in found[0].to_text() and "stats" in found[0].to_html()
  return {l.name: l for l in found[0].logs}


def _numbers(texts) -> np.ndarray:
  return np.array([float(t) for t in texts])


def test_logs_of_a_grad_are_shown_as_jax_returned_them(path, hook):
  f, x = _logging_rule(), jnp.arange(3.)
  g, logs = jax.grad(lambda x: f(x).sum(), with_logs=True)(x)
  assert g.dtype == jnp.bfloat16 and set(logs) == {"gnorm", "stats"}   # JAX's answer, unchanged
  shown = _shown(hook)
  cos = shown["stats['cos']"]
  assert (cos.shape, cos.dtype, cos.stacked, cos.traced) == ((3,), "float32", (), False)
  np.testing.assert_allclose(_numbers(cos.first), np.asarray(logs["stats"]["cos"]), rtol=1e-3)
  assert float(shown["gnorm"].first[0]) == float(logs["gnorm"]) == 3.


def test_with_logs_of_a_vjp_function_and_none_unasked(hook):
  f, x = _logging_rule(), jnp.arange(3.)
  _, f_vjp = jax.vjp(f, x)
  f_vjp(jnp.ones(3))
  assert all(not d.logs for d in hook.diagnoses())   # nobody asked JAX for them
  hook.clear()
  _, logs = f_vjp.with_logs(2. * jnp.ones(3))
  assert float(_shown(hook)["gnorm"].first[0]) == float(logs["gnorm"]) == 6.


def test_logs_under_scan_are_shown_per_iteration(hook):
  f, xs = _logging_rule(), jnp.arange(12.).reshape(4, 3) / 12.

  def loop(xs):   # f of each slice, not of the carry: its bfloat16 cotangent stays a warning
    return jax.lax.scan(lambda c, x: (c, f(x) * (c + 2.)), 1., xs)[1].sum()
  _, logs = jax.grad(loop, with_logs=True)(xs)
  shown = _shown(hook)
  gnorm, cos = shown["gnorm"], shown["stats['cos']"]
  assert gnorm.shape == (4,) and gnorm.stacked == ("axis 0: per iteration",)
  np.testing.assert_allclose(_numbers(gnorm.slices), np.asarray(logs["gnorm"]), rtol=1e-3)
  assert cos.shape == (4, 3) and cos.stacked == ("axis 0: per iteration",)
  np.testing.assert_allclose(_numbers(cos.slices), np.asarray(logs["stats"]["cos"]).mean(1),
                             rtol=1e-3)


def test_logs_under_jit_keep_their_types(hook):
  f, x = _logging_rule(), jnp.arange(3.)
  _, logs = jax.jit(jax.grad(lambda x: f(x).sum(), with_logs=True))(x)
  shown = _shown(hook)
  assert shown["gnorm"].traced and shown["gnorm"].first == ()
  assert (shown["stats['cos']"].shape, shown["stats['cos']"].dtype) == (
      logs["stats"]["cos"].shape, str(logs["stats"]["cos"].dtype))
  assert "traced under jit" in _text(hook)


def test_logs_under_shard_map_are_shown_per_shard(hook):
  if jax.device_count() < 4:
    pytest.skip("needs 4 devices (XLA_FLAGS host device count, tests/conftest.py)")
  f = _logging_rule()
  mesh = jax.make_mesh((4,), ("i",), axis_types=(jax.sharding.AxisType.Explicit,))

  def loss(x):
    return jax.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x).sum()
  with jax.set_mesh(mesh):
    x = jax.device_put(jnp.arange(8.), P("i"))
    _, logs = jax.grad(loss, with_logs=True)(x)
  shown = _shown(hook)
  gnorm, cos = shown["gnorm"], shown["stats['cos']"]
  assert gnorm.stacked == cos.stacked == ("axis 0: per shard over 'i' (4)",)
  np.testing.assert_allclose(_numbers(gnorm.slices), np.asarray(logs["gnorm"]), rtol=1e-3)
  np.testing.assert_allclose(_numbers(cos.slices),
                             np.asarray(logs["stats"]["cos"]).reshape(4, 2).mean(1), rtol=1e-3)


def _text(hook) -> str:
  return "\n".join(d.to_text() for d in hook.diagnoses())
