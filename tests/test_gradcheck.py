"""vjpviz.gradcheck: well-typed custom rules whose cotangents are not the primal's derivative."""
import gc
import json
import weakref

import jax
import jax.numpy as jnp
import pytest

import jupyter_vjpviz as vv
from jupyter_vjpviz.analysis.values import oracle


def _rule(bwd):
  """``scaled_tanh(x, s) = tanh(x) * s`` with the given bwd rule."""
  @jax.custom_vjp
  def scaled_tanh(x, s):
    return jnp.tanh(x) * s

  def scaled_tanh_fwd(x, s):
    return scaled_tanh(x, s), (x, s)
  scaled_tanh.defvjp(scaled_tanh_fwd, bwd)
  return scaled_tanh


def _d_s(x, g):
  return (g * jnp.tanh(x)).sum()


def right_bwd(res, g):
  x, s = res
  return g * s * (1 - jnp.tanh(x) ** 2), _d_s(x, g)


def doubled_bwd(res, g):
  x, s = res
  return 2 * g * s * (1 - jnp.tanh(x) ** 2), _d_s(x, g)


def missing_term_bwd(res, g):
  x, s = res
  return g * s, _d_s(x, g)            # forgot the (1 - tanh^2) factor


def sign_bwd(res, g):
  x, s = res
  return g * s * (jnp.tanh(x) ** 2 - 1), _d_s(x, g)


def _model(act):
  """The rule deep inside jit, scan, vmap and remat."""
  @jax.jit
  def model(w, xs):
    @jax.checkpoint
    def body(c, x):
      h = jax.vmap(lambda row: act(row @ w, 1.5))(x)
      return c + h.sum(), None
    return jax.lax.scan(body, 0.0, xs)[0]
  return model


W = jnp.ones((3, 4)) * 0.3
XS = jax.ShapeDtypeStruct((5, 2, 3), jnp.float32)


@pytest.mark.parametrize("bwd", [doubled_bwd, missing_term_bwd, sign_bwd])
def test_a_wrong_well_typed_rule_deep_in_jit_scan_is_one_warning(bwd):
  result = vv.gradcheck(_model(_rule(bwd)), W, XS)
  (d,) = result
  assert d.kind == "bwd_value" and d.severity == "warning"
  assert d.function == "scaled_tanh" and d.rule == bwd.__name__ and d.argument == "x"
  (leaf,) = d.leaf_errors
  assert leaf.name == "x" and leaf.max_rel > 0.1 and len(leaf.where) == 1   # x: float32[4]
  assert leaf.reference_at != leaf.got_at
  assert f"rel {leaf.max_rel:.2g}" in d.headline
  # the edge into the rule carrying x is the one marked, with its type unchanged
  (edge,) = [e for e in d.graph.edges if e.value_error]
  assert edge.dst == d.node and edge.value_error == f"rel {leaf.max_rel:.2g}"
  assert not edge.mismatch and edge.primal == "float32[2,4]"   # vmapped: the rule judged per row
  assert d.primal == "float32[4]"
  assert f"CT value differs: rel {leaf.max_rel:.2g}" in d.to_dot()
  assert "vjpviz-edge-value" in d.to_svg()
  text = d.to_text()
  assert f"reference {leaf.reference_at:.4g}, rule {leaf.got_at:.4g}" in text
  assert "CT value differs" in text
  json.dumps(d.to_dict())   # numbers and strings only
  assert [r.status for r in result.rules] == [oracle.WRONG]


@pytest.mark.parametrize("argnums, inputs", [(None, ["ws[0]", "ws[1]", "xs"]), ((1,), ["xs"])])
def test_the_graphs_inputs_are_named_as_the_losss_parameters(argnums, inputs):
  """Not ``args[0][1]``: the loss is differentiated through a closure of the picked
  arguments, which JAX sees in its place."""
  act = _rule(doubled_bwd)

  def loss(ws, xs):
    for w in ws:
      xs = act(xs @ w, 1.5)
    return xs.sum()
  (d,) = vv.gradcheck(loss, [W[:, :3]] * 2, jnp.ones((2, 3)), argnums=argnums)
  assert [n.label for n in d.graph.nodes if n.kind == "input"] == inputs


def test_a_right_rule_gives_nothing():
  result = vv.gradcheck(_model(_rule(right_bwd)), W, XS)
  assert list(result) == []
  assert [(r.function, r.status) for r in result.rules] == [("scaled_tanh", oracle.RIGHT)]


def test_a_rule_is_judged_once_per_input_types_and_warned_about_once():
  act = _rule(doubled_bwd)

  def loss(x):
    return act(act(x, 2.0), 3.0).sum() + act(x[:2], 1.0).sum()
  result = vv.gradcheck(loss, jnp.ones(5))
  assert [r.status for r in result.rules] == [oracle.WRONG] * 2   # float32[5] and float32[2]
  (d,) = result
  assert d.primal == "float32[5]"


def test_a_function_already_jitted_and_differentiated_is_still_checked():
  model = _model(_rule(doubled_bwd))
  vv.install()
  try:
    jax.grad(model)(W, jnp.ones(XS.shape))   # traced and cached, fwd rules and all
    assert len(vv.gradcheck(model, W, XS)) == 1
  finally:
    vv.uninstall()


def _ste():
  @jax.custom_vjp
  def binarize(x):
    return jnp.sign(x)
  binarize.defvjp(lambda x: (binarize(x), None), lambda _, g: (g,))
  return binarize


def test_an_unmarked_straight_through_estimator_is_not_judged_not_wrong():
  ste = _ste()
  result = vv.gradcheck(lambda x: ste(x).sum(), jnp.ones(3))
  assert list(result) == []
  (r,) = result.not_judged
  assert r.function == "binarize" and r.status == oracle.UNVERIFIABLE and not r.surrogate
  assert "zero at every draw" in r.reason and "sign" in r.reason
  assert result.summary() == ("1 custom rule value-checked: 0 differ from the primal's "
                              "derivative, 1 not judged")


def test_a_rule_marked_surrogate_is_never_a_warning():
  @vv.surrogate
  @jax.custom_vjp
  def clipped(x):                  # a judgeable primal with a different gradient on purpose
    return jnp.tanh(x)
  clipped.defvjp(lambda x: (clipped(x), None), lambda _, g: (g,))

  @jax.custom_vjp
  @vv.surrogate
  def clipped_too(x):              # marking the primal function works as well
    return jnp.tanh(x)
  clipped_too.defvjp(lambda x: (clipped_too(x), None), lambda _, g: (g,))

  result = vv.gradcheck(lambda x: (clipped(x) + clipped_too(x)).sum(), jnp.ones(3))
  assert list(result) == []
  assert [(r.status, r.surrogate) for r in result.rules] == [(oracle.WRONG, True)] * 2
  assert "2 marked surrogate" in result.summary()


def _gated(eqx):
  """An equinox model whose filter_custom_vjp bwd forgot the h * s * (1 - s) term."""
  @eqx.filter_custom_vjp
  def gate(inputs, offset):
    h, scale = inputs
    return jax.nn.sigmoid(h) * h * scale + offset

  @gate.def_fwd
  def gate_fwd(perturbed, inputs, offset):
    return gate(inputs, offset), inputs

  @gate.def_bwd
  def gate_bwd(residuals, g, perturbed, inputs, offset):
    h, scale = residuals
    s = jax.nn.sigmoid(h)
    return (g * scale * s, None)       # forgot the h * s * (1 - s) term

  class Gated(eqx.Module):
    linear: eqx.nn.Linear

    def __call__(self, x):
      return gate((self.linear(x), 2.0), jnp.full(4, 0.5))
  return Gated(eqx.nn.Linear(3, 4, key=jax.random.PRNGKey(0)))


def test_a_wrong_equinox_filter_custom_vjp_rule_inside_a_model():
  eqx = pytest.importorskip("equinox")   # not installed with an older JAX (scripts/test.sh)
  model = _gated(eqx)

  @eqx.filter_jit
  def loss(model, x):
    return jax.vmap(model)(x).sum()
  params, static = eqx.partition(model, eqx.is_inexact_array)
  result = vv.gradcheck(lambda p, x: loss(eqx.combine(p, static), x), params,
                        jax.ShapeDtypeStruct((8, 3), jnp.float32), argnums=0)
  (d,) = result
  assert d.kind == "bwd_value" and d.function == "gate" and d.rule == "gate_bwd"
  (leaf,) = d.leaf_errors             # the unperturbed offset owes nothing and is not judged
  assert leaf.max_rel > 0.01 and not leaf.got_zero


def test_a_wrong_rule_inside_a_flax_model():
  nn = pytest.importorskip("flax.linen")
  act = _rule(sign_bwd)

  class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
      return nn.Dense(2)(act(nn.Dense(4)(x), 1.5))
  model = MLP()
  x = jnp.ones((8, 3))
  params = model.init(jax.random.PRNGKey(0), x)
  (d,) = vv.gradcheck(lambda p, x: model.apply(p, x).sum(), params, x, argnums=0)
  assert d.function == "scaled_tanh" and d.rule == "sign_bwd" and d.primal == "float32[8,4]"


def _loss_over(big, act):
  return lambda x: act(x, 1.0).sum() + jnp.sum(big) * 0


def test_the_result_keeps_no_array_of_the_checked_function_alive():
  big = jnp.ones((512, 512))
  alive = weakref.ref(big)
  loss = _loss_over(big, _rule(doubled_bwd))
  result = vv.gradcheck(loss, jnp.ones(3))
  del big, loss
  gc.collect()
  assert alive() is None and len(result) == 1 and result[0].leaf_errors


def _softplus_rule(scale):
  """softplus whose bwd computes in float16 and casts back to float32 (``scale`` x the
  right gradient)."""
  @jax.custom_vjp
  def softplus(x):
    return jnp.logaddexp(x, 0.)

  def softplus_bwd(x, g):
    s = jax.nn.sigmoid(x.astype(jnp.float16))
    return ((scale * g.astype(jnp.float16) * s).astype(jnp.float32),)
  softplus.defvjp(lambda x: (softplus(x), x), softplus_bwd)
  return softplus


def test_a_rule_computing_in_float16_is_judged_at_float16_tolerance():
  """Before: 'rel 0.00077' at float32 tolerance called the right rule wrong."""
  x = jnp.linspace(-3., 3., 12)
  right = _softplus_rule(1.)
  assert list(vv.gradcheck(lambda x: jnp.sin(right(x)).sum(), x)) == []
  off = _softplus_rule(1.05)
  (d,) = vv.gradcheck(lambda x: jnp.sin(off(x)).sum(), x)
  assert d.kind == "bwd_value", "5% off is wrong at float16 tolerance too"


def _host_log(bwd):
  """log(x) computed on the host (pure_callback): NaN at negative x, outside its domain."""
  import numpy as np

  def host(x):
    return jax.pure_callback(lambda v: np.log(v).astype(v.dtype),
                             jax.ShapeDtypeStruct(x.shape, x.dtype), x, vmap_method="expand_dims")

  @jax.custom_vjp
  def log_host(x):
    return host(x)
  log_host.defvjp(lambda x: (log_host(x), x), bwd)
  return log_host


def test_a_reference_that_is_not_finite_cannot_judge_and_never_calls_a_rule_wrong():
  """Before: finite differences at negative draws were NaN ('rel nan'): the right rule of
  a host callback was a bwd_value warning. A NaN reference says nothing; the positive
  draws still judge, and find a wrong rule."""
  import numpy as np
  with np.errstate(invalid="ignore"):
    right = _host_log(lambda x, g: (g / x,))
    result = vv.gradcheck(lambda x: right(x).sum(), jnp.linspace(.5, 2., 4))
    assert list(result) == [], result
    wrong = _host_log(lambda x, g: (-g / x,))
    (d,) = vv.gradcheck(lambda x: wrong(x).sum(), jnp.linspace(.5, 2., 4))
  assert d.kind == "bwd_value" and "finite differences" in d.expected
