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
WATCH = validator("WatchMessage")


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


def test_a_watched_step_records_the_logs_it_returns():
  """vv.watch(step, logs=...) on a jitted step taking its gradient with_logs: each step's
  logs as JAX returned them, reduced to mean, min and max, in the series (which validates)
  and the text; the step returns exactly what it returned."""
  from jupyter_vjpviz.api.watch import watch

  @jax.custom_vjp
  def f(x):
    return jnp.sin(x)
  f.defvjp_with_logs(lambda x: (jnp.sin(x), x), lambda x, g: (
      (g * jnp.cos(x),), {"gnorm": jnp.abs(g).sum(), "stats": {"cos": jnp.cos(x)}}))

  @jax.jit
  def step(w, x):
    g, logs = jax.grad(lambda w: f(w * x).sum(), with_logs=True)(w)
    return w - 0.1 * g, logs

  w, x, returned = jnp.arange(3.), jnp.ones(3), []
  watched = watch(step, logs=lambda out: out[-1])
  for _ in range(3):
    w_before = w
    w, logs = watched(w, x)
    plain_w, plain_logs = step(w_before, x)
    np.testing.assert_array_equal(w, plain_w)
    assert jax.tree_util.tree_structure(logs) == jax.tree_util.tree_structure(plain_logs)
    returned.append(logs)
  recorded = watched.logs
  assert list(recorded) == ["gnorm", "stats['cos']"] and watched.steps.shape == (3, 1)
  assert watched.paths == [""] and "non-finite" not in str(watched)   # the gradient alone
  for k, logs in enumerate(returned):
    cos = np.asarray(logs["stats"]["cos"])
    np.testing.assert_allclose(recorded["stats['cos']"][k], [cos.mean(), cos.min(), cos.max()],
                               rtol=1e-6)
    np.testing.assert_allclose(recorded["gnorm"][k], [float(logs["gnorm"])] * 3, rtol=1e-6)
  series = watched.series()
  WATCH.validate({"v": 1, "type": "watch", "watch": series})
  assert [l["name"] for l in series["logs"]] == ["gnorm", "stats['cos']"]
  assert series["logs"][1]["max"][-1] == pytest.approx(float(recorded["stats['cos']"][-1, 2]))
  assert "log stats['cos'], step 2: mean" in str(watched)


def test_a_watch_without_logs_records_none():
  from jupyter_vjpviz.api.watch import watch
  watched = watch(jax.jit(lambda w: w - jax.grad(lambda w: (w ** 2).sum())(w)))
  watched(jnp.ones(3))
  assert watched.logs == {} and watched.series()["logs"] == [] and "log " not in str(watched)


def _raising_logging_rule(fixed: str | None = None):
  """f(x, w) = sin(x) * w with a logging bwd whose dw forgot to sum (``@`` for ``*``):
  it raises computing w's cotangent, inside the ``(cotangents, logs)`` pair. ``fixed``: the
  text of a bwd to register in its place, as the user would paste it."""
  @jax.custom_vjp
  def f(x, w):
    return jnp.sin(x) * w

  def fwd(x, w):
    return f(x, w), (x, w)

  def bwd(res, g):
    x, w = res
    dw = jnp.sin(x) @ g
    return (jnp.cos(x) * w * g, dw), {"gnorm": jnp.abs(g).sum()}
  if fixed is not None:
    exec(fixed, ns := {"jnp": jnp})  # noqa: S102 - the fix, pasted
    bwd = ns["bwd"]
  f.defvjp_with_logs(fwd, bwd)
  return f


PLACES = {"eager": lambda f: f,
          "scan": lambda f: lambda x, w: jax.lax.scan(lambda c, _: (f(c, w), None), x, None,
                                                      length=2)[0]}


@pytest.mark.parametrize("place", PLACES)
def test_a_logging_rule_that_raises_names_the_input_and_its_fix_keeps_the_logs(hook, place):
  f, x, w = _raising_logging_rule(), jnp.ones((3, 4)), jnp.linspace(.5, 2., 4)
  grad = lambda f: jax.grad(lambda x, w: PLACES[place](f)(x, w).sum(), argnums=1, with_logs=True)
  with pytest.raises(TypeError):
    grad(f)(x, w)
  (d,) = hook.diagnoses()
  assert (d.kind, d.rule, d.argument) == ("bwd_raised", "bwd", "w")
  first = d.fixes[0]
  assert first.verdict == "verified" and '{"gnorm": jnp.abs(g).sum()}' in first.code
  assert hook.verify_fix(d, first.code) == []
  got, logs = grad(_raising_logging_rule(first.code))(x, w)
  want = jax.grad(lambda x, w: PLACES[place](lambda x, w: jnp.sin(x) * w)(x, w).sum(), argnums=1)
  np.testing.assert_allclose(got, want(x, w), rtol=1e-5)
  assert set(logs) == {"gnorm"} and np.size(logs["gnorm"]) == (1 if place == "eager" else 2)
