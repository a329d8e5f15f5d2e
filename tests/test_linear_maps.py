"""The cotangent handed to ``jax.linear_transpose``'s function, and the solves JAX checks or
transposes: ``custom_root``'s ``tangent_solve`` and ``custom_linear_solve``'s solves."""
import gc
import json
import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_features
from diagnosed import only, raises
from kernel_helpers import DIAGNOSIS, VERIFY
from jupyter_vjpviz.deliver.ops.diagnoses import verify_result
import jupyter_vjpviz as vv

THIS = __file__
A = jnp.array([[2., 1., 0.], [1., 3., 0.], [0., 0., 4.]])


def line_of(text: str) -> str:
  """``file:line`` of the line of this file that holds ``text``."""
  lines = open(THIS).read().splitlines()
  return f"{THIS}:{next(i for i, l in enumerate(lines, 1) if text in l and 'line_of' not in l)}"


def scale(x):
  return 2.0 * x


def pair(x):
  return x, 3.0 * x


# ------------------------------------------------------------- f_t(ct) by the user

watched = pytest.mark.skipif(not jax_features.has(jax_features.TRANSPOSE_WATCHED),
                             reason="linear_transpose's function is watched with sys.monitoring")


@watched
@pytest.mark.parametrize("ct, got", [(jnp.ones((3, 1)), "float32[3,1]"),
                                     (jnp.ones(3, jnp.float16), "float16[3]")])
def test_linear_transpose_given_a_wrong_cotangent_type(hook, ct, got):
  f_t = jax.linear_transpose(scale, jnp.ones(3))
  raises(lambda: f_t(ct))
  d = only("vjp_cotangent_type")
  assert (d.severity, d.function, d.source) == ("error", "scale", line_of("def scale("))
  assert (d.expected, d.got) == ("float32[3]", got)
  assert d.expected_aval == jax.core.ShapedArray((3,), jnp.float32)
  assert d.got_aval.shape == ct.shape and d.got_aval.dtype == ct.dtype
  assert vv.last() is d and "scale" in d.headline and got in d.headline
  # the graph is scale's, as JAX traced it for the transpose: its output marked
  assert d.node == "out0" and d.graph.node("in0").label == "args[0]"
  assert any(e.dst == "out0" and e.cotangent_got == got for e in d.graph.edges)


@watched
def test_linear_transpose_given_a_wrong_cotangent_tree(hook):
  f_t = jax.linear_transpose(pair, jnp.ones(3))
  raises(lambda: f_t([jnp.ones(3), jnp.ones(3), jnp.ones(3)]))
  d = only("vjp_cotangent_structure")
  assert d.function == "pair" and d.expected.startswith("PyTreeDef((*, *))")


@watched
def test_linear_transpose_under_jit_is_diagnosed_too(hook):
  f_t = jax.linear_transpose(scale, jnp.ones(3))
  raises(lambda: jax.jit(f_t)(jnp.ones(4)))
  assert (only("vjp_cotangent_type").expected, only("vjp_cotangent_type").got) == (
      "float32[3]", "float32[4]")


@watched
def test_the_diagnosis_keeps_no_constant_of_the_linear_function(hook):
  w = jnp.arange(1000.0) * 3.0                 # a fresh buffer the linear function closes over
  f_t = jax.linear_transpose(lambda x: w * x, jnp.ones(1000))  # noqa: F821 - deleted below: nothing may keep it alive
  raises(lambda: f_t(jnp.ones(999)))  # noqa: F821 - deleted below: nothing may keep it alive
  del w, f_t
  gc.collect()
  assert vv.last().graph.node("arg0").label == "constant 0"   # shown, as its aval
  assert [a for a in jax.live_arrays() if a.shape == (1000,)] == []


# --------------------------------------------------- custom_root's tangent_solve

def newton(f, x0):
  x = x0
  for _ in range(5):
    x = x - f(x) / (2 * x)
  return x


def sqrt_of(tangent_solve):
  def sqrt(y):
    return jax.lax.custom_root(lambda x: x * x - y, jnp.ones(3), newton, tangent_solve)
  return sqrt


def column_tangent(g, y):
  return (y / 4.0)[:, None]                          # wrong: float32[3,1] for x: float32[3]


def half_tangent(g, y):
  return (y / 4.0).astype(jnp.float16)               # wrong: float16[3]


def right_tangent(g, y):
  return y / g(jnp.ones_like(y))


root_on_hijax = pytest.mark.skipif(not jax_features.has(jax_features.CUSTOM_ROOT_HIJAX),
                                   reason=f"jax {jax.__version__} differentiates custom_root "
                                          "as a custom_jvp (diagnosed as its jvp rule)")


@root_on_hijax
@pytest.mark.parametrize("transform", ["grad", "jit(grad)", "vmap(grad)"])
@pytest.mark.parametrize("solve, got, wrong", [(column_tangent, "float32[3,1]", "[:, None]"),
                                               (half_tangent, "float16[3]", ".astype(")])
def test_custom_root_tangent_solve_of_the_wrong_type_is_named(hook, transform, solve, got, wrong):
  grad = jax.grad(lambda y: sqrt_of(solve)(y).sum())
  run = {"grad": lambda: grad(jnp.full(3, 4.0)), "jit(grad)": lambda: jax.jit(grad)(jnp.full(3, 4.0)),
         "vmap(grad)": lambda: jax.vmap(grad)(jnp.full((2, 3), 4.0))}[transform]
  raises(run)
  d = only("solve_type")
  assert (d.severity, d.rule, d.expected, d.got) == ("error", solve.__name__, "float32[3]", got)
  assert d.rule_source == line_of(f"y / 4.0){wrong}")          # the line that made the type
  assert d.source == line_of("return jax.lax.custom_root(")     # the user's call
  assert d.expected_aval.shape == (3,) and d.got_aval.str_short() == got
  assert d.fixes == ()                         # nothing verifiable to offer: no fix invented
  assert f"{solve.__name__} returned {got}" in d.headline and vv.last() is d
  if transform != "vmap(grad)":
    assert d.node is not None and d.graph.node(d.node).function == d.function


# ----------------------------------------------------- custom_linear_solve's solves

def column_solve(matvec, b):
  return jnp.linalg.solve(A, b)[:, None]


def right_solve(matvec, b):
  return jnp.linalg.solve(A, b)


def right_transpose_solve(vecmat, b):
  return jnp.linalg.solve(A.T, b)


def linear_solve(solve, transpose_solve):
  return lambda b: jax.lax.custom_linear_solve(lambda x: A @ x, b, solve,
                                               transpose_solve=transpose_solve)


@pytest.mark.needs("solve_type")
@pytest.mark.parametrize("as_", ["solve", "transpose_solve"])
@pytest.mark.parametrize("under_grad", [True, False])
def test_custom_linear_solve_of_the_wrong_shape_is_named(hook, as_, under_grad):
  solves = {"solve": right_solve, "transpose_solve": right_transpose_solve, as_: column_solve}
  f = linear_solve(solves["solve"], solves["transpose_solve"])
  raises((lambda: jax.grad(lambda b: f(b).sum())(jnp.ones(3))) if under_grad else
         (lambda: f(jnp.ones(3))))
  d = only("solve_type")
  assert (d.function, d.rule, d.rule_source) == ("custom_linear_solve", "column_solve",
                                                 line_of("def column_solve("))
  assert (d.path, d.expected, d.got) == ("b", "float32[3]", "float32[3,1]")
  assert d.detail == f"custom_linear_solve calls it as {as_}"
  assert d.source == line_of("return lambda b: jax.lax.custom_linear_solve(")
  assert vv.last() is d
  first = d.fixes[0]                            # judged by the system's solution
  assert (first.title, first.verdict) == ("Sum over axis 1", "verified"), d.fixes
  assert "return jnp.linalg.solve(A, b)[:, None].sum(axis=1)" in first.code
  sent = json.loads(json.dumps(d.to_dict()))    # the panel's message: the solve is not sent
  DIAGNOSIS.validate({"v": 1, "type": "diagnosis", "diagnosis": sent})
  assert "solver" not in sent


# A matrix that is not symmetric: a transpose_solve fix is judged by the transposed system.
N = jnp.array([[2., 1., 0.], [0., 3., 1.], [1., 0., 4.]])


def n_solve(matvec, b):
  return jnp.linalg.solve(N, b)


def n_transpose_solve_column(vecmat, b):
  return jnp.linalg.solve(N.T, b)[:, None]


def n_transpose_solve_wrong_matrix(vecmat, b):
  return jnp.linalg.solve(N, b)[:, None]          # N, not N.T: well-typed once summed, wrong


def n_transpose_solve_half(vecmat, b):
  return jnp.linalg.solve(N.T, b).astype(jnp.float16)


def n_grad(transpose_solve):
  f = lambda b: jax.lax.custom_linear_solve(lambda x: N @ x, b, n_solve,  # noqa: E731
                                            transpose_solve=transpose_solve)
  return lambda: jax.grad(lambda b: (f(b) * jnp.arange(1., 4.)).sum())(jnp.ones(3))


def _solve_fixes(d):
  return [(f.title.partition(" (")[0], f.verdict) for f in d.fixes]


@pytest.mark.needs("solve_type")
def test_a_transpose_solve_fix_is_judged_by_the_transposed_system(hook):
  raises(n_grad(n_transpose_solve_column))
  d = only("solve_type")
  assert d.fixes[0].verdict == "verified" and "N.T, b)[:, None].sum(axis=1)" in d.fixes[0].code
  vv.clear()
  raises(n_grad(n_transpose_solve_wrong_matrix))
  d = only("solve_type")
  assert _solve_fixes(d)[0] == ("Sum over axis 1", "type-only"), d.fixes
  assert "differ from the linear system's solution" in d.fixes[0].note


@pytest.mark.needs("solve_type")
def test_an_edited_solve_is_verified_by_its_linear_system(hook):
  """The panel's Verify on a solve: the edit judged as the candidates are, by the system."""
  raises(n_grad(n_transpose_solve_column))
  d = only("solve_type")
  right = "def n_transpose_solve_column(vecmat, b):\n  return jnp.linalg.solve(N.T, b)\n"
  assert vv.verify_fix(d, right) == []
  verified = verify_result(d, right)
  VERIFY.validate(verified)
  assert (verified["pass"], verified["verdict"]) == (True, "verified")
  assert "equal to the linear system's solution" in verified["summary"]
  wrong_values = right.replace("N.T, b", "N, b")
  [problem] = vv.verify_fix(d, wrong_values)
  assert problem.kind == "bwd_value" and "differ from the linear system's solution" in problem.got
  assert verify_result(d, wrong_values)["verdict"] == "type-only"
  [problem] = vv.verify_fix(d, right.replace("b)\n", "b)[:, None]\n"))
  assert problem.kind == "solve_type" and problem.got == "it returns float32[3,1], not b's type float32[3]"
  assert problem.id != d.id
  [problem] = vv.verify_fix(d, right.replace("N.T", "M.T"))
  assert problem.got == "it raised NameError: name 'M' is not defined"


@pytest.mark.needs("solve_type")
def test_apply_rebinds_a_notebook_solve_and_patches_a_file_one(hook):
  raises(n_grad(n_transpose_solve_column))
  d = only("solve_type")
  fixed = "def n_transpose_solve_column(vecmat, b):\n  return jnp.linalg.solve(N.T, b)\n"
  applied = vv.apply_fix(d, fixed)           # this file's solve: a patch, the file untouched
  assert (applied.applied, applied.path) == (False, THIS)
  assert "-  return jnp.linalg.solve(N.T, b)[:, None]\n+  return jnp.linalg.solve(N.T, b)\n" in applied.patch
  assert "[:, None]" in open(THIS).read().split("def n_transpose_solve_column")[1].split("def ")[0]
  cell = {"jnp": jnp, "N": N}                 # a solve defined in a notebook cell
  exec(compile("def cell_solve(vecmat, b):\n  return jnp.linalg.solve(N.T, b)[:, None]\n",
               "<ipython-input-7>", "exec"), cell)
  vv.clear()
  raises(n_grad(cell["cell_solve"]))
  d = only("solve_type")
  wrong = fixed.replace("n_transpose_solve_column", "cell_solve").replace("N.T, b", "N.T, b)[:, None")
  assert vv.apply_fix(d, wrong).problems and not vv.apply_fix(d, wrong).applied   # verified first
  assert vv.apply_fix(d, fixed.replace("n_transpose_solve_column", "cell_solve")).applied
  plain = jax.grad(lambda b: (jnp.linalg.solve(N, b) * jnp.arange(1., 4.)).sum())(jnp.ones(3))
  vv.clear()
  again = n_grad(cell["cell_solve"])()       # the cell run again: its new solve
  assert vv.diagnoses() == [] and np.allclose(again, plain, rtol=1e-5)


@pytest.mark.needs("solve_type")
def test_a_solve_of_a_matvec_of_traced_values_gets_unverifiable_fixes(hook):
  f = lambda m, b: jax.lax.custom_linear_solve(lambda x: m @ x, b, column_solve)  # noqa: E731
  raises(lambda: jax.jit(f)(N, jnp.ones(3)))
  d = only("solve_type")
  assert d.fixes and all(f.verdict == "unverifiable" for f in d.fixes)
  assert "depends on traced values" in d.fixes[0].note


@pytest.mark.needs("solve_type")
@pytest.mark.parametrize("under_grad", [True, False])
def test_a_solve_of_the_wrong_dtype_jax_lets_through_is_a_warning_with_fixes(hook, under_grad):
  run = n_grad(n_transpose_solve_half) if under_grad else (
      lambda: jax.lax.custom_linear_solve(lambda x: N @ x, jnp.ones(3), n_transpose_solve_half))
  vv.uninstall()
  plain = run()
  vv.install()
  vv.clear()
  hooked = run()
  assert hooked.dtype == plain.dtype and np.array_equal(np.asarray(hooked), np.asarray(plain))
  d = only("solve_dtype")
  assert (d.severity, d.rule, d.path, d.expected, d.got) == (
      "warning", "n_transpose_solve_half", "b", "float32[3]", "float16[3]")
  assert d.detail == f"custom_linear_solve calls it as {'transpose_solve' if under_grad else 'solve'}"
  assert "JAX let it through" in d.headline
  # as solve the matrix is N (float16 -> N's system is wrong: N.T's solution), as
  # transpose_solve N.T: the cast removed is right only there
  fixes = _solve_fixes(d)
  if under_grad:
    assert fixes[:2] == [("Remove the cast", "verified"), ("Cast to float32", "verified")]
    assert "return jnp.linalg.solve(N.T, b).astype(b.dtype)" in d.fixes[1].code
  else:
    assert fixes and all(v == "type-only" for _, v in fixes), fixes


def test_a_solve_of_the_right_dtype_gives_no_warning(hook):
  vv.clear()
  n_grad(lambda vecmat, b: jnp.linalg.solve(N.T, b))()
  assert vv.diagnoses() == []


# ------------------------------------------------------- unchanged for the user

def _frames(err):
  return [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(err.__traceback__)]


def _failing():
  cases = [lambda: linear_solve(right_solve, column_solve)(jnp.ones(3)),
           lambda: jax.grad(lambda b: linear_solve(column_solve, None)(b).sum())(jnp.ones(3))]
  if jax_features.has(jax_features.TRANSPOSE_WATCHED):
    cases.append(lambda: jax.linear_transpose(scale, jnp.ones(3))(jnp.ones((3, 1))))
  if jax_features.has(jax_features.CUSTOM_ROOT_HIJAX):
    cases.append(lambda: jax.jit(jax.grad(lambda y: sqrt_of(column_tangent)(y).sum()))(
        jnp.full(3, 4.0)))
  return cases


@pytest.mark.needs("solve_type")
@pytest.mark.parametrize("filtering", ["quiet_remove_frames", "off"])
def test_the_error_reaches_the_user_unchanged(hook, filtering):
  if filtering == "off" and not jax_features.has(jax_features.WATCHED):
    pytest.skip("JAX's VJP entry points are wrapped here: unfiltered, their frames show")
  jax.config.update("jax_traceback_filtering", filtering)
  try:
    for run in _failing():
      vv.uninstall()
      plain = raises(run)
      vv.install()
      vv.clear()
      hooked = raises(run)
      assert type(hooked) is type(plain) and str(hooked) == str(plain)
      assert _frames(hooked) == _frames(plain)
      added = [n for n in hooked.__notes__ if n not in getattr(plain, "__notes__", [])]
      assert len(added) == 1 and added[0].startswith("vjpviz: "), added
      assert vv.last().kind in ("solve_type", "vjp_cotangent_type")
  finally:
    jax.config.update("jax_traceback_filtering", "auto")


def _correct():
  """Programs through the same sites that are right, each returning its values."""
  return [lambda: jax.linear_transpose(scale, jnp.ones(3))(jnp.arange(3.0)),
          lambda: jax.jit(jax.grad(lambda y: sqrt_of(right_tangent)(y).sum()))(jnp.full(3, 4.0)),
          lambda: jax.grad(lambda b: linear_solve(right_solve, right_transpose_solve)(b).sum())(
              jnp.arange(3.0)),
          lambda: jax.jvp(linear_solve(right_solve, right_transpose_solve), (jnp.ones(3),),
                          (jnp.ones(3),))]


def test_correct_programs_are_unchanged_and_get_no_diagnosis(hook):
  vv.uninstall()
  plain = [run() for run in _correct()]
  vv.install()
  vv.clear()
  hooked = [run() for run in _correct()]
  for a, b in zip(plain, hooked):
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), a, b)
  assert vv.diagnoses() == []


def test_uninstall_restores_the_solve_check_by_identity():
  from jax._src.lax.control_flow import solves
  before = solves._check_shapes
  vv.install()
  vv.uninstall()
  assert solves._check_shapes is before


def _checked(x):
  if x < 0:
    raise ValueError("negative")
  return x


def _checked_long(x):
  if x < 0:
    raise ValueError(
        f"negative: {x}")      # evaluated on its own line, then back to the raise's
  return x


def _checked_inline(x):
  if x < 0: raise ValueError("negative")  # noqa: E701 - a raise sharing its line
  return x


def _checked_caught(x):
  try:
    if x < 0:
      raise ValueError("negative")
  except ValueError:
    return 0
  return x


@pytest.mark.skipif(not hasattr(__import__("sys"), "monitoring"), reason="no sys.monitoring")
def test_a_raise_watch_hears_only_the_calls_that_raise():
  from jupyter_vjpviz.capture.code_events import CodeEvents
  events, heard = CodeEvents(), []
  assert events.start()
  try:
    assert not events.follow_raises(_checked_inline.__code__, lambda f: f, lambda *a: None)
    # A raise its own frame may catch: that frame would never unwind, and stay open.
    assert not events.follow_raises(_checked_caught.__code__, lambda f: f, lambda *a: None)
    assert events.follow_raises(_checked.__code__, lambda frame: frame.f_locals["x"],
                               lambda x, value, exc: heard.append((x, type(exc).__name__)))
    assert [_checked(i) for i in range(3)] == [0, 1, 2] and heard == []
    with pytest.raises(ValueError):
      _checked(-1)
    assert [_checked(i) for i in range(3)] == [0, 1, 2] and heard == [(-1, "ValueError")]
    assert events.follow_raises(_checked_long.__code__, lambda frame: frame.f_locals["x"],
                               lambda x, value, exc: heard.append((x, str(exc))))
    for _ in range(2):
      with pytest.raises(ValueError):
        _checked_long(-2)
    assert heard[1:] == [(-2, "negative: -2")] * 2
    assert events._open.frames == [] and events._n_open == 0   # every frame closed: none kept
  finally:
    events.stop()
