"""Forward mode is watched as reverse mode is: a custom_jvp rule's wrong tangent is diagnosed
under every forward-mode transformation (jvp, jacfwd, linearize, hessian, vmap of jacfwd, a
jitted jvp) wherever the rule is applied (eagerly, under jit, in a scan, while_loop or cond
body, under checkpoint), naming the rule and its function, with JAX's error unchanged.
Ground truth: plain JAX raises for every such cell, by construction of the rule."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jax_features
from diagnosed import plain_and_hooked, raises
from test_capture import _frames
from test_jvp_fixes import cell
import jupyter_vjpviz as vv
from jupyter_vjpviz.api.check import apply_fix, verify_fix

X = jnp.linspace(-1., 1., 4)


def softplus_ish(wrong: str | None):
  """The issue's rule: its tangent a scalar (``jnp.dot``), bfloat16, a tuple, or right."""
  @jax.custom_jvp
  def sp(x):
    return 0.5 * (x + jnp.sqrt(x * x + 4.))

  @sp.defjvp
  def sp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    d = 0.5 * (1 + x / jnp.sqrt(x * x + 4.))
    tangent = {"shape": lambda: jnp.dot(d, t), "dtype": lambda: (d * t).astype(jnp.bfloat16),
               "structure": lambda: (d * t, d * t), None: lambda: d * t}[wrong]()
    return sp(x), tangent
  return sp


PLACES = {
    "eager": lambda f: f,
    "jit": jax.jit,
    "scan": lambda f: lambda x: lax.scan(lambda c, _: (f(c), None), x, None, length=2)[0],
    "while_loop": lambda f: lambda x: lax.while_loop(
        lambda c: c[0] < 2, lambda c: (c[0] + 1, f(c[1])), (0, x))[1],
    "cond": lambda f: lambda x: lax.cond(x.sum() > -10., f, lambda y: y, x),
    "checkpoint": jax.checkpoint,
}

TRANSFORMS = {
    "jvp": lambda f: jax.jvp(f, (X,), (jnp.ones_like(X),)),
    "jacfwd": lambda f: jax.jacfwd(f)(X),
    "linearize": lambda f: jax.linearize(f, X)[0],
    "hessian": lambda f: jax.hessian(lambda y: f(y).sum())(X),
    "vmap(jacfwd)": lambda f: jax.vmap(jax.jacfwd(f))(jnp.stack([X, X])),
    "jit(jvp)": lambda f: jax.jit(lambda y: jax.jvp(f, (y,), (y,)))(X),
}


@pytest.fixture
def unjudged(monkeypatch):
  """No time to judge fixes: these tests judge capture (the fix tests below judge fixes)."""
  from jupyter_vjpviz.analysis.values import replay
  monkeypatch.setattr(replay, "BUDGET", 0.)


def diagnosis_of(err):
  found = [d for d in vv.diagnoses() if d.kind.startswith("jvp_tangent")]
  assert found, ([d.kind for d in vv.diagnoses()], err)
  return found[0]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_a_wrong_tangent_shape_is_diagnosed_in_every_transformation_and_placement(
    hook, unjudged, transform, place):
  err = raises(lambda: TRANSFORMS[transform](PLACES[place](softplus_ish("shape"))))
  assert isinstance(err, TypeError) and "Custom JVP rule" in str(err)
  d = diagnosis_of(err)
  assert (d.kind, d.function, d.rule) == ("jvp_tangent_type", "sp", "sp_jvp")
  assert d.got == "float32[]" and d.expected.startswith("float32[")
  assert any(n.startswith("vjpviz: sp's jvp rule sp_jvp returned tangent") for n in err.__notes__)


@pytest.mark.parametrize("wrong, kind", [("dtype", "jvp_tangent_type"),
                                         ("structure", "jvp_tangent_structure")])
@pytest.mark.parametrize("transform", ["jvp", "jacfwd", "linearize"])
def test_a_wrong_tangent_dtype_or_structure_is_diagnosed_in_every_transformation(
    hook, unjudged, transform, wrong, kind):
  err = raises(lambda: TRANSFORMS[transform](softplus_ish(wrong)))
  d = diagnosis_of(err)
  assert (d.kind, d.rule) == (kind, "sp_jvp")
  if wrong == "dtype":
    assert d.got.startswith("bfloat16[") and d.expected.startswith("float32[")


@pytest.mark.parametrize("transform, place", [*((t, "eager") for t in TRANSFORMS),
                                             ("jacfwd", "scan"), ("jacfwd", "while_loop")])
def test_a_right_rule_is_silent_in_forward_mode(hook, transform, place):
  TRANSFORMS[transform](PLACES[place](softplus_ish(None)))
  assert vv.diagnoses() == []


@pytest.mark.parametrize("transform", ["jvp", "jacfwd", "linearize"])
def test_the_forward_mode_error_is_unchanged(hook, transform):
  plain, hooked = plain_and_hooked(lambda: TRANSFORMS[transform](softplus_ish("shape")))
  assert type(hooked) is type(plain) and str(hooked) == str(plain)
  assert _frames(hooked) == _frames(plain)
  added = [n for n in hooked.__notes__ if n not in getattr(plain, "__notes__", [])]
  assert len(added) == 1 and added[0].startswith("vjpviz: ")


ISSUE_RULE = """
@jax.custom_jvp
def sp(x):
  return 0.5 * (x + jnp.sqrt(x * x + 4.))

@sp.defjvp
def sp_jvp(p, t):
  return sp(p[0]), jnp.dot(0.5 * (1 + p[0] / jnp.sqrt(p[0] ** 2 + 4.)), t[0])
"""


@pytest.mark.parametrize("transform", ["jacfwd", "vmap(jacfwd)", "jvp"])
def test_the_issues_rule_gets_a_first_fix_that_is_right_when_pasted(hook, transform):
  ns = cell(ISSUE_RULE)
  raises(lambda: TRANSFORMS[transform](ns["sp"]))
  d = diagnosis_of(None)
  first = d.fixes[0]
  assert first.verdict == "verified", d.fixes
  assert verify_fix(d, first.code) == [] and apply_fix(d, first.code).applied
  vv.clear()
  got = TRANSFORMS[transform](ns["sp"])
  assert vv.diagnoses() == []
  want = TRANSFORMS[transform](ns["sp"].__wrapped__)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(g, w, rtol=1e-5)


@pytest.mark.skipif("jax_custom_jvp3" not in jax.config.values, reason="no jax_custom_jvp3")
@pytest.mark.parametrize("transform", ["jvp", "jacfwd", "linearize", "vmap(jacfwd)"])
def test_forward_mode_is_watched_on_the_custom_jvp3_path(hook, unjudged, transform):
  jax_features.set_flag("jax_custom_jvp3", True)
  jax.clear_caches()
  try:
    err = raises(lambda: TRANSFORMS[transform](softplus_ish("dtype")))
    assert diagnosis_of(err).rule == "sp_jvp"
  finally:
    jax_features.set_flag("jax_custom_jvp3", "jax_custom_jvp3" in jax_features.BASELINE)
    jax.clear_caches()


RAISING_RULE = """
@jax.custom_jvp
def scale(x, w):
  return jnp.sin(x) * w

@scale.defjvp
def scale_jvp(primals, tangents):
  x, w = primals
  tx, tw = tangents
  ty = jnp.cos(x) * w * tx + tw @ jnp.sin(x)
  return scale(x, w), ty
"""
"""A jvp rule whose statement raises for its types (``@`` where ``*`` was meant): JAX
never gets a tangent to check."""

XW = (jnp.ones((3, 4)), jnp.linspace(.5, 2., 4))
RAISING_TRANSFORMS = {
    "jvp": lambda f: jax.jvp(f, XW, tuple(jnp.ones_like(a) for a in XW)),
    "jacfwd": lambda f: jax.jacfwd(f, argnums=1)(*XW),
    "grad": lambda f: jax.grad(lambda x, w: f(x, w).sum(), argnums=1)(*XW),
    "vmap(jit(jvp))": lambda f: jax.vmap(jax.jit(lambda x: jax.jvp(f, (x, XW[1]), XW)[1]))(
        jnp.stack(XW[:1] * 2)),
}


@pytest.mark.parametrize("transform", RAISING_TRANSFORMS)
def test_a_raising_jvp_rule_is_diagnosed_with_a_first_fix_right_when_pasted(hook, transform):
  ns = cell(RAISING_RULE)
  run = lambda f: RAISING_TRANSFORMS[transform](f)
  plain, hooked = plain_and_hooked(lambda: run(ns["scale"]))
  assert type(hooked) is type(plain) and str(hooked) == str(plain)
  assert _frames(hooked) == _frames(plain)
  found = [d for d in vv.diagnoses() if d.kind == "jvp_raised"]
  assert [(d.function, d.rule) for d in found] == [("scale", "scale_jvp")], vv.diagnoses()
  d = found[0]
  assert d.headline.startswith("scale's jvp rule scale_jvp raised at line")
  assert d.headline.endswith("computing the tangent of its output: float32[4] @ float32[3,4].")
  first = d.fixes[0]
  assert first.verdict == "verified", d.fixes
  assert verify_fix(d, first.code) == [] and apply_fix(d, first.code).applied
  vv.clear()
  got = run(ns["scale"])
  assert vv.diagnoses() == []
  want = run(ns["scale"].__wrapped__)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(g, w, rtol=1e-5)


@pytest.mark.skipif("jax_custom_jvp3" not in jax.config.values, reason="no jax_custom_jvp3")
@pytest.mark.parametrize("transform", ["jvp", "grad"])
def test_a_raising_jvp_rule_is_diagnosed_on_the_custom_jvp3_path(hook, unjudged, transform):
  jax_features.set_flag("jax_custom_jvp3", True)
  jax.clear_caches()
  try:
    scale = cell(RAISING_RULE)["scale"]
    plain, hooked = plain_and_hooked(lambda: RAISING_TRANSFORMS[transform](scale))
    assert (type(hooked), str(hooked), _frames(hooked)) == (type(plain), str(plain), _frames(plain))
    assert [(d.kind, d.rule) for d in vv.diagnoses()] == [("jvp_raised", "scale_jvp")]
  finally:
    jax_features.set_flag("jax_custom_jvp3", "jax_custom_jvp3" in jax_features.BASELINE)
    jax.clear_caches()
