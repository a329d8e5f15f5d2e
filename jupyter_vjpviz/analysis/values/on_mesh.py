"""A rule that ran inside ``shard_map`` checked inside a shard_map again, where it ran.

Its inputs and cotangents are typed by the mesh (``{V:dp}``) and it may call
collectives over the mesh's axis names: outside a shard_map a fix of it neither
runs nor type-checks as it would there, so its fixes are checked on an equivalent
mesh: the axes the failing application recorded (``capture.mesh_context``: names,
sizes, which were manual) over this process's first devices of the platform it ran
on. Each differentiable input is laid out so that inside it has its recorded type:
a leading axis of one block per device of the axes it varies over, sharded over
them and replicated over the others; each primal output (and its cotangent) comes
back the same way by the axes it varies over. JAX's own varying-axes checks are on
(``check_vma``), so a fix that would not type-check in the user's program does not
here either, and the primal's autodiff there is the reference of its values.

Nothing runs here that the oracle would not run: its draws, deadline, loop caps and
held-back effects (``analysis.values.replay``) apply to the global functions as they are.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax

from ...capture.compat import changed_signatures
from ...capture.compat.private import core
from ...capture.mesh_context import MeshContext
from ...base.trees import substituted
from ...capture.records import RuleSite
from . import oracle, replay


@dataclasses.dataclass(frozen=True)
class Placement:
  """An equivalent mesh for a site and the specs that give its values their recorded types."""
  context: MeshContext
  mesh: jax.sharding.Mesh
  in_specs: tuple      # per differentiable input leaf
  out_specs: tuple     # per primal output leaf

  @property
  def where(self) -> str:
    return f"inside shard_map over an equivalent {self.context.describe()}, as the program ran"

  def wrap(self, fn: Callable, positions: list[int]) -> Callable:
    """``fn``, a per-device function of a call's arguments, as a function of their
    global values: the arrays at ``positions`` laid out on the mesh, the other
    arguments as given (closed over: the same on every device)."""
    def on_mesh(*args):
      leaves, tree = jax.tree_util.tree_flatten([args[i] for i in positions])
      out_tree = []

      def body(*blocks):
        full = substituted(args, positions, jax.tree_util.tree_unflatten(tree, [b[0] for b in blocks]))
        outs, t = jax.tree_util.tree_flatten(fn(*full))
        out_tree.append(t)
        return tuple(o[None] for o in outs)
      flat = self._shard_map(body, self.in_specs, self.out_specs)(*leaves)
      return jax.tree_util.tree_unflatten(out_tree[-1], list(flat))
    return on_mesh

  def eval_shape(self, run: Callable, site: RuleSite):
    """``run(*differentiable arguments)`` traced on the mesh at the site's per-device types
    (no FLOPs); what it returns, as ShapeDtypeStructs of its per-device types."""
    found = []

    def body(*blocks):
      local = jax.tree_util.tree_unflatten(site.in_tree, [b[0] for b in blocks])
      found.append(jax.tree_util.tree_map(
          lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), run(*local)))
      return ()
    jax.eval_shape(self._shard_map(body, self.in_specs, ()), *_global_structs(site, self))
    return found[-1]

  def _shard_map(self, body, in_specs, out_specs):
    return jax.shard_map(body, mesh=self.mesh, in_specs=tuple(in_specs), out_specs=out_specs,
                         axis_names=frozenset(self.context.manual), check_vma=True)


def placement(site: RuleSite) -> Placement | None:
  """Where ``site``'s fixes are checked: None for an application outside any shard_map;
  ``replay.NotJudged`` where this process lacks the devices of its mesh."""
  context = getattr(site, "mesh", None)
  if context is None:
    return None
  mesh = _mesh(context.axis_names, context.axis_sizes, context.platform)
  spec = lambda axes: jax.sharding.PartitionSpec(context.ordered(axes) or None)
  return Placement(context, mesh,
                   tuple(spec(changed_signatures.varying_axes(a)) for a in site.in_avals),
                   tuple(spec(axes) for axes in context.out_varying))


def there(site: RuleSite) -> Placement | None:
  """``site``'s placement, or None where it ran outside any shard_map or no equivalent mesh
  can be made here (then it is checked outside one, as far as that goes)."""
  try:
    return placement(site)
  except replay.NotJudged:
    return None


def why_not(site: RuleSite) -> str | None:
  """Why no equivalent mesh can be made for a site that ran in one; else None."""
  try:
    placement(site)
  except replay.NotJudged as e:
    return str(e).removeprefix("not judged: ")
  return None


def runs_there(site: RuleSite) -> bool:
  """Whether ``site``'s fixes are checked on its mesh (it ran in one, and one can be made)."""
  return there(site) is not None


@functools.lru_cache(maxsize=8)
def _mesh(names: tuple, sizes: tuple, platform: str | None) -> jax.sharding.Mesh:
  try:
    devices = jax.devices(platform) if platform else jax.devices()
  except RuntimeError:   # no such backend in this process
    devices = []
  n = 1
  for s in sizes:
    n *= s
  if len(devices) < n:
    raise replay.NotJudged(f"not judged: the program ran on a mesh of {n} {platform or ''} "
                           f"devices; this process has {len(devices)}".replace("  ", " "))
  auto = getattr(jax.sharding, "AxisType", None)
  types = {} if auto is None else {"axis_types": (auto.Auto,) * len(names)}
  return jax.make_mesh(sizes, names, devices=devices[:n], **types)


def global_site(site: RuleSite, placed: Placement) -> RuleSite:
  """``site`` as the oracle sees it on the mesh: each input leaf its global array (a
  leading axis of one block per device it varies over), its own type no longer varying."""
  avals = tuple(core.ShapedArray((placed.context.sizes(changed_signatures.varying_axes(a)),
                                  *a.shape), a.dtype, weak_type=a.weak_type)
                for a in site.in_avals)
  return dataclasses.replace(site, in_avals=avals, mesh=None)


def _global_structs(site: RuleSite, placed: Placement) -> list:
  return [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in global_site(site, placed).in_avals]


def abstract_args(site: RuleSite, placed: Placement) -> tuple:
  """The differentiable arguments' global ShapeDtypeStructs, as the call's pytrees."""
  return tuple(jax.tree_util.tree_unflatten(site.in_tree, _global_structs(site, placed)))


def differentiable(site: RuleSite) -> list[int]:
  """Positions of the differentiable arguments among all the call's arguments."""
  n = len(site.in_tree.children()) + len(site.nondiff)
  nondiff = {i for i, _ in site.nondiff}
  return [i for i in range(n) if i not in nondiff]


@dataclasses.dataclass
class MeshOracle(oracle.Oracle):
  """The oracle of a site that ran in a mesh: draws of the global values, the primal's
  autodiff and each candidate (through JAX's own custom_vjp, its type checks on) run
  inside a shard_map over the equivalent mesh."""
  placed: Placement | None = None
  local: RuleSite | None = None       # the per-device site
  primal: Callable | None = None      # the per-device primal

  @classmethod
  def on(cls, site: RuleSite, fun: Callable, by_fwd: bool = False) -> MeshOracle:
    placed = placement(site)
    found = cls.of(global_site(site, placed), placed.wrap(fun, differentiable(site)),
                   by_fwd=by_fwd)
    found.placed, found.local, found.primal = placed, site, fun
    found.assumes = "; ".join(filter(None, [found.assumes, placed.where]))
    return found

  def rule(self, fwd, bwd, symbolic_zeros, perturbed) -> Callable:
    """The candidate's cotangents on the mesh: ``fwd``/``bwd`` as a custom_vjp of the primal
    differentiated inside the shard_map, where JAX checks their types (varying axes too)."""
    nondiff = tuple(sorted(i for i, _ in self.local.nondiff))
    rule = jax.custom_vjp(self.primal, nondiff_argnums=nondiff)
    rule.defvjp(fwd, bwd, symbolic_zeros=symbolic_zeros)
    run = self.placed.wrap(rule, differentiable(self.local))
    return lambda a: oracle.pullback(self.site, run, *a)

  def verdict(self, *args, **kwargs) -> oracle.Verdict:
    return dataclasses.replace(super().verdict(*args, **kwargs), where=self.placed.where)


def oracle_for(site: RuleSite, fun: Callable, by_fwd: bool = False) -> oracle.Oracle:
  """The judge of ``site``'s candidates: on its mesh where it ran in one."""
  if getattr(site, "mesh", None) is not None:
    return MeshOracle.on(site, fun, by_fwd=by_fwd)
  return oracle.Oracle.of(site, fun, by_fwd=by_fwd)
