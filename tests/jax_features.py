"""What the JAX under test lets vjpviz do, for skips keyed on the feature a test needs.

scripts/test.sh runs the kernel-side tests on older JAX too: a test that needs a hook
point such a JAX lacks (Refs, accumulators, hijax primitives, the jax_custom_vjp3 path)
is skipped there, saying which, and runs everywhere vjpviz claims it. The claim is
``capture.capabilities`` (the hook points this JAX let vjpviz wrap), never a version
string; ``test_jax_versions.py`` checks the claim itself against real failures.
"""
from __future__ import annotations

import contextlib
import functools
import io

import jax
import pytest

HIJAX_PATH = "jax_custom_vjp3"
"""A custom_vjp applied under ``jax_custom_vjp3`` (its own implementation, on hijax)."""


@functools.cache
def claimed():
  """This JAX's ``Capabilities``: the hook installed once to read its points (its one-line
  notice on an older JAX kept out of the tests' output)."""
  import jupyter_vjpviz as vv
  from jupyter_vjpviz.capture import capabilities
  from jupyter_vjpviz.deliver import runtime
  was = vv.installed()
  with contextlib.redirect_stderr(io.StringIO()):
    vv.install()
    try:
      return capabilities.of(runtime.hook_points()[0])
    finally:
      if not was:
        vv.uninstall()


def _bwd_checks_varying_axes() -> bool:
  """Whether JAX itself rejects a custom_vjp bwd whose cotangent lost a varying manual axis."""
  mesh = jax.make_mesh((4,), ("dp",), axis_types=(jax.sharding.AxisType.Auto,))
  f = jax.custom_vjp(lambda x: x * 2.)
  f.defvjp(lambda x: (x * 2., None), lambda r, g: (jax.lax.psum(g, "dp"),))
  inner = lambda x: jax.grad(lambda x: f(x).sum())(x)
  spec = jax.sharding.PartitionSpec("dp")
  try:
    jax.jit(jax.shard_map(inner, mesh=mesh, in_specs=spec, out_specs=spec))(jax.numpy.ones((8, 16)))
  except Exception:  # noqa: BLE001 - JAX's own check
    return True
  return False


JAX_CHECKS = {"bwd check of varying axes": _bwd_checks_varying_axes}
"""What some JAX's own checks catch and others not, probed on plain JAX (the hook off)."""


@functools.cache
def has(feature: str) -> bool:
  """Whether vjpviz diagnoses ``feature`` here: a diagnosis kind, a rule source
  ("hijax primitives") or ``HIJAX_PATH``; or, for ``JAX_CHECKS``, whether JAX checks it."""
  if feature in JAX_CHECKS:
    return JAX_CHECKS[feature]()
  caps = claimed()
  if feature == HIJAX_PATH:
    return caps.hijax_path
  return feature in caps.kinds or feature in caps.sources


def why_not(feature: str) -> str:
  if feature in JAX_CHECKS:
    return f"jax {jax.__version__} has no {feature}"
  return f"vjpviz does not diagnose {feature} on jax {jax.__version__}: {claimed().line()}"


def require(feature: str) -> None:
  """Skip the calling test module when ``feature`` is not there (before it imports what
  only a JAX with it has)."""
  if not has(feature):
    pytest.skip(why_not(feature), allow_module_level=True)


def flags_off() -> None:
  """JAX's defaults for the flags tests turn on, where this JAX has them."""
  for name in (HIJAX_PATH, "jax_disable_bwd_checks"):
    if name in jax.config.values:
      jax.config.update(name, False)
