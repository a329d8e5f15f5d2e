"""What JAX's own test suite found with the hook installed, as tests CI can run.

``benchmarks/jax_suite.py`` runs JAX's tests plain and hooked and compares every
outcome; each test here reproduces one difference it found (a test of JAX's in
brackets), with real JAX, plain against hooked.
"""
import dataclasses
import functools
import traceback
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax import lax, tree_util

import jupyter_vjpviz as vv
import jax_features


def _depth() -> int:
  return len(traceback.extract_stack())


def _plain_and_hooked(run):
  vv.uninstall()
  plain = run()
  vv.install()
  try:
    hooked = run()
  finally:
    vv.uninstall()
  return plain, hooked


def _no_line_of_ours(capsys):
  err = capsys.readouterr().err
  assert "vjpviz: could not" not in err and "vjpviz: cannot" not in err, err


# ------------------------------------------------ the user's live stack [TracebackTest]

def _depths():
  """The stack depth inside each user function of a grad through a custom_vjp."""
  seen = {}
  base = _depth()
  note = lambda where: seen.setdefault(where, _depth() - base)

  @jax.custom_vjp
  def f(x):
    note("primal")
    return x

  def f_fwd(x):
    note("fwd")
    return x, None

  def f_bwd(_, g):
    note("bwd")
    return (g,)
  f.defvjp(f_fwd, f_bwd)

  def plain_fun(x):
    note("grad")
    return x

  f(1.0)
  jax.grad(f)(1.0)
  jax.grad(plain_fun)(1.0)
  _, f_vjp = jax.vjp(lambda x: (note("vjp"), x)[1], 1.0)
  f_vjp(1.0)
  return seen


@pytest.mark.needs(jax_features.WATCHED)
def test_no_frame_of_ours_under_grad_vjp_or_a_custom_vjp_call(capsys):
  """[test_grad_traceback, test_custom_vjp_traceback] ``jax.grad``, ``jax.vjp`` and a
  custom_vjp call are watched from below (their frames' start and end), not wrapped."""
  plain, hooked = _plain_and_hooked(_depths)
  for where in ("primal", "grad", "vjp"):
    assert hooked[where] == plain[where], (where, plain, hooked)
  _no_line_of_ours(capsys)


def _library_rule_depths():
  """The stack depth inside the user's fwd and bwd behind a library's custom_vjp (equinox),
  on its first application and a later one: the first is where vjpviz learns how the user
  spells the library's inputs (``arguments.Learning``), the later ones read that cache."""
  eqx = pytest.importorskip("equinox")
  seen = {}
  base = _depth()
  note = lambda where: seen.setdefault(where if where not in seen else f"{where} again",
                                       _depth() - base)

  @eqx.filter_custom_vjp
  def f(x):
    return x * 2.

  def f_fwd(perturbed, x):
    note("fwd")
    return x * 2., None

  def f_bwd(res, g, perturbed, x):
    note("bwd")
    return g
  f.def_fwd(f_fwd)
  f.def_bwd(f_bwd)
  for _ in range(2):
    jax.grad(lambda x: f(x).sum())(jnp.ones(3))
  return seen


def _rule_depths():
  """The stack depth inside a custom_vjp's fwd and bwd (with and without nondiff
  arguments) and a custom_jvp's rule, under each transformation that calls them."""
  seen = {}
  base = _depth()
  note = lambda where: seen.setdefault(where, _depth() - base)
  for name, transform in _TRANSFORMS.items():
    at = lambda rule, name=name: note(f"{rule} under {name}")

    @jax.custom_vjp
    def f(x):
      return x

    def f_fwd(x):
      at("fwd")
      return x, None

    def f_bwd(_, g):
      at("bwd")
      return (g,)
    f.defvjp(f_fwd, f_bwd)

    @functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
    def g(n, x):
      return x * n

    def g_fwd(n, x):
      at("nondiff fwd")
      return x * n, None

    def g_bwd(n, _, ct):
      at("nondiff bwd")
      return (ct * n,)
    g.defvjp(g_fwd, g_bwd)

    @jax.custom_jvp
    def h(x):
      return x

    @h.defjvp
    def h_jvp(primals, tangents):
      at("jvp rule")
      return primals[0], tangents[0]
    transform(lambda x: f(x) + g(2., x) + h(x))
  return seen


_TRANSFORMS = {
    "grad": lambda F: jax.grad(F)(1.),
    "vjp": lambda F: jax.vjp(F, 1.)[1](1.),
    "jit of grad": lambda F: jax.jit(jax.grad(F))(1.),
    "grad of jit": lambda F: jax.grad(jax.jit(F))(1.),
    "vmap of grad": lambda F: jax.vmap(jax.grad(F))(jnp.ones(2)),
    "grad of checkpoint": lambda F: jax.grad(jax.checkpoint(F))(1.),
    "grad of scan": lambda F: jax.grad(
        lambda x: lax.scan(lambda c, _: (F(c), None), x, None, length=2)[0])(1.),
}


@pytest.mark.needs(jax_features.WATCHED)
@pytest.mark.parametrize("rules", [_rule_depths, _library_rule_depths], ids=["custom", "library"])
def test_a_rule_runs_as_deep_in_the_stack_as_without_vjpviz(rules, capsys):
  """[test_custom_vjp_traceback: f_fwd 17 != 16 hooked] The instrumented fwd and bwd (the
  fwd's residuals carry the site to the bwd, the bwd's cotangents are compared before
  JAX's check raises) and the watched jvp rule are each one frame of ours, in place of
  the ``call_wrapped`` frame JAX calls them through (``capture/sites/direct_calls.py``);
  nothing else of ours is above the rule, on a library rule's first application too
  (where vjpviz learns how the user spells the library's inputs)."""
  plain, hooked = _plain_and_hooked(rules)
  assert len(plain) >= 4 and hooked == plain
  _no_line_of_ours(capsys)


def _raising_rules():
  """A fwd that raises, a bwd whose cotangent JAX rejects, a jvp rule that raises."""
  @jax.custom_vjp
  def f(x):
    return x

  def f_fwd(x):
    raise ValueError("the fwd raises")
  f.defvjp(f_fwd, lambda r, g: (g,))

  @jax.custom_vjp
  def g(x):
    return x
  g.defvjp(lambda x: (x, None), lambda r, ct: (ct[:2],))

  @jax.custom_jvp
  def h(x):
    return x

  @h.defjvp
  def h_jvp(primals, tangents):
    raise ValueError("the jvp rule raises")
  return [lambda: jax.grad(f)(1.), lambda: jax.grad(lambda x: g(x).sum())(jnp.ones(3)),
          lambda: jax.jit(jax.grad(lambda x: g(x).sum()))(jnp.ones(3)),
          lambda: jax.grad(h)(1.)]


@pytest.mark.parametrize("filtering", [
    "auto", pytest.param("off", marks=pytest.mark.needs(jax_features.WATCHED))])
def test_an_error_in_or_after_a_rule_has_the_frames_it_has_without_vjpviz(filtering, capsys):
  """The rules are called around JAX's ``call_wrapped`` frame: its entry is put back."""
  def frames():
    found = []
    for run in _raising_rules():
      with pytest.raises(Exception) as e:
        run()
      found.append([(f.filename, f.lineno, f.name) for f in traceback.extract_tb(e.tb)])
    return found
  jax.config.update("jax_traceback_filtering", filtering)
  try:
    plain, hooked = _plain_and_hooked(frames)
  finally:
    jax.config.update("jax_traceback_filtering", "auto")
  assert hooked == plain


def _casting_act(calls: list):
  @jax.custom_vjp
  def act(x):
    calls.append(x)
    return jnp.sin(x)
  act.defvjp(lambda x: (jnp.sin(x).astype(jnp.bfloat16), x), lambda x, g: (jnp.cos(x) * g,))
  return lambda x: act(x).astype(jnp.float32).sum()


@pytest.mark.parametrize("jitted", [False, True])
def test_the_primal_is_never_run_where_jax_runs_only_the_fwd(hook, jitted):
  """[test_custom_vjp_traceback] Under grad classic JAX never runs a custom_vjp's primal,
  and the fwd-output check no longer runs it either (it ran it under eval_shape for the
  primal's output types). So a fwd output of another dtype goes unseen here, as it does
  in JAX: those types exist nowhere without running the primal."""
  calls = []
  grad = jax.grad(_casting_act(calls))
  (jax.jit(grad) if jitted else grad)(jnp.ones(3))
  assert calls == [] and vv.diagnoses() == []


def test_a_fwd_output_is_checked_against_the_primal_jax_traced(hook):
  """Where JAX has traced the primal (grad of a jit, checkpoint, scan) it compares the
  fwd's output with it and raises; the diagnosis reads the primal's types from JAX's own
  trace (``_flatten_fwd``'s store)."""
  calls = []
  with pytest.raises(TypeError, match="shapes/dtypes"):
    jax.grad(jax.jit(_casting_act(calls)))(jnp.ones(3))
  d = vv.diagnoses()[0]
  assert (d.kind, d.severity, d.expected, d.got) == ("fwd_type", "error", "float32[3]", "bfloat16[3]")


# --------------------------------------- the user's pytree code [CustomVJPTest::...nones]

class _Pair(list):
  """A pytree whose unflatten, like JAX's test's, refuses None children."""


def _unflatten(_, children):
  assert all(c is not None for c in children)
  return _Pair(children)


tree_util.register_pytree_node(_Pair, lambda x: (list(x), None), _unflatten)


def test_pytrees_are_rebuilt_only_around_values_jax_gives(capsys):
  """[test_pytrees_not_required_to_contain_nones] matching a bwd's output to the args
  tree called the user's unflatten with None children."""
  @jax.custom_vjp
  def f(x):
    return x[0] * x[1]
  f.defvjp(lambda x: (x[0] * x[1], x), lambda x, g: (_Pair([g * x[1], g * x[0]]),))
  plain, hooked = _plain_and_hooked(lambda: jax.grad(f)(_Pair([2., 3.])))
  assert hooked == plain
  _no_line_of_ours(capsys)


def test_a_wrong_cotangent_inside_a_user_pytree_is_still_diagnosed(hook):
  @jax.custom_vjp
  def f(x):
    return x[0] * x[1]
  f.defvjp(lambda x: (x[0] * x[1], x), lambda x, g: (_Pair([g * x[1], jnp.ones(2)]),))
  with pytest.raises(ValueError):
    jax.grad(f)(_Pair([2., 3.]))
  d = vv.last()
  assert (d.kind, d.got) == ("bwd_type", "float32[2]") and d.path.startswith("[0][")


class _Strict:
  """A pytree node whose unflatten accepts only arrays and tracers, as JAX gives it."""

  def __init__(self, a, b):
    self.a, self.b = a, b


def _strict_unflatten(_, children):
  assert all(isinstance(c, jax.Array) for c in children), children
  return _Strict(*children)


tree_util.register_pytree_node(_Strict, lambda s: ((s.a, s.b), None), _strict_unflatten)


def test_the_cotangent_handed_to_f_vjp_is_not_rebuilt(capsys):
  """Naming the leaves of ``f_vjp``'s cotangent unflattened the output tree around ints."""
  def run():
    out, f_vjp = jax.vjp(lambda x: _Strict(x * 2, x * 3), jnp.ones(3))
    return f_vjp(_Strict(jnp.ones(3), jnp.ones(3)))[0].tolist()
  plain, hooked = _plain_and_hooked(run)
  assert hooked == plain
  _no_line_of_ours(capsys)


class _Config:
  """A nondiff argument of the user's type, holding no arrays."""

  def __init__(self, scale, name):
    self.scale, self.name = scale, name


tree_util.register_pytree_node(_Config, lambda c: ((c.scale, c.name), None),
                               lambda _, children: _Config(*children))


def test_a_nondiff_argument_without_arrays_is_kept_as_it_is(hook):
  """A site kept nondiff arguments rebuilt leaf by leaf (the user's unflatten called
  around the very same leaves) even when no leaf had to be replaced."""
  from jupyter_vjpviz.capture.sites import custom_rules
  f = jax.custom_vjp(lambda c, x: x * c.scale, nondiff_argnums=(0,))
  f.defvjp(lambda c, x: (x * c.scale, None), lambda c, _, g: (g * c.scale,))
  config, sites = _Config(2.0, "w"), []
  with custom_rules.site_made.listening(lambda site, args: sites.append(site)):
    jax.grad(lambda x: f(config, x))(1.0)
  assert len(sites) == 1 and dict(sites[0].nondiff)[0] is config


# -------------------------------------- user-defined hijax types [HijaxTest::...hitype]

@dataclasses.dataclass
class Box:
  val: Any


def _box_type():
  from jax.experimental.hijax import HiType, register_hitype

  @dataclasses.dataclass(frozen=True)
  class BoxTy(HiType):
    """A user's hijax type: its own avals, no shape or dtype."""
    ty: Any

    def __hash__(self):
      return hash(self.ty)

    def __eq__(self, other):
      return isinstance(other, BoxTy) and self.ty == other.ty

    def lo_ty(self):
      return [self.ty]

    def lower_val(self, v):
      return [v.val]

    def raise_val(self, lo):
      return Box(lo)

    def to_tangent_aval(self):
      return BoxTy(self.ty.to_tangent_aval())

    def to_ct_aval(self):
      return BoxTy(self.ty.to_ct_aval())

    def vspace_zero(self):
      return Box(jnp.zeros(self.ty.shape, self.ty.dtype))

    def vspace_add(self, x, y):
      return Box(x.val + y.val)

  register_hitype(Box, lambda b: BoxTy(jax.typeof(b.val)))
  return BoxTy


def _mul():
  HiPrim = jax_features.hi_primitive()

  class Mul(HiPrim):
    def __init__(self, aval):
      self.in_avals, self.out_aval, self.params = (aval, aval), aval, {}
      super().__init__()

    def expand(self, x, y):
      return Box(x.val * y.val)

    def vjp_fwd(self, nzs_in, x, y):
      return mul(x, y), (x, y)

    def vjp_bwd_retval(self, res, g):
      x, y = res
      return mul(g, y), mul(g, x)

  def mul(x, y):
    return Mul(jax.typeof(x))(x, y)
  return mul


@pytest.mark.needs("hijax primitives")
def test_a_user_hijax_type_is_compared_by_its_own_equality(capsys):
  """[test_shmap_grad_hitype] ``f_vjp``'s cotangent and a ``vjp_bwd_retval``'s were
  compared by ``.dtype``, which a user's HiType need not have."""
  _box_type()
  mul = _mul()

  def run():
    _, f_vjp = jax.vjp(mul, Box(jnp.arange(3.)), Box(jnp.ones(3)))
    return [b.val.tolist() for b in f_vjp(Box(jnp.ones(3)))]
  plain, hooked = _plain_and_hooked(run)
  assert hooked == plain
  _no_line_of_ours(capsys)


@pytest.mark.needs("user hijax types")
def test_a_type_that_cannot_be_compared_is_said_so(capsys):
  """A HiType without its own ``__eq__`` cannot be compared: one line says so, not an
  internal error, and JAX's own outcome is unchanged."""
  from jax.experimental.hijax import HiType
  from jupyter_vjpviz.capture import avals
  box_ty = _box_type()

  class Opaque(box_ty):
    __eq__ = HiType.__eq__     # which asks the user to override it
    __hash__ = box_ty.__hash__
  a = Opaque(jax.core.ShapedArray((3,), jnp.float32))
  assert avals.same_type(a, a) is None
  err = capsys.readouterr().err
  assert "vjpviz: cannot compare a cotangent of type Opaque" in err and "could not" not in err
