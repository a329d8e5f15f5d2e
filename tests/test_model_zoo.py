"""The generated model zoo (benchmarks/model_zoo.py) on a seeded sample small enough for CI:
vjpviz must not crash on a program jax.grad takes, a fix it calls verified must pass the
zoo's own check (same loss, finite gradient, float64 central differences), and a healthy
control must raise no alarm."""
import collections
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import model_zoo  # noqa: E402

DEFECTS = ("control", "stopped", "dead_relu", "lora", "zero_mask", "sqrt", "sqrt_alias",
           "norm", "std", "log_softmax", "where_div", "control")
"""Twelve programs (about 45 s of CPU), two of them controls: most zero reasons, and the
NaN sources with the most fixes to verify."""
SEED = 1
"""A sample that writes these defects their hardest ways: the dead relu as
``jnp.where(z > 0, z, 0.0)``, the constant feature's ``h.std(0)``, a zero mask with
blocks after it."""


@pytest.fixture(scope="module")
def zoo():
  hints = []
  table = model_zoo.run(len(DEFECTS), SEED, defects=DEFECTS, out=hints.append)
  total = collections.Counter()
  for row in table.values():
    total.update(row)
  return total, table, "\n".join(hints)


def test_the_sample_was_built(zoo):
  total, _, hints = zoo
  assert total["programs"] == len(DEFECTS), hints


def test_no_crash(zoo):
  total, _, hints = zoo
  assert total["crash"] == 0, hints


def test_no_verified_fix_is_wrong(zoo):
  total, _, hints = zoo
  assert total["verified-but-wrong"] == 0, hints


def test_no_false_alarm_on_controls(zoo):
  _, table, hints = zoo
  controls = sum(row["false alarm"] for (family, defect), row in table.items()
                 if defect == "control")
  assert controls == 0, hints
