"""The fix that is right whenever JAX can differentiate the primal: differentiate it.

The cotangent a rule gets wrong becomes ``jax.vjp`` of the primal restricted to
that input, written into the rule as readable code::

    _, pullback = jax.vjp(lambda w: layer.fun(x, w), w)
    dw, = pullback(g)

bwd reaches the primal's inputs through the residuals where fwd already saves
them; otherwise fwd is rewritten to save them too (both rules change, as in
``dtypes.saved_dtype_fix``). It costs one extra forward pass of the primal in
the backward pass, and says so; like any candidate it is judged by the oracle.
"""
from __future__ import annotations

import ast

import jax

from ..analysis.diagnosis import Fix
from ..base import kinds, trees
from ..capture.sites import vjp3_rules
from ..capture.avals import ct_aval
from . import dtypes, raised, source, verify
from .source import RuleSource


def saved_args(rule, fwd: RuleSource) -> dict[int, str]:
  """{index among the differentiable arguments: how bwd names it}, for those fwd saves."""
  ret = fwd.only_return()
  if ret is None or not (isinstance(ret.value, ast.Tuple) and len(ret.value.elts) == 2):
    return {}
  differentiable = _differentiable_params(rule, fwd)
  res, res_param = ret.value.elts[1], rule.src.params[len(rule.user_rules.nondiff_argnums)]
  if isinstance(res, ast.Name):
    return {differentiable.index(res.id): res_param} if res.id in differentiable else {}
  if not isinstance(res, ast.Tuple):
    return {}
  unpacked = _unpacked(rule.src, res_param, len(res.elts))
  return {differentiable.index(e.id): unpacked[m] if unpacked else f"{res_param}[{m}]"
          for m, e in enumerate(res.elts) if isinstance(e, ast.Name) and e.id in differentiable}


def fallbacks(rule) -> list[Fix]:
  """The cotangents the rule gets the type of wrong by differentiating the primal, and
  every cotangent so (for what is wrong in value too): both are judged like any fix."""
  found = [fallback(rule, whole=False), fallback(rule, whole=True)]
  return list({f.code: f for f in found if f is not None}.values())


def fallback(rule, whole: bool) -> Fix | None:
  """Every return gives the ill-typed arguments' cotangents (all of them, if ``whole`` or
  for a structure error) by differentiating the primal; None where it cannot be written."""
  d, user_rules = rule.d, rule.user_rules
  if (not kinds.of(d.kind).rewrites_returns or user_rules.symbolic_zeros
      or getattr(user_rules, "with_accums", False)):
    return None
  fwd = source.of_role(user_rules, "fwd")
  name = _primal_name(rule)
  n_nondiff = len(user_rules.nondiff_argnums)
  if fwd is None or name is None or len(rule.src.params) != n_nondiff + 2:
    return None
  n_differentiable = len(d.site.in_tree.children())
  if len(fwd.params) != n_differentiable + n_nondiff:
    return None
  within = rule.within   # the cotangents' place in the return (a logging rule's first half)
  keys = rule.keys[len(within):]
  whole = whole or kinds.of(d.kind).structural or not keys or not isinstance(keys[0], int) or any(
      source.element(ret.value, [*within, keys[0]]) is None for ret in rule.src.returns())
  chosen = _left_none(rule, n_differentiable)
  if whole and chosen and all(source.element(ret.value, [*within, k]) is not None
                              for ret in rule.src.returns() for k in range(n_differentiable)):
    # every argument but those the rule leaves without a gradient by choice (None)
    whole, targets = False, [k for k in range(n_differentiable) if k not in chosen]
  else:
    targets = list(range(n_differentiable)) if whole else _wrong(rule, n_differentiable, keys[0])
  whole = whole or len(targets) == n_differentiable   # every argument ill-typed: one fix, not two
  reach = saved_args(rule, fwd)
  missing = [k for k in range(n_differentiable) if k not in reach]
  edits, new_fwd, unpack = [], "", []
  first = rule.src.first_statement
  if missing:
    saved = _save(rule, fwd, missing)
    if saved is None:
      return None
    new_fwd, unpacking, names = saved
    reach.update(names)
    unpack = [unpacking]
  ct = rule.src.params[n_nondiff + 1]
  if _stored(rule.src, ct):   # the body rebinds its cotangent (``g = g[..., None]``): keep it
    unpack.append(f"{dtypes.unused(ct + '_in', rule.src)} = {ct}")
    ct = unpack[-1].split(" = ")[0]
  if unpack and not isinstance(first, ast.Return):
    edits.append(before_first := rule.src.before(first, unpack))
  lines, results = _pullback(rule, fwd, name, reach, targets, whole, ct)
  replaced = []
  for ret in rule.src.returns():
    at = [source.element(ret.value, within)] if whole else \
        [source.element(ret.value, [*within, k]) for k in targets]
    if None in at:
      return None
    edits += [rule.src.before(ret, (unpack if ret is first else []) + lines)]
    edits += list(zip(at, results))
    replaced += at
  drop = raised.dropped(rule, replaced)   # a statement that raised computing what is replaced
  if drop is None:
    return None
  if drop and unpack and drop[0][0].lineno == first.lineno:   # the unpacking takes its place
    edits.remove(before_first)
    drop = [(drop[0][0], "".join(f"{' ' * first.col_offset}{line}\n" for line in unpack))]
  edits += drop
  differentiable = _differentiable_params(rule, fwd)
  what = "every cotangent" if whole else \
      f"the gradient of {' and '.join(differentiable[k] for k in targets)}"
  saving = f"; fwd saves {', '.join(differentiable[k] for k in missing)} in the residuals for it" \
      if missing else ""
  return Fix(f"Compute {what} by differentiating {d.function}",
             (new_fwd + "\n" if new_fwd else "") + rule.src.replace(edits),
             f"jax.vjp of {d.function} itself, so equal to its derivative; costs one extra "
             f"forward pass of {d.function} in the backward pass{saving}", exact=True)


def _stored(src: RuleSource, name: str) -> bool:
  """Whether the rule's body assigns ``name``."""
  return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id == name
             for n in ast.walk(src.node))


def _pullback(rule, fwd, name: str, reach: dict, targets: list[int], whole: bool, ct: str):
  """The lines computing the cotangent(s), and the expressions that then hold them."""
  ns = verify.namespace(rule.user_rules)
  jax_name = next((k for k, v in ns.items() if v is jax), None)
  prefix = [] if jax_name else ["import jax"]
  jax_name = jax_name or "jax"
  differentiable = _differentiable_params(rule, fwd)
  n_nondiff = len(rule.user_rules.nondiff_argnums)
  nondiff = dict(zip(rule.user_rules.nondiff_argnums, rule.src.params[:n_nondiff]))
  others = [reach[k] for k in range(len(differentiable)) if k not in targets] + \
      list(nondiff.values())
  params = {k: _fresh(differentiable[k], others) for k in targets}
  args, k = [], 0
  for i in range(len(fwd.params)):
    if i in nondiff:
      args.append(nondiff[i])
      continue
    args.append(params.get(k, reach[k]))
    k += 1
  primal = name
  call = primal if whole and not nondiff else \
      f"lambda {', '.join(params[k] for k in targets)}: {primal}({', '.join(args)})"
  pullback = dtypes.unused("pullback", rule.src)
  lines = prefix + [f"_, {pullback} = {jax_name}.vjp({call}, "
                    f"{', '.join(reach[k] for k in targets)})"]
  if whole:
    return lines, [f"{pullback}({ct})"]
  outs = [dtypes.unused(f"d{differentiable[k]}", rule.src) for k in targets]
  return lines + [f"{', '.join(outs)}{',' if len(outs) == 1 else ''} = {pullback}({ct})"], outs


def _left_none(rule, n_differentiable: int) -> set[int]:
  """The arguments the user's rule returns None for (no gradient, by choice)."""
  none = verify.left_none(rule.d)
  slices = trees.arg_slices(rule.d.site.in_tree)
  return {k for k in range(n_differentiable)
          if slices[k].stop > slices[k].start and set(range(slices[k].start, slices[k].stop)) <= none}


def _wrong(rule, n_differentiable: int, failing: int) -> list[int]:
  """The arguments whose cotangents the rule gets wrong: in value, those the oracle found
  differing (every leaf of the finding); else those of the wrong type."""
  if not rule.d.leaf_errors or kinds.of(rule.d.kind).wrong != kinds.VALUE:
    return _ill_typed(rule, n_differentiable, failing)
  slices = trees.arg_slices(rule.d.site.in_tree)
  bad = {l.index for l in rule.d.leaf_errors}
  return [k for k, sl in enumerate(slices[:n_differentiable])
          if k == failing or bad & set(range(sl.start, sl.stop))]


def _ill_typed(rule, n_differentiable: int, failing: int) -> list[int]:
  """The arguments whose cotangents the rule gets the type of wrong (the failing one too)."""
  try:
    out = verify.rule_output(rule.d)
  except Exception:  # noqa: BLE001 - a rule that cannot run abstractly: the failing one only
    return [failing]
  site = rule.d.site
  want = jax.tree_util.tree_unflatten(site.in_tree, [ct_aval(a) for a in site.in_avals])
  if not isinstance(out, (tuple, list)) or len(out) != n_differentiable:
    return [failing]
  return [k for k in range(n_differentiable)
          if k == failing or (out[k] is not None and _signature(out[k]) != _signature(want[k]))]


def _signature(tree):
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  return treedef, [(tuple(l.shape), jax.numpy.dtype(l.dtype)) for l in leaves]


def _save(rule, fwd: RuleSource, missing: list[int]):
  """fwd also saves the arguments ``missing``: (new fwd text, bwd's unpacking, their names)."""
  ret = fwd.only_return()
  if ret is None or not (isinstance(ret.value, ast.Tuple) and len(ret.value.elts) == 2) \
      or not dtypes.named_defs(rule, fwd):
    return None
  differentiable = _differentiable_params(rule, fwd)
  res = ret.value.elts[1]
  saved = [differentiable[k] for k in missing]
  names = [dtypes.unused(s, rule.src) for s in saved]
  tup = saved[0] if len(saved) == 1 else f"({', '.join(saved)})"
  new_fwd = fwd.replace([(res, f"({fwd.segment(res)}, {tup})")])
  res_param = rule.src.params[len(rule.user_rules.nondiff_argnums)]
  got = names[0] if len(names) == 1 else f"({', '.join(names)})"
  return new_fwd, f"{res_param}, {got} = {res_param}", dict(zip(missing, names))


def _differentiable_params(rule, fwd: RuleSource) -> list[str]:
  nondiff = set(rule.user_rules.nondiff_argnums)
  return [p for i, p in enumerate(fwd.params) if i not in nondiff]


def _primal_name(rule) -> str | None:
  """How the rule calls the primal: a method of what it is bound to (a hijax primitive's
  ``self.expand``), else ``.fun`` of a name it sees bound to the custom_vjp JAX runs."""
  method, bound = rule.user_rules.primal_method, rule.src.bound_params
  if method and bound:
    return f"{bound[0]}.{method}"
  cvjp = rule.d.site.custom_rule()
  name = next((k for k, v in verify.namespace(rule.user_rules).items()
               if vjp3_rules.names(v, cvjp)), None)
  return f"{name}.{vjp3_rules.primal_attribute(cvjp)}" if name else None


def _fresh(name: str, used: list[str]) -> str:
  """``name``, suffixed until no expression in ``used`` reads it (a lambda parameter)."""
  taken = {n.id for text in used for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)}
  while name in taken:
    name += "_"
  return name


def _unpacked(src: RuleSource, name: str, n: int) -> list[str] | None:
  """Names in ``a, b = name`` in the rule body, if it unpacks ``name`` that way."""
  for stmt in src.node.body:
    if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name)
        and stmt.value.id == name and isinstance(stmt.targets[0], ast.Tuple)
        and len(stmt.targets[0].elts) == n
        and all(isinstance(e, ast.Name) for e in stmt.targets[0].elts)):
      return [e.id for e in stmt.targets[0].elts]
  return None
