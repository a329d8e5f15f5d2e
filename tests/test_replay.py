"""vjpviz's own runs of the user's code (analysis/values/replay.py): bounded in time, loops and
memory, and repeating none of the user's side effects; real JAX, real diagnoses."""
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback

from jupyter_vjpviz.analysis.values import oracle, replay


def wrong_rule(primal, derivative):
  """``primal`` as a custom_vjp whose bwd returns the right cotangent, ``derivative(x) * g``,
  summed to a scalar (JAX raises: its shape is not the input's)."""
  f = jax.custom_vjp(primal)
  f.defvjp(lambda x: (f(x), x), lambda x, g: ((derivative(x) * g).sum(),))
  return f


def diagnosed(hook, f, x):
  with pytest.raises(Exception):
    jax.jit(jax.grad(lambda x: f(x).sum()))(x)
  d = hook.last()
  assert d is not None and d.kind == "bwd_type", d
  return d


def notes(d) -> list[str]:
  return [f"{f.verdict}: {f.note}" for f in d.fixes]


# ------------------------------------------------------------------ loops

def newton_sqrt(a):
  """Converges where ``a > 0`` (the user's values); never where some ``a < 0``."""
  def body(c):
    return c[1], 0.5 * (c[1] + a / c[1])
  return jax.lax.while_loop(lambda c: jnp.max(jnp.abs(c[0] - c[1])) > 1e-6, body,
                            (a, 0.5 * (a + 1.)))[1]


def test_a_loop_that_never_ends_at_any_draw_leaves_the_fixes_not_judged(hook, monkeypatch):
  monkeypatch.setattr(replay, "LOOP_CAP", 50)
  forever = lambda x: jax.lax.while_loop(lambda c: c[1] >= 0, lambda c: (c[0] * 1.01, c[1] + 1),
                                         (x, 0))[0]
  d = diagnosed(hook, wrong_rule(forever, lambda x: 1.), jnp.ones(3))
  assert d.fixes and all(f.verdict != "verified" for f in d.fixes), notes(d)
  assert any("while loop ran past 50 iterations" in f.note for f in d.fixes), notes(d)


def test_draws_whose_loop_hits_the_cap_are_dropped_and_the_rest_judge(hook, monkeypatch):
  monkeypatch.setattr(replay, "LOOP_CAP", 200)
  d = diagnosed(hook, wrong_rule(newton_sqrt, lambda a: 0.5 / jnp.sqrt(a)), jnp.full(4, 2.))
  judge = oracle.Oracle.of(d.site, newton_sqrt)
  assert 0 < len(judge.draws) < oracle.DRAWS   # the standard normal draws never converge
  assert "draws dropped (a while loop ran past 200 iterations" in judge.reason
  assert all(np.all(np.asarray(a) > 0) for dr in judge.draws for a in dr.args)


def test_a_capped_loop_is_reported_and_one_that_finishes_is_not():
  def count_to(n, x):
    return jax.lax.fori_loop(0, n, lambda i, c: c + 1., x)   # dynamic bounds: a while loop
  run = jax.jit(replay.bounded(count_to))
  assert float(replay.run(run, jnp.int32(replay.LOOP_CAP), jnp.float32(0))) == replay.LOOP_CAP
  with pytest.raises(replay.LoopCapped):
    replay.run(run, jnp.int32(10 ** 9), jnp.float32(0))


def count_to(n, x):
  return jax.lax.fori_loop(0, n, lambda i, c: c + 1., x)   # dynamic bounds: a while loop


def test_the_draws_cap_is_a_multiple_of_what_the_users_run_needed():
  run = replay.bounded(count_to)   # traced at each call: at the cap of that moment
  need = 3 * replay.LOOP_CAP
  with replay.account():
    with replay.at_user_values():   # uncapped there: the user's run ended
      assert float(replay.run(run, jnp.int32(need), jnp.float32(0))) == need
    assert replay.current().cap == replay.TRIPS_TIMES * need
    assert float(replay.run(run, jnp.int32(2 * need), jnp.float32(0))) == 2 * need
    with pytest.raises(replay.LoopCapped, match=f"ran past {replay.TRIPS_TIMES * need} "):
      replay.run(run, jnp.int32(10 ** 9), jnp.float32(0))
  with replay.account():           # no run at the user's values seen: the fixed cap
    with pytest.raises(replay.LoopCapped, match=f"ran past {replay.LOOP_CAP} "):
      replay.run(run, jnp.int32(need), jnp.float32(0))


# ------------------------------------------------------------------ time

def test_a_loop_that_never_ends_is_stopped_at_the_deadline(monkeypatch):
  monkeypatch.setattr(replay, "LOOP_CAP", 2 ** 31 - 1)   # no cap: the deadline alone
  forever = replay.bounded(lambda x: jax.lax.while_loop(lambda c: c > -1., lambda c: c + 1., x))
  t = time.monotonic()
  with replay.account(0.3), pytest.raises(replay.NotJudged, match="time budget"):
    replay.run(forever, jnp.float32(0))
  assert time.monotonic() - t < 3.

def test_with_no_time_left_nothing_is_run_and_the_fixes_say_so(hook, monkeypatch):
  monkeypatch.setattr(replay, "BUDGET", 0.)
  ran = []
  primal = lambda x: jax.pure_callback(lambda v: ran.append(1) or np.sin(v), x, x) * 2.
  d = diagnosed(hook, wrong_rule(jnp.sin, jnp.cos), jnp.ones(3))
  assert all(f.verdict != "verified" for f in d.fixes), notes(d)
  assert any(replay.TIME_BUDGET in f.note for f in d.fixes), notes(d)
  with replay.account(0.):
    with pytest.raises(replay.NotJudged, match="time budget"):
      replay.run(primal, jnp.ones(3))
  assert not ran


# ------------------------------------------------------------------ effects

def effectful(log: list):
  def primal(x):
    jax.debug.print("primal sees {}", x.sum())
    io_callback(lambda v: log.append(float(v)), None, x.sum(), ordered=True)
    return jnp.sin(x) * 2.
  return primal


def test_prints_and_io_callbacks_happen_as_often_as_without_vjpviz(hook, capsys):
  counts = {}
  for hooked in (False, True):
    (hook.install if hooked else hook.uninstall)()
    log = []
    with pytest.raises(Exception):
      jax.grad(lambda x: wrong_rule(effectful(log), lambda x: 2. * jnp.cos(x))(x).sum())(jnp.ones(3))
    counts[hooked] = (capsys.readouterr().out.count("primal sees"), len(log))
  assert counts[True] == counts[False] == (1, 1)
  d = hook.last()
  assert d.fixes[0].verdict == "verified", notes(d)   # judged without the effects


def test_a_program_using_an_io_callbacks_result_is_not_judged(hook):
  calls = []
  def primal(x):
    scale = io_callback(lambda: calls.append(1) or np.float32(2.), jax.ShapeDtypeStruct((), jnp.float32))
    return jnp.sin(x) * scale
  with pytest.raises(Exception):   # eagerly: the user's fwd runs the callback once
    jax.grad(lambda x: wrong_rule(primal, lambda x: 2. * jnp.cos(x))(x).sum())(jnp.ones(3))
  d = hook.last()
  assert len(calls) == 1
  assert any("uses the result of io_callback" in f.note for f in d.fixes), notes(d)


def test_a_ref_made_read_and_written_inside_the_program_is_no_effect_on_the_world():
  """Such a program may be run again as it is: nothing it does leaves it."""
  def f(x):
    r = jax.new_ref(x)
    r[...] = r[...] * 2.
    return r[...]
  if not hasattr(jax, "new_ref"):
    pytest.skip("this JAX has no jax.new_ref")
  jaxpr = jax.make_jaxpr(f)(jnp.ones(3)).jaxpr
  assert [e for e in jaxpr.eqns if e.effects]
  assert not any(replay._side_effects(e) for e in jaxpr.eqns) and not replay._needs(jaxpr)


def test_effects_in_a_rules_own_bwd_run_as_often_as_without_vjpviz(hook, capsys):
  """The bwd reads its values in Python: the oracle runs it eagerly, not as a rewritten
  jaxpr; its io_callback and print are held back all the same."""
  counts = {}
  for hooked in (False, True):
    (hook.install if hooked else hook.uninstall)()
    log = []
    f = jax.custom_vjp(jnp.tanh)

    def bwd(y, g):
      io_callback(lambda v: log.append(float(v)), None, g.sum(), ordered=True)
      jax.debug.print("bwd sees {}", g.sum())
      scale = 1. if float(jnp.abs(g).max()) < 1e30 else 0.   # Python on its values
      return ((g * (1 - y ** 2) * scale).sum(),)   # the bug: summed to a scalar
    f.defvjp(lambda x: (jnp.tanh(x), jnp.tanh(x)), bwd)
    with pytest.raises(Exception):
      jax.grad(lambda x: f(x).sum())(jnp.ones(3))
    counts[hooked] = (capsys.readouterr().out.count("bwd sees"), len(log))
  assert counts[True] == counts[False] == (1, 1)
  assert hook.last().fixes, hook.last()


# ------------------------------------------------------------------ memory

def test_draws_of_a_large_argument_take_less_than_one_copy_of_it(hook):
  derivative = lambda x: jnp.tanh(x) + x * (1 - jnp.tanh(x) ** 2)
  d = diagnosed(hook, wrong_rule(lambda x: jnp.tanh(x) * x, derivative), jnp.ones((1024, 2048)))
  judge = oracle.Oracle.of(d.site, lambda x: jnp.tanh(x) * x)
  held = sum(np.asarray(a).nbytes for dr in judge.draws
             for a in jax.tree_util.tree_leaves((dr.args, dr.ct, dr.reference)))
  assert len(judge.draws) == oracle.DRAWS and held <= 1024 * 2048 * 4
  assert judge.shrunk and "smaller shapes" in judge.assumes
  right = judge.verdict(lambda x: (jnp.tanh(x) * x, x), lambda x, g: (derivative(x) * g,))
  assert right.status == oracle.RIGHT and "smaller shapes" in right.reason, right
  summed = judge.verdict(lambda x: (jnp.tanh(x) * x, x), lambda x, g: (derivative(x) * g * 2,))
  assert summed.status == oracle.WRONG, summed


# ------------------------------------------------------------------ where draws are made

def test_the_first_draw_is_the_failing_application_and_the_rest_keep_its_sign(hook, monkeypatch):
  built = []
  of = oracle.Oracle.of.__func__
  monkeypatch.setattr(oracle.Oracle, "of", classmethod(
      lambda cls, *a, **k: built.append(of(cls, *a, **k)) or built[-1]))
  x = jnp.linspace(0.5, 3., 6)
  with pytest.raises(Exception):   # eagerly: the application's values exist
    jax.grad(lambda x: wrong_rule(newton_sqrt, lambda a: 0.5 / jnp.sqrt(a))(x).sum())(x)
  del x   # fixes are judged after the exception, once the call has let go of its values
  d = hook.last()
  assert built, notes(d)
  draws = built[0].draws
  assert np.array_equal(np.asarray(draws[0].args[0]), np.linspace(0.5, 3., 6, dtype=np.float32))
  assert all(np.all(np.asarray(dr.args[0]) > 0) for dr in draws)
  assert "draws dropped" not in built[0].reason   # no draw of a negative number to diverge at
  assert d.fixes[0].verdict == "verified", notes(d)


def test_no_value_of_the_application_is_held_after_its_call(hook):
  from jupyter_vjpviz.capture import applied
  x = jnp.linspace(0.5, 3., 6)
  f = wrong_rule(jnp.sin, jnp.cos)
  with pytest.raises(Exception):
    jax.grad(lambda x: f(x).sum())(x)
  assert applied.values(hook.last().site) is None
