"""The fix-quality benchmark's own judge, so the benchmark cannot silently rot.

``benchmarks/fix_corpus/judge.py`` decides whether a fix is right (type-correct and
equal to ``jax.vjp`` of the primal); these tests hand it fixes whose verdict is
known: the real gradient, zeros, a reshape that only makes the types line up, a
silent dtype, and a sharded rule whose collective is missing.
"""
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

from fix_corpus import judge, rules  # noqa: E402
from fix_corpus.cells import cell  # noqa: E402

BASES = {b.name: b for b in rules.BASES}


def mutant(name: str, note: str) -> judge.Subject:
  """The corpus mutant of base ``name`` described by ``note``, judged against the base's primal."""
  base = BASES[name]
  mutation = next(m for m in base.mutations if m.note == note)
  _, correct = cell(base.code, "harness")
  _, ns = cell(mutation.apply(base.code), "harness")
  return judge.Subject(base, ns, correct[name].fun)


def test_the_real_gradient_is_right_and_the_broken_rule_is_not():
  subject = mutant("linear", "bias gradient not summed over the batch")
  custom_vjp = subject.custom_vjp
  assert not judge.judge_rules(subject, custom_vjp.fwd, custom_vjp.bwd).typed
  fixed = judge.judge_fix(subject, """
def linear_bwd(res, g):
  w, x = res
  return {'w': x.T @ g, 'b': g.sum(0)}, g @ w.T
""", "bwd")
  assert fixed.right and fixed.typed and not fixed.zeros, fixed.detail


def test_zeros_are_well_typed_but_wrong_and_flagged():
  subject = mutant("linear", "bias gradient not summed over the batch")
  verdict = judge.judge_fix(subject, """
def linear_bwd(res, g):
  w, x = res
  return {'w': x.T @ g, 'b': jnp.zeros((3,), jnp.float32)}, g @ w.T
""", "bwd")
  assert verdict.typed and not verdict.right and verdict.zeros
  assert "values differ" in verdict.detail


def test_a_reshape_that_only_fixes_the_type_is_wrong():
  subject = mutant("avg_pool", "repeats along the wrong axis")
  verdict = judge.judge_fix(subject, """
def avg_pool_bwd(size, _, g):
  return (jnp.reshape(jnp.repeat(g, size, axis=0) / size, (3, 8)),)
""", "bwd")
  assert verdict.typed and not verdict.right and not verdict.zeros, verdict.detail


def test_a_silent_dtype_is_a_type_error_and_a_lone_def_replaces_a_lambda_rule():
  subject = mutant("softplus", "bf16 cotangent")
  still = judge.judge_fix(subject, """
def softplus_bwd(x, g):
  return ((g * jax.nn.sigmoid(x)).astype(jnp.bfloat16),)
""", "bwd")
  assert not still.typed and "bfloat16" in still.detail
  fixed = judge.judge_fix(subject, """
def softplus_bwd(x, g):
  return (g * jax.nn.sigmoid(x),)
""", "bwd")
  assert fixed.right, fixed.detail


def test_a_sharded_rule_is_judged_under_shard_map():
  subject = mutant("shard_scale", "the replicated weight's cotangent never psummed")
  custom_vjp = subject.custom_vjp
  assert not judge.judge_rules(subject, custom_vjp.fwd, custom_vjp.bwd).typed   # varying where invariant
  pmean = judge.judge_fix(subject, """
def shard_scale_bwd(res, g):
  x, w = res
  return g * w, jax.lax.pmean((g * x).sum(0), 'dp')
""", "bwd")
  assert pmean.typed and not pmean.right
  psum = judge.judge_fix(subject, """
def shard_scale_bwd(res, g):
  x, w = res
  return g * w, jax.lax.psum((g * x).sum(0), 'dp')
""", "bwd")
  assert psum.right, psum.detail


@pytest.mark.parametrize("name", ["attention", "xent"])
def test_correct_rules_are_right(name):
  base = BASES[name]
  _, ns = cell(base.code, "harness")
  subject = judge.Subject(base, ns, ns[name].fun)
  assert judge.judge_rules(subject, subject.custom_vjp.fwd, subject.custom_vjp.bwd).right


def test_every_mutation_edits_its_rule_once_and_every_kind_is_covered():
  for base in rules.BASES:
    for mutation in base.mutations:
      assert mutation.apply(base.code) != base.code
  assert {m.kind for b in rules.BASES for m in b.mutations} == set(rules.KINDS)
  with pytest.raises(ValueError, match="occurs 0 times"):
    rules.m("dtype", "no such text", "x", "absent").apply(BASES["gelu"].code)


def test_each_held_out_rule_is_right_and_its_wrong_version_is_not():
  """The held-out corpus (``fix_corpus/held_out.py``) judges fixes by its right rules:
  each must equal its reference's autodiff (complex and bfloat16 leaves included), and
  each wrong version must not (a well-typed one by value)."""
  from fix_corpus import held_out
  for n, case in enumerate(held_out.CASES):
    base = case.base()
    _, ns = cell(base.code, "harness")
    subject, draws, right = judge.judged_as_written(base, ns, n)
    assert right.right, (case.name, case.note, right.detail)
    _, wrong_ns = cell(case.mutation().apply(base.code), "harness")
    wrong = judge.judge_rules(subject, *judge.rules_of(wrong_ns[base.name]), draws=draws)
    assert not wrong.right, (case.name, case.note)
    if case.kind in held_out.VALUE_KINDS:
      assert wrong.typed, (case.name, case.note, wrong.detail)


@pytest.mark.needs("bwd check of varying axes")
@pytest.mark.parametrize("name", [b.name for b in rules.BASES if b.specs is not None])
def test_a_sharded_mutant_s_first_fix_was_checked_on_its_mesh(hook, name):
  """Issue 30: the corpus rules run under shard_map have their fixes type-checked and
  judged on the mesh they ran in, so the one that leads is verified there and right by
  the benchmark's own judge (under shard_map too)."""
  import fix_quality
  base = BASES[name]
  _, correct = cell(base.code, "harness")
  rng = np.random.default_rng(0)
  for mutation in base.mutations:
    filename, ns = cell(mutation.apply(base.code), "harness")
    subject = judge.Subject(base, ns, correct[name].fun)
    args = base.args(rng)
    m = fix_quality.Mutant(base, mutation, filename, subject, args,
                           judge.cotangent(subject, args, rng), draws=None)
    hook.clear()
    with pytest.raises(ValueError):
      fix_quality.failing_grad(m)()
    first = hook.last().fixes[0]
    assert first.verdict == "verified" and "shard_map over an equivalent mesh" in first.note, \
        (mutation.note, first.title, first.note)
    verdict = judge.judge_fix(subject, first.code, "bwd")
    assert verdict.right, (mutation.note, first.title, verdict.detail)
