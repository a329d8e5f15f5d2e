"""vjpviz is safe to leave on: faults of its own, uninstall, memory, threads.

Each test here fails when the protection it names is taken away: a stage
without its guard lets our exception reach the user's code; an unbounded
history keeps every diagnosis; a shared (not thread-local) session state
attributes one thread's error to another.
"""
import collections
import gc
import importlib
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jupyter_vjpviz as vv
from jupyter_vjpviz.api import pipeline
from jupyter_vjpviz.analysis.diagnosis import Diagnosis
from jupyter_vjpviz.base.safety import Listeners
from test_capture import _frames, custom


# ------------------------------------------------------------------ user programs

def _tanh_rule(bwd):
  return custom(jnp.tanh, bwd)


def _scenarios():
  """A rule JAX rejects, one it silently accepts (bfloat16), and a correct one."""
  return {
      "raises": _tanh_rule(lambda r, g: (g[:2],)),
      "silent": _tanh_rule(lambda r, g: ((g * (1 - jnp.tanh(r[0]) ** 2)).astype(jnp.bfloat16),)),
      "correct": _tanh_rule(lambda r, g: (g * (1 - jnp.tanh(r[0]) ** 2),)),
  }


def _outcome(rule):
  """What the user sees: the gradient (value and dtype), or the exception with its frames."""
  try:
    value = jax.grad(lambda x: rule(x).sum())(jnp.linspace(0., 1., 3))
  except Exception as e:  # noqa: BLE001
    notes = [n for n in getattr(e, "__notes__", []) if not n.startswith("vjpviz: ")]
    return ("raised", type(e), str(e), tuple(_frames(e)), tuple(notes))
  return ("returned", np.asarray(value).tolist(), str(value.dtype))


def _vjpviz_lines(err: str) -> list[str]:
  return [line for line in err.splitlines() if line.startswith("vjpviz:")]


# ------------------------------------------------------------------ fault isolation

def _fault(*args, **kwargs):
  raise RuntimeError("injected fault")


# stage -> (module, attribute to break)
FAULTS = {
    "capture: rule site (fwd)": ("jupyter_vjpviz.capture.sites.custom_rules", "_site"),
    "capture: cotangent check (bwd)": ("jupyter_vjpviz.capture.sites.custom_rules",
                                       "compare_cotangents"),
    "capture: rule clone": ("jupyter_vjpviz.capture.sites.custom_rules", "instrumented"),
    "capture: entry point": ("jupyter_vjpviz.capture.sites.entry_points", "call_origin"),
    "analysis": ("jupyter_vjpviz.api.pipeline", "diagnose"),
    "analysis: locate": ("jupyter_vjpviz.analysis.assemble", "locate"),
    "fixes": ("jupyter_vjpviz.fixes.suggest", "attach"),
    "render: text": ("jupyter_vjpviz.render.text", "render"),
    "deliver: console": ("jupyter_vjpviz.deliver.console", "_on_diagnoses"),
}


@pytest.mark.parametrize("stage", FAULTS)
def test_a_fault_in_any_stage_leaves_user_code_exactly_as_without_vjpviz(
    hook, monkeypatch, capsys, stage):
  module, attribute = FAULTS[stage]
  vv.uninstall()
  plain = {name: _outcome(rule) for name, rule in _scenarios().items()}
  vv.install()
  capsys.readouterr()
  monkeypatch.setattr(_fault, "__module__", module)   # a bug in that very module
  monkeypatch.setattr(importlib.import_module(module), attribute, _fault)
  if attribute == "_on_diagnoses":                      # listeners are registered by value
    monkeypatch.setattr(pipeline, "_listeners", Listeners([_fault]))
  for name, rule in _scenarios().items():
    assert _outcome(rule) == plain[name], name
  lines = [l for l in _vjpviz_lines(capsys.readouterr().err) if l.startswith("vjpviz: could not")]
  assert len(lines) == 1, lines                         # said once, for all three programs
  assert "injected fault" in lines[0]
  assert lines[0].endswith("your code ran as it would without vjpviz.")


def test_internal_errors_are_reported_once_per_place_not_every_step(hook, monkeypatch, capsys):
  monkeypatch.setattr(importlib.import_module("jupyter_vjpviz.api.pipeline"), "diagnose", _fault)
  rule = _scenarios()["raises"]
  for _ in range(5):
    _outcome(rule)
  assert len(_vjpviz_lines(capsys.readouterr().err)) == 1


# ------------------------------------------------------------------ uninstall

def _jax_objects() -> dict:
  """Every attribute of every loaded JAX module, class attribute and table entry."""
  found = {}
  for name, module in list(sys.modules.items()):
    if module is None or not (name == "jax" or name.startswith(("jax.", "jaxlib"))):
      continue
    for attr, value in list(vars(module).items()):
      found[name, attr] = value
      if isinstance(value, type) and value.__module__ == name:
        found.update(((name, attr, k), v) for k, v in list(vars(value).items()))
      elif type(value) is dict:
        found.update(((name, attr, "[]", k), v) for k, v in list(value.items()))
  return found


FLAGS = tuple(f for f in ("jax_custom_vjp3", "jax_disable_bwd_checks", "jax_enable_x64")
              if f in jax.config.values)   # jax_custom_vjp3 is new in JAX 0.9


def test_install_uninstall_interleaved_with_config_changes_leaves_no_residue():
  rule = _scenarios()["raises"]
  _outcome(rule)                                   # JAX's own caches, warmed without us
  before, hooks_before = _jax_objects(), (sys.excepthook, list(pipeline._listeners))
  flags_before = {f: getattr(jax.config, f) for f in FLAGS}
  try:
    for flipped in [(), ("jax_custom_vjp3",), ("jax_disable_bwd_checks",),
                    ("jax_enable_x64", "jax_custom_vjp3"), FLAGS]:
      vv.install(); vv.install()
      for flag in FLAGS:
        jax.config.update(flag, flag in flipped)
      vv.clear()
      _outcome(_scenarios()["raises"])
      assert vv.last() is not None and vv.last().kind == "bwd_type", flipped
      jax.config.update("jax_enable_x64", not jax.config.jax_enable_x64)   # mid-session
      vv.uninstall(); vv.uninstall()
      vv.clear()
      outcome = _outcome(_scenarios()["raises"])
      assert vv.diagnoses() == [], flipped          # nothing watches any more
      assert outcome[0] == "returned" or not any("vjpviz" in n for n in outcome[4])
  finally:
    for flag, value in flags_before.items():
      jax.config.update(flag, value)
  after = _jax_objects()
  changed = [k for k, v in before.items() if k in after and after[k] is not v]
  assert changed == [], f"not restored by identity: {changed[:10]}"
  assert (sys.excepthook, list(pipeline._listeners)) == hooks_before


def test_uninstalled_failing_grad_carries_nothing_of_ours():
  vv.install()
  vv.uninstall()
  try:
    jax.grad(lambda x: _scenarios()["raises"](x).sum())(jnp.ones(3))
  except ValueError as e:
    assert not hasattr(e, "__vjpviz__")
    assert not [n for n in getattr(e, "__notes__", []) if "vjpviz" in n]
  else:
    pytest.fail("JAX should have raised")


def test_traces_cached_before_install_or_while_installed_do_not_outlive_the_switch(monkeypatch):
  """JAX caches traces (here: a checkpointed loss); they must not bypass or outlive the hook."""
  from jupyter_vjpviz.capture.sites import custom_rules
  rule = _scenarios()["silent"]
  loss = jax.checkpoint(lambda x: rule(x).sum())
  x = jnp.ones(3)
  jax.grad(loss)(x)                                # traced and cached without the hook
  vv.install()
  vv.clear()
  try:
    jax.grad(loss)(x)
    assert [d.kind for d in vv.diagnoses()] == ["silent_dtype"]
  finally:
    vv.uninstall()
    vv.clear()
  calls = []
  monkeypatch.setattr(custom_rules.InstrumentedRule, "__call__",
                      lambda self, *a, **k: calls.append(self) or self.__wrapped__(*a, **k))
  jax.grad(loss)(x)
  assert calls == [], "a trace cached while hooked still runs vjpviz's rule wrappers"


# ------------------------------------------------------------------ memory

def test_many_failing_grads_with_large_residuals_keep_no_device_buffers(hook):
  rule = custom(lambda x: jnp.sin(x) * 2., lambda r, g: (g[:-1] * jnp.cos(r[0][:-1]),))
  loss_over = lambda data: lambda x: (rule(x) * data).sum()
  baseline = {id(a) for a in jax.live_arrays()}
  for step in range(24):
    x = jnp.full((512, 1024), float(step))        # 2 MiB input, saved as the residual
    with pytest.raises(ValueError):                # and 2 MiB the loss closes over
      jax.grad(loss_over(jnp.full((512, 1024), 2.)))(x)
  del x
  gc.collect()
  assert len(vv.diagnoses()) == 24
  extra = [a.shape for a in jax.live_arrays() if id(a) not in baseline]
  assert extra == [], f"device buffers kept alive: {extra}"


def test_history_is_bounded_and_drops_the_oldest(hook):
  limit = pipeline.HISTORY_LIMIT
  rule = _scenarios()["raises"]
  first, alive_before = None, _diagnoses_alive()
  for _ in range(2 * limit + 10):                  # a training loop that fails every step
    with pytest.raises(ValueError):
      jax.grad(lambda x: rule(x).sum())(jnp.ones(3))
    first = first or vv.last().id
  found = vv.diagnoses()
  assert len(found) == limit
  assert first not in {d.id for d in found} and found[-1] is vv.last()
  alive = _diagnoses_alive() - alive_before
  assert alive <= limit + 5, f"{alive} diagnoses alive for a history of {limit}"


def _diagnoses_alive() -> int:
  gc.collect()
  return sum(isinstance(o, Diagnosis) for o in gc.get_objects())


def test_warnings_remembered_are_bounded(hook):
  """Once-per-key warnings: a loop whose warning changes every step keeps a bounded memory."""
  steps = pipeline.WARNINGS_REMEMBERED + 10
  for n in range(steps):                           # a new rule, so a new warning, each step
    bwd = lambda r, g: (g.astype(jnp.bfloat16),)
    bwd.__name__ = f"bwd_{n}"
    rule = _tanh_rule(bwd)
    jax.grad(lambda x: rule(x).sum())(jnp.ones(3))
  assert len(vv.diagnoses()) == steps
  assert len(pipeline._warned) <= pipeline.WARNINGS_REMEMBERED


# ------------------------------------------------------------------ threads

def test_grads_failing_in_several_threads_at_once_are_attributed_to_their_own_call(hook):
  rule = custom(lambda x: x * 2., lambda r, g: (g[:1],))    # wrong for every input but [1]
  good = custom(lambda x: x * 2., lambda r, g: (2. * g,))
  n, rounds = 6, 4
  barrier = threading.Barrier(n + 1)
  seen: dict = collections.defaultdict(list)

  def failing(k):
    for _ in range(rounds):
      barrier.wait()
      try:
        jax.grad(lambda x: rule(x).sum())(jnp.ones(k + 2))
      except ValueError as e:
        seen[k].append(e)

  def correct():
    for _ in range(rounds):
      barrier.wait()
      seen["good"].append(jax.grad(lambda x: good(x).sum())(jnp.ones(5)))

  threads = [threading.Thread(target=failing, args=(k,)) for k in range(n)]
  threads.append(threading.Thread(target=correct))
  for t in threads:
    t.start()
  for t in threads:
    t.join(timeout=120)
  for k in range(n):
    assert len(seen[k]) == rounds
    for e in seen[k]:
      (d,) = e.__vjpviz__
      assert (d.expected, d.got) == (f"float32[{k + 2}]", "float32[1]")
      assert [x for x in e.__notes__ if x.startswith("vjpviz:")] == [f"vjpviz: {d.headline} "
                                                                      "(vjpviz.last() has the full diagnosis)"]
  assert all(np.allclose(g, 2.) for g in seen["good"]) and len(seen["good"]) == rounds
  assert len(vv.diagnoses()) == n * rounds
  assert gc.isenabled()


def test_a_check_in_one_thread_does_not_swallow_another_threads_errors(hook):
  """vjpviz.check collects its findings per thread; errors elsewhere still reach the history."""
  silent, failing = _scenarios()["silent"], _scenarios()["raises"]
  inside, done, errors = threading.Event(), threading.Event(), []

  def checked(x):                                  # traced by check: hold it open meanwhile
    inside.set()
    done.wait(timeout=60)
    return silent(x).sum()

  def failing_grad():
    inside.wait(timeout=60)
    try:
      jax.grad(lambda x: failing(x).sum())(jnp.ones(3))
    except ValueError as e:
      errors.append(e)
    finally:
      done.set()

  thread = threading.Thread(target=failing_grad)
  thread.start()
  found = vv.check(checked, np.ones(3, np.float32))
  thread.join(timeout=60)
  assert [d.kind for d in found] == ["silent_dtype"]
  assert len(errors) == 1 and [d.kind for d in vv.diagnoses()] == ["bwd_type"]


def test_install_and_uninstall_while_other_threads_differentiate():
  from jax._src import api
  original = (jax.vjp, api.vjp, getattr(api, "_vjp3_bwd", None))   # new in JAX 0.8
  rule = _scenarios()["correct"]
  expected = _outcome(rule)
  stop = threading.Event()
  results, errors = [], []

  def work():
    while not stop.is_set():
      try:
        results.append(_outcome(rule))
      except Exception as e:  # noqa: BLE001
        errors.append(e)

  threads = [threading.Thread(target=work) for _ in range(3)]
  for t in threads:
    t.start()
  try:
    for _ in range(40):
      vv.install()
      vv.uninstall()
  finally:
    stop.set()
    for t in threads:
      t.join(timeout=60)
  assert errors == [] and results and all(r == expected for r in results)
  assert (jax.vjp, api.vjp, getattr(api, "_vjp3_bwd", None)) == original
  vv.clear()


# ------------------------------------------------------------------ in a real kernel

DELIVERY_FAULTS = {   # stage -> (module, attribute)
    "render: html": ("jupyter_vjpviz.render.html", "fragment"),
    "deliver: IPython display": ("jupyter_vjpviz.deliver.display", "show"),
    "deliver: panel comm": ("jupyter_vjpviz.deliver.comm", "push"),
}

INJECT = """\
import importlib as _il
_m = _il.import_module({module!r}); _saved = getattr(_m, {attribute!r})
def _fault(*a, **k): raise RuntimeError("injected fault")
_fault.__module__ = {module!r}
setattr(_m, {attribute!r}, _fault)"""

LOOP = """\
for step in range(30):
    try:
        jax.grad(lambda x: softclip(x).sum())(jnp.ones((4, 3)))
    except ValueError:
        pass"""


@pytest.fixture(scope="module")
def kernel_cells():
  from test_notebook import FAILING, run
  cells = [FAILING, "%load_ext vjpviz"]
  for module, attribute in DELIVERY_FAULTS.values():
    cells += [INJECT.format(module=module, attribute=attribute), FAILING,
              f"setattr(_m, {attribute!r}, _saved)"]
  cells += [LOOP]
  return run(*cells)


def _stderr_lines(cell) -> list[str]:
  text = "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stderr")
  return _vjpviz_lines(text)


@pytest.mark.parametrize("stage", DELIVERY_FAULTS)
def test_a_fault_in_rendering_or_delivery_leaves_the_cells_error_as_jax_wrote_it(
    kernel_cells, stage):
  from test_notebook import _normalised_traceback
  plain = next(o for o in kernel_cells[0].outputs if o.output_type == "error")
  cell = kernel_cells[2 + 3 * list(DELIVERY_FAULTS).index(stage) + 1]
  errors = [o for o in cell.outputs if o.output_type == "error"]
  assert len(errors) == 1 and (errors[0].ename, errors[0].evalue) == (plain.ename, plain.evalue)
  traceback = _normalised_traceback(errors[0])
  assert traceback[:-1] == _normalised_traceback(plain) and traceback[-1].startswith("vjpviz: ")
  (line,) = _stderr_lines(cell)
  assert line.startswith("vjpviz: could not ") and "injected fault" in line
  assert not any("Traceback" in getattr(o, "text", "") for o in cell.outputs)


def test_a_loop_failing_every_step_shows_a_bounded_number_of_outputs(kernel_cells):
  from jupyter_vjpviz.deliver.display import MIME_TYPE as MIME
  from jupyter_vjpviz.deliver.ipython import SHOWN_PER_CELL
  cell = kernel_cells[-1]
  shown = [o for o in cell.outputs if o.output_type == "display_data" and MIME in o.data]
  assert len(shown) == SHOWN_PER_CELL
  text = "".join(o.text for o in cell.outputs if o.output_type == "stream")
  assert f"{30 - SHOWN_PER_CELL} more diagnoses in this cell not shown" in text


CYCLIC_CLOSURE = '''
import jax, jax.numpy as jnp, jupyter_vjpviz as vv

def room():
  """How deep a nested list repr can go: CPython 3.12's C recursion budget left."""
  lo, hi = 1, 5000
  while lo < hi:
    mid, nested = (lo + hi + 1) // 2, []
    for _ in range(mid):
      nested = [nested]
    try:
      repr(nested)
      lo = mid
    except RecursionError:
      hi = mid - 1
  return lo

triple = jax.custom_vjp(lambda x: 3. * x)
triple.defvjp(lambda x: (3. * x, None), lambda _, g: (2. * g,))   # well-typed, wrong value

def model(config):
  def loss(x):           # config is one of its locals (a closure cell)
    return config["scale"] * jnp.sin(triple(x)).sum()
  return loss

config = {"scale": 2., "name": "run"}
config["parent"] = config          # a dict holding itself, as a namespace may
loss = model(config)

before = room()
found = vv.gradcheck(loss, jnp.linspace(-1., 1., 6))
print(len(found), before, room())
'''


def test_a_cyclic_dict_the_users_function_sees_leaves_pythons_recursion_budget_whole(tmp_path):
  """jaxlib's flatten of a dict holding itself overflows, and on CPython 3.12 its
  RecursionError left the C recursion budget spent for the rest of the process (a
  15-deep list could no longer be printed); vjpviz flattened every local of the user's
  function it watched. Before: 'could not diagnose' lines, a RecursionError, the budget gone."""
  script = tmp_path / "cyclic_closure.py"    # a real file, as a user's module
  script.write_text(CYCLIC_CLOSURE)
  run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stderr[-2000:]
  assert "vjpviz: could not" not in run.stderr, run.stderr
  found, before, after = map(int, run.stdout.split()[-3:])
  assert found == 1 and after == before, run.stdout
