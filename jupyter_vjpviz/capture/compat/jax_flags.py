"""JAX config flags, read so that a JAX predating one reads it as off.

The hook must work (or step aside) on JAX versions it was not built for; an
AttributeError from ``jax.config`` inside a wrapped check site would reach the
user's code.
"""
from __future__ import annotations

import jax


def on(name: str) -> bool:
  return bool(getattr(jax.config, name, False))
