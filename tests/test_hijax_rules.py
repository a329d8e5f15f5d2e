"""Hijax primitives (``jax.experimental.hijax.HiPrim``) written the way JAX's own tests write
them: ``vjp_fwd`` with ``vjp_bwd_retval`` (returns cotangents) or ``vjp_bwd`` (pushes them
into accumulators), bound through a helper function. Each wrong rule is diagnosed as a
custom_vjp rule is; each correct one is a silent control."""
import gc
import inspect
import traceback

import jax
import jax.numpy as jnp
import pytest
import jax_features
from diagnosed import plain_and_hooked, raises
from test_capture import _frames
jax_features.require("hijax primitives")   # before importing what only such a JAX has
import jax.experimental.hijax as hijax  # noqa: E402

try:
  HiPrim = jax_features.hi_primitive()
except pytest.skip.Exception as e:
  pytest.skip(str(e), allow_module_level=True)
vjp_from_jvp = getattr(hijax, "vjp_from_jvp", None)               # JAX 0.11 on

import jupyter_vjpviz as vv
from jupyter_vjpviz.capture.sites import retained_rules


def line_of(fn) -> str:
  return f"{__file__}:{inspect.getsourcelines(fn)[1]}"


class SinTimesY(HiPrim):
  """sin(x) * y, rules returning cotangents; ``wrong`` picks a mistake."""

  def __init__(self, x_aval, y_aval, *, wrong=None):
    self.in_avals, self.out_aval, self.params = (x_aval, y_aval), x_aval, dict(wrong=wrong)
    super().__init__()

  def expand(self, x, y):
    return jnp.sin(x) * y

  def vjp_fwd(self, nzs_in, x, y):
    return self(x, y), (x, y)

  def vjp_bwd_retval(self, res, g):
    x, y = res
    if self.wrong == "transpose":
      return (jnp.cos(x) * y * g, (jnp.sin(x) * g).T)
    if self.wrong == "one":
      return (jnp.cos(x) * y * g,)
    if self.wrong == "bf16":
      return (jnp.cos(x) * y * g, (jnp.sin(x) * g).astype(jnp.bfloat16))
    if self.wrong == "matmul":   # raises: a product of two f32[3,4]
      dy = jnp.sin(x) @ g
      return (jnp.cos(x) * y * g, dy)
    return (jnp.cos(x) * y * g, jnp.sin(x) * g)


def sin_times_y(x, y, wrong=None):
  return SinTimesY(jax.typeof(x), jax.typeof(y), wrong=wrong)(x, y)   # the call site


CALL = f"{__file__}:{inspect.getsourcelines(sin_times_y)[1] + 1}"


class MulAcc(HiPrim):
  """x * y, a rule pushing into accumulators; ``wrong`` pushes a transposed one for y."""

  def __init__(self, aval, *, wrong=False):
    self.in_avals, self.out_aval, self.params = (aval, aval), aval, dict(wrong=wrong)
    super().__init__()

  def expand(self, x, y):
    return x * y

  def vjp_fwd(self, nzs_in, x, y):
    return self(x, y), (x, y)

  def vjp_bwd(self, res, g, x_acc, y_acc):
    x, y = res
    x_acc.accum(g * y)
    y_acc.accum((x * g).T if self.wrong else x * g)


def mul(x, y, wrong=False):
  return MulAcc(jax.typeof(x), wrong=wrong)(x, y)


class Cube(HiPrim):
  """Rules derived by JAX from a jvp: the rule is JAX's, never edited."""

  def __init__(self, aval):
    self.in_avals, self.out_aval, self.params = (aval,), aval, {}
    super().__init__()

  def expand(self, x):
    return x ** 3

  def jvp(self, primals, tangents):
    (x,), (t,) = primals, tangents
    return self(x), 3 * x ** 2 * t

  if vjp_from_jvp is not None:
    vjp_fwd, vjp_bwd_retval = vjp_from_jvp


def loss(x, y, wrong=None):
  return sin_times_y(x, y, wrong).sum()


X, Y = jnp.ones((3, 4)), jnp.full((3, 4), 2.)


# ---------------------------------------------------------------- returned

@pytest.mark.parametrize("jit", [False, True])
def test_retval_transposed_cotangent_is_the_rules_bwd_type(hook, jit):
  grad = jax.grad(lambda x, y: loss(x, y, "transpose"), argnums=(0, 1))
  err = raises(lambda: (jax.jit(grad) if jit else grad)(X, Y))
  (d,) = vv.diagnoses()
  assert (d.kind, d.severity, d.function, d.rule) == (
      "bwd_type", "error", "SinTimesY", "SinTimesY.vjp_bwd_retval")
  assert (d.argument, d.primal, d.path, d.expected, d.got) == (
      "y", "float32[3,4]", "[1]", "float32[3,4]", "float32[4,3]")
  assert d.rule_source == line_of(SinTimesY.vjp_bwd_retval)
  assert d.call_site == CALL
  assert d.headline.startswith("SinTimesY.vjp_bwd_retval returned float32[4,3] for input y")
  node = d.graph.node(d.node)
  assert node.custom and node.function == "SinTimesY"
  assert [(e.dst, e.cotangent_got) for e in d.graph.edges if e.mismatch] == [(d.node, "float32[4,3]")]
  assert str(err) == d.message and any(n.startswith("vjpviz: SinTimesY.vjp_bwd_retval") for n in err.__notes__)


def test_retval_of_the_wrong_structure(hook):
  raises(lambda: jax.grad(lambda x, y: loss(x, y, "one"), argnums=(0, 1))(X, Y))
  (d,) = vv.diagnoses()
  assert (d.kind, d.severity, d.rule) == ("bwd_structure", "error", "SinTimesY.vjp_bwd_retval")
  assert d.expected == str(jax.tree.structure((0, 0)))
  assert d.got == str(jax.tree.structure((0,)))


def test_retval_dtype_jax_lets_through_is_a_warning(hook):
  gx, gy = jax.grad(lambda x, y: loss(x, y, "bf16"), argnums=(0, 1))(X, Y)
  assert gy.dtype == jnp.bfloat16        # JAX let it through
  (d,) = vv.diagnoses()
  assert (d.kind, d.severity, d.argument, d.expected, d.got) == (
      "silent_dtype", "warning", "y", "float32[3,4]", "bfloat16[3,4]")


def test_failing_instance_among_identical_blocks(hook):
  """Four applications from one line; only the third block's rule is wrong."""
  def model(ys, x):
    for k, y in enumerate(ys):
      x = sin_times_y(x, y, "transpose" if k == 2 else None)
    return x.sum()
  raises(lambda: jax.grad(model)([Y] * 4, X))
  (d,) = vv.diagnoses()
  applications = [n.id for n in d.graph.nodes if n.function == "SinTimesY"]
  assert len(applications) == 4 and d.node == applications[2]
  assert d.argument == "y"


def test_inputs_named_by_the_rules_parameters_through_pytrees(hook):
  class Scale(HiPrim):
    def __init__(self, x_aval, p_aval):
      self.in_avals, self.out_aval, self.params = (x_aval, p_aval), x_aval, {}
      super().__init__()

    def expand(self, x, params):
      return x * params["w"]

    def vjp_fwd(self, nzs_in, x, params):
      return self(x, params), (x, params)

    def vjp_bwd_retval(self, res, g):
      x, params = res
      return (g * params["w"], {"w": (g * x)[:2]})

  def scale(x, params):
    return Scale(jax.typeof(x), jax.tree.map(jax.typeof, params))(x, params)
  raises(lambda: jax.grad(lambda p: scale(X, p).sum())({"w": Y}))
  (d,) = vv.diagnoses()
  assert (d.kind, d.argument, d.path, d.got) == ("bwd_type", "params['w']", "[1]['w']", "float32[2,4]")


# ------------------------------------------------------------- accumulators

def test_vjp_bwd_pushing_a_wrong_cotangent_is_accumulator_type(hook):
  """Both inputs have one type: the accumulator itself says which input it was."""
  raises(lambda: jax.grad(lambda x, y: mul(x, y, True).sum(), argnums=(0, 1))(X, Y))
  (d,) = vv.diagnoses()
  assert (d.kind, d.severity, d.rule, d.argument, d.expected, d.got) == (
      "accumulator_type", "error", "MulAcc.vjp_bwd", "y", "float32[3,4]", "float32[4,3]")
  assert d.rule_source == line_of(MulAcc.vjp_bwd)
  assert d.headline.startswith("MulAcc.vjp_bwd pushed float32[4,3] into the accumulator for input y")


def _registered(cls):
  return cls


def test_the_primitive_is_sourced_at_its_class_statement(hook):
  """The function a diagnosis names is the class, so its source is the class statement (a
  decorator's line above it, as ``inspect`` counts), not ``__init__``, the first method."""
  @_registered
  class LocalScale(HiPrim):
    def __init__(self, aval):
      self.in_avals, self.out_aval, self.params = (aval, aval), aval, {}
      super().__init__()

    def expand(self, x, s):
      return x * s

    def vjp_fwd(self, nzs_in, x, s):
      return self(x, s), (x, s)

    def vjp_bwd_retval(self, res, g):
      x, s = res
      return g * s, (g * x).T

  raises(lambda: jax.grad(lambda x, y: loss(x, y, "transpose"), argnums=(0, 1))(X, Y))
  raises(lambda: jax.grad(lambda x, y: mul(x, y, True).sum(), argnums=(0, 1))(X, Y))
  raises(lambda: jax.grad(lambda x, s: LocalScale(jax.typeof(x))(x, s).sum(), argnums=(0, 1))(X, Y))
  found = [(d.function, d.source) for d in vv.diagnoses()]
  assert found == [("SinTimesY", line_of(SinTimesY)), ("MulAcc", line_of(MulAcc)),
                   ("LocalScale", line_of(LocalScale))]
  assert line_of(LocalScale).endswith(f":{inspect.getsourcelines(LocalScale.__init__)[1] - 2}")


# ------------------------------------------------------------------ controls

@pytest.mark.parametrize("run", [
    lambda: jax.grad(loss, argnums=(0, 1))(X, Y),
    lambda: jax.jit(jax.grad(loss, argnums=(0, 1)))(X, Y),
    lambda: jax.grad(lambda x, y: mul(x, y).sum(), argnums=(0, 1))(X, Y),
    pytest.param(lambda: jax.grad(lambda x: Cube(jax.typeof(x))(x).sum())(X), marks=pytest.mark.skipif(
        vjp_from_jvp is None, reason=f"jax {jax.__version__} has no vjp_from_jvp")),
    lambda: jax.grad(lambda x, ys: jax.lax.scan(lambda c, y: (sin_times_y(c, y), None), x, ys)[0]
                     .sum(), argnums=(0, 1))(X, jnp.stack([Y, Y])),
], ids=["retval", "retval-jit", "accum", "from-jvp", "scan"])
def test_correct_primitives_are_silent_and_unchanged(hook, run):
  hooked = run()
  assert vv.diagnoses() == []
  vv.uninstall()
  plain = run()
  assert jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), hooked, plain))


class Raising(SinTimesY):
  def vjp_bwd_retval(self, res, g):
    raise ValueError("the user's rule raised")


@pytest.mark.parametrize("filtering", ["auto", "off"])
def test_an_error_inside_a_rule_reaches_the_user_unchanged(hook, filtering):
  """Its type, message and every frame (JAX's own too, unfiltered) as without vjpviz."""
  run = lambda: jax.grad(lambda x, y: Raising(jax.typeof(x), jax.typeof(y))(x, y).sum())(X, Y)
  frames = lambda e: [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(e.__traceback__)]
  jax.config.update("jax_traceback_filtering", filtering)
  try:
    hooked = raises(run)
    vv.uninstall()
    plain = raises(run)
  finally:
    jax.config.update("jax_traceback_filtering", "auto")
  assert (type(hooked), str(hooked)) == (type(plain), str(plain)) == (ValueError, "the user's rule raised")
  assert frames(hooked) == frames(plain)


def test_residuals_reach_the_rule_unchanged_after_uninstall(hook):
  """A VJP function made while hooked still runs the user's rule on their residuals."""
  seen = []

  class Probe(SinTimesY):
    def vjp_bwd_retval(self, res, g):
      seen.append(type(res))
      return super().vjp_bwd_retval(res, g)
  _, f_vjp = jax.vjp(lambda x, y: Probe(jax.typeof(x), jax.typeof(y))(x, y), X, Y)
  vv.uninstall()
  f_vjp(jnp.ones((3, 4)))
  assert seen == [tuple]


# --------------------------------------------------------------------- fixes
# The rule is the method: fixes are the corrected method, judged by value against the
# primitive's own ``expand``; verify and apply take a method as the user would write it.

GOOD_RETVAL = """
def vjp_bwd_retval(self, res, g):
  x, y = res
  return (jnp.cos(x) * y * g, jnp.sin(x) * g)
"""


def test_retval_fixes_are_the_method_verified_by_the_primitives_expand(hook):
  raises(lambda: jax.grad(lambda x, y: loss(x, y, "transpose"), argnums=(0, 1))(X, Y))
  gc.collect()                          # the application is gone with the failing call
  (d,) = vv.diagnoses()
  first = d.fixes[0]
  assert first.verdict == "verified" and first.code.startswith("def vjp_bwd_retval(self, res, g):")
  assert "(jnp.sin(x) * g).T" not in first.code.split('"one"')[0]
  primal = [f for f in d.fixes if "differentiating" in f.title]
  assert primal and primal[0].verdict == "verified" and "jax.vjp(self.expand, x, y)" in primal[0].code
  assert vv.verify_fix(d, GOOD_RETVAL) == []
  (wrong,) = vv.verify_fix(d, GOOD_RETVAL.replace("jnp.sin(x) * g)", "jnp.cos(x) * g)"))
  assert (wrong.kind, wrong.argument, wrong.rule) == ("bwd_value", "y", "SinTimesY.vjp_bwd_retval")
  (typed,) = vv.verify_fix(d, GOOD_RETVAL.replace("jnp.sin(x) * g)", "(jnp.sin(x) * g).T)"))
  assert (typed.kind, typed.got) == ("bwd_type", "float32[4,3]")
  before = SinTimesY.vjp_bwd_retval
  applied = vv.apply_fix(d, first.code)
  assert SinTimesY.vjp_bwd_retval is before and not applied.applied    # a .py file: a patch
  assert applied.path == __file__
  assert "+      return (jnp.cos(x) * y * g, (jnp.sin(x) * g))" in applied.patch


def test_accumulator_rule_fixes_are_verified_on_value_accumulators(hook):
  raises(lambda: jax.grad(lambda x, y: mul(x, y, True).sum(), argnums=(0, 1))(X, Y))
  (d,) = vv.diagnoses()
  assert d.fixes and d.fixes[0].verdict == "verified"
  assert d.fixes[0].code.startswith("def vjp_bwd(self, res, g, x_acc, y_acc):")
  good = "def vjp_bwd(self, res, g, x_acc, y_acc):\n  x, y = res\n  x_acc.accum(g * y)\n  y_acc.accum(x * g)\n"
  assert vv.verify_fix(d, good) == []
  (wrong,) = vv.verify_fix(d, good.replace("accum(x * g)", "accum(y * g)"))
  assert (wrong.kind, wrong.argument) == ("bwd_value", "y")


NOTEBOOK_PRIM = """
from jax.experimental.hijax import BASE as HiPrim

class Softplus(HiPrim):
  def __init__(self, aval):
    self.in_avals, self.out_aval, self.params = (aval,), aval, {}
    super().__init__()

  def expand(self, x):
    return jnp.logaddexp(x, 0.)

  def vjp_fwd(self, nzs_in, x):
    return self(x), x

  def vjp_bwd_retval(self, x, g):
    return ((g * jax.nn.sigmoid(x))[:, :2],)

def softplus_sum(x):
  return Softplus(jax.typeof(x))(x).sum()
""".replace("BASE", HiPrim.__name__)


def test_apply_rebinds_a_notebook_primitives_method(hook):
  from test_fixes import cell
  ns = cell(NOTEBOOK_PRIM)
  raises(lambda: jax.grad(ns["softplus_sum"])(X))
  (d,) = vv.diagnoses()
  assert (d.kind, d.rule) == ("bwd_type", "Softplus.vjp_bwd_retval")
  assert d.fixes[0].verdict == "verified"
  assert vv.apply_fix(d, d.fixes[0].code).applied
  want = jax.grad(lambda x: jnp.logaddexp(x, 0.).sum())(X)
  assert jnp.allclose(jax.grad(ns["softplus_sum"])(X), want)
  assert "vjp_bwd_retval" in vars(ns["Softplus"])


def test_a_diagnosis_keeps_no_array_of_a_primitive_that_holds_arrays(hook):
  class Shifted(SinTimesY):
    def __init__(self, x_aval, y_aval, table):
      super().__init__(x_aval, y_aval, wrong="transpose")
      self.table = table                 # 2 MiB the primitive holds
  baseline = {id(a) for a in jax.live_arrays()}
  for step in range(3):
    table = jnp.full((512, 1024), float(step))
    raises(lambda: jax.grad(
        lambda x, y: Shifted(jax.typeof(x), jax.typeof(y), table)(x, y).sum(), argnums=(0, 1))(X, Y))  # noqa: F821 - deleted below: nothing may keep it alive
  del table
  gc.collect()
  assert len(vv.diagnoses()) == 3 and not retained_rules.holds_arrays(vv.last().site.custom_rule())  # a stand-in
  extra = [a.shape for a in jax.live_arrays() if id(a) not in baseline]
  assert extra == [], f"device buffers kept alive: {extra}"


def test_graph_names_the_rule_method_the_user_wrote(hook):
  raises(lambda: jax.grad(lambda x, y: loss(x, y, "transpose"), argnums=(0, 1))(X, Y))
  raises(lambda: jax.grad(lambda x, y: mul(x, y, True).sum(), argnums=(0, 1))(X, Y))
  retval, accum = vv.diagnoses()
  assert retval.graph.node(retval.node).rule == "SinTimesY.vjp_bwd_retval"
  assert accum.graph.node(accum.node).rule == "MulAcc.vjp_bwd"


RAISING_PLACES = {
    "eager": lambda f: f,
    "jit(scan)": lambda f: jax.jit(lambda x, y: jax.lax.scan(lambda c, _: (f(c, y), None), x, None,
                                                             length=2)[0]),
    "cond": lambda f: lambda x, y: jax.lax.cond(x.sum() > -1e9, f, lambda x, y: x * y, x, y),
}


@pytest.mark.parametrize("place", RAISING_PLACES)
def test_a_retval_rule_that_raises_is_diagnosed_naming_the_input(hook, place):
  """JAX never gets a cotangent to check: the statement that raised is the finding."""
  from jupyter_vjpviz.api.check import verify_fix
  model = RAISING_PLACES[place](lambda x, y: sin_times_y(x, y, "matmul"))
  grad = jax.grad(lambda x, y: model(x, y).sum(), argnums=(0, 1))
  plain, err = plain_and_hooked(lambda: grad(X, Y))
  assert (type(err), str(err), _frames(err)) == (type(plain), str(plain), _frames(plain))
  (d,) = vv.diagnoses()
  assert (d.kind, d.rule, d.argument, d.expected) == (
      "bwd_raised", "SinTimesY.vjp_bwd_retval", "y", "float32[3,4]")
  lines, start = inspect.getsourcelines(SinTimesY.vjp_bwd_retval)
  assert d.raised_at == f"{__file__}:{start + next(i for i, l in enumerate(lines) if '@ g' in l)}"
  assert d.fixes[0].verdict == "verified" and verify_fix(d, d.fixes[0].code) == []
