"""The user's code run on vjpviz's own account, within bounds.

Every check that executes the user's functions after an error (the oracle's draws,
fix verification, gradient checks) is vjpviz acting on its own, not the user. It
goes through here, which keeps four promises:

- a deadline per failing call (``account``): past it nothing more starts, and what
  was not reached says "not judged: time budget". XLA computations cannot be
  interrupted, so each is bounded by construction (below) and the deadline is checked
  between them; nothing runs on a thread of ours after the budget;
- loops capped: the program run is the user's jaxpr rewritten (``rewrite``) so that
  each while loop (and a fori_loop with dynamic bounds, which is one) stops after
  ``LOOP_CAP`` iterations; a run that hit the cap is reported (``LoopCapped``), and
  its result is not used;
- no repeated side effects: equations with effects whose results nothing uses
  (``jax.debug.print``, ``jax.debug.callback``, an ``io_callback`` that logs) are
  dropped; one whose result is used (an ordered or io effect that feeds the
  program) is not run, and the check is not judged (``NotJudged``);
  ``pure_callback`` has no effect and runs; Python printing while the user's code
  is traced again is captured;
- what the checks draw stays small: see ``analysis.oracle`` (``shrunk``).

The NaN search, the gradient report's measured pass and the value overlay run the
user's program equation by equation rather than as one jaxpr: under ``replaying`` each
equation they bind (``bind``) is rewritten the same way, so their graph keeps the
program's own equations. At the values the user's call had, a loop ends where the
user's did (its cap is what the user's run needed): there loops run uncapped
(``replaying(capped=False)``), and the deadline bounds what runs between them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import threading
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core

from ..capture.compat import changed_signatures

BUDGET = float(os.environ.get("VJPVIZ_BUDGET") or 2.0)
"""Seconds of extra wall time vjpviz may spend per failing call (``vjpviz.install(budget=)``,
``VJPVIZ_BUDGET`` for test harnesses and slow machines, where a verdict must not depend on
the load): once before the user's exception (the diagnosis), once after it (judging fixes)."""

LOOP_CAP = 500
"""Iterations after which vjpviz stops a while loop of the user's it runs itself."""

TIME_BUDGET = "not judged: time budget"


class NotJudged(Exception):
  """A run vjpviz would not (or could no longer) do; the message says why, as a verdict."""


class LoopCapped(NotJudged):
  """A while loop of the user's ran past ``LOOP_CAP`` iterations where vjpviz ran it."""


@dataclasses.dataclass
class _Account:
  start: float
  deadline: float

  def share(self, fraction: float) -> float:
    """The time by which ``fraction`` of this account is spent."""
    return self.start + fraction * (self.deadline - self.start)


_local = threading.local()      # the open account; whether replaying; loops left uncapped
_capped = [0]                  # while loops that hit their cap (counted by XLA's host thread)
_capped_lock = threading.Lock()


def set_budget(seconds: float) -> None:
  """Seconds vjpviz may spend after each failing call (0: it runs none of the user's code)."""
  global BUDGET
  BUDGET = max(0.0, float(seconds))


@contextlib.contextmanager
def account(seconds: float | None = None):
  """The deadline of one failing call's analysis; nested, the outer one stands."""
  if getattr(_local, "account", None) is not None:
    yield _local.account
    return
  now = time.monotonic()
  _local.account = _Account(now, now + (BUDGET if seconds is None else seconds))
  try:
    yield _local.account
  finally:
    _local.account = None


def current() -> _Account:
  """The open account, or a fresh one of ``BUDGET`` seconds from now when none is open."""
  now = time.monotonic()
  return getattr(_local, "account", None) or _Account(now, now + BUDGET)


def expired() -> bool:
  open_ = getattr(_local, "account", None)
  return open_ is not None and time.monotonic() >= open_.deadline


def check() -> None:
  """Raise ``NotJudged`` once the deadline of the current failing call has passed."""
  if expired():
    raise NotJudged(TIME_BUDGET)


def run(fn: Callable, *args):
  """``fn(*args)`` as one bounded piece: started only within the deadline, its output
  captured, finished before it returns (values read back, loops' reports in), and
  ``LoopCapped`` if a capped loop of the user's stopped at its cap."""
  check()
  before = _capped[0]
  with quiet():
    out = fn(*args)
    jax.block_until_ready(out)
    jax.effects_barrier()
  _raise_if_capped(before)
  return out


@contextlib.contextmanager
def replaying(capped: bool = True):
  """Equations ``bind`` applies meanwhile are vjpviz's own runs of the user's program:
  rewritten as ``rewrite`` says (while loops capped unless ``capped`` is False, where
  the values are the user's own), each started only within the deadline, the user's
  Python output captured; ``LoopCapped`` at the end if a capped loop stopped at its cap."""
  was = getattr(_local, "replaying", False), getattr(_local, "uncapped", False)
  _local.replaying, _local.uncapped = True, not capped
  before = _capped[0]
  try:
    with quiet():
      yield
      jax.effects_barrier()
  finally:
    _local.replaying, _local.uncapped = was
  _raise_if_capped(before)


def _raise_if_capped(before: int) -> None:
  if _capped[0] != before:
    raise LoopCapped(f"not judged: a while loop ran past {LOOP_CAP} iterations")


def bind(eqn, args) -> list:
  """The equation applied to ``args``, as JAX's own interpreter binds it; while
  ``replaying``, as ``rewrite`` has it (``_rewritten``), within the deadline."""
  if not getattr(_local, "replaying", False):
    return changed_signatures.bind(eqn, args)
  check()
  before = _capped[0]
  outs = _rewritten(eqn, args, any(not isinstance(v, core.DropVar) for v in eqn.outvars))
  if outs is None:
    return [None] * len(eqn.outvars)
  if eqn.primitive.name == "while" and _cap() is not None and \
      not any(isinstance(x, core.Tracer) for x in args):   # traced: told by ``replaying``
    jax.effects_barrier()
    _raise_if_capped(before)
  return outs


def _rewritten(eqn, args, results_used: bool) -> list | None:
  """``eqn`` applied to ``args`` as ``rewrite`` has it: an effect on the world whose
  results nothing uses (``jax.debug.print``, an ``io_callback`` that logs) not run (None),
  one whose result is used ``NotJudged``, a while loop capped, a body holding either
  rewritten."""
  if _side_effects(eqn) and not any(True for _ in core.jaxprs_in_params(eqn.params)):
    if results_used:
      raise _uses_effect(eqn)
    return None   # printing, logging: the user saw it once
  if eqn.primitive.name == "while" and _cap() is not None:
    return _capped_while(eqn, args)
  return changed_signatures.bind(eqn.replace(params=_rewritten_params(eqn.params)), args)


def _cap() -> int | None:
  """The iterations after which a while loop vjpviz runs is stopped (None: as written)."""
  return None if getattr(_local, "uncapped", False) else LOOP_CAP


def _uses_effect(eqn) -> NotJudged:
  return NotJudged(f"not judged: the program uses the result of {eqn.primitive.name}, "
                   "which vjpviz does not run again")


@contextlib.contextmanager
def quiet():
  """Python output of the user's code while vjpviz traces or runs it, captured."""
  with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    yield


# ------------------------------------------------------------- the rewrite

def rewrite(closed):
  """``closed`` (a jaxpr with its constants, as ``jax.make_jaxpr`` gives it) with every
  while loop capped and every unused effect dropped, at any depth (jit, scan, cond,
  remat, custom rules' bodies); ``NotJudged`` where an effect's result is used.
  Unchanged where there is nothing to rewrite."""
  jaxpr, consts = _open(closed), getattr(closed, "consts", ())
  if not _needs(jaxpr):
    return closed
  avals = [v.aval for v in jaxpr.invars]
  return jax.make_jaxpr(lambda *a: _interpret(jaxpr, consts, a))(*avals)


def _open(jaxpr) -> core.Jaxpr:
  """The jaxpr itself: JAX 0.12 folded ClosedJaxpr into Jaxpr, older ones wrap it."""
  inner = getattr(jaxpr, "jaxpr", jaxpr)
  return inner if isinstance(inner, core.Jaxpr) else jaxpr


def bounded(fn: Callable) -> Callable:
  """``fn`` traced at its arguments' types and run as its ``rewrite``: arrays are the
  program's inputs, every other leaf (callables, Python data) stays as given."""
  def call(*args, **kwargs):
    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    dyn = [i for i, l in enumerate(leaves) if _is_array(l)]

    def flat(*arrays):
      full = list(leaves)
      for i, a in zip(dyn, arrays):
        full[i] = a
      a, k = jax.tree_util.tree_unflatten(tree, full)
      out = fn(*a, **k)
      flat_out, out_tree = jax.tree_util.tree_flatten(out)
      shape.append(out_tree)
      return flat_out
    shape: list = []
    arrays = [leaves[i] for i in dyn]
    with quiet():
      closed = jax.make_jaxpr(flat)(*arrays)
    program = rewrite(closed)
    outs = core.eval_jaxpr(program.jaxpr, program.consts, *arrays)
    return jax.tree_util.tree_unflatten(shape[0], outs)
  return call


def _is_array(x) -> bool:
  return isinstance(x, (jax.Array, np.ndarray, core.Tracer)) and \
      getattr(x, "dtype", None) != jax.dtypes.float0


def _needs(jaxpr: core.Jaxpr) -> bool:
  for eqn in jaxpr.eqns:
    if (eqn.primitive.name == "while" and _cap() is not None) or _side_effects(eqn):
      return True
    if any(_needs(_open(sub)) for sub in core.jaxprs_in_params(eqn.params)):
      return True
  return False


_OWN_EFFECTS = tuple(getattr(core, name) for name in ("JaxprInputEffect", "NamedAxisEffect")
                     if hasattr(core, name))
"""Effects that stay inside the program: a Ref's reads and writes, a collective's axis."""


def _side_effects(eqn) -> list:
  """The equation's effects on the world."""
  return [e for e in eqn.effects if not isinstance(e, _OWN_EFFECTS)]


def _interpret(jaxpr: core.Jaxpr, consts, args) -> list:
  """``jaxpr`` bound equation by equation, rewritten as ``rewrite`` says (traced by it)."""
  env = dict(zip(jaxpr.constvars, consts))
  env.update(zip(jaxpr.invars, args))
  read = lambda v: v.val if isinstance(v, core.Literal) else env[v]
  used = _used(jaxpr)
  for eqn in jaxpr.eqns:
    outs = _rewritten(eqn, [read(v) for v in eqn.invars], any(v in used for v in eqn.outvars))
    if outs is not None:
      env.update(zip(eqn.outvars, outs))
  return [read(v) for v in jaxpr.outvars]


def _used(jaxpr: core.Jaxpr) -> set:
  used = {v for v in jaxpr.outvars if isinstance(v, core.Var)}
  for eqn in jaxpr.eqns:
    used.update(v for v in eqn.invars if isinstance(v, core.Var))
  return used


def _rewritten_params(params: dict) -> dict:
  return {k: _rewritten_param(v) for k, v in params.items()}


def _rewritten_param(value):
  if type(value).__name__ == "ClosedJaxpr" or (isinstance(value, core.Jaxpr) and
                                               not _needs(value)):
    return rewrite(value)
  if isinstance(value, core.Jaxpr):   # an open jaxpr (a remat's, a shard_map's body)
    done = rewrite(value)
    if type(done) is type(value):     # JAX 0.12: one type, its constants inside
      return done
    if done.consts:
      raise NotJudged("not judged: a loop of the program could not be bounded")
    return done.jaxpr
  if isinstance(value, tuple) and value and all(_is_jaxpr(v) for v in value):
    return tuple(_rewritten_param(v) for v in value)
  return value


def _is_jaxpr(value) -> bool:
  return isinstance(value, core.Jaxpr) or type(value).__name__ == "ClosedJaxpr"


def _capped_while(eqn, ins) -> list:
  """The while loop of ``eqn`` with an iteration counter in its carry: it stops after
  ``LOOP_CAP`` iterations, and says so through a callback of vjpviz's own."""
  params = eqn.params
  cond, body = rewrite(params["cond_jaxpr"]), rewrite(params["body_jaxpr"])
  nc, nb = params["cond_nconsts"], params["body_nconsts"]
  cond_consts, body_consts, carry = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]

  def keep_going(state):
    i, values = state
    (more,) = core.eval_jaxpr(cond.jaxpr, cond.consts, *cond_consts, *values)
    return jnp.logical_and(more, i < LOOP_CAP)

  def step(state):
    i, values = state
    return i + 1, core.eval_jaxpr(body.jaxpr, body.consts, *body_consts, *values)
  i, outs = jax.lax.while_loop(keep_going, step, (jnp.int32(0), list(carry)))
  (more,) = core.eval_jaxpr(cond.jaxpr, cond.consts, *cond_consts, *outs)
  jax.debug.callback(_report, jnp.logical_and(more, i >= LOOP_CAP))
  return list(outs)


def _report(hit) -> None:
  if bool(hit):
    with _capped_lock:
      _capped[0] += 1


# ------------------------------------------------------------- small draws

DRAW_BYTES = 1 << 20
"""Bytes of one draw's arrays above which vjpviz draws at smaller shapes: the analysis
must not hold many copies of a large activation (an out-of-memory error of ours)."""

SHRINK = 16
"""Arrays drawn at most 1/SHRINK of the call's: a check holds a few draws, each with
its output cotangent and a float64 reference, so all of them together stay within
one copy of the call's arguments."""


def smaller(shapes: list[tuple[tuple[int, ...], int]]) -> list[tuple[int, ...]] | None:
  """Shapes of the same ranks whose arrays take at most 1/SHRINK of the bytes, for
  arrays of ``(shape, itemsize)`` taking more than ``DRAW_BYTES``; None when they fit
  as they are; ``NotJudged`` when they cannot be made to.

  Every dimension divisible by a common power of two is divided by it, so sizes that
  were equal stay equal and one that was twice another still is (a reshape, a
  concatenation, a matmul's inner dimension still line up)."""
  size = lambda dims: sum(int(np.prod(s)) * n for s, n in dims)
  total = size(shapes)
  if total <= DRAW_BYTES:
    return None
  factor = 2
  while True:
    new = [(tuple(d // factor if d % factor == 0 else d for d in s), n) for s, n in shapes]
    if size(new) <= total // SHRINK:
      return [s for s, _ in new]
    if all(d % (2 * factor) for s, _ in shapes for d in s):
      raise NotJudged(f"not judged: the arguments ({total >> 20} MiB) are too large to "
                      "draw again, and their shapes cannot be made smaller")
    factor *= 2
