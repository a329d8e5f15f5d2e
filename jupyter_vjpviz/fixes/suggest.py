"""Fix suggestions for a Diagnosis, best first: generate every candidate, then judge and rank.

Each rule fix is the whole rule with the failing expression rewritten (in every
return that produced it), so the user reads it in their own words; a dtype fix
that needs the primal's dtype in the residuals rewrites fwd and bwd together.
Candidates come from the templates here (read off the expected and produced
types, ``Diagnosis.expected_aval``/``got_aval``, and the shape of the returned
expression), from the search in ``candidates``, from differentiating the
primal (``primal``), and zeros as a placeholder; nothing is specific to a
function. A template's ``exact`` is only its claim; ``rank`` judges every
candidate alike against the primal's own derivative and sets the verdict.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import math
from typing import Any

import jax

from ..analysis.diagnosis import Diagnosis, Fix
from ..base import kinds, syntax, trees
from ..base.safety import safely
from ..capture.compat import custom_jvp3
from ..capture.naming import library_wrappers
from ..capture.sites import vjp3_rules
from ..capture.avals import ct_aval
from . import (calls, candidates, dtypes, exprs, missing_leaves, primal, raised, rank, returns,
               rule_text, solves, source, verify)
from .source import RuleSource


def attach(d: Diagnosis) -> Diagnosis:
  """``d`` with its rule's text (``rule_text``) and its fixes, both read off the one failing
  Rule found here; fixes that cannot be judged cost the fixes, not the text."""
  if d.solver is not None:   # a custom_linear_solve solve: judged by its linear system
    d = dataclasses.replace(d, rule_text=rule_text.of(d, None))
    return dataclasses.replace(d, fixes=tuple(safely(solves.suggestions, d, default=[])))
  custom_rule = d.site.custom_rule() if d.site is not None and d.site.custom_rule is not None else None
  rule = safely(Rule.of, d, library_wrappers.user_rules(custom_rule)) if custom_rule is not None else None
  d = dataclasses.replace(d, rule_text=rule_text.of(d, rule))
  return dataclasses.replace(d, fixes=tuple(safely(suggestions, d, custom_rule, rule, default=[])))


def suggestions(d: Diagnosis, custom_rule, rule: Rule | None) -> list[Fix]:
  if custom_rule is None or not kinds.of(d.kind).rule_fixers and kinds.of(d.kind).call_fixers:
    return rank.unjudged(calls.suggestions(d), _NO_RULE)   # a call to write, not a rule
  if rule is None:
    return []
  judge = (rank.TangentJudge if kinds.of(d.kind).role == "jvp" else rank.Judge).of(rule)
  found = [f for family in kinds.of(d.kind).rule_fixers for f in RULE_FIXERS[family](rule)]
  found += candidates.for_rule(rule)
  fallbacks = (primal.fallbacks(rule) + _jvp_fallback(rule) + missing_leaves.fixes(rule)) \
      if judge.differentiable else []
  return rank.rank(judge, found, fallbacks, _placeholders(rule))


_NO_RULE = ("no custom rule to judge it against: the fix is the call to write, and JAX "
            "differentiates the rest itself")


@dataclasses.dataclass(frozen=True)
class Rule:
  """The failing rule: its diagnosis, the user's custom_vjp and the rule's source."""
  d: Diagnosis
  user_rules: Any
  src: RuleSource
  closure: bool = False   # a VJP closure the user's function returned (jax.custom_gradient)

  @classmethod
  def of(cls, d: Diagnosis, user_rules) -> Rule | None:
    role = kinds.of(d.kind).role
    if role is None:   # the kind names no rule of the user's at fault
      return None
    base = d.function if d.function and d.function.isidentifier() else "rule"
    name = f"{base}_{role}"   # what a lambda rule's def is called
    while name in getattr(verify.home(user_rules), "__globals__", {}):
      name += "_"
    rule = inspect.unwrap(getattr(user_rules, role))
    closure = not library_wrappers.user_code(rule) and role == "bwd" and bool(d.rule_source)
    if closure:   # JAX's bwd runs a closure the user's function returned
      src = source.nested(verify.home(user_rules), d.rule_source, name)
    elif library_wrappers.user_code(rule):   # never edit a library's code
      src = source.of_role(user_rules, role, name)
    else:
      return None
    return cls(d, user_rules, src, closure) if src is not None else None

  def fix(self, title: str, edits: list, reason: str, exact: bool) -> Fix:
    """A candidate; ``exact`` is the template's claim, a prior until it is judged."""
    return Fix(title, self.src.replace(edits), reason, exact)

  @property
  def keys(self) -> list:
    keys = source.path_keys(self.d.path)
    kind = kinds.of(self.d.kind)
    if kind.role == "jvp":   # the tangent half of the rule's (primal output, tangent) pair
      return [1, *keys]
    if self.within:
      return [*self.within, *keys]
    if kind.structural and kind.role == "bwd":   # a type's path is the user's return's already
      keys = source.users_return_keys(self.d.site, self.user_rules.bwd, keys)
    if self.closure and keys[:1] == [0] and len(self.d.site.in_tree.children()) == 1 and not any(
        isinstance(r.value, (ast.Tuple, ast.List)) for r in self.src.returns()):
      return keys[1:]   # custom_gradient takes a one-argument VJP's cotangent bare
    return keys

  def cotangents(self, value: ast.expr) -> ast.expr:
    """The cotangents a return spells out in ``value``: its element ``within`` (a logging
    rule's ``(cotangents, logs)`` pair), else ``value`` itself."""
    return (source.element(value, self.within) if self.within else None) or value

  @property
  def within(self) -> list:
    """Where the cotangents are in what the rule returns: the first half of a logging
    rule's (cotangents, logs) pair; the whole return of any other."""
    logs = kinds.of(self.d.kind).role == "bwd" and getattr(self.user_rules, "with_logs", False)
    return [0] if logs else []

  @property
  def jnp(self) -> str:
    """How the rule's module spells ``jax.numpy``."""
    names = self.globals
    alias = next((k for k, v in names.items() if v is jax.numpy), None)
    return alias or "jax.numpy"

  @property
  def globals(self) -> dict:
    return getattr(verify.home(self.user_rules), "__globals__", {})

  def zeros(self, aval) -> str:
    return f"{self.jnp}.zeros({tuple(aval.shape)}, {self.jnp}.{aval.dtype})"


# --------------------------------------------------------- cotangent types

def _type_fixes(rule: Rule) -> list[Fix]:
  """bwd_type, silent_dtype, accumulator_type: rewrite the failing expression(s).

  Without an expression to point at (a returned variable, returns that cannot
  be told apart) only the placeholders and the primal's derivative are left.
  """
  kind = kinds.of(rule.d.kind)
  if kind.channel == kinds.ACCUMULATED:
    arg = _accum_arg(rule)
    nodes = [arg] if arg is not None else None
  else:
    nodes = returns.failing_elements(rule)
  # A dtype JAX let through has the shape it should: only shapes can be swapped.
  fixes = _swaps(rule) if kind.channel == kinds.RETURNED and not kind.silent else []
  if nodes:
    fixes += _expression_fixes(rule, nodes, fallback=not fixes)
  return fixes


def _accum_arg(rule: Rule) -> ast.expr | None:
  """``E`` in ``acc.accum(E)``, for the accumulator of the failing input."""
  site = rule.d.site
  if rule.d.path not in site.in_paths:
    return None
  before = 1 if rule.closure else 2   # a custom_gradient closure takes (g, *accums)
  position = len(rule.user_rules.nondiff_argnums) + before + site.in_paths.index(rule.d.path)
  if position >= len(rule.src.params):
    return None
  acc = rule.src.params[position]
  found = [n.args[0] for n in ast.walk(rule.src.node)
           if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
           and n.func.attr == "accum" and isinstance(n.func.value, ast.Name)
           and n.func.value.id == acc and n.args]
  return found[0] if len(found) == 1 else None


def _expression_fixes(rule: Rule, nodes: list[ast.expr], fallback: bool = True) -> list[Fix]:
  """Each rewrite the types justify, applied to every node (one per producing return)."""
  want, got = rule.d.expected_aval, rule.d.got_aval
  if want is None or got is None:
    return []
  dtype = _dtype_text(rule, want.dtype) if got.dtype != want.dtype else None
  fixes = []
  if dtype is not None and got.shape == want.shape and _reachable_dtype(rule, want.dtype) is None:
    saved = dtypes.saved_dtype_fix(rule, nodes)   # right for any input dtype: before the literal
    fixes += [saved] if saved is not None else []
  why = f"the gradient of a {want.dtype} input is {want.dtype}"
  per_node = [exprs.typed_rewrites(rule.src, n, want, got, dtype, why) for n in nodes]
  for title, texts, reason in exprs.common(per_node):
    fixes.append(rule.fix(title, list(zip(nodes, texts)), reason, exact=True))
  fixes += _collective_fixes(rule, nodes, want, got)
  if not fixes and fallback and math.prod(got.shape) == math.prod(want.shape):
    fixes.append(_reshaped(rule, nodes, want, got))
  return fixes


def _collective_fixes(rule: Rule, nodes: list[ast.expr], want, got) -> list[Fix]:
  """Varying manual axes (``{V:dp}``) lost to a collective in the rule: remove or re-vary it."""
  lost = sorted(exprs.varying(want) - exprs.varying(got))
  if not lost or want.shape != got.shape:
    return []
  fixes = []
  for call in (c for node in nodes for c in exprs.collectives(node)):
    inner = rule.src.segment(call.args[0])
    fixes.append(rule.fix(f"Remove {rule.src.segment(call.func)}", [(call, inner)],
                          f"the cotangent of an input varying over {lost} varies over them "
                          "too; JAX's transpose already sums where the primal was invariant",
                          exact=True))
    transposed = exprs.collective_transposed(rule.src, call, tuple(lost))
    if transposed is not None:   # where the cotangent itself is invariant (an all-reduce's)
      fixes.append(rule.fix(f"Replace {rule.src.segment(call.func)} by its transpose",
                            [(call, transposed)],
                            f"the cotangent of an input varying over {lost} is each device's "
                            "share of the reduction: the collective's own transpose", exact=True))
    fixes.append(rule.fix(f"Mark the {rule.src.segment(call.func)} result varying again",
                          [(call, exprs.revaried(rule.src.segment(call), tuple(lost)))],
                          "keeps the reduction and restores the varying axes", exact=False))
  return fixes


def _reshaped(rule: Rule, nodes: list[ast.expr], want, got) -> Fix:
  def reshaped(node):
    text = f"{rule.jnp}.reshape({rule.src.segment(node)}, {tuple(want.shape)})"
    return exprs.cast(text, _dtype_text(rule, want.dtype)) if got.dtype != want.dtype else text
  return rule.fix(f"Reshape to {want.str_short()}", [(n, reshaped(n)) for n in nodes],
                  "same number of elements; check that the order is the gradient's", False)


def _placeholders(rule: Rule) -> list[Fix]:
  """Zeros of the expected type: right only where the primal's derivative is zero."""
  kind = kinds.of(rule.d.kind)
  if not kind.has_reference:
    return []
  want = rule.d.expected_aval
  nodes = returns.failing_elements(rule) if not kind.structural else None
  if nodes and want is not None:
    return [rule.fix(f"Return zeros of type {want.str_short()}",
                     [(n, rule.zeros(want)) for n in nodes],
                     "zero is this input's gradient here", False)]
  return _zeros_template(rule)


def _swaps(rule: Rule) -> list[Fix]:
  """Two returned cotangents that have each other's types: swap them."""
  ret = rule.src.only_return()
  if ret is None or not isinstance(ret.value, (ast.Tuple, ast.List)) or len(rule.keys) != 1:
    return []
  out, wanted = _rule_output(rule), verify.expected_args(rule.d.site)
  i, elts = rule.keys[0], ret.value.elts
  if not isinstance(out, (tuple, list)) or len(out) != len(wanted) or len(elts) != len(out):
    return []
  return [rule.fix(f"Swap outputs {i} and {j}",
                   [(elts[i], rule.src.segment(elts[j])), (elts[j], rule.src.segment(elts[i]))],
                   f"output {i} has the type of input {j} and output {j} that of input {i}",
                   exact=True)
          for j in range(len(out))
          if j != i and _types(out[j]) == _types(wanted[i]) and _types(out[i]) == _types(wanted[j])]


def _dtype_text(rule: Rule, dtype) -> str:
  """``x.dtype`` for a primal input the rule can reach with that dtype, else the literal."""
  access = _reachable_dtype(rule, dtype)
  return f"{access}.dtype" if access is not None else f"{rule.jnp}.{dtype}"


def _reachable_dtype(rule: Rule, dtype) -> str | None:
  """How the rule names a primal input of ``dtype``, if it can."""
  return next((access for access, aval in _reachable_primals(rule) if aval.dtype == dtype), None)


def _reachable_primals(rule: Rule):
  """(expression in the rule, aval) for each primal input the rule can name."""
  if kinds.of(rule.d.kind).role == "fwd":
    yield from dtypes.primal_params(rule, rule.src)
    return
  if "fwd" not in verify.live_rules(rule.user_rules):   # a custom_jvp: the literal dtype
    return
  fwd = source.of_role(rule.user_rules, "fwd")
  arrays = [aval for _, aval in dtypes.primal_params(rule, fwd)] if fwd else []
  for k, access in primal.saved_args(rule, fwd).items() if arrays else ():
    yield access, arrays[k]


# --------------------------------------------------------- cotangent trees

def _structure_fixes(rule: Rule) -> list[Fix]:
  ret = rule.src.only_return()
  if ret is None:
    return []
  out, wanted = _rule_output(rule), verify.expected_args(rule.d.site)
  value, n = rule.cotangents(ret.value), len(wanted)
  fixes = []
  if out is not None and not isinstance(out, (tuple, list)) and n == 1:
    fixes.append(rule.fix("Wrap the cotangent in a tuple", [(value, f"({rule.src.segment(value)},)")],
                          "a bwd rule returns one cotangent per primal argument, as a tuple", True))
  elif out is not None and not isinstance(out, (tuple, list)):   # one bare cotangent for several
    fixes += _realigned(rule, value, (out,), wanted, [rule.src.segment(value)])
  elif _nondiff_included(rule, value, n):
    fixes += _without_nondiff(rule, value)
  elif isinstance(out, (tuple, list)) and len(out) != n:
    fixes += _realigned(rule, value, out, wanted)
  elif isinstance(out, (tuple, list)):
    fixes += _key_fixes(rule, value, wanted)
  return fixes


def _zeros_template(rule: Rule) -> list[Fix]:
  """Every return statement returning zeros of the expected structure."""
  if not trees.builtin_only(rule.d.site.in_tree):   # a user's class: no literal to write
    return []
  template = _literal(jax.tree_util.tree_unflatten(
      rule.d.site.in_tree, [_zeros_or_none(rule, a) for a in rule.d.site.in_avals]))
  if template is None or not rule.src.returns():
    return []
  return [rule.fix("Return zeros of the expected structure",
                   [(ret.value, template) for ret in rule.src.returns()],
                   f"the structure {rule.d.site.in_structure} with zero gradients", False)]


def _nondiff_included(rule: Rule, value: ast.expr, n: int) -> bool:
  nondiff = rule.user_rules.nondiff_argnums
  return bool(nondiff) and isinstance(value, (ast.Tuple, ast.List)) \
      and len(value.elts) == n + len(nondiff)


def _without_nondiff(rule: Rule, value: ast.expr) -> list[Fix]:
  nondiff = rule.user_rules.nondiff_argnums
  kept = [rule.src.segment(e) for m, e in enumerate(value.elts) if m not in nondiff]
  return [rule.fix("Drop the cotangents of nondiff arguments", [(value, _tuple(kept))],
                   f"arguments {tuple(nondiff)} are nondiff_argnums: the rule returns "
                   "cotangents for the others only", True)]


def _realigned(rule: Rule, value: ast.expr, out, wanted, elts: list[str] | None = None) -> list[Fix]:
  """Too few or too many cotangents: keep those matching the inputs by type, None for the rest."""
  elts = elts or ([rule.src.segment(e) for e in value.elts] if isinstance(value, (ast.Tuple, ast.List))
                  else [f"{exprs.paren(rule.src, value)}[{m}]" for m in range(len(out))])
  picked, m = [], 0
  for want in wanted:
    if m < len(out) and _types(out[m]) == _types(want):
      picked.append(elts[m])
      m += 1
    else:
      picked.append("None")
  if m != len(out) and any(o is not None for o in out[m:]):   # extra Nones are dropped
    return []
  return [rule.fix("Add None for the missing inputs" if m == len(out) else
                   "Drop the extra cotangents", [(value, _tuple(picked))],
                   "None is a zero cotangent for an input the rule does not differentiate",
                   False)]


def _key_fixes(rule: Rule, value: ast.expr, wanted) -> list[Fix]:
  """A missing or extra dict key in a returned dict literal."""
  keys = rule.keys
  parent = source.literal_at(value, keys[:-1], rule.src.node) if keys else None
  if not isinstance(parent, ast.Dict) or not isinstance(keys[-1], str):
    return []
  present = [k.value for k in parent.keys if isinstance(k, ast.Constant)]
  if keys[-1] in present:
    entry = [k for k in parent.keys if isinstance(k, ast.Constant) and k.value == keys[-1]][0]
    at = parent.keys.index(entry)
    items = [f"{rule.src.segment(k)}: {rule.src.segment(v)}"
             for i, (k, v) in enumerate(zip(parent.keys, parent.values)) if i != at]
    return [rule.fix(f"Remove the extra key {keys[-1]!r}", [(parent, "{" + ", ".join(items) + "}")],
                     f"the primal argument has no {keys[-1]!r}", False)]
  if rule.d.path not in rule.d.site.in_paths:
    return []
  # None, JAX's zero cotangent of any type: the rule may be applied at other types too
  items = [f"{rule.src.segment(k)}: {rule.src.segment(v)}" for k, v in zip(parent.keys, parent.values)]
  items.append(f"{keys[-1]!r}: None")
  return [rule.fix(f"Add the missing key {keys[-1]!r}", [(parent, "{" + ", ".join(items) + "}")],
                   f"the primal argument has {keys[-1]!r}; None gives it a zero cotangent", False)]


# ------------------------------------------------------------ forward rules

def _fwd_fixes(rule: Rule) -> list[Fix]:
  """The primal output of fwd: cast it, or compute it with the primal function."""
  ret = rule.src.only_return()
  if ret is None:
    return []
  value = ret.value
  call = _primal_call(rule)
  if not (isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == 2):
    output, read = rule.src.segment(value), _residuals_bwd_reads(rule)
    saving = [rule.fix(f"Return (primal output, {read})", [(value, f"{output}, {read}")],
                       f"fwd returns a pair: the output, and the residuals bwd unpacks ({read})",
                       False)] if read else []
    return saving + [rule.fix("Return (primal output, residuals)",
                              [(value, f"{call or output}, None")],
                              "fwd returns a pair; with residuals None the bwd rule gets None",
                              False)]
  fixes = []
  want, got = rule.d.expected_aval, rule.d.got_aval
  node = source.element(value.elts[0], rule.keys)
  if want is not None and got is not None and got.shape == want.shape and node is not None:
    fixes.append(rule.fix(f"Cast the primal output to {want.dtype}",
                          [(node, exprs.cast(exprs.uncast(rule.src, node), _dtype_text(rule, want.dtype)))],
                          f"{rule.d.function} returns {want.str_short()}", True))
  if call is not None:
    fixes.append(rule.fix(f"Compute the primal output with {call}", [(value.elts[0], call)],
                          "fwd must return exactly what the primal function returns", True))
  return fixes


def _residuals_bwd_reads(rule: Rule) -> str | None:
  """``(x, t)`` where bwd unpacks its residuals as ``x, t = res`` and fwd has each name
  (a parameter or a local it assigns): what a fwd that forgot its residuals should save."""
  bwd = source.of_role(rule.user_rules, "bwd")
  position = len(rule.user_rules.nondiff_argnums)
  if bwd is None or len(bwd.params) <= position:
    return None
  res = bwd.params[position]
  known = set(rule.src.params).union(*(syntax.names_stored(a) for a in ast.walk(rule.src.node)
                                       if isinstance(a, ast.stmt)))
  for a in ast.walk(bwd.node):
    if (isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.value, ast.Name)
        and a.value.id == res and isinstance(a.targets[0], (ast.Tuple, ast.Name))):
      target = a.targets[0]
      names = [e.id for e in getattr(target, "elts", [target]) if isinstance(e, ast.Name)]
      if names and len(names) == len(getattr(target, "elts", [target])) and set(names) <= known:
        return f"({', '.join(names)})" if isinstance(target, ast.Tuple) else names[0]
  return None


def _primal_call(rule: Rule) -> str | None:
  cvjp = rule.d.site.custom_rule()
  name = next((k for k, v in rule.globals.items() if vjp3_rules.names(v, cvjp)), None)
  return f"{name}({', '.join(rule.src.params)})" if name else None


# ------------------------------------------------------------------ helpers

def _rule_output(rule: Rule):
  try:
    return verify.rule_output(rule.d)
  except Exception:  # noqa: BLE001 - a rule that cannot run abstractly gets no type-based fix
    return None


def _types(tree):
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  return treedef, tuple((tuple(l.shape), l.dtype) for l in leaves)


def _zeros_or_none(rule: Rule, aval) -> str:
  ct = ct_aval(aval)
  return "None" if ct.dtype == jax.dtypes.float0 else rule.zeros(ct)


def _tuple(items: list[str]) -> str:
  return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _literal(tree) -> str | None:
  """Python text for a tree of tuples/lists/dicts with code-text leaves."""
  if isinstance(tree, str):
    return tree
  if isinstance(tree, (tuple, list)):
    items = [_literal(x) for x in tree]
    if None in items:
      return None
    return _tuple(items) if isinstance(tree, tuple) else f"[{', '.join(items)}]"
  if isinstance(tree, dict):
    items = {k: _literal(v) for k, v in tree.items()}
    if None in items.values():
      return None
    return "{" + ", ".join(f"{k!r}: {v}" for k, v in items.items()) + "}"
  return None


# ---------------------------------------------------------- custom_jvp tangents

def _tangent_tree_fixes(rule: Rule) -> list[Fix]:
  """A tangent tree of another structure than the primal output's: the same leaves,
  written in the output's structure (a tuple for a list, ``(t,)`` for a bare ``t``)."""
  ret = rule.src.only_return()
  want = _primal_output(rule)
  if ret is None or want is None or not isinstance(ret.value, (ast.Tuple, ast.List)) \
      or len(ret.value.elts) != 2:
    return []
  value = ret.value.elts[1]
  n = want.num_leaves
  elts = value.elts if isinstance(value, (ast.Tuple, ast.List)) and n != 1 else [value]
  if len(elts) != n:
    return []
  text = _literal(jax.tree_util.tree_unflatten(want, [rule.src.segment(e) for e in elts]))
  if text is None:
    return []
  return [rule.fix(f"Return the tangents as {text}", [(value, text)],
                   f"a jvp rule's tangents have the structure of {rule.d.function}'s output, "
                   f"{want}", True)]


def _primal_output(rule: Rule):
  """The tree structure of the primal's output at the site's types (abstract), or None."""
  site = rule.d.site
  try:
    out = jax.eval_shape(lambda *d: rule.user_rules.primal(*verify.arguments(site, d)),
                         *jax.tree_util.tree_unflatten(site.in_tree,
                                                       [trees.shape_struct(a) for a in site.in_avals]))
  except Exception:  # noqa: BLE001 - a primal that cannot run abstractly: no structure known
    return None
  return jax.tree_util.tree_structure(out)


def _jvp_fallback(rule: Rule) -> list[Fix]:
  """The tangent computed by ``jax.jvp`` of the primal itself: right whenever the primal's
  derivative is (an extra forward pass: a fix in the rule's own terms reads better)."""
  user_rules = rule.user_rules
  if "jvp" not in verify.live_rules(user_rules) or user_rules.symbolic_zeros \
      or user_rules.nondiff_argnums or len(rule.src.params) != 2:
    return []
  custom = rule.d.site.custom_rule()
  name = next((k for k, v in rule.globals.items() if v is custom), None)
  ret = rule.src.only_return()
  if name is None or ret is None or not isinstance(ret.value, (ast.Tuple, ast.List)) \
      or len(ret.value.elts) != 2:
    return []
  primals, tangents = rule.src.params
  fun = custom_jvp3.own_name(custom, "fun")
  jax_name = next((k for k, v in rule.globals.items() if v is jax), "jax")
  drop = raised.dropped(rule, [ret.value.elts[1]])   # the statement that raised computing it
  if drop is None:
    return []
  return [rule.fix(f"Compute the tangent by differentiating {rule.d.function} (jax.jvp)",
                   [(ret.value.elts[1], f"{jax_name}.jvp({name}.{fun}, {primals}, {tangents})[1]"),
                    *drop],
                   f"the tangent of {rule.d.function}'s own derivative; costs a second forward "
                   "pass", True)]


RULE_FIXERS = {"types": _type_fixes, "structure": _structure_fixes, "fwd": _fwd_fixes,
           "tangent_tree": _tangent_tree_fixes, "raised": raised.fixes}
"""The template families a kind's ``rule_fixers`` name."""

