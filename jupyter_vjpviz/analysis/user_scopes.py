"""Scopes from the user's own function frames, for programs without named scopes.

Most code has no ``jax.named_scope``, but every equation's source info keeps
the Python stack it was traced under. The user's frames on it (library files
skipped: JAX, flax, equinox, vjpviz) say which of their calls made it:
``loss -> layer -> attention``. Each call of a function from one call site is
an instance; calls repeated in a Python loop share a call site, so one
instance ends where the callee's own position goes backwards (the next call
starts again at its top; a loop inside the callee splits it too, harmlessly:
the pieces are alike and fold together). Instances are numbered per call site within their
enclosing scope: ``layer 30 of 48``. Only strings leave this module.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..capture.compat.private import source_info_util
from ..capture.naming import frames as capture_frames
from ..capture.naming import function_names

Frame = tuple  # (code object, lasti): where a frame was, as the traceback keeps it
Chain = tuple  # the user's frames of one equation, outermost first

_INLINE = ("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>")
"""Comprehension frames belong to the function around them."""


@dataclasses.dataclass(frozen=True)
class Scopes:
  """Per equation of one jaxpr: its user calls (``"layer 30 of 48/attention"``), the scope
  views group it by (those calls and its named scopes), and where each call was made."""
  frames: tuple[str, ...]
  scopes: tuple[str, ...]
  sites: tuple[tuple[str, str], ...]   # (scope path up to a call, "file:line" of that call)


USER, MODULE, LIBRARY, INLINE = range(4)
_kinds: dict = {}
"""id(code) -> (code, its kind): every equation's stack repeats the same few. Keyed by
identity, as hashing a code object hashes its bytecode (a 4k-equation program's
stacks hold ~10^5 frames); the code object kept beside its kind keeps its id its own."""


def chain(traceback, calls_user: bool = False) -> Chain:
  """The user's frames of a traceback, outermost first (``()`` without one), each with
  the library module it called, if any: the first library ``__call__`` below it, outside JAX
  (``nnx.Linear``, ``eqx.nn.MLP``: the library's own module path). ``calls_user``: the
  equation is itself a call of the user's function (their rule behind a library's wrapper)."""
  if traceback is None:
    return ()
  codes, lastis = traceback.raw_frames()
  kept, entered, module = [], True, None
  for k in range(len(codes) - 1, -1, -1):
    code = codes[k]
    known = _kinds.get(id(code))
    kind = known[1] if known is not None else _remember(code)
    if kind in (USER, INLINE) and module is not None:
      _wrapper(kept, module)
      module = None
    if kind == USER:
      kept.append((code, lastis[k]))
      entered = False
    elif kind == INLINE:
      entered = False
    elif kind == MODULE and not entered and kept:
      module = len(kept)
      kept.append((code, lastis[k]))
      entered = True
  if calls_user and module is not None:
    _wrapper(kept, module)
  if len(_kinds) > 100_000:   # bounded: code objects of long-gone cells go too
    _kinds.clear()
  return tuple(kept)


def _wrapper(kept: list, module: int) -> None:
  """The library ``__call__`` at ``kept[module]`` called back into the user's code: it
  wraps their function (filter_jit, filter_vmap, filter_custom_vjp) and is no module of
  the library's own, on this chain or any other (``unwrapped``)."""
  code = kept.pop(module)[0]
  _kinds[id(code)] = (code, LIBRARY)


def unwrapped(chain_: Chain) -> Chain:
  """``chain_`` without the library wrappers found since it was made: the wrapper's
  own equations (equinox's ``nondifferentiable``) come before the call that reveals it."""
  module = lambda code: _kinds.get(id(code), (None, USER))[1] != LIBRARY
  return chain_ if all(module(code) for code, _ in chain_) else tuple(
      f for f in chain_ if module(f[0]))


def _once_each(fn, items: Sequence) -> list:
  """``[fn(x) for x in items]``, once per distinct object: the chains of a loop's
  iterations are one object each (``program`` makes one per distinct traceback)."""
  done: dict = {}   # by id: ``items`` keeps every key alive
  return [done[id(x)] if id(x) in done else done.setdefault(id(x), fn(x)) for x in items]


def _remember(code) -> int:
  kind = _kind(code)
  _kinds[id(code)] = (code, kind)
  return kind


def _kind(code) -> int:
  if not capture_frames.library_file(code.co_filename):
    return INLINE if code.co_name in _INLINE else USER
  if code.co_name == "__call__" and not function_names.inside_jax(code.co_filename):
    return MODULE   # not jnp's ufuncs
  return LIBRARY


def of_level(chains: Sequence[Chain], names: Sequence[str]) -> Scopes:
  """Scopes for the equations of one jaxpr, in program order, from their chains and
  named scopes.

  Calls every equation shares (the differentiated function's own call) are no
  scope; below them, each call is one path component. Names lead where each
  outermost call lies inside one outermost name (the user wrapped their calls in
  ``jax.named_scope``, a library names its modules): then each named scope holds
  its own calls, numbered within it (``layer30/mlp/layer_norm``, not ``layer_norm
  61 of 96`` counted over the whole program). Else the names were made inside the
  calls (equinox's ``eqx.nn.Linear``, jnp.einsum's, the user's own scopes inside a
  layer function) and sit under them.
  """
  chains = _once_each(unwrapped, chains)
  if all(c is chains[0] for c in chains):   # one call made them all (a jnp helper's body)
    return Scopes(("",) * len(chains), tuple(names), ())
  calls = _once_each(_calls, chains)
  depth = len(_common_prefix([c for c in calls if c]))
  frames, sites = _frame_paths({"": list(range(len(calls)))}, calls, chains, depth)
  if not _names_lead(names, frames):
    return Scopes(frames, _joined(frames, names), sites)
  within: dict[str, list[int]] = {}
  for m, name in enumerate(names):
    within.setdefault(name, []).append(m)
  frames, sites = _frame_paths(within, calls, chains, depth)
  return Scopes(frames, _joined(names, frames), sites)


def _names_lead(names: Sequence[str], frames: Sequence[str]) -> bool:
  if not any(names):
    return False
  spans: dict[str, set] = {}
  for name, frame in zip(names, frames):
    if frame:
      spans.setdefault(frame.split("/", 1)[0], set()).add(name.split("/", 1)[0])
  return all(len(outer) == 1 for outer in spans.values())


def _joined(outer: Sequence[str], inner: Sequence[str]) -> tuple[str, ...]:
  if not any(inner):
    return tuple(outer)
  return tuple("/".join(p for p in pair if p) for pair in zip(outer, inner))


def _frame_paths(within: dict[str, list[int]], calls, chains,
                 depth: int) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
  """Each equation's path of calls, numbered within its enclosing scope in ``within``
  (scope -> its equations), and each call's site keyed by that scope and the path."""
  paths: list[list[str]] = [[] for _ in calls]
  sites: dict[str, str] = {}
  for scope, members in within.items():
    _assign(members, calls, chains, depth, paths, sites, scope)
  return tuple("/".join(p) for p in paths), tuple(sites.items())


def _calls(chain_: Chain) -> tuple:
  """Each frame as a call, outermost first: (callee, caller, caller's position), the code
  objects by identity (hashing one hashes its bytecode; ``chain_`` keeps them alive)."""
  return tuple((id(code), id(chain_[k - 1][0]), chain_[k - 1][1]) if k else (id(code), None, None)
               for k, (code, _) in enumerate(chain_))


def _common_prefix(calls: list[tuple]) -> tuple:
  if not calls:
    return ()
  first, n = calls[0], min(len(c) for c in calls)
  for k in range(n):
    if any(c[k] != first[k] for c in calls):
      return first[:k]
  return first[:n]


def _assign(members: list[int], calls, chains, depth: int, paths, sites, scope: str) -> None:
  """Name the calls at ``depth`` among ``members`` (one enclosing scope), then recurse."""
  instances: dict = {}     # call -> [member lists], one per instance, in program order
  previous_call, previous_position = None, None
  for m in members:
    call = calls[m][depth] if len(calls[m]) > depth else None
    if call is None:
      previous_call = None
      continue
    position = chains[m][depth][1]
    runs = instances.setdefault(call, [])
    if call != previous_call or position < previous_position:
      runs.append([])
    runs[-1].append(m)
    previous_call, previous_position = call, position
  named: dict[str, list] = {}   # instances numbered per name: two call sites of one function
  for run in sorted((run for runs in instances.values() for run in runs), key=lambda r: r[0]):
    named.setdefault(_name(chains[run[0]][depth][0]), []).append(run)
  for name, runs in named.items():
    for k, run in enumerate(runs):
      part = f"{name} {k} of {len(runs)}" if len(runs) > 1 else name
      for m in run:
        paths[m].append(part)
      if depth:   # the caller's frame: where this call was made
        sites.setdefault("/".join(p for p in (scope, *paths[run[0]]) if p),
                         _where(*chains[run[0]][depth - 1]))
      _assign(run, calls, chains, depth + 1, paths, sites, scope)


def _name(code) -> str:
  """``Block.__call__``, ``layer``: the qualified name without its enclosing functions."""
  return code.co_qualname.rsplit("<locals>.", 1)[-1]


def _where(code, lasti: int) -> str:
  frame = source_info_util.raw_frame_to_frame(code, lasti)
  return f"{frame.file_name}:{frame.start_line}"
