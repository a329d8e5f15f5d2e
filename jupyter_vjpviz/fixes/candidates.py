"""Candidate fixes searched around the failing return, not picked per example.

The templates in ``suggest`` read one rewrite off the two types. These
generators search a small space built from the rule itself: other names of its
scope where the failing cotangent reads one (``w1`` for ``w2``, a residual
unpacked in the wrong order), reductions, broadcasts, transposes and reshapes to
the expected type, literal sizes replaced by the inputs' shapes, locals computed
but never returned, missing entries filled from locals, collectives that fix the
varying mesh axes, and a gather's cotangent scattered back. Nothing here knows a
function: every candidate comes from the AST, the rule's local types recorded
at the failing call (``returns.returned``) and the expected avals.

Every candidate is judged afterwards (types abstractly, values against the
primal's autodiff), so the generators may be generous; but each yields its most
plausible candidates first, a cheap abstract run of the changed expressions
(``Scope.predict``) drops those certain to be ill-typed, and the number per
generator and per rule is capped.
"""
from __future__ import annotations

import ast
import dataclasses
import itertools
import re
from typing import Any
from collections.abc import Iterator

import jax

from ..capture.compat.private import core
from ..analysis.diagnosis import Fix
from ..base import kinds, syntax, trees
from ..capture import avals, records
from . import exprs, pytrees, returns, source, verify

PER_GENERATOR = 6
PER_RULE = 30
_OUT = "__vjpviz_candidate__"
ILL = "ill-typed"   # Scope.type_of of an expression that raises


def _typed(rule) -> bool:
  """The rule returned cotangents of the wrong type (so the failing returns are known)."""
  return kinds.of(rule.d.kind).wrong == kinds.TYPE


def _by_value(rule) -> bool:
  """The rule's cotangents are well-typed and wrong by value."""
  return kinds.of(rule.d.kind).wrong == kinds.VALUE


def for_rule(rule) -> list[Fix]:
  """Candidate whole-rule fixes for a bwd rule's diagnosis, most plausible first."""
  if not kinds.of(rule.d.kind).rewrites_returns or rule.d.site is None:
    return []
  scope = Scope.of(rule)
  if scope is None:
    return []
  found = []
  for generate in _GENERATORS:
    found += sorted(generate(scope), key=lambda c: c.rank)[:PER_GENERATOR]
  found.sort(key=lambda c: c.rank)   # stable: generator order breaks ties
  unique: dict[str, Fix] = {}
  for c in found:
    unique.setdefault(c.fix.code, c.fix)
  return list(unique.values())[:PER_RULE]


@dataclasses.dataclass(frozen=True)
class Candidate:
  rank: float     # 0: predicted to have the expected type and read as the intent; higher: less so
  fix: Fix


# ------------------------------------------------------------------ the scope

@dataclasses.dataclass
class Scope:
  """The failing return and what the rule could name there, as types."""
  rule: Any
  types: dict                   # local name -> its types at the failing return
  nodes: list                   # the failing element in each return that produced it
  returned: Any                 # what the failing return gave, as types
  ret: ast.Return
  namespace: dict
  _typed: dict = dataclasses.field(default_factory=dict)

  @classmethod
  def of(cls, rule) -> Scope | None:
    """The scope at the failing return; without types where the rule cannot run on its
    own (a collective needs its mesh), so that only what the AST says is searched."""
    seen = returns.returned(rule)
    if not seen:
      nodes, ret = returns.failing_elements(rule), rule.src.only_return()
      return cls(rule, {}, nodes or [], None, ret, verify.namespace(rule.user_rules)) if ret else None
    hits = returns.failing_returns(rule, seen) if _typed(rule) else None
    hits = hits or sorted(seen)
    rets = rule.src.returns()
    nodes = [source.element(rets[k].value, rule.keys)   # else what built it (eqx.tree_at, ...)
             or source.leaf_expression(rets[k].value, rule.keys, rule.src.node, rule.globals) for k in hits]
    first = hits[0]
    return cls(rule, seen[first].scope, [n for n in nodes if n is not None] if None not in nodes
               else [], seen[first].value, rets[first], verify.namespace(rule.user_rules))

  @property
  def src(self) -> source.RuleSource:
    return self.rule.src

  @property
  def origin(self) -> ast.expr:
    """The expression that computed the failing element: its own, or for a local
    (``return dscale, dx``) the value last assigned to it."""
    node = self.nodes[0]
    found = source.assigned(self.src.node, node.id, []) if isinstance(node, ast.Name) else None
    return found if found is not None else node

  @property
  def want(self):
    """The failing input's cotangent type (a value problem carries no aval: from the site)."""
    d = self.rule.d
    if d.expected_aval is not None or d.path not in d.site.in_paths:
      return d.expected_aval
    return avals.ct_aval(d.site.in_avals[d.site.in_paths.index(d.path)])

  @property
  def got(self):
    found = self.rule.d.got_aval
    return found if found is not None else returns.at(self.returned, self.rule.keys)

  @property
  def typed(self) -> bool:
    """A type error in shape or dtype (not only the varying axes), both types known, and
    an element to rewrite."""
    return _typed(self.rule) and bool(self.nodes) and not _same(self.want, self.got) \
        and self.want is not None and self.got is not None

  @property
  def jnp(self) -> str:
    return self.rule.jnp

  @property
  def input_key(self) -> str:
    """The last key of the failing input's name: ``w`` for ``params['w']``."""
    site, path = self.rule.d.site, self.rule.d.path
    name = site.in_names[site.in_paths.index(path)] if path in site.in_paths else ""
    keys = re.findall(r"\w+", name)
    return keys[-1] if keys else ""

  def arrays(self) -> dict[str, Any]:
    """Expression -> aval for every array the rule can name at the failing return:
    locals, and the entries of tuples and dicts of them (``res[1]``)."""
    found = {}
    for name, t in self.types.items():
      if _discarded(name):
        continue
      if _is_aval(t):
        found[name] = t
      elif isinstance(t, (tuple, list)):
        found.update((f"{name}[{i}]", a) for i, a in enumerate(t) if _is_aval(a))
      elif isinstance(t, dict):
        found.update((f"{name}[{k!r}]", a) for k, a in t.items() if _is_aval(a))
    return found

  def computed(self) -> set[str]:
    """Names the rule body assigns a computation to (not a mere unpacking of its arguments)."""
    found = set()
    for stmt in syntax.own_nodes(self.src.node):
      if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and stmt.value is not None \
          and not isinstance(stmt.value, (ast.Name, ast.Subscript, ast.Tuple, ast.Attribute)):
        found |= {n.id for t in _targets(stmt) for n in ast.walk(t) if isinstance(n, ast.Name)}
    return found

  def defined_before(self, line: int) -> set[str]:
    """The parameters and the names assigned by statements ending before ``line``."""
    found = set(self.src.params)
    for stmt in syntax.own_nodes(self.src.node):
      if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and stmt.end_lineno < line:
        found |= {n.id for t in _targets(stmt) for n in ast.walk(t) if isinstance(n, ast.Name)}
    return found

  def cotangents(self) -> set[str]:
    """The bwd's cotangent parameter and the names computed from it (the rest are primal
    values: residuals and what is computed from them alone)."""
    params = self.src.params
    at = len(self.rule.user_rules.nondiff_argnums) + 1
    found = {params[at]} if at < len(params) else set()
    for stmt in syntax.own_nodes(self.src.node):
      if isinstance(stmt, (ast.Assign, ast.AugAssign)) and _loads(stmt.value) & found:
        found |= {n.id for t in _targets(stmt) for n in ast.walk(t) if isinstance(n, ast.Name)}
    return found

  def dependencies(self, node: ast.expr) -> list[ast.stmt]:
    """The assignments before the failing return that ``node``'s value comes from, in order."""
    stmts = [s for s in syntax.own_nodes(self.src.node) if isinstance(s, (ast.Assign, ast.AugAssign))
             and s.lineno < self.ret.lineno]
    needed, deps = _loads(node), []
    for stmt in reversed(stmts):
      targets = [t for target in _targets(stmt) for t in ast.walk(target)
                 if isinstance(t, ast.Name)]
      if any(t.id in needed for t in targets):
        deps.append(stmt)
        needed |= _loads(stmt.value) | ({t.id for t in targets} if isinstance(stmt, ast.AugAssign)
                                        else set())
    return deps[::-1]

  def type_of(self, expr: str, stmts: tuple[str, ...] = ()):
    """The type ``expr`` has after ``stmts``, run under ``eval_shape`` on the recorded
    types of the rule's locals; ``ILL`` if it raises, None if it cannot be run here
    (a collective outside its mesh)."""
    key = (stmts, expr)
    if key not in self._typed:
      self._typed[key] = self._evaluate(expr, stmts)
    return self._typed[key]

  def _evaluate(self, expr: str, stmts: tuple[str, ...]):
    try:
      code = compile("\n".join([*stmts, f"{_OUT} = ({expr})"]), "<vjpviz-candidate>", "exec")
    except SyntaxError:
      return None
    flat, tree = jax.tree_util.tree_flatten(self.types)
    at = [i for i, leaf in enumerate(flat) if _is_aval(leaf)]

    def run(*arrays):
      values = trees.substituted(flat, at, arrays)
      ns = {**self.namespace, **jax.tree_util.tree_unflatten(tree, values)}
      exec(code, ns)  # noqa: S102 - the user's own statements, abstractly
      return ns[_OUT]
    try:
      with records.suspended():
        return jax.eval_shape(run, *[trees.shape_struct(flat[i]) for i in at])
    except NameError:   # a local we keep no type of, an axis name outside its mesh
      return None
    except Exception:  # noqa: BLE001 - the edited expression itself is ill-typed
      return ILL

  def predict(self, edits: list) -> Any:
    """The failing element's type after ``edits``; None when it cannot be told cheaply
    (an edit outside the element and the statements it depends on)."""
    node = self.nodes[0]
    deps = self.dependencies(node)
    within = lambda outer: {id(n) for n in ast.walk(outer)}
    spans = [within(s) for s in deps]
    mine = within(node)
    if any(id(e) not in mine and not any(id(e) in s for s in spans) for e, _ in edits):
      return None
    edited = [k for k, s in enumerate(spans) if any(id(e) in s for e, _ in edits)]
    first = edited[0] if edited else len(deps)   # the statements before it are as recorded
    stmts = tuple(self.src.replace([e for e in edits if id(e[0]) in s], within=st)
                  for st, s in zip(deps[first:], spans[first:]))
    return self.type_of(self.src.replace([e for e in edits if id(e[0]) in mine], within=node),
                        stmts)

  def fits(self, t) -> bool:
    return _same(t, self.want)

  def fits_fully(self, aval) -> bool:
    """The expected type, varying mesh axes included (known for recorded locals only)."""
    return _same(aval, self.want) and exprs.varying(aval) == exprs.varying(self.want)

  def candidate(self, rank: float, title: str, edits: list, reason: str) -> Candidate:
    return Candidate(rank, Fix(title, self.src.replace(self._in_branch(edits)), reason,
                               exact=False))

  def _in_branch(self, edits: list) -> list:
    """Edits of the returned local made where the failing branch computed it, when the
    rule assigns it in several (a symbolic_zeros rule's path for an output given no
    cotangent): there the others, of the expected type already, stay as they are."""
    value = self.failing_branch()
    if value is None:
      return edits
    name, text = self.nodes[0].id, exprs.paren(self.src, value)
    return [(value, re.sub(rf"(?<![\w.]){name}\b", lambda _: text, new))
            if any(node is n for n in self.nodes) else (node, new) for node, new in edits]

  def failing_branch(self) -> ast.expr | None:
    """The value, of the two or more assigned to the returned local, that has the failing
    type where the others have another; None unless there is exactly one."""
    node = self.nodes[0] if len(self.nodes) == 1 else None
    if not isinstance(node, ast.Name) or not self.typed:
      return None
    values = [a.value for a in syntax.own_nodes(self.src.node) if isinstance(a, ast.Assign)
              and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
              and a.targets[0].id == node.id and a.lineno < self.ret.lineno]
    types = [self.type_of(self.src.segment(v)) for v in values]
    failing = [v for v, t in zip(values, types) if _same(t, self.got)]
    right = [t for t in types if _same(t, self.want)]
    return failing[0] if len(values) > 1 and len(failing) == 1 and right else None

  def holding(self, node) -> list[str]:
    """The rule's names of a value of ``node``'s structure (a pytree input it holds), those
    of arrays before those of flags (equinox's ``perturbed``)."""
    found = [n for n, t in self.types.items() if not _discarded(n) and not _is_aval(t)
             and _structure(t) == _structure(node)]
    return sorted(found, key=lambda n: _leaf_types(self.types[n]) is None)

  def shape_text(self, shape: tuple) -> str:
    """``x.shape`` for a name with that shape (the input's own first), else the literal."""
    names = [n for n, a in self.arrays().items() if tuple(a.shape) == tuple(shape)]
    names.sort(key=lambda n: (-_about(n, self.input_key), not self.fits(self.arrays()[n]), n))
    return f"{names[0]}.shape" if names else str(tuple(shape))

  def zeros_text(self, aval) -> str:
    like = [n for n, a in self.arrays().items() if _same(a, aval)]
    like.sort(key=lambda n: -_about(n, self.input_key))
    if like:
      return f"{self.jnp}.zeros_like({like[0]})"
    return f"{self.jnp}.zeros({self.shape_text(aval.shape)}, {self.jnp}.{aval.dtype})"


# ---------------------------------------------------------------- generators

def _swaps(s: Scope) -> Iterator[Candidate]:
  """Another name of the same role where the failing cotangent reads one.

  Sites are the names, tuple unpackings and constant indices in the failing
  element and in the assignments it depends on; a replacement is another array
  of the scope, likelier the more alike the names (``w1``/``w2``, ``dq``/``dk``,
  targets of one unpacking). For a type error only replacements predicted to
  give the expected type are kept; for a value error, those of unchanged type.
  """
  if len(s.nodes) != 1 or s.want is None:
    return
  node = s.nodes[0]
  deps = s.dependencies(node)
  arrays = {n: a for n, a in s.arrays().items() if n.isidentifier()}
  siblings, cotangents = _siblings(s.src.node), s.cotangents()
  options = []
  for depth, (part, line) in enumerate([(node, s.ret.lineno),
                                        *((d.value, d.lineno) for d in reversed(deps))]):
    known = s.defined_before(line)
    for site in syntax.own_nodes(part) if part is not node else _walk_with(node):
      if site is node:
        continue   # another name in place of the whole element: see _unreturned
      if isinstance(site, ast.Name) and isinstance(site.ctx, ast.Load) and site.id in arrays:
        for other in (a for a in arrays if a in known and a != site.id):
          if s.typed and _same(arrays[other], arrays[site.id]):
            continue   # a name of the same type cannot mend a type
          score = _alike(site.id, other, siblings) \
              + 3 * ((site.id in cotangents) == (other in cotangents))
          if score or s.typed:
            options.append((-score - _explains(s, arrays[site.id], arrays[other]), depth,
                            f"Use {other} instead of {site.id}",
                            [(site, other)], f"{other} has the role {site.id} has here"))
      elif isinstance(site, ast.Subscript) and isinstance(site.value, ast.Name) \
          and isinstance(site.slice, ast.Constant) and isinstance(site.slice.value, int):
        options += _index_swaps(s, site, depth)
  for depth, stmt in enumerate(reversed(deps)):
    options += _unpack_swaps(s, stmt, depth)
  options.sort(key=lambda o: o[:2])
  for score, depth, title, edits, reason in options[:2 * PER_GENERATOR]:   # each costs a trace
    t = s.predict(edits)
    if t is None and s.typed:
      yield s.candidate(3 + depth / 10, title, edits, reason)
    elif s.fits(t) and (s.typed or _by_value(s.rule)):
      yield s.candidate((0 if -score >= 5 else 0.5 if -score >= 3 else 1) + depth / 10,
                        title, edits, reason)


def _explains(s: Scope, old, new) -> int:
  """1 if ``new`` has a dimension the cotangent lacks and ``old`` has not (a cheap hint,
  before any trace, that the swap mends the type)."""
  if not s.typed:
    return 0
  missing = set(s.want.shape) - set(s.got.shape)
  return int(bool(missing & (set(new.shape) - set(old.shape))))


def _index_swaps(s: Scope, site: ast.Subscript, depth: int) -> list:
  t = s.types.get(site.value.id)
  if not isinstance(t, (tuple, list)):
    return []
  i = site.slice.value
  return [(-4, depth, f"Use {site.value.id}[{j}] instead of {site.value.id}[{i}]",
           [(site.slice, str(j))], f"entry {j} of {site.value.id} is the one meant here")
          for j in range(len(t)) if j != i and _is_aval(t[j])]


def _unpack_swaps(s: Scope, stmt: ast.stmt, depth: int) -> list:
  """``x, w = res`` unpacked in the other order: two targets exchanged."""
  if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
          and isinstance(stmt.targets[0], (ast.Tuple, ast.List))):
    return []
  elts = stmt.targets[0].elts
  names = [e.id if isinstance(e, ast.Name) else None for e in elts]
  return [(-5, depth, f"Unpack {names[i]} and {names[j]} in the other order",
           [(elts[i], names[j]), (elts[j], names[i])],
           f"{s.src.segment(stmt.value)} holds them the other way round")
          for i, j in itertools.combinations(range(len(elts)), 2)
          if names[i] and names[j] and not _same(s.types.get(names[i]), s.types.get(names[j]))]


def _shapes(s: Scope) -> Iterator[Candidate]:
  """Reductions, broadcasts, transposes and reshapes of the failing element to the
  expected type; a ``sum`` over too few axes is widened in place, and each
  reduction has a ``mean`` variant ranked after it."""
  if not s.typed:
    if _by_value(s.rule) and s.nodes:
      yield from _mean_sum(s)
    return
  want, got = tuple(s.want.shape), tuple(s.got.shape)
  cast = s.want.dtype != s.got.dtype
  rewrites = []
  for how, rank, reason in (("sum", 0, f"the primal {want} was broadcast to {got}: its "
                             "gradient sums over the broadcast axes"),
                            ("mean", 2, "an average over the broadcast axes")):
    for drop, keep in _reductions(got, want):
      rewrites.append((rank, f"{how} to {s.want.str_short()}",
                       lambda n, d=drop, k=keep, h=how: _reduced(s, n, d, k, h), reason))
    if how == "sum":   # before the mean of the same axes
      rewrites.append((0, f"widen the reduction to {s.want.str_short()}",
                       lambda n: _widened(s, n), "the reduction leaves out axes that the "
                       "primal broadcast"))
  for axes in _expansions(got, want):
    rewrites.append((0, "broadcast back to the input's shape",
                     lambda n, a=axes: _broadcast(s, n, a, want),
                     f"the primal {want} was reduced to {got} (a mask, a mean): its gradient "
                     "is broadcast back"))
  for perm in _permutations(got, want):
    rewrites.append((0, f"transpose {perm}", lambda n, p=perm: exprs.transposed(s.src, n, p),
                     f"{got} is {want} with its axes permuted"))
  if got != want and _size(got) == _size(want):
    rewrites.append((2, f"reshape to {want}",
                     lambda n: f"{exprs.paren(s.src, n)}.reshape({s.shape_text(want)})",
                     "same number of elements; the order must be the gradient's"))
  for rank, title, rewrite, reason in rewrites:
    texts = [rewrite(n) for n in s.nodes]
    if None in texts:
      continue
    if cast:
      texts = [exprs.cast(t, f"{s.jnp}.{s.want.dtype}") for t in texts]
      title += f" and cast to {s.want.dtype}"
    edits = list(zip(s.nodes, texts))
    t = s.predict(edits[:1])
    if t is None or s.fits(t):
      yield s.candidate(rank + (t is None), title[0].upper() + title[1:], edits, reason)


def _reductions(got: tuple, want: tuple) -> list[tuple[tuple, tuple]]:
  """(axes dropped, axes then kept as size 1) reducing ``got`` to ``want``;
  trailing-aligned first (how broadcasting lines shapes up)."""
  if len(got) < len(want) or got == want:
    return []
  found = []
  for p in itertools.combinations(range(len(got)), len(want)):
    if all(got[i] == w or w == 1 for i, w in zip(p, want)):
      drop = tuple(i for i in range(len(got)) if i not in p)
      keep = tuple(k for k, (i, w) in enumerate(zip(p, want)) if w == 1 and got[i] != 1)
      found.append((-sum(p), drop, keep))
  return [(drop, keep) for _, drop, keep in sorted(found)[:3]]


def _reduced(s: Scope, node: ast.expr, drop: tuple, keep: tuple, how: str = "sum") -> str:
  text = exprs.paren(s.src, node)
  if drop:
    text = f"{text}.{how}(axis={_axis(drop)})"
  if keep:
    text = f"{text}.{how}(axis={_axis(keep)}, keepdims=True)"
  return text


def _widened(s: Scope, node: ast.expr) -> str | None:
  """``X.sum(axis=a)`` summing too few axes (or dropping one it should keep) as one
  reduction of ``X`` to the expected shape."""
  inner = _reduction_operand(node)
  t = s.type_of(s.src.segment(inner)) if inner is not None else None
  found = _reductions(tuple(t.shape), tuple(s.want.shape)) if hasattr(t, "shape") else []
  if not found:
    return None
  drop, keep = found[0]
  how = node.func.attr
  if drop and keep:
    return _reduced(s, inner, drop, keep, how)
  axes = drop or tuple(i for i in range(len(t.shape)) if i in
                       {p for p, w in enumerate(s.want.shape) if w == 1 and t.shape[p] != 1})
  return f"{exprs.paren(s.src, inner)}.{how}(axis={_axis(axes)}" \
      f"{', keepdims=True' if not drop else ''})"


def _axis(axes: tuple) -> str:
  return str(axes[0]) if len(axes) == 1 else str(axes)


def _reduction_operand(node: ast.expr) -> ast.expr | None:
  """``X`` in ``X.sum(...)`` / ``X.mean(...)`` with only an axis argument."""
  if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
      and node.func.attr in ("sum", "mean") and len(node.args) <= 1 \
      and all(k.arg == "axis" for k in node.keywords):
    return node.func.value
  return None


def _mean_sum(s: Scope) -> Iterator[Candidate]:
  """A ``mean`` where a ``sum`` was meant, or the other way round (a value error)."""
  node = s.nodes[0]
  for call in (c for part in [node, *(d.value for d in s.dependencies(node))]
               for c in syntax.own_nodes(part) if isinstance(c, ast.Call)
               and isinstance(c.func, ast.Attribute) and c.func.attr in ("sum", "mean")):
    other = "mean" if call.func.attr == "sum" else "sum"
    start = s.src.segment(call.func.value)
    text = s.src.segment(call)
    yield s.candidate(1, f"Use {other} instead of {call.func.attr}",
                      [(call, text.replace(f"{start}.{call.func.attr}", f"{start}.{other}", 1))],
                      f"a {call.func.attr} scales the gradient by the reduced size")


def _factors(s: Scope) -> Iterator[Candidate]:
  """The cotangent times what it multiplied in the primal, reduced to the expected type:
  ``(g * xhat).sum()`` where the rule wrote ``g.sum(0)`` for a scale's gradient (the
  gradient of ``a * b`` with respect to ``a`` is ``g * b`` summed over what ``a`` was
  broadcast to). Each array the rule holds with the cotangent's type, not computed from
  it (a residual), is tried as the factor."""
  if not s.typed or len(s.nodes) != 1:
    return
  origin = s.origin
  inner = _reduction_operand(origin) or origin
  cotangents = s.cotangents() & _loads(inner)
  arrays = s.arrays()
  for c in sorted(cotangents):
    kind = arrays.get(c)
    factors = [r for r, a in arrays.items() if kind is not None and r != c and r.isidentifier() and _same(a, kind)
               and not (_loads(ast.parse(r, mode="eval")) & s.cotangents())]
    factors.sort(key=lambda r: (r.startswith("_"), r))
    for r in factors[:PER_GENERATOR]:
      segment = s.src.segment(inner)
      product = f"{c} * {r}" if segment.strip() == c else f"({c} * {r})"
      text = re.sub(rf"(?<![\w.]){c}\b", lambda _: product, segment)
      t = s.type_of(text)
      found = _reductions(tuple(t.shape), tuple(s.want.shape)) if hasattr(t, "shape") else []
      if hasattr(t, "shape") and s.fits(t):
        new = text
      elif found:
        drop, keep = found[0]
        new = f"{exprs.wrap(text)}.sum(axis={_axis(drop)})" if drop and not keep else None
      else:
        new = None
      if new is not None and s.fits(s.type_of(new)):
        yield s.candidate(1, f"Multiply {c} by {r}", [(origin, new)],
                          f"{c} times {r}, what it multiplied in the primal, reduced to "
                          f"{s.want.str_short()}")


_FLIPPED = {ast.Add: ast.Sub, ast.Sub: ast.Add}
_AXIS_TAKING = ("sum", "mean", "max", "min", "var", "std", "cumsum", "cumprod", "expand_dims",
                "squeeze", "flip", "softmax", "log_softmax", "logsumexp")


def _value_edits(s: Scope) -> Iterator[Candidate]:
  """The slips that keep a cotangent's type and change its value, undone one at a time in
  the failing element and the statements it comes from: a sign (``+``/``-``, a unary
  minus), the element transposed (a square matrix), a conjugate taken or forgotten (a
  complex input), ``.at[].set`` for ``.add`` (repeated indices), a literal axis where a
  nondiff argument names it, an einsum operand's last two letters exchanged. Each is
  judged by value like any candidate; one that is still wrong is dropped."""
  if not _by_value(s.rule) or len(s.nodes) != 1:
    return
  node, got = s.nodes[0], s.got
  deps = s.dependencies(node)
  ct = s.src.params[len(s.rule.user_rules.nondiff_argnums) + 1]
  if ct not in _loads(node) | {n for d in deps for n in _loads(d.value)}:
    for text in (f"{ct} * {exprs.paren(s.src, node)}", f"{ct}[..., None] * {exprs.paren(s.src, node)}"):
      t = s.predict([(node, text)])
      if t is not None and s.fits(t):
        yield s.candidate(0, f"Multiply by {ct}", [(node, text)], f"the cotangent is linear in "
                          f"{ct}, the output's cotangent, and this one does not read it")
  factor = _factor(s)
  if factor is not None:
    yield s.candidate(0, "Negate" if factor == "-1.0" else f"Scale by {factor}",
                      [(node, f"-{exprs.paren(s.src, node)}" if factor == "-1.0"
                        else f"{factor} * {exprs.paren(s.src, node)}")],
                      f"the rule's cotangent is {factor} times the primal's derivative's, "
                      "where they differ most")
  if got is not None and getattr(got, "ndim", 0) >= 2 and got.shape[-1] == got.shape[-2]:
    text = exprs.transposed(s.src, node, (*range(got.ndim - 2), got.ndim - 1, got.ndim - 2))
    yield s.candidate(0, "Transpose", [(node, text)],
                      "a square matrix's cotangent has its type whichever way round")
  if got is not None and jax.numpy.issubdtype(got.dtype, jax.numpy.complexfloating):
    yield s.candidate(0, "Conjugate", [(node, f"{s.jnp}.conj({s.src.segment(node)})")],
                      "JAX's cotangents of complex inputs are conjugated as its own VJPs are")
  yield from _returned_swaps(s, node)
  axes = s.src.params[:len(s.rule.user_rules.nondiff_argnums)]
  for part in [node, *(d.value for d in reversed(deps))]:
    for n in _walk_with(part):
      if isinstance(n, ast.BinOp) and type(n.op) in _FLIPPED:
        flipped = ast.BinOp(n.left, _FLIPPED[type(n.op)](), n.right)
        yield s.candidate(0, f"Use `{ast.unparse(flipped)}`", [(n, ast.unparse(flipped))],
                          "a sign slip: the term enters the derivative with the other sign")
      elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
        swapped = ast.unparse(ast.BinOp(n.right, ast.MatMult(), n.left))
        yield s.candidate(0, f"Use `{swapped}`", [(n, swapped)], "the operands the other way round")
      elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
        yield s.candidate(0, f"Drop the minus of `{s.src.segment(n)}`",
                          [(n, exprs.paren(s.src, n.operand))], "a sign slip")
      elif isinstance(n, ast.Call):
        yield from _call_slips(s, n)
  yield from _axes(s, [node, *(d.value for d in deps)], axes)


def _axes(s: Scope, parts: list[ast.expr], axes: list[str]) -> Iterator[Candidate]:
  """Literal axes (``.sum(0)``, ``axis=0``) of one value made the nondiff argument that
  names the axis, all at once (``flip(cumsum(flip(g, 0), 0), 0)``)."""
  literals: dict[int, list] = {}
  for call in (n for part in parts for n in _walk_with(part) if isinstance(n, ast.Call)):
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    found = list(call.args[:2]) if name in _AXIS_TAKING else []   # x.sum(0), jnp.flip(g, 0)
    found += [k.value for k in call.keywords if k.arg == "axis"]
    for lit in found:
      if isinstance(lit, ast.Constant) and type(lit.value) is int:
        literals.setdefault(lit.value, []).append(lit)
  for value, nodes in literals.items():
    for axis in axes:
      yield s.candidate(0, f"Use {axis} for the axis {value}", [(lit, axis) for lit in nodes],
                        f"the rule's nondiff argument {axis} names the axis")


def _factor(s: Scope) -> str | None:
  """The constant the failing cotangent is off by (reference / rule where they differ
  most), when it is a multiple of 1/8 (a sign, a forgotten 2, 1/sqrt(4)); the oracle
  then judges it at every draw."""
  site, d = s.rule.d.site, s.rule.d
  index = site.in_paths.index(d.path) if d.path in site.in_paths else None
  leaf = next((l for l in d.leaf_errors if l.index == index), None)
  if leaf is None or not leaf.got_at or not leaf.reference_at:
    return None
  ratio = leaf.reference_at / leaf.got_at
  nice = round(ratio * 8) / 8
  if nice == 0 or nice == 1 or abs(ratio - nice) > 1e-3 * abs(nice):
    return None
  return repr(nice)


def _returned_swaps(s: Scope, node: ast.expr) -> Iterator[Candidate]:
  """The failing element and another of the same type exchanged in the return."""
  value = s.ret.value
  if not isinstance(value, ast.Tuple) or node not in value.elts or not isinstance(s.returned, tuple):
    return
  i = value.elts.index(node)
  for j, other in enumerate(value.elts):
    if j != i and j < len(s.returned) and i < len(s.returned) \
        and _same(s.returned[i], s.returned[j]) and _is_aval(s.returned[j]):
      yield s.candidate(0, f"Swap outputs {min(i, j)} and {max(i, j)}",
                        [(node, s.src.segment(other)), (other, s.src.segment(node))],
                        "two cotangents of the same type returned in each other's place")


def _call_slips(s: Scope, call: ast.Call) -> Iterator[Candidate]:
  func = call.func
  name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
  if name == "conj" and len(call.args) == 1:
    yield s.candidate(0, f"Drop the conjugate of `{s.src.segment(call.args[0])}`",
                      [(call, exprs.paren(s.src, call.args[0]))], "a conjugate too many")
  if name == "set" and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Subscript) \
      and isinstance(func.value.value, ast.Attribute) and func.value.value.attr == "at":
    text = s.src.segment(call)
    start = s.src.segment(func.value)
    yield s.candidate(0, "Accumulate with .add", [(call, text.replace(f"{start}.set", f"{start}.add", 1))],
                      "repeated indices must add their cotangents, not overwrite them")
  if name == "einsum" and call.args and isinstance(call.args[0], ast.Constant) \
      and isinstance(call.args[0].value, str) and "->" in call.args[0].value:
    ins, out = call.args[0].value.replace(" ", "").split("->")
    specs = ins.split(",")
    for k, spec in enumerate(specs):
      if len(spec) >= 2:
        swapped = ",".join(specs[:k] + [spec[:-2] + spec[-1] + spec[-2]] + specs[k + 1:]) + "->" + out
        yield s.candidate(0, f"Transpose operand {k} of the einsum", [(call.args[0], repr(swapped))],
                          f"'{spec}' read the other way round")


def _unreduced(s: Scope) -> Iterator[Candidate]:
  """A reduction inside the failing element (or the local it computed) removed, where the
  input has the axes it sums away (a batch or feature axis reduced once too often), or
  made over the axes that leave the expected shape (``.sum()`` of a batch of vectors)."""
  if not s.typed or len(s.nodes) != 1:
    return
  for call in (c for c in _walk_with(s.origin) if isinstance(c, ast.Call)):
    operand = _reduction_operand(call) or _function_reduction(s, call)
    if operand is None:
      continue
    widened = _widened(s, call) if _reduction_operand(call) is not None else None
    t = s.predict([(call, widened)]) if widened is not None else None
    if t is not None and s.fits(t):
      yield s.candidate(0, f"Reduce to {s.want.str_short()}", [(call, widened)],
                        f"the {call.func.attr} reduces axes the input keeps: its gradient "
                        "reduces only the others")
    edits = [(call, exprs.paren(s.src, operand))]
    t = s.predict(edits)
    if t is not None and s.fits(t):
      what = call.func.attr
      arguments = ast.unparse(ast.Call(ast.Name("_"), call.args, call.keywords))[1:]
      shown = f".{what}{arguments}" if call.func.value is operand else s.src.segment(call.func)
      yield s.candidate(0, f"Remove `{shown}`", edits,
                        f"the input has the axes the {what} reduces away: its gradient keeps them")


def _function_reduction(s: Scope, call: ast.Call) -> ast.expr | None:
  """``X`` in ``jnp.sum(X, ...)`` / ``jnp.mean(X, axis=...)``."""
  func = call.func
  if isinstance(func, ast.Attribute) and func.attr in ("sum", "mean") and call.args \
      and isinstance(func.value, ast.Name) and s.namespace.get(func.value.id) is jax.numpy \
      and len(call.args) <= 2 and all(k.arg in ("axis", "keepdims") for k in call.keywords):
    return call.args[0]
  return None


def _expansions(got: tuple, want: tuple) -> list[tuple]:
  """Axes to insert in ``got`` so that it broadcasts to ``want`` (leading-aligned first)."""
  if len(got) > len(want) or _size(got) >= _size(want):
    return []
  found = []
  for p in itertools.combinations(range(len(want)), len(got)):
    if all(g == want[i] or g == 1 for g, i in zip(got, p)):
      found.append(tuple(i for i in range(len(want)) if i not in p))
  return found[:3]


def _broadcast(s: Scope, node: ast.expr, axes: tuple, want: tuple) -> str:
  text = s.src.segment(node)
  if axes and axes != tuple(range(len(axes))):   # leading new axes broadcast on their own
    text = f"{s.jnp}.expand_dims({text}, {axes[0] if len(axes) == 1 else axes})"
  return f"{s.jnp}.broadcast_to({text}, {s.shape_text(want)})"


def _permutations(got: tuple, want: tuple) -> list[tuple]:
  first = exprs.permutation(got, want)
  if first is None:
    return []
  others = [p for p in itertools.permutations(range(len(got)))
            if p != first and tuple(got[i] for i in p) == want]
  return [first, *others][:3]


def _constants(s: Scope) -> Iterator[Candidate]:
  """A literal size that disagrees with the recorded types, replaced by an input's shape.

  For a type error, a constant equal to a dimension the cotangent has and should
  not is replaced by the dimension it should have (``x.shape[0]``), every
  occurrence at once first, then one by one. Otherwise a size matching no array
  of the scope is replaced by those the inputs have.
  """
  sites = _size_literals(s) if s.typed or _by_value(s.rule) else []
  if not sites:
    return
  dims = _dims(s)
  by_value: dict[float, list] = {}
  for node, value in sites:
    by_value.setdefault(value, []).append(node)
  seen_sizes = {d for a in s.arrays().values() for d in (*a.shape, _size(a.shape))}
  for value, nodes in by_value.items():
    targets = _stale_targets(s, value) if s.typed else []
    stale = not targets and value not in seen_sizes
    if stale:
      targets = [d for d in dims if d != value][:3]
    for d in targets:
      text = dims.get(d)
      if text is None:
        continue
      groups = [nodes] + ([[n] for n in nodes] if len(nodes) > 1 else [])
      for group in groups:
        edits = [(n, text) for n in group]
        t = s.predict(edits) if s.nodes else None
        if t is ILL or (s.typed and t is not None and not s.fits(t)):
          continue
        rank = (0 if s.fits(t) else 2) + (len(group) < len(nodes)) + stale
        yield s.candidate(rank, f"Use {text} instead of the constant {_num(value)}", edits,
                          f"{_num(value)} is a size from other inputs; this call's is {d}")


def _stale_targets(s: Scope, value: float) -> list[int]:
  """The expected dimension(s) a constant equal to a wrong dimension of the cotangent stands for."""
  want, got = tuple(s.want.shape), tuple(s.got.shape)
  if len(want) == len(got):
    return [w for g, w in zip(got, want) if g != w and g == value]
  return [w for w in want if w not in got] if value in got and value not in want else []


def _size_literals(s: Scope) -> list[tuple[ast.AST, float]]:
  """Integral literals >= 2 and module-level integers the rule uses as sizes (not axes,
  not tuple indices)."""
  skip = set()
  for n in syntax.own_nodes(s.src.node):
    if isinstance(n, ast.keyword) and n.arg in ("axis", "axes", "keepdims", "dtype"):
      skip |= {id(m) for m in ast.walk(n.value)}
    elif isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) \
        and not _is_aval(s.types.get(n.value.id)):
      skip |= {id(m) for m in ast.walk(n.slice)}
  found = []
  for n in syntax.own_nodes(s.src.node):
    if id(n) in skip:
      continue
    if isinstance(n, ast.Constant) and not isinstance(n.value, bool) \
        and isinstance(n.value, (int, float)) and n.value >= 2 and float(n.value).is_integer():
      found.append((n, n.value))
    elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in s.types:
      value = s.namespace.get(n.id)
      if isinstance(value, int) and not isinstance(value, bool) and value >= 2:
        found.append((n, value))
  return found


def _dims(s: Scope) -> dict[int, str]:
  """Dimension -> ``x.shape[i]`` (or ``x.size``), from the input's own name first."""
  names = sorted(s.arrays().items(), key=lambda na: (-_about(na[0], s.input_key),
                                                     not s.fits(na[1]), na[0]))
  found: dict[int, str] = {}
  for name, a in names:
    for i, d in enumerate(a.shape):
      found.setdefault(d, f"{name}.shape[{i}]")
  for name, a in names:
    found.setdefault(_size(a.shape), f"{name}.size")
  return found


def _unreturned(s: Scope) -> Iterator[Candidate]:
  """A local of the expected type that the rule computed but no return uses (names
  marked unused, ``_x``, last; ``_`` itself never)."""
  if not s.nodes or s.want is None:
    return
  used = {n.id for r in s.src.returns() for n in syntax.own_nodes(r.value) if isinstance(n, ast.Name)}
  computed = s.computed()
  names = [n for n, a in s.types.items()
           if n in computed and n not in used and not _discarded(n) and _is_aval(a)
           and s.fits_fully(a)]
  loads = {n.id for n in syntax.own_nodes(s.src.node) if isinstance(n, ast.Name)
           and isinstance(n.ctx, ast.Load)}
  names.sort(key=lambda n: (n.startswith("_"), -_about(n, s.input_key), n in loads, n))
  for n in names:
    yield s.candidate(0 if _about(n, s.input_key) else 1, f"Return {n}",
                      [(node, n) for node in s.nodes],
                      f"{n} is computed with the cotangent's type but never returned")


def _entries(s: Scope) -> Iterator[Candidate]:
  """Missing entries of a returned tuple or dict, filled from locals of their type."""
  if not kinds.of(s.rule.d.kind).structural:
    return
  node = s.rule.cotangents(s.ret.value)
  logs = node is not s.ret.value   # a (cotangents, logs) pair: its first element's keys
  want = verify.expected_returned(s.rule.d, s.rule.keys[1:] if logs else s.rule.keys)
  if want is None:
    return
  keys = _arg_names(s.rule.d.site)
  got = s.returned[0] if logs and isinstance(s.returned, (tuple, list)) else s.returned
  got = got if got is not None else _untyped_return(s, want, keys)
  top = _filled(s, node, got, want, keys) if got is not None else ()
  for edits, filled in itertools.islice(top, PER_GENERATOR):
    if edits and filled:   # zeros alone are the templates' placeholder, not a search result
      yield s.candidate(0, f"Return the missing entries from {', '.join(filled)}", edits,
                        "the primal argument has these entries; their cotangents are computed "
                        f"as {', '.join(filled)}")


def _untyped_return(s: Scope, want, keys: list) -> tuple | None:
  """What a too-short returned tuple gave, where the rule could not run on its own (a
  closure over its function's locals, ``jax.custom_gradient``): each entry the type of the
  slot its name says (``dw`` is ``w``'s), else of the next free slot. A guess the oracle
  judges like any candidate."""
  node = s.rule.cotangents(s.ret.value)
  if not isinstance(want, (tuple, list)) or not isinstance(node, (ast.Tuple, ast.List)) \
      or len(node.elts) >= len(want):
    return None
  free = list(range(len(want)))
  named = [next((k for k in free if isinstance(e, ast.Name) and _about(e.id, str(keys[k])) == 2), None)
           for e in node.elts]
  slots = []
  for k in named:
    k = k if k is not None and k in free else free[0]
    free.remove(k)
    slots.append(k)
  return tuple(want[k] for k in slots)


def _filled(s: Scope, node: ast.expr, got, want, keys: list | None = None
            ) -> Iterator[tuple[list, list]]:
  """(edits, names used) making ``node`` (returning ``got``) the structure of ``want``;
  ``keys`` names a tuple's slots."""
  node = _literal_of(s, node)
  if isinstance(want, dict) and isinstance(got, dict):
    yield from _filled_dict(s, node, got, want)
  elif isinstance(want, (tuple, list)) and isinstance(got, (tuple, list)) \
      and isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) == len(got):
    if len(got) == len(want):
      for e, g, w in zip(node.elts, got, want):
        if _structure(g) != _structure(w):
          yield from _filled(s, e, g, w)
          return
    else:
      yield from _filled_tuple(s, node, got, want, keys or list(range(len(want))))


def _filled_dict(s: Scope, node, got: dict, want: dict):
  missing = [k for k in want if k not in got]
  if not missing:
    for k in want:
      if _structure(got[k]) != _structure(want[k]) and isinstance(node, ast.Dict):
        value = next((v for key, v in zip(node.keys, node.values)
                      if isinstance(key, ast.Constant) and key.value == k), None)
        if value is not None:
          yield from _filled(s, value, got[k], want[k])
        return
    return
  for choice in _choices(s, [(k, want[k]) for k in missing]):
    items = [f"{k!r}: {text}" for k, text in choice]
    used = [text for _, text in choice if text.isidentifier()]
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
      kept = [f"{s.src.segment(k)}: {s.src.segment(v)}" for k, v in zip(node.keys, node.values)]
      yield [(node, "{" + ", ".join(kept + items) + "}")], used
    elif node is not None:
      yield [(node, "{**" + exprs.paren(s.src, node) + ", " + ", ".join(items) + "}")], used


def _filled_tuple(s: Scope, node, got, want, keys: list):
  """Too few entries: each present one kept in the slot its name or type says (``dz`` is
  ``z``'s), the rest filled."""
  if len(got) > len(want):
    return
  fits = lambda m, k: _structure(got[m]) == _structure(want[k]) and _same_leaves(got[m], want[k])
  slot: dict[int, int] = {}
  for m, e in enumerate(node.elts):
    named = [k for k in range(len(want)) if isinstance(e, ast.Name)
             and _about(e.id, str(keys[k])) == 2 and fits(m, k) and k not in slot.values()]
    if named:
      slot[m] = named[0]
  k = 0
  for m in range(len(got)):
    if m in slot:
      continue
    while k < len(want) and (k in slot.values() or not fits(m, k)):
      k += 1
    if k == len(want):
      return
    slot[m] = k
  texts = {k: s.src.segment(node.elts[m]) for m, k in slot.items()}
  empty = [(keys[k], want[k]) for k in range(len(want)) if k not in texts]
  for choice in _choices(s, empty):
    filled = dict(choice)
    items = [texts[k] if k in texts else filled[keys[k]] for k in range(len(want))]
    used = [t for t in filled.values() if t.isidentifier()]
    yield [(node, f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})")], used


def _rebuilt(s: Scope) -> Iterator[Candidate]:
  """The right leaves in another container (``(dW, db)`` where a layer belongs, a 1-tuple
  where an array does): the cotangent built in the input's own type (``pytrees``), or a
  one-element result unpacked where it was bound."""
  if not kinds.of(s.rule.d.kind).structural or s.returned is None:
    return
  want = verify.expected_returned(s.rule.d, s.rule.keys)
  found = _misplaced(s, s.ret.value, s.returned, want) if want is not None else None
  if found is None:
    return
  node, got, want = found
  yield from _unpacked(s, node, got, want)
  texts = _leaf_texts(s, node, got)
  for order in _orders(got, want):
    built = pytrees.built(want, [texts[i] for i in order], s.holding, s.rule.globals)
    for k, text in enumerate(built):
      title = f"Return {text}" if _is_aval(want) else \
          f"Build the cotangent as a {type(want).__name__}"
      yield s.candidate(k, title, [(node, text)],
                        f"a {type(want).__name__} input's cotangent is a {type(want).__name__} "
                        "of the same structure; these are its leaves, each of its type")


def _misplaced(s: Scope, node: ast.expr, got, want) -> tuple | None:
  """(element, what it returned, what belongs there) of the one returned element holding
  the expected leaves, each of its type, in another container; None if there is none."""
  if _structure(got) == _structure(want):
    return None
  literal = _literal_of(s, node)
  if isinstance(literal, (ast.Tuple, ast.List)) and type(got) in (tuple, list) \
      and type(want) in (tuple, list) and len(got) == len(want) == len(literal.elts):
    wrong = [k for k in range(len(want)) if _structure(got[k]) != _structure(want[k])]
    if len(wrong) == 1:
      return _misplaced(s, literal.elts[wrong[0]], got[wrong[0]], want[wrong[0]])
  have, need = _leaf_types(got), _leaf_types(want)
  same = have is not None and need is not None and sorted(map(str, have)) == sorted(map(str, need))
  return (node, got, want) if have and same else None


def _leaf_types(tree) -> list[tuple] | None:
  leaves = jax.tree_util.tree_leaves(tree)
  if not all(_is_aval(l) for l in leaves):
    return None
  return [(tuple(l.shape), l.dtype) for l in leaves]


def _orders(got, want) -> Iterator[list[int]]:
  """Which returned leaf goes where: in their order where the types allow it, else each
  expected leaf takes the first unused returned leaf of its type."""
  have, need = _leaf_types(got), _leaf_types(want)
  if have == need:
    yield list(range(len(need)))
    return
  order: list[int] = []
  for t in need:
    k = next((i for i, u in enumerate(have) if u == t and i not in order), None)
    if k is None:
      return
    order.append(k)
  yield order


def _leaf_texts(s: Scope, node: ast.expr, got) -> list[str]:
  """The rule's expression of each leaf ``node`` returns, in flattening order: the
  elements of the literal that built it, else ``node`` indexed by each leaf's path."""
  literal = _literal_of(s, node)
  if _is_aval(got):
    return [s.src.segment(node)]
  if isinstance(literal, (ast.Tuple, ast.List)) and type(got) in (tuple, list) \
      and len(literal.elts) == len(got):
    return [t for e, g in zip(literal.elts, got) for t in _leaf_texts(s, e, g)]
  if isinstance(literal, ast.Dict) and isinstance(got, dict) \
      and all(isinstance(k, ast.Constant) for k in literal.keys):
    by_key = {k.value: v for k, v in zip(literal.keys, literal.values)}
    if set(by_key) == set(got):
      return [t for k in sorted(got) for t in _leaf_texts(s, by_key[k], got[k])]
  text = exprs.paren(s.src, node)
  return [text + jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(got)[0]]


def _unpacked(s: Scope, node: ast.expr, got, want) -> Iterator[Candidate]:
  """``a_bar = vjp_a(u)`` returned where its one element belongs: ``a_bar, = vjp_a(u)``."""
  if not isinstance(node, ast.Name) or type(got) not in (tuple, list) or len(got) != 1 \
      or _structure(got[0]) != _structure(want):
    return
  bound = [a for a in syntax.own_nodes(s.src.node) if isinstance(a, ast.Assign)
           and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
           and a.targets[0].id == node.id]
  if len(bound) == 1 and not isinstance(bound[0].value, (ast.Tuple, ast.List)):
    yield s.candidate(0, f"Unpack {node.id}, = ...", [(bound[0].targets[0], f"{node.id},")],
                      f"{s.src.segment(bound[0].value)} returns a one-element "
                      f"{type(got).__name__}; its element is the cotangent")


def _arg_names(site) -> list[str]:
  """The primal's argument names as the diagnosis spells its inputs (``x``, ``params``)."""
  return [re.match(r"\w*", arg[0]).group() if arg else str(k)
          for k, arg in enumerate(trees.split_args(site.in_tree, site.in_names))]


def _choices(s: Scope, slots: list[tuple[Any, Any]]) -> Iterator[list[tuple[Any, str]]]:
  """Fillings of ``slots`` ((key, expected types)): the likeliest local per slot first,
  then the second likeliest, then zeros."""
  per_slot = []
  returned = {n.id for r in s.src.returns() for n in syntax.own_nodes(r.value) if isinstance(n, ast.Name)}
  for key, w in slots:
    options = ([n for n, a in s.types.items() if _is_aval(a) and _is_aval(w) and _same(a, w)
                and n in s.computed() and n not in returned] if s.types else   # untyped: by name
               [n for n in sorted(s.computed()) if n not in returned and _about(n, str(key)) == 2])
    options.sort(key=lambda n: -_about(n, str(key)))
    zero = _zeros_tree(s, w)
    per_slot.append([*options[:2], zero] if zero is not None else options[:2])
  if not all(per_slot):
    return
  for k in range(3):
    choice = [(key, options[min(k, len(options) - 1)]) for (key, _), options
              in zip(slots, per_slot)]
    yield choice


def _zeros_tree(s: Scope, tree) -> str | None:
  if _is_aval(tree):
    return "None" if tree.dtype == jax.dtypes.float0 else s.zeros_text(tree)
  if isinstance(tree, dict):
    items = {k: _zeros_tree(s, v) for k, v in tree.items()}
    return None if None in items.values() else \
        "{" + ", ".join(f"{k!r}: {v}" for k, v in items.items()) + "}"
  return None


def _literal_of(s: Scope, node: ast.expr) -> ast.expr:
  """A returned name bound once to a literal in the rule: that literal (edited in place)."""
  if not isinstance(node, ast.Name):
    return node
  found = [a.value for a in syntax.own_nodes(s.src.node) if isinstance(a, ast.Assign)
           and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
           and a.targets[0].id == node.id]
  return found[0] if len(found) == 1 and isinstance(found[0], (ast.Dict, ast.Tuple)) else node


def _collectives(s: Scope) -> Iterator[Candidate]:
  """Under shard_map: a cotangent varying over mesh axes its input does not (``psum``,
  ``pmean``), or no longer varying over those it does (the collective removed, or
  the result marked varying again)."""
  if s.want is None or s.got is None or not s.nodes:
    return
  gained = sorted(exprs.varying(s.got) - exprs.varying(s.want))
  lost = sorted(exprs.varying(s.want) - exprs.varying(s.got))
  if gained:
    axes = _axes_text(gained)
    yield from _renamed_axes(s, gained)
    for rank, how, reason in ((0, "psum", "sums the per-device contributions"),
                              (1, "pmean", "averages the per-device contributions")):
      yield s.candidate(rank, f"{how} over {axes}",
                        [(n, f"jax.lax.{how}({s.src.segment(n)}, {axes})") for n in s.nodes],
                        f"the input is the same on every device of {axes}: its cotangent is "
                        f"the {how} of the per-device ones ({reason})")
  if lost:
    node = s.nodes[0]
    for call in (c for part in [node, *(d.value for d in s.dependencies(node))]
                 for c in exprs.collectives(part)):
      yield s.candidate(0, f"Remove {s.src.segment(call.func)}",
                        [(call, s.src.segment(call.args[0]))],
                        f"the cotangent of an input varying over {lost} varies over them too")
      transposed = exprs.collective_transposed(s.src, call, tuple(lost))
      if transposed is not None:   # where the cotangent itself is invariant (an all-reduce's)
        yield s.candidate(0.5, f"Replace {s.src.segment(call.func)} by its transpose",
                          [(call, transposed)], f"the cotangent of an input varying over "
                          f"{lost} is each device's share of the reduction")
    yield s.candidate(1, f"Mark the cotangent varying over {_axes_text(lost)}",
                      [(n, exprs.revaried(s.src.segment(n), tuple(lost))) for n in s.nodes],
                      "keeps the computation and restores the varying axes")


def _renamed_axes(s: Scope, gained: list) -> Iterator[Candidate]:
  """A collective of the rule over another mesh axis than the one the cotangent must be
  reduced over: its axis name replaced (``psum(..., 'model')`` -> ``'data'``), one token."""
  node = s.nodes[0]
  for call in (c for part in [node, *(d.value for d in s.dependencies(node))]
               for c in exprs.collectives(part)):
    axis = call.args[1] if len(call.args) > 1 else next(
        (k.value for k in call.keywords if k.arg in ("axis_name", "axes")), None)
    named = axis.value if isinstance(axis, ast.Constant) and isinstance(axis.value, str) else None
    if named is not None and named not in gained and len(gained) == 1:
      quote = s.src.segment(axis)[0]   # the user's own quotes
      yield s.candidate(-1, f"Reduce over {gained[0]!r}, not {named!r}",
                        [(axis, f"{quote}{gained[0]}{quote}")],
                        f"the cotangent varies over {gained[0]!r}, where the input is the same on "
                        f"every device; {s.src.segment(call.func)} reduced over {named!r}")


def _axes_text(axes: list) -> str:
  return repr(axes[0]) if len(axes) == 1 else repr(tuple(axes))


def _scatters(s: Scope) -> Iterator[Candidate]:
  """A gather's or top-k's cotangent put back where it was taken from: ``.at[idx].add``
  into zeros of the input's type, with integer indices of the scope."""
  if not s.typed or _size(s.got.shape) >= _size(s.want.shape):
    return
  want, got = tuple(s.want.shape), tuple(s.got.shape)
  zeros = s.zeros_text(s.want)
  ints = [(n, a) for n, a in s.arrays().items()
          if jax.numpy.issubdtype(a.dtype, jax.numpy.integer)]
  for name, a in ints:
    idx = tuple(a.shape)
    for axis in range(len(want)):
      if got == want[:axis] + idx + want[axis + 1:]:
        where = ":, " * axis + name
        for rank, how in ((0, "add"), (1, "set")):
          yield s.candidate(rank, f"Scatter back into zeros at {name} ({how})",
                            [(n, f"{zeros}.at[{where}].{how}({s.src.segment(n)})")
                             for n in s.nodes],
                            f"the primal gathered entries {name} of an input {want}: its "
                            "gradient is zero elsewhere")
      if idx == got and len(got) == len(want) and \
          [i for i, (g, w) in enumerate(zip(got, want)) if g != w] == [axis]:
        yield s.candidate(0, f"Put back along axis {axis} at {name}",
                          [(n, f"{s.jnp}.put_along_axis({zeros}, {name}, {s.src.segment(n)}, "
                               f"axis={axis}, inplace=False)") for n in s.nodes],
                          f"the primal took entries {name} along axis {axis} (top-k, "
                          "take_along_axis): its gradient is zero elsewhere")


_GENERATORS = (_unreturned, _value_edits, _swaps, _shapes, _factors, _unreduced, _scatters,
               _collectives, _entries, _rebuilt, _constants)


# ------------------------------------------------------------------- helpers

def _discarded(name: str) -> bool:
  """``_`` (or ``__``): a value thrown away by convention, as in ``_, vjp = jax.vjp(...)``."""
  return set(name) == {"_"}


def _walk_with(node: ast.AST) -> Iterator[ast.AST]:
  yield node
  yield from syntax.own_nodes(node)


def _loads(node: ast.AST) -> set[str]:
  return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _targets(stmt: ast.stmt) -> list[ast.expr]:
  return stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]


def _siblings(fn: ast.FunctionDef) -> set[frozenset]:
  """Pairs of names unpacked together (``x, w = res``): the same role, often swapped."""
  found = set()
  for stmt in syntax.own_nodes(fn):
    if isinstance(stmt, ast.Assign):
      for target in stmt.targets:
        if isinstance(target, (ast.Tuple, ast.List)):
          names = [e.id for e in target.elts if isinstance(e, ast.Name)]
          found |= {frozenset(p) for p in itertools.combinations(names, 2)}
  return found


def _alike(a: str, b: str, siblings: set) -> int:
  """How alike two names read: 3 for one letter or digit apart (1 for one-letter names)
  or unpacked together, 2 for the same stem, else 0."""
  if frozenset((a, b)) in siblings:
    return 3
  if len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1:
    return 3 if len(a) > 1 else 1
  stem = lambda n: re.sub(r"\d+|_", "", n)
  return 2 if stem(a) == stem(b) and stem(a) else 0


def _about(name: str, key: str) -> int:
  """How much ``name`` reads as the cotangent of ``key``: ``dw``, ``grad_w``, ``w_bar``."""
  if not key:
    return 0
  parts = [p for p in re.split(r"_+", name.lower()) if p]
  k = key.lower()
  if name.lower() in (f"d{k}", f"g{k}", f"d_{k}", f"g_{k}", f"grad_{k}", f"{k}_grad",
                      f"{k}_bar", f"ct_{k}", f"{k}_ct", f"dl_d{k}"):
    return 2
  return 1 if k in parts or (len(k) > 1 and k in name.lower()) else 0


def _is_aval(x) -> bool:
  return isinstance(x, core.AbstractValue) and hasattr(x, "shape")


def _same(a, b) -> bool:
  return a is not None and b is not None and hasattr(a, "shape") and hasattr(b, "shape") \
      and (tuple(a.shape), a.dtype) == (tuple(b.shape), b.dtype)


def _same_leaves(a, b) -> bool:
  la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
  return len(la) == len(lb) and all(_same(x, y) for x, y in zip(la, lb))


def _structure(tree):
  return jax.tree_util.tree_structure(tree)


def _size(shape) -> int:
  n = 1
  for d in shape:
    n *= d
  return n


def _num(value: float) -> str:
  return str(int(value)) if float(value).is_integer() else str(value)

