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
import os
import sys

import jax
import pytest

HIJAX_PATH = "jax_custom_vjp3"
"""A custom_vjp applied under ``jax_custom_vjp3`` (its own implementation, on hijax)."""


@functools.cache
def _hook_points() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
  """The hook points installed here and those skipped: the hook installed once to read
  them (its one-line notice on an older JAX kept out of the tests' output)."""
  import jupyter_vjpviz as vv
  from jupyter_vjpviz.api import pipeline
  was = vv.installed()
  with contextlib.redirect_stderr(io.StringIO()):
    vv.install()
    try:
      points, skipped = pipeline.hook_points()
      return tuple(points), tuple(skipped)
    finally:
      if not was:
        vv.uninstall()


def claimed():
  """This JAX's ``Capabilities``."""
  from jupyter_vjpviz.capture.compat import capabilities
  return capabilities.of(list(_hook_points()[0]))


def _entries_watched() -> bool:
  """Whether vjpviz watches JAX's VJP entry points from below (``sys.monitoring``), so no
  frame of its own sits around the user's function: not where it wraps them (Python
  before 3.12, or no free tool slot), nor around JAX's older entry (``api._vjp``, JAX
  before 0.10)."""
  points, skipped = _hook_points()
  return (all(name != "sys.monitoring" for name, _ in skipped)
          and not any(p.endswith("api._vjp") for p in points))


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


def _user_hijax_types() -> bool:
  try:
    from jax.experimental.hijax import HiType, register_hitype  # noqa: F401
  except ImportError:
    return False
  return True


def _checkpointed_custom_vjp3_of_a_pytree() -> bool:
  """Whether JAX differentiates a checkpointed jax_custom_vjp3 rule of a dict argument of
  two leaves (JAX 0.9 and 0.10 fail inside JAX, in a safe_zip, whatever the rule returns)."""
  if HIJAX_PATH not in jax.config.values:
    return False
  jax.config.update(HIJAX_PATH, True)
  try:
    f = jax.custom_vjp(lambda d: d["a"] + d["b"])
    f.defvjp(lambda d: (d["a"] + d["b"], None), lambda r, g: ({"a": g, "b": g},))
    jax.grad(jax.checkpoint(f))({"a": 1., "b": 1.})
  except Exception:  # noqa: BLE001 - JAX's own failure
    return False
  finally:
    jax.config.update(HIJAX_PATH, False)
  return True


def _custom_root_on_hijax() -> bool:
  """Whether JAX differentiates ``lax.custom_root`` as a hijax primitive, whose backward pass
  hands its ``tangent_solve``'s linear map to ``linear_transpose`` (older JAX: a custom_jvp)."""
  from jax._src.lax.control_flow import solves
  try:
    from jax._src.hijax import HiPrim
  except ImportError:
    return False
  root = getattr(solves, "CustomRoot", None)
  return isinstance(root, type) and issubclass(root, HiPrim)


WITH_ACCUMS = "custom_vjp.defvjp_with_accums"
WITH_LOGS = "custom_vjp.defvjp_with_logs"


HIJAX_REMAT_PYTREES = "checkpoint of a jax_custom_vjp3 rule taking a pytree"
CUSTOM_ROOT_HIJAX = "custom_root as a hijax primitive"
JAX_CHECKS = {"bwd check of varying axes": _bwd_checks_varying_axes,
              WITH_ACCUMS: lambda: hasattr(jax.custom_vjp, "defvjp_with_accums"),   # 0.12 on
              WITH_LOGS: lambda: hasattr(jax.custom_vjp, "defvjp_with_logs"),
              "user hijax types": _user_hijax_types,
              HIJAX_REMAT_PYTREES: _checkpointed_custom_vjp3_of_a_pytree,
              CUSTOM_ROOT_HIJAX: _custom_root_on_hijax}
"""What some JAX has and others not, probed on plain JAX (the hook off)."""

WATCHED = "entry points watched from below"
TRANSPOSE_WATCHED = "linear_transpose's function watched"
HOOK = {WATCHED: _entries_watched,
        TRANSPOSE_WATCHED: lambda: any("transposed_fun" in p for p in _hook_points()[0])}
"""How the hook is installed here (which Python, which JAX entry points)."""


@functools.cache
def has(feature: str) -> bool:
  """Whether vjpviz diagnoses ``feature`` here: a diagnosis kind, a rule source
  ("hijax primitives") or ``HIJAX_PATH``; for ``JAX_CHECKS``, whether JAX has it; for
  ``HOOK``, whether the hook is installed that way."""
  if feature in JAX_CHECKS:
    return JAX_CHECKS[feature]()
  if feature in HOOK:
    return HOOK[feature]()
  caps = claimed()
  if feature == HIJAX_PATH:
    return caps.hijax_path
  return feature in caps.kinds or feature in caps.sources


def why_not(feature: str) -> str:
  if feature in JAX_CHECKS:
    return f"jax {jax.__version__} has no {feature}"
  if feature in HOOK:
    return (f"vjpviz wraps JAX's VJP entry points on python {sys.version.split()[0]} with "
            f"jax {jax.__version__}: no {feature}")
  return f"vjpviz does not diagnose {feature} on jax {jax.__version__}: {claimed().line()}"


def require(feature: str) -> None:
  """Skip the calling test module when ``feature`` is not there (before it imports what
  only a JAX with it has)."""
  if not has(feature):
    pytest.skip(why_not(feature), allow_module_level=True)


UPGRADE_FLAGS = ("jax_custom_jvp3", "jax_custom_vjp3", "jax_remat3",
                 "jax_remat_barrier_no_cotangents", "jax_scan3")
"""JAX's AD upgrade flags (``upgrade=True``: the behaviour it means to make the default)."""
ALL_BUT_SCAN3 = UPGRADE_FLAGS[:-1]
"""``all`` turns these on: JAX 0.12 itself cannot differentiate a scan over a custom_vjp
under ``jax_scan3``, so that one runs by name only (and in test_upgrade_flags)."""


def upgrade_flags(spec: str) -> tuple[str, ...]:
  """The upgrade flags ``spec`` names that this JAX has: ``all``, ``none`` or ``a,b``."""
  spec = spec.strip()
  names = ALL_BUT_SCAN3 if spec == "all" else () if spec in ("", "none") else tuple(
      n.strip() for n in spec.split(","))
  unknown = [n for n in names if n not in UPGRADE_FLAGS]
  if unknown:
    raise ValueError(f"VJPVIZ_JAX_FLAGS: not an upgrade flag: {', '.join(unknown)}")
  return tuple(n for n in names if n in jax.config.values)


BASELINE = upgrade_flags(os.environ.get("VJPVIZ_JAX_FLAGS", "none"))
"""The flags every test starts with (``VJPVIZ_JAX_FLAGS``; conftest sets them on import)."""


def baseline_on() -> None:
  for name in BASELINE:
    jax.config.update(name, True)


def flags_off() -> None:
  """The flags tests turn on back to this run's baseline: JAX's defaults, or the upgrade
  flags ``VJPVIZ_JAX_FLAGS`` turned on."""
  for name in (HIJAX_PATH, "jax_disable_bwd_checks"):
    set_flag(name, name in BASELINE)


def set_flag(name: str, on: bool) -> None:
  """Set a JAX flag a test turns on; off (its default) is a no-op on a JAX without it."""
  if on or name in jax.config.values:
    jax.config.update(name, on)


def hi_primitive() -> type:
  """The base class of a user's hijax primitive under this JAX's name (``HiPrim`` from 0.11;
  ``VJPHiPrimitive`` in 0.8 to 0.10), for tests that need "hijax primitives"; a skip where
  its ``vjp_fwd`` takes no ``nzs_in`` (0.8: the primitives here are written for the later API)."""
  import inspect

  import jax.experimental.hijax as hijax
  base = getattr(hijax, "HiPrim", None) or hijax.VJPHiPrimitive
  if "nzs_in" not in inspect.signature(base.vjp_fwd).parameters:
    pytest.skip(f"jax {jax.__version__}'s hijax primitives take no nzs_in in vjp_fwd (JAX 0.8)")
  return base
