"""vv.watch's series for the panel (watch.py Watched.series, the WatchMessage of
protocol.schema.json): a real jitted optax step with a layer whose gradient goes zero and a
step that goes NaN; the message validates, names the events, stays bounded, and the panel's
watch_nans request runs vv.nans on the kept call."""
from __future__ import annotations

import json
import threading
import time

import jax
import jax.numpy as jnp
import pytest
from kernel_helpers import REPLY, SETUP, validator

from jupyter_vjpviz.api.watch import POINTS, PUSH_EVERY, add_listener, remove_listener, watch
from jupyter_vjpviz.api import pipeline
from jupyter_vjpviz.deliver import comm, requests

optax = pytest.importorskip("optax")
WATCH = validator("WatchMessage")
RESULTS = {op: validator(name) for op, name in
           requests.SCHEMA["definitions"]["RequestMessage"]["x-results"].items()}


def _training(nan_at: int):
  """A two-layer model's jitted sgd step: Dense_1 stops mattering from step 3, and the
  loss divides by zero at step ``nan_at``."""
  opt = optax.sgd(0.01)

  @jax.jit
  def step(params, state, x, t):
    def loss(p):
      h = jnp.tanh(x @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"])
      head = jnp.where(t < 3, (h @ p["Dense_1"]["kernel"]).sum(), 0.0)
      return (h ** 2).sum() + head + jnp.sqrt(jnp.where(t == nan_at, 0.0, 1.0) * (h ** 2).sum())
    value, g = jax.value_and_grad(loss)(params)
    updates, state = opt.update(g, state)
    return optax.apply_updates(params, updates), state, value
  k = jax.random.split(jax.random.key(0), 3)
  params = {"Dense_0": {"kernel": jax.random.normal(k[0], (4, 8)), "bias": jnp.zeros(8)},
            "Dense_1": {"kernel": jax.random.normal(k[1], (8, 2))}}
  return step, params, opt.init(params), jax.random.normal(k[2], (16, 4))


def _message(series: dict) -> dict:
  message = json.loads(json.dumps({"v": 1, "type": "watch", "watch": series}))
  WATCH.validate(message)
  return message


def test_the_series_validates_and_names_its_events():
  step, params, state, x = _training(nan_at=5)
  w = watch(step)
  for t in range(6):
    params, state, _ = w(params, state, x, jnp.int32(t))
  series = _message(w.series())["watch"]
  assert series["steps"] == 6 and series["points"] == list(range(6))
  assert [l["group"] for l in series["lines"]] == ["['Dense_0']", "['Dense_1']"]
  dense_0, dense_1 = (l["norms"] for l in series["lines"])
  assert dense_1[0] > 0 and dense_1[3:] == [0.0, 0.0, 0.0]
  assert all(n > 0 for n in dense_0[:5]) and dense_0[5] is None
  # One event per block and event: Dense_1's one leaf went zero and stayed so (one line,
  # not two), both of Dense_0's leaves went non-finite at step 5 (one line, not two).
  assert [(e["step"], e["path"], e["leaves"], e["kind"]) for e in series["events"]] == [
      (3, "['Dense_1']['kernel']", 1, "stayed_zero"), (5, "['Dense_0']", 2, "first_nonfinite")]
  assert [e["text"] for e in series["events"]] == [
      "step 3: ['Dense_1']['kernel']: no gradient, for 3+ steps",
      "step 5: ['Dense_0'] (2 leaves): non-finite"]
  assert str(w).splitlines()[1:] == [
      "  step 3: ['Dense_1']['kernel']: no gradient, for 3+ steps",
      "  step 5: ['Dense_0'] (2 leaves): non-finite (.nans(5) finds where)"]
  assert series["kept_steps"] == [5]


def test_the_panel_runs_vv_nans_on_the_kept_step():
  step, params, state, x = _training(nan_at=2)
  w = watch(step)
  for t in range(3):
    params, state, _ = w(params, state, x, jnp.int32(t))
  ask = lambda op, **args: comm.handle({"v": 1, "type": "request", "request_id": "r",
                                        "op": op, "args": args})
  listed = ask("watch")
  REPLY.validate(listed)
  RESULTS["watch"].validate(listed["result"])
  assert w.id in [s["id"] for s in listed["result"]["watches"]]
  reply = ask("watch_nans", watch_id=w.id, step=2)
  REPLY.validate(reply)
  RESULTS["watch_nans"].validate(json.loads(json.dumps(reply["result"])))
  d = reply["result"]["diagnosis"]
  assert d["kind"] == "nonfinite_cotangent" and "sqrt" in d["headline"]
  assert d["id"] in [x.id for x in pipeline.history()]
  gone = ask("watch_nans", watch_id=w.id, step=1)
  assert not gone["ok"] and "no longer kept" in gone["error"]


def test_the_first_non_finite_call_is_kept_when_its_health_is_seen_in_time():
  """A loop that reads its loss each step: the NaN step's health is on the host by the
  next call, so its arguments (references) stay kept at no cost per step; donated ones
  cannot be, and vv.nans says how to keep them."""
  step, params, state, x = _training(nan_at=2)
  w = watch(step)
  for t in range(10):
    params, state, value = w(params, state, x, jnp.int32(t))
    float(value)
  assert w.kept_steps() == [2, 9] and w.series()["kept_steps"] == [2, 9]
  d = w.nans(2)
  assert d.kind == "nonfinite_cotangent" and "sqrt" in d.headline
  step, params, state, x = _training(nan_at=2)
  w = watch(jax.jit(step.__wrapped__, donate_argnums=(0, 1)))
  for t in range(10):
    params, state, value = w(params, state, x, jnp.int32(t))
    float(value)
  assert w.kept_steps() == [9]
  with pytest.raises(ValueError, match="keep_first_nonfinite=True"):
    w.nans(2)


def test_keep_first_nonfinite_copies_that_call_to_the_host():
  """Donated arguments, 40 steps past the NaN: vv.nans still runs on that step's call, from
  its host copy (built afresh each time); a later non-finite step is not copied."""
  step, params, state, x = _training(nan_at=2)
  donating = jax.jit(step.__wrapped__, donate_argnums=(0, 1))
  w = watch(donating, keep=False, keep_first_nonfinite=True)
  for t in range(43):
    params, state, _ = w(params, state, x, jnp.int32(t if t < 40 else 2))   # NaN again at 40..42
  assert [e.first_nonfinite for e in w.events() if e.first_nonfinite is not None][0] == 2
  assert w.series()["kept_steps"] == [2]
  for _ in range(2):
    d = w.nans(2)
    assert d.kind == "nonfinite_cotangent" and "sqrt" in d.headline
  with pytest.raises(ValueError, match=r"no longer kept.*steps 2\)"):
    w.nans(40)


@pytest.mark.parametrize("keep_first_nonfinite", [False, True])
def test_vv_nans_on_a_watched_nnx_step_localises_its_nan(keep_first_nonfinite):
  """An nnx.jit step taking nnx.value_and_grad and updating an nnx.Optimizer in place: vv.nans
  on its NaN step (the last call's live modules, or the host copy made before the step)
  names the sqrt, and leaves the user's model and optimizer as they were."""
  nnx = pytest.importorskip("flax.nnx")

  class MLP(nnx.Module):
    def __init__(self, rngs):
      self.a, self.b = nnx.Linear(3, 3, rngs=rngs), nnx.Linear(3, 1, rngs=rngs)

    def __call__(self, x):
      return self.b(jnp.tanh(self.a(x)))
  x = jax.random.normal(jax.random.key(1), (8, 3))

  @nnx.jit
  def step(model, optimizer, t):
    def loss(m):
      h = m(x)
      return (h ** 2).mean() + jnp.sqrt(jnp.where(t == 2, 0.0, 1.0) * (h ** 2).sum())
    value, g = nnx.value_and_grad(loss)(model)
    optimizer.update(model, g)
    return value
  model = MLP(nnx.Rngs(0))
  optimizer = nnx.Optimizer(model, optax.sgd(1e-2), wrt=nnx.Param)
  w = watch(step, keep_first_nonfinite=keep_first_nonfinite)
  for t in range(3):
    w(model, optimizer, jnp.int32(t))
  kernel = model.a.kernel[...]
  assert w.kept_steps() == [2]
  if not keep_first_nonfinite:   # the live modules hold step 3's parameters now
    with pytest.raises(ValueError, match="updated its nnx modules in place"):
      w.nans(2)
    return
  d = w.nans(2)
  assert d.kind == "nonfinite_cotangent" and "sqrt" in d.headline
  assert int(optimizer.step[...]) == 3 and model.a.kernel[...] is kernel


def test_the_watch_replays_an_nnx_step_on_its_arguments_before_the_update():
  """A softplus written by hand overflows at step 2 and the sgd update makes every weight
  NaN: the NaN is exp's (it overflowed on the weights the step was called with), not the
  log's that the updated weights would show (issue 46)."""
  nnx = pytest.importorskip("flax.nnx")
  x = jax.random.normal(jax.random.key(1), (8, 3))

  @nnx.jit
  def step(model, optimizer, scale):
    def loss(m):
      return jnp.log(1 + jnp.exp(scale * m(x))).mean()
    value, g = nnx.value_and_grad(loss)(model)
    optimizer.update(model, g)
    return value
  model = nnx.Linear(3, 4, rngs=nnx.Rngs(0))
  optimizer = nnx.Optimizer(model, optax.sgd(1.0), wrt=nnx.Param)
  w = watch(step, keep_first_nonfinite=True)
  for t in range(4):
    w(model, optimizer, jnp.float32(1e4 if t == 2 else 1.0))
  assert not jnp.isfinite(model.kernel[...]).any()
  d = w.nans(2)
  assert d.kind == "nonfinite_cotangent" and d.headline.split(" (")[0].endswith("at exp")


def test_the_loops_last_steps_land_without_another_call():
  """A loop shorter than the push interval: its last steps reach the listeners once the
  interval ends (a timer's push), and no thread stays behind."""
  heard: list = []
  listener = lambda watched: heard.append(watched.series(watched.landed())["steps"])
  step, params, state, x = _training(nan_at=-1)
  w = watch(step)
  add_listener(listener)
  try:
    for t in range(40):
      params, state, _ = w(params, state, x, jnp.int32(t))
    time.sleep(PUSH_EVERY + 0.5)
  finally:
    remove_listener(listener)
  assert heard[0] < 40 and heard[-1] == 40, heard
  pushes = lambda: [t for t in threading.enumerate() if t.name == "vjpviz-watch-push"]
  assert not pushes()
  add_listener(listener)
  for t in range(3):      # a push, then a timer for the rest
    params, state, _ = w(params, state, x, jnp.int32(t))
  assert len(pushes()) == 1
  heard.clear()
  remove_listener(listener)   # the panel gone: the timer cancelled, its thread ended
  assert not pushes() and not heard


def test_ten_thousand_steps_stay_bounded_with_their_events():
  step, params, state, x = _training(nan_at=9_000)
  w = watch(step, keep=False)
  for t in range(10_000):
    params, state, _ = w(params, state, x, jnp.int32(t))
  message = _message(w.series())
  series = message["watch"]
  assert series["steps"] == 10_000 and len(series["points"]) <= POINTS
  assert {3, 9_000} <= set(series["points"]) and series["kept_steps"] == []
  assert all(len(l["norms"]) == len(series["points"]) for l in series["lines"])
  assert len(json.dumps(message)) < 64_000


def test_a_watched_loop_in_a_kernel_pushes_its_series_at_most_twice_a_second(panel):
  """A real kernel with a panel listening: a 3-second watched loop sends a few bounded
  watch messages (the steps landed so far, growing), not one per step."""
  assert panel.execute(SETUP)["status"] == "ok"
  before = len(panel.opened())
  loop = """
import time
from jupyter_vjpviz.api.watch import watch
@jax.jit
def train(w, x):
    g = jax.grad(lambda w: (jnp.tanh(x @ w) ** 2).sum())(w)
    return w - 0.01 * g
watched = watch(train)
w0 = jnp.ones((5, 3))
start = time.monotonic()
while time.monotonic() - start < 3:
    w0 = watched(w0, x)
    time.sleep(0.002)
"""
  assert panel.execute(loop)["status"] == "ok"
  pushes = [m["content"]["data"] for m in panel.opened()[before:]
            if m["content"]["data"]["type"] == "watch"]
  for message in pushes:
    WATCH.validate(message)
  steps = [m["watch"]["steps"] for m in pushes]
  assert 2 <= len(pushes) <= 3 / PUSH_EVERY + 2, steps
  assert steps == sorted(steps) and steps[-1] > 32

