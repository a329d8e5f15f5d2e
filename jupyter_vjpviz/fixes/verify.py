"""Check a proposed rule abstractly, and apply it where that is safe.

``verify_fix`` never touches the user's objects: the code runs in a copy of the
rule's globals and is attached to a shallow clone of their ``custom_vjp``, which
the caller's checker (``vjpviz.check``: this stage sits below it and is handed
it) differentiates on ShapeDtypeStructs (no FLOPs); a well-typed rule is then
judged by value against the primal's own derivative (``analysis.values.oracle``).
``apply_fix`` rebinds notebook-defined rules in place (the cell is the user's
to re-run anyway) but only ever returns a patch for rules living in ``.py``
files: writing the user's files is their call.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import textwrap
from collections.abc import Callable

import jax
import numpy as np

from ..analysis.values import on_mesh, oracle, tangents
from ..capture.compat.private import cd, core
from ..analysis.diagnosis import TYPE_ONLY, VERIFIED, Diagnosis
from ..base import kinds, syntax, trees
from ..capture import avals, records
from ..capture.naming import library_wrappers
from ..capture.records import WARNING, Weak
from ..capture.sites import check_sites, custom_rules, jvp_rules
from . import exprs, pasted, solves, source

_serial = itertools.count(1)


@dataclasses.dataclass(frozen=True)
class Applied:
  """What ``apply_fix`` did: rebound the rule, or produced a patch to apply by hand."""
  applied: bool
  problems: tuple[Diagnosis, ...] = ()   # what verification still found (then nothing applied)
  patch: str | None = None               # a unified diff, for rules defined in a .py file
  path: str | None = None


@dataclasses.dataclass(frozen=True)
class Checked:
  """What verifying a fix found: type problems, else the oracle's verdict on its values."""
  problems: tuple[Diagnosis, ...]
  verdict: oracle.Verdict | None = None


def verify_fix(diagnosis: Diagnosis, code: str, check) -> list[Diagnosis]:
  """Diagnoses of the rule with ``code`` substituted; ``[]`` means fixed.

  ``check`` is ``vjpviz.check`` (``(fun, *abstract_args, argnums) -> [Diagnosis]``). A
  rule that type-checks but whose cotangents differ from the primal's
  derivative is a ``bwd_value`` problem carrying the per-leaf errors.
  """
  return list(checked(diagnosis, code, check).problems)


def checked(diagnosis: Diagnosis, code: str, check) -> Checked:
  """Types first (the whole differentiated call, abstractly), then values."""
  if kinds.of(diagnosis.kind).role == "solve":
    return _solve_checked(diagnosis, code)
  user_rules = _user_rules(diagnosis)
  rules = _compile(user_rules, code, namespace(user_rules), diagnosis.kind)
  refused = registration_problems(diagnosis.site, user_rules, *rules) if len(rules) == 2 else []
  if refused:   # what pasting it meets: JAX's own error, as a problem, not raised here
    return Checked((dataclasses.replace(diagnosis, got=refused[0], detail=refused[0],
                                        message=None, fixes=()),))
  edited = clone(user_rules, *rules)
  problems = _rechecked(diagnosis, edited, user_rules, check)
  if problems:
    return Checked(tuple(problems))
  if "bwd" not in live_rules(user_rules):   # a custom_jvp's tangents, by the primal's JVP
    verdict = tangent_verdict(diagnosis.site, user_rules, rules[0])
    return Checked((), verdict) if verdict.status != oracle.WRONG else Checked(
        (value_problem(diagnosis, verdict),), verdict)
  verdict = as_written(value_verdict(diagnosis.site, edited), left_none(diagnosis))
  wrong = verdict.status == oracle.WRONG
  return Checked((value_problem(diagnosis, verdict),) if wrong else (), verdict)


def _solve_checked(diagnosis: Diagnosis, code: str) -> Checked:
  """An edited solve judged by its linear system (``solves``): a type it still gets wrong
  (or an error it raises) is a problem of the diagnosis's kind, values that differ a
  ``bwd_value`` one."""
  verdict, note = solves.judged_edit(diagnosis, code)
  # A problem of its own (its own id), about the same solve, at the same place.
  problem = lambda kind, severity: Diagnosis(
      kind=kind, severity=severity, function=diagnosis.function, rule=diagnosis.rule,
      source=diagnosis.source, path=diagnosis.path, expected=diagnosis.expected, got=note,
      message=None, detail=note, rule_source=diagnosis.rule_source,
      call_site=diagnosis.call_site, site=diagnosis.site)
  if verdict is None:
    return Checked((problem(diagnosis.kind, diagnosis.severity),))
  status = {VERIFIED: oracle.RIGHT, TYPE_ONLY: oracle.WRONG}.get(verdict, oracle.UNVERIFIABLE)
  judged = oracle.Verdict(status, note, judge="the linear system's solution")
  return Checked((problem(kind="bwd_value", severity=WARNING),) if status == oracle.WRONG else (), judged)


def reference(site, user_rules) -> oracle.Oracle:
  """The primal's derivative at random inputs; where the primal runs only inside its
  library's call (flax nnx's), fwd's primal output with the rule set aside stands in; on
  the mesh the application ran in, where it ran inside shard_map (``on_mesh``)."""
  try:
    found = on_mesh.oracle_for(site, user_rules.primal)
  except Exception:
    stand_in = primal_by_fwd(user_rules)
    if stand_in is None:
      raise
    found = on_mesh.oracle_for(site, stand_in, by_fwd=True)
  return _other_branches_as_written(found, site, user_rules)


def _other_branches_as_written(found: oracle.Oracle, site, user_rules) -> oracle.Oracle:
  """``found`` judging a symbolic_zeros application with every output given a cotangent
  (``Oracle.given_all``) against the user's own rule there, where it runs so: a fix mends
  the branch that failed and leaves the others as they were, right or not."""
  if found.given_all is None:
    return found
  own = found.given_all.of_rule(user_rules.fwd, user_rules.bwd, user_rules.symbolic_zeros,
                                site.perturbed)
  return dataclasses.replace(found, given_all=own) if own is not None else found


def _rechecked(diagnosis: Diagnosis, edited, user_rules, check) -> list[Diagnosis]:
  """``recheck`` of the edited call; where that raises because the primal runs only inside
  its library's call, again with fwd's primal output as the primal (what the check traces)."""
  try:
    return recheck(diagnosis, edited, check)
  except Exception:
    stand_in = primal_by_fwd(user_rules)
    if stand_in is None:
      raise
    return recheck(diagnosis, library_wrappers.copy_of(edited, fun=stand_in), check)


def value_verdict(site, cvjp, judge: oracle.Oracle | None = None) -> oracle.Verdict:
  """The oracle's verdict on ``cvjp``'s rules (built here unless given)."""
  try:
    judge = judge or reference(site, library_wrappers.user_rules(site.custom_rule()))
  except Exception as e:  # noqa: BLE001 - a primal that cannot run at random inputs
    return oracle.Verdict(oracle.UNVERIFIABLE, f"no oracle: {site.function} could not be run "
                          f"at random inputs ({type(e).__name__}: {e})"[:300], judge="")
  fwd, bwd = library_wrappers.vjp_pair(cvjp)
  return judge.verdict(fwd, cotangents_of(cvjp, bwd), symbolic_zeros=cvjp.symbolic_zeros,
                       nondiff_argnums=cvjp.nondiff_argnums, perturbed=site.perturbed)


def tangent_verdict(site, user_rules, jvp) -> oracle.Verdict:
  """The primal's JVP's verdict on a custom_jvp rule ``jvp`` at the site."""
  try:
    judge = tangents.Tangents.of(site, user_rules.primal)
  except Exception as e:  # noqa: BLE001 - a primal that cannot run at random inputs
    return oracle.Verdict(oracle.UNVERIFIABLE, f"no oracle: {site.function} could not be run "
                          f"at random inputs ({type(e).__name__})", judge="")
  return judge.verdict(jvp, user_rules.symbolic_zeros)


def expected_args(site) -> tuple:
  """The cotangent types the rule must return, one subtree per primal argument."""
  cts = [avals.ct_aval(a) for a in site.in_avals]
  return tuple(jax.tree_util.tree_unflatten(site.in_tree, cts))


def expected_returned(diagnosis: Diagnosis, keys: list):
  """What the user's own bwd must return: ``expected_args``, or where a library hands it on
  under a prefix (equinox's bwd answers for ``vjp_arg``, the site's first argument) the
  subtree there (``returned_head``). None where no prefix is known."""
  head = returned_head(diagnosis, keys)
  if head is None:
    return None
  want = expected_args(diagnosis.site)
  for key in head:
    want = want[key]
  return want


def returned_head(diagnosis: Diagnosis, keys: list) -> list | None:
  """The keys in the site's args tree above what the user's bwd returns: what the site's
  path of the finding's leaf has before the user's ``keys`` of it (``[0]`` for equinox's
  ``vjp_arg``; ``[]`` for a custom_vjp's own rule). None where the two do not end alike."""
  keys = list(keys)
  if not keys or diagnosis.path in diagnosis.site.in_paths:
    theirs = source.path_keys(diagnosis.path)
  else:   # a library's check named the leaf by the user's path: its site path is a leaf's
    theirs = next((full for full in ([k.key for k in l.path] for l in diagnosis.leaves)
                   if len(full) > len(keys) and full[len(full) - len(keys):] == keys), None)
  if theirs is None or len(theirs) < len(keys) or theirs[len(theirs) - len(keys):] != keys:
    return None
  return theirs[:len(theirs) - len(keys)]


def left_none(diagnosis: Diagnosis) -> frozenset:
  """The input leaves whose cotangent the user's rule returns as None (no gradient, by
  choice): a fix that keeps them None is not the fix that zeroes them."""
  try:
    out = rule_output(diagnosis)
  except Exception:  # noqa: BLE001 - a rule that cannot run abstractly: judge every leaf
    return frozenset()
  slices = trees.arg_slices(diagnosis.site.in_tree)
  if not isinstance(out, (tuple, list)) or len(out) != len(slices):
    return frozenset()
  return frozenset(i for ct, s in zip(out, slices) if ct is None
                   for i in range(s.start, s.stop))


def as_written(verdict: oracle.Verdict, none_leaves: frozenset) -> oracle.Verdict:
  """``verdict`` with the leaves the user's rule leaves None not judged, where the
  candidate leaves them zero too: right if every other leaf is."""
  kept = [l for l in verdict.leaves if l.index in none_leaves and l.got_zero and not l.ok]
  if verdict.status != oracle.WRONG or not kept:
    return verdict
  leaves = tuple(dataclasses.replace(l, judged=False) if l in kept else l for l in verdict.leaves)
  if any(l.judged and not l.ok for l in leaves):
    return dataclasses.replace(verdict, leaves=leaves)
  names = ", ".join(f"`{l.name}`" for l in kept)
  return dataclasses.replace(
      verdict, status=oracle.RIGHT, leaves=leaves,
      reason=f"equal to the primal's {verdict.judge} but for {names}, which it leaves "
             "without a gradient (None), as your rule does")


def fills_none(verdict: oracle.Verdict, none_leaves: frozenset) -> list[str]:
  """The leaves the user's rule leaves None (no gradient, by choice) that a candidate
  gives a gradient: equal to the primal's derivative there, but not the rule as meant."""
  return [f"`{l.name}`" for l in verdict.leaves if l.index in none_leaves and not l.got_zero
          and not l.reference_zero]


def value_problem(diagnosis: Diagnosis, verdict: oracle.Verdict) -> Diagnosis:
  """A well-typed rule whose cotangents are not the primal's derivative, as a Diagnosis."""
  bad = [l for l in verdict.leaves if l.judged and not l.ok]
  on_inputs = "bwd" in live_rules(_user_rules(diagnosis))   # else the leaves are outputs
  return Diagnosis(
      kind="bwd_value", severity=WARNING, function=diagnosis.function, rule=diagnosis.rule,
      source=diagnosis.source,
      path=diagnosis.site.in_paths[bad[0].index] if bad and on_inputs else None,
      expected=f"the primal's derivative ({verdict.judge})", got=verdict.breaks(),
      message=None, detail=verdict.reason, rule_source=diagnosis.rule_source,
      call_site=diagnosis.call_site, argument=bad[0].name if bad else None,
      leaf_errors=tuple(bad), site=diagnosis.site)


def namespace(user_rules) -> dict:
  """A copy of what the rules see (their globals and closures), to run edited code in."""
  found = dict(_globals(user_rules))
  found.update(closure(user_rules))
  return found


def recheck(diagnosis: Diagnosis, cvjp, check) -> list[Diagnosis]:
  """Differentiate ``cvjp`` abstractly at the failing call's input types with ``check``:
  inside a shard_map over its mesh where the call ran in one (JAX's varying-axes checks
  and the hook's run there as they did in the user's program)."""
  site = diagnosis.site
  placed = on_mesh.there(site)
  if placed is not None:
    return check(placed.wrap(lambda *a: cvjp(*arguments(site, a)), list(range(len(site.in_tree.children())))),
                 *on_mesh.abstract_args(site, placed), argnums=custom_rules.perturbed_args(site))
  abstract_args = _abstract_args(site)
  return check(lambda *a: _given_cotangents(site, cvjp(*arguments(site, a))), *abstract_args,
               argnums=custom_rules.perturbed_args(site))


def _given_cotangents(site, out):
  """The outputs the failing application gave cotangents: the others get symbolic zeros
  again, so a symbolic_zeros rule runs the branch that failed."""
  leaves = jax.tree_util.tree_leaves(out)
  if not site.zero_cts or len(leaves) != len(site.zero_cts):
    return out
  return [o for o, zero in zip(leaves, site.zero_cts) if not zero]


def _abstract_args(site) -> tuple:
  """The differentiable arguments of the failing call, as ShapeDtypeStructs."""
  structs = [trees.shape_struct(a) for a in site.in_avals]
  return jax.tree_util.tree_unflatten(site.in_tree, structs)


def arguments(site, differentiable: tuple) -> list:
  """All arguments of the call: ``differentiable`` with the site's nondiff values put back in place.

  JAX refuses tracers in nondiff positions, so a nondiff array (kept as its
  ShapeDtypeStruct) comes back as host zeros: its type is what a check needs.
  """
  static = dict(site.nondiff)
  rest = iter(differentiable)
  return [jax.tree_util.tree_map(_placeholder, static[i]) if i in static else next(rest)
          for i in range(len(differentiable) + len(static))]


def _placeholder(leaf):
  if isinstance(leaf, jax.ShapeDtypeStruct):
    return np.zeros(leaf.shape, leaf.dtype)
  if isinstance(leaf, Weak):
    fn = leaf.get()
    if fn is None:
      raise ValueError("a nondiff argument of the failing call no longer exists; "
                       "re-run the cell to check the fix")
    return fn
  return leaf


def rule_output(diagnosis: Diagnosis):
  """What the bwd rule returns at the failing call, as ShapeDtypeStructs (None leaves kept).

  Runs fwd then bwd under ``eval_shape`` with the hook suspended, so fixes can be
  chosen from the types of every output, not just the one that was reported.
  """
  user_rules = _user_rules(diagnosis)
  return run_rules(diagnosis.site, user_rules.fwd, cotangents_of(user_rules, user_rules.bwd),
                   user_rules.symbolic_zeros)


def run_rules(site, fwd, bwd, symbolic_zeros: bool = False, look=None):
  """``bwd(fwd(args))`` under ``eval_shape`` at the site's types, the hook suspended.

  ``look(args, out, cts)``, if given, sees the traced values (to compare types).
  """
  flags = site.perturbed or [True] * len(site.in_paths)
  nondiff = [i for i, _ in site.nondiff]
  user_rules = library_wrappers.user_rules(site.custom_rule())
  fwd, bwd = library_wrappers.derived(user_rules, *user_rules.placed(fwd, bwd))

  def boxed(differentiable):   # the primals as JAX hands them to a symbolic_zeros fwd
    leaves = jax.tree_util.tree_leaves(differentiable)
    return jax.tree_util.tree_unflatten(site.in_tree, [
        cd.CustomVJPPrimal(a, p) for a, p in zip(leaves, flags)]) if symbolic_zeros else differentiable

  def run(*differentiable):
    args = arguments(site, boxed(differentiable))
    out, res = fwd(*args)
    ct = jax.tree_util.tree_map(jax.numpy.ones_like, out)
    cts = bwd(*[args[i] for i in nondiff], res,
              custom_rules.replayed_ct(site, ct) if symbolic_zeros else ct)
    if look is not None:
      look(args, out, cts)
    return cts
  placed = on_mesh.there(site)
  with records.suspended():
    return placed.eval_shape(run, site) if placed is not None else \
        jax.eval_shape(run, *_abstract_args(site))


def apply_fix(diagnosis: Diagnosis, code: str, check=None) -> Applied:
  """Rebind a notebook rule to ``code`` (after verifying it with ``check``, unless None),
  or return a patch for a file rule. The caller forgets what its checker cached about the old rule."""
  if kinds.of(diagnosis.kind).fixed_at == "line":
    return _nan_fix_applied(diagnosis, code)
  if check is not None:
    problems = verify_fix(diagnosis, code, check)
    if problems:
      return Applied(applied=False, problems=tuple(problems))
  if kinds.of(diagnosis.kind).role == "solve":
    rebound, patch, path = solves.applied_edit(diagnosis, code)
    return Applied(applied=rebound, patch=patch, path=path)
  user_rules = _user_rules(diagnosis)
  path = home(user_rules).__code__.co_filename
  if not source.in_notebook(path):
    return Applied(applied=False, patch=file_patch(user_rules, code, diagnosis.kind), path=path)
  rules = _compile(user_rules, code, _globals(user_rules), diagnosis.kind)
  if "bwd" not in live_rules(user_rules):
    user_rules.define(*rules)
    jax.clear_caches()
    return Applied(applied=True, path=path)
  register(user_rules, *rules)
  jax.clear_caches()  # trace caches can otherwise keep running the old rule
  return Applied(applied=True, path=path)


def _nan_fix_applied(diagnosis: Diagnosis, code: str) -> Applied:
  """The patch putting a NaN fix ``vv.nans`` verified at its line, exactly as verified: a
  diagnosis keeps no arrays, so another edit is judged by running ``vv.nans`` with it."""
  if not any(f.verdict == VERIFIED and f.code == code for f in diagnosis.fixes):
    raise ValueError("vv.apply_fix: this code is not a fix vv.nans verified for this "
                     "diagnosis (it keeps no arrays to judge another): put your edit in place "
                     "and run vv.nans again")
  path, patch = pasted.file_patch(diagnosis.source, code)
  return Applied(applied=False, patch=patch, path=path)


def file_patch(user_rules, code: str, kind: str) -> str:
  """A unified diff replacing each rule ``code`` redefines in its source file."""
  path = home(user_rules).__code__.co_filename
  with open(path, encoding="utf-8") as f:
    lines = f.readlines()
  return source.file_diff(path, list(_replacements(user_rules, code, kind, lines)))


def _replacements(user_rules, code: str, kind: str, lines: list[str]):
  """(first line index, end index, new text) for each rule in ``code``."""
  rules = live_rules(user_rules)
  code = textwrap.dedent(code)
  for node, role in _roles(user_rules, _defs(code), kind):
    rule = inspect.unwrap(rules[role])
    text = ast.get_source_segment(code, node, padded=False) + "\n"
    if rule.__name__ == "<lambda>":
      yield _lambda_replacement(rule, node.name, text, lines)
      continue
    yield source.replacing_def(rule, text)


def _lambda_replacement(rule, name: str, text: str, lines: list[str]):
  """The statement holding the lambda, preceded by the fix's def and naming it instead.

  A lambda has no lines of its own to replace: the def goes right before the
  statement that uses it (``act.defvjp(fwd, lambda r, g: ...)``), at its indentation.
  """
  tree = ast.parse("".join(lines))
  found = syntax.lambda_node(tree, rule.__code__)
  if found is None:
    raise ValueError(f"cannot tell which lambda on line {rule.__code__.co_firstlineno} of "
                     f"{rule.__code__.co_filename} is the rule: define it with def by hand")
  stmt = max((n for n in ast.walk(tree) if isinstance(n, ast.stmt)
              and (n.lineno, n.col_offset) <= (found.lineno, found.col_offset)
              and (n.end_lineno, n.end_col_offset) >= (found.end_lineno, found.end_col_offset)),
             key=lambda n: (n.lineno, n.col_offset))
  first, last = stmt.lineno - 1, stmt.end_lineno
  old = lines[first:last]
  at = lambda line, col: sum(len(l) for l in old[:line - stmt.lineno]) + col
  joined = "".join(old)
  joined = (joined[:at(found.lineno, found.col_offset)] + name
            + joined[at(found.end_lineno, found.end_col_offset):])
  return first, last, textwrap.indent(text, syntax.indent_of(old[0])) + joined


def _compile(user_rules, code: str, namespace: dict, kind: str):
  """The (fwd, bwd) pair after running ``code`` in ``namespace``. The rules' decorators
  do not run: registering them (``@f.defvjp``, equinox's ``@f.def_bwd``) would edit the
  user's object, which is apply's to do."""
  code = textwrap.dedent(code)
  tree = ast.parse(code)
  roles = list(_roles(user_rules, _defs(tree), kind))
  for node, _ in roles:
    node.decorator_list = []
  source.run_defs(tree, code, namespace, "fix")
  rules = live_rules(user_rules)
  for node, role in roles:
    rules[role] = namespace[node.name]
  return tuple(rules.values())


def compile_candidate(user_rules, code: str, kind: str) -> tuple:
  """The rules (``live_rules``' order: fwd and bwd, or a custom_jvp's jvp) of a suggested
  fix, to judge it before anyone asked to run it.

  Only the rules' bodies may run (as ``returns`` runs a copy of the rule): the
  defs are stripped of decorators, annotations and default expressions (the
  live rules' defaults are reused) and nothing else in ``code`` runs.
  """
  tree = ast.parse(textwrap.dedent(code))
  tree.body = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
  for node in tree.body:
    source.bare(node)
  ns = namespace(user_rules)
  exec(compile(tree, f"<vjpviz-candidate-{next(_serial)}>", "exec"), ns)  # noqa: S102
  rules = live_rules(user_rules)
  for node, role in _roles(user_rules, tree.body, kind):
    live, new = inspect.unwrap(rules[role]), ns[node.name]
    new.__defaults__, new.__kwdefaults__ = live.__defaults__, live.__kwdefaults__
    rules[role] = new
  return tuple(rules.values())


def live_rules(user_rules) -> dict:
  """The rules a fix may replace, by role: a custom_jvp's ``jvp``, else fwd and bwd."""
  if isinstance(user_rules, jax.custom_jvp):   # the object itself (the benchmark's judge)
    return {"jvp": user_rules.jvp}
  return dict(getattr(user_rules, "rules", None) or {"fwd": user_rules.fwd, "bwd": user_rules.bwd})


def tangent_type_problems(site, user_rules, jvp) -> list:
  """What JAX's check would find of ``jvp``'s (primal output, tangents) at the site's types,
  and its primal output against the primal's (abstract: no FLOPs)."""
  found = []

  def run(*differentiable):
    args = arguments(site, differentiable)
    zeros = tuple(jax.tree_util.tree_map(
        lambda a: jax.numpy.zeros(a.shape, avals.ct_aval(jax.typeof(a)).dtype), d)
        for d in differentiable)
    pair = tangents.run_rule(site, jvp, args, zeros, user_rules.symbolic_zeros)
    want = user_rules.primal(*args)
    found.extend(jvp_rules.mismatches(pair, site.function, site.rule, None))
    if not isinstance(pair, (tuple, list)) or len(pair) != 2 or _types(pair[0]) != _types(want):
      found.append("the rule's primal output is not the primal's")
  with records.suspended():
    jax.eval_shape(run, *_abstract_args(site))
  return found


def type_problems(site, fwd, bwd, symbolic_zeros: bool = False, primal=None) -> list:
  """What the capture stage would record of ``bwd(fwd(args))`` at the site's types, and
  fwd's primal output against ``primal``'s (abstract: no FLOPs)."""
  found = []
  judged = site if on_mesh.runs_there(site) else _outside_mesh(site)

  def look(args, out, cts):
    found.extend(custom_rules.compare_cotangents(judged, cts))
    want = _primal_output(primal, args) if primal is not None and not symbolic_zeros else None
    if want is not None and _types(want) != _types(out):
      found.append(f"fwd's primal output {_types(out)} is not {_types(want)}")
  run_rules(site, fwd, bwd, symbolic_zeros, look)
  return found


def primal_by_fwd(user_rules) -> Callable | None:
  """fwd's primal output as a function of the call's arguments, with the failing rule's
  own custom_vjp differentiated through its primal inside it (``capture.through_primal``):
  the reference where the primal runs only inside its library's call. None for hijax
  primitives."""
  custom_vjp = getattr(user_rules, "custom_vjp", None)
  if custom_vjp is None:
    return None
  fwd, own = custom_vjp.fwd, user_rules.bwd

  def primal(*args):
    with check_sites.rules_set_aside(lambda c: library_wrappers.behind(c.bwd)[0] is own):
      return fwd(*args)[0]
  primal.__name__ = getattr(user_rules.fun, "__name__", "primal")   # what a check names it
  return primal


def _primal_output(primal, args):
  """``primal(*args)``, traced alongside the rules (so callables among the arguments are
  fine); None where it runs only inside its library's own call (flax nnx's custom_vjp
  reads a context its ``__call__`` sets up): the rules are then checked on their own."""
  try:
    return primal(*args)
  except Exception:  # noqa: BLE001 - a check of fwd's output, not of the candidate
    return None


def _outside_mesh(site):
  """``site`` with its avals' varying mesh axes dropped: a rule run outside its
  shard_map (where no equivalent mesh can be made here) has none, so only shapes and
  dtypes can be compared."""
  plain = tuple(core.ShapedArray(a.shape, a.dtype, weak_type=a.weak_type)
                if exprs.varying(a) else a for a in site.in_avals)
  return dataclasses.replace(site, in_avals=plain)


def _types(tree):
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  return treedef, tuple((tuple(l.shape), jax.numpy.dtype(l.dtype)) for l in leaves)


def _roles(user_rules, defs: list[ast.FunctionDef], kind: str):
  """(def, "fwd"|"bwd") for each def that replaces a rule; other defs are helpers.

  A def named like a rule replaces it; a lone def of another name (a lambda
  made into a def) replaces the rule the diagnosis is about.
  """
  roles = {_name(rule): role for role, rule in live_rules(user_rules).items()}
  alone = kinds.of(kind).role
  for node in defs:
    role = roles.get(node.name) or (alone if len(defs) == 1 else None)
    if role:
      yield node, role


def _defs(code: str | ast.Module) -> list[ast.FunctionDef]:
  tree = ast.parse(textwrap.dedent(code)) if isinstance(code, str) else code
  defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
  if not defs:
    raise ValueError("a fix must define the rule function(s) with `def`")
  return defs


def clone(user_rules, *rules):
  """A shallow copy of the user's custom rule with other rules: theirs is untouched. It keeps
  the user's registration (``with_logs``, ``symbolic_zeros``, ``optimize_remat``, ...: JAX
  reads them off the object as it applies it), so JAX runs the rules as it would pasted."""
  return user_rules.with_rules(*rules)


def registration(user_rules) -> tuple[str, dict]:
  """How the user registered their rules: the ``custom_vjp`` method (``defvjp``,
  ``defvjp_with_logs``, ``defvjp_with_accums``, ``defremat``, ``defremat_with_logs``) and
  every option it takes that the object holds (``symbolic_zeros``, ``optimize_remat``,
  ``generic_batching``, and any JAX adds)."""
  custom_vjp = getattr(user_rules, "custom_vjp", None)   # none: a hijax primitive's methods
  remat = library_wrappers.remat_of(custom_vjp)
  method = (remat.method if remat is not None else
            "defvjp_with_accums" if getattr(user_rules, "with_accums", False) else
            "defvjp_with_logs" if getattr(user_rules, "with_logs", False) else "defvjp")
  define = getattr(custom_vjp, method, None)
  if define is None:
    return method, {}
  takes = inspect.signature(define).parameters
  options = {name: getattr(custom_vjp, name) for name in takes
             if name not in ("self", "fwd", "rem", "bwd") and hasattr(custom_vjp, name)}
  return method, options


def register(user_rules, fwd, bwd) -> None:
  """Rebind the user's rules to ``fwd``/``bwd`` as they registered theirs (``registration``)."""
  method, options = registration(user_rules)
  user_rules.define(method, fwd, bwd, **options)


def cotangents_of(user_rules, bwd):
  """``bwd`` as JAX reads it under the user's registration: a ``defvjp_with_logs`` rule
  returns ``(cotangents, logs)``, and JAX's check and the oracle compare the cotangents.
  A return of another shape raises as JAX raises for it (``registration_problems`` runs
  JAX's own check too)."""
  remat = library_wrappers.remat_of(getattr(user_rules, "custom_vjp", user_rules))
  if not (remat.with_logs if remat is not None else getattr(user_rules, "with_logs", False)):
    return bwd

  def cotangents(*args):
    out = bwd(*args)
    if not (isinstance(out, (tuple, list)) and len(out) == 2
            and (out[1] is None or isinstance(out[1], dict))):
      raise TypeError("a rule registered with defvjp_with_logs must return a pair "
                      "(cotangents, logs), logs None or a dict")
    return out[0]
  return functools.update_wrapper(cotangents, bwd)


def registration_problems(site, user_rules, fwd, bwd) -> list[str]:
  """JAX's own objection to ``fwd``/``bwd`` registered as the user registered theirs,
  differentiated abstractly at the site's types (empty: none): what pasting them meets.
  A jax.custom_vjp's only, outside shard_map (a mesh's rules are judged on it, by value),
  and only where the registration is not plain ``defvjp``: a plain one is the registration
  the oracle already runs the candidate under (and an abstract run of it can fail where the
  concrete one does not: a pytree validating its leaves, on JAX before 0.10)."""
  if not isinstance(getattr(user_rules, "custom_vjp", None), cd.custom_vjp) or site.mesh is not None:
    return []
  method, options = registration(user_rules)
  if method == "defvjp" and not any(options.values()):
    return []
  edited = clone(user_rules, fwd, bwd)
  argnums = custom_rules.perturbed_args(site)   # as ``recheck`` differentiates the call

  def run(*differentiable):
    def call(*perturbed):
      given = dict(zip(argnums, perturbed))
      full = [given.get(i, a) for i, a in enumerate(differentiable)]
      return _given_cotangents(site, edited(*arguments(site, full)))
    out, f_vjp = jax.vjp(call, *[differentiable[i] for i in argnums])
    return f_vjp(jax.tree_util.tree_map(jax.numpy.ones_like, out))
  try:
    with records.suspended():
      jax.eval_shape(run, *_abstract_args(site))
  except Exception as e:  # noqa: BLE001 - JAX refusing the candidate is the finding
    return [f"registered as your rule is ({registration(user_rules)[0]}), JAX raises "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]]
  return []


def _user_rules(diagnosis: Diagnosis):
  site = diagnosis.site
  custom_rule = site.custom_rule() if site is not None and site.custom_rule is not None else None
  if custom_rule is None:
    raise ValueError(f"{diagnosis.kind} is not about a custom_vjp rule that is still alive; "
                     "only rule fixes can be verified or applied")
  return library_wrappers.user_rules(custom_rule)


def home(user_rules):
  """The user's function a fix of ``user_rules``'s bwd edits: the bwd, or the fwd where JAX's
  own bwd runs a closure the user's function returned (``jax.custom_gradient``)."""
  rules = live_rules(user_rules)
  if "bwd" not in rules:   # a custom_jvp: its one rule
    return inspect.unwrap(next(iter(rules.values())))
  bwd = inspect.unwrap(user_rules.bwd)
  if library_wrappers.user_code(bwd):
    return bwd
  fwd = inspect.unwrap(user_rules.fwd)
  return fwd if library_wrappers.user_code(fwd) else bwd


def _globals(user_rules) -> dict:
  return home(user_rules).__globals__


def closure(user_rules) -> dict:
  """Values the rules close over, so a nested rule's fix can still see them (the
  fix-quality benchmark's judge runs its fixes with them too); the user's primal's too,
  under the rules': a right rule may need what only the primal used (a factory's
  ``beta``)."""
  found = {}
  primal = [user_rules.fun] if library_wrappers.user_code(user_rules.fun) else []
  for rule in (*primal, *live_rules(user_rules).values()):
    try:
      found.update(inspect.getclosurevars(inspect.unwrap(rule)).nonlocals)
    except TypeError:
      pass
  return found


def _name(fn) -> str | None:
  return getattr(inspect.unwrap(fn), "__name__", None)
