"""How functions, their parameters and JAX name stacks are written in a diagnosis."""
from __future__ import annotations

import functools
import inspect
import linecache
import os
import types
import weakref

import jax

from ...base import trees
from . import library_wrappers

_positional_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


_JAX_DIR = os.path.dirname(jax.__file__) + os.sep


def unwrap(fun):
  """The user's function behind ``__wrapped__``, partials and libraries' wrappers (a
  partial's arguments too: flax's ``functools.wraps`` points at a partial of its own
  function, which is given the user's as an argument)."""
  fun = inspect.unwrap(fun)
  user, path = library_wrappers.behind(fun)
  if path is not None:
    return user
  while isinstance(fun, functools.partial):
    fun = inspect.unwrap(fun.func)
  return _behind_library(fun)


def inside_jax(location: str | None) -> bool:
  """Whether a file (or ``file:line``) is JAX's own code, not the user's."""
  return bool(location) and location.startswith(_JAX_DIR)


def _behind_library(fun):
  """The user's function behind a library's wrapper (``jax.custom_gradient``,
  equinox's ``filter_custom_vjp``, flax's ``nn.custom_vjp`` wrap one so)."""
  return library_wrappers.behind(fun)[0]


def _behind_jax(fun):
  """The user's function behind JAX's own wrappers: a ``jax.custom_gradient`` is a
  custom_vjp wrapping a function of JAX's (``*args``) that calls the user's."""
  fun = inspect.unwrap(fun)
  code = getattr(fun, "__code__", None)
  return _behind_library(fun) if code is not None and inside_jax(code.co_filename) else fun


def function_of(jaxpr) -> tuple[str | None, str | None]:
  """Name and ``file:line`` of the function a jaxpr was traced from, from its debug info."""
  info = getattr(jaxpr, "debug_info", None)
  if info is None and hasattr(jaxpr, "jaxpr"):   # a ClosedJaxpr of JAX 0.6 keeps it inside
    info = getattr(jaxpr.jaxpr, "debug_info", None)
  if info is None:
    return None, None
  name, _, where = (info.func_src_info or "").partition(" at ")
  return (name or info.func_name), (where or None)


def function_name(fun) -> str:
  fun = unwrap(fun)
  return getattr(fun, "__name__", None) or type(fun).__name__


def function_source(fun) -> str | None:
  """``file:line`` of a function's definition, as JAX writes it."""
  try:
    code = unwrap(fun).__code__
  except AttributeError:
    return None
  return f"{code.co_filename}:{code.co_firstlineno}"


def class_source(cls) -> str | None:
  """``file:line`` of a class statement (its first decorator, as ``inspect`` counts), found
  above its earliest method in that method's file: linecache holds notebook cells too,
  where ``inspect.getsourcelines(cls)`` finds no file."""
  methods = [f.__code__ for f in map(inspect.unwrap, vars(cls).values())
             if hasattr(f, "__code__") and f.__code__.co_qualname.startswith(cls.__qualname__ + ".")]
  if not methods:
    return None
  first = min(methods, key=lambda c: c.co_firstlineno)
  lines = linecache.getlines(first.co_filename)
  head = f"class {cls.__name__}"
  for i in range(min(first.co_firstlineno, len(lines)) - 1, -1, -1):
    text = lines[i].lstrip()
    if text.startswith(head) and text[len(head):len(head) + 1] in ("(", ":", " "):
      indent = len(lines[i]) - len(text)
      while i and lines[i - 1].startswith(" " * indent + "@"):
        i -= 1
      return f"{first.co_filename}:{i + 1}"
  return None


def positional_names(fun) -> tuple[str, ...]:
  """Positional parameter names, cached: the hook asks on every custom_vjp fwd.

  Only JAX's own wrappers (``custom_gradient``) pass their arguments on as they
  got them; another library's rearranges them (see ``arguments``)."""
  try:
    return _positional_cache[fun]
  except (KeyError, TypeError):
    pass
  if isinstance(fun, types.MethodType):   # unwrapping would follow ``__wrapped__`` past the binding
    return positional_names(fun.__func__)[1:]   # (flax's ``jax.grad(model.apply)``): not ``self``
  try:
    names = tuple(p.name for p in inspect.signature(_behind_jax(fun)).parameters.values()
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


def leaf_labels(origin) -> list[str]:
  """Each leaf of an ``Origin`` as the user names it (``x``, ``p['w']``, a keyword's name):
  the graph's input labels, and a library rule's inputs that are program inputs."""
  params = positional_names(origin.fun)
  labels = [_label(params, path) for path in trees.leaf_paths(origin.tree, origin.leaves)]
  return [own or label for own, label in zip(origin.labels, labels)] if origin.labels else labels


def call_labels(fun, call) -> list[str]:
  """Each leaf of ``call``, ``fun``'s ``(args, kwargs)``, as the user named it."""
  params = positional_names(fun)
  return [_label(params, path) for path, _ in jax.tree_util.tree_flatten_with_path(call)[0]]


def _label(params: tuple[str, ...], path: tuple) -> str:
  """The leaf at ``path`` of ``(args, kwargs)``: ``p['w']``, a keyword's name."""
  group, top, rest = path[0].idx, path[1], jax.tree_util.keystr(path[2:])
  return f"{top.key}{rest}" if group == 1 else argument_name(params, top.idx, rest)


def library_function(fun) -> bool:
  """A library's function (not the user's, nor JAX's own wrapper, which keeps the
  user's parameters): its parameter names are not the user's."""
  code = getattr(fun, "__code__", None)
  return not library_wrappers.user_code(fun) and not (code is not None and inside_jax(code.co_filename))


def scope_names(name_stack) -> str:
  """``jax.named_scope`` names only, without transform wrappers like ``jvp(...)``."""
  scopes = getattr(name_stack, "stack", ())
  return "/".join(s.name for s in scopes if type(s).__name__ == "Scope")
