"""vv.nans, vv.grads and the value overlay run the user's program again on vjpviz's own
account (analysis/values/replay.py): the user's own run is theirs, every later one is quiet,
repeats no io_callback, caps its loops and stops at the deadline. Real JAX throughout."""
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback

import jupyter_vjpviz as vv
from jupyter_vjpviz.analysis.values import replay
from jupyter_vjpviz.deliver import call_values
from jupyter_vjpviz.api.nans import gradients
from jupyter_vjpviz.base.unchecked import Unchecked


def logged(log: list):
  """A loss with the where-sqrt trap (its gradient is NaN at 0) that prints its input's
  sum and appends it to ``log`` through an ordered io_callback, as a metrics logger does."""
  def loss(x):
    jax.debug.print("loss sees {}", x.sum())
    io_callback(lambda v: log.append(float(v)), None, jax.lax.stop_gradient(x).sum(),
                ordered=True)
    return jnp.where(x > 0, jnp.sqrt(x), 0.).sum()
  return loss


def effects(capsys, log: list, run) -> tuple[int, int]:
  """(lines printed by the loss, entries logged) while ``run()`` runs."""
  capsys.readouterr()
  log.clear()
  run()
  jax.effects_barrier()
  return capsys.readouterr().out.count("loss sees"), len(log)


X = jnp.array([0., 1., 4.])


# ------------------------------------------------------------------ vv.nans

def test_nans_prints_and_logs_as_often_as_the_users_own_gradient(capsys):
  log = []
  loss = logged(log)
  plain = effects(capsys, log, lambda: jax.grad(loss)(X))
  found = []
  hooked = effects(capsys, log, lambda: found.append(vv.nans(loss, X)))
  assert hooked == plain == (1, 1)
  d = found[0]
  assert d.function == "sqrt" and d.fixes[0].verdict == "verified", (d.detail, d.fixes)


def test_under_jax_debug_nans_the_gradient_taken_again_is_quiet(capsys):
  log = []
  loss = logged(log)

  def plain():
    with pytest.raises(FloatingPointError):
      jax.grad(loss)(X)
  with jax.debug_nans(True):
    expected = effects(capsys, log, plain)
    found = []
    got = effects(capsys, log, lambda: found.append(vv.nans(loss, X)))
  assert got == expected and expected[0] >= 1
  assert found[0].severity == "error"   # JAX raised: the diagnosis is an error


def test_a_watched_gradient_is_localised_without_running_its_effects_again(hook, capsys):
  log = []
  loss = logged(log)
  with gradients() as watch:
    assert effects(capsys, log, lambda: jax.grad(loss)(X)) == (1, 1)   # the user's run
  found = []
  assert effects(capsys, log, lambda: found.append(watch.diagnose())) == (0, 0)
  assert found[0] is not None and found[0].function == "sqrt"


def test_a_watched_jitted_step_is_run_again_without_its_effects(hook, capsys):
  """``%%vjpviz --nans`` on a jitted train step: the step is run again with jit disabled
  (eagerly: no jaxpr to rewrite) to localise its NaN; its effects are held back."""
  log = []
  loss = logged(log)
  step = jax.jit(lambda x: x - 0.1 * jax.grad(loss)(x))
  with gradients() as watch:
    assert effects(capsys, log, lambda: step(X)) == (1, 1)   # the user's run
  found = []
  assert effects(capsys, log, lambda: found.append(watch.diagnose())) == (0, 0)
  assert found[0] is not None and found[0].function == "sqrt"


def test_a_step_using_an_effects_result_is_not_localised_and_says_so(hook, capsys):
  calls = []

  def loss(x):
    scale = io_callback(lambda: calls.append(1) or np.float32(2.), jax.ShapeDtypeStruct((), jnp.float32))
    return (jnp.where(x > 0, jnp.sqrt(x), 0.) * scale).sum()
  step = jax.jit(lambda x: x - 0.1 * jax.grad(loss)(x))
  with gradients() as watch:
    step(X)
  assert len(calls) == 1
  missed = watch.diagnose()   # not None: None would say the gradient is finite
  assert isinstance(missed, Unchecked) and len(calls) == 1
  assert "uses the result of io_callback" in missed.reason
  assert "uses the result of io_callback" in capsys.readouterr().out


def test_a_program_using_an_io_callbacks_result_is_not_searched_again():
  calls = []

  def loss(x):
    scale = io_callback(lambda: calls.append(1) or np.float32(2.),
                        jax.ShapeDtypeStruct((), jnp.float32))
    return (jnp.where(x > 0, jnp.sqrt(x), 0.) * scale).sum()
  jax.grad(loss)(X)
  without = len(calls)
  calls.clear()
  d = vv.nans(loss, X)
  assert len(calls) == without
  assert "not judged: the program uses the result of io_callback" in d.detail, d.detail


def bwd_loop(n: int):
  """sin with a bwd whose while loop runs ``n`` iterations; a term it adds up goes Inf
  late in the loop (a decaying value underflows to 0): cheap compiled, slow stepped."""
  @jax.custom_vjp
  def f(x):
    return jnp.sin(x)

  def bwd(x, g):
    def body(c):
      i, v, w = c
      return i + 1, v * 0.999, w + 1. / v
    _, _, w = jax.lax.while_loop(lambda c: c[0] < n, body, (0, jnp.ones_like(g), jnp.zeros_like(g)))
    return (g * jnp.cos(x) + 0. * w,)
  f.defvjp(lambda x: (f(x), x), bwd)
  return f


def test_a_bwd_loop_too_long_to_step_within_the_budget_is_not_judged_inside(monkeypatch):
  f = bwd_loop(150_000)   # stepped on the host, op by op: minutes; compiled: a fraction of a second
  loss = lambda x: f(x).sum()
  jax.grad(loss)(jnp.ones(3))
  monkeypatch.setattr(replay, "BUDGET", 0.5)
  t = time.monotonic()
  d = vv.nans(loss, jnp.ones(3))
  assert time.monotonic() - t < 8.
  assert "inside its bwd rule not judged: time budget" in d.detail, d.detail
  assert d.fixes[0].verdict == "verified", d.fixes   # JAX's own derivative of sin


def newton_sqrt(a):
  """Converges where ``a > 0``; a NaN or an Inf stops it at once; never where ``a < 0``."""
  def body(c):
    return c[1], 0.5 * (c[1] + a / c[1])
  return jax.lax.while_loop(lambda c: jnp.max(jnp.abs(c[0] - c[1])) > 1e-6, body,
                            (a, 0.5 * (a + 1.)))[1]


def test_a_fix_whose_rewritten_values_never_end_a_loop_is_offered_not_judged(monkeypatch):
  def loss(p):   # the entropy trap; a statistic of log(p) goes through a convergence loop
    lp = jnp.log(p)
    spread = newton_sqrt(jax.lax.stop_gradient(lp.min() + 2.))   # at log(0): -inf, done at once
    return -jnp.where(p > 0, p * lp, 0.).sum() + 0. * spread
  p = jnp.array([0., .25, .75])
  jax.grad(loss)(p)
  monkeypatch.setattr(replay, "LOOP_CAP", 100)
  d = vv.nans(loss, p)   # clamping log makes the loop's input -67: Newton never converges
  assert d.function == "mul" and "made by `log`" in d.detail, d.detail
  clamp = next(f for f in d.fixes if f.title == "Clamp before log")
  assert all(f.verdict == "unverifiable" for f in d.fixes), d.fixes
  assert "a while loop ran past 100 iterations" in clamp.note


# ------------------------------------------------------------------ vv.grads

def test_grads_prints_and_logs_as_often_as_the_users_own_run(capsys):
  log = []

  def loss(w, xs):
    def step(h, x):
      jax.debug.print("loss sees {}", x)   # differentiated again in the backward pass
      io_callback(lambda v: log.append(float(v)), None, jax.lax.stop_gradient(h).sum(),
                  ordered=True)
      return jnp.tanh(h * w + x), None
    return jax.lax.scan(step, jnp.zeros(2), xs)[0].sum()
  w, xs = jnp.ones(2), jnp.arange(3.)
  printed = effects(capsys, log, lambda: jax.grad(loss)(w, xs))[0]
  forward = effects(capsys, log, lambda: loss(w, xs))[1]
  reports = []
  assert effects(capsys, log, lambda: reports.append(vv.grads(loss, w, xs))) == (printed, forward)
  assert printed == 3 and reports[0].healthy


def test_grads_of_a_program_using_an_io_callbacks_result_again_is_not_judged():
  calls = []

  def loss(w, xs):
    def step(h, x):
      s = io_callback(lambda: calls.append(1) or np.float32(2.), jax.ShapeDtypeStruct((), jnp.float32))
      return jnp.tanh(h * w * s + x), None
    return jax.lax.scan(step, jnp.zeros(2), xs)[0].sum()
  w, xs = jnp.ones(2), jnp.arange(3.)
  loss(w, xs)
  forward = len(calls)
  calls.clear()
  r = vv.grads(loss, w, xs)
  assert len(calls) == forward   # the forward run, the user's; the backward does not repeat it
  assert not r.healthy and "not judged: the program uses the result of io_callback" in r.note
  assert "not judged" in str(r)


# ------------------------------------------------------------------ after an error

def test_the_value_overlay_after_an_error_prints_nothing_again(hook, capsys):
  @jax.custom_vjp
  def f(x):
    return jnp.sin(x)
  f.defvjp(lambda x: (f(x), x), lambda x, g: ((jnp.cos(x) * g).sum(),))   # the wrong shape

  def loss(x):
    jax.debug.print("loss sees {}", x.sum())
    return f(x).sum()
  counts = {}
  for on in (False, True):
    (call_values.on if on else call_values.off)()
    capsys.readouterr()
    with pytest.raises(Exception):
      jax.grad(loss)(jnp.ones(3))
    jax.effects_barrier()
    counts[on] = capsys.readouterr().out.count("loss sees")
  call_values.off()
  assert counts[True] == counts[False] == 1
  assert hook.last().cotangents.get("edges"), "the overlay measured the pass"
