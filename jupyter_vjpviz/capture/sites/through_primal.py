"""Custom rules set aside: a custom_vjp differentiated through its own primal.

A fix is judged against the primal's autodiff, which means running the primal on
its own at random inputs. Some primals run only inside their library's call:
flax nnx's ``custom_vjp`` hands JAX a function that reads a context its
``__call__`` sets up. Their fwd rule runs on its own, and its primal output is the
primal's (it calls the primal, as such rules do); differentiating that output
with the failing rule set aside, so that JAX differentiates the primal inside
the library's call as it runs, gives the reference (``fixes.rank``).

While ``differentiated_through(matches)`` is active, JAX's ``custom_vjp.__call__``
reads, for each custom_vjp ``matches`` accepts, a fwd that takes the primal's VJP
where it runs and a bwd that applies it (``check_sites.RuleAttribute``).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable

import jax
from ...base.trees import substituted

matching: list[Callable] = []
"""The predicates of the active ``differentiated_through`` blocks (the hook reads this
inline on every custom_vjp call: empty but while a fix is judged)."""


@contextlib.contextmanager
def differentiated_through(matches: Callable) -> None:
  """Set aside the rules of every custom_vjp ``matches(custom_vjp)`` accepts meanwhile."""
  matching.append(matches)
  try:
    yield
  finally:
    matching.remove(matches)


def rule(custom_vjp, name: str) -> Callable | None:
  """The ``name`` ("fwd"/"bwd") JAX must run in place of ``custom_vjp``'s, or None to
  run its own (nothing set aside, or a symbolic-zeros rule, whose fwd takes wrappers)."""
  if name not in ("fwd", "bwd") or getattr(custom_vjp, "symbolic_zeros", False):
    return None
  if not any(m(custom_vjp) for m in matching):
    return None
  return _fwd(custom_vjp.fun, tuple(custom_vjp.nondiff_argnums)) if name == "fwd" else _bwd


def _fwd(fun: Callable, nondiff: tuple) -> Callable:
  def fwd(*args):
    positions = [i for i in range(len(args)) if i not in nondiff]

    def of_differentiable(*values):
      full = substituted(args, positions, values)
      return fun(*full)
    return jax.vjp(of_differentiable, *[args[i] for i in positions])   # (out, the VJP as residuals)
  return fwd


def _bwd(*args):
  *_, pullback, g = args      # nondiff arguments first, as JAX passes them
  return pullback(g)
