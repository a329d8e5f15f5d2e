"""Rules real users write: made per call (factories, flax linen's nn.custom_vjp,
jax.custom_gradient in a loop) and behind a library's wrapper (equinox's
filter_custom_vjp, which diffrax, optimistix and lineax are built on).

Each is diagnosed as the user wrote it: their function and rule, sources and
call sites in this file, the input spelled as they would type it, and fixes
verified against their own rule.
"""
import gc

import jax
import jax.numpy as jnp
import pytest
eqx = pytest.importorskip("equinox")   # not installed with an older JAX (scripts/test.sh)
nn = pytest.importorskip("flax.linen")
nnx = pytest.importorskip("flax.nnx")

import jupyter_vjpviz as vv
from jupyter_vjpviz.capture.sites import retained_rules
from jupyter_vjpviz.capture.naming import library_wrappers
from jupyter_vjpviz.capture.records import Strong

HERE = __file__


def _diagnosed(thunk):
  with pytest.raises((ValueError, TypeError)):
    thunk()
  gc.collect()            # whatever only the failing call held is gone now
  d = vv.last()
  assert d is not None
  return d


def _in_this_file(where):
  assert where is not None and where.startswith(HERE + ":"), where


# ------------------------------------------------------------- rules made per call

def make_scaled(scale, bwd):
  """A factory: a fresh custom_vjp per call, its fwd not even referring to it."""
  f = jax.custom_vjp(lambda x: x * scale)

  def scaled_fwd(x):
    return x * scale, None
  f.defvjp(scaled_fwd, bwd)
  return f


def bad_scaled_bwd(res, g):
  return (g[:2] * 2.,)


def test_a_factory_rule_gone_before_the_backward_pass_is_diagnosed_with_fixes(hook):
  loss = lambda x: make_scaled(2., bad_scaled_bwd)(x).sum()
  d = _diagnosed(lambda: jax.jit(jax.grad(loss))(jnp.ones(3)))
  assert (d.kind, d.rule, d.argument) == ("bwd_type", "bad_scaled_bwd", "x")
  _in_this_file(d.rule_source)
  _in_this_file(d.call_site)
  assert d.fixes and "def bad_scaled_bwd" in d.fixes[0].code
  good = "def bad_scaled_bwd(res, g):\n  return (g * 2.,)\n"
  assert vv.verify_fix(d, good) == []
  assert vv.verify_fix(d, "def bad_scaled_bwd(res, g):\n  return (g[1:],)\n")


def test_a_factory_rules_structure_error_is_diagnosed(hook):
  loss = lambda x: make_scaled(2., lambda res, g: g * 2.)(x).sum()
  d = _diagnosed(lambda: jax.grad(loss)(jnp.ones(3)))
  assert (d.kind, d.function) == ("bwd_structure", "<lambda>")
  _in_this_file(d.call_site)
  assert d.fixes


def test_a_diagnosis_keeps_no_array_of_a_per_call_rule_that_closes_over_arrays(hook):
  baseline = {id(a) for a in jax.live_arrays()}
  for step in range(12):
    data = jnp.full((512, 1024), float(step))          # 2 MiB the rule closes over

    def bwd(res, g, data=data):
      return ((g * data)[:-1],)
    loss = lambda x: make_scaled(data, bwd)(x).sum()  # noqa: F821 - deleted below: nothing may keep it alive
    with pytest.raises(ValueError):
      jax.grad(loss)(jnp.ones((512, 1024)))
  del data, bwd, loss
  gc.collect()
  assert len(vv.diagnoses()) == 12
  assert not retained_rules.holds_arrays(vv.last().site.custom_rule())    # a stand-in, if anything
  extra = [a.shape for a in jax.live_arrays() if id(a) not in baseline]
  assert extra == [], f"device buffers kept alive: {extra}"


def test_custom_gradient_made_in_a_loop_names_the_users_vjp(hook):
  def loss(x):
    for _ in range(3):
      @jax.custom_gradient
      def double(x):
        def double_vjp(g):
          return g[:2] * 2.
        return x * 2., double_vjp
      x = double(x)
    return x.sum()
  d = _diagnosed(lambda: jax.grad(loss)(jnp.ones(3)))
  assert (d.kind, d.function, d.rule, d.argument) == ("bwd_type", "double", "double_vjp", "x")
  _in_this_file(d.source)
  _in_this_file(d.rule_source)
  _in_this_file(d.call_site)
  fixed = "def double(x):\n  def double_vjp(g):\n    return g * 2.\n  return x * 2., double_vjp\n"
  assert vv.verify_fix(d, fixed) == []
  wrong = vv.verify_fix(d, fixed.replace("g * 2.", "g[1:] * 2."))
  assert wrong and wrong[0].rule == "double_vjp"


@jax.custom_gradient
def matvec(w, x):
  return w @ x, lambda g: (jnp.outer(g, x).T, w.T @ g)   # w's cotangent transposed


def test_a_custom_gradient_closure_gets_a_verified_fix_of_the_users_function(hook):
  """JAX's own bwd runs the lambda matvec returned: the fix edits that lambda, inside
  matvec (the function JAX is handed), and is judged against matvec's autodiff."""
  d = _diagnosed(lambda: jax.grad(lambda w, x: matvec(w, x).sum())(jnp.ones((4, 3)), jnp.ones(3)))
  first = d.fixes[0]
  assert (first.title, first.verdict) == ("Transpose", "verified")
  assert "lambda g: (jnp.outer(g, x), w.T @ g)" in first.code and first.code.count("def ") == 1
  assert vv.verify_fix(d, first.code) == []
  applied = vv.apply_fix(d, first.code)
  assert applied.path == HERE and not applied.applied   # a patch of this file, not of JAX's
  assert "+  return w @ x, lambda g: (jnp.outer(g, x), w.T @ g)" in applied.patch


def test_a_custom_gradient_vjp_def_returning_a_bare_cotangent_is_fixed(hook):
  @jax.custom_gradient
  def double(x):
    def double_vjp(g):
      return g[:2] * 2.         # JAX takes a one-input VJP's cotangent without a tuple
    return x * 2., double_vjp
  d = _diagnosed(lambda: jax.grad(lambda x: double(x).sum())(jnp.ones(3)))
  assert (d.fixes[0].title, d.fixes[0].verdict) == ("Remove the slice", "verified")
  assert "    return g * 2." in d.fixes[0].code


def dense(mdl, x):
  return mdl(x)


def dense_fwd(mdl, x):
  return nn.vjp(dense, mdl, x)


class Dense3(nn.Module):
  """flax linen's nn.custom_vjp: a jax.custom_vjp made anew on every call."""
  drop_input_grad: bool

  @nn.compact
  def __call__(self, x):
    def dense_bwd(vjp_fn, y_t):
      params_t, input_t = vjp_fn(y_t)
      return (params_t,) if self.drop_input_grad else (params_t, input_t)
    return nn.custom_vjp(dense, forward_fn=dense_fwd, backward_fn=dense_bwd)(nn.Dense(3), x)


def test_flax_linen_custom_vjp_is_the_users_rule(hook):
  x = jnp.ones((2, 3))
  model = Dense3(drop_input_grad=True)
  params = model.init(jax.random.key(0), x)
  d = _diagnosed(lambda: jax.grad(lambda p: model.apply(p, x).sum())(params))
  assert (d.kind, d.function, d.rule) == ("bwd_structure", "dense", "dense_bwd")
  _in_this_file(d.source)
  _in_this_file(d.rule_source)
  _in_this_file(d.call_site)
  assert d.fixes and all("def dense_bwd" in f.code for f in d.fixes)


class TransposedDense(nn.Module):
  """An nn.custom_vjp whose bwd transposes the input's cotangent (wrong for non-square x)."""

  @nn.compact
  def __call__(self, x):
    def dense_bwd(vjp_fn, y_t):
      params_t, input_t = vjp_fn(y_t)
      return (params_t, input_t.T)
    return nn.custom_vjp(dense, forward_fn=dense_fwd, backward_fn=dense_bwd)(nn.Dense(3), x)


GOOD_DENSE_BWD = """
def dense_bwd(vjp_fn, y_t):
  params_t, input_t = vjp_fn(y_t)
  return (params_t, input_t)
"""


def _inputs(d):
  return [n.label for n in d.graph.nodes if n.kind == "input"]


def test_flax_linen_rule_inputs_are_spelled_as_the_user_types_them(hook):
  """The variables flax hands its custom_vjp are the user's own parameters (named as the
  grad's input), the data is the user's fwd's ``x``; the fwd rule is ``dense_fwd``."""
  x = jnp.ones((2, 3))
  model = TransposedDense()
  params = model.init(jax.random.key(0), x)
  d = _diagnosed(lambda: jax.grad(lambda p: model.apply(p, x).sum())(params))
  assert (d.kind, d.function, d.rule, d.argument) == ("bwd_type", "dense", "dense_bwd", "x")
  assert d.site.fwd_rule == "dense_fwd"
  assert d.site.in_names == ("p['params']['Dense_0']['bias']", "p['params']['Dense_0']['kernel']", "x")
  assert _inputs(d) == ["p['params']['Dense_0']['bias']", "p['params']['Dense_0']['kernel']"]


class SummedTransposedDense(nn.Module):
  @nn.compact
  def __call__(self, x):
    return TransposedDense()(x).sum()


def test_a_bound_methods_inputs_are_named_by_its_parameters_not_self(hook):
  """``jax.grad(model.apply)``: flax's ``apply`` has ``__wrapped__``, which a bound method
  passes on, so unwrapping it lands on the function whose first parameter is ``self``."""
  x = jnp.ones((2, 3))
  model = SummedTransposedDense()
  params = model.init(jax.random.key(0), x)
  d = _diagnosed(lambda: jax.grad(model.apply)(params, x))
  assert d.site.in_names[:2] == ("variables['params']['TransposedDense_0']['Dense_0']['bias']",
                                 "variables['params']['TransposedDense_0']['Dense_0']['kernel']")
  assert _inputs(d)[0].startswith("variables['params']")


class NoBiasGrad(nn.Module):
  """An nn.custom_vjp whose bwd builds the variables' cotangent without the bias."""

  @nn.compact
  def __call__(self, x):
    def affine(mdl, x):
      return mdl(x)

    def affine_fwd(mdl, x):
      return affine(mdl, x), (x, mdl.variables["params"]["kernel"])

    def affine_bwd(res, g):
      x, kernel = res
      params_t = {"params": {"kernel": x.T @ g}}
      return params_t, g @ kernel.T
    return nn.custom_vjp(affine, forward_fn=affine_fwd, backward_fn=affine_bwd)(nn.Dense(2), x)


def test_a_missing_variable_is_added_where_the_users_bwd_writes_it(hook):
  """flax hands JAX ``((params_t,), x_t)`` for the user's ``(params_t, x_t)``: the key is
  added in the user's dict, found through the leaves the user did return."""
  x = jnp.ones((4, 3))
  model = NoBiasGrad()
  params = model.init(jax.random.key(0), x)
  d = _diagnosed(lambda: jax.grad(lambda p: model.apply(p, x).sum())(params))
  assert d.kind == "bwd_structure" and d.argument == "p['params']['Dense_0']['bias']"
  (fix,) = [f for f in d.fixes if f.title.startswith("Add the missing key 'bias'")]
  assert "params_t = {\"params\": {\"kernel\": x.T @ g, 'bias': None}}" in fix.code
  assert [p.kind for p in vv.verify_fix(d, fix.code)] == ["bwd_value"]   # well-typed now


class LiftedRule(nn.Module):
  """An nn.custom_vjp under a lifted transform: JAX traces the fwd of the custom_vjp flax
  made for the call only after that call returned."""
  lift: str
  inner: nn.Module

  @nn.compact
  def __call__(self, x):
    if self.lift == "remat":
      return nn.remat(lambda mdl, x: mdl(x))(self.inner, x)
    step = lambda mdl, c, _: (mdl(c), None)
    return nn.scan(step, variable_axes={"params": 0}, split_rngs={"params": True},
                   length=2)(self.inner, x, None)[0]


@pytest.mark.parametrize("lift, inner, kind", [
    ("remat", TransposedDense(), "bwd_type"),
    ("scan", Dense3(drop_input_grad=True), "bwd_structure")])
def test_flax_linen_rule_under_nn_remat_and_nn_scan_is_the_users_rule(hook, lift, inner, kind):
  x = jnp.ones((2, 3))
  model = LiftedRule(lift, inner)
  params = model.init(jax.random.key(0), x)
  d = _diagnosed(lambda: jax.grad(lambda p: model.apply(p, x).sum())(params))
  assert (d.kind, d.function, d.rule) == (kind, "dense", "dense_bwd")
  _in_this_file(d.rule_source)
  _in_this_file(d.call_site)
  assert d.fixes and all("def dense_bwd" in f.code for f in d.fixes)
  if kind == "bwd_type":
    assert d.argument == "x" and d.fixes[0].verdict == "verified"
    assert vv.verify_fix(d, GOOD_DENSE_BWD) == []


class ScannedDense(nn.Module):
  """An nn.custom_vjp whose bwd clips its variables' cotangents and drops the input's
  (``short``), or gives the bias's an extra axis."""
  short: bool

  @nn.compact
  def __call__(self, x):
    def dense_bwd(vjp_fn, y_t):
      params_t, input_t = vjp_fn(y_t)
      params_t = jax.tree_util.tree_map(lambda p: jnp.clip(p, -.1, .1), params_t)
      if self.short:
        return (params_t,)
      params_t["params"]["bias"] = params_t["params"]["bias"][None]
      return (params_t, input_t)
    return nn.custom_vjp(dense, forward_fn=dense_fwd, backward_fn=dense_bwd)(nn.Dense(3), x)


SCANNED = "p['params']['inner']['Dense_0']"


@pytest.mark.parametrize("inner", [ScannedDense(short=True), ScannedDense(short=False)],
                         ids=["structure", "type"])
def test_flax_linen_variables_under_nn_scan_are_spelled_as_the_user_types_them(hook, inner):
  """Under nn.scan flax hands its custom_vjp a slice of the user's parameters, not them:
  no identity names them, yet they are the graph's program inputs, scanned. Everything
  (leaf names, fix notes, headline, graph) spells them as the user does, not as flax's
  ``grad_variables[0]['params']['bias']``."""
  x = jnp.ones((2, 3))
  model = LiftedRule("scan", inner)
  params = model.init(jax.random.key(0), x)
  d = _diagnosed(lambda: jax.grad(lambda p: model.apply(p, x).sum())(params))
  assert d.site.in_names == (f"{SCANNED}['bias']", f"{SCANNED}['kernel']", "x")
  assert d.instance == f"{SCANNED}, in every iteration of its scan"
  text = d.to_text() + str(d.to_dict()) + "".join(f.title + (f.note or "") for f in d.fixes)
  assert "grad_variables" not in text
  if d.kind == "bwd_structure":   # the right structure, still clipped: not the primal's values
    (clipped,) = vv.verify_fix(d, CLIPPED_DENSE_BWD)
    assert (clipped.kind, clipped.argument) == ("bwd_value", f"{SCANNED}['bias']")
    assert "grad_variables" not in clipped.headline + clipped.to_text()
  else:
    assert d.fixes and "grad_variables" not in text
    _one_spelling(d, f"{SCANNED}['bias']")
    # the program input it is a slice of is that input: not told apart as "... of <lambda>"
    assert _inputs(d) == [f"{SCANNED}['bias']", f"{SCANNED}['kernel']"]


CLIPPED_DENSE_BWD = """
def dense_bwd(vjp_fn, y_t):
  params_t, input_t = vjp_fn(y_t)
  params_t = jax.tree_util.tree_map(lambda p: jnp.clip(p, -.1, .1), params_t)
  return (params_t, input_t)
"""


class LiftedGrad(nn.Module):
  """A lifted nn.grad over a module with a broken rule: flax's own jax.vjp inside."""

  @nn.compact
  def __call__(self, x):
    def f(mdl, x):
      return mdl(x).sum()
    (g,) = nn.grad(f, TransposedDense(), x)
    return (g * x).sum()


def test_under_a_lifted_nn_grad_the_input_is_the_users_not_flaxs_scopes(hook):
  x = jnp.ones((2, 3))
  d = _diagnosed(lambda: LiftedGrad().init(jax.random.key(0), x))
  assert (d.kind, d.rule, d.argument) == ("bwd_type", "dense_bwd", "x")
  # the user's x (not flax's scopes), told apart from the rule's own x as "x of f"
  assert _inputs(d) == ["x of f"], (_inputs(d), d.graph.note)


def test_flax_linen_graph_names_the_rule_made_per_call_as_the_user_wrote_it(hook):
  """flax stages its own per-call ``f``/``f_bwd``: the graph's node is the user's dense,
  found by where it was called, with the wrong cotangent on its input's edge."""
  x = jnp.ones((2, 3))
  model = TransposedDense()
  params = model.init(jax.random.key(0), x)
  d = _diagnosed(lambda: jax.grad(lambda p, x: model.apply(p, x).sum(), argnums=(0, 1))(params, x))
  node = d.graph.node(d.node)
  assert node is not None and (node.label, node.function, node.rule) == ("dense", "dense", "dense_bwd")
  _in_this_file(node.call_site)
  [edge] = [e for e in d.graph.edges if e.mismatch]
  assert (edge.dst, edge.cotangent, edge.cotangent_got) == (d.node, "float32[2,3]", "float32[3,2]")


def test_flax_linen_rule_is_verified_and_applied_after_the_failing_call_holding_no_array(hook):
  """flax's custom_vjp closes over the model's variables (tracers of the failing trace):
  the diagnosis holds a stand-in that reaches none, enough to verify fixes by type and
  value and to write a patch for the user's file, while no device buffer outlives the call."""
  x = jnp.ones((2, 3))
  model = TransposedDense()
  params = model.init(jax.random.key(0), x)
  baseline = {id(a) for a in jax.live_arrays()}
  d = _diagnosed(lambda: jax.grad(lambda p: model.apply(p, x).sum())(params))
  assert [a.shape for a in jax.live_arrays() if id(a) not in baseline] == []
  assert isinstance(d.site.custom_rule, Strong) and not retained_rules.holds_arrays(d.site.custom_rule())
  assert d.fixes and d.fixes[0].verdict == "verified", [(f.title, f.verdict) for f in d.fixes]
  assert vv.verify_fix(d, GOOD_DENSE_BWD) == []
  (wrong,) = vv.verify_fix(d, GOOD_DENSE_BWD.replace("input_t)", "input_t.T)"))
  assert (wrong.kind, wrong.argument) == ("bwd_type", "x")
  (scaled,) = vv.verify_fix(d, GOOD_DENSE_BWD.replace("input_t)", "2 * input_t)"))
  assert (scaled.kind, scaled.argument) == ("bwd_value", "x")
  applied = vv.apply_fix(d, GOOD_DENSE_BWD)
  assert applied.path == HERE and not applied.applied
  assert "+      return (params_t, input_t)" in applied.patch


def test_a_per_call_rule_is_never_applied_to_its_stand_in():
  """Rebinding a stand-in would change nothing the user runs: it says so."""
  data = jnp.ones(3)
  cvjp = make_scaled(data, lambda res, g, data=data: (g * data,))
  held = retained_rules.standin(cvjp)
  assert held is not None and not retained_rules.holds_arrays(held)
  with pytest.raises(ValueError, match="re-run"):
    library_wrappers.user_rules(held).define("defvjp", held.fwd, lambda res, g: (g,))
  assert retained_rules.standin(cvjp).bwd.__defaults__[0].strides == (0,)


def _one_spelling(d, argument):
  """``argument`` is how the headline, the text report, the graph's failing edge and
  ``to_dict()`` (what the panel gets) all spell the input."""
  assert d.argument == argument and d.to_dict()["argument"] == argument
  assert f" {argument}:" in d.headline
  assert f"input     {argument}" in d.to_text()
  [edge] = [e for e in d.graph.edges if e.mismatch]
  assert edge.argument == argument and f"-> {argument}  P " in d.to_text()
  assert argument in d.to_dot()
  assert not any("scopes" in n.label or "grad_variables" in n.label or "diff_array" in n.label
                 for n in d.graph.nodes), [n.label for n in d.graph.nodes]


def test_a_library_rules_input_has_one_spelling_everywhere(hook):
  x = jnp.ones((2, 3))
  model = TransposedDense()
  params = model.init(jax.random.key(0), x)
  _one_spelling(_diagnosed(lambda: jax.grad(lambda p: model.apply(p, x).sum())(params)), "x")
  vv.clear()
  _one_spelling(_diagnosed(lambda: eqx.filter_grad(lambda m: run(m, jnp.ones(3)).sum())(_model())),
                "model.layers[2].weight")


@jax.custom_vjp
def scale_by(w, x):
  return w * x


scale_by.defvjp(lambda w, x: (w * x, (w, x)), lambda res, g: (g * res[1], (g * res[0]).T))


def test_a_rule_input_the_loss_closes_over_is_drawn_with_its_wrong_cotangent(hook):
  """``x`` is a constant of the traced loss, so no edge of the program carries it: the
  failing input still gets a box and the marked edge, named by the rule's argument."""
  x = jnp.ones((2, 3))
  d = _diagnosed(lambda: jax.grad(lambda w: scale_by(w, x).sum())(jnp.ones((2, 3))))
  assert d.argument == "x"
  [edge] = [e for e in d.graph.edges if e.mismatch]
  assert (edge.dst, edge.argument, edge.cotangent_got) == (d.node, "x", "float32[3,2]")
  assert d.graph.node(edge.src).kind == "static"
  assert "got float32[3,2]" in d.to_svg()


# ------------------------------------------------------------- flax nnx.custom_vjp

class NLinear(nnx.Module):
  def __init__(self):
    self.w = nnx.Param(jnp.ones((3, 4)))

  def __call__(self, x):
    return matmul(self, x)


@nnx.custom_vjp(graph_updates=True)
def matmul(m, x):
  return x @ m.w[...]


def matmul_fwd(m, x):
  return matmul(m, x), (m.w[...], x)


def matmul_bwd(res, g):
  updates, out_g = g
  w, x = res
  (m_g, _) = updates
  m_g = jax.tree.map(lambda a: a, m_g)
  m_g['w'].value = (x.T @ out_g).T          # transposed: wrong
  return m_g, out_g @ w.T


matmul.defvjp(matmul_fwd, matmul_bwd)


def test_flax_nnx_custom_vjp_is_the_users_rule_fixed_where_it_sets_the_gradient(hook):
  """nnx.custom_vjp hands JAX callable objects of flax's (``FwdFn``, ``BwdFn``) that call
  the user's rules: the input is the user's ``m.w``, the failing path is in their own
  return, and the fix edits the statement that set that entry of the state."""
  model = NLinear()
  step = nnx.jit(lambda m, x: nnx.grad(lambda m: m(x).sum())(m))
  d = _diagnosed(lambda: step(model, jnp.ones((2, 3))))
  assert (d.kind, d.function, d.rule, d.argument) == ("bwd_type", "matmul", "matmul_bwd", "m.w.value")
  assert d.path == "[0]['w'].value"
  _in_this_file(d.rule_source)
  first = d.fixes[0]
  assert "  m_g['w'].value = (x.T @ out_g)" in first.code, [f.code for f in d.fixes]
  # flax's primal runs only inside nnx's call: fwd's output, the rule set aside, is the
  # reference; the module state it hands back is given no cotangent, as the rule gives it.
  assert first.verdict == "verified" and "hand an input back" in first.note, first.note
  assert vv.verify_fix(d, first.code) == []
  doubled = first.code.replace("(x.T @ out_g)", "(2 * x.T @ out_g)")
  assert [(p.kind, p.argument) for p in vv.verify_fix(d, doubled)] == [("bwd_value", "m.w.value")]


# ------------------------------------------------- flax nnx.custom_vjp(graph_updates=False)

class NAffine(nnx.Module):
  def __init__(self):
    self.w = nnx.Param(jnp.linspace(0.5, 1.5, 12).reshape(3, 4))
    self.b = nnx.Param(jnp.zeros((4,)))


@nnx.custom_vjp(graph_updates=False)
def affine(m, x):
  return x @ m.w[...] + m.b[...]


def affine_fwd(m, x):
  return affine(m, x), (m, x)


def affine_bwd_transposed(res, g):
  m, x = res
  m_g = nnx.clone(m)                  # the nnx docs' way: the cotangent is a module
  m_g.w.set_value((x.T @ g).T)        # transposed: wrong (set_value does not check)
  m_g.b.set_value(g.sum(0))
  return m_g, g @ m.w[...].T


def affine_bwd_half(res, g):
  m, x = res
  m_g = nnx.clone(m)
  m_g.w.set_value((x.T @ g).astype(jnp.float16))      # JAX lets it through
  m_g.b.set_value(g.sum(0))
  return m_g, g @ m.w[...].T


@nnx.custom_vjp(graph=False)             # flax's tree mode: the module is a plain pytree
def affine_pure(m, x):
  return x @ m.w[...] + m.b[...]


def affine_pure_fwd(m, x):
  return affine_pure(m, x), (m, x)


def _affine_step(bwd, primal=affine, fwd=affine_fwd, graph=True):
  """flax's custom_vjp without graph updates hands JAX ``SimpleFwdFn``/``SimpleBwdFn``,
  whose ``__call__`` is decorated (it copies the arguments first): the user's rules are
  behind that decorator, the module flattened into a ``TreeState`` (a pytree in tree mode)."""
  primal.defvjp(fwd, bwd)
  step = nnx.jit(lambda m, x: nnx.grad(lambda m: primal(m, x).sum(), graph=graph)(m), graph=graph)
  return lambda: step(NAffine(), jnp.linspace(-1, 1, 6).reshape(2, 3))


def test_flax_nnx_tree_mode_custom_vjp_names_the_modules_input_and_fixes_the_rule(hook):
  d = _diagnosed(_affine_step(affine_bwd_transposed))
  assert (d.kind, d.function, d.rule, d.argument) == ("bwd_type", "affine", "affine_bwd_transposed",
                                                      "m.w.value")
  assert (d.expected, d.got, d.path) == ("float32[3,4]", "float32[4,3]", "[0].w.value")
  assert d.headline.startswith("affine's bwd rule affine_bwd_transposed returned float32[4,3] for "
                               "input m.w.value: float32[3,4]"), d.headline
  _in_this_file(d.rule_source)
  first = d.fixes[0]
  assert first.verdict == "verified", [(f.title, f.verdict, f.note) for f in d.fixes]
  assert "  m_g.w.set_value((x.T @ g))" in first.code, first.code
  before = affine.custom_vjp_fn.bwd.bwd
  assert vv.verify_fix(d, first.code) == []
  doubled = first.code.replace("set_value((x.T @ g))", "set_value(2 * (x.T @ g))")
  assert [(p.kind, p.argument) for p in vv.verify_fix(d, doubled)] == [("bwd_value", "m.w.value")]
  assert affine.custom_vjp_fn.bwd.bwd is before       # verifying ran copies of flax's wrappers


def test_flax_nnx_graph_false_custom_vjp_is_fixed_the_same_way(hook):
  d = _diagnosed(_affine_step(affine_bwd_transposed, affine_pure, affine_pure_fwd, graph=False))
  assert (d.kind, d.function, d.rule, d.argument, d.path) == (
      "bwd_type", "affine_pure", "affine_bwd_transposed", "m.w.value", "[0].w.value")
  first = d.fixes[0]
  assert first.verdict == "verified", [(f.title, f.verdict, f.note) for f in d.fixes]
  assert "  m_g.w.set_value((x.T @ g))" in first.code, first.code
  assert vv.verify_fix(d, first.code) == []


def test_flax_nnx_tree_mode_custom_vjp_a_silent_dtype_is_named_and_cast(hook):
  vv.clear()
  grads = _affine_step(affine_bwd_half)()
  assert grads.w[...].dtype == jnp.float16             # as without vjpviz
  d = vv.last()
  assert (d.kind, d.rule, d.argument, d.got) == ("silent_dtype", "affine_bwd_half", "m.w.value",
                                                 "float16[3,4]")
  first = d.fixes[0]
  assert first.verdict == "verified", [(f.title, f.verdict, f.note) for f in d.fixes]
  assert vv.verify_fix(d, first.code) == []


# ------------------------------------------------------------- equinox filter_custom_vjp

class Layer(eqx.Module):
  weight: jax.Array

  def __call__(self, x):
    return self.weight @ x


class Model(eqx.Module):
  layers: list

  def __call__(self, x):
    for layer in self.layers:
      x = layer(x)
    return x


@eqx.filter_custom_vjp
def run(model, x):
  return model(x)


@run.def_fwd
def run_fwd(perturbed, model, x):
  return model(x), None


@run.def_bwd
def run_bwd(residuals, grad_obj, perturbed, model, x):
  grads = jax.grad(lambda m: jnp.vdot(m(x), grad_obj))(model)
  return jax.tree_util.tree_map(lambda a: a.T, grads)     # transposed: wrong for non-square


GOOD_RUN_BWD = """
def run_bwd(residuals, grad_obj, perturbed, model, x):
  return jax.grad(lambda m: jnp.vdot(m(x), grad_obj))(model)
"""


def _model():
  return Model([Layer(jnp.ones((3, 3))), Layer(jnp.ones((3, 3))), Layer(jnp.ones((4, 3)))])


def test_equinox_filter_custom_vjp_is_reported_as_the_user_wrote_it(hook):
  x = jnp.ones(3)
  d = _diagnosed(lambda: eqx.filter_grad(lambda m: run(m, x).sum())(_model()))
  assert (d.kind, d.function, d.rule) == ("bwd_type", "run", "run_bwd")
  assert d.argument == "model.layers[2].weight"
  assert d.path == ".layers[2].weight"      # where in run_bwd's own return, not equinox's
  assert d.argument in d.headline
  _in_this_file(d.source)
  _in_this_file(d.rule_source)
  _in_this_file(d.call_site)


def test_equinox_graph_names_and_marks_the_users_rule(hook):
  """The staged equation holds equinox's wrapper and its name: the graph still shows the
  user's function and rule, called from their line, with the wrong cotangent on its edge."""
  x = jnp.ones(3)
  d = _diagnosed(lambda: eqx.filter_grad(lambda m: run(m, x).sum())(_model()))
  node = d.graph.node(d.node)
  assert node is not None and (node.label, node.function, node.rule) == ("run", "run", "run_bwd")
  _in_this_file(node.call_site)
  [edge] = [e for e in d.graph.edges if e.mismatch]
  assert (edge.dst, edge.cotangent, edge.cotangent_got) == (d.node, d.expected, d.got)
  assert not any("wrapped" in (n.function or n.label) for n in d.graph.nodes)
  # equinox's wrapper bound run's equation and its own: neither is a scope of the loss.
  assert {n.scope for n in d.graph.nodes if n.parent is None} == {""}


def test_equinox_fixes_verify_on_the_users_bwd_signature_without_touching_it(hook):
  x = jnp.ones(3)
  d = _diagnosed(lambda: eqx.filter_grad(lambda m: run(m, x).sum())(_model()))
  before = run.fn_bwd
  assert vv.verify_fix(d, GOOD_RUN_BWD) == []
  wrong = vv.verify_fix(d, GOOD_RUN_BWD.replace("(model)\n", "(model)\n  return model\n"))
  assert wrong == [] or wrong[0].rule == "run_bwd"
  transposed = vv.verify_fix(d, "def run_bwd(residuals, grad_obj, perturbed, model, x):\n"
                                "  g = jax.grad(lambda m: jnp.vdot(m(x), grad_obj))(model)\n"
                                "  return jax.tree_util.tree_map(lambda a: a.T, g)\n")
  assert transposed and transposed[0].kind == "bwd_type" and transposed[0].rule == "run_bwd"
  assert run.fn_bwd is before
  applied = vv.apply_fix(d, GOOD_RUN_BWD)
  assert applied.path == HERE and not applied.applied     # a .py file's rule: a patch to apply
  assert "+  return jax.grad(lambda m: jnp.vdot(m(x), grad_obj))(model)" in applied.patch


def test_equinox_a_transposition_mapped_over_every_leaf_is_fixed_and_verified(hook):
  """run_bwd transposes every leaf with a tree map: the fix is to drop the map, judged by
  value against the primal, and verifying it (decorator and all) leaves run untouched."""
  x = jnp.ones(3)
  d = _diagnosed(lambda: eqx.filter_grad(lambda m: run(m, x).sum())(_model()))
  first = d.fixes[0]
  assert first.verdict == "verified", [(f.title, f.verdict, f.note) for f in d.fixes]
  assert "  return grads" in first.code and "tree_map" not in first.code
  before = run.fn_bwd
  assert vv.verify_fix(d, first.code) == []
  assert run.fn_bwd is before
  doubling = GOOD_RUN_BWD.replace("return jax.grad", "return jax.tree_util.tree_map(lambda a: 2 * a, jax.grad")
  (doubled,) = vv.verify_fix(d, doubling.replace("(model)\n", "(model))\n"))
  assert (doubled.kind, doubled.rule) == ("bwd_value", "run_bwd")


@eqx.filter_custom_vjp
def scaled_affine(inputs, scale):
  params, x = inputs
  return scale * (x @ params["w"]) + params["b"]


@scaled_affine.def_fwd
def scaled_affine_fwd(perturbed, inputs, scale):
  params, x = inputs
  return scaled_affine(inputs, scale), (x, params["w"])


@scaled_affine.def_bwd
def scaled_affine_bwd(residuals, g, perturbed, inputs, scale):
  x, w = residuals
  return {"w": scale * x.T @ g}, scale * g @ w.T       # no "b"


def _scaled_affine_grad():
  params = {"w": jnp.linspace(-1., 1., 6).reshape(3, 2), "b": jnp.zeros(2)}
  x = jnp.linspace(-1., 1., 12).reshape(4, 3)
  return lambda: eqx.filter_grad(lambda p: jnp.tanh(scaled_affine((p, x), 0.5)).sum())(params)


def test_equinox_a_missing_key_is_added_by_differentiating_the_users_primal(hook):
  """equinox's own check raises after the user's bwd returned, so the rule cannot be run
  whole; the key is added in the rule's own return, its value read off jax.vjp of the
  user's primal (``scaled_affine.fn``) at the bwd's own arguments, judged by the oracle."""
  with pytest.raises(RuntimeError):
    _scaled_affine_grad()()
  gc.collect()
  d = vv.last()
  assert (d.kind, d.rule, d.argument) == ("bwd_structure", "scaled_affine_bwd", "inputs[0]['b']")
  verified = [f for f in d.fixes if f.verdict == "verified"]
  assert verified, [(f.title, f.verdict, f.note) for f in d.fixes]
  fix = verified[0]
  assert fix.title == "Add the missing key 'b' by differentiating scaled_affine"
  assert "jax.vjp(lambda inputs: scaled_affine.fn(inputs, scale), inputs)" in fix.code
  assert "return {\"w\": scale * x.T @ g, 'b': dinputs[0]['b']}, scale * g @ w.T" in fix.code
  before = scaled_affine.fn_bwd
  assert vv.verify_fix(d, fix.code) == []
  assert scaled_affine.fn_bwd is before
  wrong = fix.code.replace("dinputs[0]['b']", "2 * dinputs[0]['b']")
  assert [p.kind for p in vv.verify_fix(d, wrong)] == ["bwd_value"]


@eqx.filter_custom_vjp
def shifted(inputs):
  params, x = inputs
  return x * params["scale"] + params["shift"]


@shifted.def_fwd
def shifted_fwd(perturbed, inputs):
  return shifted(inputs), inputs[0]["scale"]


@shifted.def_bwd
def shifted_bwd(scale, g, perturbed, inputs):
  grads = {"scale": (g * inputs[1]).sum(0)}     # no "shift"
  g = g * scale                                 # the cotangent rebound before the return
  return grads, g


def test_equinox_a_missing_key_of_a_dict_built_before_the_return_is_added_there(hook):
  """The key goes into the dict literal where the rule builds it; the primal is
  differentiated first in the body, before the rule rebinds its cotangent."""
  params = {"scale": jnp.linspace(.5, 1.5, 3), "shift": jnp.zeros(3)}
  x = jnp.linspace(-1., 1., 12).reshape(4, 3)
  with pytest.raises(RuntimeError):
    eqx.filter_grad(lambda p: jnp.sin(shifted((p, x))).sum())(params)
  d = vv.last()
  [fix] = [f for f in d.fixes if f.verdict == "verified"]
  body = fix.code.split("\n")
  assert body[2:4] == ["  _, pullback = jax.vjp(shifted.fn, inputs)", "  dinputs, = pullback(g)"]
  assert "  grads = {\"scale\": (g * inputs[1]).sum(0), 'shift': dinputs[0]['shift']}" in fix.code
  assert vv.verify_fix(d, fix.code) == []


def test_a_diffrax_style_solver_on_filter_custom_vjp_is_the_users_rule(hook):
  """A library's solver with a user-supplied vector field (the diffrax/optimistix shape)."""
  def make_solver(vector_field):
    @eqx.filter_custom_vjp
    def solve(y0, args):
      return y0 + vector_field(y0, args)

    @solve.def_fwd
    def solve_fwd(perturbed, y0, args):
      return solve(y0, args), y0

    @solve.def_bwd
    def solve_bwd(y0_saved, grad_obj, perturbed, y0, args):
      return grad_obj[:-1]
    return solve
  solve = make_solver(lambda y, a: a * y)
  d = _diagnosed(lambda: jax.grad(lambda y: solve(y, 2.).sum())(jnp.ones(3)))
  assert (d.kind, d.function, d.rule, d.argument) == ("bwd_type", "solve", "solve_bwd", "y0")
  _in_this_file(d.rule_source)
  _in_this_file(d.call_site)
  assert d.fixes and all("def solve_bwd(y0_saved, grad_obj, perturbed, y0, args)" in f.code
                         for f in d.fixes)
  assert vv.verify_fix(d, "def solve_bwd(y0_saved, grad_obj, perturbed, y0, args):\n"
                          "  return grad_obj * (1. + args)\n") == []
