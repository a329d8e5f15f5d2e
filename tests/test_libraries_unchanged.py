"""Correct code is unchanged: real training steps give the same bits with vjpviz on.

The steps are ``benchmarks/library_overhead.py``'s (so the benchmark measures
what this checks): equinox + optax (an MLP, and a model whose layers are an
``eqx.filter_custom_vjp``), flax nnx + optax with a ``jax.custom_vjp`` inside,
linen ``nn.scan(nn.remat(Block))`` with an ``nn.custom_vjp`` in the block,
diffrax with ``RecursiveCheckpointAdjoint`` and ``BacksolveAdjoint``, an
optimistix root find (implicit differentiation) and a lineax solve. Each runs a
few steps without vjpviz, with it, and without it again, every run on a fresh
step function (so it traces under that state), from the same initial model;
the loss, every gradient and every updated parameter of every step must be
bitwise equal, vjpviz must not have diagnosed anything, and must not have said
it could not do something.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.experimental.compilation_cache import compilation_cache

import jupyter_vjpviz as vv
from jupyter_vjpviz.capture.sites.check_sites import rule_applied

ROOT = Path(__file__).resolve().parents[1]
STEPS = 3


def _bench():
  spec = importlib.util.spec_from_file_location(
      "library_overhead", ROOT / "benchmarks/library_overhead.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module   # its dataclasses look their module up
  spec.loader.exec_module(module)
  return module


pytest.importorskip("diffrax")   # the benchmark's libraries: not installed with an older JAX
bench = _bench()


_CACHE_CONFIG = {"jax_compilation_cache_dir": None,
                 "jax_persistent_cache_min_compile_time_secs": 0,
                 "jax_persistent_cache_min_entry_size_bytes": -1}


@pytest.fixture(scope="module", autouse=True)
def _compile_identical_programs_once(tmp_path_factory):
  """XLA compiles each distinct program once in this file (JAX's persistent cache, in a
  fresh directory): the cache is keyed by the program itself, so a run whose program
  differs still compiles its own, and the runs it spares are the file's slow half."""
  saved = {name: getattr(jax.config, name) for name in _CACHE_CONFIG}
  config = dict(_CACHE_CONFIG, jax_compilation_cache_dir=str(tmp_path_factory.mktemp("xla")))
  for name, value in config.items():
    jax.config.update(name, value)
  compilation_cache.reset_cache()
  yield
  for name, value in saved.items():
    jax.config.update(name, value)
  compilation_cache.reset_cache()


def _outputs(tree) -> tuple:
  """A step's outputs as host arrays, with their tree structure."""
  leaves, treedef = jax.tree.flatten(tree)
  return treedef, [np.asarray(leaf) for leaf in leaves]


def _run(workload, init, hooked: bool) -> tuple[list, int]:
  """``STEPS`` steps of a fresh step function, and how many custom_vjp calls vjpviz saw."""
  vv.install() if hooked else vv.uninstall()
  seen = []
  with rule_applied.listening(lambda cvjp, args, kwargs: seen.append(cvjp)):
    step = workload.steps(init)
    outs = [_outputs(step()) for _ in range(STEPS)]
  return outs, len(seen)


def _assert_bitwise(want: list, got: list) -> None:
  for (want_tree, want_leaves), (got_tree, got_leaves) in zip(want, got, strict=True):
    assert got_tree == want_tree
    for a, b in zip(want_leaves, got_leaves, strict=True):
      np.testing.assert_array_equal(b, a, strict=True)
      assert b.tobytes() == a.tobytes()   # also -0.0 vs 0.0 and NaN payloads


NO_CUSTOM_VJP = {"equinox MLP + optax", "optimistix root_find", "lineax linear_solve"}
"""Workloads without a custom_vjp (optimistix and lineax differentiate through custom
JVPs); every other one must have gone through vjpviz's instrumented rules."""


@pytest.mark.parametrize("name", bench.WORKLOADS)
def test_training_steps_are_bitwise_unchanged(name, capfd):
  """Off, on, off: both orders, so neither install nor uninstall may leave a trace."""
  workload = bench.WORKLOADS[name]
  init = workload.init()    # the same initial model and data for every run
  vv.clear()
  try:
    plain, _ = _run(workload, init, hooked=False)
    hooked, applications = _run(workload, init, hooked=True)
    diagnoses = vv.diagnoses()
    plain_again, _ = _run(workload, init, hooked=False)
  finally:
    vv.uninstall()
    vv.clear()
  _assert_bitwise(plain, hooked)
  _assert_bitwise(plain, plain_again)
  assert diagnoses == []
  assert "vjpviz: could not" not in capfd.readouterr().err
  assert applications or name in NO_CUSTOM_VJP
