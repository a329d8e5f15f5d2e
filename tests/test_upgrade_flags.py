"""JAX's AD upgrade flags (``jax_custom_jvp3``, ``jax_custom_vjp3``, ``jax_remat3``,
``jax_remat_barrier_no_cotangents``, ``jax_scan3``) change how JAX differentiates, not what
is wrong: each failure gets the same diagnosis with them off, each alone, and all together.

One kernel per diagnosis kind (built under the flags, as a user who sets them first would),
each beside a ``jax.nn.relu`` (a custom_jvp of JAX's own, a hijax primitive under
``jax_custom_jvp3``). A flag under which JAX itself fails otherwise (``jax_scan3`` on a
scan over a custom_vjp) is no vjpviz matter: that pair is left out, saying so. The whole
suites run with the flags on through ``VJPVIZ_JAX_FLAGS`` (tests/conftest.py).
"""
import re

import jax
import jax.numpy as jnp
import pytest

import jupyter_vjpviz as vv
import jax_features
from test_jax_versions import (accumulator, cotangent, custom, grad_of, has_accums, has_refs,
                               outcome, refs, wrong_solve)

relu = jax.nn.relu


def with_relu(make_rule, staged=False):
  """The loss of ``make_rule()`` applied after a relu, differentiated."""
  def run():
    f = make_rule()
    return grad_of(lambda x: f(relu(x)), staged)()
  return run


def wrong_tangent():
  f = jax.custom_jvp(lambda x: x * 2.)
  f.defjvp(lambda p, t: (p[0] * 2., t[0][:2]))
  return grad_of(lambda x: f(relu(x)))()


def remat_of_wrong_bwd():
  f = custom(lambda x: x * 2., lambda r, g: (g[:2],))
  return grad_of(jax.checkpoint(lambda x: f(relu(x))))()


def scan_of_wrong_bwd():
  f = custom(lambda x: x * 2., lambda r, g: (g[:2],))
  return grad_of(lambda x: jax.lax.scan(lambda c, _: (f(relu(c)), None), x, None, length=2)[0])()


def nan_through_softplus():
  if not vv.installed():
    return None
  return vv.nans(lambda x: jax.nn.softplus(jnp.log(x)).sum(), jnp.array([1., -1., 2.]))


def gradcheck_of_doubled_rule():
  if not vv.installed():
    return None
  f = custom(jnp.sin, lambda x, g: (2. * jnp.cos(x) * g,))
  return vv.gradcheck(lambda x: f(relu(x)).sum(), jnp.linspace(.5, 1., 3))


def hijax_transposed():
  from test_hijax_rules import X, Y, loss
  return jax.grad(lambda x, y: relu(loss(x, y, "transpose")), argnums=(0, 1))(X, Y)


def correct_hijax_beside_a_broken_rule():
  from test_hijax_rules import X, loss
  f = custom(lambda x: x * 2., lambda r, g: (g[:2],))
  return jax.grad(lambda x: loss(x, x) + f(relu(x[0, :3])).sum())(X)


hijax = lambda: jax_features.has("hijax primitives")
always = lambda: True
KERNELS = {
    "bwd_type": (always, with_relu(lambda: custom(lambda x: x * 2., lambda r, g: (g[:2],)))),
    "bwd_structure": (always, with_relu(lambda: custom(lambda x: x * 2., lambda r, g: g))),
    "fwd_type": (always, with_relu(lambda: custom(
        lambda x: x * 2., lambda r, g: (g[:3],), fwd=lambda x: (jnp.concatenate([x, x]), None)),
        staged=True)),
    "fwd_structure": (always, with_relu(lambda: custom(
        lambda x: x * 2., lambda r, g: (g,), fwd=lambda x: x * 2.))),
    "silent_dtype": (always, with_relu(lambda: custom(
        jnp.sin, lambda x, g: ((jnp.cos(x) * g).astype(jnp.bfloat16),)))),
    "bwd_type under remat": (always, remat_of_wrong_bwd),
    "bwd_type under scan": (always, scan_of_wrong_bwd),
    "jvp_tangent_type": (always, wrong_tangent),
    "solve_type": (always, wrong_solve),
    "vjp_cotangent_type": (always, cotangent({"a": jnp.ones(4), "b": jnp.ones(3)})),
    "vjp_cotangent_structure": (always, cotangent({"a": jnp.ones(3)})),
    "accumulator_type": (has_accums, accumulator),
    "ref_grad_unbound": (has_refs, refs(lambda v: v(jnp.ones(3)))),
    "grad_ref_type": (has_refs, refs(
        lambda v: v.with_refs(jax.new_ref(jnp.zeros(4)), jax.ad.GradValue())(jnp.ones(3)))),
    "hijax bwd_type": (hijax, hijax_transposed),
    "custom_vjp beside a correct hijax primitive": (hijax, correct_hijax_beside_a_broken_rule),
    "nonfinite_cotangent": (always, nan_through_softplus),
    "bwd_value (gradcheck)": (always, gradcheck_of_doubled_rule),
}

SETTINGS = {**{name: (name,) for name in jax_features.UPGRADE_FLAGS},
            "all together": jax_features.UPGRADE_FLAGS}


def summary(d) -> tuple:
  """What a user reads of a diagnosis: kind, function, rule, input, types, fixes."""
  return (d.kind, d.severity, d.function, d.rule, d.argument, d.path, d.expected, d.got,
          tuple(f.title for f in d.fixes))


def run(thunk, flags) -> tuple:
  """(plain JAX's outcome, JAX's outcome with vjpviz, vjpviz's diagnoses) with ``flags`` on."""
  was = {n: getattr(jax.config, n) for n in jax_features.UPGRADE_FLAGS if n in jax.config.values}
  try:
    for name in was:
      jax.config.update(name, name in flags)
    jax.clear_caches()
    returned = []
    call = lambda: _kept(thunk(), returned)
    plain = _shape(outcome(call))
    vv.install()
    vv.clear()
    returned.clear()
    try:
      hooked = _shape(outcome(call))
      found = sorted(summary(d) for d in [*vv.diagnoses(), *returned])
    finally:
      vv.uninstall()
      vv.clear()
  finally:
    for name, value in was.items():
      jax.config.update(name, value)
  return plain, hooked, found


def _kept(value, returned: list):
  """The diagnoses ``nans`` and ``gradcheck`` return, kept aside; other values returned."""
  if isinstance(value, vv.Diagnosis):
    returned.append(value)
  elif type(value).__name__ == "GradCheck":
    returned.extend(value)
  else:
    return value
  return None


def _shape(o):
  """An outcome without the addresses of the functions each run makes afresh."""
  return tuple(re.sub(r" at 0x[0-9a-f]+", "", x) if isinstance(x, str) else x for x in o)


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_each_kind_is_diagnosed_alike_with_the_upgrade_flags_off_and_on(kernel):
  expressible, thunk = KERNELS[kernel]
  if not expressible():
    pytest.skip(f"jax {jax.__version__} cannot express {kernel}")
  off_plain, off_hooked, off = run(thunk, ())
  assert off_hooked == off_plain and off, (off_hooked, off)
  compared = []
  for setting, flags in SETTINGS.items():
    flags = tuple(f for f in flags if f in jax.config.values)
    if not flags:
      continue
    plain, hooked, found = run(thunk, flags)
    assert hooked == plain, setting        # JAX's own outcome, whatever the flags
    if plain[:2] != off_plain[:2]:
      continue    # JAX itself fails otherwise under this flag: nothing for vjpviz to match
    assert found == off, (setting, set(found) - set(off), set(off) - set(found))
    compared.append(setting)
  if not compared:
    pytest.skip(f"jax {jax.__version__} has no upgrade flag under which it differentiates {kernel}")
