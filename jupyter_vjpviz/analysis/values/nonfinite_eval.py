"""Running a forward program equation by equation, and its pieces' pullbacks.

The non-finite localiser re-runs parts of the user's program (one level of a
jaxpr, one iteration of a scan body) with its own values; the fixes stage
re-runs the whole gradient with one equation replaced. Both go through
``evaluate``: JAX's ``eval_jaxpr`` with a ``Patch`` that may reach into nested
bodies (a jit, remat or custom rule's primal is inlined, a scan or cond is
rebuilt around its patched body), so a fix is judged by the gradient JAX
itself computes for the rewritten program. Every equation goes through ``replay.bind``:
as written for the user's own run, rewritten (no repeated effects, loops capped) for
vjpviz's runs.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ...base import hosts
from ...capture.compat.private import core, pe
from .partial_vjp import vjp_wrt
from ..program import consts, rule_call, scan_groups, sub_jaxprs
from .replay import bind   # as written, or as vjpviz's own run (``replay.replaying``)

CALLS = frozenset({"jit", "pjit", "closed_call", "core_call", "checkpoint", "remat",
                   "remat2"})
"""Equations whose body runs once, on the equation's own operands."""


@dataclasses.dataclass(frozen=True)
class Patch:
  """Replace the equation at ``path`` ((equation index, body index) per level, outermost
  first) by ``fn(eqn, operands, producer)``, which returns its outputs as a list;
  ``producer(var)`` is (the equation that made ``var`` at that level, its operands)."""
  path: tuple[tuple[int, int], ...]
  fn: Callable


def run_eqn(eqn, args) -> list:
  """The equation applied to ``args``; a jit or remat inlined (eagerly: op by op, nothing
  compiled for one use; differentiated: JAX's own rules for each of its equations)."""
  if eqn.primitive.name in CALLS:
    return evaluate(next(sub_jaxprs(eqn)), args)
  return bind(eqn, args)


def evaluate(jaxpr: core.Jaxpr, args, patch: Patch | None = None) -> list:
  """``jaxpr``'s outputs at ``args`` (its constants are its own), ``patch`` applied."""
  env = dict(zip(jaxpr.constvars, consts(jaxpr)))
  env.update(zip(jaxpr.invars, args))
  made = {}
  read = lambda v: v.val if isinstance(v, core.Literal) else env[v]
  for i, eqn in enumerate(jaxpr.eqns):
    ins = [read(v) for v in eqn.invars]
    if patch is not None and patch.path[0][0] == i:
      outs = patched(eqn, ins, patch, lambda v: made.get(v))
    else:
      outs = run_eqn(eqn, ins)
    for v, x in zip(eqn.outvars, outs):
      env[v] = x
      made[v] = (eqn, ins)
  return [read(v) for v in jaxpr.outvars]


def patched(eqn, ins, patch: Patch, producer) -> list:
  """The outputs of ``eqn``, the first equation on ``patch``'s path, with the patch applied
  there or inside its body."""
  (_, body), rest = patch.path[0], Patch(patch.path[1:], patch.fn)
  if not rest.path:
    return list(patch.fn(eqn, ins, producer))
  name, subs = eqn.primitive.name, list(sub_jaxprs(eqn))
  if name in CALLS or rule_call(eqn):
    return evaluate(subs[0], ins, rest)     # inlined: the same values, differentiated by JAX
  if name == "scan":
    return _scan(eqn, subs[0], ins, rest)
  if name == "cond":
    branches = [lambda *a, j=j, b=b: evaluate(b, a, rest if j == body else None)
                for j, b in enumerate(subs)]
    return list(jax.lax.switch(ins[0], branches, *ins[1:]))
  if name == "shard_map":
    p = eqn.params
    return list(jax.shard_map(lambda *a: tuple(evaluate(subs[0], a, rest)), mesh=p["mesh"],
                              in_specs=p["in_specs"], out_specs=p["out_specs"],
                              check_vma=p["check_vma"])(*ins))
  raise NotImplementedError(f"cannot rewrite inside {name}")


def _scan(eqn, body: core.Jaxpr, ins, patch: Patch | None) -> list:
  n_consts, n_carry, _ = scan_groups(eqn)
  consts, carry, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]

  def step(c, x):
    outs = evaluate(body, [*consts, *c, *x], patch)
    return outs[:n_carry], outs[n_carry:]
  c, ys = jax.lax.scan(step, carry, xs, length=eqn.params["length"],
                       reverse=eqn.params["reverse"])
  return [*c, *ys]


def split(x, spec, mesh) -> jax.Array:
  """A shard_map operand as its shards' local blocks stacked, one per device of ``mesh``
  (its axes' coordinates in order): what the body sees on each."""
  x = jnp.asarray(x)
  sizes = [mesh.shape[a] for a in mesh.axis_names]
  entries = (*spec, *[None] * (x.ndim - len(spec)))
  blocks = []
  for coords in itertools.product(*map(range, sizes)):
    at = dict(zip(mesh.axis_names, coords))
    index = []
    for d, entry in enumerate(entries):
      axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
      k, m = 0, 1
      for a in axes:
        k, m = k * mesh.shape[a] + at[a], m * mesh.shape[a]
      size = x.shape[d] // m
      index.append(slice(k * size, (k + 1) * size))
    blocks.append(x[tuple(index)])
  return jnp.stack(blocks)


def shard_bind(mesh, eqn, ins) -> list:
  """``eqn`` of a shard_map body applied on every shard at once, its values stacked as
  ``split`` makes them: vmapped, and its collectives over the mesh's axes done on the
  stack, with their own transposes (``_SUMS``). Another collective raises: the body is
  then not searched."""
  n = math.prod(mesh.shape.values())
  stacked = [jnp.ndim(x) == len(v.aval.shape) + 1 for v, x in zip(eqn.invars, ins)]
  if eqn.primitive.name in _SUMS:
    over = tuple(mesh.axis_names.index(a) for a in eqn.params["axes"])
    op = _collective(lambda x: _psum(mesh, x, over), *_SUMS[eqn.primitive.name])
    return [op(x if s else jnp.broadcast_to(x, (n, *jnp.shape(x)))) for s, x in zip(stacked, ins)]
  return list(jax.vmap(lambda *a: bind(eqn, list(a)), in_axes=[0 if s else None for s in stacked],
                       axis_size=n)(*ins))


_SUMS = {"psum": (True, True), "psum_invariant": (True, False), "pvary": (False, True)}
"""Whether each collective sums over the shards forwards, and in its transpose (a
replicated value made varying is summed back: pvary's transpose is psum_invariant)."""


def _psum(mesh, x, over: tuple) -> jax.Array:
  grid = x.reshape(*[mesh.shape[a] for a in mesh.axis_names], *x.shape[1:])
  summed = jnp.broadcast_to(grid.sum(axis=over, keepdims=True), grid.shape)
  return summed.reshape(x.shape)


def _collective(total, forwards: bool, backwards: bool):
  @jax.custom_vjp
  def op(x):
    return total(x) if forwards else x
  op.defvjp(lambda x: (op(x), None), lambda _, g: (total(g) if backwards else g,))
  return op


def inexact(x) -> bool:
  """Whether a variable or array carries a cotangent (floating or complex)."""
  aval = x.aval if isinstance(x, (core.Var, core.Literal)) else core.typeof(x)
  return jnp.issubdtype(getattr(aval, "dtype", jnp.int32), jnp.inexact)


def pullback(fn: Callable, args: list, wrt: list[int], outs: list[int], cts: list) -> list:
  """The cotangents of ``args[j]`` for ``j`` in ``wrt``, of ``fn(args)``'s outputs ``outs``
  receiving ``cts`` (None: zero)."""
  primal, pull = vjp_wrt(lambda *full: [fn(list(full))[j] for j in outs], args, wrt)
  return list(pull([jnp.zeros_like(p) if c is None else c for p, c in zip(primal, cts)]))


def eqn_pullback(eqn, ins: list, wrt: list[int], fo: list[int], cts: list) -> list:
  """``pullback`` of one equation (``fo``: its outputs receiving ``cts``).

  Its VJP is traced once per primitive, params and operand types (the same layer's
  equations in every layer) and then evaluated eagerly: op by op through JAX's
  compiled primitives, which the forward run and the other equations share, where
  compiling each equation's pullback costs XLA tens of milliseconds per kind and tracing
  it per use milliseconds per equation. An equation with a body, or whose params do not
  hash, is traced every time (its body inlined: nothing compiled for one use)."""
  key = _signature(eqn, ins, wrt, fo, cts)
  if key is None:
    return pullback(lambda full: run_eqn(eqn, full), ins, wrt, fo, cts)
  jaxpr, consts = _PULLBACKS.pop(key, None) or _trace(eqn, ins, wrt, fo, cts)
  if not consts:
    _PULLBACKS[key] = jaxpr, consts      # kept only if it holds no array
    while len(_PULLBACKS) > _CACHED:
      _PULLBACKS.popitem(last=False)
  return core.eval_jaxpr(jaxpr, consts, *ins, *cts)


def hashable_params(eqn) -> tuple | None:
  """The equation's params as a key (a body by identity), or None where one does not hash."""
  params = tuple(sorted(eqn.params.items()))
  try:
    hash(params)
  except TypeError:
    return None
  return params


_PULLBACKS: collections.OrderedDict = collections.OrderedDict()
_CACHED = 1024     # traced pullbacks kept, least recently used dropped


def _trace(eqn, ins, wrt, fo, cts) -> tuple:
  """The equation's pullback as a jaxpr of its operands and cotangents, the primal
  outputs the VJP also computes dropped."""
  closed = jax.make_jaxpr(lambda *a: pullback(lambda full: bind(eqn, full), list(a[:len(ins)]),
                                              wrt, fo, list(a[len(ins):])))(*ins, *cts)
  jaxpr, _ = pe.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars), True)
  return jaxpr, list(closed.consts)


def _signature(eqn, ins, wrt, fo, cts):
  params = hashable_params(eqn)
  if params is None or next(sub_jaxprs(eqn), None) is not None:
    return None
  types = tuple((core.typeof(x).shape, core.typeof(x).dtype, core.typeof(x).weak_type,
                 getattr(core.typeof(x), "sharding", None)) for x in (*ins, *cts))
  mesh = getattr(jax.sharding, "get_abstract_mesh", lambda: None)()   # a set_mesh context's
  return eqn.primitive, params, types, tuple(wrt), tuple(fo), mesh


def flow(x) -> np.ndarray:
  """A cotangent's NaN count, Inf count, sum of squares and max |value| (its finite
  elements') as one float64[4], on the host as ``jax_debug_nans`` checks each output:
  a compiled reduction would be compiled again for every shape."""
  x = hosts.host(x)
  x = np.real(x) if np.iscomplexobj(x) else x
  ok, nan = np.isfinite(x), np.isnan(x).sum()
  finite = np.where(ok, x, 0).astype(np.float64)
  return np.array([nan, (~ok).sum() - nan, (finite ** 2).sum(), np.abs(finite).max(initial=0.0)])
