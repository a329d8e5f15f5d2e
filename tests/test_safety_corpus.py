"""vjpviz on leaves the user's program as it was: small instances of benchmarks/safety_corpus,
each run plain and hooked in fresh processes, must print, write and raise the same.

Correctness only (stdout, files, exception type/message/notes/frames); the timings and
memory are the benchmark's to report. A hooked run past the timeout is a failure.
"""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
import safety_corpus  # noqa: E402

TIMEOUT = 180.0
"""Seconds per process: generous (a loaded machine); a run this long has hung."""


@pytest.mark.parametrize("name", [
    "forward_shape_error",      # JAX's error outside any rule
    "training_fails_at_step",   # two steps' output and log lines, then the rule's error
    "bwd_raises",               # the rule's own Python error, its frames
])
def test_hooked_run_prints_writes_and_raises_as_plain(name):
  (row,) = safety_corpus.measure([name], quick=True, timeout=TIMEOUT)
  assert not row.plain.timed_out and not row.hooked.timed_out
  assert row.plain.exception is not None   # each fails: the exception is compared, not absent
  assert row.hooked.stdout == row.plain.stdout
  assert row.hooked.files == row.plain.files
  assert row.hooked.exception == row.plain.exception


@pytest.mark.parametrize("name", [
    "nans_effects",    # vv.nans: the search and the fix's check print and log nothing more
    "grads_effects",   # vv.grads: the backward pass's run of the scan prints nothing more
])
def test_a_check_asked_for_prints_and_writes_as_the_plain_gradient(name):
  (row,) = safety_corpus.measure([name], quick=True, timeout=TIMEOUT)
  assert not row.plain.timed_out and not row.hooked.timed_out
  assert row.plain.exception is None and row.hooked.exception is None
  assert row.plain.stdout and row.plain.files   # the program printed and logged: compared
  assert row.hooked.stdout == row.plain.stdout
  assert row.hooked.files == row.plain.files
