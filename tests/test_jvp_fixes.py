"""Fixes for custom_jvp rules whose tangents are of the wrong type or structure, with real
JAX: each is judged by ``jax.jvp`` of the undecorated primal (a surrogate by its own
tangents), and the first fix, applied, makes the gradient the primal's. Each case runs with
``jax_custom_jvp3`` off and on (where this JAX has it): the fixes are the same."""
import itertools
import linecache

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jupyter_vjpviz as vv
from jupyter_vjpviz.api.check import apply_fix, verify_fix

_cells = itertools.count(1)
JVP3 = "jax_custom_jvp3"


@pytest.fixture(autouse=True, params=["classic", JVP3])
def jvp_path(request):
  """The case on custom_jvp's classic path, then under ``jax_custom_jvp3`` (hijax's
  ``custom_jvp3`` applies the rule; on JAX 0.11 ``jax.custom_jvp`` returns one)."""
  if request.param == "classic":
    yield
    return
  if JVP3 not in jax.config.values:
    pytest.skip(f"jax {jax.__version__} has no {JVP3}")
  was = getattr(jax.config, JVP3)
  jax.config.update(JVP3, True)
  jax.clear_caches()
  try:
    yield
  finally:
    jax.config.update(JVP3, was)
    jax.clear_caches()


def cell(code: str) -> dict:
  """Run ``code`` as IPython runs a cell: source in linecache, no file on disk."""
  name = f"<ipython-input-{next(_cells)}-jvpfix>"
  linecache.cache[name] = (len(code), None, code.splitlines(keepends=True), name)
  ns = {"jax": jax, "jnp": jnp}
  exec(compile(code, name, "exec"), ns)  # noqa: S102 - the test's own rules
  return ns


def diagnosed(fun, x):
  found = vv.check(lambda x: sum(jnp.sum(o) for o in jax.tree.leaves(fun(x))), x)
  assert found, "the broken rule was not diagnosed"
  return found[0]


def applied_grad(ns, name, x, d):
  """The gradient through ``ns[name]`` after applying ``d``'s first fix."""
  assert verify_fix(d, d.fixes[0].code) == []
  assert apply_fix(d, d.fixes[0].code).applied
  loss = lambda x: sum(jnp.sum(o) for o in jax.tree.leaves(ns[name](x)))
  assert vv.check(loss, x) == []
  return jax.grad(loss)(x)


SOFTPLUS = """
@jax.custom_jvp
def softplus(x):
  return jnp.logaddexp(x, 0.)

@softplus.defjvp
def softplus_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return softplus(x), (t * jax.nn.sigmoid(x)).astype(jnp.bfloat16)
"""

LSE = """
@jax.custom_jvp
def lse_rows(x):
  m = x.max(-1, keepdims=True)
  return (m + jnp.log(jnp.exp(x - m).sum(-1, keepdims=True)))[..., 0]

@lse_rows.defjvp
def lse_rows_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  y = lse_rows(x)
  return y, jnp.exp(x - y[..., None]) * t
"""

ROW_SCALE = """
@jax.custom_jvp
def row_scale(x):
  return x * jnp.arange(1., x.shape[1] + 1.)

@row_scale.defjvp
def row_scale_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return row_scale(x), (t * jnp.arange(1., x.shape[1] + 1.)).T
"""


@pytest.mark.parametrize("code, name, title", [
    (SOFTPLUS, "softplus", "Cast to float32"),
    (LSE, "lse_rows", "Sum over axis 1"),
    (ROW_SCALE, "row_scale", "Transpose"),
])
def test_a_wrong_tangent_type_gets_a_verified_fix_in_the_rules_terms(code, name, title):
  ns = cell(code)
  x = jnp.linspace(-1., 1., 12).reshape(3, 4)
  d = diagnosed(ns[name], x)
  assert d.kind == "jvp_tangent_type" and d.fixes
  first = d.fixes[0]
  assert first.title.startswith(title) and first.verdict == "verified", first
  assert "primal's JVP" in first.note
  assert any("jax.jvp" in f.title for f in d.fixes[1:])   # the fallback, after it
  want = jax.grad(lambda x: ns[name].__wrapped__(x).sum())(x)   # the primal, on either class
  np.testing.assert_allclose(applied_grad(ns, name, x, d), want, rtol=1e-5)


MOMENTS = """
@jax.custom_jvp
def moments(x):
  mu = x.mean(0)
  return mu, ((x - mu) ** 2).mean(0)

@moments.defjvp
def moments_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  mu, var = moments(x)
  dmu = t.mean(0)
  return (mu, var), [dmu, (2. * (x - mu) * (t - dmu)).mean(0)]
"""

ONE_TUPLE = """
@jax.custom_jvp
def sq_norm(x):
  return ((x * x).sum(-1),)

@sq_norm.defjvp
def sq_norm_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return sq_norm(x), (2. * x * t).sum(-1)
"""


@pytest.mark.parametrize("code, name, title", [
    (MOMENTS, "moments", "Return the tangents as (dmu, (2. * (x - mu) * (t - dmu)).mean(0))"),
    (ONE_TUPLE, "sq_norm", "Return the tangents as ((2. * x * t).sum(-1),)"),
])
def test_a_tangent_tree_of_another_structure_is_diagnosed_and_rewritten(code, name, title):
  ns = cell(code)
  x = jnp.linspace(-1., 1., 12).reshape(3, 4)
  d = diagnosed(ns[name], x)
  assert d.kind == "jvp_tangent_structure" and d.rule == f"{name}_jvp"
  assert d.fixes[0].title == title and d.fixes[0].verdict == "verified"
  want = jax.grad(lambda x: sum(jnp.sum(o) for o in jax.tree.leaves(ns[name].__wrapped__(x))))(x)
  np.testing.assert_allclose(applied_grad(ns, name, x, d), want, rtol=1e-5)


def test_the_unchanged_rule_does_not_verify_and_a_wrong_value_is_named():
  ns = cell(SOFTPLUS)
  x = jnp.linspace(-1., 1., 12).reshape(3, 4)
  d = diagnosed(ns["softplus"], x)
  code = d.fixes[0].code
  assert verify_fix(d, code.replace("(t * jax.nn.sigmoid(x))", "(t * x)")) != []
  unchanged = "\n".join(SOFTPLUS.strip().splitlines()[4:])
  assert verify_fix(d, unchanged) != []


STE = """
@jax.custom_jvp
def ste_round(x):
  return jnp.round(x)

@ste_round.defjvp
def ste_round_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return jnp.round(x), t.astype(jnp.bfloat16)
"""


def test_a_surrogate_keeps_its_values_and_differentiating_the_primal_never_leads():
  ns = cell(STE)
  x = jnp.linspace(-2., 2., 12).reshape(3, 4)
  d = diagnosed(ns["ste_round"], x)
  first = d.fixes[0]
  assert first.verdict == "verified" and "keeps your rule's values" in first.note, first
  assert "surrogate" in first.note
  fallback = [f for f in d.fixes if "jax.jvp" in f.title]
  assert all(f.verdict != "verified" and "changes your surrogate" in f.title for f in fallback)
  np.testing.assert_allclose(applied_grad(ns, "ste_round", x, d), np.ones((3, 4)))
