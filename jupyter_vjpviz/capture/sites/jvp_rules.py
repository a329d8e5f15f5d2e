"""The check site of custom_jvp rules: the tangents a rule returns against its primal outputs.

JAX checks them in ``_flatten_jvp`` and raises with a message naming neither the
rule nor the output. The hook hands the user's rule to that check behind one more
``linear_util`` transformation that looks at what the rule returned, records each
tangent whose type is not its primal's tangent type, and returns it unchanged, so
JAX raises exactly what it would have. Under ``jax_custom_jvp3`` (JAX 0.11 on) a
custom_jvp is applied by hijax's ``custom_jvp3.__call__``, which checks the rule
elsewhere: there the rule it is handed is checked the same way, as a plain function.
"""
from __future__ import annotations

import copy
import functools
import inspect
import sys
import weakref

import jax

from ..compat import private
from ..compat.private import ad, cd, core, hijax, lu
from ...base import safety
from .. import records
from ..compat import custom_jvp3 as jvp3_compat
from ..compat.patches import PatchSet
from ..naming import frames, function_names, leaf_paths
from ..naming.leaf_paths import Leaf
from ..records import ERROR, Record, RuleSite
from . import bwd_raises, direct_calls
from .custom_rules import kept_argument


def install(patches: PatchSet) -> None:
  patches.apply(cd, "_flatten_jvp", _wrap_flatten_jvp)
  if "jax_custom_jvp3" in jax.config.values and private.has("hijax.custom_jvp3"):
    patches.apply(hijax.custom_jvp3, "__call__", _wrap_jvp3_call)


def _wrap_jvp3_call(original):
  """``custom_jvp3.__call__`` applying a copy of itself whose rule is checked (the user's
  object keeps its own rule: a later ``defjvp`` replaces it as ever)."""
  def __call__(self, *args, **kwargs):
    rule = getattr(self, "jvp_fun", None)
    if records.current_session() is not None and rule is not None:
      applied = safety.safely(_jvp3_applied, self, sys._getframe(1), args, default=None)
      self = safety.safely(_checked_copy, self, rule, applied, default=self)
    return original(self, *args, **kwargs)
  return functools.update_wrapper(__call__, original)


def _jvp3_applied(jvp3, frame, args) -> Applied | None:
  """The user's custom_jvp behind a ``custom_jvp3`` application: on JAX 0.12 the
  ``jax.custom_jvp`` whose ``__call__`` (``frame``) made it afresh, on 0.11 the
  ``custom_jvp3`` itself (``jax.custom_jvp`` returns one under the flag)."""
  caller = frame.f_locals.get("self")
  return _applied(caller if isinstance(caller, cd.custom_jvp) else jvp3, args)


def _checked_copy(jvp3, rule, applied: Applied | None):
  view = copy.copy(jvp3)
  primal = getattr(jvp3, "f", None)
  name = function_names.function_name(primal)
  source = function_names.function_source(primal)
  jvp_name = function_names.function_name(rule)
  rule_source = function_names.function_source(rule)

  def checked(*args):   # (*nondiff values, primals, tangents), as custom_jvp3 calls it
    try:   # not a helper around the call: the rule runs as deep as without vjpviz
      pair = rule(*args)
    except BaseException as e:
      _raising(e, rule, args, applied, source, jvp_name, rule_source)
      raise
    return _recorded(pair, name, jvp_name, rule_source, applied or (lambda: primal), source,
                     args[-2:])
  view.jvp_fun = functools.update_wrapper(checked, rule)
  return view


def _wrap_flatten_jvp(original):
  def flatten_jvp(jvp, primal_name, jvp_name, *rest):
    if records.current_session() is None:   # outside a VJP, no one would hear of it
      return original(jvp, primal_name, jvp_name, *rest)
    primal = safety.safely(_primal_of, sys._getframe(1), default=None)
    checked = safety.safely(_check, jvp, primal_name, jvp_name, primal, default=None)
    made = original(checked or jvp, primal_name, jvp_name, *rest)
    if checked is not None:   # ``_checked`` in place of JAX's call_wrapped frame
      safety.safely(direct_calls.direct, made[0])
    return made
  flatten_jvp.__wrapped__ = original
  return flatten_jvp


def _primal_of(frame):
  """The custom_jvp whose ``__call__`` is ``frame`` (a weak reference) and its nondiff
  arguments as a site keeps them, read only for a mismatch (this runs on every relu and
  gelu); None where the caller is not one."""
  caller = frame.f_locals.get("self")
  return _applied(caller, frame.f_locals.get("args") or ()) if isinstance(caller, cd.custom_jvp) else None


def _applied(custom, args) -> Applied | None:
  try:
    ref = weakref.ref(custom)
  except TypeError:   # a custom_jvp that takes no weak reference: no source, no fixes
    return None
  nondiff = tuple((i, args[i]) for i in jvp3_compat.nondiff_argnums(custom) if i < len(args))
  return Applied(ref, nondiff)


class Applied:
  """One application of a custom_jvp, as its check site learns of it: the object (weakly)
  and its nondiff arguments; the site a fix needs is built from it only for a mismatch."""
  __slots__ = ("ref", "nondiff")

  def __init__(self, ref, nondiff):
    self.ref, self.nondiff = ref, nondiff

  def __call__(self):
    custom = self.ref()
    return jvp3_compat.primal(custom) if custom is not None else None

  def site(self, primals, tangents, source, jvp_name, rule_source) -> RuleSite | None:
    """The application as a ``RuleSite`` (its differentiable inputs, which had tangents,
    its nondiff values, the custom_jvp itself): what fixes judge candidates at."""
    custom = self.ref()
    if custom is None or not isinstance(primals, (tuple, list)):
      return None
    leaves, tree = jax.tree_util.tree_flatten_with_path(tuple(primals))
    given = jax.tree_util.tree_leaves(tangents, is_leaf=_is_zero)
    fun, nondiff_argnums = jvp3_compat.primal(custom), jvp3_compat.nondiff_argnums(custom)
    params = function_names.positional_names(fun)
    positions = [i for i in range(len(primals) + len(self.nondiff)) if i not in nondiff_argnums]
    return RuleSite(
        function=function_names.function_name(fun), source=source, rule=jvp_name,
        fwd_rule=None, rule_source=rule_source, call_site=None, name_stack="", occurrence=None,
        in_keys=tuple(leaf_paths.keys(p) for p, _ in leaves),
        in_names=tuple(function_names.argument_name(params, positions[p[0].idx],
                                                    jax.tree_util.keystr(p[1:])) for p, _ in leaves),
        in_avals=tuple(core.typeof(x) for _, x in leaves), in_tree=tree,
        perturbed=(tuple(not _is_zero(t) for t in given) if len(given) == len(leaves) else None),
        nondiff=tuple((i, kept_argument(v)) for i, v in self.nondiff), custom_rule=self.ref)


def _is_zero(t) -> bool:
  return isinstance(t, (cd.SymbolicZero, ad.Zero))


def _check(jvp: lu.WrappedFun, primal_name: str, jvp_name: str,
           primal) -> lu.WrappedFun:
  """``jvp`` with ``_checked`` around it (a transformation, as JAX composes its own)."""
  return jvp.wrap(_checked, (primal_name, jvp_name, function_names.function_of(jvp)[1], primal,
                             jvp.f), None)


def _checked(rule, primal_name, jvp_name, rule_source, primal, user_rule, *args):
  try:
    pair = rule(*args)
  except BaseException as e:
    _raising(e, user_rule, args, primal, None, jvp_name, rule_source)
    raise
  return _recorded(pair, primal_name, jvp_name, rule_source, primal, None, args)


def _recorded(pair, *about):
  """``pair``, a rule's output, each of its ``mismatches(pair, *about)`` recorded."""
  for rec in safety.safely(mismatches, pair, *about, default=[]):
    records.record(rec)
  return pair


def _raising(e: BaseException, user_rule, args, primal, source, jvp_name, rule_source) -> None:
  """The user's rule raised ``e``: where a statement of it raised, a ``jvp_raised`` is
  deferred (``bwd_raises`` reads the statement as it reads a bwd rule's); ``e`` leaves as
  the user's, without our frames."""
  if isinstance(e, Exception) and isinstance(primal, Applied) and len(args) >= 2:
    safety.safely(_raised, user_rule, args[-2:], primal, source, jvp_name, rule_source, e)
  safety.safely(frames.strip, e)


def _raised(user_rule, args, primal: Applied, source, jvp_name, rule_source, exc) -> None:
  custom = primal()
  source = source or (function_names.function_source(custom) if custom is not None else None)
  site = primal.site(*args, source, jvp_name, rule_source)
  code = getattr(inspect.unwrap(user_rule), "__code__", None)
  if site is not None and code is not None:
    bwd_raises.raised(site, None, code, exc, kind="jvp_raised")


def mismatches(pair, primal_name: str, jvp_name: str, rule_source: str | None,
               primal=None, source: str | None = None, args=()) -> list[Record]:
  """A record per tangent leaf whose type is not its primal output's tangent type, or one
  for a tangent tree of another structure than the primal output's. ``args``: what the
  rule was applied to (primals, tangents), for the site its fixes are judged at (made,
  with the primal's source, only for a mismatch: this runs at every application)."""
  if not isinstance(pair, (tuple, list)) or len(pair) != 2:
    return []  # JAX's own message says what a jvp rule must return

  def where() -> tuple[str | None, object]:
    found = source or (function_names.function_source(primal()) if primal and primal() else None)
    return found, (primal.site(*args, found, jvp_name, rule_source)
                   if isinstance(primal, Applied) and len(args) == 2 else None)
  want_tree = jax.tree_util.tree_structure(pair[0])
  got_tree = jax.tree_util.tree_structure(pair[1], is_leaf=_is_zero)
  if want_tree != got_tree:
    at, site = where()
    return [Record(kind="jvp_tangent_structure", severity=ERROR, function=primal_name,
                   source=at, path=None, expected=str(want_tree), got=str(got_tree),
                   rule=jvp_name, site=site, rule_source=rule_source)]
  primals = jax.tree_util.tree_flatten_with_path(pair[0])[0]
  tangents = jax.tree_util.tree_leaves(pair[1], is_leaf=_is_zero)
  wrong = []
  for (path, p), t in zip(primals, tangents):
    want = core.typeof(p).strip_weak_type().to_tangent_aval()
    got = (t.aval if isinstance(t, (cd.SymbolicZero, ad.Zero)) else core.typeof(t)).strip_weak_type()
    if not core.typematch(want, got):
      wrong.append((path, want, got))
  if not wrong:
    return []
  at, site = where()
  return [Record(kind="jvp_tangent_type", severity=ERROR, function=primal_name, source=at,
                 site=site, path=jax.tree_util.keystr(path), expected=want.str_short(),
                 got=got.str_short(), rule=jvp_name, expected_aval=want, got_aval=got,
                 leaves=(Leaf(leaf_paths.keys(path), want.str_short(), got.str_short()),),
                 rule_source=rule_source)
          for path, want, got in wrong]
