"""The user's line read and rewritten: calls found by name, variables followed back to the
expression assigned to them above (in the same function), replacements spliced in place."""
from __future__ import annotations

import ast
import linecache
from collections.abc import Callable

from ...analysis.locate import source_line
from ...base import syntax

_MODULES = frozenset({"jnp", "np", "numpy"})
REACH = 200       # lines read back for a variable's assignment


def line(source: str | None) -> str | None:
  where = source_line(source)
  text = linecache.getline(*where) if where else ""
  return text.rstrip("\n") or None


def parse(text: str | None):
  """The line's code (its comment dropped: a rewrite makes it about the old code), parsed."""
  text = text or ""
  at = syntax.comment_at(text)
  text = (text[:at] if at is not None else text).strip()
  try:
    return ast.parse(text), text
  except SyntaxError:
    return None, text


def called(node) -> str | None:
  if isinstance(node, ast.Call):
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
  return None


def arguments(node: ast.Call, text: str) -> str:
  return ", ".join(ast.get_source_segment(text, a) for a in (*node.args, *node.keywords))


def rewrite(text_line: str | None, funcs: tuple[str, ...], make) -> str | None:
  """``text_line`` with its first call to one of ``funcs`` (``jnp.sqrt(...)``) replaced by
  ``make(the call's arguments, as written)``."""
  tree, text = parse(text_line)
  for node in ast.walk(tree) if tree is not None else ():
    if isinstance(node, ast.Call) and called(node) in funcs and node.args:
      new = make(arguments(node, text))
      return new and syntax.indent_of(text_line) + text.replace(ast.get_source_segment(text, node), new, 1)
  return None


class Expr:
  """An expression of the user's code, with the text it was parsed from."""

  def __init__(self, node, text: str):
    self.node, self.text = node, text

  @property
  def seg(self) -> str:
    return ast.get_source_segment(self.text, self.node)

  def sub(self, node) -> Expr:
    return Expr(node, self.text)

  @property
  def wrapped(self) -> str:
    """The text, parenthesised unless it is a name, a call, a subscript or a constant."""
    simple = (ast.Name, ast.Call, ast.Subscript, ast.Attribute, ast.Constant)
    return self.seg if isinstance(self.node, simple) else f"({self.seg})"


def resolver(source: str | None) -> Callable[[Expr], Expr]:
  """``resolve(e)``: ``e``, or where it is a variable, the expression last assigned to it
  above ``source``'s line in the same function (followed again, a few times)."""
  def resolve(e: Expr, depth: int = 4) -> Expr:
    if depth and isinstance(e.node, ast.Name):
      text = assigned_above(source, e.node.id)
      tree, text = parse(text)
      if tree is not None and tree.body and isinstance(tree.body[0], ast.Expr):
        return resolve(Expr(tree.body[0].value, text), depth - 1)
    return e
  return resolve


def rewrite_nodes(source: str | None, make) -> str | None:
  """The line at ``source`` with every outermost node for which ``make(Expr, resolve)``
  gives text replaced by it; None where none does (or the line cannot be read)."""
  text_line = line(source)
  tree, text = parse(text_line)
  if tree is None:
    return None
  resolve, spans = resolver(source), []
  for node in ast.walk(tree):
    if not hasattr(node, "col_offset") or any(a <= node.col_offset < b for a, b, _ in spans):
      continue
    new = make(Expr(node, text), resolve)
    if new:
      spans.append((node.col_offset, node.end_col_offset, new))
  if not spans:
    return None
  for a, b, new in sorted(spans, reverse=True):
    text = text[:a] + new + text[b:]
  return syntax.indent_of(text_line) + text


def assigned_above(source: str | None, name: str) -> str | None:
  """The expression last assigned to the variable ``name`` above ``source``'s line, in the
  same function (lines read back to its ``def``)."""
  where = source_line(source)
  if where is None or not name.isidentifier():
    return None
  file, at = where
  for n in range(at - 1, max(0, at - REACH), -1):
    tree, text = parse(linecache.getline(file, n))
    stmt = tree.body[0] if tree is not None and tree.body else None
    if isinstance(stmt, ast.Assign) and [getattr(t, "id", None) for t in stmt.targets] == [name]:
      return ast.get_source_segment(text, stmt.value)
    if linecache.getline(file, n).lstrip().startswith("def "):
      return None
  return None


def rewrite_std(text_line: str | None, make) -> str | None:
  """``text_line``'s ``std`` (``h.std(0)``, ``jnp.std(h, 0)``) as its ``var`` on a line of
  its own, and ``make(that variable)`` in the std's place: the square root is the user's to see."""
  tree, text = parse(text_line)
  for node in ast.walk(tree) if tree is not None else ():
    if isinstance(node, ast.Call) and called(node) == "std" and isinstance(node.func, ast.Attribute):
      owner = node.func.value
      method = not (isinstance(owner, ast.Name) and owner.id in _MODULES)
      args = ([owner] if method else []) + [*node.args, *node.keywords]
      if not args:
        return None
      taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
      var = "var" if "var" not in taken else next(f"var{i}" for i in range(2, 99) if f"var{i}" not in taken)
      spelled = ", ".join(ast.get_source_segment(text, a) for a in args)
      indent = syntax.indent_of(text_line)
      return (f"{indent}{var} = jnp.var({spelled})\n"
              + indent + text.replace(ast.get_source_segment(text, node), make(var), 1))
  return None
