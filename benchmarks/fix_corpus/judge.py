"""The benchmark's own judge: is a fix right, whatever vjpviz claims about it?

Right means type-correct and equal to the primal's own autodiff. The fix code runs
in a copy of the rule's namespace and closure (read by vjpviz's ``verify.closure``), a
fresh ``jax.custom_vjp`` is built from the primal with the fixed fwd/bwd, and its
VJP is compared with ``jax.vjp`` of the reference primal at several random inputs
and random output cotangents, leaf by leaf, with tolerances by dtype. The hook
must be off while judging: this is plain JAX.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import linecache
import textwrap
import types
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from jupyter_vjpviz.fixes.verify import closure

from .rules import Base

DRAWS = 3
RTOL = {np.dtype(np.float64): 1e-9, np.dtype(np.float32): 1e-5, np.dtype(np.float16): 2e-3,
        np.dtype(jnp.bfloat16): 2e-2,
        np.dtype(np.complex64): 1e-5, np.dtype(np.complex128): 1e-9}

_serial = itertools.count(1)


@dataclasses.dataclass(frozen=True)
class Subject:
  """A rule to judge: its cell's namespace and the reference primal (the base's, verified)."""
  base: Base
  ns: dict
  reference: Any                # the correct primal function (undecorated)

  @property
  def custom_vjp(self):
    return self.ns[self.base.name]


@dataclasses.dataclass(frozen=True)
class Verdict:
  typed: bool          # compiled, ran, and every output and cotangent has the reference's type
  right: bool          # typed, and every value within tolerance at every draw
  zeros: bool          # some cotangent is all zeros where the reference is not
  detail: str = ""


@dataclasses.dataclass(frozen=True)
class Draw:
  """One random point: every argument, an output cotangent, and the reference's answer."""
  args: tuple
  ct: Any
  want: Any


def references(subject: Subject, seed: int = 0) -> list[Draw]:
  """``DRAWS`` random points with the reference primal's (output, cotangents) at each."""
  rng = np.random.default_rng(1000 + seed)
  draws = []
  for _ in range(DRAWS):
    args = subject.base.args(rng)
    ct = cotangent(subject, args, rng)
    draws.append(Draw(args, ct, vjp_at(subject.reference, subject, args, ct)))
  return draws


def judge_fix(subject: Subject, code: str, role: str, draws: list[Draw] | None = None) -> Verdict:
  """The verdict on ``code`` replacing the rule (``role`` "fwd"/"bwd"/"jvp": what a lone def
  replaces)."""
  try:
    rules = compile_fix(subject, code, role)
  except Exception as e:  # noqa: BLE001 - a fix that does not compile is wrong
    return Verdict(False, False, False, f"does not compile: {type(e).__name__}: {_first_line(e)}")
  return judge_rules(subject, *rules, draws=draws)


def is_jvp(custom) -> bool:
  """A ``jax.custom_jvp`` (its one rule is ``jvp``), not a ``jax.custom_vjp``."""
  return isinstance(custom, jax.custom_jvp)


def rules_of(custom) -> tuple:
  """The rules as written: (jvp,) of a custom_jvp, (fwd, bwd) of a custom_vjp."""
  return (custom.jvp,) if is_jvp(custom) else (custom.fwd, custom.bwd)


def compile_fix(subject: Subject, code: str, role: str) -> tuple:
  """The rules (``rules_of``'s order) after running ``code`` in a copy of the rule's namespace.

  A def named like a rule replaces it (or ending in ``_fwd``/``_bwd`` when the
  rule is a lambda); a lone def of another name replaces ``role``.
  """
  custom_vjp = subject.custom_vjp
  code = textwrap.dedent(code)
  filename = f"<fix-quality-{next(_serial)}>"
  linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
  space = dict(subject.ns)
  space.update(closure(custom_vjp))
  exec(compile(code, filename, "exec"), space)  # noqa: S102 - our own corpus's fixes
  defs = [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]
  roles = ("jvp",) if is_jvp(custom_vjp) else ("fwd", "bwd")
  rules = dict(zip(roles, rules_of(custom_vjp)))
  named = {_name(rule): r for r, rule in rules.items()}
  for name in defs:
    which = (named.get(name) or next((r for r in roles if name.endswith("_" + r)), None)
             if len(defs) > 1 else named.get(name, role))
    if which:
      rules[which] = space[name]
  return tuple(rules[r] for r in roles)


def judged_as_written(base: Base, ns: dict, seed: int) -> tuple[Subject, list[Draw], Verdict]:
  """A corpus rule run as written in ``ns`` (its right version), judged against its
  reference's autodiff (``reference`` in ``ns``, else the primal) at ``seed``'s draws."""
  subject = Subject(base, ns, ns.get("reference", ns[base.name].fun))
  draws = references(subject, seed=seed)
  return subject, draws, judge_rules(subject, *rules_of(subject.custom_vjp), draws=draws)


def judge_rules(subject: Subject, *rules, draws: list[Draw] | None = None) -> Verdict:
  """Rebuild the custom rule with ``rules`` (``rules_of``'s order) and compare its VJP with
  the reference's: a custom_jvp's through JAX's own linearisation and transpose of its rule,
  which equals the reference's VJP exactly when its tangents equal the reference's JVP."""
  custom_vjp = subject.custom_vjp
  if is_jvp(custom_vjp):
    fixed = jax.custom_jvp(custom_vjp.fun, nondiff_argnums=custom_vjp.nondiff_argnums)
    fixed.defjvp(*rules, symbolic_zeros=custom_vjp.symbolic_zeros)
  else:
    fixed = jax.custom_vjp(custom_vjp.fun, nondiff_argnums=custom_vjp.nondiff_argnums)
    fixed.defvjp(*rules, symbolic_zeros=custom_vjp.symbolic_zeros)
  zeros = False
  draws = draws if draws is not None else references(subject)
  for i, (fn, draw) in enumerate([(fixed, d) for d in draws] + _through_use(subject, fixed, draws)):
    try:
      got = vjp_at(fn, subject, draw.args, draw.ct)
    except Exception as e:  # noqa: BLE001 - JAX refusing the fix is a wrong type
      return Verdict(False, False, zeros, f"JAX raised: {type(e).__name__}: {_first_line(e)}")
    problem, leaf_zeros = compare(got, draw.want, subject.base.rtol)
    zeros = zeros or leaf_zeros
    if problem is not None:
      return Verdict(problem[0], False, zeros, f"draw {i}: {problem[1]}")
  return Verdict(True, True, zeros)


def _through_use(subject: Subject, fixed, draws: list[Draw]) -> list[tuple]:
  """(the cell's ``use`` calling ``fixed``, a draw of its own) for a symbolic_zeros rule
  whose cell uses it so: the outputs ``use`` drops get symbolic zeros, a branch the plain
  draws (every output given a cotangent) never run."""
  use = subject.ns.get("use")
  if use is None or not getattr(subject.custom_vjp, "symbolic_zeros", False):
    return []
  calling = lambda rule: types.FunctionType(use.__code__, {**subject.ns, subject.base.name: rule})
  found = []
  for k, draw in enumerate(draws):
    rng = np.random.default_rng(2000 + k)
    out = calling(subject.reference)(*draw.args)
    ct = jax.tree_util.tree_map(lambda a: rng.standard_normal(a.shape).astype(a.dtype), out)
    want = vjp_at(calling(subject.reference), subject, draw.args, ct)
    found.append((calling(fixed), Draw(draw.args, ct, want)))
  return found


def vjp_at(fn, subject: Subject, args: tuple, ct):
  """(output, cotangents of the differentiable arguments) of ``fn`` at ``args``, ``ct``."""
  custom_vjp = subject.custom_vjp
  positions = [i for i in range(len(args)) if i not in custom_vjp.nondiff_argnums]

  def run(differentiable_args, ct):
    def f(*d):
      full = list(args)
      for i, v in zip(positions, d):
        full[i] = v
      return fn(*full)
    out, f_vjp = jax.vjp(f, *differentiable_args)
    return out, f_vjp(ct)
  # as JAX arrays: jax.vjp of a custom_vjp at numpy float32 arguments returns a bfloat16
  # primal output as float32 (JAX 0.12), and then refuses the bfloat16 cotangent
  differentiable_args = jax.tree_util.tree_map(jnp.asarray, tuple(args[i] for i in positions))
  if subject.base.specs is None:
    return run(differentiable_args, ct)
  in_specs, out_spec = specs(subject.base)
  ins = tuple(in_specs[i] for i in positions)
  return jax.jit(jax.shard_map(run, mesh=mesh(), in_specs=(ins, out_spec),
                               out_specs=(out_spec, ins)))(differentiable_args, ct)


def cotangent(subject: Subject, args: tuple, rng):
  """A random output cotangent (global shapes) for the reference at ``args``."""
  out = output_types(subject, args)
  def draw(a):
    x = rng.standard_normal(a.shape)
    if jnp.issubdtype(a.dtype, jnp.complexfloating):
      x = x + 1j * rng.standard_normal(a.shape)
    return x.astype(a.dtype)
  return jax.tree_util.tree_map(draw, out)


def output_types(subject: Subject, args: tuple):
  """The primal output's global ShapeDtypeStructs (under shard_map when the rule needs it)."""
  if subject.base.specs is None:
    nondiff = subject.custom_vjp.nondiff_argnums
    static = {i: a for i, a in enumerate(args) if i in nondiff}
    rest = [a for i, a in enumerate(args) if i not in nondiff]

    def call(*d):
      it = iter(d)
      return subject.reference(*[static[i] if i in static else next(it) for i in range(len(args))])
    return jax.eval_shape(call, *rest)
  in_specs, out_spec = specs(subject.base)
  sm = jax.shard_map(subject.reference, mesh=mesh(), in_specs=in_specs, out_specs=out_spec)
  return jax.eval_shape(sm, *args)


def compare(got, want, rtol: float | None = None) -> tuple[tuple[bool, str] | None, bool]:
  """((typed, what differs) or None when equal, whether a leaf is zeros where ``want`` is not);
  ``rtol``: a lower precision the rule computes in on purpose, the tolerance at least."""
  got_leaves, got_tree = jax.tree_util.tree_flatten(got)
  want_leaves, want_tree = jax.tree_util.tree_flatten(want)
  if got_tree != want_tree:
    return (False, f"structure {got_tree} != {want_tree}"), False
  zeros, problem = False, None
  for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
    g, w = np.asarray(g), np.asarray(w)
    if g.shape != w.shape or g.dtype != w.dtype:
      return (False, f"leaf {i}: {g.dtype}{list(g.shape)} != {w.dtype}{list(w.shape)}"), zeros
    if w.dtype == jax.dtypes.float0 or not np.issubdtype(w.dtype, np.inexact):
      continue
    wide = np.complex128 if np.iscomplexobj(w) or np.iscomplexobj(g) else np.float64
    g64, w64 = g.astype(wide), w.astype(wide)
    zeros = zeros or (not g64.any() and w64.any())
    err = error(g64, w64, max(RTOL.get(w.dtype, 1e-5), rtol or 0.))
    if err > 1 and problem is None:
      problem = (True, f"leaf {i}: values differ ({err:.3g}x the tolerance)")
  return problem, zeros


def error(got: np.ndarray, want: np.ndarray, rtol: float) -> float:
  """max |got - want| / (rtol |want| + atol), atol = rtol x the leaf's largest magnitude."""
  atol = rtol * max(float(np.abs(want).max(initial=0.)), 1e-30)
  return float((np.abs(got - want) / (rtol * np.abs(want) + atol)).max(initial=0.))


@functools.cache
def mesh():
  return jax.make_mesh((4,), ("dp",), axis_types=(jax.sharding.AxisType.Auto,))


def specs(base: Base):
  spec = lambda s: P(s) if s else P()
  in_specs, out_spec = base.specs
  return tuple(spec(s) for s in in_specs), spec(out_spec)


def _name(fn) -> str | None:
  return getattr(inspect.unwrap(fn), "__name__", None)


def _first_line(e: BaseException) -> str:
  text = str(e).strip().splitlines()
  return text[0][:160] if text else ""
