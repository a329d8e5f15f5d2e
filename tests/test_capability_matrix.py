"""The capability matrix (benchmarks/capability_matrix.py) on a seeded sample small enough for CI:
on every sampled cell JAX's error reaches the user unchanged, vjpviz prints no internal-error
line and calls no wrong fix verified; cells known covered stay diagnosed with a first fix
that is right when pasted (the benchmark's own judge, plain JAX against the primal)."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import capability_matrix as matrix  # noqa: E402
import capability_programs as programs  # noqa: E402

SAMPLE, SEED = 12, 3
"""A seeded sample of the whole matrix (about a third of it JAX refuses: cheap)."""

KNOWN_COVERED = (
    programs.Cell("custom_vjp", "grad", "scan", "shape"),
    programs.Cell("custom_vjp", "vjp", "checkpoint", "shape"),
    programs.Cell("custom_vjp", "value_and_grad(argnums=(0, 1))", "cond", "raises"),
    programs.Cell("custom_vjp", "vmap(fwd_and_bwd)", "eager", "shape"),
    programs.Cell("custom_vjp", "fwd_and_bwd", "jit", "dtype"),
    programs.Cell("custom_gradient", "grad", "eager", "structure"),
    programs.Cell("custom_vjp", "value_and_grad(argnums=(0, 1))", "jit", "structure"),
    programs.Cell("defvjp(symbolic_zeros=True)", "grad", "eager", "shape"),
    programs.Cell("defvjp(symbolic_zeros=True)", "grad", "eager", "raises"),
    programs.Cell("hijax", "vjp", "scan", "dtype"),
    programs.Cell("defvjp_with_logs", "grad", "scan", "shape"),   # fixes keep (cts, logs)
    programs.Cell("custom_jvp", "jacfwd", "scan", "raises"),      # a jvp rule that raises
    programs.Cell("custom_jvp", "vmap(grad)", "cond", "raises"),
    programs.Cell("defvjp_with_logs", "value_and_grad(with_logs)", "scan", "raises"),
    programs.Cell("hijax", "grad", "cond", "raises"),             # a HiPrim's bwd that raises
)
"""Cells diagnosed with a right first fix: a regression here is a capability lost."""


@pytest.fixture(scope="module")
def rows():
  every = programs.cells()
  known = [c for c in KNOWN_COVERED if c in every]
  sampled = [c for c in matrix.sample(every, SAMPLE, SEED) if c not in known]
  return {r["cell"]: r for r in matrix.run_all(known + sampled, jobs=1)}, known


def test_jax_error_unchanged(rows):
  assert [c for c, r in rows[0].items() if r["altered"]] == []


def test_no_internal_error_line(rows):
  assert [c for c, r in rows[0].items() if r["internal"]] == []


def test_never_verified_but_wrong(rows):
  assert [(c, r["first_fix"], r["why"]) for c, r in rows[0].items() if r["verified_wrong"]] == []


def test_known_covered_cells_stay_covered(rows):
  found, known = rows
  lost = [(c.stem, found[c.stem]["kind"], found[c.stem]["headline"], found[c.stem]["why"])
          for c in known if not ((found[c.stem]["diagnosed"] or found[c.stem]["warned"])
                                 and found[c.stem]["fix_right"])]
  assert lost == []


def test_the_sample_ran(rows):
  found, known = rows
  assert len(found) >= SAMPLE and all(not found[c.stem]["refused"] for c in known)
