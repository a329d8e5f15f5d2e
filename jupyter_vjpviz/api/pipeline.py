"""Wires the stages: capture -> analysis -> fixes -> delivery, and keeps the history.

The capture hook hands each finished session here. Everything below runs on
the error (or first-warning) path only; the hot path is the hook's.

The exception first: a failing call's exception is raised as soon as its diagnosis
exists (the note and the history have it); what is not needed for the headline
(judging fixes, then the listeners' views and SVG: one publish per diagnosis, with its
fixes) follows, in ``follow``: where the error has been shown (IPython's post_run_cell,
the console's excepthook) or when the history is read. What waits there holds diagnoses
(avals), never the exception or the user's arrays.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import threading
import time

from .. import render  # noqa: F401 - registers Diagnosis.to_text and the other renderings
from ..analysis.values import replay
from ..analysis.assemble import diagnose, key
from ..analysis.diagnosis import Diagnosis
from ..base import safety, unchecked
from ..capture import applied, hook, processes
from ..capture.records import ERROR, Session
from ..capture.sites import check_sites
from ..fixes import suggest

HISTORY_LIMIT = 200
"""Diagnoses kept; the oldest go first, so a loop that fails every step stays bounded."""

WARNINGS_REMEMBERED = 100
"""Warnings already shown, so each shows once; beyond this the oldest may show again."""

NOTE_POINTER = "vjpviz.last() has the full diagnosis"
"""Where the error's note sends the user: true where diagnoses are delivered (the
``run`` CLI says where its report goes, as a script cannot call ``vjpviz.last()``)."""

_history: collections.deque[Diagnosis] = collections.deque(maxlen=HISTORY_LIMIT)
_unchecked: collections.deque[unchecked.Unchecked] = collections.deque(maxlen=WARNINGS_REMEMBERED)
"""The problems the capture recorded that vjpviz could not diagnose, each saying why."""
_latest: list[str] = []              # ids of the latest delivery (one call's), in order
_warned: dict = {}                   # warnings show once per (kind, rule, path, types); oldest forgotten
_lock = threading.Lock()             # history and warnings, when grads fail in several threads
_listeners = safety.Listeners()     # delivery callbacks: f(list[Diagnosis], exc), fixes attached
_following: collections.deque[tuple[list[Diagnosis], int | None]] = collections.deque(maxlen=HISTORY_LIMIT)
"""Raised deliveries whose listeners and fixes follow (the oldest dropped past the limit)."""
RAISED = Exception("an error vjpviz no longer holds")
"""What listeners get for ``exc`` when the error that was raised is not at hand."""
_collecting = threading.local()      # while vjpviz.check runs: where its findings go (per thread)
before_delivery = safety.Listeners()
"""``f(diagnosis, session) -> diagnosis``: each diagnosis passes through them in turn before
it is delivered (``%vjpviz values on`` puts the backward pass's values on it)."""


def install(announce: bool = False, budget: float | None = None) -> None:
  if budget is not None:
    replay.set_budget(budget)
  hook.install(_on_session, announce)


def uninstall() -> None:
  hook.uninstall()


def installed() -> bool:
  return hook.installed()


def hook_points() -> tuple[list[str], list[tuple[str, str]]]:
  return hook.hook_points()


def history() -> list[Diagnosis]:
  """Oldest first; in a job of several processes, on process 0, each distinct problem once
  (its latest), with the processes that recorded it, those only others did included."""
  follow()
  with _lock:
    found = list(_history)
  return across_processes(found, others=True)


def latest() -> Diagnosis | unchecked.Unchecked | None:
  """The lead of the latest delivery, as the error's note names it: of one call's
  diagnoses its first error (the one JAX raised for), else its first."""
  follow()
  with _lock:
    batch = [d for d in _history if d.id in _latest]
    missed = next((u for u in _unchecked if u.id in _latest), None)
  if missed is not None:   # the latest failing call vjpviz could not diagnose: not None
    return missed
  lead = next((d for d in batch if d.severity == ERROR), batch[0] if batch else None)
  return across_processes([lead])[0] if lead is not None else None


def stamped(record):
  """``record`` (a Diagnosis, a gradient report) of this process, published to the others
  of its ``jax.distributed`` job (one write to the coordination service's store, no wait)."""
  record = dataclasses.replace(record, process=processes.index())
  if processes.count() > 1:
    safety.safely(processes.publish, record.fingerprint, record.summary())
  return record


def recorded(record):
  """``record`` stamped and published, with the processes that recorded its problem as
  process 0 gathers them (waiting at most ``processes.WAIT``), then told to ``on_record``:
  ``vv.nans``, ``vv.grads``."""
  record = across_processes([stamped(record)], wait=processes.WAIT)[0]
  on_record.notify(record)
  return record


on_record = safety.Listeners()
"""``f(record)``: each diagnosis or gradient report ``recorded``, and each diagnosis of an
error as it is raised, before its fixes (a headless job's files)."""


def across_processes(found: list, wait: float = 0.0, others: bool = False) -> list:
  """``found`` (stamped records) with the processes that recorded each one's problem, as
  process 0 reads them, after waiting at most ``wait`` seconds (and no longer than the
  open budget) for every process to record each; with ``others``, deduplicated by problem,
  and the diagnoses only other processes recorded after them. Unchanged outside a job of
  several processes, and on processes other than 0 (they never wait)."""
  if processes.count() == 1 or processes.index() != 0:
    return found
  wait = min(wait, max(0.0, replay.current().deadline - time.monotonic()))
  seen = safety.safely(processes.gathered, {r.fingerprint for r in found}, wait, default={})
  held = lambda r: tuple(sorted(seen.get(r.fingerprint, {r.process: None})))
  found = [dataclasses.replace(r, processes=held(r)) for r in found]
  if not others:
    return found
  latest = {r.fingerprint: r for r in found}
  return list(latest.values()) + [
      Diagnosis.from_summary(by[min(by)], tuple(sorted(by))) for fingerprint, by in seen.items()
      if fingerprint.startswith("d") and fingerprint not in latest]


def clear() -> None:
  with _lock:
    _following.clear()
    _history.clear()
    _unchecked.clear()
    _latest.clear()
    _warned.clear()
  safety.forget_failures()


def add_listener(listener) -> None:
  """Call ``listener(found, exc)`` once per delivery, with the diagnoses' fixes and rule
  text attached (judging fixes takes up to ``analysis.values.replay.BUDGET``); for a raised error
  in ``follow``, after the exception."""
  _listeners.add(listener)


def remove_listener(listener) -> None:
  _listeners.discard(listener)


@contextlib.contextmanager
def collecting():
  """Route new diagnoses into a list instead of the history and the display."""
  found: list[Diagnosis] = []
  _collectors().append(found)
  try:
    yield found
  finally:
    _collectors().remove(found)


def _collectors() -> list[list[Diagnosis]]:
  return _collecting.__dict__.setdefault("stack", [])


def _on_session(session: Session, exc: BaseException | None) -> None:
  if session.entry == "run":   # the outermost jit ran what it traced: now JAX has spoken
    return _deliver(_held_sessions(), exc)
  if exc is not None and _seen(exc):
    return
  if exc is None and not _collectors() and check_sites.staged():
    # Accepted while tracing: whether JAX lets it through is known when the trace runs.
    _held().append(session)
    return
  _deliver(_held_sessions(), None)   # a trace that never ran (make_jaxpr, lower): JAX let it be
  _deliver([session], exc)


def _deliver(sessions: list[Session], exc: BaseException | None) -> None:
  """The diagnoses of ``sessions`` and their fixes, within one failing call's budget of
  the user's code run again (``analysis.values.replay``); the failing application's values
  (``capture.applied``) are forgotten after it."""
  if not sessions:
    return
  following = len(_following)
  try:
    with replay.account():
      _deliver_within(sessions, exc)
  finally:
    if len(_following) > following:   # fixes are judged after the raise: small values kept
      applied.detach(replay.DRAW_BYTES)
    else:
      applied.forget()


def _deliver_within(sessions: list[Session], exc: BaseException | None) -> None:
  collector = _collectors()[-1] if _collectors() else None
  skip = _warned.keys() if exc is None and collector is None else None
  found = []
  with _gc_paused():
    for session in sessions:
      with unchecked.attempt(_asked(session, exc)) as trial:
        made = safety.safely(diagnose, session, exc, skip, default=[])
      if trial.failed and not made:   # no diagnosis where the capture recorded a problem
        _missed(trial.unchecked(), collector)
      found += [stamped(_decorated(d, session)) for d in made]
  if not found:
    return
  if collector is not None:
    found = [with_fixes(d) for d in across_processes(found)]
    if exc is not None:
      _mark(exc, found)
    collector.extend(found)
    return
  if exc is not None:
    exc.add_note(f"vjpviz: {found[0].headline} ({NOTE_POINTER})")
    for d in found:   # written now (a headless job's files): the script may never read them
      on_record.notify(d)
    # into the history and onto the exception; the listeners follow
    _publish(found, exc, safety.Listeners())
    _following.append((found, replay.current().trips))   # what the user's loops needed
    return
  _remember_warnings(found)
  _finish(found, None)


def _asked(session: Session, exc: BaseException | None) -> str:
  """What a session's diagnosis would have answered, in words."""
  name = getattr(session.origin, "name", None) or "a VJP"
  return f"{'the error' if exc is not None else 'the warning'} in the backward pass of {name}"


def _missed(missed: unchecked.Unchecked, collector: list | None) -> None:
  """A problem the capture recorded that vjpviz could not diagnose: into ``vv.check``'s
  list, or the answers ``vv.last()`` and ``vv.diagnoses()`` give."""
  if collector is not None:
    collector.append(missed)
    return
  with _lock:
    _unchecked.append(missed)
    _latest[:] = [missed.id]


def answers() -> list:
  """``vv.diagnoses()``: the history, then the problems vjpviz could not diagnose since
  (``Unchecked``, each saying why)."""
  found = history()
  with _lock:
    return found + list(_unchecked)


def follow(exc: BaseException | None = None) -> None:
  """Finish the deliveries raised before: fixes judged, then listeners. ``exc``, the
  error just shown, if at hand: its diagnoses are marked on it again, with fixes.
  Judging fixes leaves cycles (traced closures over its draws, which may be the user's
  own arrays): collected before returning, so no device buffer waits on the next
  collection because of us."""
  if not _following:
    return
  try:
    while _following:
      found, trips = _following.popleft()
      ids = {d.id for d in found}
      raised = exc if ids & {d.id for d in getattr(exc, "__vjpviz__", ())} else RAISED
      with replay.account(trips=trips):
        _finish(found, raised)
  finally:
    applied.forget()
    gc.collect()


def _finish(found: list[Diagnosis], exc: BaseException | None) -> None:
  """Fixes judged, the processes that recorded each problem gathered, then the listeners."""
  found = across_processes(found, wait=processes.WAIT)
  _publish([with_fixes(d) for d in found], exc, _listeners)


def _decorated(d: Diagnosis, session: Session) -> Diagnosis:
  for decorate in list(before_delivery):
    d = safety.safely(decorate, d, session, default=d)
  return d


def remember(d: Diagnosis) -> None:
  """Into the history only (a diagnosis the panel asked for: its reply carries it, and its
  graph's views are asked of the history)."""
  with _lock:
    _into_history([d])


def _into_history(found: list[Diagnosis]) -> None:
  """``found`` last in the history, replacing the same ids (the caller holds ``_lock``)."""
  ids = {d.id for d in found}
  kept = [d for d in _history if d.id not in ids]
  _history.clear()
  _history.extend(kept + found)


def _publish(found: list[Diagnosis], exc: BaseException | None,
             listeners: safety.Listeners) -> None:
  """Into the history (replacing the same ids), onto the exception, to ``listeners``."""
  if exc is not None and exc is not RAISED:
    _mark(exc, found)
  with _lock:
    _into_history(found)
    _latest[:] = [d.id for d in found]
  listeners.notify(found, exc)


_holding = threading.local()


def _held() -> list[Session]:
  """Sessions that ended while JAX was tracing, in this thread, not yet delivered."""
  return _holding.__dict__.setdefault("sessions", [])


def _held_sessions() -> list[Session]:
  found, _holding.sessions = _held(), []
  return found


@contextlib.contextmanager
def _gc_paused():
  """Building a graph allocates tens of thousands of small objects while the failing
  call's whole state is still alive; the cyclic GC would rescan that heap again and
  again (measured: the edge table of a 48-layer model 2x slower). Nothing built
  here is cyclic garbage, so collection can wait until we are done."""
  was_enabled = gc.isenabled()
  gc.disable()
  try:
    yield
  finally:
    if was_enabled:
      gc.enable()


def _remember_warnings(found: list[Diagnosis]) -> None:
  with _lock:
    for d in found:
      _warned[key(d)] = None   # the key diagnose skips records by
    while len(_warned) > WARNINGS_REMEMBERED:
      del _warned[next(iter(_warned))]


def _seen(exc: BaseException) -> bool:
  return hasattr(exc, "__vjpviz__")


def _mark(exc: BaseException, found: list[Diagnosis]) -> None:
  """Diagnosed once: outer entry points the exception passes through skip it."""
  exc.__vjpviz__ = found


def with_fixes(d: Diagnosis) -> Diagnosis:
  return safety.safely(suggest.attach, d, default=d)
