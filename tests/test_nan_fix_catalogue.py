"""The NaN-fix catalogue against JAX's own list of NaN-producing primitives, and the
generated NaN programs (benchmarks/nan_fixes.py) on a seeded sample small enough for CI:
a fix vjpviz calls verified must pass that file's own check (pasted at its line: the loss
kept, a finite gradient, float64 central differences of the original)."""
import collections
import pathlib
import sys

import pytest
from jax._src import checkify

from jupyter_vjpviz.fixes import nonfinite
from jupyter_vjpviz.fixes.nonfinite import checklist

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import nan_fixes  # noqa: E402


def test_every_nan_producing_primitive_has_a_family_or_a_reason():
  covered = checklist.covered(nonfinite.REGISTRY)
  names = {p.name for p in checkify.nan_primitives}
  missing = sorted(n for n in names if n not in covered and n not in checklist.NO_STABLE_REWRITE)
  assert not missing, missing
  both = sorted(n for n in names if n in covered and n in checklist.NO_STABLE_REWRITE)
  assert not both, both


def test_the_newer_primitives_are_on_the_list_where_jax_has_them():
  names = {p.name for p in checkify.nan_primitives}
  covered = checklist.covered(nonfinite.REGISTRY)
  for name in ("exp2m1", "log2p1", "acospi", "asinpi", "atan2pi"):
    assert name not in names or name in covered, name


FAMILIES = ("softplus", "logsumexp", "bce_clamp", "norm_div", "arccos", "atan2", "pow",
            "xlogy", "sum_div", "logaddexp", "distance", "nan_input")
SEED = 3


@pytest.fixture(scope="module")
def sample():
  hints = []
  table = nan_fixes.run(len(FAMILIES), SEED, families=FAMILIES, out=hints.append)
  total = collections.Counter()
  for row in table.values():
    total.update(row)
  return total, table, "\n".join(hints)


def test_the_sample_was_built(sample):
  total, _, hints = sample
  assert total["programs"] == len(FAMILIES), hints


def test_no_crash_and_no_verified_fix_is_wrong(sample):
  total, _, hints = sample
  assert total["crash"] == 0 and total["verified-but-wrong"] == 0, hints


def test_the_line_that_made_it_is_named(sample):
  total, _, hints = sample
  assert total["line right"] >= total["programs"] - 1, hints


def test_most_programs_with_a_stable_rewrite_get_one_verified(sample):
  _, table, hints = sample
  stable, right = nan_fixes.goal(table)
  assert right >= stable - 2, hints
