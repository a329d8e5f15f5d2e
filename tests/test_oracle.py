"""The oracle judges a rule by the primal's own derivative, with real JAX."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import softclip

from jupyter_vjpviz.analysis.values import oracle
from jupyter_vjpviz.analysis.values.oracle import Oracle


def site_of(hook, f, *args, argnums=0):
  """The RuleSite of ``f``'s failing application, from a real diagnosis."""
  with pytest.raises(Exception):
    jax.grad(lambda *a: jnp.sum(f(*a)), argnums=argnums)(*args)
  return hook.last().site


def right_bwd(res, g):
  x, w, y = res
  d = g * (1 - y ** 2)
  return d @ w.T, x.T @ d


def transposed_bwd(res, g):
  dx, dw = right_bwd(res, g)
  return dx, dw.T


@pytest.fixture
def layer_site(hook):
  """softclip, whose bwd is ``transposed_bwd``: (the custom_vjp, its fwd, its site)."""
  ns = softclip.define()
  layer = ns["softclip"]
  return layer, ns["softclip_fwd"], site_of(hook, layer, jnp.ones((4, 3)), jnp.ones((3, 2)),
                                            argnums=(0, 1))


def test_the_right_rule_is_right_and_each_wrong_one_says_how(layer_site):
  layer, fwd, site = layer_site
  judge = Oracle.of(site, layer.fun)
  assert judge.judge == "autodiff" and judge.available
  assert judge.verdict(fwd, right_bwd).status == oracle.RIGHT
  assert judge.verdict(fwd, transposed_bwd).status == oracle.TYPE_ERROR
  zeros = judge.verdict(fwd, lambda res, g: (None, right_bwd(res, g)[1]))
  assert zeros.status == oracle.WRONG
  assert zeros.breaks() == "the gradient of `x` becomes zero"
  scaled = judge.verdict(fwd, lambda res, g: (right_bwd(res, g)[0] * 1.5, right_bwd(res, g)[1]))
  assert scaled.status == oracle.WRONG
  (x_leaf, w_leaf) = scaled.leaves
  assert not x_leaf.ok and w_leaf.ok
  assert x_leaf.max_rel == pytest.approx(0.5, rel=1e-3)
  failing = judge.verdict(fwd, lambda res, g: 1 / 0)
  assert failing.status == oracle.FAILED and "ZeroDivisionError" in failing.reason


def test_verdicts_hold_no_arrays(layer_site):
  layer, fwd, site = layer_site
  verdict = Oracle.of(site, layer.fun).verdict(fwd, right_bwd)
  values = [getattr(leaf, f) for leaf in verdict.leaves for f in leaf.__dataclass_fields__]
  assert all(isinstance(v, (int, float, str, bool, tuple)) for v in values)


def test_a_flat_primal_has_no_autodiff_judge(hook):
  @jax.custom_vjp
  def straight_through(x):
    return jnp.round(x)
  straight_through.defvjp(lambda x: (jnp.round(x), None), lambda r, g: (g.T,))
  site = site_of(hook, straight_through, jnp.ones((3, 2)))
  verdict = Oracle.of(site, straight_through.fun).verdict(
      straight_through.fwd, lambda r, g: (g,))
  assert verdict.status == oracle.UNVERIFIABLE
  assert "round" in verdict.reason


def test_an_opaque_primal_is_judged_by_finite_differences(hook):
  def host_sin(x):
    return jax.pure_callback(lambda a: np.sin(a).astype(a.dtype),
                             jax.ShapeDtypeStruct(x.shape, x.dtype), x)

  @jax.custom_vjp
  def sin(x):
    return host_sin(x)
  fwd = lambda x: (host_sin(x), x)
  sin.defvjp(fwd, lambda x, g: ((jnp.cos(x) * g).T,))
  site = site_of(hook, sin, jnp.ones((3, 2)))
  judge = Oracle.of(site, sin.fun)
  assert judge.judge == "finite differences"
  assert judge.verdict(fwd, lambda x, g: (jnp.cos(x) * g,)).status == oracle.RIGHT
  assert judge.verdict(fwd, lambda x, g: (jnp.sin(x) * g,)).status == oracle.WRONG


def test_integer_inputs_are_drawn_in_the_range_the_primal_indexes_with(hook):
  @jax.custom_vjp
  def nll(logits, labels):
    picked = jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1)
    return -picked.sum()

  def nll_fwd(logits, labels):
    return nll(logits, labels), (logits, labels)

  def nll_bwd(res, g):
    logits, labels = res
    return (g * (jax.nn.softmax(logits) - jax.nn.one_hot(labels, 7))).T, None
  nll.defvjp(nll_fwd, nll_bwd)
  site = site_of(hook, nll, jnp.ones((5, 7)), jnp.zeros(5, jnp.int32))
  judge = Oracle.of(site, nll.fun)
  labels = np.concatenate([np.asarray(d.args[1]) for d in judge.draws])
  assert labels.min() >= 0 and labels.max() < 5 and len(set(labels.tolist())) > 1
  right = lambda res, g: (g * (jax.nn.softmax(res[0]) - jax.nn.one_hot(res[1], 7)), None)
  assert judge.verdict(nll_fwd, right).status == oracle.RIGHT


MIXED = """
@jax.custom_vjp
def mixed_dense(x, w):
  return (x.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16)).astype(jnp.float32)
def mixed_dense_fwd(x, w):
  xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
  return (xb @ wb).astype(jnp.float32), (xb, wb)
def mixed_dense_bwd(res, g):
  xb, wb = res
  gb = g.astype(jnp.bfloat16)
  return (gb @ wb.T).astype(jnp.float32), xb.T @ gb     # bf16 for a float32 w
mixed_dense.defvjp(mixed_dense_fwd, mixed_dense_bwd)
def loss(x, w): return jnp.sin(mixed_dense(x, w)).sum()
"""

HAND_FIX = """
def mixed_dense_bwd(res, g):
  xb, wb = res
  gb = g.astype(jnp.bfloat16)
  return (gb @ wb.T).astype(jnp.float32), (xb.T @ gb).astype(jnp.float32)
"""


def test_a_primal_computing_in_bfloat16_is_judged_at_bfloat16_tolerance():
  """Before: the right cast of a bf16 matmul's gradient was 'type-only: the gradient of
  x, w differs from the primal's (rel 0.0028)', judged at float32 tolerance while the
  primal itself rounds to bfloat16 (fix_findings F3)."""
  import jupyter_vjpviz as vv
  from test_fixes import cell, first_problem
  ns = cell(MIXED)
  x, w = jnp.linspace(-2., 2., 64).reshape(16, 4), jnp.linspace(-1., 1., 32).reshape(4, 8)
  d = first_problem(ns["loss"], x, w)
  assert vv.verify_fix(d, HAND_FIX) == []
  cast = next(f for f in d.fixes if f.title == "Cast to float32")
  assert cast.verdict == "verified", cast
  wrong = HAND_FIX.replace("(xb.T @ gb).astype", "(1.1 * xb.T @ gb).astype")
  assert [p.kind for p in vv.verify_fix(d, wrong)] == ["bwd_value"], "10% off is still wrong"
