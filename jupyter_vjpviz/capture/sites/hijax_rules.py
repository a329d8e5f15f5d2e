"""A hijax primitive's rules, read like a custom_vjp's: what fixes read, verify runs and
apply rebinds.

The rules are methods of the primitive's class (``vjp_fwd``, and ``vjp_bwd_retval`` or
``vjp_bwd`` pushing into accumulators), and the primal is the primitive's own
``expand``. The fixes stage runs rules in custom_vjp's convention (``fwd(*args) ->
(out, res)``, ``bwd(res, ct) -> cts``): ``placed`` runs them on the failing application
(a copy of it, for edited methods) through JAX's own ``vjp_bwd_retval_logs``, which
hands an accumulator rule value accumulators, so both kinds are judged alike. A fix is
the corrected method; applying it rebinds it on the class.
"""
from __future__ import annotations

import dataclasses
from typing import Any
from collections.abc import Callable

import jax

from ..compat.private import ad, hijax

HiPrim = hijax.HiPrim
"""The class a user's hijax primitive subclasses: ``HiPrim`` (JAX 0.11 on), before it
``VJPHiPrimitive`` (0.8 to 0.10); None where JAX has neither."""


def is_primitive(custom_rule) -> bool:
  return HiPrim is not None and isinstance(custom_rule, HiPrim)


def unwrapped(prim):
  """The primitive behind JAX's own wrappers of it (``VmapOf`` under ``jax.vmap`` holds it
  as ``.prim``); a user's class is never one of those, whatever its attributes."""
  while type(prim).__module__.startswith("jax._src.") and getattr(prim, "prim", None) is not None:
    prim = prim.prim
  return prim


def jax_rule(prim) -> str | None:
  """"custom_vjp" or "custom_jvp" for the primitive JAX makes of one under
  ``jax_custom_vjp3``/``jax_custom_jvp3`` (``CustomVJPTraced``/``CustomJVPTraced``: its
  function is ``.traced``); None for a user's primitive or none."""
  prim = unwrapped(prim)
  if not type(prim).__module__.startswith("jax._src.") or getattr(prim, "traced", None) is None:
    return None
  return "custom_jvp" if jvp_rule(prim) is not None else "custom_vjp"


def jvp_rule(prim):
  """The user's jvp of a ``CustomJVPTraced`` (``jvp_rule`` on JAX 0.12, ``jvp_fun`` on
  0.11); None for any other primitive."""
  return getattr(prim, "jvp_rule", None) or getattr(prim, "jvp_fun", None)


def rule_method(cls) -> str:
  """The method that is the user's bwd rule: ``vjp_bwd`` if they wrote one, else
  ``vjp_bwd_retval`` (which JAX's default ``vjp_bwd`` calls)."""
  return "vjp_bwd" if cls.vjp_bwd is not HiPrim.vjp_bwd else "vjp_bwd_retval"


@dataclasses.dataclass(frozen=True, eq=False)
class HijaxRules:
  """One application of a hijax primitive, as the fixes stage reads a custom_vjp."""
  prim: Any                       # the HiPrim instance JAX applied

  symbolic_zeros = False
  nondiff_argnums = ()
  with_accums = False             # ``placed`` runs an accumulator rule as JAX does, returning
  optimize_remat = False          # its cotangents, so it is judged like any other
  generic_batching = False
  seen_through = False
  primal_method = "expand"        # how a rule reaches the primal: ``self.expand``

  @property
  def cls(self) -> type:
    return type(self.prim)

  @property
  def method(self) -> str:
    return rule_method(self.cls)

  @property
  def fun(self) -> Callable:
    return self.cls.expand

  @property
  def fwd(self) -> Callable:
    return self.cls.vjp_fwd

  @property
  def bwd(self) -> Callable:
    return getattr(self.cls, self.method)

  @property
  def primal(self) -> Callable:
    """The primal at the application's arguments: the primitive's own ``expand``."""
    return self.prim.expand

  @staticmethod
  def bound(role: str) -> int:
    """Leading parameters the caller binds: ``self``, and fwd's ``nzs_in``."""
    return 2 if role == "fwd" else 1

  def placed(self, fwd: Callable, bwd: Callable) -> tuple[Callable, Callable]:
    """``fwd``/``bwd`` methods as custom_vjp rules, run on a copy of the application."""
    prim = self._edited(fwd, bwd)
    nzs = jax.tree_util.tree_unflatten(prim.in_tree, [True] * prim.in_tree.num_leaves)

    def run_fwd(*args):
      out, res, *_ = prim.vjp_fwd(nzs, *args)
      return out, res

    def run_bwd(res, ct):
      if self.method == "vjp_bwd":
        return _into_value_accums(prim, res, ct)
      if hasattr(prim, "vjp_bwd_retval_logs"):   # JAX 0.11 on: a rule may log too
        return prim.vjp_bwd_retval_logs(res, ct)[0]
      return prim.vjp_bwd_retval(res, ct)
    return run_fwd, run_bwd

  def with_rules(self, fwd: Callable, bwd: Callable) -> Edited:
    run_fwd, run_bwd = self.placed(fwd, bwd)
    return Edited(self._edited(fwd, bwd), run_fwd, run_bwd)

  def _edited(self, fwd: Callable, bwd: Callable):
    """The application itself, or a copy whose class (a subclass, same name) has the
    edited methods: the user's class is untouched."""
    changed = {name: new for name, new in (("vjp_fwd", fwd), (self.method, bwd))
               if new is not getattr(self.cls, name)}
    if not changed:
      return self.prim
    cls = self.cls
    sub = type(cls)(cls.__name__, (cls,), dict(
        changed, __module__=cls.__module__, __qualname__=cls.__qualname__))
    clone = object.__new__(sub)
    clone.__dict__.update(self.prim.__dict__)
    return clone

  def define(self, method: str, fwd: Callable, bwd: Callable, **flags) -> None:
    """Rebind the methods on the class: every later application runs them (a primitive's
    rules are its methods, whatever ``method`` a custom_vjp would be registered by)."""
    del method, flags
    for name, new in (("vjp_fwd", fwd), (self.method, bwd)):
      if new is not getattr(self.cls, name):
        setattr(self.cls, name, new)


def _into_value_accums(prim, res, ct):
  """An accumulator rule run as JAX 0.12's ``vjp_bwd_retval_logs`` runs it (older JAX
  returns nothing there, or has no such method): handed value accumulators (a Ref input's
  of its contents), their values returned."""
  accums = [ad.ValAccum(getattr(a, "inner_aval", a).to_ct_aval()) for a in prim.in_avals_flat]
  prim.vjp_bwd(res, ct, *jax.tree_util.tree_unflatten(prim.in_tree, accums))
  return jax.tree_util.tree_unflatten(prim.in_tree, [a.freeze() for a in accums])


@dataclasses.dataclass(frozen=True)
class Edited:
  """A primitive application with edited rules: callable like the primitive, with its
  rules in custom_vjp's convention (``fwd``, ``bwd``) for the oracle."""
  prim: Any
  fwd: Callable
  bwd: Callable
  symbolic_zeros = False
  nondiff_argnums = ()

  def __call__(self, *args):
    return self.prim(*args)
