"""User pytree types that check what they are built from.

JAX's docs say ``tree_unflatten`` may be called with placeholders, but real
classes often validate in ``__init__`` (``Strict`` here accepts only things with a
shape). JAX itself rebuilds the args tree around ``object()`` when it checks a bwd
rule's output, so a wrong cotangent for such a type surfaces as the class's own
TypeError, which names neither the rule nor the input. vjpviz must leave that
error as it is, call the class only with what JAX calls it with (arrays, tracers,
``object()`` where JAX does, ShapeDtypeStructs as in ``eval_shape``'s outputs), and
still say what the rule got wrong.
"""
from __future__ import annotations

import traceback

import jax
import jax.numpy as jnp

import jupyter_vjpviz as vv

BUILT_FROM: list[str] = []


@jax.tree_util.register_pytree_with_keys_class
class Strict:
  def __init__(self, a, b):
    BUILT_FROM.extend(type(x).__name__ for x in (a, b))
    if not (hasattr(a, "shape") and hasattr(b, "shape")):
      raise TypeError(f"Strict wants arrays, got {type(a).__name__}, {type(b).__name__}")
    self.a, self.b = a, b

  def tree_flatten_with_keys(self):
    return ((jax.tree_util.GetAttrKey("a"), self.a), (jax.tree_util.GetAttrKey("b"), self.b)), None

  @classmethod
  def tree_unflatten(cls, aux, children):
    return cls(*children)


@jax.custom_vjp
def inner(s):
  return (s.a * s.b).sum()


inner.defvjp(lambda s: (inner(s), s), lambda s, g: (Strict(g * s.b, (g * s.a).T),))


def _grad():
  return jax.grad(lambda s: inner(s) * 2.)(Strict(jnp.ones((2, 3)), jnp.ones((2, 3))))


def _outcome():
  try:
    _grad()
  except Exception as e:  # noqa: BLE001 - comparing what reaches the user
    return type(e), str(e), [f.name for f in traceback.extract_tb(e.__traceback__)
                             if "jupyter_vjpviz" not in f.filename]
  return None


def test_a_validating_pytree_gets_the_diagnosis_jax_cannot_give(hook, capsys):
  BUILT_FROM.clear()
  hook.uninstall()
  plain = _outcome()
  plain_types = set(BUILT_FROM)
  hook.install()
  BUILT_FROM.clear()
  hooked = _outcome()
  assert plain is not None and plain[0] is TypeError and "got object, object" in plain[1]
  assert hooked == plain
  assert "could not" not in capsys.readouterr().err
  d = vv.last()
  assert d is not None and d.kind == "bwd_type"
  assert (d.argument, d.expected, d.got) == ("s.b", "float32[2,3]", "float32[3,2]")
  assert d.fixes and d.fixes[0].verdict == "verified", [(f.title, f.verdict) for f in d.fixes]
  jax_like = {"ArrayImpl", "DynamicJaxprTracer", "LinearizeTracer", "JVPTracer",
              "ShapeDtypeStruct", "ShapedArray", "object"}
  assert set(BUILT_FROM) - plain_types <= jax_like, set(BUILT_FROM) - plain_types
