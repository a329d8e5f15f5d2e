"""A bwd rule that raises while writing a cotangent of the wrong type, before JAX's check.

A rule can fail on its own line: an in-place write of a transposed gradient
(``m_g['w'][...] = gz.T @ x``, the idiom of flax nnx's docstring) raises a broadcasting
error inside the rule, and JAX never gets a cotangent to check. When the statement that
raised assigns into a local the rule returns, the slot it fills is known (its path in the
return, matched to the one input the user's names put there) and so is the cotangent
that slot must hold; the value written is typed abstractly from the frame's locals (their
avals), as the session ends. Only a slot that holds that cotangent's type now, written
with another type, is a finding: anything less precise is none. Where the value itself
raises for its types, the operation that did is found (``failing_operation``): a
``bwd_raised``. A lambda rule reads as the def it stands for, its body returned.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import linecache
import textwrap
from typing import Any

import jax
import numpy as np

from ..compat.private import core
from ...base import kinds, syntax, trees
from ...base.places import spelled
from .. import records
from ..avals import ct_aval, same_type
from ..naming import leaf_paths
from ..naming.leaf_paths import Key, keystr
from ..records import ERROR, Record
from . import failing_operation
from .retained_rules import retained

_WHOLE = object()   # ``[...]`` / ``[:]``: the write replaces the whole array there
_LIMIT = 256        # rules' parsed sources kept; cleared when full


class _Attr(str):
  """An attribute step (``.w``): equal to the key ``'w'`` when names are compared."""


def raised(site, bwd, user_code, exc: BaseException, kind: str, within: tuple = ()) -> None:
  """Defer a record for ``exc`` raised on a statement of the user's bwd: a ``bwd_type``
  where the statement wrote a value of the wrong type into a known cotangent slot, a
  ``bwd_raised`` where computing the value itself raised for its types. Types are
  compared as the bwd check compares them (``avals.same_type``). A rule of another role
  (a custom_jvp's ``jvp``: ``kind="jvp_raised"``) is read alike, without slots. ``within``:
  where in the rule's return its cotangents are (``(0,)`` for a ``(cotangents, logs)`` pair)."""
  session = records.current_session()
  code = user_code or getattr(bwd, "__code__", None)
  if session is None or code is None:
    return
  frame, line = _failing_frame(exc.__traceback__, code)
  fn = _function(code) if frame is not None else None
  stmt = _statement(fn, line - _SOURCES[code][2] + 1) if fn is not None else None
  value = getattr(stmt, "value", None) if isinstance(stmt, _COMPUTING) else None
  scope = frame.f_locals if value is not None else {}
  env = _abstract_env(value, scope) if value is not None else None
  if env is None:
    return
  text = ast.get_source_segment(_SOURCES[code][0], stmt) or ""
  where = f"{code.co_filename}:{line}"
  written = _written_slot(site, fn, stmt, scope) if kinds.of(kind).role == "bwd" and not within \
      else None
  at = Statement(site, fn, stmt, _SOURCES[code][0], where, text.strip(), code.co_filename,
                 frame.f_globals, env, type(exc), kind, within)
  session.deferred.append((len(session.records), lambda: _finding(at, written)))


_COMPUTING = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr)


@dataclasses.dataclass(frozen=True)
class Statement:
  """The user's statement that raised, and what is needed to evaluate it abstractly."""
  site: Any
  fn: ast.FunctionDef
  stmt: ast.stmt
  source: str              # the rule's dedented source, which ``fn``'s positions index
  where: str               # file:line
  text: str
  filename: str
  globals: dict
  env: dict                # the locals it reads, arrays as ShapeDtypeStructs
  raised: type
  kind: str                # what computing the value raising is (by the rule's role)
  within: tuple            # the keys of the cotangents in what the rule returns


def _written_slot(site, fn, stmt, scope):
  """(input leaf, its path, its cotangent type) of the slot a write ``local[k] = v`` fills,
  where it holds that cotangent's type now; else None."""
  if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
    return None
  target = _target(stmt.targets[0])
  at_return = _returned_at(fn, target[0]) if target else None
  if at_return is None or target[0] not in scope:
    return None
  written = [k for k in target[1] if k is not _WHOLE]
  k = _slot(site, at_return, written)
  if k is None:
    return None
  expected = ct_aval(site.in_avals[k])
  held = _held_type(scope[target[0]], written, _WHOLE in target[1])
  if held is None or same_type(expected, held) is not True:
    return None
  return k, keystr((Key("index", at_return),) + _keys(scope[target[0]], written)), expected


def _finding(at: Statement, written) -> list[Record]:
  expr = compile(ast.fix_missing_locations(ast.Expression(at.stmt.value)), at.filename, "eval")
  try:
    got = jax.eval_shape(lambda e: eval(expr, at.globals, dict(e)), at.env)  # noqa: S307 - the user's own line
  except Exception:  # noqa: BLE001 - the value itself failed: nothing was written
    return _failed_value(at, written)
  if written is None or not isinstance(got, jax.ShapeDtypeStruct):
    return []
  k, path, expected = written
  got = core.ShapedArray(got.shape, got.dtype, weak_type=got.weak_type)
  if same_type(expected, got) is not False:
    return []
  site = at.site
  return [retained(Record(
      kind="bwd_type", severity=ERROR, function=site.function, source=site.source,
      rule=site.rule, site=site, path=path, expected=expected.str_short(),
      got=got.str_short(), flat_index=k, expected_aval=expected, got_aval=got,
      raised_at=at.where,
      detail=f"{site.rule} raised at {spelled(at.where)} before returning: `{at.text}` writes "
             f"{got.str_short()} where the cotangent of {site.in_names[k]} must be "
             f"{expected.str_short()}"))]


def _failed_value(at: Statement, written) -> list[Record]:
  """A ``bwd_raised`` record when an operation of the statement raises on the types alone
  (as the user's did), about the input whose cotangent its value reaches, where one does."""
  failed = failing_operation.locate(at.stmt.value, at.source, at.filename, at.globals, at.env,
                                    at.raised)
  if failed is None:
    return []
  site = at.site
  bwd = kinds.of(at.kind).role == "bwd"   # else a jvp's: its tangent is of the output
  k = written[0] if written else _input_reached(at, failed) if bwd else None
  expected = ct_aval(site.in_avals[k]) if k is not None else None
  role = kinds.of(at.kind).role
  of = (f"the cotangent of {site.in_names[k]}" if k is not None
        else "a cotangent" if bwd else "the tangent" if role == "jvp" else "its output")
  return [retained(Record(
      kind=at.kind, severity=ERROR, function=site.function, source=site.source,
      rule=site.fwd_rule if role == "fwd" else site.rule, site=site,
      path=site.in_paths[k] if k is not None else None,
      expected=expected.str_short() if expected is not None else None, got=failed.asked,
      flat_index=k, expected_aval=expected, raised_at=at.where, operation=failed,
      detail=f"{site.rule} raised at {spelled(at.where)} computing {of}: `{failed.text}` "
             f"({failed.asked}) in `{at.text}`"))]


def _input_reached(at: Statement, failed) -> int | None:
  """The one input leaf whose returned slot the statement's value reaches: the element of a
  returned literal that holds the failing operation (a ``return``), or that reads a local
  the statement's value flows into; None unless exactly one slot does (of the cotangents:
  a logging rule's logs are no slot)."""
  fn, stmt, n = at.fn, at.stmt, len(at.within)
  if isinstance(stmt, ast.Return):
    hit = lambda e: any(getattr(n, "lineno", None) == failed.lineno
                        and getattr(n, "col_offset", None) == failed.col_offset
                        for n in ast.walk(e))
    returns = [stmt]
  else:
    held = failing_operation.reaching(fn, stmt)
    hit = lambda e: bool(syntax.names_read(e) & held)
    returns = [n for n in syntax.own_nodes(fn) if isinstance(n, ast.Return) and n.value is not None]
  paths = {p[n:] for r in returns for p in _literal_paths(r.value, hit) if p[:n] == at.within}
  if len(paths) != 1:
    return None
  path = paths.pop()
  return _slot(at.site, path[0], list(path[1:])) if path and isinstance(path[0], int) else None


def _literal_paths(node, hit, keys: tuple = ()) -> list[tuple]:
  """The keys of each innermost element of a returned literal (tuples, lists, dicts with
  constant keys) that ``hit`` accepts."""
  if isinstance(node, (ast.Tuple, ast.List)):
    return [p for i, e in enumerate(node.elts) for p in _literal_paths(e, hit, keys + (i,))]
  if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys):
    return [p for k, v in zip(node.keys, node.values) for p in _literal_paths(v, hit, keys + (k.value,))]
  return [keys] if hit(node) else []


def returned_then_raised(site, code, returned, exc: BaseException) -> None:
  """A ``bwd_structure`` record when a library's bwd raised after the user's bwd returned
  ``returned`` (equinox checks the tree itself), if the user's names of the rule's first
  inputs are the args tree's own paths under one parameter (equinox's ``vjp_arg``: the tree
  the user's bwd answers for; the arguments after it get no cotangent from the user) and
  ``returned`` lacks or adds leaves there, or holds its leaves in another container. Any
  other mapping (flax's, whose bwd returns ``(params_t, x_t)`` for variables it spells
  otherwise) is no finding."""
  if records.current_session() is None or _failing_frame(exc.__traceback__, code)[0] is not None:
    return
  answered = _answered_paths(site)
  if answered is None:
    return
  k0, tail0 = answered[0]
  head = site.in_keys[k0][:len(site.in_keys[k0]) - len(tail0)]
  expected = [(tail, site.in_avals[k]) for k, tail in answered]
  want = {path for path, _ in expected}
  # None is a leaf, as equinox compares trees: a zero for an input, nothing elsewhere
  got = [(path, t) for path, t in leaf_paths.of_tree(returned) if t != "None" or path in want]
  have = {path for path, _ in got}
  if want == have or not (want & have or _same_leaves(expected, got)):
    return
  leaves = leaf_paths.compared([(p, ct_aval(a).str_short()) for p, a in expected], got)
  missing = next((l for l in leaves if l.got == leaf_paths.MISSING), None)
  extra = next((l for l in leaves if l.expected == leaf_paths.MISSING), None)
  first = missing or extra
  records.record(retained(Record(
      kind="bwd_structure", severity=ERROR, function=site.function, source=site.source,
      rule=site.rule, site=site, path=keystr(first.path),
      flat_index=answered[[t for _, t in answered].index(first.path)][0] if missing else None,
      expected=str(_subtree(site, head)), got=str(jax.tree_util.tree_structure(returned)),
      leaves=tuple(dataclasses.replace(l, path=head + l.path) for l in leaves),
      detail=f"{site.rule} returned a tree {'without' if missing else 'with an extra'} "
             f"{keystr(first.path)}; the library's own check raised after it returned")))


def _same_leaves(expected: list, got: list) -> bool:
  """The user's bwd returned every leaf, each of its type and in order, in another
  container (a tuple ``(dW, db)`` where the layer belongs): its own tree, wrong, not a
  mapping of the inputs this module misreads."""
  return len(expected) == len(got) and all(
      ct_aval(a).str_short() == t for (_, a), (_, t) in zip(expected, got))


def _answered_paths(site) -> list | None:
  """(input index, its path in the tree the user's bwd answers for) of each input leaf
  under the first input's root parameter and args tree head: the tail of its args tree
  path that its user name spells; None unless the first input, and every input under
  that head, has one."""
  spelled = [_spelled(name, keys) for name, keys in zip(site.in_names, site.in_keys)]
  if not spelled or spelled[0] is None:
    return None
  root, head = spelled[0][0], spelled[0][1]
  answered = []
  for k, (found, keys) in enumerate(zip(spelled, site.in_keys)):
    if found is not None and found[:2] == (root, head):
      answered.append((k, found[2]))
    elif keys[:len(head)] == head:   # under the same head, spelled otherwise: no mapping
      return None
  return answered


def _spelled(name: str, keys) -> tuple | None:
  """(root name, args tree head, tail) where the user's name of an input spells the tail
  of its args tree path under one local; None otherwise."""
  try:
    target = _target(ast.parse(name, mode="eval").body)
  except SyntaxError:
    return None
  if target is None or len(target[1]) > len(keys):
    return None
  tail = keys[len(keys) - len(target[1]):]
  if [k.key for k in tail] != target[1]:
    return None
  return target[0], keys[:len(keys) - len(tail)], tail


def _subtree(site, head):
  """The structure of the args tree at ``head`` (what the user's bwd returns)."""
  tree = jax.tree_util.tree_unflatten(site.in_tree, [0] * len(site.in_keys))
  for key in head:
    tree = tree[key.key] if key.kind in ("index", "key") else getattr(tree, key.key)
  return jax.tree_util.tree_structure(tree)


def _failing_frame(tb, code):
  """The innermost frame of ``code`` the exception passed through, and its line."""
  found = (None, None)
  while tb is not None:
    if tb.tb_frame.f_code is code:
      found = (tb.tb_frame, tb.tb_lineno)
    tb = tb.tb_next
  return found


_SOURCES: dict = {}   # code -> (source text, its FunctionDef, the line its positions count from)


def _function(code) -> ast.FunctionDef | None:
  if code not in _SOURCES:
    if len(_SOURCES) >= _LIMIT:
      _SOURCES.clear()
    found = _lambda(code) if code.co_name == "<lambda>" else _def(code)
    if found is None:
      return None
    _SOURCES[code] = found
  return _SOURCES[code][1]


def _def(code):
  try:
    lines, _ = inspect.getsourcelines(code)
    text = textwrap.dedent("".join(lines))
    node = ast.parse(text).body[0]
  except (OSError, TypeError, SyntaxError, IndexError):
    return None
  if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
    return None
  return text, node, code.co_firstlineno


def _lambda(code):
  """A lambda rule as the def it stands for (``return`` its body), read from its whole file
  (a lambda on a continuation line of ``defvjp(...)`` is no statement of its own)."""
  text = "".join(linecache.getlines(code.co_filename))
  try:
    lam = syntax.lambda_node(ast.parse(text), code)
  except SyntaxError:
    return None
  return (text, syntax.as_def(lam, "rule"), 1) if lam is not None else None


def _statement(fn, line: int):
  """The innermost statement of ``fn`` on ``line`` (counted from its source's first line,
  its first decorator's, as the code object counts them)."""
  hits = [n for n in syntax.own_nodes(fn) if isinstance(n, ast.stmt)
          and n.lineno <= line <= (n.end_lineno or n.lineno)]
  return min(hits, key=lambda n: (n.end_lineno or n.lineno) - n.lineno, default=None)


def _target(node) -> tuple[str, list] | None:
  """(local name, constant keys and attributes under it) of an assignment target."""
  keys: list = []
  while not isinstance(node, ast.Name):
    if isinstance(node, ast.Attribute):
      keys.insert(0, _Attr(node.attr))
    elif isinstance(node, ast.Subscript):
      s = node.slice
      if isinstance(s, ast.Constant) and s.value is Ellipsis or isinstance(s, ast.Slice) \
          and s.lower is s.upper is s.step is None:
        if keys:
          return None   # only the outermost write may be whole
        keys.insert(0, _WHOLE)
      elif isinstance(s, ast.Constant) and isinstance(s.value, (str, int)):
        keys.insert(0, s.value)
      else:
        return None
    else:
      return None
    node = node.value
  return node.id, keys


def _returned_at(fn, name: str) -> int | None:
  """The position of local ``name`` in every tuple ``fn`` returns (the same in each)."""
  found = set()
  for node in syntax.own_nodes(fn):
    if isinstance(node, ast.Return) and isinstance(node.value, (ast.Tuple, ast.List)):
      found |= {i for i, e in enumerate(node.value.elts) if isinstance(e, ast.Name) and e.id == name}
  return found.pop() if len(found) == 1 else None


def _slot(site, position: int, written: list) -> int | None:
  """The one input leaf of argument ``position`` whose user name goes on with ``written``
  (``m['w']`` -> ``m.w.value``); None unless exactly one does."""
  hits = [k for k, keys in enumerate(site.in_keys)
          if keys[:1] == (Key("index", position),)
          and _name_keys(site.in_names[k])[:len(written)] == written]
  return hits[0] if len(hits) == 1 else None


def _name_keys(name: str) -> list:
  """``"m.w.value"`` -> ``['w', 'value']``: the keys and attributes after the root."""
  try:
    node = ast.parse(name, mode="eval").body
  except SyntaxError:
    return [object()]
  target = _target(node)
  return target[1] if target else [object()]


def _step(value, key):
  return getattr(value, key) if isinstance(key, _Attr) else value[key]


def _keys(value, written: list) -> tuple[Key, ...]:
  """``written`` as key path entries of the objects it steps through."""
  out = []
  for key in written:
    kind = "attr" if isinstance(key, _Attr) else "index" if isinstance(value, (list, tuple)) else "key"
    out.append(Key(kind, str(key) if kind == "attr" else key))
    value = _step(value, key)
  return tuple(out)


def _held_type(value, written: list, whole: bool):
  """The type of the one array held at ``written`` under ``value`` now, else None; None
  too for a JAX array written whole (``ct[...] = v``): that raises whatever ``v`` is."""
  try:
    for key in written:
      value = _step(value, key)
    leaves = jax.tree_util.tree_leaves(value)
  except Exception:  # noqa: BLE001 - the user's object: no slot known
    return None
  if whole and isinstance(value, (jax.Array, core.Tracer)):
    return None
  return core.typeof(leaves[0]) if len(leaves) == 1 and _is_array(leaves[0]) else None


def _is_array(x) -> bool:
  return isinstance(x, (jax.Array, np.ndarray, core.Tracer))


def _abstract_env(expr, scope: dict) -> dict | None:
  """The locals ``expr`` reads, their arrays as ShapeDtypeStructs (other leaves are kept
  until the session ends, with the failing call); None if one cannot be rebuilt so."""
  env = {}
  for name in {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} & scope.keys():
    try:
      env[name] = jax.tree_util.tree_map(_abstract, scope[name])
    except Exception:  # noqa: BLE001 - a node that rejects ShapeDtypeStructs
      return None
  return env


def _abstract(leaf):
  if not _is_array(leaf):
    return leaf
  return trees.shape_struct(core.typeof(leaf))


def clear() -> None:
  _SOURCES.clear()
