"""Check sites of linear maps: the cotangent handed to ``jax.linear_transpose``'s function,
and the solves ``custom_root`` and ``custom_linear_solve`` are given.

``linear_transpose(f, *primals)`` returns a function of a cotangent of ``f``'s output, which
checks it in ``transposed_fun`` against the avals JAX traced ``f`` to. Who is at fault
depends on who handed the cotangent over:

- the user (``f_t(ct)``): their cotangent, as for ``f_vjp(ct)`` (``vjp_cotangent_type``);
- JAX, transposing a hijax primitive's linearization (``custom_root``'s on JAX 0.12): the
  cotangent has the primitive's output type, so the linear map's output is wrong, and the
  user's function that made it (``tangent_solve``) is named from that output's equation
  (``solve_type``).

``custom_linear_solve`` checks its solves' output shapes itself (``_check_shapes``); what
it was handed is read there, in a wrapper: a shape that differs is an error (JAX raises),
a dtype alone a warning (``solve_dtype``: JAX compares shapes only, and lets it through).
The wrapper runs where JAX traces the solves, once per call of ``custom_linear_solve``.
``transposed_fun`` is followed at its ``raise`` statements only (``CodeEvents.follow_raises``,
with ``sys.monitoring``), and read from the raising frame: a call that passes JAX's check
costs nothing. Where no session is open (a transpose or solve called outside any VJP), the
sink hears of the finding as a session of its own.
"""
from __future__ import annotations

import inspect
import sys
import weakref

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from ..compat import private
from ..compat.private import codes, core, pe, solves
from ...base import kinds, safety, trees
from .. import records
from ..code_events import CodeEvents
from ..compat.patches import PatchSet
from ..naming import frames, function_names, leaf_paths
from ..naming.leaf_paths import Leaf
from ..records import ERROR, WARNING, Origin, Record, Session, Solver, Weak
from . import check_sites, hijax_prims, hijax_rules


def install(patches: PatchSet, sink, events: CodeEvents | None) -> None:
  start = lambda frame: frame if records.active() else None
  if not private.has("codes.transposed_fun"):
    patches.skip("linear_transpose's transposed_fun", "not found in this JAX")
  elif events is None or not events.follow_raises(codes.transposed_fun, start, lambda frame, _value, exc: _report(
      safety.safely(transposed_records, frame, default=[]), exc, sink,
      safety.safely(linear_origin, frame))):
    patches.skip("linear_transpose's transposed_fun", "followed only at raise statements of "
                 "their own, with sys.monitoring")
  if getattr(solves, "_check_shapes", None) is None:
    patches.skip("custom_linear_solve's _check_shapes", "not found in this JAX")
  else:
    patches.apply(solves, "_check_shapes", lambda o: _wrap_check_shapes(o, sink))


def _report(found: list[Record], exc: BaseException | None, sink,
            origin: Origin | None = None) -> None:
  """Into the open session; else (JAX raises, or lets a dtype through, outside any VJP)
  straight to the sink."""
  found = [rec for rec in found if rec is not None]
  if not found:
    return
  if records.current_session() is not None:
    for rec in found:
      records.record(rec)
    return
  session = Session("transpose", origin, records=list(found))
  safety.safely(sink, session, exc)


def linear_origin(frame) -> Origin:
  """The linear function of ``transposed_fun``'s ``frame``, for the graph: the jaxpr JAX traced
  it to, over its inputs' avals, its constants as inputs of their own (avals: no array kept),
  its inputs named by the user's parameters where JAX kept them, else by position."""
  local = frame.f_locals
  jaxpr, in_avals = local["jaxpr"], tuple(local["in_avals"])
  lifted = pe.convert_constvars_jaxpr(jaxpr)   # its constants lead its inputs, as JAX's own
  consts = tuple(v.aval for v in lifted.invars[:len(lifted.invars) - len(in_avals)])
  leaves = consts + in_avals
  name, source = function_names.function_of(jaxpr)
  arg_names = tuple(getattr(jaxpr.debug_info, "arg_names", None) or ())
  if len(arg_names) != len(in_avals):   # as linear_transpose's primals were passed
    arg_names = tuple("args" + jax.tree_util.keystr(p)
                      for p in trees.leaf_paths(local["in_tree"], [object()] * len(in_avals)))
  labels = tuple(f"constant {i}" for i in range(len(consts))) + arg_names
  return Origin(fun=lambda *xs: core.eval_jaxpr(lifted, (), *xs), leaves=leaves,
                tree=jax.tree_util.tree_structure((leaves, {})),
                differentiated_leaves=tuple(range(len(consts), len(leaves))),
                name=name or "linear function", source=source, labels=labels)


def transposed_records(frame) -> list[Record]:
  """What is wrong with the cotangent ``transposed_fun``'s ``frame`` was handed, or with the
  linear map's output when JAX handed it over."""
  local = frame.f_locals
  jaxpr, out_tree, out_avals = local["jaxpr"], local["out_tree"], local["out_avals"]
  if not isinstance(out_tree, jax.tree_util.PyTreeDef):   # a thunk before JAX 0.12.1
    out_tree = out_tree()
  # From JAX 0.12.1 the outputs that are symbolic zeros have no aval (and no jaxpr output).
  zeros = local.get("out_zeros") or [False] * len(out_avals)
  nonzero = [i for i, zero in enumerate(zeros) if not zero]
  by_leaf = [None] * len(zeros)
  for i, aval in zip(nonzero, out_avals):
    by_leaf[i] = aval
  found = check_sites.check_out_cotangent(jaxpr, out_tree, by_leaf, local["out_cotangent"])
  if not _handed_by_jax(frame):
    return found
  # JAX's cotangent has the primitive's output type: the map's output is what is wrong.
  # (A wrong tree is caught where JAX traces the user's function, before this.)
  return [_map_output(jaxpr, rec, nonzero.index(rec.flat_index)) for rec in found
          if not kinds.of(rec.kind).structural]


def _handed_by_jax(frame) -> bool:
  """Whether JAX called the transposed function while transposing a hijax primitive (a
  ``self`` that is one, in JAX's frames between the two): not the user, nor a jit of theirs."""
  caller = frame.f_back
  while caller is not None and function_names.inside_jax(caller.f_code.co_filename):
    if hijax_rules.is_primitive(caller.f_locals.get("self")):
      return True
    caller = caller.f_back
  return False


def _map_output(jaxpr, rec: Record, out: int) -> Record:
  """``rec`` turned round: the linear map's output ``rec.flat_index`` (the jaxpr's output
  ``out``) has the wrong type, and the user's function whose equation made it is at fault."""
  eqn = _made_by(jaxpr, out)
  made = frames.user_frame(eqn.source_info.traceback) if eqn is not None else None
  top = hijax_prims.current()
  site = top.site if top is not None else None
  return Record(
      kind="solve_type", severity=ERROR, function=site.function if site else None,
      source=site.call_site if site else None, path=rec.path.removeprefix("out") or None,
      expected=rec.got, got=rec.expected,
      flat_index=rec.flat_index, expected_aval=rec.got_aval, got_aval=rec.expected_aval,
      rule=made.function_name.rpartition(".")[2] if made else None,
      rule_source=f"{made.file_name}:{made.start_line}" if made else None,
      leaves=tuple(Leaf(l.path, l.got, l.expected) for l in rec.leaves))


def _made_by(jaxpr, i: int):
  """The equation that made output ``i``'s type: followed back from the output through the
  equations that pass an operand of that very type on (a ``neg`` JAX applies to what the
  user's function returned), into the jaxprs of calls and out again; None if none did."""
  var, aval, outer, made = jaxpr.outvars[i], jaxpr.outvars[i].aval, [], None
  while True:
    eqn = next((e for e in reversed(jaxpr.eqns) if any(v is var for v in e.outvars)), None)
    if eqn is None:   # an input: of a call's jaxpr, then of the call itself
      k = next((k for k, v in enumerate(jaxpr.invars) if v is var), None)
      if not outer or k is None:
        return made
      inner = jaxpr
      jaxpr, eqn = outer.pop()
      if len(eqn.invars) != len(inner.invars):
        return made
      var = eqn.invars[k]
      continue
    made = eqn
    inner = next((j for j in (getattr(p, "jaxpr", p) for p in eqn.params.values())
                  if isinstance(j, core.Jaxpr)), None)
    if inner is not None and len(inner.outvars) == len(eqn.outvars):
      outer.append((jaxpr, eqn))
      jaxpr, var = inner, inner.outvars[next(k for k, v in enumerate(eqn.outvars) if v is var)]
      continue
    var = next((v for v in eqn.invars if isinstance(v, core.Var) and v.aval == aval), None)
    if var is None:
      return eqn


# --------------------------------------------------------- custom_linear_solve

def _wrap_check_shapes(original, sink):
  """JAX's check in a wrapper with its parameter names: what raises is read as it raises,
  and a dtype JAX lets through (it compares shapes only) is a warning. It runs where JAX
  traces the solves, once per ``custom_linear_solve`` call, never per step of a jit."""
  def check_shapes(func_name, expected_name, actual, expected):
    try:
      out = original(func_name, expected_name, actual, expected)
    except Exception as e:
      if records.active():
        _report([safety.safely(solve_record, sys._getframe(), _other_shape)], e, sink)
        safety.safely(frames.strip, e)
      raise
    if records.active():
      _report([safety.safely(solve_record, sys._getframe(), _other_dtype)], None, sink)
    return out
  check_shapes.__wrapped__ = original
  return check_shapes


def _other_shape(got, want) -> bool:
  return got.shape != want.shape


def _other_dtype(got, want) -> bool:
  return got.dtype != want.dtype


def solve_record(frame, differs) -> Record | None:
  """The first leaf the user's ``func_name`` (``solve``, ``transpose_solve``) returned
  that ``differs`` from ``expected_name``'s, read from what JAX's ``_check_shapes``
  (``frame``) compared (a shape: JAX raises; a dtype alone: JAX lets it through, a
  warning); its caller holds the user's function, bound to the linear map."""
  local = frame.f_locals
  func_name, expected_name = local["func_name"], local["expected_name"]
  got = [core.typeof(x) for x in jax.tree_util.tree_leaves(local["actual"])]
  want = [core.typeof(x) for x in jax.tree_util.tree_leaves(list(local["expected"]))]
  i = next((i for i, (g, w) in enumerate(zip(got, want)) if differs(g, w)),
           None if len(got) == len(want) else min(len(got), len(want)))
  if i is None:
    return None
  g, w = (got[i] if i < len(got) else None), (want[i] if i < len(want) else None)
  key = (jax.tree_util.SequenceKey(i),) if max(len(got), len(want)) > 1 else ()
  text = lambda aval: aval.str_short() if aval is not None else leaf_paths.MISSING
  fun = frame.f_back.f_locals.get("fun")   # JAX's shape-checked wrapper of the user's solve
  user = function_names.unwrap(fun) if callable(fun) else None
  call = frames.live_user_frame(frame)
  shape = g is None or w is None or g.shape != w.shape
  return Record(
      kind="solve_type" if shape else "solve_dtype", severity=ERROR if shape else WARNING,
      function="custom_linear_solve",
      source=f"{call.file_name}:{call.start_line}" if call else None,
      path=f"{expected_name}{jax.tree_util.keystr(key)}", expected=text(w), got=text(g),
      flat_index=i, expected_aval=w, got_aval=g,
      rule=function_names.function_name(user) if user is not None else func_name,
      rule_source=function_names.function_source(user) if user is not None else None,
      detail=f"custom_linear_solve calls it as {func_name}",
      leaves=(Leaf(leaf_paths.keys(key), text(w), text(g)),),
      solver=safety.safely(_solver, frame, func_name, user, want))


MAX_UNKNOWNS = 1024
"""A solve's linear map is materialised (to judge its fixes) up to this many unknowns."""


def _solver(frame, func_name: str, user, want) -> Solver | None:
  """The user's solve, weakly, and its linear map's matrix, read from
  ``custom_linear_solve``'s own frame."""
  if func_name not in ("solve", "transpose_solve") or user is None:
    return None
  if not private.has("solves.custom_linear_solve"):
    return None
  code, caller = inspect.unwrap(solves.custom_linear_solve).__code__, frame.f_back
  while caller is not None and caller.f_code is not code:
    caller = caller.f_back
  if caller is None:
    return None
  tree = jax.tree_util.tree_structure(caller.f_locals["b"])
  matrix, why = _matrix(caller.f_locals["matvec"], tree, want)
  if matrix is not None and func_name == "transpose_solve":
    matrix = matrix.T
  return Solver(Weak(_weakref(user)), tree, tuple(want), matrix, why)


def _weakref(fn):
  """A bound method by its object and function: the method object is made anew each read."""
  return weakref.WeakMethod(fn) if inspect.ismethod(fn) else weakref.ref(fn)


def _matrix(matvec, tree, avals):
  """(``matvec``'s matrix on the host, "") by ``jax.jacfwd`` at ``b``'s type, evaluated
  now (not staged into the trace JAX is building); (None, why) where it cannot be."""
  size = sum(int(np.prod(a.shape)) for a in avals)
  if size > MAX_UNKNOWNS:
    return None, f"b has {size} elements: its matrix is not materialised past {MAX_UNKNOWNS}"
  example = jax.tree_util.tree_unflatten(tree, [np.zeros(a.shape, a.dtype) for a in avals])
  try:
    with records.suspended(), jax.ensure_compile_time_eval():
      flat, unravel = ravel_pytree(example)
      jac = jax.jacfwd(lambda v: ravel_pytree(matvec(unravel(v)))[0])(flat)
      return np.asarray(jac), ""
  except Exception as e:  # noqa: BLE001 - a matvec of the traced values (under jit, grad of A)
    return None, (f"the matvec could not be evaluated outside the failing trace "
                  f"({type(e).__name__}): it depends on traced values")
