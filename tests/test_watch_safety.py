"""vv.watch when vjpviz fails: the user's step runs as it would without vjpviz, once.

An internal error injected into each stage of the watched step (making the compiled step,
tracing it with the health reductions, recording a call's row): the outputs are the plain
step's, an nnx step's in-place updates land once, one line is printed, and the watch is
unchecked (never an empty all-clear) from then on. An error of the user's own step reaches
them as the plain step raises it: type, message, frames.
"""
from __future__ import annotations

import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_helpers import validator

import jupyter_vjpviz as vv
from jupyter_vjpviz.analysis import watch_record, watch_rows
from jupyter_vjpviz.analysis.values import watch_step
from jupyter_vjpviz.api.watch import watch


def _boom(*a, **k):
  raise RuntimeError("injected")


STAGES = {   # stage -> (the object, the name of vjpviz's function the failure is injected in)
    "compile": (watch_step, "jitted_as"),
    "trace": (watch_rows, "health"),
    "record": (watch_record.Recording, "add"),
}


@jax.jit
def sgd(w, x):
  return w - 0.1 * jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(w)


def _run(step, calls=3):
  w, x = jnp.ones((3, 2)), jnp.arange(12.0).reshape(4, 3) / 10
  for _ in range(calls):
    w = step(w, x)
  return w


def _unchecked_said(w, capsys, stage):
  said = capsys.readouterr().err.splitlines()
  assert len(said) == 1 and said[0].startswith("vjpviz: could not check vv.watch"), said
  assert "your step ran as it would without vjpviz" in said[0] and "injected" in said[0]
  missed = vv.unchecked(w)
  assert missed is not None and stage in missed.reason and "injected" in missed.reason
  assert str(w).splitlines()[-1].strip() == str(missed) and "finite" not in str(w)
  assert w.events()[-1] is missed and w.flow()[-1] is missed
  assert w.series()["unchecked"] == missed.reason   # what the panel says: could not check
  validator("WatchSeries").validate(w.series())


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_an_internal_error_runs_the_plain_step_and_unchecks_the_watch(monkeypatch, capsys, stage):
  plain = _run(sgd)
  monkeypatch.setattr(*STAGES[stage], _boom)
  w = watch(sgd)
  assert np.array_equal(_run(w), plain)
  _unchecked_said(w, capsys, stage)


@pytest.mark.parametrize("stage", ["trace", "record"])
def test_an_nnx_steps_updates_land_once_when_the_watch_fails(monkeypatch, capsys, stage):
  optax = pytest.importorskip("optax")
  nnx = pytest.importorskip("flax.nnx")
  x = jax.random.normal(jax.random.PRNGKey(1), (8, 3))
  loss = lambda m: (m(x) ** 2).mean()

  @nnx.jit
  def step(model, optimizer):
    value, g = nnx.value_and_grad(loss)(model)
    optimizer.update(model, g)
    return value

  def trained(run):
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    values = [float(run(model, optimizer)) for _ in range(3)]
    return nnx.state(model), int(optimizer.step[...]), values
  state, steps, values = trained(step)
  monkeypatch.setattr(*STAGES[stage], _boom)
  w = watch(step)
  w_state, w_steps, w_values = trained(w)
  assert (w_steps, w_values) == (steps, values) == (3, values)
  assert jax.tree_util.tree_all(jax.tree_util.tree_map(np.array_equal, w_state, state))
  _unchecked_said(w, capsys, stage)


def _user_error(step):
  try:
    _run(step)
  except ValueError as e:   # the user's own: caught here as their cell would not
    frames = [(f.name, f.lineno) for f in traceback.extract_tb(e.__traceback__)
              if "jupyter_vjpviz" not in f.filename][1:]   # from the test's call inward
    return type(e), str(e), frames, e.__context__, e.__cause__
  raise AssertionError("the step ran")


@pytest.mark.parametrize("ours_fails", [False, True])
def test_the_users_own_error_reaches_them_unchanged(monkeypatch, capsys, ours_fails):
  @jax.jit
  def step(w, x):
    if x.shape[0] > 2:
      raise ValueError(f"batch of {x.shape[0]} rows: too many")
    return sgd(w, x)
  plain = _user_error(step)
  if ours_fails:   # the plain step decides whose the failure is: here, the user's
    monkeypatch.setattr(*STAGES["trace"], _boom)
  w = watch(step)
  assert _user_error(w) == plain and plain[1] == "batch of 4 rows: too many"
  assert vv.unchecked(w) is None and capsys.readouterr().err == ""
