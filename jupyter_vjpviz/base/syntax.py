"""A rule's own syntax: what the capture and fixes stages read of a ``def``'s AST."""
from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterator

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def own_nodes(node: ast.AST) -> Iterator[ast.AST]:
  """``node``'s descendants in source order, not those inside functions or classes it
  defines (their statements and returns are not its own)."""
  for child in ast.iter_child_nodes(node):
    yield child
    if not isinstance(child, _SCOPES):
      yield from own_nodes(child)


def lambda_node(tree: ast.AST, code) -> ast.Lambda | None:
  """The one lambda in ``tree`` on ``code``'s first line with ``code``'s parameters."""
  params = list(code.co_varnames[:code.co_argcount])
  found = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)
           and [a.arg for a in n.args.args] == params and n.lineno == code.co_firstlineno]
  return found[0] if len(found) == 1 else None


def as_def(lam: ast.Lambda, name: str) -> ast.FunctionDef:
  """A lambda as the def it stands for, its body the return value, spans kept: edits
  splice into the lambda's own text."""
  span = dict(lineno=lam.lineno, col_offset=lam.col_offset, end_lineno=lam.end_lineno,
              end_col_offset=lam.end_col_offset)
  body = ast.Return(value=lam.body, lineno=lam.body.lineno, col_offset=lam.body.col_offset,
                    end_lineno=lam.body.end_lineno, end_col_offset=lam.body.end_col_offset)
  return ast.FunctionDef(name=name, args=lam.args, body=[body], decorator_list=[], returns=None,
                         type_params=[], **span)


def names_read(node: ast.AST) -> set[str]:
  return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def names_stored(stmt: ast.stmt) -> set[str]:
  """The locals a statement binds or writes into (``m_g['w'][...] = v``: ``m_g``)."""
  targets = stmt.targets if isinstance(stmt, ast.Assign) else \
      [stmt.target] if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)) else []
  found = set()
  for t in targets:
    for n in ast.walk(t):
      if isinstance(n, ast.Name):
        found.add(n.id)
  return found


def indent_of(line: str) -> str:
  """The whitespace a source line starts with."""
  return line[:len(line) - len(line.lstrip())]


def comment_at(line: str) -> int | None:
  """Where ``line``'s trailing comment starts (its code's end, spaces before the ``#``
  included), or None: a fix that rewrites the line drops what was said of the old code."""
  try:
    tokens = list(tokenize.generate_tokens(io.StringIO(line).readline))
  except (tokenize.TokenError, SyntaxError):
    return None
  found = next((t for t in tokens if t.type == tokenize.COMMENT), None)
  if found is None:
    return None
  return len(line[:found.start[1]].rstrip())
