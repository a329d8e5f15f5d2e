"""Each diagnosis kind on the JAX this runs on, which scripts/test.sh varies (0.6 to 0.12).

For every kind one real failure: with vjpviz installed, JAX raises (or returns) exactly
what it does without it; vjpviz diagnoses that kind exactly when it says, in the line
``%load_ext`` prints, that this JAX gets it; uninstalling restores every hook point.
With ``VJPVIZ_CAPABILITIES`` set to a directory, the outcome per kind is written there
as JSON for ``scripts/capability_table.py`` (docs/jax-versions.md's table).
"""
import json
import os
import platform
import subprocess
import sys
import traceback
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import jupyter_vjpviz as vv
from jupyter_vjpviz.api import pipeline
from jupyter_vjpviz.capture.compat import capabilities

ROOT = Path(__file__).resolve().parents[1]
DIAGNOSED, NOT_DIAGNOSED, ABSENT = "diagnosed", "not diagnosed", "not in this JAX"


def custom(primal, bwd, fwd=None):
  f = jax.custom_vjp(primal)
  f.defvjp(fwd or (lambda x: (f(x), x)), bwd)
  return f


def grad_of(f, staged: bool = False):
  loss = lambda x: f(x).sum()
  return lambda: jax.grad(jax.jit(loss) if staged else loss)(jnp.ones(3))


def cotangent(ct):
  return lambda: jax.vjp(lambda x: {"a": x * 2., "b": x}, jnp.ones(3))[1](ct)


def refs(call):
  """A VJP of a function of a Ref, called as ``call`` says (JAX with Refs only)."""
  def run():
    f_vjp = jax.vjp(lambda w, x: jnp.sin(w[...] * x), jax.new_ref(jnp.ones(3)), jnp.ones(3))[1]
    return call(f_vjp)
  return run


def accumulator():
  from jax.experimental.hijax import ShapedArray, ValAccum
  f_vjp = jax.vjp(jnp.sin, jnp.ones(3))[1]
  return f_vjp.with_refs(ValAccum(ShapedArray((4,), jnp.float32)))(jnp.ones(3))


def wrong_tangent():
  f = jax.custom_jvp(lambda x: x * 2.)
  f.defjvp(lambda p, t: (p[0] * 2., t[0][:2]))
  return grad_of(f)()


def wrong_solve():
  solve = lambda matvec, b: (b / 2.)[:, None]
  f = lambda b: jax.lax.custom_linear_solve(lambda x: 2. * x, b, solve, symmetric=True)
  return grad_of(f)()


def hijax_path():
  with _flag("jax_custom_vjp3"):
    return grad_of(custom(lambda x: x * 2., lambda r, g: (g[:2],)))()


class _flag:
  """``jax_custom_vjp3`` on for one call, as a user sets it."""
  def __init__(self, name):
    self.name = name

  def __enter__(self):
    self.was = getattr(jax.config, self.name)
    jax.config.update(self.name, True)

  def __exit__(self, *exc):
    jax.config.update(self.name, self.was)


has_refs = lambda: hasattr(jax, "new_ref") and hasattr(getattr(jax, "ad", None), "GradValue")
has_accums = lambda: _importable("jax.experimental.hijax", "ValAccum")
has_flag = lambda: "jax_custom_vjp3" in jax.config.values
always = lambda: True

SCENARIOS = {
    # row: (the kind it must produce, whether this JAX can express it, the failing call)
    "bwd_type": ("bwd_type", always, grad_of(custom(lambda x: x * 2., lambda r, g: (g[:2],)))),
    "bwd_structure": ("bwd_structure", always, grad_of(custom(lambda x: x * 2., lambda r, g: g))),
    "fwd_type": ("fwd_type", always, grad_of(custom(   # of a jit: there JAX traces the primal
        lambda x: x * 2., lambda r, g: (g[:3],), fwd=lambda x: (jnp.concatenate([x, x]), None)),
        staged=True)),
    "fwd_structure": ("fwd_structure", always, grad_of(custom(
        lambda x: x * 2., lambda r, g: (g,), fwd=lambda x: x * 2.))),
    "silent_dtype": ("silent_dtype", always, grad_of(custom(
        jnp.sin, lambda x, g: ((jnp.cos(x) * g).astype(jnp.bfloat16),)))),
    "vjp_cotangent_type": ("vjp_cotangent_type", always,
                           cotangent({"a": jnp.ones(4), "b": jnp.ones(3)})),
    "vjp_cotangent_structure": ("vjp_cotangent_structure", always, cotangent({"a": jnp.ones(3)})),
    "accumulator_type": ("accumulator_type", has_accums, accumulator),
    "ref_grad_unbound": ("ref_grad_unbound", has_refs, refs(lambda v: v(jnp.ones(3)))),
    "ref_grad_as_value": ("ref_grad_as_value", has_refs, refs(
        lambda v: v.with_refs(jax.ad.GradValue(), jax.ad.GradValue())(jnp.ones(3)))),
    "grad_ref_type": ("grad_ref_type", has_refs, refs(
        lambda v: v.with_refs(jax.new_ref(jnp.zeros(4)), jax.ad.GradValue())(jnp.ones(3)))),
    "jvp_tangent_type": ("jvp_tangent_type", always, wrong_tangent),
    "solve_type": ("solve_type", always, wrong_solve),
    "bwd_type under jax_custom_vjp3": ("bwd_type", has_flag, hijax_path),
}


def _importable(module, name):
  try:
    return hasattr(__import__(module, fromlist=[name]), name)
  except ImportError:
    return False


def outcome(thunk):
  """What the user sees: the exception (type, message, frames) or the values returned."""
  try:
    value = thunk()
  except Exception as e:  # noqa: BLE001
    frames = [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(e.__traceback__)]
    return ("raised", type(e).__name__, str(e), frames)
  return ("returned", str(jax.tree_util.tree_map(lambda a: (a.dtype, a.tolist()), value)))


def from_message(d) -> bool:
  """Read from JAX's message text (analysis/fallback), not recorded at a check site: the
  safety net where a path is not watched, which the capability line does not claim."""
  return "read from JAX's message" in (d.detail or "")


def claimed() -> capabilities.Capabilities:
  return capabilities.of(pipeline.hook_points()[0])


@pytest.fixture(scope="module")
def results():
  found: dict[str, str] = {}
  yield found
  out = os.environ.get("VJPVIZ_CAPABILITIES")
  if out and found:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"jax-{jax.__version__}.json"), "w") as f:
      json.dump({"jax": jax.__version__, "python": platform.python_version(),
                 "kinds": found}, f, indent=1)


@pytest.mark.parametrize("row", list(SCENARIOS))
def test_each_kind_is_diagnosed_exactly_where_vjpviz_says_and_jax_is_unchanged(row, results):
  kind, expressible, thunk = SCENARIOS[row]
  if not expressible():
    results[row] = ABSENT
    pytest.skip(f"jax {jax.__version__} cannot express this failure")
  plain = outcome(thunk)
  vv.install()
  vv.clear()
  try:
    hooked = outcome(thunk)
    caps = claimed()
    found = [d.kind for d in vv.diagnoses() if not from_message(d)]
  finally:
    vv.uninstall()
    vv.clear()
  assert hooked == plain
  says = caps.hijax_path if row.endswith("jax_custom_vjp3") else kind in caps.kinds
  assert (kind in found) == says, (found, caps.line())
  results[row] = DIAGNOSED if says else NOT_DIAGNOSED


def test_correct_gradients_are_bitwise_unchanged():
  rule = custom(jnp.sin, lambda x, g: (g * jnp.cos(x),))
  loss = lambda w, x: (rule(w * x) ** 2).sum()
  args = (jnp.linspace(0., 1., 6).reshape(2, 3), jnp.arange(3.))
  runs = [lambda: jax.grad(loss)(*args), lambda: jax.jit(jax.grad(loss))(*args),
          lambda: jax.vjp(loss, *args)[1](1.)]
  plain = [outcome(r) for r in runs]
  vv.install()
  try:
    hooked = [outcome(r) for r in runs]
    assert vv.diagnoses() == []
  finally:
    vv.uninstall()
  assert hooked == plain and all(o[0] == "returned" for o in plain)


EVERY_TESTED_JAX = ("bwd_type", "bwd_structure", "fwd_type", "fwd_structure", "silent_dtype",
                    "vjp_cotangent_type", "vjp_cotangent_structure", "jvp_tangent_type")
"""The kinds whose failures exist in every JAX from 0.6: vjpviz must diagnose them on each."""


def test_every_jax_from_0_6_gets_the_kinds_it_can_express():
  vv.install()
  try:
    caps = claimed()
  finally:
    vv.uninstall()
  assert set(EVERY_TESTED_JAX) <= set(caps.kinds), caps.line()


def test_grad_diagnosis_has_the_users_function_and_its_graph():
  """grad enters JAX's VJP differently before 0.10; the diagnosis must still know the
  user's call (its arguments as given, the keyword too) to trace the graph and re-run it."""
  rule = custom(lambda x: x * 2., lambda r, g: (g[:2],))

  def loss(scale, x, *, offset):
    return (rule(x) * scale + offset).sum()
  vv.install()
  vv.clear()
  try:
    with pytest.raises(ValueError):
      jax.grad(loss, argnums=1)(jnp.array(2.), jnp.ones(3), offset=jnp.array(1.))
    found = vv.diagnoses()
  finally:
    vv.uninstall()
    vv.clear()
  assert [d.kind for d in found] == ["bwd_type"]
  (d,) = found
  assert d.graph.note is None, d.graph.note
  inputs = [n.label for n in d.graph.nodes if n.kind == "input"]
  assert len(inputs) == 1 and inputs[0].startswith("x") and d.node is not None, (inputs, d.node)


def hook_owners() -> list[dict]:
  """Every attribute of the objects vjpviz hooks (by identity), and the process's own hooks."""
  from jax._src import api, custom_derivatives as cd
  from jax._src.interpreters import ad
  owners = [api, jax, ad, cd, cd.custom_vjp, getattr(ad, "fancy_transposes", {}),
            ad.primitive_linearizations]
  tools = getattr(sys, "monitoring", None)
  return [dict(vars(o)) if not isinstance(o, dict) else dict(o) for o in owners] + [
      {"excepthook": sys.excepthook, **{f"monitoring tool {i}": tools.get_tool(i)
                                       for i in range(6) if tools}}]


def assert_same_objects(before: list[dict], after: list[dict]):
  for b, a in zip(before, after, strict=True):
    changed = [k for k in b.keys() | a.keys() if k not in a or k not in b or a[k] is not b[k]]
    assert changed == [], changed


def test_uninstall_restores_every_hook_point_by_identity():
  before = hook_owners()
  vv.install()
  wrapped, _ = pipeline.hook_points()
  vv.uninstall()
  assert wrapped
  assert_same_objects(before, hook_owners())


def test_load_ext_says_in_one_line_what_this_jax_gets_and_unload_leaves_nothing(capsys):
  from IPython.core.interactiveshell import InteractiveShell
  ip = InteractiveShell.instance()
  state = lambda: (hook_owners(), list(ip.events.callbacks["post_run_cell"]),
                   {kind: set(m) for kind, m in ip.magics_manager.magics.items()},
                   dict(ip.display_formatter.mimebundle_formatter.type_printers))
  plain = state()
  ip.run_line_magic("load_ext", "vjpviz")
  try:
    caps = claimed()
    loaded = capsys.readouterr()
    ip.run_line_magic("vjpviz", "")
    status = capsys.readouterr().out
  finally:
    ip.run_line_magic("unload_ext", "vjpviz")
    unloaded = state()
    InteractiveShell.clear_instance()   # else later installs take this process for IPython
  assert caps.line() in status.splitlines()
  # One line, on stderr when this JAX lacks something, else on stdout.
  (line,) = (loaded.err if caps.missing or not caps.tested else loaded.out).splitlines()
  assert line.startswith(caps.line()) and all(k in line for k in caps.missing)
  assert not (loaded.out if caps.missing or not caps.tested else loaded.err)
  assert_same_objects(plain[0], unloaded[0])
  assert plain[1:] == unloaded[1:] and not vv.installed()


def test_pip_installing_vjpviz_here_leaves_jax_as_it_is(tmp_path):
  """pip's resolver, asked to install this checkout into this environment, changes no JAX
  (scripts/test.sh also installs it into each older JAX's venv and compares versions)."""
  report = tmp_path / "report.json"
  subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "-q", "--disable-pip-version-check",
                  "--report", str(report), str(ROOT)], check=True, timeout=900,
                 capture_output=True)
  names = {i["metadata"]["name"].lower().replace("_", "-")
           for i in json.loads(report.read_text())["install"]}
  assert "jupyter-vjpviz" in names and not names & {"jax", "jaxlib"}, names


def test_a_vanished_dtype_exemption_exempts_nothing(monkeypatch):
  """JAX 0.12 marks ``_temporary_dtype_exception`` for removal: without it nothing is exempt
  (JAX then checks dtypes strictly), and asking is no error."""
  from jax._src import core
  from jax._src import custom_derivatives as cd
  from jupyter_vjpviz.capture.compat import dtype_exemption
  expected, got = core.ShapedArray((3,), jnp.float32), core.ShapedArray((3,), jnp.bfloat16)
  assert dtype_exemption.exempt(cd, expected, got) is True   # JAX lets a bf16 rule through
  monkeypatch.delattr(cd, dtype_exemption.NAME)
  assert dtype_exemption.exempt(cd, expected, got) is False
