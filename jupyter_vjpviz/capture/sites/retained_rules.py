"""What a diagnosis may keep of the user's custom_vjp, so fixes can be verified later.

A rule made for one call (a factory, flax linen's ``nn.custom_vjp``, a
``jax.custom_gradient`` in a loop) is gone once the failing call returns, and
with it verify_fix and apply_fix. A diagnosis holds it as long as the diagnosis
lives, but no device buffer may outlive the failing call because of us: a rule
set that reaches no array is held as it is; one that does (flax's closes over
the model's variables, as tracers of the failing trace) is held as a stand-in,
a copy of what it reaches with each array and tracer replaced by zeros of its
type that take no memory (a zero-strided numpy view). The stand-in runs the
user's rules at the recorded types; values read from the replaced arrays are
zeros. What it reaches is walked conservatively: past the budget nothing is held.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import types
import weakref

import jax
import numpy as np

from ..compat.private import core
from ..records import Record, Strong

BUDGET = 400       # objects looked at; a rule set needing more is not held

_standins: weakref.WeakSet = weakref.WeakSet()


def retained(rec: Record) -> Record:
  """``rec`` whose site holds its custom_vjp strongly, or a stand-in of it (see module)."""
  site = rec.site
  if site is None or site.custom_rule is None or isinstance(site.custom_rule, Strong):
    return rec
  custom_rule = site.custom_rule()
  if custom_rule is None:
    return rec
  if holds_arrays(custom_rule):
    custom_rule = standin(custom_rule)
    if custom_rule is None:
      return rec
  return dataclasses.replace(rec, site=dataclasses.replace(site, custom_rule=Strong(custom_rule)))


def is_standin(custom_rule) -> bool:
  """Whether ``custom_rule`` is a stand-in: fixes can be checked on it, never applied to it."""
  try:
    return custom_rule in _standins
  except TypeError:
    return False


class _Unheld(Exception):
  """What a rule reaches cannot be copied here, or is too much."""


def standin(root):
  """A copy of ``root`` reaching no array (see module), or None."""
  memo: dict = {}
  try:
    held = _copied(root, memo)
  except _Unheld:
    return None
  if held is root or holds_arrays(held):   # a cycle back into the original
    return None
  try:
    _standins.add(held)
  except TypeError:
    return None
  return held


def _copied(x, memo: dict):
  """``x``, or a copy reaching zeros where ``x`` reaches arrays; unchanged parts are shared."""
  if isinstance(x, _ATOMS):
    return x
  if id(x) in memo:
    return memo[id(x)]
  if len(memo) > BUDGET:
    raise _Unheld
  memo[id(x)] = x                    # a cycle meets the original (then nothing is held)
  if isinstance(x, (jax.Array, np.ndarray, core.Tracer)):
    new = _zeros(x)
  elif isinstance(x, types.FunctionType):
    new = _function(x, memo)
  elif isinstance(x, functools.partial):
    parts = [_copied(p, memo) for p in (x.func, *x.args, *x.keywords.values())]
    new = x if all(a is b for a, b in zip(parts, (x.func, *x.args, *x.keywords.values()))) \
        else functools.partial(parts[0], *parts[1:1 + len(x.args)],
                               **dict(zip(x.keywords, parts[1 + len(x.args):])))
  elif isinstance(x, (dict, list, tuple, set, frozenset)):
    new = _container(x, memo)
  else:
    new = _instance(x, memo)
  memo[id(x)] = new
  return new


def _container(x, memo: dict):
  """A container's copy, of its own type (a defaultdict keeps its factory, a namedtuple
  its fields)."""
  keys = list(x) if isinstance(x, dict) else None
  values = [x[k] for k in keys] if keys is not None else list(x)
  copies = [_copied(v, memo) for v in values]
  if all(a is b for a, b in zip(copies, values)):
    return x
  if keys is not None:
    clone = copy.copy(x) if type(x) is not dict else {}
    clone.clear()
    clone.update(zip(keys, copies))
    return clone
  if type(x) in (list, tuple, set, frozenset):
    return type(x)(copies)
  make = getattr(type(x), "_make", None)
  if make is None:
    raise _Unheld                        # a container subclass built some other way
  return make(copies)


def _buffer(x) -> bool:
  """A numpy array with memory of its own (a stand-in's zero-strided view has none)."""
  return isinstance(x, np.ndarray) and x.size > 1 and not all(s == 0 for s in x.strides)


def _zeros(x):
  aval = core.typeof(x)
  dtype = getattr(aval, "dtype", None)
  if dtype is None or jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
    raise _Unheld                      # a PRNG key, a user type: no zeros to stand in
  return np.broadcast_to(np.zeros((), dtype), aval.shape)


def _function(fn, memo: dict):
  cells = tuple(fn.__closure__ or ())
  contents = [c.cell_contents if _bound(c) else c for c in cells]
  new = [_copied(v, memo) if _bound(c) else c for c, v in zip(cells, contents)]
  defaults = _copied(fn.__defaults__, memo) if fn.__defaults__ else fn.__defaults__
  kwdefaults = _copied(fn.__kwdefaults__, memo) if fn.__kwdefaults__ else fn.__kwdefaults__
  attrs = _copied(dict(fn.__dict__), memo)
  if (all(a is b for a, b in zip(new, contents)) and defaults is fn.__defaults__
      and kwdefaults is fn.__kwdefaults__ and all(attrs[k] is v for k, v in fn.__dict__.items())):
    return fn
  clone = types.FunctionType(
      fn.__code__, fn.__globals__, fn.__name__, defaults,
      tuple(types.CellType(v) if _bound(c) else c for c, v in zip(cells, new)) or None)
  clone.__kwdefaults__, clone.__qualname__ = kwdefaults, fn.__qualname__
  clone.__dict__.update(attrs)
  return clone


def _instance(x, memo: dict):
  """An object's copy with copied attributes, made without running its code."""
  attrs = getattr(x, "__dict__", None)
  slots = [s for s in _slots(x) if hasattr(x, s)]
  if not isinstance(attrs, dict) and not slots:
    if any(True for _ in _reaches(x)):
      raise _Unheld
    return x                           # nothing inside it can be an array
  own = dict(attrs or {})
  new_attrs = {k: _copied(v, memo) for k, v in own.items()}
  new_slots = {s: _copied(getattr(x, s), memo) for s in slots}
  if all(new_attrs[k] is v for k, v in own.items()) and \
      all(new_slots[s] is getattr(x, s) for s in slots):
    return x
  try:
    clone = object.__new__(type(x))
    if attrs is not None:
      clone.__dict__.update(new_attrs)
    for s, v in new_slots.items():
      object.__setattr__(clone, s, v)
  except Exception as e:  # noqa: BLE001 - a type that cannot be made this way
    raise _Unheld from e
  return clone


def _slots(x) -> tuple:
  slots = getattr(type(x), "__slots__", ())
  return (slots,) if isinstance(slots, str) else tuple(slots)


def holds_arrays(root) -> bool:
  """True if ``root`` may reach an array (or a tracer) through closures, defaults,
  partials, containers or instance attributes; module globals are not its own."""
  todo, seen = [root], set()
  while todo:
    x = todo.pop()
    if id(x) in seen or isinstance(x, _ATOMS):
      continue
    seen.add(id(x))
    if len(seen) > BUDGET or isinstance(x, jax.Array) or _buffer(x):
      return True
    todo.extend(_reaches(x))
  return False


_ATOMS = (type(None), bool, int, float, complex, str, bytes, type, types.ModuleType,
          types.BuiltinFunctionType, types.CodeType)


def _reaches(x):
  if isinstance(x, types.FunctionType):
    yield from (c.cell_contents for c in x.__closure__ or () if _bound(c))
    yield from x.__defaults__ or ()
    yield from (x.__kwdefaults__ or {}).values()
    yield from x.__dict__.values()      # __wrapped__ and the like
  elif isinstance(x, types.MethodType):
    yield x.__func__
    yield x.__self__
  elif isinstance(x, functools.partial):
    yield x.func
    yield from x.args
    yield from x.keywords.values()
  elif isinstance(x, dict):
    yield from x.values()
  elif isinstance(x, (tuple, list, set, frozenset)):
    yield from x
  else:
    yield from getattr(x, "__dict__", {}).values()
    yield from (getattr(x, s) for s in _slots(x) if hasattr(x, s))


def _bound(cell) -> bool:
  try:
    cell.cell_contents  # noqa: B018 - reading an empty cell raises: that is the test
    return True
  except ValueError:
    return False
