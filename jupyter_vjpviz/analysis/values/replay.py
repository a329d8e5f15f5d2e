"""The user's code run on vjpviz's own account, within bounds.

Every check that executes the user's functions after an error (the oracle's draws,
fix verification, gradient checks) is vjpviz acting on its own, not the user. It
goes through here, which keeps four promises:

- a deadline per failing call (``account``): past it nothing more starts, and what
  was not reached says "not judged: time budget". XLA computations cannot be
  interrupted, so each is bounded by construction (below) and the deadline is checked
  between them; nothing runs on a thread of ours after the budget;
- loops bounded: the program run is the user's jaxpr rewritten (``rewrite``) so that
  each while loop (and a fori_loop with dynamic bounds, which is one) counts its
  iterations and asks the host, every ``CHECK_EVERY`` of them, whether the deadline
  has passed (one stopped there raises ``NotJudged``); at values of vjpviz's drawing it
  also stops at a cap (``LoopCapped``, its result not used) derived from the most
  iterations a loop needed at the user's own values (``_Account.cap``), or ``LOOP_CAP``
  where no such run was seen;
- no repeated side effects: equations with effects whose results nothing uses
  (``jax.debug.print``, ``jax.debug.callback``, an ``io_callback`` that logs) are
  dropped; one whose result is used (an ordered or io effect that feeds the
  program) is not run, and the check is not judged (``NotJudged``);
  ``pure_callback`` has no effect and runs; Python printing while the user's code
  is traced again is captured, and so are the effects of the runs that are eager
  (``quiet``: a train step run again with jit disabled, a rule's Python);
- what the checks draw stays small: see ``analysis.values.oracle`` (``shrunk``).

The NaN search, the gradient report's measured pass and the value overlay run the
user's program equation by equation rather than as one jaxpr: under ``replaying`` each
equation they bind (``bind``) is rewritten the same way, so their graph keeps the
program's own equations. At the values the user's call had, a loop ends where the
user's did: there loops run uncapped (``replaying(capped=False)``), bounded by the
deadline only, and what they needed is recorded (``_Account.trips``) for the draws.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import math
import os
import threading
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ...capture.compat import changed_signatures, effects
from ...capture.compat.private import core, effect_types
from ...base.trees import substituted

BUDGET = float(os.environ.get("VJPVIZ_BUDGET") or 2.0)
"""Seconds of extra wall time vjpviz may spend per failing call (``vjpviz.install(budget=)``,
``VJPVIZ_BUDGET`` for test harnesses and slow machines, where a verdict must not depend on
the load): once before the user's exception (the diagnosis), once after it (judging fixes)."""

LOOP_CAP = 500
"""Iterations after which vjpviz stops a while loop of the user's it runs at values of its
own drawing, where no run at the user's values told what the program needs."""

TRIPS_TIMES, TRIPS_FLOOR = 4, 100
"""Seen at the user's values, a cap of ``TRIPS_TIMES`` the most iterations a loop needed
there, and at least ``TRIPS_FLOOR`` (a draw may need a few more than the user's values)."""

CHECK_EVERY = 32
"""Iterations between a loop's questions to the host whether the deadline has passed."""

MAIN_TIMES, MAIN_FLOOR = 20, 30.0
"""vjpviz's pass at the user's own values (``vv.nans``' search, ``vv.grads``' measured pass),
eager and equation by equation, may take ``MAIN_TIMES`` the user's own compiled gradient,
and at least ``MAIN_FLOOR`` seconds (a 4k-equation model's search takes a few): bounds that
cut no run that ends, and end one that does not (``main_pass``)."""

TIME_BUDGET = "not judged: time budget"


class NotJudged(Exception):
  """A run vjpviz would not (or could no longer) do; the message says why, as a verdict."""


class LoopCapped(NotJudged):
  """A while loop of the user's ran past its cap (``_Account.cap``) where vjpviz ran it."""


@dataclasses.dataclass
class _Account:
  start: float
  deadline: float
  trips: int | None = None   # the most iterations a while loop needed at the user's values

  def share(self, fraction: float) -> float:
    """The time by which ``fraction`` of this account is spent."""
    return self.start + fraction * (self.deadline - self.start)

  @property
  def cap(self) -> int:
    """Iterations after which a loop run at values of vjpviz's drawing is stopped."""
    return LOOP_CAP if self.trips is None else max(TRIPS_FLOOR, TRIPS_TIMES * self.trips)


@dataclasses.dataclass
class _Loops:
  """What the loops vjpviz ran reported (from XLA's host thread, hence global)."""
  capped: int = 0      # stopped at their cap
  stopped: int = 0     # stopped at the deadline
  most: int = 0        # iterations of the longest that ended on its own, since ``observed``


_local = threading.local()      # the open account; whether replaying; loops left uncapped
_loops = _Loops()
_loops_lock = threading.Lock()
_deadline = [math.inf]          # the open account's, for the loops' questions (host thread)


def set_budget(seconds: float) -> None:
  """Seconds vjpviz may spend after each failing call (0: it runs none of the user's code)."""
  global BUDGET
  BUDGET = max(0.0, float(seconds))


def main_pass(user_seconds: float = 0.0) -> float:
  """Seconds for vjpviz's pass at the user's values, after a gradient of the user's that
  took ``user_seconds``; then ``BUDGET`` more, for the fixes."""
  return BUDGET + max(MAIN_FLOOR, MAIN_TIMES * user_seconds)


@contextlib.contextmanager
def account(seconds: float | None = None, trips: int | None = None):
  """The deadline of one failing call's analysis; nested, the outer one stands, and
  ``seconds`` given there may only bring it nearer meanwhile (a step of the analysis
  bounded within the whole). ``trips``: what the user's run needed, seen by an earlier
  account of the same call."""
  if getattr(_local, "account", None) is not None:
    outer = _local.account
    if seconds is None:
      yield outer
      return
    was = outer.deadline
    outer.deadline = _deadline[0] = min(was, time.monotonic() + seconds)
    try:
      yield outer
    finally:
      outer.deadline = _deadline[0] = was
    return
  now = time.monotonic()
  _local.account = _Account(now, now + (BUDGET if seconds is None else seconds), trips)
  _deadline[0] = _local.account.deadline
  try:
    yield _local.account
  finally:
    _local.account = None
    _deadline[0] = math.inf


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
  with account(), _stopped_loops():
    with quiet():
      out = fn(*args)
      jax.block_until_ready(out)
      jax.effects_barrier()
  return out


@contextlib.contextmanager
def replaying(capped: bool = True):
  """Equations ``bind`` applies meanwhile are vjpviz's own runs of the user's program:
  rewritten as ``rewrite`` says, each started only within the deadline, the user's
  Python output captured; ``LoopCapped`` at the end if a capped loop stopped at its cap.
  ``capped=False``: the values are the user's own (``at_user_values``)."""
  was = getattr(_local, "replaying", False), getattr(_local, "uncapped", False)
  _local.replaying, _local.uncapped = True, False
  try:
    with (account(), _stopped_loops(),
          contextlib.nullcontext() if capped else at_user_values(), quiet()):
      yield
      jax.effects_barrier()
  finally:
    _local.replaying, _local.uncapped = was


@contextlib.contextmanager
def at_user_values():
  """Loops traced or run meanwhile are at the values the user's call had, where they end
  as the user's did: uncapped, bounded by the deadline only; the most iterations any of
  them needed becomes the open account's ``trips``, from which the draws' caps derive."""
  was = getattr(_local, "uncapped", False)
  _local.uncapped = True
  with _loops_lock:
    was_most, _loops.most = _loops.most, 0
  try:
    yield
  finally:
    _local.uncapped = was
    jax.effects_barrier()
    with _loops_lock:
      most, _loops.most = _loops.most, max(was_most, _loops.most)
    acct = getattr(_local, "account", None)
    if acct is not None and most:
      acct.trips = max(acct.trips or 0, most)


@contextlib.contextmanager
def _stopped_loops():
  """``LoopCapped`` (or ``NotJudged`` at the deadline) if a loop run meanwhile was stopped;
  told once: the windows around this one do not tell it again."""
  before = dataclasses.replace(_loops)
  yield
  with _loops_lock:
    stopped, capped = _loops.stopped != before.stopped, _loops.capped != before.capped
    _loops.stopped, _loops.capped = before.stopped, before.capped
  if stopped:
    raise NotJudged(f"{TIME_BUDGET} (a while loop of the program was stopped there)")
  if capped:
    raise LoopCapped(f"not judged: a while loop ran past {current().cap} iterations")


def bind(eqn, args) -> list:
  """The equation applied to ``args``, as JAX's own interpreter binds it; while
  ``replaying``, as ``rewrite`` has it (``_rewritten``), within the deadline."""
  if not getattr(_local, "replaying", False):
    return changed_signatures.bind(eqn, args)
  check()
  if eqn.primitive.name != "while" or any(isinstance(x, core.Tracer) for x in args):
    outs = _rewritten(eqn, args, any(not isinstance(v, core.DropVar) for v in eqn.outvars))
    return [None] * len(eqn.outvars) if outs is None else outs
  with _stopped_loops():   # traced: told by ``replaying``
    outs = _rewritten(eqn, args, True)
    jax.effects_barrier()
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
  if eqn.primitive.name == "while":
    return _capped_while(eqn, args)
  return changed_signatures.bind(eqn.replace(params=_rewritten_params(eqn.params)), args)


def _cap() -> int | None:
  """The iterations after which a while loop vjpviz runs is stopped (None: at the user's
  values, where it ends as the user's did, or at the deadline)."""
  return None if getattr(_local, "uncapped", False) else current().cap


def _uses_effect(eqn) -> NotJudged:
  return NotJudged(f"not judged: the program uses the result of {eqn.primitive.name}, "
                   "which vjpviz does not run again")


@contextlib.contextmanager
def quiet():
  """Python output of the user's code while vjpviz traces or runs it, captured; the
  effects it binds eagerly held back (``compat.effects``): ``NotJudged`` where the run
  was given made-up results of one."""
  with (contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()),
        effects.held_back() as made_up):
    yield
  if made_up:
    raise NotJudged(f"not judged: the program uses the result of {made_up[0]}, which "
                    "vjpviz does not run again")


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
      full = substituted(leaves, dyn, arrays)
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
    if eqn.primitive.name == "while" or _side_effects(eqn):
      return True
    if any(_needs(_open(sub)) for sub in core.jaxprs_in_params(eqn.params)):
      return True
  return False


def _side_effects(eqn) -> list:
  """The equation's effects on the world: not those that stay inside the program (a Ref
  made there, its reads and writes, a collective's axis)."""
  own = (core.InternalMutableArrayEffect, effect_types.JaxprInputEffect, core.NamedAxisEffect)
  return [e for e in eqn.effects if not isinstance(e, own)]


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
  """The while loop of ``eqn`` with an iteration counter in its carry: it stops at its
  cap (``_cap``) or once the deadline has passed (asked every ``CHECK_EVERY``
  iterations), and its last test reports how it ended (``_report``), through callbacks
  that are pure (theirs is the loop's answer), which no window holds back."""
  cap = _cap()
  params = eqn.params
  cond, body = rewrite(params["cond_jaxpr"]), rewrite(params["body_jaxpr"])
  nc, nb = params["cond_nconsts"], params["body_nconsts"]
  cond_consts, body_consts, carry = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
  ended = functools.partial(_ended, -1 if cap is None else cap)

  def keep_going(state):
    i, values = state
    (more,) = core.eval_jaxpr(cond.jaxpr, cond.consts, *cond_consts, *values)
    go = more if cap is None else jnp.logical_and(more, i < cap)
    ask = jnp.logical_and(go, i % CHECK_EVERY == CHECK_EVERY - 1)
    go = jnp.logical_and(go, jax.lax.cond(ask, _in_time, lambda i: jnp.bool_(True), i))
    return jax.lax.cond(go, lambda i, more: jnp.bool_(True), ended, i, more)

  def step(state):
    i, values = state
    return i + 1, core.eval_jaxpr(body.jaxpr, body.consts, *body_consts, *values)
  _, outs = jax.lax.while_loop(keep_going, step, (jnp.int32(0), list(carry)))
  return list(outs)


_BOOL = jax.ShapeDtypeStruct((), jnp.bool_)


def _in_time(i) -> jax.Array:
  return jax.pure_callback(lambda _: np.bool_(time.monotonic() < _deadline[0]), _BOOL, i)


def _ended(cap: int, i, more) -> jax.Array:
  return jax.pure_callback(functools.partial(_report, cap), _BOOL, i, more)


def _report(cap: int, i, more) -> np.bool_:
  """How a loop of vjpviz's ended: on its own after ``i`` iterations, or (``more``) at
  its cap or the deadline; False, the loop's last answer."""
  with _loops_lock:
    if not bool(more):
      _loops.most = max(_loops.most, int(i))
    elif 0 <= cap <= int(i):
      _loops.capped += 1
    else:
      _loops.stopped += 1
  return np.bool_(False)


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
