"""Run by test_unsupported_jax.py under a JAX outside the supported range.

Loads the extension into a real IPython shell, asks ``%vjpviz`` for its
status and compares a failing grad with and without the hook; prints JSON.
``--remove module:attribute`` first deletes a JAX internal vjpviz imports (after
plain JAX has run), as a JAX that renamed it would.
"""
import contextlib
import importlib
import io
import json
import sys
import traceback

import jax
import jax.numpy as jnp
from IPython.core.interactiveshell import InteractiveShell


def failing_grad():
  @jax.custom_vjp
  def f(x):
    return x * 2.
  f.defvjp(lambda x: (x * 2., x), lambda r, g: (g[:2],))
  try:
    jax.grad(lambda x: f(x).sum())(jnp.ones(3))
  except Exception as e:  # noqa: BLE001
    frames = [(f.filename, f.name) for f in traceback.extract_tb(e.__traceback__)]
    notes = [n for n in getattr(e, "__notes__", []) if not n.startswith("vjpviz: ")]
    return [type(e).__name__, str(e), frames, notes]
  return None


def correct_grad():
  @jax.custom_vjp
  def f(x):
    return jnp.sin(x)
  f.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x),))
  return jax.grad(lambda x: f(x).sum())(jnp.linspace(0., 1., 3)).tolist()


def captured(thunk):
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    thunk()
  return out.getvalue(), err.getvalue()


ip = InteractiveShell.instance()
plain, plain_value = failing_grad(), correct_grad()
if "--remove" in sys.argv:
  module, attribute = sys.argv[sys.argv.index("--remove") + 1].split(":")
  delattr(importlib.import_module(module), attribute)
  if f"{module}.{attribute}" in sys.modules:   # a submodule: JAX's own modules keep theirs
    sys.modules[f"{module}.{attribute}"] = None
_, load_err = captured(lambda: ip.run_line_magic("load_ext", "vjpviz"))
status, _ = captured(lambda: ip.run_line_magic("vjpviz", ""))
hooked, hooked_value = failing_grad(), correct_grad()
print(json.dumps({"jax": jax.__version__, "load_stderr": load_err, "status": status,
                  "plain": plain, "hooked": hooked,
                  "values": [plain_value, hooked_value]}))
