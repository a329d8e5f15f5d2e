"""A fix is verified by running it registered exactly as the user registered the rule: the
same ``custom_vjp`` method (``defvjp_with_logs`` returns ``(cotangents, logs)``) and every
option (``optimize_remat``, ``symbolic_zeros``, ...); applied, it is registered so again.
A ``defvjp_with_logs`` rule returning what JAX refuses as logs gets JAX's error and no
internal-error line of ours."""
import inspect
import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diagnosed import plain_and_hooked, raises
from test_jvp_fixes import cell
import jupyter_vjpviz as vv
from jupyter_vjpviz.api.check import apply_fix, verify_fix
from jupyter_vjpviz.fixes import verify

pytestmark = pytest.mark.skipif(not hasattr(jax.custom_vjp, "defvjp_with_logs"),
                                reason=f"jax {jax.__version__} has no defvjp_with_logs")

LOGGED = """
@jax.custom_vjp
def scaled_sin(x):
  return jnp.sin(x)

def scaled_sin_fwd(x):
  return jnp.sin(x), x

def scaled_sin_bwd(x, g):
  return (g[:2] * jnp.cos(x)[:2],), {"gnorm": jnp.abs(g).sum()}

scaled_sin.defvjp_with_logs(scaled_sin_fwd, scaled_sin_bwd{options})
"""


@pytest.mark.parametrize("options", ["", ", optimize_remat=True"])
def test_a_logging_rules_fixes_keep_its_logs_and_run_as_registered(hook, options):
  ns = cell(LOGGED.replace("{options}", options))
  f, x = ns["scaled_sin"], jnp.linspace(-1., 1., 3)
  raises(lambda: jax.grad(lambda x: f(x).sum())(x))
  d = vv.last()
  assert (d.kind, d.rule) == ("bwd_type", "scaled_sin_bwd")
  assert verify.registration(verify._user_rules(d)) == (
      "defvjp_with_logs", {"symbolic_zeros": False, "optimize_remat": bool(options),
                           "generic_batching": False})
  verified = [fix for fix in d.fixes if fix.verdict == "verified"]
  assert verified and verified[0] is d.fixes[0]
  assert all('{"gnorm": jnp.abs(g).sum()}' in fix.code for fix in verified)   # logs kept
  first = d.fixes[0]
  assert verify_fix(d, first.code) == [] and apply_fix(d, first.code).applied
  assert (f.with_logs, f.optimize_remat) == (True, bool(options))   # registered as before
  vv.clear()
  grad, logs = jax.grad(lambda x: f(x).sum(), with_logs=True)(x)
  assert vv.diagnoses() == [] and set(logs) == {"gnorm"}
  np.testing.assert_allclose(grad, jnp.cos(x), rtol=1e-6)


def test_a_candidate_that_drops_the_logs_is_refused_as_registered(hook):
  ns = cell(LOGGED.replace("{options}", ""))
  f, x = ns["scaled_sin"], jnp.ones(3)
  raises(lambda: jax.grad(lambda x: f(x).sum())(x))
  d = vv.last()
  user_rules = verify._user_rules(d)
  dropped = lambda x, g: (g * jnp.cos(x),)
  kept = lambda x, g: ((g * jnp.cos(x),), None)
  problems = verify.registration_problems(d.site, user_rules, user_rules.fwd, dropped)
  assert problems and "defvjp_with_logs" in problems[0] and "TypeError" in problems[0]
  assert verify.registration_problems(d.site, user_rules, user_rules.fwd, kept) == []
  pasted = "def scaled_sin_bwd(x, g):\n  return (g * jnp.cos(x),)\n"
  (problem,) = verify_fix(d, pasted)   # JAX's objection, as vv.verify_fix's answer
  assert "defvjp_with_logs" in problem.detail


def test_logs_of_a_type_jax_refuses_get_jaxs_error_and_no_internal_error(hook, capsys):
  """JAX's ``test_defvjp_with_logs_bad_return_errors``: a list where the logs dict belongs."""
  f = jax.custom_vjp(jnp.sin)
  f.defvjp_with_logs(lambda x: (jnp.sin(x), x), lambda x, g: ((g * jnp.cos(x),), [g.sum()]))
  err = raises(lambda: jax.grad(lambda x: f(x).sum())(jnp.ones(3)))
  assert isinstance(err, TypeError) and "must be None or a dict" in str(err)
  assert "internal error" not in capsys.readouterr().err


GRADIENT_LOGGED = """
@jax.custom_gradient(with_logs=True)
def dense(x, w):
  y = jnp.sin(x) * w

  def dense_vjp(g):
    dx = jnp.cos(x) * w * g
    dw = jnp.sin(x) @ g
    return (dx, dw), {"g_norm": jnp.abs(g).sum()}
  return y, dense_vjp
"""


gradient_logs = pytest.mark.skipif(
    any("with_logs" not in inspect.signature(fn).parameters for fn in (jax.custom_gradient, jax.grad)),
    reason=f"jax {jax.__version__}'s custom_gradient or grad has no with_logs")


@gradient_logs
def test_a_logging_custom_gradient_closure_that_raises_gets_a_fix_that_keeps_its_logs(hook):
  """The closure returns ``((dx, dw), logs)``: the statement that raised is traced to the
  cotangent of ``w`` under the pair's first element, and the first fix, verified, runs as
  registered (``with_logs=True``) with its logs."""
  ns = cell(GRADIENT_LOGGED)
  f, x, w = ns["dense"], jnp.ones((4, 3)), jnp.linspace(0.5, 1.5, 3)
  raises(lambda: jax.grad(lambda x, w: f(x, w).sum(), argnums=(0, 1))(x, w))
  d = vv.last()
  assert (d.kind, d.rule, d.path) == ("bwd_raised", "dense_vjp", "[1]")
  first = d.fixes[0]
  assert first.verdict == "verified" and '{"g_norm": jnp.abs(g).sum()}' in first.code
  fixed = cell(first.code)["dense"]
  vv.clear()
  (_, dw), logs = jax.grad(lambda x, w: fixed(x, w).sum(), argnums=(0, 1), with_logs=True)(x, w)
  assert vv.diagnoses() == [] and set(logs) == {"g_norm"}
  np.testing.assert_allclose(dw, jnp.sin(x).sum(0), rtol=1e-6)


@gradient_logs
def test_a_logging_custom_gradient_closure_missing_a_cotangent_gets_it_back(hook):
  """``((dx,), logs)``: ``dw`` computed, not returned; the fix fills the cotangent tuple
  under the pair's first element, keeps the logs, and is verified."""
  ns = cell(GRADIENT_LOGGED.replace("jnp.sin(x) @ g", "(jnp.sin(x) * g).sum(0)")
            .replace("return (dx, dw), {", "return (dx,), {"))
  f, x, w = ns["dense"], jnp.ones((4, 3)), jnp.linspace(0.5, 1.5, 3)
  raises(lambda: jax.grad(lambda x, w: f(x, w).sum(), argnums=(0, 1))(x, w))
  d = vv.last()
  assert (d.kind, d.rule) == ("bwd_structure", "dense_vjp")
  first = d.fixes[0]
  assert first.verdict == "verified", [(f.title, f.verdict, f.note) for f in d.fixes]
  assert 'return (dx, dw), {"g_norm": jnp.abs(g).sum()}' in first.code


REMAT = """
@jax.custom_vjp
def f(x, w):
  return jnp.sin(x) * w

def f_fwd(x, w):
  return f(x, w), x

def f_rem(x, x_again, w):
  return f(x, w), (x, w)

def f_bwd(res, g):
  x, w = res
  dx = jnp.cos(x) * w * g
  dw = jnp.sin(x) * g
  return {ret}

f.{method}(f_fwd, f_rem, f_bwd)
"""


@pytest.fixture
def remat_flags():
  """JAX's ``jax_custom_vjp3`` and ``jax_remat3``, which defremat runs under, on for a test."""
  names = ("jax_custom_vjp3", "jax_remat3")
  if not hasattr(jax.custom_vjp, "defremat") or any(n not in jax.config.values for n in names):
    pytest.skip(f"jax {jax.__version__} has no custom_vjp.defremat")
  before = {n: jax.config.values[n] for n in names}
  try:
    for n in names:
      jax.config.update(n, True)
    yield
  finally:
    for n, on in before.items():
      jax.config.update(n, on)


@pytest.mark.parametrize("method", ["defremat", "defremat_with_logs"])
@pytest.mark.parametrize("remat", [False, True])
def test_a_defremat_bwd_is_diagnosed_and_fixed_as_registered(remat_flags, hook, method, remat):
  """The bwd's cotangent for ``w`` has the batch axis left in; its residuals are rem's, not
  the fwd's (``x`` alone). Outside and under ``jax.remat`` (where rem runs on the backward
  pass): JAX's error is unchanged, the diagnosis names the bwd and ``w``, and the first fix,
  verified, applies registered with ``method`` and the user's rem."""
  logs = method.endswith("with_logs")
  ns = cell(REMAT.format(method=method, ret='(dx, dw), {"n": jnp.abs(g).sum()}' if logs else "dx, dw"))
  f, x, w = ns["f"], jnp.ones((3, 4)), jnp.linspace(0.5, 1.5, 4)
  loss = lambda x, w: f(x, w).sum()
  grad = jax.grad(jax.checkpoint(loss) if remat else loss, argnums=(0, 1))
  frames = lambda e: [(t.filename, t.lineno, t.name) for t in traceback.extract_tb(e.__traceback__)]
  plain, hooked = plain_and_hooked(lambda: grad(x, w))
  assert (type(hooked), str(hooked), frames(hooked)) == (type(plain), str(plain), frames(plain))
  d = vv.last()
  assert (d.kind, d.rule, d.argument) == ("bwd_type", "f_bwd", "w")
  assert verify.registration(verify._user_rules(d)) == (method, {"generic_batching": False})
  first = d.fixes[0]
  assert first.verdict == "verified" and "sum(" in first.code, [(f.title, f.verdict) for f in d.fixes]
  assert apply_fix(d, first.code).applied
  fwd, rem, bwd, with_logs = f.remat_rules
  assert (f.fwd, fwd, rem, with_logs) == (None, ns["f_fwd"], ns["f_rem"], logs)
  vv.clear()
  _, dw = grad(x, w)
  assert vv.diagnoses() == []
  np.testing.assert_allclose(dw, jnp.sin(x).sum(0), rtol=1e-6)


def test_a_remat_custom_gradients_vjp_closure_is_named_and_fixed(remat_flags, hook):
  """``custom_gradient(remat=True)``: the function returns a rem function, which returns the
  VJP closure. The diagnosis names that closure (not the rem) and ``w``; the first fix,
  verified, edits the closure and is applied as registered (remat=True)."""
  ns = cell("""
@jax.custom_gradient(remat=True)
def f(x, w):
  y = jnp.sin(x) * w

  def f_rem(x, w):
    def f_bwd(g):
      return jnp.cos(x) * w * g, jnp.sin(x) * g
    return jnp.sin(x) * w, f_bwd
  return y, f_rem
""")
  f, x, w = ns["f"], jnp.ones((3, 4)), jnp.linspace(0.5, 1.5, 4)
  grad = jax.grad(jax.checkpoint(lambda x, w: f(x, w).sum()), argnums=(0, 1))
  raises(lambda: grad(x, w))
  d = vv.last()
  assert (d.kind, d.rule, d.argument) == ("bwd_type", "f_bwd", "w")
  first = d.fixes[0]
  assert first.verdict == "verified" and "@jax.custom_gradient(remat=True)" in first.code
  assert apply_fix(d, first.code).applied and f.remat_rules is not None
  vv.clear()
  _, dw = grad(x, w)
  assert vv.diagnoses() == []
  np.testing.assert_allclose(dw, jnp.sin(x).sum(0), rtol=1e-6)
