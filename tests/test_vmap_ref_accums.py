"""A gradient ref passed with ``f_vjp.with_refs`` for an input of a custom_vjp whose bwd
takes accumulators, under ``jax.vmap`` applied before differentiation: JAX 0.12.1 refuses
it (vmap hands the rule accumulators for values only). Ground truth: plain JAX raises;
hooked, the same exception (type, message, frames) carries a ``grad_ref_type`` diagnosis
naming the function and the ``with_refs`` entry, whose first fix, pasted, gives the
gradient; on the classic and the hijax (``jax_custom_vjp3``) paths."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_features
from diagnosed import plain_and_hooked, raises
from test_capture import _frames
import jupyter_vjpviz as vv
from jupyter_vjpviz.capture.compat import private

pytestmark = pytest.mark.skipif(not private.has("ad.ref_accum_error"),
                                reason=f"jax {jax.__version__} accumulates no ref under vmap")

XS = jnp.ones((4, 3))


def _scale():
  @jax.custom_vjp
  def scale(x):
    return 2. * x

  def scale_bwd(_, g, x_accum):
    x_accum.accum(2. * g)
  scale.defvjp_with_accums(lambda x: (2. * x, None), scale_bwd)
  return scale


@pytest.mark.parametrize("hijax", [False, True], ids=["classic", "custom_vjp3"])
def test_a_ref_for_a_vmapped_accumulating_rule_is_diagnosed_and_its_fix_runs(hook, hijax):
  if hijax and jax_features.HIJAX_PATH not in jax.config.values:
    pytest.skip(f"jax {jax.__version__} has no {jax_features.HIJAX_PATH}")
  jax_features.set_flag(jax_features.HIJAX_PATH, hijax)
  _, f_vjp = jax.vjp(jax.vmap(_scale()), XS)
  ct = jnp.ones_like(XS)
  plain, hooked = plain_and_hooked(lambda: f_vjp.with_refs(jax.new_ref(jnp.zeros_like(XS)))(ct))
  assert type(hooked) is type(plain) is ValueError and str(hooked) == str(plain)
  assert _frames(hooked) == _frames(plain)
  d = vv.last()
  assert (d.kind, d.function, d.path, d.got) == ("grad_ref_type", "scale", "args[0]",
                                                   "Ref{float32[4,3]}")
  first = d.fixes[0]
  assert first.code == "f_vjp.with_refs(jax.ad.GradValue())(ct)"
  (grad,) = eval(first.code, {"jax": jax, "f_vjp": f_vjp, "ct": ct})  # noqa: S307 - the fix, pasted
  np.testing.assert_allclose(grad, 2. * np.ones((4, 3)))
  vv.clear()
  raises(lambda: f_vjp.with_refs(jax.new_ref(jnp.zeros_like(XS)))(ct))
  assert all(f.code != "f_vjp.with_refs(jax.new_ref(jnp.zeros((4, 3), jnp.float32)))(ct)"
             for f in vv.last().fixes)   # a new ref is what JAX refuses here
