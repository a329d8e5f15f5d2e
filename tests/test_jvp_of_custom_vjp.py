"""A custom_vjp function under forward mode: JAX refuses it ("can't apply forward-mode
autodiff (jvp) to a custom_vjp function."), eagerly or, under jit, when the jit runs. Every
cell where plain JAX raises gets a ``jvp_of_custom_vjp`` diagnosis naming the function, its
bwd rule and the user's transformation, with JAX's error unchanged; a cell where this JAX
differentiates it (hessian and linearize on recent JAX) gets none. Ground truth: plain JAX."""
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_features
from diagnosed import plain_and_hooked, raises
from kernel_helpers import DIAGNOSIS
from test_capture import _frames
import jupyter_vjpviz as vv
from jupyter_vjpviz.analysis.values import reverse_mode

if sys.version_info < (3, 12):
  pytest.skip(f"Python {sys.version_info[0]}.{sys.version_info[1]} has no sys.monitoring: JAX's "
              "refusal, ad.raise_custom_vjp_error_on_jvp, is held by reference in custom_lin's "
              "impl, batching and lowering tables (and hijax's linearized call's), and vjpviz "
              "follows it only at its raise statement, with sys.monitoring",
              allow_module_level=True)
jax_features.require("jvp_of_custom_vjp")


X = jnp.linspace(-1., 1., 3)


def clipped_sin():
  @jax.custom_vjp
  def clipped_sin(x):
    return jnp.sin(x)

  def clipped_sin_fwd(x):
    return jnp.sin(x), jnp.cos(x)

  def clipped_sin_bwd(c, g):
    return (jnp.clip(c * g, -1., 1.),)

  clipped_sin.defvjp(clipped_sin_fwd, clipped_sin_bwd)
  return clipped_sin


def _doubled():
  @jax.custom_vjp
  def doubled_sin(x):
    return jnp.sin(x)
  doubled_sin.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda c, g: (2. * c * g,))
  return doubled_sin


TRANSFORMS = {
    "jax.jvp": lambda f: jax.jvp(f, (X,), (jnp.ones_like(X),)),
    "jax.jacfwd": lambda f: jax.jacfwd(f)(X),
    "jax.hessian": lambda f: jax.hessian(lambda y: f(y).sum())(X),
    "jax.linearize": lambda f: jax.linearize(f, X)[0],
    "vmap(jax.jvp)": lambda f: jax.vmap(lambda y: jax.jvp(f, (y,), (y,)))(jnp.stack([X, X])),
}
PLACES = {"eager": lambda run: run, "jit": lambda run: lambda f: jax.jit(lambda _: run(f))(X)}


def _refused(transform, place):
  return lambda: PLACES[place](TRANSFORMS[transform])(clipped_sin())


def _plain_raises(thunk) -> bool:
  vv.uninstall()
  try:
    thunk()
  except TypeError:
    return True
  finally:
    vv.install()
  return False


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_forward_mode_of_a_custom_vjp_is_diagnosed_where_jax_refuses_it(hook, transform, place):
  run = _refused(transform, place)
  if not _plain_raises(run):   # this JAX differentiates it (forward over its fwd and bwd)
    run()
    assert [d for d in vv.diagnoses() if d.kind == "jvp_of_custom_vjp"] == []
    return
  plain, hooked = plain_and_hooked(run)
  assert type(hooked) is type(plain) is TypeError and str(hooked) == str(plain)
  assert "custom_vjp" in str(plain)
  assert _frames(hooked) == _frames(plain)
  asked = transform.removeprefix("vmap(").removesuffix(")")   # the differentiation asked for
  added = [n for n in hooked.__notes__ if n not in getattr(plain, "__notes__", [])]
  assert len(added) == 1 and added[0].startswith(f"vjpviz: {asked} differentiates clipped_sin")
  d = next(d for d in vv.diagnoses() if d.kind == "jvp_of_custom_vjp")
  assert (d.function, d.rule, d.got) == ("clipped_sin", "clipped_sin_bwd", asked)
  verified = [f.code for f in d.fixes if f.verdict == "verified"]
  # jacrev through the bwd rule, run against jacfwd/hessian of the primal: equal (the clip is
  # inactive for sin); a jvp/linearize has no reverse-mode twin, only a rule to write
  assert verified == ([d.fixes[0].code] if asked in ("jax.jacfwd", "jax.hessian") else [])
  DIAGNOSIS.validate({"v": 1, "type": "diagnosis", "diagnosis": d.to_dict()})


@pytest.mark.parametrize("transform", ["jax.jacfwd", "jax.hessian"])
def test_the_reverse_mode_call_offered_runs_and_the_primals_call_too(hook, transform):
  """The fixes' code, run as written: the reverse-mode call through the user's own bwd rule,
  and the primal's forward-mode call; both give the primal's derivative here (the clip is
  inactive for sin), which plain JAX's reverse mode of the primal computes independently."""
  if not _plain_raises(_refused(transform, "eager")):
    pytest.skip(f"{transform} of a custom_vjp runs on this JAX")
  raises(_refused(transform, "eager"))
  d = next(d for d in vv.diagnoses() if d.kind == "jvp_of_custom_vjp")
  f, x = clipped_sin(), X
  reference = (jax.jacrev(jnp.sin) if transform == "jax.jacfwd" else
               jax.jacrev(jax.jacrev(lambda y: jnp.sin(y).sum())))(x)
  scope = {"jax": jax, "x": x,
           "clipped_sin": f if transform == "jax.jacfwd" else _summed(f)}
  for fix in d.fixes:
    np.testing.assert_allclose(eval(fix.code, scope), reference, rtol=1e-6)  # noqa: S307


def test_a_wrong_bwd_rule_makes_the_reverse_mode_call_wrong_too(hook):
  """The reverse-mode call runs through the user's bwd rule: where that rule is not the
  primal's derivative (twice it here), the call is not verified, and the fix says the
  rule is wrong too; the primal's own call, the reference, leads."""
  doubled_sin = _doubled()
  raises(lambda: jax.jacfwd(doubled_sin)(X))
  d = next(d for d in vv.diagnoses() if d.kind == "jvp_of_custom_vjp")
  reverse = next(f for f in d.fixes if f.code == "jax.jacrev(doubled_sin)(x)")
  assert reverse.verdict == "type-only" and "is wrong too" in reverse.note
  primal = "fun" if hasattr(doubled_sin, "fun") else "f"   # custom_vjp3 on JAX 0.9-0.11
  assert d.fixes[0].code == f"jax.jacfwd(doubled_sin.{primal})(x)"


def test_the_hessians_reverse_mode_call_is_judged_as_the_jacobians(hook):
  """jacrev of jacrev, run at the refused application's site (this JAX refuses no hessian
  of the test's cells): right for the rule that is sin's derivative, wrong for twice it."""
  for fn, right in ((clipped_sin(), True), (_doubled(), False)):
    raises(lambda: jax.jacfwd(fn)(X))
    d = [d for d in vv.diagnoses() if d.kind == "jvp_of_custom_vjp"][-1]
    verdict = reverse_mode.verdict(d.site, d.site.custom_rule(), "jax.hessian")
    assert verdict.status == ("right" if right else "wrong"), verdict.reason


def _summed(f):
  """``f`` summed to a scalar, as the hessian cell differentiates it, keeping its primal
  (``.fun``; ``.f`` on JAX 0.9-0.11's ``custom_vjp3``)."""
  summed = lambda y: f(y).sum()
  primal = getattr(f, "fun", None) or f.f
  summed.fun = summed.f = lambda y: primal(y).sum()
  return summed


def test_a_reference_nowhere_finite_verifies_nothing():
  """A derivative leaf whose reference is NaN at every draw was not compared: the
  reverse-mode call is unverifiable, never verified against it."""
  import types

  from jupyter_vjpviz.analysis.values import oracle
  site = types.SimpleNamespace(in_names=["x"], in_avals=[jax.core.ShapedArray((2,), jnp.float32)],
                               function="f", rule="f_bwd")
  nan, one = np.full(2, np.nan, np.float32), np.ones(2, np.float32)
  verdict = reverse_mode._compared(site, [([one], [nan])] * 3, "jax.jacfwd", "jax.jacfwd")
  assert verdict.status == oracle.UNVERIFIABLE, verdict
  verdict = reverse_mode._compared(site, [([one], [one])] * 3, "jax.jacfwd", "jax.jacfwd")
  assert verdict.status == oracle.RIGHT, verdict
