"""A custom_vjp made under ``jax_custom_vjp3`` on JAX 0.9 to 0.11, read as a custom_vjp.

There ``jax.custom_vjp(f)`` made while that flag is on is hijax's ``custom_vjp3``
(``custom_vjp.__new__`` builds it), never a ``custom_vjp``: its ``__call__`` reads
``self.fwd``/``self.bwd`` as custom_vjp's does, but its other fields are named
otherwise (``f``, ``static_argnums``, ``symz``). The check sites, fixes, verification
and apply read it through ``CustomVjp3``: a custom_vjp of the same function and rules,
one per object (held weakly), which applies the rules as that object does and whose
``defvjp`` redefines that object too. On JAX 0.12 the flag runs through
``custom_vjp.__call__`` itself, and ``separate_class()`` is None.
"""
from __future__ import annotations

import functools
import weakref

import jax
from ..compat.private import cd, config
from ..compat import private


@functools.cache
def separate_class() -> type | None:
  """The class ``jax.custom_vjp`` makes under ``jax_custom_vjp3`` when it is not
  ``custom_vjp`` (JAX 0.9 to 0.11); None where it is, or where the flag is absent."""
  if "jax_custom_vjp3" not in jax.config.values or not private.has("config.custom_vjp3"):
    return None
  with config.custom_vjp3(True):
    made = jax.custom_vjp(lambda x: x)
  return None if isinstance(made, cd.custom_vjp) else type(made)


class CustomVjp3(cd.custom_vjp):
  """The custom_vjp a ``custom_vjp3`` stands for (its user's object held weakly)."""

  def __call__(self, *args, **kwargs):
    """Applied as the user's object applies it: a ``custom_vjp3`` of these rules (so a
    clone with other rules, as verification makes, runs on the same path)."""
    vjp3 = separate_class()(self.fun, self.nondiff_argnums)
    vjp3.defvjp(self.fwd, self.bwd, symbolic_zeros=self.symbolic_zeros,
                optimize_remat=self.optimize_remat)
    return vjp3(*args, **kwargs)

  def defvjp(self, fwd, bwd, symbolic_zeros=False, optimize_remat=False):
    """Redefine these rules and the user's object's (an applied fix)."""
    super().defvjp(fwd, bwd, symbolic_zeros=symbolic_zeros, optimize_remat=optimize_remat)
    user = self._user()
    if user is not None:
      user.defvjp(fwd, bwd, symbolic_zeros=symbolic_zeros, optimize_remat=optimize_remat)


_views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def as_custom_vjp(rule):
  """``rule`` itself if it is a custom_vjp, else the ``CustomVjp3`` standing for it (one
  per object, redefined after the user's ``defvjp``)."""
  if isinstance(rule, cd.custom_vjp):
    return rule
  fields = vars(rule)
  rules = (fields.get("fwd"), fields.get("bwd"), fields.get("symz", False),
           fields.get("opt_remat", False))
  view = _views.get(rule)
  if view is None:
    view = object.__new__(CustomVjp3)
    cd.custom_vjp.__init__(view, rule.f, rule.static_argnums)
    view._user = weakref.ref(rule)
    _views[rule] = view
  if (view.__dict__.get("fwd"), view.__dict__.get("bwd"), view.symbolic_zeros,
      view.optimize_remat) != rules:
    cd.custom_vjp.defvjp(view, rules[0], rules[1], symbolic_zeros=rules[2],
                         optimize_remat=rules[3])
  return view


def names(value, cvjp) -> bool:
  """Whether a name bound to ``value`` in the user's code names ``cvjp``: the custom_vjp
  itself, or the user's ``custom_vjp3`` a ``CustomVjp3`` stands for."""
  user = getattr(cvjp, "_user", None)
  return value is cvjp or (user is not None and value is user())


def primal_attribute(cvjp) -> str:
  """How the user's object exposes its primal: ``.fun`` on a custom_vjp, ``.f`` on the
  ``custom_vjp3`` a ``CustomVjp3`` stands for."""
  return "f" if isinstance(cvjp, CustomVjp3) else "fun"
