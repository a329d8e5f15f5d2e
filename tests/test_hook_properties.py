"""The hook against rules nobody wrote by hand: hypothesis breaks a bwd rule at random.

For a custom_vjp of one to three float inputs of random shapes and dtypes
(positional arguments, or the leaves of one dict argument), each cotangent the
bwd rule returns is right, reshaped, cast, or None, and the whole output may be
a bare array or miss or add an entry; the call runs eagerly or under jit,
vmap, checkpoint or scan, on the classic or hijax path.
Whatever JAX does with it (raise, or let it through), the user sees exactly
what plain JAX shows, and vjpviz names each input it broke with the two types
that differ: the same facts the test derives from what it built. The same holds
for a random cotangent handed to ``f_vjp`` (wrong shapes, dtypes, a missing
entry) and for fwd rules whose primal outputs differ from the primal's (with
and without nondiff arguments, eagerly and under jit).
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import jupyter_vjpviz as vv
import jax_features
from jupyter_vjpviz.capture.naming.leaf_paths import keystr

SCALE = float(os.environ.get("VJPVIZ_PROPERTY_SCALE", "1"))
"""Examples per property, as a share of the full count: scripts/test.sh runs the JAX
releases between the oldest and the newest older one leaner (CI's time)."""


def examples(full: int) -> int:
  return max(5, round(full * SCALE))


FLOATS = ("float32", "float16", "bfloat16")
PATHS = ["classic", pytest.param("hijax", marks=pytest.mark.needs(jax_features.HIJAX_PATH))]
shapes = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)


@st.composite
def broken_rules(draw):
  n = draw(st.integers(1, 3))
  inputs = [(draw(shapes), draw(st.sampled_from(FLOATS))) for _ in range(n)]
  outputs = []
  for shape, dtype in inputs:
    change = draw(st.sampled_from(["right", "right", "shape", "dtype", "int32", "none"]))
    if change == "shape":
      other = draw(shapes.filter(lambda s, shape=shape: s != shape))
      outputs.append((other, dtype))
    elif change == "dtype":
      outputs.append((shape, draw(st.sampled_from([d for d in FLOATS if d != dtype]))))
    elif change == "int32":
      outputs.append((shape, "int32"))
    else:
      outputs.append(None if change == "none" else (shape, dtype))
  structure = draw(st.sampled_from(["right", "right", "right", "bare", "short", "long"]))
  container = draw(st.sampled_from(["args", "dict"]))
  transform = draw(st.sampled_from(["eager", "jit", "vmap", "checkpoint", "scan"]))
  return inputs, outputs, structure, container, transform


def _keys(n: int) -> list[str]:
  return [f"k{i}" for i in range(n)]


def _outcome(thunk):
  """What the user sees: the value as plain data, or the exception's type and message."""
  try:
    out = thunk()
  except Exception as e:  # noqa: BLE001
    return ("raised", type(e).__name__, str(e))
  return ("returned", [(np.asarray(o, np.float32).tolist(), str(o.dtype))
                       for o in jax.tree_util.tree_leaves(out)])


def _plain_and_hooked(thunk, path: str = "classic"):
  """``thunk``'s outcome without vjpviz, with it, and what vjpviz found."""
  jax_features.set_flag(jax_features.HIJAX_PATH, path == "hijax")
  try:
    vv.uninstall()
    plain = _outcome(thunk)
    vv.install()
    vv.clear()
    return plain, _outcome(thunk), vv.diagnoses()
  finally:
    vv.uninstall()
    vv.clear()
    jax_features.set_flag(jax_features.HIJAX_PATH, False)


def _made_on(path: str, make):
  """A custom_vjp made with jax_custom_vjp3 as ``path`` says: before JAX 0.12 the flag
  decides the implementation as the object is made, not as it is called."""
  jax_features.set_flag(jax_features.HIJAX_PATH, path == "hijax")
  try:
    return make()
  finally:
    jax_features.set_flag(jax_features.HIJAX_PATH, False)


def _rule(outputs, structure, container):
  """A custom_vjp whose bwd returns what ``outputs``/``structure`` say (from g, so traced)."""
  def primal(*args):
    return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree_util.tree_leaves(args))

  def bwd(res, g):
    cts = [None if o is None else jnp.full(o[0], g, dtype=o[1]) for o in outputs]
    first = next((c for c in cts if c is not None), jnp.zeros(()))
    cts = {"right": cts, "bare": cts, "short": cts[:-1], "long": cts + [first]}[structure]
    if container == "dict":
      cts = (dict(zip(_keys(len(cts)), cts)),)
    return first if structure == "bare" else tuple(cts)

  f = jax.custom_vjp(primal)
  f.defvjp(lambda *args: (primal(*args), None), bwd)
  return f


def _gradients(f, inputs, container, transform):
  """A thunk: gradients of ``f`` at ones of the input types."""
  xs = [jnp.ones(shape, dtype) for shape, dtype in inputs]
  if transform == "vmap":
    xs = [jnp.stack([x, x]) for x in xs]
  args = (dict(zip(_keys(len(xs)), xs)),) if container == "dict" else tuple(xs)
  loss = {"checkpoint": jax.checkpoint(f),
          "scan": lambda *a: lax.scan(lambda c, _: (c + f(*a), None), 0., length=2)[0],
          }.get(transform, f)
  grad = jax.grad(loss, argnums=tuple(range(len(args))))
  grad = {"jit": jax.jit(grad), "vmap": jax.vmap(grad)}.get(transform, grad)
  return lambda: grad(*args)


@pytest.mark.parametrize("path", PATHS)
@settings(max_examples=examples(60), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=broken_rules())
def test_a_randomly_broken_rule_is_reported_as_built_and_jax_behaves_as_without_us(path, case):
  inputs, outputs, structure, container, transform = case
  # Where JAX itself fails this program whatever the rule returns, there is nothing to report.
  assume(not (path == "hijax" and container == "dict" and transform == "checkpoint")
         or jax_features.has(jax_features.HIJAX_REMAT_PYTREES))
  f = _made_on(path, lambda: _rule(outputs, structure, container))
  plain, hooked, found = _plain_and_hooked(_gradients(f, inputs, container, transform), path)
  assert hooked == plain
  if structure != "right":
    assert [d.kind for d in found] == ["bwd_structure"], case
    return
  wrong = [i for i, (given, out) in enumerate(zip(inputs, outputs))
           if out is not None and out != given]
  path_of = (lambda i: f"[0]['k{i}']") if container == "dict" else (lambda i: f"[{i}]")
  # One diagnosis per rule application and kind; each lists every leaf it got wrong.
  leaves = {keystr(l.path): (l, d) for d in found for l in d.leaves}
  assert len(leaves) == sum(len(d.leaves) for d in found), case
  assert set(leaves) == {path_of(i) for i in wrong}, (case, [d.headline for d in found])
  for i in wrong:
    leaf, d = leaves[path_of(i)]
    assert leaf.expected == jax.core.ShapedArray(*inputs[i]).str_short(), case
    assert leaf.got == jax.core.ShapedArray(*outputs[i]).str_short(), case
    if outputs[i][0] != inputs[i][0]:
      assert d.kind == "bwd_type", case
    raised = plain[0] == "raised"
    failed_later = raised and all(x.kind != "bwd_type" for x in found)
    assert d.severity == ("error" if raised and (d.kind == "bwd_type" or failed_later)
                          else "warning"), case
  if plain[0] == "raised":
    assert any(d.severity == "error" for d in found), case


@st.composite
def cotangents(draw):
  """A function of one input with a leaf, tuple or dict output, and a cotangent for it."""
  shape, dtype = draw(shapes), draw(st.sampled_from(FLOATS))
  keys = {"leaf": [None], "tuple": [0, 1], "dict": ["a", "b"]}[draw(
      st.sampled_from(["leaf", "tuple", "dict"]))]
  cts = []
  for _ in keys:
    change = draw(st.sampled_from(["right", "right", "shape", "dtype"]))
    cts.append((draw(shapes.filter(lambda s: s != shape)), dtype) if change == "shape" else
               (shape, draw(st.sampled_from([d for d in FLOATS if d != dtype])))
               if change == "dtype" else (shape, dtype))
  drop = draw(st.booleans()) and len(keys) > 1
  return shape, dtype, keys, cts, drop


def _tree(keys, leaves):
  if keys == [None]:
    return leaves[0]
  return tuple(leaves) if keys[0] == 0 else dict(zip(keys, leaves))


@settings(max_examples=examples(60), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=cotangents())
def test_a_random_cotangent_handed_to_f_vjp_is_reported_as_built(case):
  shape, dtype, keys, cts, drop = case
  x = jnp.ones(shape, dtype)
  fun = lambda x: _tree(keys, [jnp.sin(x) * (i + 1) for i in range(len(keys))])
  ct = [jnp.ones(s, d) for s, d in cts]
  ct = _tree(keys[:-1] if drop else keys, ct[:-1] if drop else ct)

  plain, hooked, found = _plain_and_hooked(lambda: jax.vjp(fun, x)[1](ct))
  assert hooked == plain
  if drop:
    assert [d.kind for d in found] == ["vjp_cotangent_structure"], case
    return
  path = lambda k: "out" if k is None else f"out[{k!r}]"
  wrong = {path(k): c for k, c in zip(keys, cts) if c != (shape, dtype)}
  assert {d.path for d in found} == set(wrong), (case, [d.headline for d in found])
  for d in found:
    assert d.kind == "vjp_cotangent_type"
    assert d.expected == jax.core.ShapedArray(shape, jnp.dtype(dtype)).str_short()
    assert d.got == jax.core.ShapedArray(*wrong[d.path]).str_short()
  if plain[0] == "raised":
    assert any(d.severity == "error" for d in found), case


@st.composite
def broken_fwd_rules(draw):
  """Primal outputs of random types, and what a fwd rule returns for each."""
  outs = [(draw(shapes), draw(st.sampled_from(FLOATS))) for _ in range(draw(st.integers(1, 3)))]
  returned = []
  for shape, dtype in outs:
    change = draw(st.sampled_from(["right", "right", "shape", "dtype"]))
    returned.append((draw(shapes.filter(lambda s, shape=shape: s != shape)), dtype)
                    if change == "shape" else
                    (shape, draw(st.sampled_from([d for d in FLOATS if d != dtype])))
                    if change == "dtype" else (shape, dtype))
  structure = draw(st.sampled_from(["right", "right", "right", "no pair", "short"]))
  nondiff = draw(st.booleans())
  return outs, returned, structure, nondiff, draw(st.sampled_from(["eager", "jit"]))


@pytest.mark.parametrize("path", PATHS)
@settings(max_examples=examples(40), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=broken_fwd_rules())
def test_a_randomly_broken_fwd_rule_is_reported_as_built(path, case):
  outs, returned, structure, nondiff, transform = case
  full = lambda spec, x: jnp.full(spec[0], x.sum(), spec[1])

  def primal(*args):
    x = args[-1]
    return tuple(full(o, x) for o in outs)

  def fwd(*args):
    x = args[-1]
    got = tuple(full(r, x) for r in returned)
    got = got[:-1] if structure == "short" and len(got) > 1 else got
    return got if structure == "no pair" else (got, x)

  def bwd(*args):
    res = args[-2]
    return (jnp.ones_like(res),)

  f = _made_on(path, lambda: jax.custom_vjp(primal, nondiff_argnums=(0,) if nondiff else ()))
  f.defvjp(fwd, bwd)
  call = (lambda x: f(2, x)) if nondiff else f
  loss = lambda x: sum(jnp.sum(o.astype(jnp.float32)) for o in call(x))
  grad = jax.jit(jax.grad(loss)) if transform == "jit" else jax.grad(loss)

  plain, hooked, found = _plain_and_hooked(lambda: grad(jnp.ones(3)), path)
  assert hooked == plain
  short = structure == "short" and len(outs) > 1
  paired = structure == "no pair" and len(outs) == 2   # (out0, out1) reads as (out, res)
  if structure == "no pair" and not paired or (short or paired) and path == "hijax":
    assert found and found[0].kind == "fwd_structure", (case, [d.kind for d in found])
    return
  if short or paired:   # classic: no primal output structure to compare with (as for types)
    return
  # classic custom_vjp under grad (eager or jit of grad) runs only the fwd: there is no
  # primal output type to compare with, in JAX or in vjpviz, so no fwd_type; hijax traces it
  wrong = {f"[{i}]": (o, r) for i, (o, r) in enumerate(zip(outs, returned))
           if o != r and path == "hijax"}
  fwd_found = [d for d in found if d.kind == "fwd_type"]
  assert {d.path for d in fwd_found} == set(wrong), (case, [d.headline for d in found])
  for d in fwd_found:
    want, got = wrong[d.path]
    assert d.expected == jax.core.ShapedArray(*want).str_short(), case
    assert d.got == jax.core.ShapedArray(*got).str_short(), case
  if plain[0] == "raised":
    assert any(d.severity == "error" for d in found), (case, plain[2][:200])
