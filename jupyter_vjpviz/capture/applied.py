"""The values of the latest custom rule applications, held weakly.

The checks vjpviz runs after an error start where the user's program is known to
run: the failing application's own arguments (``analysis.values.oracle``). They may be
used only while that call is still on the stack, and none may outlive it (a
diagnosis keeps avals only), so each is held by a weak reference: once the user's
call lets go of an argument, it is gone here too. Traced applications (under
``jax.jit``) have no values and are not held; nor are arrays that span processes (what
vjpviz runs after an error stays in the process that failed: ``base.hosts``).

Fixes are judged after the user's exception is raised (the exception comes first), when
the call has let go: small applications are then kept as host copies (``detach``), no
device buffer among them, until that judging is over (``forget``). A function passed as a
nondiff argument (the ``f`` of a fixed point, made inside the differentiated function) is
kept with them where it reaches no array: the site holds it weakly, and the oracle must
call it after the raise.
"""
from __future__ import annotations

import collections
import threading
import weakref

import jax
import numpy as np
from ..base import hosts
from .compat.private import core
from .records import Strong
from .sites import retained_rules

KEPT = 8
"""Applications remembered per thread, the latest first out of date."""


class _Applied(threading.local):
  def __init__(self):
    self.values: collections.OrderedDict = collections.OrderedDict()


_applied = _Applied()


def remember(site, args) -> None:
  """``args`` of the application at ``site``: a weak reference per array leaf, None for
  the other leaves (the site keeps what a check needs of them)."""
  if any(isinstance(a, core.Tracer) for a in args):
    return
  leaves, tree = jax.tree_util.tree_flatten(args)
  if any(isinstance(l, core.Tracer) or hosts.spans_processes(l) for l in leaves):
    return   # no values; or values another process shares: a check on them would be a collective
  refs = [_weak(l) for l in leaves]
  values = _applied.values
  values.pop(site, None)
  values[site] = (tree, refs)
  while len(values) > KEPT:
    values.popitem(last=False)


def _weak(leaf):
  """A weak reference to an array leaf or a function, None for the rest."""
  if isinstance(leaf, (jax.Array, np.ndarray)) or (callable(leaf) and not isinstance(leaf, type)):
    try:
      return weakref.ref(leaf)
    except TypeError:   # a builtin: it outlives the call anyway
      return None
  return None


def forget() -> None:
  """The failing call has returned: its values are no longer ours to use."""
  _applied.values.clear()


def detach(max_bytes: int) -> None:
  """The failing call is about to let go: each application whose arrays take at most
  ``max_bytes`` is kept as host copies, for the checks that run after it; the rest are
  forgotten."""
  for site, (tree, refs) in list(_applied.values.items()):
    leaves = [r() if r is not None else None for r in refs]
    arrays = [l for l in leaves if isinstance(l, (jax.Array, np.ndarray))]
    if any(r is not None and l is None for r, l in zip(refs, leaves)) or \
        sum(a.size * a.dtype.itemsize for a in arrays) > max_bytes:
      del _applied.values[site]
      continue
    _applied.values[site] = (tree, [_after_call(l, r) for l, r in zip(leaves, refs)])


def _after_call(leaf, ref):
  """What stands for ``leaf`` once the call has let go: a host copy of an array, a function
  itself where it reaches no array (no device buffer may outlive the call through us),
  else its weak reference still."""
  if leaf is None:
    return None
  if isinstance(leaf, (jax.Array, np.ndarray)):
    return _Held(leaf)
  return ref if retained_rules.holds_arrays(leaf) else Strong(leaf)


class _Held:
  """A host copy in place of a weak reference: called, it gives an array of the kind the
  user's was (a user's pytree may be built from it, and may accept only that kind)."""
  __slots__ = ("value", "on_device")

  def __init__(self, array):
    self.value, self.on_device = np.array(array), isinstance(array, jax.Array)

  def __call__(self):
    return jax.numpy.asarray(self.value) if self.on_device else self.value


def values(site) -> tuple | None:
  """(tree, leaves) of the latest application at ``site`` while all its arrays are alive:
  an array per array leaf, None for the rest; None when it is not known or gone."""
  found = _applied.values.get(site)
  if found is None:
    return None
  tree, refs = found
  leaves = [r() if r is not None else None for r in refs]
  if any(r is not None and l is None for r, l in zip(refs, leaves)):
    return None
  return tree, leaves
