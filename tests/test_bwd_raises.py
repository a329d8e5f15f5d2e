"""A bwd rule that raises on its own line while writing or computing a cotangent.

flax nnx's idiom writes a gradient in place (``m_g['w'][...] = v``); a transposed ``v``
raises a broadcasting error inside the user's rule, before JAX has a cotangent to
check. The statement names the slot (a local the rule returns), the site the cotangent
it must hold: a ``bwd_type`` at that line. Where an operation computing the value raises
for the types it was given (``jnp.zeros(5).at[1:3].set(v)`` with a ``v`` of 3 elements)
it is a ``bwd_raised`` naming the operation, its types and the input whose cotangent the
value reaches, with fixes read off those types and judged by the primal's derivative. A
failure of values (the user's own check) or of an immutable array written is no
diagnosis. The user's exception is the one they get without vjpviz.
"""
import gc
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
nnx = pytest.importorskip("flax.nnx")
eqx = pytest.importorskip("equinox")

import jupyter_vjpviz as vv
from kernel_helpers import DIAGNOSIS
from test_capture import _frames

HERE = __file__


def _outcome(run):
  """The exception the user sees (type, message, frames), with vjpviz's note left out."""
  try:
    run()
  except Exception as e:  # noqa: BLE001
    notes = [n for n in getattr(e, "__notes__", []) if not n.startswith("vjpviz: ")]
    return type(e), str(e), tuple(_frames(e)), tuple(notes)
  return None


def _plain_and_hooked(run):
  """The outcome without vjpviz, then with it, and the diagnosis it recorded."""
  vv.uninstall()
  plain = _outcome(run)
  vv.install()
  vv.clear()
  hooked = _outcome(run)
  gc.collect()
  return plain, hooked, vv.last()


def _line_of(fn, text: str) -> int:
  lines, start = inspect.getsourcelines(fn)
  return start + next(i for i, line in enumerate(lines) if text in line)


class Scale(nnx.Module):
  def __init__(self, n, m):
    self.w = nnx.Param(jnp.linspace(0.5, 1.5, n * m).reshape(n, m))


@nnx.custom_vjp(graph_updates=True)
def mix(m, x):
  return jnp.tanh(x @ m.w)


def mix_fwd(m, x):
  y = mix(m, x)
  return y, (y, x, m)


def mix_bwd(res, g):
  input_updates_g, out_g = g
  y, x, m = res
  (m_updates_g, _) = input_updates_g
  m_g = jax.tree.map(lambda t: t, m_updates_g)
  gz = out_g * (1 - y ** 2)
  m_g['w'][...] = gz.T @ x          # transposed: wrong
  return (m_g, gz @ m.w.T)


mix.defvjp(mix_fwd, mix_bwd)


def _mix_step(rule):
  mix.defvjp(mix_fwd, rule)
  model = Scale(4, 3)
  x = jnp.linspace(-1, 1, 20).reshape(5, 4)
  step = nnx.jit(lambda m: nnx.grad(lambda m: mix(m, x).sum())(m))
  return lambda: step(model)


def test_an_in_place_write_of_the_wrong_type_is_diagnosed_at_its_line(hook):
  plain, hooked, d = _plain_and_hooked(_mix_step(mix_bwd))
  assert plain is not None and plain[0] is ValueError and hooked == plain
  assert d is not None
  assert (d.kind, d.severity, d.function, d.rule, d.argument) == (
      "bwd_type", "error", "mix", "mix_bwd", "m.w.value")
  assert (d.expected, d.got, d.path) == ("float32[4,3]", "float32[3,4]", "[0]['w']")
  line = _line_of(mix_bwd, 'gz.T @ x')
  assert d.raised_at == f"{HERE}:{line}" and f"{HERE}:{line}" in d.detail, d.detail
  assert d.headline.startswith(f"mix's bwd rule mix_bwd raised at line {line} writing float32[3,4] "
                               "for input m.w.value: float32[4,3]"), d.headline
  assert "m_g['w'][...] = gz.T @ x" in d.detail
  assert d.expected_aval.shape == (4, 3) and d.got_aval.shape == (3, 4)
  out = d.to_dict()                       # the panel marks the line that raised
  DIAGNOSIS.validate({"v": 1, "type": "diagnosis", "diagnosis": out})
  assert out["rule_source_bad_line"] == line
  first = d.fixes[0]
  assert first.verdict == "verified", [(f.title, f.verdict, f.note) for f in d.fixes]
  assert "m_g['w'][...] = (gz.T @ x).T" in first.code or "x.T @ gz" in first.code, first.code
  assert vv.verify_fix(d, first.code) == []


def test_the_right_in_place_write_gives_no_diagnosis(hook):
  namespace = dict(globals())
  exec(inspect.getsource(mix_bwd).replace("gz.T @ x", "x.T @ gz"), namespace)  # noqa: S102
  step = _mix_step(namespace["mix_bwd"])
  vv.clear()
  grads = step()
  assert grads['w'][...].shape == (4, 3)
  assert vv.last() is None


def mix_bwd_failing_value(res, g):
  ((m_g, _), out_g), (y, x, m) = g, res
  m_g = jax.tree.map(lambda t: t, m_g)
  m_g['w'][...] = (out_g * (1 - y ** 2)) @ x     # the product itself fails: nothing is written
  return (m_g, (out_g * (1 - y ** 2)) @ m.w.T)


def test_a_write_whose_value_raises_is_diagnosed_at_the_operation(hook):
  """The product itself fails: no value is written, the operation and its types are told."""
  plain, hooked, d = _plain_and_hooked(_mix_step(mix_bwd_failing_value))
  assert plain is not None and hooked == plain
  assert (d.kind, d.rule, d.argument, d.expected) == (
      "bwd_raised", "mix_bwd_failing_value", "m.w.value", "float32[4,3]")
  assert d.got == "float32[5,3] @ float32[5,4]"
  assert d.raised_at == f"{HERE}:{_line_of(mix_bwd_failing_value, '@ x')}"
  assert d.message == plain[1]
  # the operands transposed or swapped where that gives the slot's float32[4,3]: one way
  assert [(f.title, f.verdict) for f in d.fixes] == [
      ("Fit the operands: x.T @ (out_g * (1 - y ** 2))", "verified")]
  assert vv.verify_fix(d, d.fixes[0].code) == []


@nnx.custom_vjp(graph_updates=False)
def mix_tree(m, x):
  return jnp.tanh(x @ m.w)


def mix_tree_fwd(m, x):
  y = mix_tree(m, x)
  return y, (y, x, m)


def mix_tree_bwd(res, g):
  y, x, m = res
  m_g = nnx.clone(m)                # the nnx docs' graph_updates=False idiom
  gz = g * (1 - y ** 2)
  m_g.w[...] = gz.T @ x             # transposed: wrong
  return (m_g, gz @ m.w.T)


mix_tree.defvjp(mix_tree_fwd, mix_tree_bwd)


def test_an_in_place_write_in_a_tree_mode_rule_is_diagnosed_and_fixed(hook):
  """``graph_updates=False`` runs the rules through flax's decorated ``SimpleBwdFn``: the
  cotangent is a module (``nnx.clone``), and the write that raises is its ``m_g.w``."""
  model = Scale(4, 3)
  x = jnp.linspace(-1, 1, 20).reshape(5, 4)
  step = nnx.jit(lambda m: nnx.grad(lambda m: mix_tree(m, x).sum())(m))
  plain, hooked, d = _plain_and_hooked(lambda: step(model))
  assert plain is not None and plain[0] is ValueError and hooked == plain
  assert d is not None
  assert (d.kind, d.function, d.rule, d.argument) == ("bwd_type", "mix_tree", "mix_tree_bwd", "m.w.value")
  assert (d.expected, d.got, d.path) == ("float32[4,3]", "float32[3,4]", "[0].w")
  line = _line_of(mix_tree_bwd, 'gz.T @ x')
  assert d.raised_at == f"{HERE}:{line}"
  assert d.headline.startswith(f"mix_tree's bwd rule mix_tree_bwd raised at line {line} writing "
                               "float32[3,4] for input m.w.value: float32[4,3]"), d.headline
  first = d.fixes[0]
  assert first.verdict == "verified", [(f.title, f.verdict, f.note) for f in d.fixes]
  assert "m_g.w[...] = (gz.T @ x).T" in first.code or "x.T @ gz" in first.code, first.code
  assert vv.verify_fix(d, first.code) == []
  assert mix_tree.custom_vjp_fn.bwd.bwd is mix_tree_bwd     # verifying ran copies of flax's wrappers


@jax.custom_vjp
def softclip(x):
  return jnp.tanh(x)


def softclip_bwd(x, g):
  ct = jnp.zeros_like(x)
  ct[...] = g.T                     # a JAX array cannot be written: not a type error
  return (ct,)


softclip.defvjp(lambda x: (softclip(x), x), softclip_bwd)


def test_writing_into_an_immutable_array_is_no_diagnosis(hook):
  plain, hooked, d = _plain_and_hooked(
      lambda: jax.grad(lambda x: softclip(x).sum())(jnp.ones((4, 3))))
  assert plain is not None and plain[0] is TypeError and hooked == plain
  assert d is None or d.kind != "bwd_type", d.headline


def test_the_diagnosis_keeps_no_array_of_the_failing_call(hook):
  """Eagerly the rule's locals are arrays: only their avals outlive the call."""
  baseline = {id(a) for a in jax.live_arrays()}
  mix.defvjp(mix_fwd, mix_bwd)
  for step in range(3):
    model = Scale(256, 128 + step)
    x = jnp.full((64, 256), float(step))
    try:
      nnx.grad(lambda m: mix(m, x).sum())(model)  # noqa: F821 - deleted below: nothing may keep it alive
    except ValueError:
      pass
    else:
      raise AssertionError("the transposed write must raise")
  del model, x
  gc.collect()
  assert [d.kind for d in vv.diagnoses()] == ["bwd_type"] * 3
  extra = [a.shape for a in jax.live_arrays() if id(a) not in baseline]
  assert extra == [], f"device buffers kept alive: {extra}"


# ------------------------------------- an operation of the rule that raises for its types

@jax.custom_vjp
def middle(x, y):
  return x[1:4] * 2.0 + y


def middle_fwd(x, y):
  return middle(x, y), None


def middle_bwd(res, g):
  g_full = jnp.zeros(5).at[1:3].set(2.0 * g)     # x[1:4] has 3 elements: wrong slice
  return (g_full, g)


def middle_bwd_returned(res, g):
  return (jnp.zeros(5).at[1:3].set(2.0 * g), g)


def _middle_grad(rule, jit=False):
  middle.defvjp(middle_fwd, rule)
  grad = jax.grad(lambda x, y: middle(x, y).sum(), argnums=(0, 1))
  grad = jax.jit(grad) if jit else grad
  return lambda: grad(jnp.arange(5.), jnp.ones(3))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_an_indexed_update_that_raises_is_diagnosed_with_a_verified_fix(path, jit):
  plain, hooked, d = _plain_and_hooked(_middle_grad(middle_bwd, jit))
  assert plain is not None and plain[0] is ValueError and hooked == plain
  assert "for broadcasting" in plain[1]     # JAX's words, which vary by version
  assert (d.kind, d.severity, d.function, d.rule) == ("bwd_raised", "error", "middle", "middle_bwd")
  assert (d.argument, d.path, d.expected) == ("x", "[0]", "float32[5]")
  assert d.got == ".at[1:3].set of float32[3] into float32[2]"
  line = _line_of(middle_bwd, ".at[1:3]")
  assert d.raised_at == f"{HERE}:{line}" and d.message == plain[1]
  assert d.headline == (f"middle's bwd rule middle_bwd raised at line {line} computing the "
                        "cotangent of input x (float32[5]): .at[1:3].set of float32[3] into "
                        "float32[2].")
  assert "`jnp.zeros(5).at[1:3].set(2.0 * g)`" in d.detail
  out = d.to_dict()
  DIAGNOSIS.validate({"v": 1, "type": "diagnosis", "diagnosis": out})
  assert out["rule_source_bad_line"] == line
  verdicts = {f.title.split(" (")[0]: f.verdict for f in d.fixes}
  assert verdicts["Fit the slice to the update: .at[1:4]"] == "verified", verdicts
  assert verdicts["Fit the slice to the update: .at[0:3]"] == "type-only", verdicts
  first = d.fixes[0]
  assert ".at[1:4].set(2.0 * g)" in first.code and vv.verify_fix(d, first.code) == []
  assert [p.kind for p in vv.verify_fix(d, inspect.getsource(middle_bwd))] == ["bwd_raised"]
  # differentiating the primal replaces the statement that raised, ranked after the slice
  [by_primal] = [f for f in d.fixes if f.title.startswith("Compute the gradient of x by")]
  assert by_primal.verdict == "verified" and d.fixes.index(by_primal) > d.fixes.index(first)
  assert ".at[1:3]" not in by_primal.code and "g_full" not in by_primal.code, by_primal.code


def test_the_vjpviz_note_is_the_one_thing_added(hook):
  vv.uninstall()
  plain = _raised(_middle_grad(middle_bwd))
  vv.install()
  hooked = _raised(_middle_grad(middle_bwd))
  added = [n for n in hooked.__notes__ if n not in getattr(plain, "__notes__", [])]
  assert len(added) == 1 and added[0].startswith("vjpviz: middle's bwd rule middle_bwd raised")


def _raised(run):
  try:
    run()
  except ValueError as e:
    return e
  raise AssertionError("the wrong slice must raise")


def test_a_returned_expression_that_raises_names_the_element_it_computes(hook):
  plain, hooked, d = _plain_and_hooked(_middle_grad(middle_bwd_returned))
  assert plain is not None and hooked == plain
  assert (d.kind, d.argument, d.expected) == ("bwd_raised", "x", "float32[5]")
  assert any(".at[1:4].set(2.0 * g), g)" in f.code and f.verdict == "verified" for f in d.fixes)


def checked(g):
  if not np.isfinite(float(g.max())):     # the user's own check, on values
    raise ValueError("a non-finite cotangent")
  return g


def middle_bwd_by_value(res, g):
  g_full = jnp.zeros(5).at[1:4].set(2.0 * checked(g / 0.0))
  return (g_full, g)


def test_a_statement_that_raises_for_its_values_is_no_diagnosis(hook):
  plain, hooked, d = _plain_and_hooked(_middle_grad(middle_bwd_by_value))
  assert plain is not None and plain[0] is ValueError and hooked == plain
  assert d is None, d.headline


@jax.custom_vjp
def gate(x, w):
  return x * w


def gate_bwd(res, g):
  x, w = res
  return (g * w.T, g * x)       # a stray transpose: float32[3,4] * float32[4,3]


gate.defvjp(lambda x, w: (gate(x, w), (x, w)), gate_bwd)


def test_an_elementwise_operation_that_raises_gets_its_operands_fitted(hook):
  x, w = jnp.linspace(-1., 1., 12).reshape(3, 4), jnp.linspace(.5, 2., 12).reshape(3, 4)
  plain, hooked, d = _plain_and_hooked(lambda: jax.grad(lambda x: gate(x, w).sum())(x))
  assert plain is not None and hooked == plain
  assert (d.kind, d.argument, d.expected, d.got) == (
      "bwd_raised", "x", "float32[3,4]", "float32[3,4] * float32[4,3]")
  first = d.fixes[0]
  assert (first.title, first.verdict) == ("Fit the operands: g * w", "verified"), \
      [(f.title, f.verdict) for f in d.fixes]
  assert "return (g * w, g * x)" in first.code


def test_a_raised_diagnosis_keeps_no_array_of_the_failing_call(hook):
  """The statement's locals are evaluated as avals after the call: only types outlive it."""
  baseline = {id(a) for a in jax.live_arrays()}
  middle.defvjp(middle_fwd, middle_bwd)
  for step in range(3):
    x, y = jnp.full(5, float(step)), jnp.full(3, 2.0)
    try:
      jax.grad(lambda x, y: middle(x, y).sum(), argnums=(0, 1))(x, y)
    except ValueError:
      pass
    else:
      raise AssertionError("the wrong slice must raise")
  del x, y
  gc.collect()
  assert [d.kind for d in vv.diagnoses()] == ["bwd_raised"] * 3
  extra = [a.shape for a in jax.live_arrays() if id(a) not in baseline]
  assert extra == [], f"device buffers kept alive: {extra}"


@jax.custom_vjp
def window(x):
  return x[1:4] * 2.0


window.defvjp(lambda x: (window(x), None),
              lambda res, g: (jnp.zeros(5).at[1:3].set(2.0 * g),))   # a lambda rule


def test_a_lambda_rule_that_raises_is_diagnosed_and_fixed_in_its_own_text(hook):
  plain, hooked, d = _plain_and_hooked(lambda: jax.grad(lambda x: window(x).sum())(jnp.ones(5)))
  assert plain is not None and hooked == plain
  assert (d.kind, d.argument, d.expected, d.got) == (
      "bwd_raised", "x", "float32[5]", ".at[1:3].set of float32[3] into float32[2]")
  with open(HERE) as f:
    line = next(n for n, text in enumerate(f, 1) if "lambda res, g: (jnp.zeros(5).at[1:3]" in text)
  assert d.raised_at == f"{HERE}:{line}"
  first = d.fixes[0]
  assert (first.title, first.verdict) == ("Fit the slice to the update: .at[1:4]", "verified")
  assert "return (jnp.zeros(5).at[1:4].set(2.0 * g),)" in first.code


# ------------------------------------------- a library's own check, after the user's bwd

@eqx.filter_custom_vjp
def gated_norm(inputs):
  params, x = inputs
  return (x - x.mean(-1, keepdims=True)) * params["gain"] + params["shift"]


@gated_norm.def_fwd
def gated_norm_fwd(perturbed, inputs):
  params, x = inputs
  return gated_norm(inputs), (x, params["gain"])


def gated_norm_bwd(saved, g, perturbed, inputs):
  x, gain = saved
  xc = x - x.mean(-1, keepdims=True)
  gx = g * gain
  return {"gain": (g * xc).sum(0)}, gx - gx.mean(-1, keepdims=True)     # no "shift"


GOOD_GATED_NORM_BWD = """
def gated_norm_bwd(saved, g, perturbed, inputs):
  x, gain = saved
  xc = x - x.mean(-1, keepdims=True)
  gx = g * gain
  return {"gain": (g * xc).sum(0), "shift": g.sum(0)}, gx - gx.mean(-1, keepdims=True)
"""


def _gated_norm_grad(bwd):
  gated_norm.def_bwd(bwd)
  params = {"gain": jnp.ones(4), "shift": jnp.zeros(4)}
  x = jnp.linspace(-1., 1., 24).reshape(6, 4)
  return lambda: eqx.filter_grad(lambda p: jnp.tanh(gated_norm((p, x))).sum())(params)


def test_a_missing_key_equinox_rejects_after_the_users_bwd_returned_is_diagnosed(hook):
  plain, hooked, d = _plain_and_hooked(_gated_norm_grad(gated_norm_bwd))
  assert plain is not None and plain[0] is RuntimeError and hooked == plain
  assert d is not None
  assert (d.kind, d.severity, d.function, d.rule) == ("bwd_structure", "error", "gated_norm",
                                                      "gated_norm_bwd")
  assert (d.argument, d.path) == ("inputs[0]['shift']", "[0]['shift']")
  assert (d.expected, d.got) == ("PyTreeDef(({'gain': *, 'shift': *}, *))", "PyTreeDef(({'gain': *}, *))")
  assert [(l.argument, l.expected, l.got) for l in d.leaves if l.expected != l.got] == [
      ("inputs[0]['shift']", "float32[4]", "missing")]
  assert vv.verify_fix(d, GOOD_GATED_NORM_BWD) == []
  bad = inspect.getsource(gated_norm_bwd)
  assert [p.kind for p in vv.verify_fix(d, bad)] == ["bwd_structure"]
  # None for "shift" would change its gradient: its value is the primal's derivative there
  [fix] = [f for f in d.fixes if f.verdict == "verified"]
  assert fix.title == "Add the missing key 'shift' by differentiating gated_norm"
  assert "_, pullback = jax.vjp(gated_norm.fn, inputs)" in fix.code
  assert "'shift': dinputs[0]['shift']}" in fix.code and vv.verify_fix(d, fix.code) == []


def gated_norm_bwd_unreturned(saved, g, perturbed, inputs):
  x, gain = saved
  xc = x - x.mean(-1, keepdims=True)
  gx = g * gain
  dshift = g.sum(0)  # noqa: F841 - computed, never returned: the mistake
  return {"gain": (g * xc).sum(0)}, gx - gx.mean(-1, keepdims=True)


def test_a_missing_key_the_rule_computed_is_returned_first(hook):
  """The candidate search reads the rule's locals from the return it reached, equinox's
  check raising after it: the local of the missing leaf's type is the fix ranked first."""
  plain, hooked, d = _plain_and_hooked(_gated_norm_grad(gated_norm_bwd_unreturned))
  assert plain is not None and hooked == plain
  assert (d.kind, d.argument) == ("bwd_structure", "inputs[0]['shift']")
  first = d.fixes[0]
  assert (first.title, first.verdict) == ("Return the missing entries from dshift", "verified")
  assert "return {\"gain\": (g * xc).sum(0), 'shift': dshift}, gx" in first.code


def test_a_none_equinox_takes_as_a_zero_is_not_called_missing(hook):
  namespace = dict(globals())
  exec(inspect.getsource(gated_norm_bwd).replace('(g * xc).sum(0)}', 'None}'), namespace)  # noqa: S102
  plain, hooked, d = _plain_and_hooked(_gated_norm_grad(namespace["gated_norm_bwd"]))
  assert plain is not None and hooked == plain
  assert [(l.argument, l.got) for l in d.leaves if l.expected != l.got] == [
      ("inputs[0]['gain']", "None"), ("inputs[0]['shift']", "missing")]
  assert d.argument == "inputs[0]['shift']"


def test_the_complete_tree_gives_no_diagnosis(hook):
  namespace = dict(globals())
  exec(GOOD_GATED_NORM_BWD, namespace)  # noqa: S102 - the test's own rule
  grads = _gated_norm_grad(namespace["gated_norm_bwd"])()
  assert set(grads) == {"gain", "shift"}
  assert vv.last() is None


# ------------------------------------------------------------- a fwd rule that raises

@jax.custom_vjp
def bessel_i0(x):
  return jax.pure_callback(lambda v: np.i0(v).astype(np.float32),
                           jax.ShapeDtypeStruct(x.shape, jnp.float32), x)


def bessel_i0_fwd(x):
  y = jax.pure_callback(np.i0, jax.ShapeDtypeStruct(x.shape, np.float64), x)   # x64 is off
  return y, x


def bessel_i0_bwd(x, g):   # i0' = i1, here by its series' first terms
  return (g * (x / 2 + x ** 3 / 16 + x ** 5 / 384),)


def _bessel_grad(fwd):
  bessel_i0.defvjp(fwd, bessel_i0_bwd)
  return lambda: jax.grad(lambda x: bessel_i0(x).sum())(jnp.linspace(0., 1., 4))


def test_a_fwd_whose_callback_declares_float64_is_diagnosed_with_a_verified_fix(hook):
  plain, hooked, d = _plain_and_hooked(_bessel_grad(bessel_i0_fwd))
  assert plain is not None and plain[0] is ValueError and hooked == plain
  assert (d.kind, d.function, d.rule) == ("fwd_raised", "bessel_i0", "bessel_i0_fwd")
  line = _line_of(bessel_i0_fwd, "np.float64")
  assert d.raised_at == f"{HERE}:{line}"
  assert d.headline.startswith(f"bessel_i0's fwd rule bessel_i0_fwd raised at line {line} "
                               "computing its primal output and residuals: jax.pure_callback(")
  first = d.fixes[0]
  assert first.verdict == "verified" and "np.float32" in first.code, d.fixes
  assert vv.verify_fix(d, first.code) == []
  exec(first.code, ns := dict(globals()))  # noqa: S102 - the fix, pasted
  got = _bessel_grad(ns["bessel_i0_fwd"])()
  x = jnp.linspace(0., 1., 4)
  np.testing.assert_allclose(got, x / 2 + x ** 3 / 16 + x ** 5 / 384, rtol=1e-6)
