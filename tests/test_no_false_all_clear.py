"""Never a false all-clear: every public entry point, crossed with every way a check fails.

The entry points come from the package's public names (``jupyter_vjpviz.__all__``): a name
added there fails ``test_every_public_name_is_an_answer_or_not_a_check`` until it is
classified here. The ways a check fails: the user's function raising in vjpviz's own run
of it, an internal error injected into vjpviz's analysis, the time budget spent, a
non-finite gradient, an input vjpviz cannot read. In each, the answer must not be the
all-clear (None, "healthy", []): a finding, an ``Unchecked`` saying why, or an exception
the user's own call would raise too. A clean program first, so each all-clear exists.
"""
from __future__ import annotations

import contextlib
import importlib

import jax
import jax.numpy as jnp
import pytest

import jupyter_vjpviz as vv
from jupyter_vjpviz.analysis import program, watch_rows
from jupyter_vjpviz.analysis.values import oracle, replay
from jupyter_vjpviz.capture.sites import check_sites



@jax.custom_vjp
def cube(x):
  return x ** 3


cube.defvjp(lambda x: (x ** 3, x), lambda x, g: (3 * x ** 2 * g,))


@jax.custom_vjp
def twisted(x):
  return x ** 3


twisted.defvjp(lambda x: (x ** 3, x), lambda x, g: (g.sum(),))   # a cotangent of the wrong shape


def clean(w, x):
  return jnp.mean(jnp.sqrt(jnp.sum(cube(x @ w) ** 2, axis=1) + 1.0))


def nan_loss(w, x):   # the issue's: the norm of a zero row has no finite derivative
  return jnp.mean(jnp.sqrt(jnp.sum(cube(x @ w) ** 2, axis=1)))


def broken(w, x):
  return jnp.sum(twisted(x @ w))


def fragile_loss():
  """A loss whose rule's primal raises from its second call: the user's trace runs it once,
  vjpviz's judge of the rule (at random inputs) again."""
  fragile = jax.custom_vjp(_raising_after_first(lambda x: x ** 3))
  fragile.defvjp(lambda x: (x ** 3, x), lambda x, g: (3 * x ** 2 * g,))
  return lambda w, x: jnp.sum(fragile(x @ w))


W = jnp.ones((3, 2))
X = jnp.ones((4, 3)).at[1].set(0.0)


def _failing_call(fn):
  """The user's failing call (its exception is theirs: caught here as their cell would not)."""
  with contextlib.suppress(Exception):
    jax.grad(fn)(W, X)


ANSWERS = {   # entry point -> (ask it about fn, its all-clear)
    "check": (lambda fn, *a: vv.check(fn, *a), lambda r: r == []),
    "gradcheck": (lambda fn, *a: vv.gradcheck(fn, *a, argnums=0), lambda r: not r),
    "nans": (lambda fn, *a: vv.nans(fn, *a), lambda r: r is None),
    "grads": (lambda fn, *a: vv.grads(fn, *a), lambda r: r.healthy),
    "last": (lambda fn, *a: _failing_call(fn) or vv.last(), lambda r: r is None),
    "diagnoses": (lambda fn, *a: _failing_call(fn) or vv.diagnoses(), lambda r: r == []),
    "watch": (lambda fn, *a: _watched(fn, *a), lambda r: r.events() == [] and "finite" in str(r)),
}
NOT_CHECKS = {"Diagnosis", "Fix", "Unchecked", "unchecked", "install", "uninstall", "installed",
              "clear", "surrogate", "apply_fix", "load_ipython_extension",
              "unload_ipython_extension",
              "verify_fix"}   # its [] says the types are fixed; Fix.verdict whether values were
FAILING_CALL = {"last", "diagnoses"}   # they answer about a failing call: asked of ``broken``
ASKED_OF = {"last": broken, "diagnoses": broken,
            "nans": nan_loss}   # vjpviz runs nothing of its own on a finite gradient


@pytest.fixture(autouse=True)
def _uncached():
  """``vv.check`` keeps an established answer per function and types: asked afresh here."""
  importlib.import_module("jupyter_vjpviz.api.check").clear_cache()


def _watched(fn, w, x):
  """A watched train step of ``fn``, called once: its verdict is its events."""
  step = vv.watch(jax.jit(lambda w, x: w - 0.1 * jax.grad(fn)(w, x)))
  step(w, x)
  return step


def test_every_public_name_is_an_answer_or_not_a_check():
  assert set(vv.__all__) == set(ANSWERS) | NOT_CHECKS


@pytest.mark.parametrize("entry", sorted(set(ANSWERS) - FAILING_CALL))
def test_a_clean_program_gets_the_all_clear(hook, entry):
  ask, clear = ANSWERS[entry]
  assert clear(ask(clean, W, X)), entry


def _raising_after_first(fn):
  """``fn``, raising from its second call on (vjpviz's runs of it: the first is the user's)."""
  calls = []

  def wrapped(*args):
    calls.append(1)
    if len(calls) > 1:
      raise RuntimeError("only once")
    return fn(*args)
  wrapped.__name__ = getattr(fn, "__name__", "fn")
  return wrapped


def _inject(monkeypatch, entry):
  """An internal error in the stage ``entry``'s answer rests on."""
  def boom(*a, **k):
    raise RuntimeError("injected")
  if entry == "check":        # the capture of each rule application
    monkeypatch.setattr(check_sites, "_instrumented", boom)
  elif entry == "gradcheck":  # the judge of each rule
    monkeypatch.setattr(oracle.Oracle, "of", boom)
  elif entry == "watch":      # the health each step computes beside its outputs
    monkeypatch.setattr(watch_rows, "health", boom)
  else:                        # the program's graph: the diagnosis, the report, the search
    monkeypatch.setattr(program, "build", boom)


def _no_time(monkeypatch):
  monkeypatch.setattr(replay, "MAIN_FLOOR", 0.0)
  monkeypatch.setattr(replay, "BUDGET", 0.0)


MODES = ("raises in our run", "internal error", "no time", "non-finite", "unreadable input")
SCOPE = {   # (entry, mode) whose all-clear stays true, and why
    ("check", "raises in our run"): "one abstract trace, the user's own: none of vjpviz's",
    ("check", "no time"): "runs none of the user's code: no budget to spend",
    ("check", "non-finite"): "types only; vv.nans and vv.grads judge values",
    ("gradcheck", "no time"): "asked for, not after a failing call: no budget to spend",
    ("gradcheck", "non-finite"): "each rule against its primal's derivative: values of rules, "
                                 "not of the gradient",
    ("last", "non-finite"): "diagnoses failing calls; a NaN gradient raises nothing",
    ("diagnoses", "non-finite"): "as last",
    ("last", "unreadable input"): "the user's own call reads its inputs",
    ("diagnoses", "unreadable input"): "as last",
    ("watch", "raises in our run"): "runs only the user's step, compiled with its health",
    ("watch", "no time"): "as its step runs: no budget to spend",
}


def _deleted(x):
  y = x + 0
  y.delete()
  return y


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("entry", sorted(ANSWERS))
def test_no_entry_point_gives_an_all_clear_it_did_not_establish(hook, monkeypatch, entry, mode):
  if (entry, mode) in SCOPE:
    pytest.skip(SCOPE[(entry, mode)])
  ask, clear = ANSWERS[entry]
  fn, args = ASKED_OF.get(entry, clean), (W, X)
  if mode == "raises in our run":   # gradcheck runs a rule's primal, the user's program never does
    fn = fragile_loss() if entry == "gradcheck" else _raising_after_first(fn)
  elif mode == "internal error":
    _inject(monkeypatch, entry)
  elif mode == "no time":
    _no_time(monkeypatch)
  elif mode == "non-finite":
    fn = nan_loss
  elif mode == "unreadable input":
    args = (_deleted(W), X) if entry in ("nans", "grads", "watch") else (object(), X)
  try:
    answer = ask(fn, *args)
  except Exception as e:  # noqa: BLE001 - raising is no all-clear: its type says whose it is
    assert mode in ("unreadable input",), f"{entry} raised {type(e).__name__}: {e}"
    return
  assert not clear(answer), f"{entry} gave an all-clear under {mode!r}: {answer!r}"
  missed = vv.unchecked(answer)
  if missed is not None:
    assert str(missed).startswith("vjpviz could not check") and missed.reason


def test_an_unchecked_answer_is_truthy_printed_and_found():
  u = vv.Unchecked("vv.nans of loss", "internal error in localise: boom")
  assert u and u is not None and str(u) == "vjpviz could not check vv.nans of loss: internal error in localise: boom"
  assert vv.unchecked(u) is u and vv.unchecked([u]) is u and vv.unchecked([]) is None
  assert vv.unchecked(None) is None


def test_the_line_magics_return_the_entry_points_answers(hook, monkeypatch, capsys):
  from IPython.core.interactiveshell import InteractiveShell
  from jupyter_vjpviz.deliver.magics import VjpvizMagics
  shell = InteractiveShell.instance()
  shell.user_ns.update(loss=clean, w=W, x=X)
  magic = VjpvizMagics(shell=shell).vjpviz
  _inject(monkeypatch, "nans")
  monkeypatch.setattr(check_sites, "_instrumented", lambda *a: 1 / 0)
  assert vv.unchecked(magic("grads loss(w, x)")) is not None
  assert vv.unchecked(magic("check loss(w, x)")) is not None
  assert "loss(w, x): not checked" in capsys.readouterr().out
  shell.user_ns.update(loss=nan_loss)   # the gradient is known non-finite; where, not
  d = magic("nans loss(w, x)")
  assert d.kind == "nonfinite_cotangent" and "NaN of" in d.got, d
  assert "where it went non-finite is unknown: vjpviz failed at it" in capsys.readouterr().out


def test_print_gives_a_diagnosis_as_text_and_its_repr_is_one_short_line(hook):
  d = vv.nans(nan_loss, W, X)
  assert str(d) == d.to_text() and str(d).count("\n") > 3 and "sqrt" in str(d)
  assert repr(d).startswith("<Diagnosis") and "\n" not in repr(d) and len(repr(d)) < 200

