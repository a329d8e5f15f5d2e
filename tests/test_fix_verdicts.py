"""Fixes judged by the primal's own derivative: verdicts, ranking, the primal fallback, honesty.

Real JAX, rules defined as notebook cells; none of these rules is in
benchmarks/fix_corpus. The judging budget is lifted (conftest's ``unhurried``)
except where the budget itself is tested, so verdicts never depend on the machine's load.
"""
import json
import linecache
import subprocess
import sys
from importlib import resources

import jax
import jax.numpy as jnp
import jsonschema
import numpy as np
import pytest
import softclip

import jupyter_vjpviz as vv
from jupyter_vjpviz.analysis.diagnosis import Fix
from jupyter_vjpviz.deliver.ops.diagnoses import verify_result
from jupyter_vjpviz.analysis.values import replay
from jupyter_vjpviz.fixes import rank, suggest
from test_fixes import cell, first_problem as diagnosis

X, W = jnp.linspace(-1., 1., 12).reshape(4, 3), jnp.linspace(.5, 2., 6).reshape(3, 2)


CUBE = """
@jax.custom_vjp
def cube(x, k):
  return k * x ** 3
def cube_fwd(x, k):
  return cube(x, k), None
def cube_bwd(res, g):
  return (jnp.ones(5), jnp.ones(4))
cube.defvjp(cube_fwd, cube_bwd)
def loss(x, k): return jnp.sin(cube(x, k)).sum()
"""


def test_with_nothing_saved_the_fallback_saves_the_inputs_and_is_verified_first():
  """Before: zeros of the expected structure were the only fix (both gradients silently zero)."""
  ns = cell(CUBE)
  x, k = jnp.linspace(.1, 1., 4), jnp.full(4, 2.)
  d = diagnosis(ns["loss"], x, k)
  first = d.fixes[0]
  assert first.verdict == "verified" and first.exact
  assert "def cube_fwd" in first.code and "(None, (x, k))" in first.code
  assert "_, pullback = jax.vjp(cube.fun, x, k)\n  return pullback(g)" in first.code
  assert "one extra forward pass of cube" in first.reason
  assert not any("zeros" in f.code for f in d.fixes), "zeros offered where the gradient is not zero"
  assert vv.apply_fix(d, first.code).applied
  got = jax.grad(ns["loss"], argnums=(0, 1))(x, k)
  want = jax.grad(lambda x, k: jnp.sin(k * x ** 3).sum(), argnums=(0, 1))(x, k)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5)


SCALE = """
import functools
@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def scale(k, params):
  return k * params["w"] @ params["b"]
def scale_fwd(k, params):
  return scale(k, params), params
def scale_bwd(k, params, g):
  return ({"w": g[:, None] * params["b"][None, :] * k, "b": g},)
scale.defvjp(scale_fwd, scale_bwd)
def loss(p): return scale(2., p).sum()
"""


def test_one_ill_typed_argument_that_is_every_argument_gets_one_fallback_not_two():
  d = diagnosis(cell(SCALE)["loss"], {"w": W.T, "b": jnp.ones(3)})
  differentiating = [f for f in d.fixes if "by differentiating scale" in f.title]
  assert [f.title for f in differentiating] == ["Compute every cotangent by differentiating scale"]
  assert differentiating[0].verdict == "verified" and d.fixes[0] is differentiating[0]


AFFINE = """
import dataclasses
@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Params:
  w: jax.Array
  b: jax.Array
@jax.custom_vjp
def affine(p, x):
  return x @ p.w + p.b
def affine_fwd(p, x):
  return affine(p, x), (p, x)
def affine_bwd(res, g):
  p, x = res
  return Params(w=x.T @ g, b=g), g @ p.w.T
affine.defvjp(affine_fwd, affine_bwd)
def loss(p, x): return jnp.tanh(affine(p, x)).sum()
"""


def test_a_leaf_built_by_keyword_in_a_constructor_gets_its_own_edit():
  ns = cell(AFFINE)
  p = ns["Params"](W, jnp.linspace(0., 1., 2))
  d = diagnosis(ns["loss"], p, X)
  first = d.fixes[0]
  assert first.verdict == "verified" and "b=g.sum(" in first.code, first.code
  assert vv.apply_fix(d, first.code).applied
  got = jax.grad(ns["loss"])(p, X)
  want = jax.grad(lambda p, x: jnp.tanh(x @ p.w + p.b).sum())(p, X)
  np.testing.assert_allclose(got.b, want.b, rtol=1e-5)


MIX = """
@jax.custom_vjp
def mix(x, y, alpha=0.5):
  return alpha * x + (1 - alpha) * y
def mix_fwd(x, y, alpha=0.5):
  return mix(x, y, alpha), alpha
def mix_bwd(alpha, g):
  return alpha * g, (1 - alpha) * g.sum(0), None
mix.defvjp(mix_fwd, mix_bwd)
def loss(x, y): return jnp.sin(mix(x, y, alpha=0.3)).sum()
"""


def test_a_reduction_too_many_is_removed_and_a_gradient_left_none_by_the_rule_stays_its_choice():
  """Before: no candidate removed the ``.sum(0)``, and every fix was called type-only for
  "zeroing" ``alpha``, whose cotangent the user's own rule returns as None."""
  ns = cell(MIX)
  d = diagnosis(ns["loss"], X, X)
  first = d.fixes[0]
  assert first.title == "Remove `.sum(0)`" and first.verdict == "verified", \
      [(f.title, f.verdict) for f in d.fixes]
  assert "`alpha`" in first.note and "None" in first.note
  assert not any("alpha` becomes zero" in f.title for f in d.fixes)
  assert vv.apply_fix(d, first.code).applied
  got = jax.grad(ns["loss"], argnums=(0, 1))(X, X)
  want = jax.grad(lambda x, y: jnp.sin(.3 * x + .7 * y).sum(), argnums=(0, 1))(X, X)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5)


LAYER = softclip.SOURCE + "def loss(x, w): return softclip(x, w).sum()\n"

RIGHT = "def softclip_bwd(res, g):\n    x, w, y = res\n    gy = g * (1 - y**2)\n    return gy @ w.T, x.T @ gy\n"
SCALED = RIGHT.replace("x.T @ gy\n", "2. * (x.T @ gy)\n")
ZEROED = RIGHT.replace("gy @ w.T,", "jnp.zeros_like(x),")


def _judge(d):
  rule = suggest.Rule.of(d, suggest.library_wrappers.user_rules(d.site.custom_rule()))
  return rank.Judge.of(rule)


def test_the_verdict_not_the_claim_ranks_and_type_only_fixes_say_what_they_break():
  d = diagnosis(cell(LAYER)["loss"], X, W)
  claims = [Fix("Zero dx", ZEROED, "", exact=True), Fix("Scale dw", SCALED, "", exact=True),
            Fix("Transpose dw", RIGHT, "", exact=False),
            Fix("Raises", RIGHT.replace("return", "1 / 0\n    return"), "", exact=True),
            Fix("Ill-typed", RIGHT.replace("x.T @ gy", "gy.T @ x"), "", exact=True)]
  ranked = rank.rank(_judge(d), claims)
  assert [f.title.split(" (")[0] for f in ranked] == ["Transpose dw", "Zero dx", "Scale dw"]
  right, zeroed, scaled = ranked
  assert right.verdict == "verified" and right.exact
  assert zeroed.verdict == "type-only" and not zeroed.exact
  assert zeroed.note == "the gradient of `x` becomes zero" and zeroed.note in zeroed.title
  assert scaled.verdict == "type-only" and "`w` differs from the primal's" in scaled.title


def test_the_diagnosis_offers_the_transpose_first_and_verified():
  d = diagnosis(cell(LAYER)["loss"], X, W)
  assert d.fixes[0].verdict == "verified" and "x.T @ gy" in d.fixes[0].code
  verdicts = [f.verdict for f in d.fixes]
  assert "type-only" not in verdicts[:verdicts.count("verified")]


def test_out_of_time_fixes_are_kept_and_say_they_were_not_judged(monkeypatch):
  monkeypatch.setattr(replay, "BUDGET", 0.)
  d = diagnosis(cell(LAYER)["loss"], X, W)
  assert d.fixes and all(f.verdict == "unverifiable" and not f.exact for f in d.fixes)
  assert all(replay.TIME_BUDGET in f.note for f in d.fixes)


def test_a_flat_primal_is_said_to_be_unjudgeable_and_gets_no_fallback():
  """A straight-through estimator: autodiff of round says zero, which judges nothing."""
  ns = cell("""
@jax.custom_vjp
def ste(x):
  return jnp.round(x)
ste.defvjp(lambda x: (ste(x), None), lambda r, g: (g.T,))
def loss(x): return (ste(x) * x).sum()
""")
  d = diagnosis(ns["loss"], X)
  assert d.fixes and all(f.verdict == "unverifiable" for f in d.fixes)
  assert all("round" in f.note and "zero at every draw" in f.note for f in d.fixes)
  assert not any("jax.vjp" in f.code for f in d.fixes)
  assert any("(g,)" in f.code for f in d.fixes)


def test_an_opaque_primal_is_judged_by_finite_differences():
  ns = cell("""
def host_exp(x):
  return jax.pure_callback(lambda a: np.exp(a).astype(a.dtype),
                           jax.ShapeDtypeStruct(x.shape, x.dtype), x)
@jax.custom_vjp
def hexp(x):
  return host_exp(x)
def hexp_fwd(x):
  y = host_exp(x)
  return y, y
def hexp_bwd(y, g):
  return ((y * g).T,)
hexp.defvjp(hexp_fwd, hexp_bwd)
def loss(x): return hexp(x).sum()
""")
  d = diagnosis(ns["loss"], X)
  first = d.fixes[0]
  assert first.verdict == "verified" and "finite differences" in first.note
  assert not any("jax.vjp" in f.code for f in d.fixes)   # JAX cannot differentiate it


def test_verify_reports_a_well_typed_wrong_rule_with_per_leaf_errors():
  d = diagnosis(cell(LAYER)["loss"], X, W)
  assert vv.verify_fix(d, RIGHT) == []
  (problem,) = vv.verify_fix(d, SCALED)
  assert problem.kind == "bwd_value" and problem.argument == "w"
  (leaf,) = problem.leaf_errors
  assert leaf.name == "w" and not leaf.ok and leaf.max_rel == pytest.approx(1., rel=1e-3)
  assert not vv.apply_fix(d, SCALED).applied   # apply applies what verify passes

  schema = json.loads((resources.files("jupyter_vjpviz") / "protocol.schema.json").read_text())
  verify_schema = {**schema["definitions"]["VerifyResult"], "definitions": schema["definitions"]}
  wrong, right = verify_result(d, SCALED), verify_result(d, RIGHT)
  for reply in (wrong, right):
    jsonschema.validate(json.loads(json.dumps(reply, allow_nan=False)), verify_schema)
  assert not wrong["pass"] and wrong["verdict"] == "type-only"
  assert wrong["problems"][0]["leaf_errors"][0]["name"] == "w"
  assert right["pass"] and right["verdict"] == "verified"


def test_the_fixes_stage_imports_nothing_above_it():
  """It used to import lint (and so runtime) through verify: a cycle hidden by a deferred import."""
  code = ("import sys, jupyter_vjpviz.fixes.suggest, jupyter_vjpviz.fixes.verify\n"
          "print(sorted(m for m in sys.modules if m in ('jupyter_vjpviz.api.check', "
          "'jupyter_vjpviz.api.pipeline') or m.startswith(('jupyter_vjpviz.render', "
          "'jupyter_vjpviz.deliver'))))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "[]"


DENSE_BY_ENTRIES = """
@jax.custom_vjp
def dense(p, x):
  return x @ p['w'] + p['b']
def dense_fwd(p, x):
  return dense(p, x), (p, x)
def dense_bwd(res, g):
  p, x = res
  grads = {}
  grads['w'] = (x.T @ g).T
  grads['b'] = g.sum(0)
  return grads, g @ p['w'].T
dense.defvjp(dense_fwd, dense_bwd)
def loss(p, x): return jnp.tanh(dense(p, x)).sum()
"""


def test_a_cotangent_built_entry_by_entry_is_fixed_where_its_entry_is_assigned():
  """The returned ``grads`` is a local filled by assignments: the fix edits the statement
  that set the failing entry, and is judged by value like any other."""
  ns = cell(DENSE_BY_ENTRIES)
  d = diagnosis(ns["loss"], {"w": W, "b": jnp.zeros(2)}, X)
  assert (d.kind, d.argument) == ("bwd_type", "p['w']")
  first = d.fixes[0]
  assert first.verdict == "verified", [(f.title, f.verdict, f.note) for f in d.fixes]
  assert "  grads['w'] = (x.T @ g)\n" in first.code and "grads['b'] = g.sum(0)" in first.code


RMS_SCALE_SUMMED = """
@jax.custom_vjp
def rms(scale, x):
  return scale * x / jnp.sqrt(jnp.mean(x ** 2) + 1e-6)
def rms_fwd(scale, x):
  r = jnp.sqrt(jnp.mean(x ** 2) + 1e-6)
  return scale * x / r, (scale, x, r)
def rms_bwd(res, g):
  scale, x, r = res
  n = x / r
  dscale = (g * n).sum()
  dx = (scale * g - n * jnp.mean(scale * g * n)) / r
  return dscale, dx
rms.defvjp(rms_fwd, rms_bwd)
def loss(scale, x): return jnp.tanh(rms(scale, x)).sum()
"""


def test_a_reduction_in_the_local_a_rule_returns_is_removed_where_it_was_computed():
  """``return dscale, dx``: the sum that made the vector ``scale``'s gradient a scalar is in
  ``dscale``'s assignment; removing it there is the verified fix, ahead of the fallback."""
  ns = cell(RMS_SCALE_SUMMED)
  d = diagnosis(ns["loss"], jnp.linspace(.5, 1.5, 8), jnp.linspace(-1., 1., 8))
  first = d.fixes[0]
  assert (first.title, first.verdict) == ("Remove `.sum()`", "verified"), \
      [(f.title, f.verdict) for f in d.fixes]
  assert "  dscale = (g * n)\n" in first.code


def test_a_reduction_over_every_axis_is_made_over_the_batch_only():
  """``scale`` multiplies each row of a batch: summing its gradient over every axis gives a
  scalar; summing over the batch axis is the verified fix."""
  batched = RMS_SCALE_SUMMED.replace("jnp.mean(x ** 2)", "jnp.mean(x ** 2, -1, keepdims=True)") \
      .replace("jnp.mean(scale * g * n)", "jnp.mean(scale * g * n, -1, keepdims=True)")
  ns = cell(batched)
  d = diagnosis(ns["loss"], jnp.linspace(.5, 1.5, 8), jnp.linspace(-1., 1., 16).reshape(2, 8))
  first = d.fixes[0]
  assert (first.title, first.verdict) == ("Reduce to float32[8]", "verified"), \
      [(f.title, f.verdict) for f in d.fixes]
  assert "  dscale = (g * n).sum(axis=0)\n" in first.code


CLIPPED = """
@jax.custom_vjp
def clip_gradient(x):
  return x
def clip_fwd(x):
  return x, None
def clip_bwd(res, g):
  return (jnp.clip(g, -1., 1.).astype(jnp.bfloat16),)
clip_gradient.defvjp(clip_fwd, clip_bwd)
def loss(x): return (clip_gradient(x) * 3.).sum()
"""


def test_a_cast_of_a_clipped_gradient_keeps_the_rules_values_first():
  """The rule clips on purpose and returns bfloat16 by mistake. Its primal hands its input
  back unchanged, so the rule exists to change the gradient: a surrogate, judged by its
  own values. Before: the cast was type-only, behind fixes replacing the clipping."""
  ns = cell(CLIPPED)
  d = diagnosis(ns["loss"], jnp.linspace(-1., 1., 3))
  cast = d.fixes[0]
  assert cast.title.startswith("Cast to") and cast.verdict == "verified", \
      [(f.title, f.verdict) for f in d.fixes]
  assert "returns its input unchanged" in cast.note and "vjpviz.surrogate" in cast.note
  primal = next(f for f in d.fixes if "differentiating clip_gradient" in f.title)
  assert primal.verdict == "type-only" and "changes your surrogate's values" in primal.title


def test_a_surrogate_rule_is_judged_by_its_own_values():
  ns = cell(CLIPPED.replace("return (jnp.clip(g, -1., 1.).astype(jnp.bfloat16),)",
                            "return jnp.clip(g, -1., 1.)"))
  vv.surrogate(ns["clip_gradient"])
  d = diagnosis(ns["loss"], jnp.linspace(-1., 1., 3))
  assert d.fixes[0].title == "Wrap the cotangent in a tuple" and d.fixes[0].verdict == "verified"
  primal = next(f for f in d.fixes if "differentiating clip_gradient" in f.title)
  assert primal.verdict == "type-only" and "changes your surrogate's values" in primal.title


def test_a_marked_surrogate_returning_low_precision_on_purpose_is_no_warning():
  """jax#18931: quantisation code returns bfloat16 cotangents on purpose; JAX accepts them.
  Unmarked, it is a silent_dtype warning; marked vjpviz.surrogate, the choice is the user's."""
  x = jnp.linspace(-1., 1., 3)
  assert [d.kind for d in vv.check(cell(CLIPPED)["loss"], x)] == ["silent_dtype"]
  ns = cell(CLIPPED)
  vv.surrogate(ns["clip_gradient"])
  assert vv.check(ns["loss"], x) == []


IN_LIBRARY_CALL = """
import contextlib
_open_calls = []

@contextlib.contextmanager
def library_call():
  _open_calls.append(True)
  try:
    yield
  finally:
    _open_calls.pop()

def scaled_sin(x, w):
  if not _open_calls:
    raise RuntimeError("scaled_sin runs only inside the library's call")
  return jnp.sin(x) * w

scaled = jax.custom_vjp(scaled_sin)

def call(x, w):
  with library_call():
    return scaled(x, w)

def scaled_fwd(x, w):
  return call(x, w), (x, w)

def scaled_bwd(res, g):
  x, w = res
  return (jnp.cos(x) * w * g).T, jnp.sin(x) * g
scaled.defvjp(scaled_fwd, scaled_bwd)
def loss(x, w): return call(x, w).sum()
"""


def test_a_primal_that_runs_only_inside_its_librarys_call_is_judged_through_fwd():
  """As flax nnx's custom_vjp: the primal JAX is given reads a context its library's call
  sets up, so it cannot run at random inputs on its own. fwd can, and its primal output
  (differentiated with this rule set aside) is the reference: the right fix is verified,
  zeros are not offered as right."""
  ns = cell(IN_LIBRARY_CALL)
  x, w = jnp.linspace(-1., 1., 6).reshape(2, 3), jnp.linspace(.5, 2., 6).reshape(2, 3)
  d = diagnosis(ns["loss"], x, w)
  with pytest.raises(RuntimeError, match="only inside"):
    ns["scaled_sin"](x, w)
  first = d.fixes[0]
  assert first.verdict == "verified", [(f.verdict, f.note, f.code) for f in d.fixes]
  assert "(jnp.cos(x) * w * g)," in first.code and "hand an input back" not in first.note
  assert not any("zeros" in f.code for f in d.fixes if f.verdict == "verified")
  assert vv.apply_fix(d, first.code).applied
  got = jax.grad(ns["loss"], argnums=(0, 1))(x, w)
  want = jax.grad(lambda x, w: (jnp.sin(x) * w).sum(), argnums=(0, 1))(x, w)
  for g, wanted in zip(got, want):
    np.testing.assert_allclose(g, wanted, rtol=1e-6)


def test_a_wrong_fix_of_such_a_rule_is_found_wrong_by_value():
  """The reference through fwd is a real one: the right fix verifies, one off by a factor
  is a value problem of the input it gets wrong."""
  ns = cell(IN_LIBRARY_CALL)
  d = diagnosis(ns["loss"], jnp.ones((2, 3)), jnp.ones((2, 3)))
  assert vv.verify_fix(d, d.fixes[0].code) == []
  off = d.fixes[0].code.replace("(jnp.cos(x) * w * g),", "(2 * jnp.cos(x) * w * g),")
  assert off != d.fixes[0].code
  assert [(p.kind, p.path) for p in vv.verify_fix(d, off)] == [("bwd_value", "[0]")]


SWISH_SIGN = """
@jax.custom_vjp
def swish(x):
  return x * jax.nn.sigmoid(x)
def swish_fwd(x):
  s = jax.nn.sigmoid(x)
  return x * s, (x, s)
def swish_bwd(res, g):
  x, s = res
  return (g * (s - x * s * (1. - s)),)   # wrong sign: well-typed, JAX raises nothing
swish.defvjp(swish_fwd, swish_bwd)
def loss(x): return jnp.sin(swish(x)).sum()
"""


def test_a_gradcheck_warning_comes_with_a_verified_fix_equal_to_the_primals_derivative():
  """Before: a bwd_value warning had no fixes at all (they were attached to the hook's
  diagnoses only), and the primal fallback was written for type and structure errors only."""
  ns = cell(SWISH_SIGN)
  (d,) = vv.gradcheck(ns["loss"], X)
  assert d.kind == "bwd_value" and d.fixes, d
  assert all(f.verdict == "verified" for f in d.fixes), [(f.title, f.verdict) for f in d.fixes]
  assert any("by differentiating swish" in f.title for f in d.fixes)
  first = d.fixes[0]   # the sign slip undone, in the rule's own terms
  assert first.title == "Use `s + x * s * (1.0 - s)`"
  assert vv.apply_fix(d, first.code).applied
  np.testing.assert_allclose(jax.grad(ns["loss"])(X),
                             jax.grad(lambda x: jnp.sin(x * jax.nn.sigmoid(x)).sum())(X), rtol=1e-5)


ROW_DOT = """
@jax.custom_vjp
def row_dot(a, b):
  return (a * b).sum(-1)
def row_dot_fwd(a, b):
  return row_dot(a, b), (a, b)
def row_dot_bwd(res, g):
  a, b = res
  g = g[..., None]          # the body rebinds its cotangent
  return g * b              # b's cotangent forgotten: a bare array for two arguments
row_dot.defvjp(row_dot_fwd, row_dot_bwd)
def loss(a, b): return jnp.sin(row_dot(a, b)).sum()
"""


def test_the_primal_fallback_differentiates_with_the_cotangent_the_rule_was_given():
  """Before: no fix at all; the fallback's pullback read ``g`` after the body rebound it
  (``g[..., None]``), so it was ill-typed and dropped."""
  ns = cell(ROW_DOT)
  d = diagnosis(ns["loss"], X, X + 1.)
  first = d.fixes[0]
  assert first.verdict == "verified" and "g_in = g" in first.code, [(f.title, f.verdict) for f in d.fixes]
  assert vv.apply_fix(d, first.code).applied
  got = jax.grad(ns["loss"], argnums=(0, 1))(X, X + 1.)
  want = jax.grad(lambda a, b: jnp.sin((a * b).sum(-1)).sum(), argnums=(0, 1))(X, X + 1.)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5)


TEMPER = """
@jax.custom_vjp
def temper(x, t):
  return x / t
def temper_fwd(x, t):
  return x / t, t
def temper_bwd(t, g):
  return (g / t).T, None    # t: no gradient, by choice (a schedule)
temper.defvjp(temper_fwd, temper_bwd)
def loss(x, t): return jnp.sin(temper(x, t)).sum()
"""


def test_no_fix_that_gives_a_gradient_where_the_rule_returns_none_is_verified():
  """Before: 'Compute every cotangent by differentiating temper' was verified: it gave ``t``
  the primal's gradient, which the rule leaves None on purpose."""
  d = diagnosis(cell(TEMPER)["loss"], X, jnp.full((1,), 2.))
  verified = [f for f in d.fixes if f.verdict == "verified"]
  assert verified and all("return" in f.code and "None" in f.code.split("return")[-1]
                          for f in verified), [(f.title, f.code) for f in verified]
  assert all("`t`" in f.note for f in verified)
  filling = [f for f in d.fixes if "gradient for `t`" in f.title]
  assert all(f.verdict == "type-only" and "None" in f.note for f in filling)


REVERSE = """
import functools
@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def reverse(x, lam):
  return x
def reverse_fwd(x, lam):
  return x, None
def reverse_bwd(lam, _, g):
  return (-lam * g, None)   # a cotangent for the nondiff lam too
reverse.defvjp(reverse_fwd, reverse_bwd)
def loss(x): return jnp.sin(reverse(x, .5)).sum()
"""


def test_a_marked_surrogate_with_an_extra_cotangent_is_judged_by_its_own_values():
  """Before: its own values could not be computed (the rule does not run as written), so
  the primal judged it, and differentiating the primal (the identity's gradient, not the
  reversal) was verified first. Its extra None dropped, the rule's values are the reference."""
  ns = cell(REVERSE)
  vv.surrogate(ns["reverse"])
  d = diagnosis(ns["loss"], X)
  primal = [f for f in d.fixes if "differentiating reverse" in f.title]
  assert primal and all(f.verdict == "type-only" for f in primal)
  first = d.fixes[0]
  assert "-lam * g" in first.code and first.verdict == "verified", [(f.title, f.verdict) for f in d.fixes]


CLIPPED_MLP = """
@jax.custom_vjp
def mlp(p, x):
  return jnp.tanh(x @ p['w'] + p['b'])
def mlp_fwd(p, x):
  return jax.vjp(mlp.fun, p, x)
def mlp_bwd(vjp_fn, g):
  params_t, x_t = vjp_fn(g)
  params_t = jax.tree_util.tree_map(lambda q: jnp.clip(q, -.1, .1), params_t)
  return (params_t,)
mlp.defvjp(mlp_fwd, mlp_bwd)
def loss(p, x): return mlp(p, x).sum()
"""


def test_a_missing_cotangent_of_a_clipping_rule_is_returned_keeping_its_values():
  """fix_findings F4: the rule clips its parameters' gradient and forgets x's. Before:
  returning x_t was plain type-only ('differs from the primal's'); now it is said to keep
  the rule's own values (the primal's derivative standing in for the x it did not
  return), and verified first once the rule is marked a surrogate."""
  p = {"w": W, "b": jnp.zeros(2)}
  ns = cell(CLIPPED_MLP)
  d = diagnosis(ns["loss"], p, X)
  kept = next(f for f in d.fixes if "x_t" in f.code.split("return")[-1])
  assert kept.verdict == "type-only" and "keeps your rule's values" in kept.title, kept
  assert "vjpviz.surrogate" in kept.note and "`x`, which the rule does not return" in kept.note
  ns = cell(CLIPPED_MLP)
  vv.surrogate(ns["mlp"])
  d = diagnosis(ns["loss"], p, X)
  assert "x_t" in d.fixes[0].code.split("return")[-1] and d.fixes[0].verdict == "verified", \
      [(f.title, f.verdict) for f in d.fixes]


GRADS_LOCAL = """
@jax.custom_vjp
def affine(params, x):
  return x @ params["w"].T + params["b"]
def affine_fwd(params, x):
  return affine(params, x), (params, x)
def affine_bwd(saved, g):
  params, x = saved
  grads = {"w": g.T @ x,
           "b": g}
  return grads, g @ params["w"]
affine.defvjp(affine_fwd, affine_bwd)
def loss(p, x): return jnp.sin(affine(p, x)).sum()
"""


def test_a_cotangent_in_a_dict_literal_assigned_to_a_local_is_fixed_there():
  """fix_findings F2: before, the entry of ``grads = {...}`` was not found, so no edit was
  made there (only the primal differentiated; in equinox, no fix at all)."""
  d = diagnosis(cell(GRADS_LOCAL)["loss"], {"w": jnp.ones((5, 3)), "b": jnp.ones(5)},
                jnp.ones((8, 3)))
  first = d.fixes[0]
  assert first.verdict == "verified" and '"b": g.sum(axis=0)}' in first.code, \
      [(f.title, f.verdict) for f in d.fixes]


BATCH_NORM_SZ = """
@jax.custom_vjp
def bn(x, gamma):
  mu, var = x.mean(0), x.var(0)
  return (x - mu) / jnp.sqrt(var + 1e-5) * gamma, (mu, var)
def bn_fwd(x, gamma):
  x, gamma = x.value, gamma.value
  mu, var = x.mean(0), x.var(0)
  xhat = (x - mu) / jnp.sqrt(var + 1e-5)
  return (xhat * gamma, (mu, var)), (xhat, var, gamma)
def bn_bwd(res, cts):
  xhat, var, gamma = res
  dy, dstats = cts
  dxhat = dy * gamma
  dx = (dxhat - dxhat.mean(0) - xhat * (dxhat * xhat).mean(0)) / jnp.sqrt(var + 1e-5)
  if isinstance(dstats[0], jax.custom_derivatives.SymbolicZero):
    dgamma = jax.custom_derivatives.SymbolicZero(jax.core.ShapedArray(xhat.shape, xhat.dtype))
  else:
    dgamma = (dy * xhat).sum(0)
  return dx, dgamma
bn.defvjp(bn_fwd, bn_bwd, symbolic_zeros=True)
def loss(x, gamma): return jnp.sin(bn(x, gamma)[0]).sum()   # the statistics get no cotangent
"""


def test_a_symbolic_zeros_rule_is_verified_with_the_failing_applications_symbolic_zeros():
  """Before: all six fixes were verified and all wrong: the checker called the bwd with
  ordinary arrays for every cotangent, so the failing branch (the statistics' cotangent a
  symbolic zero) never ran, and vv.verify_fix passed the unchanged buggy rule."""
  ns = cell(BATCH_NORM_SZ)
  x, gamma = jnp.linspace(-1., 1., 12).reshape(4, 3) ** 3, jnp.linspace(.5, 1.5, 3)
  d = diagnosis(ns["loss"], x, gamma)
  assert d.kind == "bwd_type" and d.site.zero_cts == (False, True, True)
  first = ns["bn_bwd"].__code__.co_firstlineno - 1
  unchanged = "".join(linecache.getlines(ns["bn_bwd"].__code__.co_filename)[first:first + 10])
  assert unchanged.startswith("def bn_bwd") and unchanged.rstrip().endswith("return dx, dgamma")
  assert [p.kind for p in vv.verify_fix(d, unchanged)] == ["bwd_type"]
  zero_of_gamma = unchanged.replace("ShapedArray(xhat.shape", "ShapedArray(gamma.shape")
  assert [p.kind for p in vv.verify_fix(d, zero_of_gamma)] == ["bwd_value"], \
      "gamma's gradient comes from y, which has a cotangent: a zero is well-typed but wrong"
  right = unchanged.replace(
      "dgamma = jax.custom_derivatives.SymbolicZero(jax.core.ShapedArray(xhat.shape, xhat.dtype))",
      "dgamma = (dy * xhat).sum(0)")
  assert vv.verify_fix(d, right) == []
  for fix in d.fixes:
    if fix.verdict == "verified":
      assert vv.verify_fix(d, fix.code) == [], fix.title


BINARY_STE = """
@jax.custom_vjp
def ste_sign(x):
  return jnp.where(x >= 0, 1., -1.)            # binarised weights
def ste_fwd(x):
  return ste_sign(x), jnp.abs(x) <= 1.
def ste_bwd(mask, g):
  return g * mask                               # straight through inside [-1, 1]; no tuple
ste_sign.defvjp(ste_fwd, ste_bwd)
def loss(w, x): return jnp.tanh(x @ ste_sign(w)).sum()
"""


def test_an_unmarked_straight_through_estimator_keeps_its_values_first():
  """Before: the first fix was 'Compute every cotangent by differentiating ste_sign' (zero
  almost everywhere: the network silently stops training), verified, as was returning
  zeros; the 1-tuple keeping the user's values was third. The primal's derivative is zero
  at every draw where the rule's is not: a surrogate, judged by its own values."""
  ns = cell(BINARY_STE)
  w, x = jnp.linspace(-1.5, 1.5, 12).reshape(4, 3), jnp.linspace(-1., 1., 8).reshape(2, 4)
  d = diagnosis(ns["loss"], w, x)
  first = d.fixes[0]
  assert first.title == "Wrap the cotangent in a tuple" and first.verdict == "verified", \
      [(f.title, f.verdict) for f in d.fixes]
  assert "surrogate" in first.note and "keeps your rule's values" in first.note
  for f in d.fixes[1:]:
    assert f.verdict != "verified" and "changes your surrogate's values" in f.title, f.title
  assert vv.apply_fix(d, first.code).applied
  got = jax.grad(ns["loss"])(w, x)
  want = jax.grad(lambda w, x: jnp.tanh(x @ (w + jax.lax.stop_gradient(jnp.sign(w) - w))).sum())(w, x)
  np.testing.assert_allclose(got, want * (jnp.abs(w) <= 1.), rtol=1e-5)


def test_an_extra_none_of_a_clipping_rule_is_dropped_keeping_its_values():
  """Before: no fix kept the clipping; the first was differentiating the identity."""
  ns = cell(CLIPPED.replace("return (jnp.clip(g, -1., 1.).astype(jnp.bfloat16),)",
                            "return (jnp.clip(g, -1., 1.), None)"))
  d = diagnosis(ns["loss"], jnp.linspace(-1., 1., 3))
  first = d.fixes[0]
  assert first.title == "Drop the extra cotangents" and first.verdict == "verified", \
      [(f.title, f.verdict) for f in d.fixes]
  assert "return (jnp.clip(g, -1., 1.),)" in first.code


HALF_SOFTPLUS = """
@jax.custom_vjp
def softplus(x):
  return jnp.logaddexp(x, 0.)
def softplus_fwd(x):
  return softplus(x), x
def softplus_bwd(x, g):
  s = jax.nn.sigmoid(x.astype(jnp.float16))
  return (g.astype(jnp.float16) * s,)
softplus.defvjp(softplus_fwd, softplus_bwd)
def loss(x): return jnp.sin(softplus(x)).sum()
"""


def test_a_fix_right_only_at_the_precision_the_rule_computes_in_leads_but_is_not_exact():
  """A bwd computing in float16 on purpose forgets to cast back: the cast keeps the user's
  precision and leads, verified at float16's tolerance; it is not claimed exact (equal to
  the primal's derivative at float32), and its note says at what precision it was judged."""
  ns = cell(HALF_SOFTPLUS)
  d = diagnosis(ns["loss"], jnp.linspace(-3., 3., 12))
  first = d.fixes[0]
  assert first.title.startswith("Cast to float32") and first.verdict == "verified"
  assert not first.exact and "lower precision the rule computes in" in first.note
  exact = [f for f in d.fixes if f.exact]
  assert exact and all(f.verdict == "verified" and "precision" not in f.note for f in exact)
