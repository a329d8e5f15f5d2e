"""The user's rule as source text and AST, and edits to it by text span.

Fixes are spliced into the original text (not ``ast.unparse``d) so the user's
comments and formatting survive everywhere except the expression being fixed.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import itertools
import linecache
import os
import re
import textwrap
import types

from ..base import syntax
from ..capture.naming import arguments


@dataclasses.dataclass(frozen=True)
class RuleSource:
  """A ``def`` rule: its dedented text and the parsed ``FunctionDef``.

  ``bound`` leading parameters are bound by the caller (a method's ``self``): ``params``
  are the rest, so a method reads like a custom_vjp rule.
  """
  text: str
  node: ast.FunctionDef
  bound: int = 0

  @property
  def params(self) -> list[str]:
    return [a.arg for a in self.node.args.args][self.bound:]

  @property
  def bound_params(self) -> list[str]:
    return [a.arg for a in self.node.args.args][:self.bound]

  def segment(self, node: ast.AST) -> str:
    return ast.get_source_segment(self.text, node)

  def replace(self, edits: list[tuple[ast.AST, str]], within: ast.AST | None = None) -> str:
    """The text (of ``within``, else the whole rule) with each node's span replaced.

    Spans must not overlap. ``ast`` columns are UTF-8 byte offsets; rule text
    is ASCII in practice.
    """
    edits = [self._unmapped(node, new) for node, new in edits]
    text = self._uncommented({node.end_lineno: node.end_col_offset for node, _ in edits})
    starts = [0]
    for line in text.splitlines(keepends=True):
      starts.append(starts[-1] + len(line))
    begin = lambda n: starts[n.lineno - 1] + n.col_offset
    end = lambda n: starts[n.end_lineno - 1] + n.end_col_offset
    lo, hi = (begin(within), end(within)) if within is not None else (0, len(self.text))
    out = text[lo:hi]
    for node, new in sorted(edits, key=lambda e: begin(e[0]), reverse=True):
      out = out[:begin(node) - lo] + new + out[end(node) - lo:]
    return out

  def _uncommented(self, ends: dict[int, int]) -> str:
    """The text without the trailing comments of the lines edits end on (``ends``: line ->
    the edit's end column): a comment on the expression being fixed describes the old one
    (``# BUG: should be jnp.outer(g, x)``). Columns before a comment do not move."""
    lines = self.text.splitlines(keepends=True)
    for n, col in ends.items():
      at = syntax.comment_at(lines[n - 1])
      if at is not None and at >= col:
        lines[n - 1] = lines[n - 1][:at] + ("\n" if lines[n - 1].endswith("\n") else "")
    return "".join(lines)

  def _unmapped(self, node: ast.AST, new: str) -> tuple[ast.AST, str]:
    """An edit making a tree map's function the identity replaces the map by its tree:
    ``tree_map(lambda a: a.T, g)`` fixed is ``g``, not ``tree_map(lambda a: a, g)``."""
    for call in ast.walk(self.node):
      if isinstance(call, ast.Call) and _mapped_body(call) is node and len(call.args) == 2 \
          and not call.keywords and [a.arg for a in call.args[0].args.args] == [new.strip()]:
        return call, self.segment(call.args[1])
    return node, new

  def prepend(self, stmt: str) -> tuple[ast.AST, str]:
    """An edit putting ``stmt`` before the body's first statement (after a docstring)."""
    return self.before(self.first_statement, [stmt])

  @property
  def first_statement(self) -> ast.stmt:
    body = self.node.body
    docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
        and isinstance(body[0].value.value, str)
    return body[1] if docstring and len(body) > 1 else body[0]

  def before(self, stmt: ast.stmt, lines: list[str]) -> tuple[ast.AST, str]:
    """An edit putting ``lines`` right before ``stmt``, in its block.

    A statement sharing its line with what precedes it (a body on the ``def``
    line, ``if c: return x``) keeps the line: ``a; b; return x``.
    """
    at = ast.Pass(lineno=stmt.lineno, col_offset=stmt.col_offset,
                  end_lineno=stmt.lineno, end_col_offset=stmt.col_offset)
    line = self.text.splitlines()[stmt.lineno - 1]
    if line[:stmt.col_offset].strip():
      return at, "".join(f"{l}; " for l in lines)
    return at, "".join(f"{l}\n{' ' * stmt.col_offset}" for l in lines)

  def only_return(self) -> ast.Return | None:
    """The single return statement, when there is exactly one to edit."""
    found = self.returns()
    return found[0] if len(found) == 1 else None

  def returns(self) -> list[ast.Return]:
    """The rule's own return statements (not those of nested functions)."""
    return [n for n in syntax.own_nodes(self.node) if isinstance(n, ast.Return) and n.value is not None]


def bare(node: ast.FunctionDef) -> None:
  """Strip what a ``def`` statement evaluates besides making the function (decorators,
  annotations, defaults): running a copy of a rule must run nothing but its body."""
  node.decorator_list = []
  node.returns = None
  args = node.args
  for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
    if arg is not None:
      arg.annotation = None
  args.defaults = []
  args.kw_defaults = [None] * len(args.kwonlyargs)


def of_role(user_rules, role: str, name: str = "rule") -> RuleSource | None:
  """The source of ``user_rules``'s ``role`` rule ("fwd" or "bwd"; ``user_rules`` is what
  ``library_wrappers.user_rules`` gives, or a custom_vjp), with the parameters its caller binds
  set apart."""
  bound, rule = getattr(user_rules, "bound", None), getattr(user_rules, role, None)
  if rule is None:   # a custom_jvp has no fwd
    return None
  return of(rule, name, bound(role) if bound else 0)


def of(fn, name: str = "rule", bound: int = 0) -> RuleSource | None:
  """The source of a rule as a ``def`` (a lambda becomes one named ``name``), or None."""
  fn = inspect.unwrap(fn)
  if getattr(fn, "__name__", None) == "<lambda>":
    src = _from_lambda(fn.__code__, name)
    return dataclasses.replace(src, bound=bound) if src is not None else None
  try:
    text = textwrap.dedent(inspect.getsource(fn))
    tree = ast.parse(text)
  except (OSError, TypeError, SyntaxError, IndentationError):
    return None
  node = tree.body[0] if tree.body else None
  if isinstance(node, ast.FunctionDef) and node.name == fn.__name__:
    return RuleSource(text, node, bound)
  return None


def nested(fn, where: str, name: str = "rule") -> RuleSource | None:
  """The rule defined at ``where`` (``file:line``) inside ``fn`` as a RuleSource of the
  whole of ``fn``: a fix of a closure ``fn`` returns (``jax.custom_gradient``'s VJP) is
  ``fn`` redefined, the only function JAX can be handed again."""
  outer = of(fn)
  file, _, line = where.rpartition(":")
  code = getattr(inspect.unwrap(fn), "__code__", None)
  if outer is None or code is None or file != code.co_filename or not line.isdigit():
    return None
  lineno = int(line) - code.co_firstlineno + 1
  for node in ast.walk(outer.node):
    if isinstance(node, ast.FunctionDef) and node is not outer.node and node.lineno == lineno:
      return dataclasses.replace(outer, node=node)
    if isinstance(node, ast.Lambda) and node.lineno == lineno:
      return dataclasses.replace(outer, node=syntax.as_def(node, name))
  return None


def _from_lambda(code, name: str) -> RuleSource | None:
  """``lambda r, g: e`` as ``def name(r, g): return e``.

  The whole file (or cell) is parsed, not ``inspect.getsource``'s lines: a lambda
  on a continuation line of ``defvjp(...)`` is not a statement of its own.
  """
  text = "".join(linecache.getlines(code.co_filename))
  try:
    found = syntax.lambda_node(ast.parse(text), code)
  except SyntaxError:
    return None
  if found is None:
    return None
  params = [a.arg for a in found.args.args]
  body = ast.get_source_segment(text, found.body)
  if "\n" in body:   # its line breaks were inside defvjp's parentheses
    body = f"({body})"
  as_def = f"def {name}({', '.join(params)}):\n  return {body}\n"
  return RuleSource(as_def, ast.parse(as_def).body[0])


_KEY = re.compile(r"\[(\d+|'[^']*'|\"[^\"]*\")\]|\.(\w+)")


def path_keys(path: str | None) -> list:
  """``"[1]['w']"`` -> ``[1, 'w']``: the keys of a ``jax.tree_util.keystr`` path."""
  return [key for key, _ in path_entries(path)]


def path_entries(path: str | None) -> list[tuple]:
  """``"[1].w"`` -> ``[(1, False), ('w', True)]``: each key, and whether it is an attribute."""
  return [(attr, True) if attr else (ast.literal_eval(index), False)
          for index, attr in _KEY.findall(path or "")]


def users_return_keys(site, bwd, keys: list) -> list:
  """``keys`` of the args tree where the user's own bwd returns (or would return) that
  leaf, when a library's bwd rearranges its return (flax linen's ``(params_t, x_t)`` is
  JAX's ``((params_t,), x_t)``): a sibling leaf the user did return, at a known path
  there, maps the args tree's prefix above their shared tail to the user's prefix.
  ``keys`` unchanged when no leaf was seen returned."""
  code = getattr(inspect.unwrap(bwd), "__code__", None)
  returned = arguments.cached(code, site.in_tree) if code is not None else None
  best = None
  for theirs, mine in zip(site.in_paths, returned or ()):
    if mine is None:
      continue
    theirs, mine = path_keys(theirs), path_keys(mine)
    tail = 0
    while tail < min(len(theirs), len(mine)) and theirs[-1 - tail] == mine[-1 - tail]:
      tail += 1
    head = theirs[:len(theirs) - tail]
    shared = next((i for i, (a, b) in enumerate(zip(theirs, keys)) if a != b),
                  min(len(theirs), len(keys)))
    if keys[:len(head)] == head and (best is None or shared > best[0]):
      best = (shared, mine[:len(mine) - tail] + keys[len(head):])
  return best[1] if best else keys


def element(value: ast.expr, keys: list) -> ast.expr | None:
  """The sub-expression of a returned literal at ``keys`` (None if not literal there)."""
  for key in keys:
    if isinstance(value, (ast.Tuple, ast.List)) and isinstance(key, int) \
        and key < len(value.elts):
      value = value.elts[key]
    elif isinstance(value, ast.Dict) and isinstance(key, str):
      match = [v for k, v in zip(value.keys, value.values)
               if isinstance(k, ast.Constant) and k.value == key]
      if not match:
        return None
      value = match[0]
    elif isinstance(value, ast.Call) and isinstance(key, str):   # dict(w=...), Params(w=...)
      match = [k.value for k in value.keywords if k.arg == key]
      if not match:
        return None
      value = match[0]
    else:
      return None
  return value


def literal_at(value: ast.expr, keys: list, fn: ast.FunctionDef) -> ast.expr | None:
  """``element``, following a local returned whole (or inside the returned literal) to the
  value ``fn`` last assigns to it: ``grads = {'w': ...}; return grads, gx`` has the dict
  literal at ``[0]``."""
  seen: set = set()
  for _ in range(len(keys) + 8):   # each step follows one local, never the same twice
    for depth in range(len(keys) + 1):
      node = element(value, keys[:depth])
      if not isinstance(node, ast.Name) or node.id in seen:
        continue
      whole = assigned(fn, node.id, [])
      if whole is None:
        return None
      seen.add(node.id)
      value, keys = whole, keys[depth:]
      break
    else:
      return element(value, keys)
  return None


def leaf_expression(value: ast.expr, keys: list, fn: ast.FunctionDef | None = None,
                    names: dict | None = None) -> ast.expr | None:
  """The expression that computes the leaf at ``keys`` of a returned value, followed back
  through what built it (``_built``): displays, ``dict(...)`` and keyword constructors,
  locals, ``eqx.tree_at``, ``dataclasses.replace``/``_replace`` and flax's dict helpers.
  Under a tree map (``jax.tree.map(lambda a: a.T, grads)``) it is the mapped function's
  body, which computes every leaf (so an edit there edits them all). ``names``: the rule's
  globals, to read a positional constructor's fields and a named ``where`` function. None
  where the leaf is built by code it cannot see into (an opaque helper's result)."""
  for _ in range(64):   # each step consumes a key or follows one builder; never a cycle
    body = _mapped_body(value, fn)
    if body is not None:
      return body
    step = _built(value, keys, fn, names or {})
    if step is None:
      return value if not keys else None
    value, keys = step
  return None


def _built(node: ast.expr, keys: list, fn: ast.FunctionDef | None, names: dict) -> tuple | None:
  """(expression, keys left) one step closer to what built the leaf at ``keys`` of ``node``."""
  if isinstance(node, ast.Name):
    if fn is None:
      return None
    return _local(fn, node.id, keys, node.lineno) if keys else _only_use(fn, node.id)
  if isinstance(node, ast.Call):
    return _helper(node, keys, names)
  if not keys:
    return None
  inner = element(node, keys[:1])
  if inner is not None:
    return inner, keys[1:]
  if isinstance(node, ast.Dict):   # {**grads, 'b': db}: the last unpacked dict has the rest
    spread = [v for k, v in zip(node.keys, node.values) if k is None]
    return (spread[-1], keys) if spread else None
  return None


def _local(fn: ast.FunctionDef, name: str, keys: list, line: int) -> tuple | None:
  """What ``fn`` last stored before ``line`` at the entry ``keys`` of local ``name``
  (``grads['w'] = v``), else what it assigned to ``name`` whole (``grads = {...}``,
  ``dw, db = a, b``); a rebinding from itself (``dm = eqx.tree_at(..., dm, ...)``) reads
  the value before it."""
  found = assigned(fn, name, keys, line)
  if found is not None:
    return found, []
  whole = assigned(fn, name, [], line)
  if whole is not None and not (isinstance(whole, ast.Name) and whole.id == name):
    return whole, keys
  return None


def _only_use(fn: ast.FunctionDef, name: str) -> tuple | None:
  """The one value ``fn`` assigns to a local it reads only here (``dW = jnp.outer(x, g)``
  then ``(dW, db)``): editing it is editing this leaf and nothing else."""
  stores = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == name
            and not isinstance(n.ctx, ast.Load)]
  loads = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == name
           and isinstance(n.ctx, ast.Load)]
  value = assigned(fn, name, [])
  if len(stores) != 1 or len(loads) != 1 or value is None or name in _params(fn):
    return None
  return value, []


def _params(fn: ast.FunctionDef) -> set[str]:
  return {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}


_TREE_AT = "tree_at"
_COPIES = ("dict", "FrozenDict", "freeze", "unfreeze", "copy", "deepcopy")


def _helper(call: ast.Call, keys: list, names: dict) -> tuple | None:
  """Through a call that builds a tree from its arguments: ``eqx.tree_at``,
  ``dataclasses.replace(obj, w=...)`` / ``obj._replace(w=...)`` / flax's ``obj.replace``,
  ``dict(w=...)`` / ``Params(w=...)`` keywords or positional arguments (of a class whose
  fields are known), and copies (``freeze(d)``, ``dict(d)``)."""
  name = _called(call)
  if name == _TREE_AT:
    return _tree_at(call, keys, names)
  replaced = name in ("replace", "_replace") and (
      isinstance(call.func, ast.Attribute) and not call.args
      or name == "replace" and len(call.args) == 1)
  named = [k.value for k in call.keywords if keys and k.arg == keys[0]]
  if named:
    return named[0], keys[1:]
  fields = _fields(_resolved(call.func, names)) if keys and call.args else ()
  if keys and keys[0] in fields[:len(call.args)]:
    return call.args[fields.index(keys[0])], keys[1:]
  if replaced:
    return (call.args[0] if call.args else call.func.value), keys
  if name in _COPIES and len(call.args) == 1:
    return call.args[0], keys
  return None


def _tree_at(call: ast.Call, keys: list, names: dict) -> tuple | None:
  """``eqx.tree_at(where, tree, replace)``: a leaf under one of ``where``'s paths is the
  replacement's entry (the tuple's, for several paths); any other is ``tree``'s."""
  args = dict(zip(("where", "pytree", "replace"), call.args))
  args.update((k.arg, k.value) for k in call.keywords if k.arg)
  where, tree = _where(args.get("where"), names), args.get("pytree")
  if where is None or tree is None:
    return None
  root, body = where
  many = isinstance(body, (ast.Tuple, ast.List))
  paths = [_access_keys(e, root) for e in (body.elts if many else [body])]
  for k, path in enumerate(paths):
    if path is not None and keys[:len(path)] == path:
      if "replace" in args:
        return args["replace"], ([k] if many else []) + keys[len(path):]
      replace_fn = args.get("replace_fn")
      return (replace_fn.body, []) if isinstance(replace_fn, ast.Lambda) else None
  return (tree, keys) if None not in paths else None


def _where(node: ast.expr | None, names: dict) -> tuple[str, ast.expr] | None:
  """(parameter, returned expression) of ``tree_at``'s ``where``: a one-argument lambda,
  or a function of the rule's globals returning one expression (``def gain_of(m):
  return m.gain``)."""
  if isinstance(node, ast.Name) and callable(names.get(node.id)):
    src = of(names[node.id])
    rets = src.returns() if src is not None else []
    node = (ast.Lambda(src.node.args, rets[0].value)
            if len(rets) == 1 and len(src.node.body) == 1 else None)
  if not isinstance(node, ast.Lambda) or len(node.args.args) != 1:
    return None
  return node.args.args[0].arg, node.body


def _resolved(node: ast.expr, names: dict):
  """The global a name or attribute chain (``Affine``, ``mod.Affine``) stands for; None
  where it is not one."""
  if isinstance(node, ast.Name):
    return names.get(node.id)
  if isinstance(node, ast.Attribute):
    owner = _resolved(node.value, names)
    return getattr(owner, node.attr, None) if isinstance(owner, types.ModuleType) else None
  return None


def _fields(cls) -> tuple[str, ...]:
  """The fields a class's constructor takes positionally, in order: a NamedTuple's, a
  dataclass's (an equinox Module is one) init fields; () for anything else."""
  if not isinstance(cls, type):
    return ()
  if issubclass(cls, tuple) and hasattr(cls, "_fields"):
    return tuple(cls._fields)
  if dataclasses.is_dataclass(cls):
    return tuple(f.name for f in dataclasses.fields(cls) if f.init and not f.kw_only)
  return ()


def _access_keys(node: ast.expr, root: str) -> list | None:
  """``l.layers[0].weight`` -> ``['layers', 0, 'weight']`` for ``root`` ``l``; None if not
  a chain of attributes and constant indices from ``root``."""
  keys = []
  while not (isinstance(node, ast.Name) and node.id == root):
    if isinstance(node, ast.Attribute):
      keys.insert(0, node.attr)
      node = node.value
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
      keys.insert(0, node.slice.value)
      node = node.value
    else:
      return None
  return keys


def _called(call: ast.Call) -> str:
  func = call.func
  return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def assigned(fn: ast.FunctionDef, name: str, keys: list,
             before: int | None = None) -> ast.expr | None:
  """The value of ``fn``'s last statement (before line ``before``, if given) that sets the
  entry ``keys`` of local ``name``
  (``[]``: ``name = v``): ``name['w'] = v``, ``name.w.value = v``, or an in-place
  ``name['w'][...] = v`` or ``name.w.set_value(v)`` (which set the array of the object
  there, wherever it keeps it)."""
  found = None
  for stmt in ast.walk(fn):
    if before is not None and getattr(stmt, "lineno", before) >= before:
      continue
    for target, value, in_place in _stores(stmt):
      entry = _entry(target, name)
      if entry is not None and (entry[0] == keys or (entry[1] or in_place)
                                and keys[:len(entry[0])] == entry[0]):
        if found is None or stmt.lineno > found[0]:
          found = (stmt.lineno, value)
  return found[1] if found is not None else None


_SETTERS = ("set_value",)
"""Methods that set their object's array in place: flax nnx's ``Variable.set_value``,
the spelling its deprecated ``.value =`` points to."""


def _stores(stmt: ast.AST):
  """(target, value, in place) of each store a statement makes: an assignment's, or a
  setter's call (``m_g.w.set_value(v)`` stores ``v`` in ``m_g.w``, in place)."""
  if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
    yield from ((t, v, False) for t, v in _pairs(stmt.targets[0], stmt.value))
  elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
    call = stmt.value
    if isinstance(call.func, ast.Attribute) and call.func.attr in _SETTERS \
        and len(call.args) == 1 and not call.keywords:
      yield call.func.value, call.args[0], True


def _pairs(target: ast.expr, value: ast.expr):
  """(target, value) of an assignment, an unpacking of a display element by element
  (``dw, db = jnp.outer(g, x), g``)."""
  if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
      and len(target.elts) == len(value.elts):
    for t, v in zip(target.elts, value.elts):
      yield from _pairs(t, v)
  else:
    yield target, value


def _entry(target: ast.expr, name: str) -> tuple[list, bool] | None:
  """(keys, in place) of an assignment target rooted at local ``name``, else None."""
  keys, in_place = [], False
  while not isinstance(target, ast.Name):
    if isinstance(target, ast.Attribute):
      keys.insert(0, target.attr)
    elif isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
      if target.slice.value is Ellipsis:
        in_place = in_place or not keys
      else:
        keys.insert(0, target.slice.value)
    else:
      return None
    target = target.value
  return (keys, in_place) if target.id == name else None


def _mapped_body(node: ast.expr, fn: ast.FunctionDef | None = None) -> ast.expr | None:
  """``body`` of ``<...>tree_map(lambda ...: body, tree, ...)`` or ``<...>tree.map(...)``;
  for a function ``fn`` defines (``def leaf(a): return body``), its one return value."""
  if not (isinstance(node, ast.Call) and node.args and _is_tree_map(node)):
    return None
  mapped = node.args[0]
  if isinstance(mapped, ast.Name) and fn is not None:
    defs = [d for d in ast.walk(fn) if isinstance(d, ast.FunctionDef) and d.name == mapped.id
            and d is not fn]
    rets = RuleSource("", defs[0]).returns() if len(defs) == 1 else []
    return rets[0].value if len(rets) == 1 else None
  return mapped.body if isinstance(mapped, ast.Lambda) else None


def _is_tree_map(call: ast.Call) -> bool:
  owner = call.func.value if isinstance(call.func, ast.Attribute) else None
  name = _called(call)
  return name == "tree_map" or (name == "map" and (
      getattr(owner, "attr", None) == "tree" or getattr(owner, "id", None) == "tree"))


# ------------------------------------------------------------ writing it back

def in_notebook(path: str) -> bool:
  """True for IPython cells: pseudo-files, or ipykernel's never-written cell files."""
  return (path.startswith("<") or not path.endswith(".py") or not os.path.isfile(path)
          or os.path.basename(os.path.dirname(path)).startswith("ipykernel_"))


def replacing_def(fn, text: str) -> tuple[int, int, str]:
  """(first line index, end index, new text) putting ``text`` (a ``def``) in place of
  ``fn``'s in its file: its decorators stay as the file has them (``@f.def_bwd``,
  ``@jax.custom_gradient`` register the rule), as the fix's text starts at ``def``."""
  old, first = inspect.getsourcelines(fn)
  decorators = ast.parse(textwrap.dedent("".join(old))).body[0].lineno - 1
  return (first - 1 + decorators, first - 1 + len(old),
          textwrap.indent(text, syntax.indent_of(old[decorators])))


def file_diff(path: str, replacements) -> str:
  """A unified diff of the file at ``path`` with ``replacements`` ((first line index, end
  index, new text), none overlapping) made."""
  with open(path, encoding="utf-8") as f:
    old = f.readlines()
  new = list(old)
  for start, stop, text in sorted(replacements, key=lambda r: r[0], reverse=True):
    new[start:stop] = text.splitlines(keepends=True)
  return "".join(difflib.unified_diff(old, new, fromfile=path, tofile=path))


_serial = itertools.count(1)


def run_defs(tree: ast.Module, text: str, scope: dict, label: str) -> None:
  """``tree`` (parsed from ``text``) run in ``scope`` under a file name of its own, whose
  lines linecache holds: tracebacks and ``inspect`` read the fix's source as written."""
  filename = f"<vjpviz-{label}-{next(_serial)}>"
  linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
  exec(compile(tree, filename, "exec"), scope)  # noqa: S102 - the user's own code, rewritten
