"""Fix quality: how often vjpviz's suggested fixes are right, judged by the primal's own autodiff.

Builds a corpus of broken rules by mutating correct ``jax.custom_vjp`` rules of the
kinds real models use (``fix_corpus/rules.py``; each correct rule is first asserted
equal to ``jax.vjp`` of its primal). Each mutant is a notebook-like cell (source in
linecache). With vjpviz installed, ``jax.grad`` of a loss using the rule runs at
concrete random inputs; the mutants kept are those where JAX raises at a cotangent
check or vjpviz warns (a mutant whose own code raises is a different bug and is
dropped, as is one nobody notices). Every fix of the first diagnosis is then judged
by ``fix_corpus/judge.py``, independently of what vjpviz claims: right means
type-correct and equal to the reference at several random inputs and cotangents.

Times, per mutant, in one process:
  fixes ready   seconds inside ``fixes.suggest.attach`` during the failing grad (the
                stage that turns a diagnosis into its fixes);
  error path    (failing grad with vjpviz) - (the same failing grad without it): the
                whole diagnosis, graph and fixes, from JAX's error to ``vv.last()``.
Both also on a sample of mutants behind a ~4k-equation prefix, under jit.

    PYTHONPATH=. .venv/bin/python benchmarks/fix_quality.py [--verbose] [--no-deep]
"""
from __future__ import annotations

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                             + " --xla_force_host_platform_device_count=4").strip()

import argparse  # noqa: E402
import collections  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import inspect  # noqa: E402
import io  # noqa: E402
import pathlib  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jupyter_vjpviz as vv  # noqa: E402
from jupyter_vjpviz.base import kinds  # noqa: E402
from fix_corpus import judge  # noqa: E402
from fix_corpus.cells import cell  # noqa: E402
from fix_corpus import held_out, shapes  # noqa: E402
from fix_corpus.rules import BASES, KINDS, Base, Mutation  # noqa: E402

DEEP_STEPS = 1350          # 3 equations each: the prefix makes a ~4k-equation program
DEEP_SAMPLE = 5            # mutants timed behind it (one per mutation kind)


@dataclasses.dataclass
class Run:
  """One failing grad: what it raised (type, message) and how long it took."""
  error: tuple[str, str] | None
  seconds: np.ndarray       # (wall, process CPU)
  in_rule: bool = False     # raised while the rule's own code ran (not at a cotangent check)
  attach: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(2))   # in suggest.attach
  attach_calls: int = 0
  found: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Mutant:
  base: Base
  mutation: Mutation
  filename: str
  subject: judge.Subject
  args: tuple
  weights: Any
  draws: list                   # the reference's answers at random points, shared by the base
  hooked: Run | None = None
  plain: Run | None = None
  verdicts: list = dataclasses.field(default_factory=list)

  @property
  def label(self) -> str:
    return f"{self.base.name}/{self.mutation.kind}"

  @property
  def diagnosis(self):
    """The diagnosis the user reads first: the error's, else the first warning."""
    found = self.hooked.found
    errors = [d for d in found if d.severity == "error"]
    return (errors or found or [None])[0]

  @property
  def kept(self) -> bool:
    if self.plain.in_rule and self.mutation.kind not in shapes.RAISING:
      return False
    return self.plain.error is not None or any(d.severity != "error" for d in self.hooked.found)


# ----------------------------------------------------------------- corpus

def build() -> list[Mutant]:
  """Every mutant of every base, each base first verified against its primal's autodiff."""
  mutants = []
  for n, base in enumerate(BASES):
    _, ns = cell(base.code)
    subject = judge.Subject(base, ns, ns[base.name].fun)
    draws = judge.references(subject, seed=n)
    verdict = judge.judge_rules(subject, subject.custom_vjp.fwd, subject.custom_vjp.bwd, draws=draws)
    assert verdict.right, f"the correct {base.name} rule is not right: {verdict.detail}"
    for k, mutation in enumerate(base.mutations):
      filename, mns = cell(mutation.apply(base.code))
      assert _same_code(mns[base.name].fun, subject.reference), f"{mutation.note} edits the primal"
      rng = np.random.default_rng(100 * n + k)
      args = base.args(rng)
      weights = judge.cotangent(subject, args, rng)
      mutants.append(Mutant(base, mutation, filename, judge.Subject(base, mns, subject.reference),
                            args, weights, draws))
  return mutants


def build_held_out(cases: tuple = held_out.CASES + shapes.CASES) -> list[Mutant]:
  """One mutant per held-out case: its right rule verified against its reference first."""
  mutants = []
  for n, case in enumerate(cases):
    base = case.base()
    _, ns = cell(base.code, "heldout")
    subject, draws, verdict = judge.judged_as_written(base, ns, n)
    assert verdict.right, f"the right {base.name} rule is not right: {verdict.detail}"
    filename, mns = cell(case.mutation().apply(base.code), "heldout")
    assert _same_code(mns[base.name].fun, ns[base.name].fun), f"{case.note} edits the primal"
    rng = np.random.default_rng(500 + n)
    args = jax.tree_util.tree_map(  # as users pass them (see judge.vjp_at on numpy arguments)
        lambda a: jnp.asarray(a) if isinstance(a, np.ndarray) else a, base.args(rng))
    mutants.append(Mutant(base, case.mutation(), filename, judge.Subject(base, mns, subject.reference),
                          args, judge.cotangent(subject, args, rng), draws))
  return mutants


def _same_code(f, g) -> bool:
  f, g = inspect.unwrap(f), inspect.unwrap(g)   # a jitted primal
  return f.__code__.co_code == g.__code__.co_code and f.__code__.co_consts == g.__code__.co_consts


# ------------------------------------------------------------ failing grads

def loss_of(m: Mutant, deep: int = 0):
  """(``sum(rule(*args) * weights)`` taking ``(*args, weights)``, the differentiable argnums).

  ``deep`` > 0 puts a chain of ``3 * deep`` elementwise equations before the rule,
  so the program is as big as a real model's.
  """
  custom_vjp, args = m.subject.custom_vjp, m.args
  argnums = tuple(i for i, a in enumerate(args)
                  if i not in custom_vjp.nondiff_argnums and _floating(a))
  call = m.subject.ns.get("use", custom_vjp)   # the rule in its context (scan, vmap), if given

  def loss(*a):
    *a, weights = a
    if deep:
      a[argnums[0]] = _prefixed(a[argnums[0]], deep)
    out = call(*a)
    return sum(jnp.real(o * w).sum() for o, w in zip(jax.tree_util.tree_leaves(out),
                                                     jax.tree_util.tree_leaves(weights)))
  return loss, argnums


def failing_grad(m: Mutant, deep: int = 0):
  """A thunk running ``jax.grad`` of the loss (under shard_map if the rule needs it; jit if deep)."""
  loss, argnums = loss_of(m, deep)
  grad = jax.grad(loss, argnums)
  nondiff = m.subject.custom_vjp.nondiff_argnums
  if m.base.specs is not None:
    in_specs, out_spec = judge.specs(m.base)
    run = jax.jit(jax.shard_map(lambda a, w: grad(*a, w), mesh=judge.mesh(),
                                in_specs=(in_specs, out_spec),
                                out_specs=tuple(in_specs[i] for i in argnums)))
    return lambda: run(m.args, m.weights)
  if deep:
    run = jax.jit(grad, static_argnums=nondiff)
    return lambda: run(*m.args, m.weights)
  return lambda: grad(*m.args, m.weights)


def equations(m: Mutant, deep: int) -> int:
  """Top-level equations of the deep loss (the custom rule counts as one)."""
  loss, _ = loss_of(m, deep)
  nondiff = m.subject.custom_vjp.nondiff_argnums
  return len(jax.make_jaxpr(loss, static_argnums=nondiff)(*m.args, m.weights).jaxpr.eqns)


def _floating(tree) -> bool:
  return all(jnp.issubdtype(jnp.result_type(leaf), jnp.inexact)
             for leaf in jax.tree_util.tree_leaves(tree))


def _prefixed(tree, steps: int):
  """``tree`` with ``3 * steps`` equations in front of its first leaf, none of them differentiated.

  vjpviz analyses the forward program, so these equations cost it what a model's
  would; JAX only stages them (the gradient is unchanged, and far cheaper to take).
  """
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  y = jax.lax.stop_gradient(leaves[0])
  c = jnp.full(y.shape, 1e-3, y.dtype)
  for _ in range(steps):   # lax, not jnp: each jnp call would be a nested jit
    y = jax.lax.add(y, jax.lax.mul(c, jax.lax.sin(y)))
  return jax.tree_util.tree_unflatten(treedef, [leaves[0] + 0. * y, *leaves[1:]])


def clock() -> np.ndarray:
  """(wall, process CPU) seconds: on a loaded machine CPU time is the closer estimate of idle wall time."""
  return np.array([time.perf_counter(), time.process_time()])


class AttachTimer:
  """Seconds spent in ``fixes.suggest.attach`` (looked up by the runtime at each call)."""

  def __init__(self):
    from jupyter_vjpviz.fixes import suggest
    self.module, self.inner = suggest, suggest.attach
    self.seconds, self.calls = np.zeros(2), 0

  def __enter__(self):
    def timed(*a, **k):
      t = clock()
      try:
        return self.inner(*a, **k)
      finally:
        self.seconds += clock() - t
        self.calls += 1
    self.module.attach = timed
    return self

  def __exit__(self, *exc):
    self.module.attach = self.inner


def run(m: Mutant, thunk, hooked: bool, stderr: io.StringIO, values: bool = False) -> Run:
  if hooked:
    vv.clear()
  timer = AttachTimer() if hooked else contextlib.nullcontext()
  error, in_rule = None, False
  with timer, contextlib.redirect_stderr(stderr):
    t = clock()
    try:
      jax.block_until_ready(thunk())
    except Exception as e:  # noqa: BLE001 - the failure is the point
      seconds = clock() - t
      error = (type(e).__name__, str(e))
      in_rule = any(f.f_code.co_filename == m.filename for f, _ in traceback.walk_tb(e.__traceback__))
    else:
      seconds = clock() - t
  result = Run(error, seconds, in_rule)
  if hooked:
    result.found = vv.diagnoses()
    result.attach, result.attach_calls = timer.seconds, timer.calls
    if values and error is None and not result.found:
      with contextlib.redirect_stderr(stderr):
        result.found = list(gradcheck(m))
  return result


def gradcheck(m: Mutant):
  """``vv.gradcheck`` of the mutant's loss: how a well-typed wrong rule is found."""
  loss, argnums = loss_of(m)

  def of_differentiated(*d):   # the rest (static sizes and axes, integer labels) closed over
    full = list(m.args)
    for i, v in zip(argnums, d):
      full[i] = v
    return loss(*full, m.weights)
  return vv.gradcheck(of_differentiated, *[m.args[i] for i in argnums])


def run_all(mutants: list[Mutant], deep: int = 0, values: bool = False
            ) -> tuple[list[Run], list[Run], str]:
  """Hooked runs first (install clears JAX's caches), then plain ones (uninstall clears them again).

  ``values``: a hooked grad that neither raises nor warns is then ``vv.gradcheck``ed.
  """
  stderr = io.StringIO()
  vv.install()
  try:
    hooked = [run(m, failing_grad(m, deep), True, stderr, values) for m in mutants]
  finally:
    vv.uninstall()
  plain = [run(m, failing_grad(m, deep), False, stderr) for m in mutants]
  return hooked, plain, stderr.getvalue()


# ------------------------------------------------------------------ judging

def judge_fixes(m: Mutant) -> list[judge.Verdict]:
  d = m.diagnosis
  if d is None or not d.fixes:
    return []
  role = kinds.of(d.kind).role or "bwd"
  return [judge.judge_fix(m.subject, fix.code, role, m.draws) for fix in d.fixes]


# ------------------------------------------------------------------ report

def pct(n: int, total: int) -> str:
  return f"{100 * n / total:5.1f}%" if total else "  n/a"


def quantiles(xs: list[float]) -> tuple[float, float]:
  xs = sorted(xs)
  if not xs:
    return float("nan"), float("nan")
  return statistics.median(xs), xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]


def summary(kept: list[Mutant]) -> dict:
  first = lambda m: m.verdicts[0] if m.verdicts else None
  return dict(
      n=len(kept),
      first=sum(1 for m in kept if first(m) and first(m).right),
      top3=sum(1 for m in kept if any(v.right for v in m.verdicts[:3])),
      any=sum(1 for m in kept if any(v.right for v in m.verdicts)),
      zeros=sum(1 for m in kept if first(m) and first(m).zeros),
      typed=sum(1 for m in kept if first(m) and first(m).typed),
      none=sum(1 for m in kept if not m.verdicts),
  )


def report(mutants: list[Mutant], deep: list[Mutant], deep_eqns: int, stderr: str, verbose: bool,
           kinds: tuple[str, ...] = KINDS):
  kept = [m for m in mutants if m.kept]
  print(f"corpus: {len({m.base.code for m in mutants})} correct rules (each equal to jax.vjp of "
        f"its reference), {len(mutants)} mutants, {len(kept)} kept")
  dropped_rule = sum(1 for m in mutants if m.plain.in_rule and not m.kept)
  dropped_silent = len(mutants) - len(kept) - dropped_rule
  print(f"  dropped: {dropped_rule} raise inside the rule's own code, "
        f"{dropped_silent} neither raise nor warn")
  print(f"\n{'kind':16s} {'kept':>4s} {'drop':>4s} {'first':>6s} {'top3':>6s} {'any':>6s} "
        f"{'zeros@1':>7s} {'nofix':>6s}")
  for kind in kinds:
    group = [m for m in kept if m.mutation.kind == kind]
    dropped = sum(1 for m in mutants if m.mutation.kind == kind and not m.kept)
    s = summary(group)
    print(f"{kind:16s} {s['n']:4d} {dropped:4d} {pct(s['first'], s['n'])} {pct(s['top3'], s['n'])} "
          f"{pct(s['any'], s['n'])}  {pct(s['zeros'], s['n'])} {pct(s['none'], s['n'])}")
  s = summary(kept)
  print(f"\nfirst fix right:            {pct(s['first'], s['n'])}   (target >= 90%)")
  print(f"right in top 3:             {pct(s['top3'], s['n'])}")
  print(f"any fix right:              {pct(s['any'], s['n'])}")
  print(f"zeros offered first:        {pct(s['zeros'], s['n'])}   (first fix returns zeros where "
        f"the reference is non-zero; target 0)")
  print(f"first fix type-correct:     {pct(s['typed'], s['n'])}")
  print(f"no fix at all:              {pct(s['none'], s['n'])}   "
        f"({sum(1 for m in kept if m.diagnosis is None)} without a diagnosis)")
  claims = [(getattr(f, "exact", False), v.right) for m in kept
            for f, v in zip(m.diagnosis.fixes if m.diagnosis else (), m.verdicts)]
  print(f"Fix.exact claims:           {sum(1 for e, r in claims if e and r)} right, "
        f"{sum(1 for e, r in claims if e and not r)} wrong; "
        f"{sum(1 for e, r in claims if r and not e)} right fixes not marked exact")
  verdicts(kept)
  altered = [m.label for m in kept if m.plain.error != m.hooked.error]
  print(f"user's error altered:       {len(altered)}{' ' + ', '.join(altered) if altered else ''}")
  internal = [l for l in stderr.splitlines() if l.startswith("vjpviz: could not")]
  print(f"vjpviz internal errors:     {len(internal)}")
  timings("small rules, eager", kept)
  if deep:
    timings(f"~{deep_eqns} equations, jit", [m for m in deep if m.kept])
  if verbose:
    table(mutants)
    for line in sorted(set(internal)):
      print("  " + line)


def verdicts(kept: list[Mutant]):
  """vjpviz's own verdicts (Fix.verdict) against the benchmark's judge."""
  pairs = [(m, f, v) for m in kept for f, v in zip(m.diagnosis.fixes if m.diagnosis else (),
                                                    m.verdicts)]
  wrong = [f"{m.label}: {f.title}" for m, f, v in pairs if f.verdict == "verified" and not v.right]
  print(f"verified but wrong:         {len(wrong)}   (target 0){''.join(chr(10) + '  ' + w for w in wrong)}")
  behind = [m.label for m in kept if m.verdicts and not m.verdicts[0].right
            and any(v.right for v in m.verdicts[1:])]
  print(f"a right fix behind a wrong first: {len(behind)}{' ' + ', '.join(behind) if behind else ''}")
  unverifiable = [m for m in kept if m.diagnosis and m.diagnosis.fixes
                  and m.diagnosis.fixes[0].verdict == "unverifiable"]
  print(f"first fix unverifiable:     {pct(len(unverifiable), len(kept))}")
  for m in unverifiable:
    print(f"  {m.label}: {m.diagnosis.fixes[0].note[:150]}")
  fallback = [m for m in kept if m.diagnosis and m.diagnosis.fixes
               and " by differentiating " in m.diagnosis.fixes[0].title]
  print(f"first fix differentiates the primal: {pct(len(fallback), len(kept))}   (right, but "
        "an extra forward pass: a fix in the rule's own terms reads better)")
  deliberate = [m for m in kept if m.base.rtol]
  if deliberate:
    kept_own = [m for m in deliberate if m not in fallback and m.verdicts and m.verdicts[0].right]
    print(f"own precision kept first:   {len(kept_own)} of {len(deliberate)}   (rules computing "
          "in a lower precision on purpose: the right first fix keeps that arithmetic)")
  found = collections.Counter(m.diagnosis.kind if m.diagnosis else "-" for m in kept)
  print(f"diagnoses:                  {dict(found)}")


def timings(title: str, kept: list[Mutant]):
  attach = [m.hooked.attach for m in kept if m.hooked.attach_calls]
  path = [m.hooked.seconds - m.plain.seconds for m in kept]
  print(f"\ntimes, {title} ({len(kept)} mutants), ms, median / p90, wall and process CPU:")
  if attach:
    print(f"  fixes ready (in suggest.attach):         {_ms(attach)}   (target <= 1000 ms)")
  else:
    print("  fixes ready: suggest.attach was never called (the runtime no longer calls it by "
          "that name); see the error path")
  print(f"  error path (grad with vjpviz - without): {_ms(path)}   (JAX's error to vv.last(): "
        "hook, diagnosis, graph, fixes)")


def _ms(pairs: list[np.ndarray]) -> str:
  wall = quantiles([1e3 * p[0] for p in pairs])
  cpu = quantiles([1e3 * p[1] for p in pairs])
  return f"wall {wall[0]:7.1f} / {wall[1]:7.1f}   cpu {cpu[0]:7.1f} / {cpu[1]:7.1f}"


def table(mutants: list[Mutant]):
  print(f"\n{'mutant':28s} {'kept':4s} {'diagnosis':14s} {'fixes':10s} {'ms':>6s}  first fix / why")
  for m in mutants:
    d = m.diagnosis
    fixes = d.fixes if d is not None else ()
    marks = "".join(("R" if v.right else "T" if v.typed else "x")
                    + ("!" if getattr(f, "exact", False) and not v.right else "")
                    for f, v in zip(fixes, m.verdicts)) or "-"
    marks += "0" if m.verdicts and m.verdicts[0].zeros else ""
    first = (d.fixes[0].title if d is not None and d.fixes else
             "(raised in the rule)" if m.plain.in_rule else "(no fix)")
    why = m.verdicts[0].detail if m.verdicts and not m.verdicts[0].right else ""
    print(f"{m.label:28s} {'yes' if m.kept else 'no':4s} {d.kind if d else '-':14s} {marks:10s} "
          f"{1e3 * m.hooked.attach[0]:6.0f}  {m.mutation.note}: {first}{' -- ' + why if why else ''}")
  print("fixes: R right, T type-correct only, x wrong type or does not run; ! claimed exact but "
        "not right; 0: first fix zeros a non-zero gradient; ms: wall in suggest.attach")


def deep_sample(mutants: list[Mutant]) -> list[Mutant]:
  """The first kept mutant of each kind (not under shard_map), again behind the big prefix."""
  sample = {}
  for m in mutants:
    if m.kept and m.base.specs is None and m.mutation.kind not in sample:
      sample[m.mutation.kind] = dataclasses.replace(m, hooked=None, plain=None, verdicts=[])
  return list(sample.values())[:DEEP_SAMPLE]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--verbose", action="store_true", help="a row per mutant")
  parser.add_argument("--no-deep", action="store_true", help="skip the ~4k-equation timings")
  parser.add_argument("--held-out", action="store_true",
                      help="the held-out corpus (fix_corpus/held_out.py and shapes.py; well-typed "
                      "wrong rules found by vv.gradcheck), no deep timings")
  parser.add_argument("--shapes", action="store_true",
                      help="only fix_corpus/shapes.py of the held-out corpus")
  opts = parser.parse_args(argv)
  t0 = time.perf_counter()
  opts.held_out = opts.held_out or opts.shapes
  mutants = (build_held_out(shapes.CASES) if opts.shapes else build_held_out() if opts.held_out
             else build())
  hooked, plain, stderr = run_all(mutants, values=opts.held_out)
  for m, h, p in zip(mutants, hooked, plain):
    m.hooked, m.plain = h, p
  for m in mutants:
    if m.kept:
      m.verdicts = judge_fixes(m)
  deep, eqns = [], 0
  if not (opts.no_deep or opts.held_out):
    deep = deep_sample(mutants)
    eqns = equations(deep[0], DEEP_STEPS) if deep else 0
    hooked, plain, more = run_all(deep, DEEP_STEPS)
    stderr += more
    for m, h, p in zip(deep, hooked, plain):
      m.hooked, m.plain = h, p
  report(mutants, deep, eqns, stderr, opts.verbose,
         held_out.KINDS + shapes.KINDS if opts.held_out else KINDS)
  print(f"\n({time.perf_counter() - t0:.0f} s; {provenance()}; jax {jax.__version__}, "
        f"{len(jax.devices())} host devices; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores)")


def provenance() -> str:
  """Which code was measured: the package imported, its commit, and uncommitted changes."""
  root = pathlib.Path(vv.__file__).resolve().parents[1]
  git = lambda *a: subprocess.run(["git", *a], cwd=root, capture_output=True, text=True).stdout
  try:
    head, dirty = git("rev-parse", "--short", "HEAD").strip(), git("status", "--porcelain", "--",
                                                                    "jupyter_vjpviz").splitlines()
  except OSError:
    return "code: unknown commit"
  return f"code: {root}/jupyter_vjpviz at {head or 'no git commit'}" + (
      f" + uncommitted changes to {len(dirty)} jupyter_vjpviz files" if dirty else "")


if __name__ == "__main__":
  sys.exit(main())
