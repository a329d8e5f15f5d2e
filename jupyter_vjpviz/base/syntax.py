"""A rule's own syntax: what the capture and fixes stages read of a ``def``'s AST."""
from __future__ import annotations

import ast
from collections.abc import Iterator

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def own_nodes(node: ast.AST) -> Iterator[ast.AST]:
  """``node``'s descendants in source order, not those inside functions or classes it
  defines (their statements and returns are not its own)."""
  for child in ast.iter_child_nodes(node):
    yield child
    if not isinstance(child, _SCOPES):
      yield from own_nodes(child)
