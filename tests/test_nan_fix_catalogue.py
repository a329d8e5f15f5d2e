"""The NaN-fix catalogue against JAX's own list of NaN-producing primitives, and the
generated NaN programs (benchmarks/nan_fixes.py) on a seeded sample small enough for CI:
a fix vjpviz calls verified must pass that file's own check (pasted at its line: the loss
kept, a finite gradient, float64 central differences of the original)."""
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


FAMILIES = ("softplus", "logsumexp", "bce_clamp", "norm_div", "arccos", "atan2", "nan_input")
"""One program of most families (about 30 s of CPU): the others are alike in how they are
fixed (sum_div as norm_div, logaddexp as logsumexp, pow and xlogy as atan2's double
where, distance as the roots that test_nonfinite covers)."""
SEED = 3


@pytest.fixture(scope="module")
def sample():
  hints = []
  table = nan_fixes.run(len(FAMILIES), SEED, families=FAMILIES, out=hints.append)
  return nan_fixes.totals(table), table, "\n".join(hints)


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


# ------------------------------------------------- the programs, as a user wrote them

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jupyter_vjpviz as vv  # noqa: E402


def _line(fn, text: str) -> str:
  import inspect
  lines, first = inspect.getsourcelines(fn)
  return f"{inspect.getsourcefile(fn)}:{first + next(i for i, l in enumerate(lines) if text in l)}"


def logistic(w, x, y):
  z = x @ w
  return jnp.mean(jnp.log(1 + jnp.exp(-y * z)))


def contrastive(w, x):
  logits = x @ w
  e = jnp.exp(logits)
  log_partition = jnp.log(jnp.sum(e, axis=-1))
  return jnp.mean(log_partition - logits[:, 0])


def rodrigues(w, v):
  theta = jnp.linalg.norm(w)
  k = jnp.where(theta > 0, w / theta, 0.0)
  c, s = jnp.cos(theta), jnp.sin(theta)
  return jnp.sum(v * c + jnp.cross(k, v) * s + k * jnp.dot(k, v) * (1 - c))


def _verified(d):
  return d.fixes and d.fixes[0].verdict == "verified"


def test_a_hand_written_softplus_gets_softplus_in_the_users_names():
  w = jnp.array([30.0, -30.0])
  x = jnp.array([[4.0, 0.0], [0.0, 1.0]])
  y = jnp.array([-1.0, 1.0])
  d = vv.nans(logistic, w, x, y)
  assert d.call_site == _line(logistic, "jnp.exp(-y * z)") and _verified(d), d.fixes
  assert "jax.nn.softplus(-y * z)" in d.fixes[0].code


def test_a_log_partition_through_variables_gets_logsumexp_at_the_log():
  w = jnp.array([[100.0, 0.0], [0.0, 1.0]])
  x = jnp.array([[1.0, 0.0], [0.0, 1.0]])
  d = vv.nans(contrastive, w, x)
  assert d.call_site == _line(contrastive, "e = jnp.exp") and _verified(d), d.fixes
  assert d.source == _line(contrastive, "log_partition =")
  assert "jax.nn.logsumexp(logits, axis=-1)" in d.fixes[0].code


def test_rodrigues_at_zero_says_no_single_line_fix_exists():
  d = vv.nans(rodrigues, jnp.zeros(3), jnp.array([1.0, 2.0, 3.0]))
  assert not _verified(d)
  assert "no rewrite of this line alone makes the gradient finite" in d.detail, (d.detail, d.fixes)


def prototypes(w, e, mask):
  u = e / jnp.linalg.norm(e, axis=-1, keepdims=True)
  scores = u @ w
  return jnp.sum(jnp.where(mask, scores, 0.0))


def bce(w, x, y):
  z = x @ w
  p = jax.nn.sigmoid(z)
  nll = y * jnp.maximum(jnp.log(p), -100.0) + (1 - y) * jnp.maximum(jnp.log(1 - p), -100.0)
  return -jnp.mean(nll)


def angles(w, x):
  h = x @ w
  en = h / jnp.linalg.norm(h, axis=-1, keepdims=True)
  cos = en @ en.T
  a = jnp.where(jnp.eye(x.shape[0], dtype=bool), 0.0, jnp.arccos(jnp.clip(cos, -1.0, 1.0)))
  return jnp.mean(a)


def test_a_normalisation_of_zero_rows_names_the_division_and_guards_it():
  e = jnp.array([[1.0, 2.0], [0.0, 0.0], [3.0, -1.0]])
  mask = jnp.array([True, False, True])
  d = vv.nans(prototypes, jnp.ones(2), e, mask)
  assert d.call_site == _line(prototypes, "u = e /") and _verified(d), d.fixes
  assert "safe_norm(e, axis=-1, keepdims=True)" in d.fixes[0].code


def test_a_clamped_bce_of_a_saturated_sigmoid_keeps_the_clamp_in_log_space():
  w = jnp.array([30.0, 1.0])
  x = jnp.array([[-3.2, 0.0], [0.1, 1.0]])
  y = jnp.array([1.0, 0.0])
  d = vv.nans(bce, w, x, y)
  assert d.call_site == _line(bce, "jnp.log(p)") and _verified(d), d.fixes
  assert "jax.nn.log_sigmoid(z)" in d.fixes[0].code and "-100.0" in d.fixes[0].code


def test_arccos_of_identical_pairs_gets_the_double_where():
  x = jnp.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 2.0]])   # unit rows: cos = 1
  w = jnp.eye(3)
  assert not np.isfinite(np.asarray(jax.grad(angles)(w, x))).all()
  d = vv.nans(angles, w, x)
  assert d.call_site == _line(angles, "jnp.arccos") and _verified(d), d.fixes
