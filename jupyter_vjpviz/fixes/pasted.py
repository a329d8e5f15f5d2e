"""A NaN fix's text run where the user would paste it, and judged against the original.

What is verified is what is written: a line rewrite (``fixes.nonfinite``) is judged on the
program the user gets by replacing the named line of their function with the fix's code
(any helper it defines put beside the function), not on vjpviz's patch of the jaxpr. The
function is found from the differentiated one (itself, the functions it calls by global
name or closure, the methods of its arguments' classes) and rebuilt from its source, so the
user's own function and module stay as they are.

The judge (``judge``) is independent of the fix and of vjpviz's oracle: the fixed
program's forward values equal the original's wherever those were finite, its gradient is
finite, and it equals float64 central differences of the original along random
directions, where the original is differentiable (its one-sided differences agree).
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import difflib
import functools
import inspect
import linecache
import sys
import textwrap
import types
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..analysis.values import replay
from ..analysis.locate import source_line
from ..analysis.values.partial_vjp import pull_ones
from ..base import syntax
from ..capture.naming import function_names
from ..capture.compat.private import config
from . import source

MAX_DEPTH = 3          # calls followed from the differentiated function to the named line
DIRECTIONS = 3         # random directions of the float64 reference
MAX_LEAVES = 8         # leaves given directions of their own, where no joint one is smooth
STILL_NONFINITE = "its gradient is not finite"
RTOL = {"float64": 1e-6, "float32": 2e-3, "float16": 3e-2, "bfloat16": 6e-2}


class Unpastable(Exception):
  """The fix's text cannot be run in place of the named line (why: the message)."""


@dataclasses.dataclass(frozen=True)
class _Link:
  """How a function reaches the next one on the way to the named line."""
  how: str         # "global" (a name in its globals) | "cell" (a closure cell) | "method"
  key: object      # the global's name, the cell's index, or (class or namespace, name):
                   # a method (or a module's global) replaced while the program runs


def pasted(fun: Callable, where: str | None, code: str, args: tuple = ()) -> Callable:
  """``fun`` with the line at ``where`` ("file:line") of the function it reaches (or a
  method of ``args``' objects) replaced by ``code`` (its last statement; defs before it
  are helpers). Raises ``Unpastable``."""
  found = source_line(where)
  if found is None:
    raise Unpastable("the fix names no line")
  base, rebind = _unwrapped(fun)
  chain = _path(base, *found, depth=0, seen=set(), extra=_held_methods(args))
  if chain is None:   # reached through a library's objects (an nnx graph, a linen apply)
    chain = _in_module(*found, base)
  if chain is None:
    raise Unpastable(f"{found[0]}:{found[1]} is in no function reached from "
                     f"{getattr(base, '__name__', 'the function')}")
  functions, links = chain
  new = _rebuilt(functions[-1], found[1], code)
  methods = []
  for parent, link in zip(reversed(functions[:-1]), reversed(links)):
    if link.how == "method":
      methods.append((*link.key, new))
      new = parent
    else:
      new = _relinked(parent, link, new)
  top = rebind(new)
  if not methods:
    return top

  @functools.wraps(top)
  def with_methods(*args, **kwargs):
    with _patched(methods):
      return top(*args, **kwargs)
  return with_methods


def _unwrapped(fun):
  """(the plain function behind ``fun``, how to put a rebuilt one back in its place)."""
  if isinstance(fun, functools.partial):
    inner, rebind = _unwrapped(fun.func)
    return inner, lambda f: functools.partial(rebind(f), *fun.args, **fun.keywords)
  if inspect.ismethod(fun):
    return fun.__func__, lambda f: types.MethodType(f, fun.__self__)
  if isinstance(fun, types.FunctionType):   # a transform's wrapper too: reached through
    return fun, lambda f: f                 # its closure, so the transform is kept
  if getattr(fun, "__wrapped__", None) is not None:   # jit and other compiled wrappers
    return _unwrapped(fun.__wrapped__)
  call = inspect.getattr_static(type(fun), "__call__", None)   # a module, a callable object
  if isinstance(call, types.FunctionType):
    return call, lambda f: types.MethodType(f, fun)
  raise Unpastable(f"{type(fun).__name__} is not a Python function")


def _in_module(file: str, line: int, base):
  """([base, the function holding the line], [how base reaches it]) where that function is
  a global of the namespace ``base`` runs in or of the module loaded from ``file`` (a
  notebook cell: ``__main__``), or a method of a class defined there; it is replaced there
  while the fixed program runs."""
  spaces = [base.__globals__] + [vars(m) for m in list(sys.modules.values())
                                 if getattr(m, "__file__", None) == file
                                 or getattr(m, "__name__", "") == "__main__"]
  for space in spaces:
    for name, value in list(space.items()):
      if isinstance(value, types.FunctionType) and _holds(value, file, line):
        return [base, value], [_Link("method", (space, name))]
      if isinstance(value, type) and value.__module__ == space.get("__name__"):
        for link, fn in _methods(value):
          if _holds(fn, file, line):
            return [base, fn], [link]
  return None


def _holds(fn, file: str, line: int) -> bool:
  code = fn.__code__
  if code.co_filename != file:
    return False
  return any(n == line for c in _codes(code) for _, _, n in c.co_lines())


def _codes(code):
  yield code
  for c in code.co_consts:
    if inspect.iscode(c):
      yield from _codes(c)


def _path(fn, file: str, line: int, depth: int, seen: set, extra=()):
  """([fn, ..., the function holding the line], the links between them), or None;
  ``extra``: more (link, function) pairs ``fn`` may call (its arguments' methods)."""
  if fn in seen or depth > MAX_DEPTH:
    return None
  seen.add(fn)
  if _holds(fn, file, line):
    return [fn], []
  for link, nxt in (*_callees(fn), *extra):
    found = _path(nxt, file, line, depth + 1, seen, extra)
    if found is not None:
      return [fn, *found[0]], [link, *found[1]]
  return None


def _callees(fn):
  """The Python functions ``fn`` can call: globals it names, closure cells, and the methods
  of the classes of objects in those (a module held in a closure); of JAX's own functions
  (a transform's wrapper), the closure alone."""
  names = {n for c in _codes(fn.__code__) for n in c.co_names}
  if function_names.inside_jax(fn.__code__.co_filename):
    names = set()   # JAX's own wrappers hold the user's function in a closure
  for name in sorted(names):
    value = fn.__globals__.get(name)
    if isinstance(value, types.FunctionType):
      yield _Link("global", name), value
    elif not isinstance(value, (types.ModuleType, type, type(None))):   # a model held globally
      yield from _methods(type(value))
  for i, cell in enumerate(fn.__closure__ or ()):
    with contextlib.suppress(ValueError):   # an empty cell
      value = cell.cell_contents
      if isinstance(value, types.FunctionType):
        yield _Link("cell", i), value
      else:
        yield from _methods(type(value))


def _methods(cls):
  for klass in cls.__mro__:
    if klass.__module__ in ("builtins",) or klass.__module__.startswith(("jax", "equinox", "flax")):
      continue
    for attr, value in vars(klass).items():
      value = inspect.unwrap(value) if callable(value) else value
      if isinstance(value, types.FunctionType):
        yield _Link("method", (klass, attr)), value


def _held_methods(args) -> list:
  """The user's methods of the objects in ``args``, in their attributes and containers (a
  model, its list of blocks, their layers), each once: any of them may call another."""
  found, todo, seen = {}, [(a, 0) for a in args], set()
  while todo:
    obj, depth = todo.pop()
    if id(obj) in seen or depth > MAX_DEPTH or isinstance(obj, (np.ndarray, jax.Array)):
      continue
    seen.add(id(obj))
    inner = (obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple))
             else getattr(obj, "__dict__", {}).values())
    todo.extend((v, depth + 1) for v in inner)
    if not isinstance(obj, (list, tuple, dict)):
      for link, fn in _methods(type(obj)):
        found.setdefault(fn, link)
  return [(link, fn) for fn, link in found.items()]


def _rebuilt(fn, line: int, code: str):
  """``fn`` recompiled from its source with ``line`` replaced by ``code``'s last statement,
  the defs before it (helpers) run beside it, in a copy of its globals."""
  if fn.__name__ == "<lambda>":
    raise Unpastable("the line is in a lambda: define it with def to paste a fix")
  try:
    lines, first = inspect.getsourcelines(fn)
  except (OSError, TypeError) as e:
    raise Unpastable(f"the source of {fn.__name__} cannot be read") from e
  text = textwrap.dedent("".join(lines))
  tree = ast.parse(text)
  at = line - first + 1
  stmt = next((s for s in ast.walk(tree) if isinstance(s, ast.stmt) and s.lineno == at
               and not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
  if stmt is None or stmt.end_lineno != at:
    raise Unpastable(f"line {line} is not one whole statement of {fn.__name__}")
  helpers, statement = _split(code)
  rows = text.splitlines(keepends=True)
  indent = syntax.indent_of(rows[at - 1])
  rows[at - 1] = textwrap.indent(statement, indent) + "\n"
  scope = dict(fn.__globals__)
  if helpers:
    source.run_defs(ast.parse(helpers), helpers, scope, "helper")
  return _defined(fn, "".join(rows), scope)


def _split(code: str) -> tuple[str, str]:
  """(the helper defs, the statement) of a fix's code; the statement must parse alone."""
  helpers, _, statement = code.rpartition("\n\n")
  head = _parses(helpers) if helpers else None
  if head and all(isinstance(s, (ast.FunctionDef, ast.Import, ast.ImportFrom)) for s in head):
    # helpers at the margin, then the statement at the line's indent (which may be the
    # helpers' own body indent: the blank line ends them)
    text = helpers + "\n\n" + textwrap.dedent(statement)
  else:
    text = textwrap.dedent(code)
  body = _parses(text)
  if body is None:
    raise Unpastable("the fix's code does not parse")
  defs = [s for s in body if isinstance(s, (ast.FunctionDef, ast.Import, ast.ImportFrom))]
  rest = [s for s in body if s not in defs]
  if not rest:
    raise Unpastable("the fix's code has no statement to put in place of the line")
  segment = lambda s: ast.get_source_segment(text, s, padded=True)
  return "\n".join(map(segment, defs)), "\n".join(segment(s).strip() for s in rest)


def _parses(text: str):
  try:
    return ast.parse(text).body
  except SyntaxError:
    return None


def _defined(fn, text: str, scope: dict):
  """The function ``text`` defines, compiled in ``scope`` with ``fn``'s closure variables
  bound as they are now (an outer function takes them as parameters)."""
  free = fn.__code__.co_freevars
  if free:
    cells = [c.cell_contents for c in fn.__closure__]
    text = (f"def __vjpviz_outer__({', '.join(free)}):\n" + textwrap.indent(text, "  ")
            + f"\n  return {fn.__name__}\n")
  tree = ast.parse(text)
  source.run_defs(tree, text, scope, "fixed")
  new = scope.pop("__vjpviz_outer__")(*cells) if free else scope[fn.__name__]
  new = inspect.unwrap(new) if not isinstance(new, types.FunctionType) else new
  if isinstance(new, types.FunctionType):
    new.__defaults__, new.__kwdefaults__ = fn.__defaults__, fn.__kwdefaults__
  return new


def _relinked(parent, link: _Link, child):
  """``parent`` made anew to call ``child`` where it called the old one."""
  globals_, closure = parent.__globals__, parent.__closure__
  if link.how == "global":
    globals_ = {**globals_, link.key: child}
  else:
    closure = tuple(types.CellType(child) if i == link.key else c for i, c in enumerate(closure))
  new = types.FunctionType(parent.__code__, globals_, parent.__name__, parent.__defaults__,
                           closure)
  new.__kwdefaults__ = parent.__kwdefaults__
  return new


@contextlib.contextmanager
def _patched(methods):
  """The classes' methods (modules' globals) replaced by the rebuilt ones, meanwhile: the
  code of the function a library wrapped (linen's compact methods, equinox's) where the
  rebuilt one needs nothing its globals lack, else the attribute."""
  with contextlib.ExitStack() as undo:
    for owner, attr, new in methods:
      space = owner if isinstance(owner, dict) else None   # a module's namespace itself
      held = space[attr] if space is not None else vars(owner)[attr]
      target = inspect.unwrap(held) if callable(held) else held
      if _swappable(target, new):
        for name in _helpers_read(target, new):   # the fix's helpers, beside the function
          undo.callback(_restore, target.__globals__, name, target.__globals__.get(name, _NONE))
          target.__globals__[name] = new.__globals__[name]
        undo.callback(setattr, target, "__code__", target.__code__)
        target.__code__ = new.__code__
      elif space is not None:
        undo.callback(space.__setitem__, attr, held)
        space[attr] = new
      else:
        undo.callback(setattr, owner, attr, held)
        setattr(owner, attr, new)
    yield


def _swappable(target, new) -> bool:
  """Whether ``new``'s code can run as ``target``'s: a function with the same closure
  variables (the globals it reads that ``target``'s lack, the fix's helpers, are put
  beside it meanwhile)."""
  return (isinstance(target, types.FunctionType)
          and target.__code__.co_freevars == new.__code__.co_freevars)


def _helpers_read(target, new) -> set[str]:
  """The globals ``new`` reads that ``target``'s lack or hold otherwise: the fix's helpers,
  and a function on the way to the line rebuilt (``kernel`` called from a method)."""
  reads = {n for c in _codes(new.__code__) for n in c.co_names}
  return {n for n in reads if n in new.__globals__
          and target.__globals__.get(n, _NONE) is not new.__globals__[n]}


_NONE = object()


def _restore(space: dict, name: str, value) -> None:
  if value is _NONE:
    space.pop(name, None)
  else:
    space[name] = value


# ------------------------------------------------------------------ written back

def file_patch(where: str | None, code: str) -> tuple[str, str]:
  """(the path, a unified diff) putting ``code`` where ``vv.nans`` verified it: its
  statement in place of the line at ``where``, at that line's indent, and its helpers
  before the top-level definition holding the line (or the line's own statement)."""
  found = source_line(where)
  if found is None:
    raise ValueError("vv.apply_fix: the diagnosis names no line to put the fix at")
  path, line = found
  text = "".join(linecache.getlines(path))
  if not text:
    raise ValueError(f"vv.apply_fix: {path} cannot be read")
  helpers, statement = _split(code)
  rows = text.splitlines(keepends=True)
  indent = syntax.indent_of(rows[line - 1])
  edits = [(line - 1, line, textwrap.indent(statement, indent) + "\n")]
  if helpers:
    top = next((n.lineno - 1 - len(n.decorator_list) for n in ast.parse(text).body
                if n.lineno <= line <= n.end_lineno), line - 1)
    edits.append((top, top, helpers + "\n\n\n"))
  new = list(rows)
  for start, stop, replacement in sorted(edits, reverse=True):
    new[start:stop] = replacement.splitlines(keepends=True)
  return path, "".join(difflib.unified_diff(rows, new, fromfile=path, tofile=path))


# --------------------------------------------------------------------------- the judge

def judge(fun, fixed, args: tuple, kwargs: dict, nums: tuple, finite=None) -> str | None:
  """Why ``fixed`` is not the program ``fun`` means at ``args`` (None: it is), by the three
  checks of the module's docstring; ``finite``: per differentiated leaf, where the original
  gradient was finite (where the loss is differentiable, if it is smooth along no direction
  through the rest)."""
  with replay.replaying():
    before, after = _run(fun, args, kwargs), _run(fixed, args, kwargs)
    changed = _forward_changed(before, after)
    if changed or not _all_finite(before):
      changed = _against_float64(_in_float64(fun, args, kwargs), after, changed)
    if changed:
      return changed
    grads = pull_ones(replay.bounded(fixed), args, nums, kwargs)
  if not _all_finite(grads):
    return STILL_NONFINITE
  grads64 = _gradient64(fixed, args, kwargs, nums)
  return _rounded_off(grads, grads64) or _against_reference(
      fun, args, kwargs, nums, grads64 or grads, finite)


def _rounded_off(grads, grads64) -> str | None:
  """Where the fixed program's gradient in its own precision is not its float64 gradient
  up to that precision's rounding (relative to the gradient's largest entry): code right
  in float64 but numerically broken where it runs."""
  pairs = [(str(g.dtype), np.asarray(g, np.float64), np.asarray(g64, np.float64)) for g, g64
           in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(grads64 or ()))
           if _inexact(g)]
  scale = max((np.max(np.abs(g64), initial=0.0) for _, _, g64 in pairs), default=0.0)
  for dtype, g, g64 in pairs:
    rtol = RTOL.get(dtype, 2e-3)
    floor = float(jnp.finfo(dtype).tiny)   # below it, the dtype holds (about) zero
    if not np.allclose(g, g64, rtol=rtol, atol=rtol * scale + floor):
      return f"its gradient in {dtype} is not its own float64 gradient up to rounding"
  return None


def _all_finite(grads) -> bool:
  return all(np.isfinite(np.asarray(g, np.float64)).all()
             for g in jax.tree_util.tree_leaves(grads) if _inexact(g))


def _gradient64(fixed, args, kwargs, nums):
  """The fixed program's gradient computed in float64 (None where it does not run so, or
  is not finite there): what its code means, without the rounding of a bfloat16 program,
  which would otherwise swamp the comparison with the reference."""
  try:
    with config.enable_x64(True), replay.replaying():
      grads = pull_ones(replay.bounded(fixed), _as64(args), nums, _as64(kwargs))
  except replay.NotJudged:
    raise
  except Exception:  # noqa: BLE001 - judged in its own precision instead
    return None
  return grads if _all_finite(grads) else None


def _run(fun, args, kwargs):
  """``fun`` run by vjpviz: bounded, its effects held back."""
  return replay.run(functools.partial(replay.bounded(fun), **kwargs), *args)


def _in_float64(fun, args, kwargs):
  """``fun``'s outputs at ``args`` computed in float64: what the program means where its
  own precision rounds a value to the edge (a sigmoid to exactly 1, and the clamp of its
  log to -100); None where it does not run so."""
  try:
    with config.enable_x64(True):
      return _run(fun, _as64(args), _as64(kwargs))
  except replay.NotJudged:
    raise
  except Exception:  # noqa: BLE001 - a program that does not run in float64 has no such reference
    return None


def _against_float64(before64, after, changed: str | None) -> str | None:
  """The forward check against the original computed in float64: it excuses a change
  where the original's own precision rounded its values off, and it judges the values
  the original lost to overflow (non-finite in its precision, finite in float64), which
  the check against it alone skips: a rewrite must keep those too."""
  if before64 is None:
    return changed
  return _forward_changed(before64, after)


def _inexact(x) -> bool:
  return jax.numpy.issubdtype(getattr(x, "dtype", np.float32), jax.numpy.inexact)


def _forward_changed(before, after) -> str | None:
  """Where ``after`` differs from ``before`` where that was finite, at the tolerance of
  the lower of their precisions."""
  if before is None:
    return "it changes the forward values"
  b, a = jax.tree_util.tree_leaves(before), jax.tree_util.tree_leaves(after)
  if len(a) != len(b):
    return "it changes the function's outputs"
  for x, y in zip(b, a):
    rtol = max(RTOL.get(str(getattr(v, "dtype", "float32")), 2e-3) for v in (x, y))
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.shape != y.shape:
      return "it changes the shape of an output"
    keep = np.isfinite(x)
    scale = np.max(np.abs(x[keep]), initial=0.0)
    if not np.allclose(y[keep], x[keep], rtol=rtol, atol=rtol * max(scale, 1e-6)):
      worst = float(np.max(np.abs(y[keep] - x[keep]), initial=0.0))
      return f"it changes the forward values where they were finite (by up to {worst:.3g})"
  return None


def _against_reference(fun, args, kwargs, nums, grads, finite) -> str | None:
  """Where ``grads`` differ from float64 central differences of ``fun`` along random
  directions (None: nowhere). Directions along which the loss is not smooth are left out;
  where all are, directions through the entries whose original gradient was finite, then
  through each leaf alone (a kink in a bias leaves its weight smooth); if none is judged,
  neither is the fix (``replay.NotJudged``)."""
  flat, tree = jax.tree_util.tree_flatten([args[i] for i in nums])
  flat_grads = [np.asarray(g, np.float64) for g in jax.tree_util.tree_leaves(grads)]
  dtype = next((str(x.dtype) for x in flat if _inexact(x)), "float32")
  rtol = RTOL.get(dtype, 2e-3)
  gnorm = np.sqrt(sum(float(np.sum(g * g)) for g in flat_grads))
  everywhere = [np.ones(np.shape(x), bool) if _inexact(x) else None for x in flat]
  alone = [[m if k == j else None for k, m in enumerate(everywhere)]
           for j in range(min(len(flat), MAX_LEAVES))]
  tiers = [[everywhere]] + ([[finite]] if finite is not None and len(finite) == len(flat)
                           else []) + [alone]
  differs = lambda ad, fd, noise: abs(ad - fd) > rtol * max(abs(fd), 1e-2 * gnorm, 1e-6) + noise
  for supports in tiers:   # each tier, where the one before judged no direction
    judged = 0
    for support in supports:
      n, wrong = _directions(fun, args, kwargs, nums, tree, flat, flat_grads, support, differs)
      if wrong:
        return wrong
      judged += n
    if judged:
      return None
  raise replay.NotJudged("the original loss is not smooth near these inputs in float64: "
                         "no reference to judge the fix's gradient against")


def _directions(fun, args, kwargs, nums, tree, flat, flat_grads, support, differs):
  """(how many random directions within ``support`` were judged, why the gradient is wrong
  along one, or None). A direction is judged where the loss is smooth along it (``_slope``);
  a gradient is wrong along it only where the differences at a quarter of the step agree
  with those at the step (no kink within it) and both differ from the gradient."""
  rng, judged = np.random.default_rng(0), 0
  at = functools.partial(_loss64, fun, args, kwargs, nums, tree, flat)
  here = at(None, 0.0)
  if here is None:
    return 0, None
  for _ in range(DIRECTIONS):
    d = [None if m is None or not _inexact(x) else rng.standard_normal(np.shape(x)) * m
         for x, m in zip(flat, support)]
    norm = np.sqrt(sum(float(np.sum(v * v)) for v in d if v is not None))
    if not norm:
      return judged, None
    d = [None if v is None else v / norm for v in d]
    ad = sum(float(np.vdot(g, v)) for g, v in zip(flat_grads, d) if v is not None)
    slope = _slope(functools.partial(at, d), *here)
    if slope is not None and differs(ad, *slope):   # a kink within the step would pollute
      finer = _slope(functools.partial(at, d), *here, scale=0.25)   # it: a quarter step
      unstable = finer is None or differs(slope[0], finer[0], slope[1] + finer[1])
      slope = None if unstable else finer
    if slope is None:
      continue
    judged += 1
    fd, noise = slope
    if differs(ad, fd, noise):
      return judged, (f"its gradient differs from central differences of the original "
                      f"({ad:.6g} against {fd:.6g} along a random direction)")
  return judged, None


def _slope(at, value: float, eps: float, scale: float = 1.0) -> tuple[float, float] | None:
  """(the derivative of ``at(h)`` at 0, its rounding error) by central differences
  (Richardson-extrapolated), at
  a step fit for the precision ``eps`` the loss was computed in (float64 where the program
  allows: one that casts to float32 itself is differenced as float32); None where it is not
  differentiable there: its one-sided differences differ by as much at half the step (a
  kink, ``|x|`` at 0) rather than half as much (curvature), or a value is not finite."""
  if eps > 1e-6:
    return None   # float16 and bfloat16: no difference in them is a reference
  h = eps ** (1 / 3) * scale
  values = [at(s) for s in (h, -h, h / 2, -h / 2)]
  if any(v is None for v in values):
    return None
  (up, _), (down, _), (up2, _), (down2, _) = values
  noise = 8 * eps * max(1.0, abs(value))
  bend, bend2 = (up - 2 * value + down) / h, (up2 - 2 * value + down2) / (h / 2)
  if abs(bend2) > 0.75 * abs(bend) + 4 * noise / h:
    return None
  return (4 * (up2 - down2) / h - (up - down) / (2 * h)) / 3, 4 * noise / h


def _loss64(fun, args, kwargs, nums, tree, flat, d, h) -> tuple[float, float] | None:
  """(the sum of ``fun``'s outputs with float64 enabled, at the differentiated inputs
  moved by ``h d``; the precision of the dtype it came out in); None where it is not finite
  or cannot be computed so."""
  moved = [x if v is None else np.asarray(x, np.float64) + h * v
           for x, v in zip(flat, d or [None] * len(flat))]
  full = [_as64(a) for a in args]
  for i, part in zip(nums, jax.tree_util.tree_unflatten(tree, [_as64(m) for m in moved])):
    full[i] = part
  try:
    with config.enable_x64(True), replay.replaying():
      out = [o for o in jax.tree_util.tree_leaves(_run(fun, full, _as64(kwargs))) if _inexact(o)]
      value = sum(float(np.sum(np.asarray(o, np.float64))) for o in out)
      eps = max((float(jnp.finfo(o.dtype).eps) for o in out), default=1.0)
  except replay.NotJudged:
    raise
  except Exception:  # noqa: BLE001 - a program that does not run in float64 has no reference
    return None
  return (value, eps) if np.isfinite(value) else None


def _as64(tree):
  return jax.tree_util.tree_map(
      lambda x: np.asarray(x, np.float64) if isinstance(x, (np.ndarray, jax.Array)) and _inexact(x)
      else x, tree)
