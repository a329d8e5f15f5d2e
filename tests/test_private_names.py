"""Each private JAX name vjpviz reads (``capture/compat/private.py``) as if JAX lacked it.

JAX moves its internals between releases. Each entry of the registry, made absent in
turn, must cost only its own capability: the user's failing grad raises what JAX raises,
vjpviz prints no internal error, the capabilities line names that entry alone, and a
kind still claimed is still diagnosed.
"""
import contextlib
import os
import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

import jupyter_vjpviz as vv
from jupyter_vjpviz.api import pipeline
from jupyter_vjpviz.capture.compat import capabilities, private

PACKAGE = pathlib.Path(vv.__file__).parent


def failing_grad():
  """A custom_vjp whose bwd returns a slice of its cotangent, after a relu (a custom_jvp)."""
  f = jax.custom_vjp(lambda x: x * 2.)
  f.defvjp(lambda x: (x * 2., None), lambda r, g: (g[:2],))
  return jax.grad(lambda x: f(jax.nn.relu(x)).sum())(jnp.ones(3))


def outcome(thunk) -> tuple:
  try:
    thunk()
  except Exception as e:  # noqa: BLE001 - the outcome compared is JAX's own
    return type(e), str(e)
  return None, None


def wrong_transpose_cotangent():
  """A cotangent of the wrong shape handed to ``linear_transpose``'s function."""
  return jax.linear_transpose(lambda x: 2. * x, jnp.ones(3))(jnp.ones(2))


def outcomes() -> tuple:
  return outcome(failing_grad), outcome(wrong_transpose_cotangent)


def reshape(fn):
  """``fn`` as JAX might reshape it: the same behaviour, through a function with no named
  parameters and no nested functions (what vjpviz reads of its frames and code is gone)."""
  def reshaped(*args, **kwargs):
    return fn(*args, **kwargs)
  return reshaped


@pytest.mark.parametrize("key", [n.key for n in private.NAMES if private.has(n.key)])
def test_a_private_name_jax_lacks_costs_its_capability_alone(key, capsys):
  check_costs_its_capability_alone(private.absent(key), capsys)


@pytest.mark.parametrize("key", [n.key for n in private.NAMES
                                 if private.has(n.key) and (n.params or n.nested)])
def test_a_private_function_jax_reshaped_costs_its_capability_alone(key, capsys):
  """A function read by its frame's locals or its nested code, reshaped in every place JAX
  keeps it (same behaviour, other parameters and code): the entry misses, as if absent."""
  with private.reshaped(key, reshape):
    assert not private.has(key)
    check_costs_its_capability_alone(contextlib.nullcontext(private._BY_KEY[key]), capsys)


def check_costs_its_capability_alone(missing, capsys):
  vv.uninstall()
  vv.clear()
  with missing as name:
    key = name.key
    plain = outcomes()
    capsys.readouterr()
    vv.install()
    try:
      hooked = outcomes()
      caps = capabilities.of(pipeline.hook_points()[0])
      found = {d.kind for d in vv.diagnoses()}
    finally:
      vv.uninstall()
  err = capsys.readouterr().err
  assert hooked == plain and plain[1][0] is TypeError
  assert "internal error" not in err and "could not" not in err, err
  if name.capability == private.EVERYTHING:
    assert err.count(f"JAX lacks {key} ") == 1 and not found, err
    return
  assert caps.off == (f"{key}: {capabilities._cost(name)}",)
  cost = capabilities._cost(name)
  assert err.count("; off: ") == 1 and f"; off: {cost} (JAX lacks {key})" in err, err
  assert "bwd_type" not in caps.kinds or "bwd_type" in found, (caps.kinds, found)


def test_names_absent_at_import_cost_no_exception():
  """Names read as a module imports (a class subclassed, a file compared) absent from the
  start, in a fresh interpreter: vjpviz imports, installs and stands aside, in one line."""
  absent = "cd.custom_vjp,cd.__file__,hijax.HiPrim,hijax.__file__"
  code = ("import jax, jax.numpy as jnp, jupyter_vjpviz as vv, test_private_names as t; "
          "print(t.outcome(t.failing_grad)); vv.install(); print(t.outcome(t.failing_grad))")
  env = {**os.environ, "VJPVIZ_PRIVATE_ABSENT": absent,
         "PYTHONPATH": os.pathsep.join([str(PACKAGE.parent), os.path.dirname(__file__)])}
  run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
  assert run.returncode == 0, run.stderr
  plain, hooked = run.stdout.splitlines()[-2:]
  assert plain == hooked
  assert [line for line in run.stderr.splitlines() if "vjpviz" in line] == [
      f"vjpviz is off on jax {jax.__version__}: JAX lacks cd.custom_vjp "
      "(capture/compat/private.py)."]


def test_every_private_name_read_is_an_entry():
  """No module reads a name of the registry's namespaces that the registry lacks (it
  would be an AttributeError on the JAX where it exists, not a capability off)."""
  entries = {n.key for n in private.NAMES}
  spaces = {key.split(".")[0] for key in entries}
  read = set()
  for path in PACKAGE.rglob("*.py"):
    text = path.read_text()
    imported = re.findall(r"from \S*compat\.private import ([\w, ]+)", text)
    names = {n.strip() for line in imported for n in line.split(",")} & spaces
    read |= {m for n in names for m in re.findall(rf"(?<![\w.]){n}\.\w+", text)}
  assert read and read <= entries, read - entries


def test_no_module_outside_compat_imports_jax_internals():
  outside = [p for p in PACKAGE.rglob("*.py") if "compat" not in p.parts]
  assert not [p for p in outside if re.search(r"^\s*(from|import) jax\._src", p.read_text(), re.M)]
