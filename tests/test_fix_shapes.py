"""The last fix shapes (issue 39): each fix verified, and its code run against JAX's own
derivative here, not only vjpviz's verdict on it.

Cotangents of pytree inputs built in the input's own type, a custom_vjp applied inside
its own bwd, a symbolic_zeros rule wrong on one branch only, a host callback declaring
float64 without x64, a tangent computed in float16 on purpose, and instance labels that
name only where the failing application is. The rules the fix corpus
(``benchmarks/fix_corpus``) holds are its cells with their bug written in.
"""
import ast
import gc
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jupyter_vjpviz as vv
from test_fixes import cell

eqx = pytest.importorskip("equinox")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
from fix_corpus import rules, shapes  # noqa: E402
from fix_corpus.shapes import Dense, Norm, Pair, Params  # noqa: E402

RULES = {b.name: b for b in rules.BASES}
SHAPES = {c.name: c.base() for c in shapes.CASES}


def _diagnosed(thunk, raises=Exception):
  with pytest.raises(raises):
    thunk()
  gc.collect()
  d = vv.last()
  assert d is not None
  return d


def _defs(ns: dict, code: str) -> dict:
  """The functions ``code`` (a fix) defines, run in a copy of the cell's namespace without
  their decorators (equinox's ``@f.def_bwd`` would register them on the user's object)."""
  tree = ast.parse(code)
  defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
  for n in defs:
    n.decorator_list = []
  space = dict(ns)
  exec(compile(tree, "<fix>", "exec"), space)  # noqa: S102 - the fix under test
  return {n.name: space[n.name] for n in defs}


def _with_bwd(ns: dict, name: str, code: str):
  """The cell's custom_vjp ``name`` rebuilt with the fix's bwd (as the user applies it)."""
  old = ns[name]
  [bwd] = _defs(ns, code).values()
  new = jax.custom_vjp(old.fun, nondiff_argnums=old.nondiff_argnums)
  new.defvjp(old.fwd, bwd, symbolic_zeros=old.symbolic_zeros)
  return new


def _close(got, want, rtol=1e-5):
  for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
    assert g.shape == w.shape and g.dtype == w.dtype
    np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                               rtol=rtol, atol=rtol)


def _verified_first(d):
  first = d.fixes[0]
  assert first.verdict == "verified", [(f.title, f.verdict, f.note) for f in d.fixes]
  return first


def _wrong(base: rules.Base, kind: str | None = None) -> str:
  """The corpus cell ``base`` with its bug of ``kind`` (its only one, by default) written in."""
  [mutation] = [m for m in base.mutations if kind in (None, m.kind)]
  return mutation.apply(base.code)


# ------------------------------------------------------------ the input's own type

EQX_FILTER = """
@eqx.filter_custom_vjp
def linear(layer, x):
  return layer.weight @ x + layer.bias

@linear.def_fwd
def linear_fwd(perturbed, layer, x):
  return linear(layer, x), None

@linear.def_bwd
def linear_bwd(res, g, perturbed, layer, x):
  dW = jnp.outer(g, x)
  db = g
  return (dW, db)
"""


def test_an_equinox_bwd_returning_a_tuple_for_a_layer_builds_it_with_tree_at(hook):
  """Diagnosed although no leaf path of the tuple is the layer's (equinox's own check
  raised), and fixed by building the layer's cotangent in its own type, as equinox does."""
  ns = cell("import equinox as eqx\n" + EQX_FILTER)
  layer = Dense(jnp.arange(12.).reshape(3, 4) / 10, jnp.ones(3))
  x = jnp.linspace(-1., 1., 4)
  d = _diagnosed(lambda: eqx.filter_grad(lambda l: jnp.sin(ns["linear"](l, x)).sum())(layer))
  assert (d.kind, d.rule, d.argument) == ("bwd_structure", "linear_bwd", "layer.weight")
  first = _verified_first(d)
  assert "return eqx.tree_at(lambda l: (l.weight, l.bias), layer, (dW, db))" in first.code
  assert vv.verify_fix(d, first.code) == []
  g = jnp.linspace(.5, 1.5, 3)
  got = _defs(ns, first.code)["linear_bwd"](None, g, None, layer, x)
  want, = jax.vjp(lambda l: ns["linear"].fn(l, x), layer)[1](g)
  assert isinstance(got, Dense)
  _close(got, want)


SHIFT = """
@jax.custom_vjp
def shift(p, x):
  return x * P_SCALE(p) + P_SHIFT(p)

def shift_fwd(p, x):
  return shift(p, x), (p, x)

def shift_bwd(res, g):
  p, x = res
  return RETURNED, g * P_SCALE(p)

shift.defvjp(shift_fwd, shift_bwd)
"""


@pytest.mark.parametrize("make, scale, offset, returned, built", [
    (Params, "p.w", "p.b", "((g * x).sum(0), g.sum(0))", "Params((g * x).sum(0), g.sum(0))"),
    (Norm, "p.gain", "p.bias", "[(g * x).sum(0), g.sum(0)]",
     "Norm(gain=(g * x).sum(0), bias=g.sum(0))"),
    (Pair, "p.first", "p.second", "((g * x).sum(0), g.sum(0))",
     "jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(p), [(g * x).sum(0), g.sum(0)])"),
], ids=["namedtuple", "dataclass", "registered"])
def test_a_pytree_inputs_cotangent_is_built_in_its_own_type(hook, make, scale, offset, returned,
                                                            built):
  """A NamedTuple and a dataclass by their constructors (the rule's globals name them), any
  other registered node from a value of its structure the rule holds."""
  code = SHIFT.replace("P_SCALE(p)", scale).replace("P_SHIFT(p)", offset) \
      .replace("RETURNED", returned)
  ns = cell(code)
  ns[make.__name__] = make
  p, x = make(jnp.linspace(.5, 1.5, 3), jnp.zeros(3)), jnp.linspace(-1., 1., 12).reshape(4, 3)
  d = _diagnosed(lambda: jax.grad(lambda p, x: jnp.sin(ns["shift"](p, x)).sum(), (0, 1))(p, x))
  assert d.kind == "bwd_structure"
  first = _verified_first(d)
  assert f"return {built}, g * {scale}" in first.code
  g = jnp.cos(jnp.linspace(0., 3., 12)).reshape(4, 3)
  fixed = _with_bwd(ns, "shift", first.code)
  _close(jax.vjp(fixed, p, x)[1](g), jax.vjp(ns["shift"].fun, p, x)[1](g))


# ------------------------------------------------------------ nested rules

FIXED_POINT = _wrong(SHAPES["fixed_point"]) + """
def newton_sqrt(a):
  update = lambda a, x: 0.5 * (x + a / x)
  return fixed_point(update, a, a)
"""


def test_the_fixed_point_rule_applied_inside_its_own_bwd_is_fixed_by_unpacking(hook):
  """JAX's fixed point, its pullback's 1-tuple returned as a_bar: the function passed as a
  nondiff argument (made inside ``newton_sqrt``) outlives the failing call, so the primal
  is judged (by finite differences: JAX cannot differentiate its while_loop)."""
  ns = cell(FIXED_POINT)
  d = _diagnosed(lambda: jax.grad(ns["newton_sqrt"])(2.))
  assert (d.kind, d.argument) == ("bwd_structure", "a")
  first = _verified_first(d)
  assert first.title.startswith("Unpack a_bar, =")
  assert "  a_bar, = vjp_a(fixed_point(" in first.code and "finite differences" in first.note
  ns["fixed_point"] = _with_bwd(ns, "fixed_point", first.code)
  np.testing.assert_allclose(jax.grad(ns["newton_sqrt"])(2.), 0.5 / np.sqrt(2.), rtol=1e-5)


# ------------------------------------------------------------ symbolic zeros

BATCH_NORM = _wrong(SHAPES["batch_norm"])


def test_a_symbolic_zeros_rule_is_fixed_on_the_branch_that_failed_and_right_on_the_others(hook):
  """The statistics given no cotangent: the scale's gradient unsummed on that branch only.
  A fix at the return would sum the other branch's right gradient again: it is judged with
  every output given a cotangent too, and is not verified; the fix in the branch is."""
  ns = cell(BATCH_NORM)
  x = jnp.asarray(np.random.default_rng(0).standard_normal((6, 3)), jnp.float32)
  scale = jnp.linspace(.5, 1.5, 3)
  d = _diagnosed(lambda: jax.grad(lambda x, s: jnp.tanh(ns["batch_norm"](x, s)[0]).sum(),
                                  (0, 1))(x, scale))
  assert (d.kind, d.argument) == ("bwd_type", "scale")
  first = _verified_first(d)
  assert "    dscale = (gy * xhat).sum(axis=0)\n" in first.code
  assert "    dscale = (gy * xhat).sum(0)\n  return dx, dscale" in first.code
  assert not any(f.verdict == "verified" and "return dx, dscale." in f.code for f in d.fixes)
  fixed = _with_bwd(ns, "batch_norm", first.code)
  for use in (lambda f: lambda x, s: f(x, s)[0], lambda f: f):   # statistics unused, used
    out, pull = jax.vjp(use(fixed), x, scale)
    ct = jax.tree_util.tree_map(lambda o: jnp.cos(o + 1.), out)
    _close(pull(ct), jax.vjp(use(ns["batch_norm"].fun), x, scale)[1](ct), rtol=1e-4)


# ------------------------------------------------------------ host callbacks

CALLBACK = _wrong(SHAPES["erf"])


def test_a_host_callback_declaring_float64_without_x64_declares_the_dtype_jax_computes_in(hook):
  pytest.importorskip("scipy")
  ns = cell(CALLBACK)
  x = jnp.linspace(-1., 1., 5)
  d = _diagnosed(lambda: jax.grad(lambda x: ns["erf"](x).sum())(x), ValueError)
  assert (d.kind, d.argument) == ("bwd_raised", "x")
  first = _verified_first(d)
  assert "jax.ShapeDtypeStruct(x.shape, np.float32), x," in first.code
  fixed = _with_bwd(ns, "erf", first.code)
  _close(jax.grad(lambda x: fixed(x).sum())(x), jax.grad(lambda x: jax.scipy.special.erf(x).sum())(x))


# ------------------------------------------------------------ a precision on purpose

GELU16 = _wrong(SHAPES["gelu32"])


def test_a_tangent_computed_in_float16_on_purpose_is_cast_back_first(hook):
  """Judged at the precision the rule computes in, the cast that keeps its float16
  arithmetic is verified, and leads the float32 derivative (also verified)."""
  ns = cell(GELU16)
  x = jnp.linspace(-2., 2., 12).reshape(3, 4)
  d = _diagnosed(lambda: jax.grad(lambda x: ns["gelu32"](x).sum())(x), TypeError)
  assert d.kind == "jvp_tangent_type"
  first = _verified_first(d)
  assert " by differentiating " not in first.title and "t.astype(jnp.float16) * d" in first.code
  assert "at the lower precision the rule computes in" in first.note and not first.exact
  assert any(" by differentiating " in f.title and f.verdict == "verified" for f in d.fixes[1:])
  jvp = _defs(ns, first.code)["gelu32_jvp"]
  out, tangent = jvp((x,), (jnp.ones_like(x),))
  assert tangent.dtype == jnp.float32
  _close(tangent, jax.jvp(ns["gelu32"].fun, (x,), (jnp.ones_like(x),))[1], rtol=2e-3)


# ------------------------------------------------------------ instance labels

PENALTY = """
@jax.custom_vjp
def penalty(w):
  return (w ** 2).sum()

def penalty_fwd(w):
  return penalty(w), w

def penalty_bwd(w, g):
  return ((2. * g * w).T,)

penalty.defvjp(penalty_fwd, penalty_bwd)
"""


def _layers():
  return {"layers": [{"w": jnp.full((4, 3), .1 * k)} for k in range(3)]}


def _forward(p, x):
  for layer in p["layers"]:
    x = jnp.tanh(x @ layer["w"] @ layer["w"].T)
  return x.sum()


def test_a_function_applied_once_is_in_no_layer_whichever_parameter_it_reads(hook):
  ns = cell(PENALTY)
  x = jnp.ones((2, 4))
  d = _diagnosed(lambda: jax.grad(lambda p: _forward(p, x) + ns["penalty"](p["layers"][2]["w"]))(
      _layers()))
  assert (d.kind, d.function) == ("bwd_type", "penalty")
  assert d.instance is None and "(in " not in d.headline


def test_a_function_applied_to_every_layer_names_the_layer_that_failed(hook):
  ns = cell(PENALTY)
  x = jnp.ones((2, 4))
  loss = lambda p: _forward(p, x) + sum(ns["penalty"](l["w"]) for l in p["layers"])
  d = _diagnosed(lambda: jax.grad(loss)(_layers()))
  assert d.instance in {f"p['layers'][{k}]" for k in range(3)}, d.instance


SOFTPLUS = """
@jax.custom_vjp
def softplus(b):
  return jnp.logaddexp(b, 0.)

def softplus_fwd(b):
  return softplus(b), b

def softplus_bwd(b, g):
  return ((g * jax.nn.sigmoid(b))[:2],)

softplus.defvjp(softplus_fwd, softplus_bwd)
"""


def test_a_rule_in_a_scan_reading_only_a_parameter_its_body_closes_over_is_in_no_parameter(hook):
  """The scan iterates over ``p['ws']``; the rule reads only ``p['b']``, the same in every
  iteration: it is in every iteration, not in ``p['b']``."""
  ns = cell(SOFTPLUS)

  def loss(p, x):
    def body(h, w):
      return jnp.tanh(h @ w + ns["softplus"](p["b"])), None
    return jax.lax.scan(body, x, p["ws"])[0].sum()

  p = {"ws": jnp.ones((5, 3, 3)) * .1, "b": jnp.zeros(3)}
  d = _diagnosed(lambda: jax.grad(loss)(p, jnp.ones((2, 3))))
  assert (d.kind, d.function) == ("bwd_type", "softplus")
  assert d.instance == "every iteration of its scan"
  assert "p['b']" not in d.headline


TOPK_BF16 = _wrong(RULES["topk"], "dtype")


def test_a_precision_lost_by_accident_is_not_kept_by_a_verified_fix(hook):
  """The cotangent written into a bfloat16 buffer: the rule casts nothing down itself, so
  the cast back to float32 (equal only at bfloat16's precision) is type-only, and the
  primal's derivative leads."""
  ns = cell(TOPK_BF16)
  x = jnp.asarray(np.random.default_rng(1).standard_normal((4, 6)), jnp.float32)
  jax.grad(lambda x: (ns["topk"](x) * jnp.arange(8.).reshape(4, 2)).sum())(x)
  [d] = [d for d in vv.diagnoses() if d.kind == "silent_dtype"]
  cast = next(f for f in d.fixes if f.title.startswith("Cast to float32"))
  assert cast.verdict == "type-only" and "does not cast to itself" in cast.note
  first = _verified_first(d)
  fixed = _with_bwd(ns, "topk", first.code)
  g = jnp.linspace(-1., 1., 8).reshape(4, 2)
  _close(jax.vjp(fixed, x)[1](g), jax.vjp(ns["topk"].fun, x)[1](g))
