"""vjpviz.gradcheck on well-typed value bugs: found, false alarms, and what it costs.

The correct rules of ``fix_corpus/rules.py`` (those not under shard_map), each
called inside a jitted scan of a small model, and four well-typed mutants of
each, made by wrapping its bwd (the first floating cotangent doubled, negated,
zeroed, or shifted by 0.1). Prints the mutants gradcheck reports as
``bwd_value``, the correct rules it reports (false alarms), rules it cannot
judge, and per model the seconds of one gradcheck, and their ratio to one cold
``jax.grad`` of the same model (both after a warm-up, in one process).

    PYTHONPATH=.:benchmarks .venv/bin/python benchmarks/gradcheck_values.py
"""
from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jupyter_vjpviz as vv
from fix_corpus.cells import cell
from fix_corpus.rules import BASES

MUTANTS = {"doubled": lambda c: 2 * c, "negated": lambda c: -c,
           "zeroed": jnp.zeros_like, "shifted": lambda c: c + 0.1}


def _mutated(cvjp, change):
  """``cvjp`` with its first floating cotangent changed: same types, wrong values."""
  bwd = cvjp.bwd

  def mutant_bwd(*args):
    cts = bwd(*args)
    leaves, tree = jax.tree_util.tree_flatten(cts)
    first = next(i for i, l in enumerate(leaves) if jnp.issubdtype(l.dtype, jnp.inexact))
    leaves[first] = change(leaves[first])
    return jax.tree_util.tree_unflatten(tree, leaves)
  cvjp.defvjp(cvjp.fwd, mutant_bwd, symbolic_zeros=cvjp.symbolic_zeros)
  return cvjp


def _model(rule, args):
  """The rule applied inside a jitted scan, three times: deep, like in a real model."""
  floats = [i for i, a in enumerate(args) if _floating(a)]

  @jax.jit
  def loss(*dyn):
    full = list(args)
    for i, d in zip(floats, dyn):
      full[i] = d

    def body(c, _):
      out = rule(*full)
      return c + sum(jnp.sum(jnp.sin(o)) for o in jax.tree_util.tree_leaves(out)
                     if jnp.issubdtype(o.dtype, jnp.inexact)), None
    return jax.lax.scan(body, 0.0, None, length=3)[0]
  return loss, [args[i] for i in floats]


def _floating(tree) -> bool:
  leaves = jax.tree_util.tree_leaves(tree)
  return bool(leaves) and all(hasattr(l, "dtype") and jnp.issubdtype(l.dtype, jnp.inexact)
                              for l in leaves)


def _fresh(base):
  _, ns = cell(base.code, tag="gradcheck")
  return ns[base.name]


def _seconds(fn, *args, cold: bool = False) -> float:
  """Seconds of ``fn(*args)`` after one warm-up call; ``cold``: with JAX's caches cleared
  (gradcheck clears them itself, so the fair baseline is a grad that traces and compiles)."""
  fn(*args)
  if cold:
    jax.clear_caches()
  start = time.perf_counter()
  fn(*args)
  return time.perf_counter() - start


def main() -> None:
  rng = np.random.default_rng(0)
  found, missed, false_alarms, not_judged, ratios, seconds = 0, [], [], [], [], []
  for base in (b for b in BASES if b.specs is None):
    args = base.args(rng)
    loss, dyn = _model(_fresh(base), args)
    result = vv.gradcheck(loss, *dyn)
    false_alarms += [base.name] * len(result)
    not_judged += [f"{base.name}: {r.reason}" for r in result.not_judged]
    grad_s = _seconds(lambda *d: jax.block_until_ready(jax.grad(loss, range(len(d)))(*d)), *dyn,
                      cold=True)
    seconds.append(_seconds(lambda *d: vv.gradcheck(loss, *d), *dyn))
    ratios.append(seconds[-1] / grad_s)
    print(f"  {base.name}: {len(result)} warnings, {len(result.not_judged)} not judged, "
          f"{seconds[-1]:.2f} s, {ratios[-1]:.1f}x a cold grad", flush=True)
    if result.not_judged:
      continue
    for kind, change in MUTANTS.items():
      mutant, mdyn = _model(_mutated(_fresh(base), change), args)
      if len(vv.gradcheck(mutant, *mdyn)) == 1:
        found += 1
      else:
        missed.append(f"{base.name}/{kind}")
  total = found + len(missed)
  print(f"well-typed value mutants reported as bwd_value: {found}/{total}")
  print(f"  missed: {', '.join(missed) or 'none'}")
  print(f"correct rules reported (false alarms): {len(false_alarms)} {false_alarms or ''}")
  print(f"rules not judged (no oracle): {len(not_judged)}")
  for line in not_judged:
    print(f"  {line[:150]}")
  print(f"gradcheck per model: median {statistics.median(seconds):.2f} s, max "
        f"{max(seconds):.2f} s; over one cold jax.grad (trace + compile): median "
        f"{statistics.median(ratios):.1f}x, max {max(ratios):.1f}x ({len(ratios)} models)")


if __name__ == "__main__":
  main()
