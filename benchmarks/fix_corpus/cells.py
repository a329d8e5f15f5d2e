"""Rules defined the way a notebook defines them: source in linecache, no file on disk."""
from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import linecache
import numpy as np

_cells = itertools.count(1)


def cell(code: str, tag: str = "fixq") -> tuple[str, dict]:
  """(filename, namespace) after running ``code`` as IPython runs a cell."""
  name = f"<ipython-input-{next(_cells)}-{tag}>"
  linecache.cache[name] = (len(code), None, code.splitlines(keepends=True), name)
  ns = {"jax": jax, "jnp": jnp, "np": np, "functools": functools, "__name__": "__main__"}
  exec(compile(code, name, "exec"), ns)  # noqa: S102 - the corpus's own rules
  return name, ns
