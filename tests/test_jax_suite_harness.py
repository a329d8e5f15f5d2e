"""``benchmarks/jax_suite.py``'s import shim: a snapshot of JAX's tests a release apart
from the installed JAX still imports, so every other test in it is judged."""
import pathlib
import sys

import jax
import jax.numpy as jnp
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import jax_suite  # noqa: E402

SNAPSHOT = """from jax.numpy import (sin,
    gone_in_this_jax)
from jax import renamed_in_this_jax as renamed
from jax import lax

class Made(gone_in_this_jax):
  pass
made = Made("at import time")
"""


def test_missing_names_become_their_new_name_or_a_placeholder():
  with pytest.raises(ImportError):
    exec(compile(SNAPSHOT, "snapshot", "exec"), {})
  text, shimmed = jax_suite.shim_imports(SNAPSHOT, {"renamed_in_this_jax": "jit"})
  assert shimmed == ["gone_in_this_jax", "renamed_in_this_jax (as jit)"]
  space = {}
  exec(compile(text, "snapshot", "exec"), space)
  assert space["sin"] is jnp.sin and space["renamed"] is jax.jit and space["lax"] is jax.lax
  assert isinstance(space["made"], space["gone_in_this_jax"])


def test_a_file_that_imports_is_left_as_it_is():
  text = "from jax import lax, numpy as jnp\nfrom jax._src import config\nx = 1\n"
  assert jax_suite.shim_imports(text, {}) == (text, [])
