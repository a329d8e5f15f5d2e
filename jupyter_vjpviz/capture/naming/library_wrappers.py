"""The user's functions behind a library's custom_vjp, and how to put edited ones back.

A library that builds the ``jax.custom_vjp`` for its user (equinox's
``filter_custom_vjp``, flax linen's ``nn.custom_vjp``, JAX's ``custom_gradient``)
hands JAX functions of its own, which call the user's. A wrapper names what it
calls: a free variable (a closure cell), or an attribute it loads
(``self.fn_bwd(...)``: ``fn_bwd`` is in its ``co_names``) of an object in a
cell. Following those, nearest first, finds the user's function and the way
back to it: a fix then runs in the library's place on copies of the wrapper
(``UserRules.placed``), or is rebound where the library reads it (``rebind``).
Nothing here knows a library by name.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import types
from typing import Any
from collections.abc import Callable

from ..compat import custom_jvp3
from ..sites import hijax_rules, retained_rules
from . import frames

Path = tuple[tuple[str, str], ...]
"""Steps from a wrapper to the user's function: ("cell", freevar), ("attr", name), and in
a partial ("func", ""), ("arg", index), ("kw", name)."""

MAX_DEPTH = 4     # wrappers of wrappers: flax linen nests three


def user_code(fn) -> bool:
  code = getattr(fn, "__code__", None)
  return code is not None and not frames.library_file(code.co_filename)


def behind(fun, avoid=None) -> tuple[Any, Path | None]:
  """The user's function ``fun`` stands for and the path to it: ``(fun, ())`` if it is
  the user's, ``(fun, None)`` if no user function is found behind the library's.
  ``avoid`` is a user function that cannot be the one (see ``user_fwd``)."""
  if user_code(fun):
    return fun, ()
  frontier, seen = [(fun, ())], {id(fun), id(avoid)}
  for _ in range(MAX_DEPTH):
    deeper = []
    for fn, path in frontier:
      for steps, value in _called(fn):
        if id(value) in seen:
          continue
        seen.add(id(value))
        if user_code(value):
          return value, path + steps
        deeper.append((value, path + steps))
    frontier = deeper
  return fun, None


def user_fwd(custom_vjp) -> tuple[Any, Path | None]:
  """The user's fwd behind a custom_vjp's: another user function than the primal where
  there is one. A library may run both from one function (flax linen's fwd and primal
  are one closure over the user's ``fn`` and ``forward_fn``); only where the user wrote
  one function for both (``jax.custom_gradient``) is it both."""
  primal, path = behind(custom_vjp.fun)
  other = behind(custom_vjp.fwd, avoid=primal) if path else (None, None)
  return other if other[1] is not None else behind(custom_vjp.fwd)


def _called(fn):
  """(steps, callable) for what a library function may call: cells, and loaded attributes."""
  if isinstance(fn, functools.partial):   # what a partial calls, and the functions it passes
    yield (("func", ""),), fn.func
    yield from (((("arg", str(i)),), a) for i, a in enumerate(fn.args) if _callable(a))
    yield from (((("kw", k),), a) for k, a in fn.keywords.items() if _callable(a))
    return
  if not isinstance(fn, types.FunctionType):   # a callable object (flax nnx's FwdFn, BwdFn)
    for code in _call_codes(type(fn)):
      yield from _loaded(fn, code, ())
    return
  code = fn.__code__
  for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
    try:
      value = cell.cell_contents
    except ValueError:   # a free variable not bound yet
      continue
    if _callable(value):
      yield (("cell", name),), value
    else:
      yield from _loaded(value, code, (("cell", name),))


def _call_codes(cls):
  """The code of a class's ``__call__`` and of each function its decorators wrap
  (``__wrapped__``: flax nnx's ``SimpleFwdFn`` copies its arguments in a wrapper around
  the method that loads ``self.fwd``)."""
  call, seen = getattr(cls, "__call__", None), set()  # noqa: B004 - the method itself
  while call is not None and id(call) not in seen:
    seen.add(id(call))
    code = getattr(call, "__code__", None)
    if code is not None:
      yield code
    call = getattr(call, "__wrapped__", None)


def _loaded(obj, code, steps: Path):
  """(steps, callable) for the attributes of ``obj`` that ``code`` loads (``self.fn_bwd``)."""
  attrs = getattr(obj, "__dict__", None)
  if isinstance(attrs, dict) and not isinstance(obj, (type, types.ModuleType)):
    for attr in code.co_names:
      if _callable(attrs.get(attr)):
        yield steps + (("attr", attr),), attrs[attr]


def _callable(x) -> bool:
  return isinstance(x, (types.FunctionType, functools.partial))


def replaced(root, path: Path, new):
  """A copy of ``root`` that calls ``new`` where it called the function at ``path``;
  ``root`` and everything on the way are left untouched."""
  if not path:
    return new
  (kind, name), rest = path[0], path[1:]
  if kind in ("func", "arg", "kw"):
    func, args, keywords = root.func, list(root.args), dict(root.keywords)
    if kind == "func":
      func = replaced(func, rest, new)
    elif kind == "arg":
      args[int(name)] = replaced(args[int(name)], rest, new)
    else:
      keywords[name] = replaced(keywords[name], rest, new)
    return functools.partial(func, *args, **keywords)
  if kind == "attr":
    clone = copy.copy(root)
    object.__setattr__(clone, name, replaced(getattr(root, name), rest, new))
    return clone
  i = root.__code__.co_freevars.index(name)
  cells = list(root.__closure__)
  cells[i] = types.CellType(replaced(cells[i].cell_contents, rest, new))
  clone = types.FunctionType(root.__code__, root.__globals__, root.__name__,
                             root.__defaults__, tuple(cells))
  clone.__kwdefaults__, clone.__qualname__ = root.__kwdefaults__, root.__qualname__
  clone.__dict__.update(root.__dict__)
  return clone


def rebind(root, path: Path, new) -> None:
  """Make ``root`` call ``new`` from now on, where the library reads the user's function."""
  holder = root
  for kind, name in path[:-1]:
    holder = _step(holder, kind, name)
  kind, name = path[-1]
  if kind == "cell":
    holder.__closure__[holder.__code__.co_freevars.index(name)].cell_contents = new
  elif kind == "attr":
    object.__setattr__(holder, name, new)
  else:   # a partial's parts are read-only
    raise ValueError("the rule sits in a functools.partial, which cannot be rebound: "
                     "apply the fix in your source and re-run it")


def spelled(root, path: Path, names: dict) -> str | None:
  """How code that sees ``names`` (a rule's globals) reaches the function at ``path`` from
  ``root``: the name of the object nearest that function on the way, then the attributes
  after it (equinox's ``affine.fn``, ``affine`` being its ``filter_custom_vjp``); None where
  a step after every named object is no attribute (a closure cell, a partial's part)."""
  objects, holder = [root], root
  for kind, name in path:
    holder = _step(holder, kind, name)
    objects.append(holder)
  for at in range(len(objects) - 1, -1, -1):
    named = next((k for k, v in names.items() if v is objects[at]), None)
    if named is not None:
      rest = path[at:]
      return named + "".join(f".{n}" for _, n in rest) if all(k == "attr" for k, _ in rest) else None
  return None


def _step(holder, kind: str, name: str):
  if kind == "func":
    return holder.func
  if kind == "arg":
    return holder.args[int(name)]
  if kind == "kw":
    return holder.keywords[name]
  if kind == "attr":
    return getattr(holder, name)
  return holder.__closure__[holder.__code__.co_freevars.index(name)].cell_contents


@dataclasses.dataclass(frozen=True, eq=False)
class UserRules:
  """A custom_vjp as its user wrote it: their primal and rules, and where they sit.

  Reads like the custom_vjp itself (``symbolic_zeros``, ``with_accums``, ... come
  from the object JAX runs), so fix code written for ``jax.custom_vjp`` works on it.
  """
  custom_vjp: Any                 # the jax.custom_vjp JAX runs
  fun: Callable
  fwd: Callable
  bwd: Callable
  paths: dict                     # role -> Path from the custom_vjp's function to the user's

  primal_method = None            # a rule reaches the primal as the custom_vjp's ``.fun``

  def __getattr__(self, name):
    return getattr(self.custom_vjp, name)

  @property
  def seen_through(self) -> bool:
    return any(self.paths.values())

  @property
  def primal(self) -> Callable:
    """The primal at the site's arguments: the custom_vjp's own function (a library's
    takes the arguments the site records, the user's behind it may not)."""
    return self.custom_vjp.fun

  @staticmethod
  def bound(role: str) -> int:
    """Leading parameters the caller binds (a method's ``self``): none."""
    return 0

  @property
  def nondiff_argnums(self) -> tuple:
    """Arguments before the residuals in the user's bwd: a library passes its own, not these."""
    return () if self.paths.get("bwd") else self.custom_vjp.nondiff_argnums

  def placed(self, fwd: Callable, bwd: Callable) -> tuple[Callable, Callable]:
    """The functions JAX must run to run the user's ``fwd`` and ``bwd`` (copies of the
    library's wrappers where those are edited)."""
    return (self._place("fwd", fwd), self._place("bwd", bwd))

  def _place(self, role: str, new: Callable) -> Callable:
    if new is getattr(self, role):
      return getattr(self.custom_vjp, role)
    path = self.paths.get(role)
    return replaced(getattr(self.custom_vjp, role), path, new) if path else new

  def with_rules(self, fwd: Callable, bwd: Callable):
    """A shallow copy of the custom_vjp running ``fwd``/``bwd``: the user's is untouched.
    Rules the user registered with ``defremat`` are run so, with their ``rem``."""
    placed_fwd, placed_bwd = self.placed(fwd, bwd)
    remat = remat_of(self.custom_vjp)
    if remat is not None:
      return copy_of(remat.user_rules(), **{REMAT: remat}, remat_rules=(
          placed_fwd, remat.rem, placed_bwd, remat.with_logs))
    return copy_of(self.custom_vjp, fwd=placed_fwd, bwd=placed_bwd)

  def define(self, method: str, fwd: Callable, bwd: Callable, **flags) -> None:
    """Rebind the rules: where the library reads them, or by the custom_vjp's ``method``
    (``defvjp``, ``defvjp_with_logs``, ``defvjp_with_accums``, ``defremat``: then with
    the user's ``rem`` and on the user's custom_vjp)."""
    remat = remat_of(self.custom_vjp)
    if remat is not None:
      self._redefine(fwd, bwd, lambda f, b: getattr(remat.user_rules(), method)(f, remat.rem, b, **flags))
      return
    self._redefine(fwd, bwd, lambda f, b: getattr(self.custom_vjp, method)(f, b, **flags))

  def _redefine(self, fwd, bwd, define) -> None:
    if retained_rules.is_standin(self.custom_vjp):
      raise ValueError("this rule was made for the failing call only (its custom_vjp is gone): "
                       "put the fix in your source and re-run it")
    if not self.seen_through:
      define(fwd, bwd)
      return
    for role, new in (("fwd", fwd), ("bwd", bwd)):
      if new is not getattr(self, role):
        if not self.paths.get(role):
          raise ValueError(f"no user {role} rule was found behind the library's; "
                           "apply the fix in your source and re-run it")
        rebind(getattr(self.custom_vjp, role), self.paths[role], new)


REMAT = "_vjpviz_remat"
"""The attribute of a custom_vjp read through its ``defremat`` rules (its ``Remat``)."""


@dataclasses.dataclass(frozen=True)
class Remat:
  """How the user registered rules with ``custom_vjp.defremat``/``defremat_with_logs``:
  on which custom_vjp (weakly), with which ``rem`` rule."""
  user: Any                       # weakref.ref to the user's custom_vjp
  rem: Callable
  with_logs: bool

  @property
  def method(self) -> str:
    return "defremat_with_logs" if self.with_logs else "defremat"

  def user_rules(self):
    """The user's custom_vjp (an error to fix a rule whose object is gone)."""
    custom_vjp = self.user()
    if custom_vjp is None:
      raise ValueError("this rule's custom_vjp is gone: put the fix in your source and re-run it")
    return custom_vjp


def remat_of(custom_vjp) -> Remat | None:
  """The ``Remat`` of a custom_vjp read through its ``defremat`` rules, else None."""
  return getattr(custom_vjp, "__dict__", {}).get(REMAT)


def vjp_pair(rules) -> tuple[Callable, Callable]:
  """(fwd, bwd) of the VJP JAX runs outside ``jax.remat`` for ``rules`` (a custom_vjp or
  its ``UserRules``): as registered, ``derived`` where that was with ``defremat``."""
  registered = getattr(rules, "__dict__", {}).get("remat_rules")   # an edited copy's
  fwd, _, bwd, *_ = registered or (rules.fwd, None, rules.bwd)
  return derived(rules, fwd, bwd)


def derived(rules, fwd: Callable, bwd: Callable) -> tuple[Callable, Callable]:
  """``fwd``/``bwd`` for ``rules`` (a custom_vjp or its ``UserRules``) as a VJP: as they
  are, or registered with ``defremat``, ``rem`` run right after ``fwd``, its residuals
  the bwd's (as JAX's ``_vjp_from_remat_rules``)."""
  remat = remat_of(getattr(rules, "custom_vjp", rules))
  if remat is None:
    return fwd, bwd

  def fwd_then_rem(*args):
    out, res = fwd(*args)
    return out, remat.rem(res, *args)[1]
  return functools.update_wrapper(fwd_then_rem, fwd), bwd


def copy_of(custom_vjp, **attributes):
  """A shallow copy of ``custom_vjp`` with ``attributes`` replaced (set in its own
  ``__dict__``, where JAX's ``custom_vjp.__call__`` reads them)."""
  clone = object.__new__(type(custom_vjp))
  clone.__dict__.update(custom_vjp.__dict__)
  for name, value in attributes.items():
    setattr(clone, name, value)
  return clone


@dataclasses.dataclass(frozen=True, eq=False)
class JvpRules:
  """A custom_jvp as its user wrote it: the primal and its one rule, ``jvp``; reads like
  the custom_jvp itself (``nondiff_argnums``, ``symbolic_zeros``)."""
  custom_jvp: Any

  def __getattr__(self, name):
    return custom_jvp3.attribute(self.custom_jvp, name)

  @property
  def primal(self) -> Callable:
    return custom_jvp3.primal(self.custom_jvp)

  @property
  def rules(self) -> dict:
    """The rules a fix may replace, by role."""
    return {"jvp": custom_jvp3.attribute(self.custom_jvp, "jvp")}

  @staticmethod
  def bound(role: str) -> int:
    return 0

  def with_rules(self, jvp: Callable):
    """A shallow copy of the custom_jvp running ``jvp``: the user's is untouched."""
    return copy_of(self.custom_jvp, **{custom_jvp3.own_name(self.custom_jvp, "jvp"): jvp})

  def define(self, jvp: Callable) -> None:
    """Rebind the rule (a fix applied)."""
    self.custom_jvp.defjvp(jvp, symbolic_zeros=self.symbolic_zeros)


def user_rules(custom_rule) -> UserRules | JvpRules | hijax_rules.HijaxRules:
  """The user's side of ``custom_rule`` (a custom_vjp or custom_jvp, or a hijax primitive's
  application): what fixes read, verify runs and apply rebinds."""
  if hijax_rules.is_primitive(custom_rule):
    return hijax_rules.HijaxRules(custom_rule)
  if custom_jvp3.is_custom_jvp(custom_rule):
    return JvpRules(custom_rule)
  found = {"fun": behind(custom_rule.fun), "fwd": user_fwd(custom_rule), "bwd": behind(custom_rule.bwd)}
  return UserRules(custom_vjp=custom_rule, **{role: fn for role, (fn, _) in found.items()},
                   paths={role: path or () for role, (_, path) in found.items()})
