"""vjpviz.nans: where a gradient first goes NaN or Inf, why, and fixes that are right.

Each program is real JAX (jit, scan, equinox, a custom_vjp) whose gradient is
non-finite while its forward pass is finite. The fix's code is executed as the
user would paste it, and its gradient compared with the right one.
"""
import dataclasses
import gc
import inspect
import textwrap
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
eqx = pytest.importorskip("equinox")   # not installed with an older JAX (scripts/test.sh)

import jupyter_vjpviz as vv


def _line_of(fun, text: str) -> str:
  """``file:line`` of the line of ``fun`` that contains ``text``."""
  fun = inspect.unwrap(fun)
  lines, start = inspect.getsourcelines(fun)
  k = next(i for i, line in enumerate(lines) if text in line)
  return f"{inspect.getsourcefile(fun)}:{start + k}"


def _fixed(fun, fix, **namespace):
  """``fun`` with the culprit line replaced by the fix's code (helper defs first)."""
  fun = inspect.unwrap(fun)
  lines = inspect.getsource(fun).splitlines()
  code = fix.code.splitlines()
  helpers, line = code[:-1], code[-1]
  bad = next(i for i, l in enumerate(lines) if l.strip() and l.lstrip()[:6] == line.lstrip()[:6]
             and l != line)
  lines[bad] = line
  source = "\n".join(helpers) + "\n" + textwrap.dedent("\n".join(
      l for l in lines if not l.lstrip().startswith("@")))
  ns = {"jax": jax, "jnp": jnp, **namespace}
  exec(source, ns)  # noqa: S102 - the fix as the user would paste it
  return ns[fun.__name__]


def _finite(tree) -> bool:
  return all(bool(jnp.isfinite(x).all()) for x in jax.tree_util.tree_leaves(tree))


# ------------------------------------------------------- the where/sqrt trap under jit

@jax.jit
def soft_distance(x):
  return jnp.where(x > 0, jnp.sqrt(x), 0.0).sum()


def test_the_where_sqrt_trap_under_jit_is_located_explained_and_fixed():
  x = jnp.array([0.0, 1.0, 4.0, 0.0, 2.0])
  assert np.isnan(jax.grad(soft_distance)(x)).any()
  d = vv.nans(soft_distance, x)
  assert d.kind == "nonfinite_cotangent" and d.severity == "warning"
  assert d.source == _line_of(soft_distance, "jnp.sqrt") and d.function == "sqrt"
  assert "2 exact zeros (of 5)" in d.detail and "double-where" in d.detail
  assert d.node in {n.id for n in d.graph.nodes} and d.graph.node(d.node).primitive == "sqrt"
  assert "2 NaN of 5" in d.got and d.argument == "x"
  first = d.fixes[0]
  assert first.verdict == "verified" and "jnp.sqrt(jnp.where(x > 0, x, 1.0))" in first.code
  fixed = _fixed(soft_distance, first)
  g = jax.grad(fixed)(x)
  assert _finite(g)
  np.testing.assert_allclose(g, jnp.where(x > 0, 0.5 / jnp.sqrt(jnp.where(x > 0, x, 1)), 0))
  # the overlay: every edge the search ran through has its cotangent's summary
  edges = d.cotangents["edges"]
  assert edges[f"{d.node}#0"]["nan"] == 2 and edges[f"{d.node}#0"]["size"] == 5


def test_under_jax_debug_nans_it_is_an_error(monkeypatch):
  jax.config.update("jax_debug_nans", True)
  try:
    d = vv.nans(soft_distance, jnp.array([0.0, 1.0]))
  finally:
    jax.config.update("jax_debug_nans", False)
  assert d.severity == "error" and d.function == "sqrt"


def test_a_finite_gradient_gives_none():
  assert vv.nans(soft_distance, jnp.array([1.0, 2.0])) is None


# ------------------------------------------------------- log of an underflowing softmax

def cross_entropy(logits, label):
  return -jnp.log(jax.nn.softmax(logits))[label]


def test_the_log_of_an_underflowing_softmax_gets_log_softmax():
  logits = jnp.array([0.0, -200.0, 5.0])
  d = vv.nans(cross_entropy, logits, 2)
  assert d.source == _line_of(cross_entropy, "jnp.log") and d.function == "log"
  assert "1 exact zero (of 3)" in d.detail
  first = d.fixes[0]
  assert first.verdict == "verified" and "jax.nn.log_softmax(logits)" in first.code
  g = jax.grad(_fixed(cross_entropy, first))(logits, 2)
  np.testing.assert_allclose(g, jax.nn.softmax(logits) - jnp.eye(3)[2], atol=1e-6)


# ------------------------------------------------------- a recurrent model that explodes

def rnn_loss(w, xs):
  def cell(h, x):
    h = w * h + x
    return h, h
  _, hs = jax.lax.scan(cell, jnp.zeros(()), xs)
  return hs.sum()


def test_a_recurrent_gradient_that_explodes_is_found_in_its_iteration():
  # The forward stays finite (h_60 is about 1e29) and so is the true gradient of w (about
  # 6e29), but the carry's cotangent grows x10 per step backwards and overflows float32.
  xs = jnp.ones(60) * 1e-30
  assert jnp.isfinite(rnn_loss(10.0, xs))
  assert not _finite(jax.grad(rnn_loss)(10.0, xs))
  d = vv.nans(rnn_loss, 10.0, xs)
  assert d.source == _line_of(rnn_loss, "w * h + x") and d.function == "mul"
  assert "overflowed" in d.detail and "explodes" in d.detail
  assert "of 60 of its scan" in d.detail
  strip = [it["norm"] for it in d.cotangents["iterations"]]
  assert len(strip) > 30 and 5 < strip[10] / strip[9] < 20   # x10 per step, backwards
  # the fix: the loss scaled by a power of two while differentiating, run as pasted, gives
  # the true gradient (float64 recursion: dL/dh_t = 1 + w dL/dh_t+1, dL/dw = sum dL/dh_t h_t-1)
  first = d.fixes[0]
  assert first.verdict == "verified" and "2.0 ** -" in first.code and "rnn_loss(*a)" in first.code
  ns = {"jax": jax, "jnp": jnp, "rnn_loss": rnn_loss, "args": (10.0, xs)}
  exec(first.code, ns)  # noqa: S102 - the fix as the user would paste it
  h = [0.0]
  for x in np.asarray(xs, np.float64):
    h.append(10.0 * h[-1] + x)
  a = [1.0]
  for _ in range(59):
    a.append(1.0 + 10.0 * a[-1])
  true = sum(at * hp for at, hp in zip(a[::-1], h[:-1]))
  assert np.isfinite(ns["grads"]) and abs(float(ns["grads"]) - true) < 1e-5 * true


# ------------------------------------------------------- an equinox model

class Anchored(eqx.Module):
  """Features by distance to an anchor: zero for an input at the anchor."""
  anchor: jax.Array
  head: eqx.nn.Linear

  def __call__(self, x):
    return self.head(jnp.linalg.norm(x - self.anchor, axis=-1, keepdims=True))


def test_an_equinox_model_whose_norm_is_zero_gets_a_safe_norm():
  model = Anchored(jnp.ones(3), eqx.nn.Linear(1, 2, key=jax.random.PRNGKey(0)))
  params, static = eqx.partition(model, eqx.is_array)
  loss = lambda p, x: eqx.combine(p, static)(x).sum()
  x = jnp.ones(3)
  assert not _finite(jax.grad(loss)(params, x))
  d = vv.nans(loss, params, x)
  assert d.source == _line_of(Anchored.__call__, "jnp.linalg.norm")
  assert "1 exact zero" in d.detail
  first = d.fixes[0]
  assert first.verdict == "verified" and "safe_norm(" in first.code
  fixed_call = _fixed(Anchored.__call__, first)
  g = jax.grad(lambda p: fixed_call(eqx.combine(p, static), x).sum())(params)
  assert _finite(g)
  ref = jax.grad(loss)(params, x + jnp.array([1e-3, 0, 0]))   # the head's gradient is the norm
  np.testing.assert_allclose(g.head.weight, ref.head.weight * 0, atol=1e-6)
  np.testing.assert_allclose(g.head.bias, ref.head.bias, atol=1e-6)


# ------------------------------------------------------- a custom_vjp bwd dividing by zero

@jax.custom_vjp
def x_tanh(x):
  return x * jnp.tanh(x)


def _x_tanh_fwd(x):
  y = x * jnp.tanh(x)
  return y, (x, y)


def _x_tanh_bwd(res, g):
  x, y = res
  t = y / x                              # tanh(x), recovered from the output
  return (g * (t + x * (1 - t ** 2)),)


x_tanh.defvjp(_x_tanh_fwd, _x_tanh_bwd)


def test_a_custom_vjp_bwd_dividing_by_zero_is_found_in_the_bwd():
  loss = jax.jit(lambda x: x_tanh(x).sum())
  x = jnp.array([0.0, 0.5, -1.0])
  d = vv.nans(loss, x)
  assert d.function == "x_tanh" and d.rule == "_x_tanh_bwd"
  assert d.source == _line_of(_x_tanh_bwd, "y / x") and "div" in d.detail
  assert "1 zero (of 3)" in d.detail
  first = d.fixes[0]
  assert first.verdict == "verified" and "jax.vjp(x_tanh.fun, *primal_inputs)" in first.code
  # the fix pasted as the bwd, its fwd saving the primal inputs as the comment says
  ns = {"jax": jax, "x_tanh": x_tanh}
  exec("def bwd(primal_inputs, g):\n" + textwrap.indent(first.code, "  "), ns)  # noqa: S102
  fixed = jax.custom_vjp(x_tanh.fun)
  fixed.defvjp(lambda x: (fixed(x), (x,)), ns["bwd"])
  np.testing.assert_allclose(jax.grad(lambda x: fixed(x).sum())(x),
                             [0.0, jnp.tanh(.5) + .5 * (1 - jnp.tanh(.5) ** 2),
                              jnp.tanh(-1.) - (1 - jnp.tanh(-1.) ** 2)], rtol=1e-6)


# ------------------------------------------------------- memory

def test_the_diagnosis_keeps_no_array_alive():
  big = jnp.ones((256, 256))
  alive = weakref.ref(big)
  loss = lambda x: soft_distance(x) + jnp.sum(big) * 0  # noqa: F821 - deleted below: nothing may keep it alive
  x = jnp.array([0.0, 1.0])
  baseline = {id(a) for a in jax.live_arrays()}
  d = vv.nans(loss, x)
  del big, loss, x
  gc.collect()
  assert alive() is None and d.fixes
  extra = [a.shape for a in jax.live_arrays() if id(a) not in baseline and a.size > 2]
  assert extra == []


# ------------------------------------------------------- the magic

def test_the_nans_line_magic_shows_the_diagnosis(capsys):
  from IPython.core.interactiveshell import InteractiveShell
  shell = InteractiveShell.instance()
  shell.run_line_magic("load_ext", "jupyter_vjpviz")
  try:
    shell.user_ns.update(f=soft_distance, x=jnp.array([0.0, 1.0]), y=jnp.array([1.0, 2.0]))
    d = shell.run_line_magic("vjpviz", "nans f(x)")
    assert d.kind == "nonfinite_cotangent" and d.function == "sqrt"
    assert shell.run_line_magic("vjpviz", "nans f(y)") is None
    assert "f(y): the gradient is finite" in capsys.readouterr().out
  finally:
    shell.run_line_magic("unload_ext", "jupyter_vjpviz")
    InteractiveShell.clear_instance()   # later tests run outside IPython, as scripts do


# ------------------------------------------------------- the overlay on the graph's edges

def test_the_graph_carries_each_measured_cotangent_and_marks_the_first_non_finite():
  from jupyter_vjpviz.render import dot, svg
  d = vv.nans(soft_distance, jnp.array([0.0, 1.0, 4.0, 0.0, 2.0]))
  (first,) = [e for e in d.graph.edges if e.dst == d.node and e.flow is not None]
  assert first.flow[:3] == (5, 2, 0)                  # size, NaN, Inf
  source = dot.render(d)
  (line,) = [l for l in source.splitlines() if "first-nonfinite" in l and "->" in l]
  assert "first non-finite: CT 2 NaN of 5" in line and "bold,dashed" in line
  assert "‖CT‖ 1.73 · max 1" in source                 # the where's finite cotangent: √3
  assert "✖ first non-finite cotangent" in source      # the legend says what it means
  assert "first non-finite: CT 2 NaN of 5" in svg.render(d)
  plain = dataclasses.replace(d, graph=dataclasses.replace(
      d.graph, edges=tuple(e._replace(flow=None) for e in d.graph.edges)))
  assert not any(t in dot.render(plain) for t in ("‖CT‖", "first non-finite", "edge-nonfinite"))


def test_an_exploding_cotangent_is_coloured_and_said():
  from jupyter_vjpviz.render import dot
  d = vv.nans(rnn_loss, 10.0, jnp.ones(60) * 1e-30)
  measured = [e for e in d.graph.edges if e.flow is not None]
  assert measured and any(e.flow[4] > 1e8 for e in measured)
  assert "(exploding)" in dot.render(d) and dot.HUGE_CT in dot.render(d)


# ------------------------------------------------------- every gradient a cell computes

def test_the_nans_cell_magic_checks_every_gradient_and_localises_the_first_bad_one(capsys):
  from IPython.core.interactiveshell import InteractiveShell
  shell = InteractiveShell.instance()
  shell.run_line_magic("load_ext", "jupyter_vjpviz")
  try:
    big = jnp.ones(4096)
    alive = weakref.ref(big)
    shell.user_ns.update(f=soft_distance, jax=jax, jnp=jnp, big=big)
    del big
    shell.run_cell_magic("vjpviz", "--nans", "ok = jax.grad(f)(big)\n"
                         "bad = jax.grad(f)(jnp.array([0.0, 1.0]))\nlater = jax.grad(f)(big)")
    out = capsys.readouterr().out
    assert "3 gradients checked for NaN/Inf, 1 not finite" in out
    assert "the gradient goes non-finite at sqrt" in out and "double-where" in out
    assert bool(jnp.isnan(shell.user_ns["bad"]).any())   # the cell's own results as JAX made them
    shell.run_cell_magic("vjpviz", "--nans", "ok = jax.grad(f)(big)")
    assert "1 gradient checked for NaN/Inf, 0 not finite" in capsys.readouterr().out
    for name in ("big", "ok", "later", "bad"):
      shell.user_ns.pop(name)
    gc.collect()
    assert alive() is None          # the watch kept no primal past the cell
  finally:
    shell.run_line_magic("unload_ext", "jupyter_vjpviz")
    InteractiveShell.clear_instance()


# ------------------------------------------------------- a bwd rule's own while loop

@jax.custom_vjp
def damped(x):
  return x * jnp.tanh(x)


def _damped_fwd(x):
  return damped(x), x


def _damped_bwd(x, g):
  def step(carry):
    k, acc = carry
    return k + 1, acc + g * jnp.tanh(x) / (x * k)       # k = 0 on the first pass
  _, acc = jax.lax.while_loop(lambda c: c[0] < 3, step, (0.0, jnp.zeros_like(x)))
  return (acc,)


damped.defvjp(_damped_fwd, _damped_bwd)


def test_a_while_loop_in_a_bwd_rule_is_stepped_to_the_line_that_divides_by_zero():
  d = vv.nans(lambda x: damped(x).sum(), jnp.array([0.5, -1.0]))
  assert d.function == "damped" and d.rule == "_damped_bwd"
  assert d.source == _line_of(_damped_bwd, "(x * k)") and "div" in d.detail


# ------------------------------------------------------- gradients taken inside a jitted step

def relu_root(w, x):
  r = jnp.maximum(x @ w, 0.0)
  return jnp.where(r > 0, jnp.sqrt(r), 0.0).sum()


def _optax_step():
  import optax
  opt = optax.sgd(0.1)

  @jax.jit
  def step(w, state, x):
    value, grads = jax.jit(jax.value_and_grad(relu_root))(w, x)
    updates, state = opt.update(grads, state)
    return optax.apply_updates(w, updates), state, value
  return step, opt.init


def _shell():
  from IPython.core.interactiveshell import InteractiveShell
  shell = InteractiveShell.instance()
  shell.run_line_magic("load_ext", "jupyter_vjpviz")
  return shell


def _close(shell):
  from IPython.core.interactiveshell import InteractiveShell
  shell.run_line_magic("unload_ext", "jupyter_vjpviz")
  InteractiveShell.clear_instance()


def test_a_nan_born_in_a_jitted_optax_step_is_localised_to_the_loss_line(capsys):
  step, init = _optax_step()
  w = jnp.array([[1.0, 1.0], [0.5, 0.5]])
  xs = [jnp.array([[1.0, 0.0]])] * 2 + [jnp.array([[1.0, -4.0]])]   # relu 0 at step 3
  step(w, init(w), xs[0])                       # compiled before the cell, as in a notebook
  shell = _shell()
  try:
    shell.user_ns.update(step=step, w=w, state=init(w), xs=xs)
    shell.run_cell_magic("vjpviz", "--nans", "for x in xs:\n  w, state, l = step(w, state, x)")
    out = capsys.readouterr().out
    assert "3 calls of jitted functions that take gradients checked; NaN/Inf in the " \
           "outputs of step" in out
    assert f"the gradient goes non-finite at sqrt ({_line_of(relu_root, 'jnp.sqrt')})" in out
    assert "double-where" in out and "1. [verified] Guard sqrt with a double where" in out
    assert bool(jnp.isnan(shell.user_ns["w"]).all())    # the cell ran as JAX ran it
  finally:
    _close(shell)


def test_a_finite_jitted_step_is_checked_and_left_alone(capsys):
  step, init = _optax_step()
  w = jnp.array([[1.0, 1.0], [0.5, 0.5]])
  shell = _shell()
  try:
    shell.user_ns.update(step=step, w=w, state=init(w), x=jnp.array([[1.0, 0.0]]),
                         plain=jax.jit(lambda a: a * jnp.nan))   # no gradient: not a step
    shell.run_cell_magic("vjpviz", "--nans", "w, state, l = step(w, state, x)\n"
                         "w, state, l = step(w, state, x)\nplain(x)")
    out = capsys.readouterr().out
    assert "2 calls of jitted functions that take gradients checked, all outputs finite" in out
    assert "nonfinite" not in out and "non-finite" not in out
  finally:
    _close(shell)


class Ranged(eqx.Module):
  weight: jax.Array

  def __call__(self, x):
    return jnp.log(jnp.sum(self.weight * x))      # log 0 when the product sums to 0


def test_an_equinox_filter_jit_step_nan_on_its_first_call_and_vv_nans_of_a_step(capsys):
  @eqx.filter_jit
  def train(model, x):
    grads = eqx.filter_grad(lambda m: m(x))(model)
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, model, grads)
  model, x = Ranged(jnp.array([1.0, 1.0])), jnp.array([1.0, -1.0])
  shell = _shell()
  try:
    shell.user_ns.update(train=train, model=model, x=x)
    shell.run_cell_magic("vjpviz", "--nans", "model = train(model, x)")
    out = capsys.readouterr().out
    assert f"non-finite at log ({_line_of(Ranged.__call__, 'jnp.log')})" in out
  finally:
    _close(shell)
  d = vv.nans(train, model, x, argnums=None)      # the step itself: it takes its gradient
  assert d.function == "log" and d.source == _line_of(Ranged.__call__, "jnp.log")
  assert vv.nans(train, model, jnp.array([1.0, 0.0]), argnums=None) is None


# ------------------------------------------------------- %vjpviz values on: every VJP diagnosis

@jax.custom_vjp
def half_clip(x):
  return jnp.clip(x, -1.0, 1.0)


half_clip.defvjp(lambda x: (half_clip(x), x), lambda x, g: (g.astype(jnp.float16),))


def clipped_stack(params, x):
  h = x
  for i, w in enumerate(params):
    h = jnp.tanh(h @ w)
    if i == 1:
      h = half_clip(h)                  # its bwd returns float16: the hook's type error
  return (h ** 2).sum()


def _clipped_grad() -> weakref.ref:
  """A 5-layer stack's gradient, failing in layer 1's rule; its last layer, weakly."""
  params = [jnp.eye(4) * (0.5 + 0.1 * i) for i in range(5)]
  with pytest.raises(TypeError):
    jax.grad(clipped_stack)(params, jnp.ones((2, 4)))
  return weakref.ref(params[4])


def test_values_on_puts_the_backward_pass_values_on_a_type_error_graph(capsys):
  from jupyter_vjpviz.render import dot
  shell = _shell()
  try:
    shell.run_line_magic("vjpviz", "values on")
    assert "cotangent values on the graph on" in capsys.readouterr().out
    alive = _clipped_grad()
    gc.collect()
    assert alive() is None                           # no array outlives the call for it
    d = vv.last()
    (bad,) = [e for e in d.graph.edges if e.mismatch]
    assert bad.flow is not None and bad.flow[:3] == (8, 0, 0) and bad.flow[3] > 0
    assert d.cotangents["complete"] is False         # the pass ends at the rule that failed
    assert [r[0] for r in d.graph.strip] == ["params[2]", "params[3]", "params[4]"]
    source = dot.render(d)
    assert "‖CT‖" in source and "‖gradient‖ per layer" in source
    shell.run_line_magic("vjpviz", "values off")
    _clipped_grad()
    assert not any(e.flow for e in vv.last().graph.edges) and not vv.last().graph.strip
  finally:
    shell.run_line_magic("vjpviz", "values off")
    _close(shell)


def stacked_root(params, x):
  h = x
  for i, (w, b) in enumerate(params):
    z = h @ w + b
    h = jnp.where(z > 0, jnp.sqrt(z), 0.0) if i == 2 else jnp.tanh(z)
  return (h ** 2).sum()


def test_a_stacked_models_gradient_norms_per_layer_are_a_strip_beside_the_graph():
  from jupyter_vjpviz.render import dot, svg
  keys = jax.random.split(jax.random.PRNGKey(0), 5)
  params = [(jax.random.normal(k, (4, 4)), jnp.zeros(4).at[0].set(-100.0 if i == 2 else 0.0))
            for i, k in enumerate(keys)]
  d = vv.nans(stacked_root, params, jnp.ones((2, 4)))
  assert d.source == _line_of(stacked_root, "jnp.sqrt")
  rows = {r[0]: r for r in d.graph.strip}
  assert list(rows) == [f"params[{i}]" for i in range(5)]
  assert all(rows[f"params[{i}]"][2] > 0 for i in range(3))        # NaN below the trap
  assert all(rows[f"params[{i}]"][2] == 0 and rows[f"params[{i}]"][4] > 0 for i in (3, 4))
  assert [l["layer"] for l in d.cotangents["layers"]] == list(rows)
  source = dot.render(d)
  assert "‖gradient‖ per layer" in source and "vjpviz-norm-strip-nonfinite" in source
  assert "params[4]  ████" in source and "params[0]  ✖" in source
  assert "‖gradient‖ per layer" in svg.render(d)
  assert "norm_strip" not in dot.render(vv.nans(soft_distance, jnp.array([0.0, 1.0])))


# ------------------------------------------------------- a while loop the gradient runs through

def draining(t, y, args):
  return -jnp.sqrt(jnp.maximum(y, 0.0))          # the tank runs dry: sqrt at 0


def test_a_diffrax_solve_whose_checkpointed_while_loop_goes_nan_is_traced_to_the_vector_field():
  # diffrax differentiates its while loop by equinox's checkpointed custom_vjp: the NaN is
  # born in the bwd's own while loop, from the derivative of the user's sqrt at 0 (its
  # buffers hold Infs on purpose, which must not be taken for the poison)
  diffrax = pytest.importorskip("diffrax")

  def drained(y0):
    sol = diffrax.diffeqsolve(diffrax.ODETerm(draining), diffrax.Euler(), 0.0, 3.0, 0.5, y0,
                              adjoint=diffrax.RecursiveCheckpointAdjoint())
    return sol.ys[-1].sum()
  y0 = jnp.array([0.5, 4.0])
  assert jnp.isfinite(drained(y0)) and not _finite(jax.grad(drained)(y0))
  d = vv.nans(drained, y0)
  assert d.source == _line_of(draining, "jnp.sqrt") and d.function == "draining"  # not equinox's
  assert "`div`" in d.detail and "1 zero (of 2)" in d.detail and "of its while loop" in d.detail
  assert "1 NaN of 2" in d.got and d.argument == "y0"


# ------------------------------------------------------- a shard_map body, on 4 devices

def sharded_root(w, x):                                # per device: its rows of x
  r = jnp.maximum(x @ w, 0.0)
  return jax.lax.psum(jnp.where(r > 0, jnp.sqrt(r), 0.0).sum(), "dp")


def _data_parallel(local):
  from jax.sharding import PartitionSpec as P
  mesh = jax.make_mesh((4,), ("dp",), axis_types=(jax.sharding.AxisType.Auto,))
  return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P("dp")), out_specs=P()))


@pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 devices (tests/conftest.py)")
def test_a_shard_map_bodys_sqrt_is_found_on_its_shards_and_fixed():
  w = jnp.array([[1.0, -1.0], [0.5, 0.5]])
  x = jnp.array([[1.0, 0.0], [2.0, 1.0], [1.0, -4.0], [0.0, 0.0]])   # relu 0 on 3 shards
  loss = _data_parallel(sharded_root)
  assert not _finite(jax.grad(loss)(w, x))
  d = vv.nans(loss, w, x)
  assert d.source == _line_of(sharded_root, "jnp.sqrt") and d.function == "sqrt"
  assert "6 exact zeros (of 8)" in d.detail and "double-where" in d.detail   # all 4 shards
  assert d.graph.node(d.node).primitive == "sqrt"
  first = d.fixes[0]
  assert first.verdict == "verified" and "jnp.sqrt(jnp.where(r > 0, r, 1.0))" in first.code
  g = jax.grad(_data_parallel(_fixed(sharded_root, first)))(w, x)
  r = jnp.maximum(x @ w, 0.0)
  whole = lambda w: jnp.where(r > 0, jnp.sqrt(jnp.where(r > 0, jnp.maximum(x @ w, 0.0), 1.0)),
                              0.0).sum()
  np.testing.assert_allclose(g, jax.grad(whole)(w), rtol=1e-6)


# ------------------------------------------------------- sqrt of a square

def l1_distance(pred, target):
  return jnp.sqrt((pred - target) ** 2).mean()          # |pred - target|, NaN grad at 0


def test_the_sqrt_of_a_square_gets_abs():
  pred, target = jnp.array([1.0, 2.0, 3.0]), jnp.array([1.0, 0.0, 5.0])
  d = vv.nans(l1_distance, pred, target)
  assert d.source == _line_of(l1_distance, "jnp.sqrt") and "1 exact zero (of 3)" in d.detail
  first = d.fixes[0]
  assert first.verdict == "verified" and "jnp.abs(pred - target).mean()" in first.code
  g = jax.grad(_fixed(l1_distance, first))(pred, target)
  np.testing.assert_allclose(g, jax.vmap(jax.grad(jnp.abs))(pred - target) / 3)   # |x|'s


# ------------------------------------------------------- through vmap and remat

@jax.checkpoint
def entropy(w, x):
  p = (x @ w) ** 2
  return -jnp.where(p > 0, p * jnp.log(p), 0.0).sum()    # 0 log 0 taken as 0: not its grad


def test_a_vmapped_remat_blocks_log_at_zero_is_found_and_guarded():
  w = jnp.array([[1.0, -1.0, 0.0], [0.5, 0.5, 0.0]])      # its last feature is always 0
  xs = jnp.array([[1.0, 0.0], [2.0, 1.0], [0.0, 1.0]])
  loss = lambda w, xs: jax.vmap(entropy, in_axes=(None, 0))(w, xs).mean()
  assert jnp.isfinite(loss(w, xs)) and not _finite(jax.grad(loss)(w, xs))
  d = vv.nans(loss, w, xs)
  # the product's cotangent goes NaN first (0 × log 0 = 0 × -∞); the -∞ is log's
  assert d.source == _line_of(entropy, "jnp.log") and d.function == "mul"
  assert "of a value with 3 Inf of 9 elements, made by `log` at an input with 3 exact zeros " \
         "(of 9)" in d.detail and "double-where" in d.detail
  first = d.fixes[0]
  assert first.verdict == "verified" and "jnp.log(jnp.where(p > 0, p, 1.0))" in first.code
  fixed = _fixed(entropy, first)
  g = jax.grad(lambda w: jax.vmap(fixed, in_axes=(None, 0))(w, xs).mean())(w)
  guarded = lambda w, x: (lambda p: -jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)),
                                               0.0).sum())((x @ w) ** 2)
  np.testing.assert_allclose(g, jax.grad(lambda w: jax.vmap(guarded, in_axes=(None, 0))(
      w, xs).mean())(w), rtol=1e-6)


# ------------------------------------------------------- a fix's gradient, resumed

@pytest.mark.parametrize("program", ["soft_distance", "stacked_root"])
def test_a_fix_judged_by_resuming_the_search_has_the_whole_passs_gradient(program):
  from jupyter_vjpviz.analysis.values import nonfinite, nonfinite_eval
  from jupyter_vjpviz.fixes import nonfinite as fixes
  if program == "soft_distance":                        # the culprit inside a jit's body
    fun, args = soft_distance, (jnp.array([0.0, 1.0, 4.0, 0.0, 2.0]),)
  else:
    keys = jax.random.split(jax.random.PRNGKey(0), 5)
    fun, args = stacked_root, ([(jax.random.normal(k, (4, 4)), jnp.zeros(4).at[0].set(-100.0))
                                for k in keys], jnp.ones((2, 4)))
  jaxpr = jax.make_jaxpr(fun)(*args)
  leaves = jax.tree_util.tree_leaves(args)
  active = [True] * len(jax.tree_util.tree_leaves(args[0])) + [False] * (len(leaves) -
                                                                         len(jax.tree_util.tree_leaves(args[0])))
  found = nonfinite.localise(jaxpr, leaves, active, [jnp.ones(())])
  (cand, *_) = fixes.candidates(found.culprit, fixes.Program(jaxpr, leaves, active,
                                                              [jnp.ones(())], []))
  patch = nonfinite_eval.Patch(found.culprit.path, cand.fn)
  resumed = nonfinite.resumed(found, patch)
  whole = nonfinite.gradient(jaxpr, leaves, active, [jnp.ones(())], patch)
  assert resumed is not None and len(resumed) == len(whole) and _finite(whole)
  for r, w in zip(resumed, whole):
    np.testing.assert_allclose(r, w, rtol=1e-6)


# ------------------------------------------------------- an unrolled loop, run block by block

@jax.jit
def unrolled_roots(params, x):
  h = x
  for w, b in params:
    z = h @ w + b
    h = jnp.where(z > 0, jnp.sqrt(z), 0.0) + 0.5 * jnp.tanh(z)
  return (h ** 2).sum()


def _unrolled_inputs(layers: int = 8, bad: int = 5):
  keys = jax.random.split(jax.random.PRNGKey(3), layers)
  params = [(jnp.abs(jax.random.normal(k, (4, 4))), jnp.full(4, 0.1)) for k in keys]
  w, b = params[bad]                                        # z > 0 everywhere but:
  params[bad] = (w.at[:, 1].set(0.0), b.at[1].set(0.0))    # z[:, 1] is exactly 0 there
  return params, jnp.ones((2, 4))


def test_an_unrolled_loop_runs_as_one_compiled_block_and_its_bad_layer_is_still_found(
    monkeypatch):
  from jupyter_vjpviz.analysis.values import nonfinite, repeated_blocks
  params, x = _unrolled_inputs()
  closed = jax.make_jaxpr(unrolled_roots)(params, x)
  body = next(e for e in closed.jaxpr.eqns if "jaxpr" in e.params).params["jaxpr"]
  found = repeated_blocks.blocks(body.jaxpr.eqns)
  keys = [key for _, key in found.values()]
  assert len(found) >= 6 and max(keys.count(k) for k in keys) >= 6   # the layers, alike

  args = jax.tree_util.tree_leaves((params, x))
  blocked = nonfinite.forward(body.jaxpr, args)
  monkeypatch.setattr(repeated_blocks, "blocks", lambda eqns: {})
  eager = nonfinite.forward(body.jaxpr, args)
  values = [v for v in eager if not isinstance(v, int)]     # (an int: a jit's inner values)
  assert len(values) > 8 * len(found[min(found)][1][0])
  assert all(np.allclose(blocked[v], eager[v], equal_nan=True) for v in values)
  monkeypatch.undo()

  d = vv.nans(unrolled_roots, params, x)
  assert d.source == _line_of(unrolled_roots, "jnp.sqrt")
  assert "params[5]" in d.headline and "exact zero" in d.headline
  fix = d.fixes[0]
  fixed = _fixed(unrolled_roots, fix)
  got, right = jax.grad(fixed)(params, x), jax.grad(unrolled_roots)(params, x)
  assert _finite(got)
  for g, r in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(right)):
    ok = np.isfinite(r)
    assert np.allclose(np.asarray(g)[ok], np.asarray(r)[ok], rtol=1e-5, atol=1e-6)
