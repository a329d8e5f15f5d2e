"""How functions, their parameters and JAX name stacks are written in a diagnosis."""
from __future__ import annotations

import functools
import inspect
import weakref

_positional_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _unwrap(fun):
  fun = inspect.unwrap(fun)
  while isinstance(fun, functools.partial):
    fun = inspect.unwrap(fun.func)
  return fun


def function_name(fun) -> str:
  fun = _unwrap(fun)
  return getattr(fun, "__name__", None) or type(fun).__name__


def function_source(fun) -> str | None:
  """``file:line`` of a function's definition, as JAX writes it."""
  try:
    code = _unwrap(fun).__code__
  except AttributeError:
    return None
  return f"{code.co_filename}:{code.co_firstlineno}"


def positional_names(fun) -> tuple[str, ...]:
  """Positional parameter names, cached: the hook asks on every custom_vjp fwd."""
  try:
    return _positional_cache[fun]
  except (KeyError, TypeError):
    pass
  try:
    names = tuple(p.name for p in inspect.signature(fun).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
  except (TypeError, ValueError):
    names = ()
  try:
    _positional_cache[fun] = names
  except TypeError:
    pass
  return names


def argument_name(params: tuple[str, ...], position: int, rest: str = "") -> str:
  """``x['w']`` for position 0 of ``f(x)``; ``args[3]`` past the named parameters."""
  head = params[position] if position < len(params) else f"args[{position}]"
  return head + rest


def scope_names(name_stack) -> str:
  """``jax.named_scope`` names only, without transform wrappers like ``jvp(...)``."""
  scopes = getattr(name_stack, "stack", ())
  return "/".join(s.name for s in scopes if type(s).__name__ == "Scope")
