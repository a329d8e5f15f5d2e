"""A custom_vjp function under forward mode, which JAX refuses: ``jvp_of_custom_vjp``.

JAX stages a custom_vjp function's tangent as ``custom_lin``, which only reverse mode can
transpose away; its impl (an eager ``jax.jvp``), batching rule (``jax.jacfwd``, which vmaps
the jvp) and lowering (a jitted ``jax.jvp``, at run time) are all one function,
``ad.raise_custom_vjp_error_on_jvp``, followed at its ``raise`` only
(``CodeEvents.follow_raises``): nothing is paid until JAX refuses. Its keyword arguments are
custom_lin's params: ``bwd``, the user's bwd rule as JAX wrapped it (and, from JAX 0.11,
the primal beside it); under ``jax_custom_vjp3`` the primitive is hijax's linearized call
(its ``to_lojax`` and batching rule), whose ``_prim`` holds the traced primal and the bwd.
The transformation the user asked for is the outermost of JAX's entry points on the stack
that bound the equation: the Python stack when JAX raises as it traces, the equation's
recorded traceback when it raises lowering a jit. Where no session is open (a jit lowers
after its trace), the sink hears of it as a session of its own. JAX's exception passes
through untouched. Without ``sys.monitoring`` (Python before 3.12) the kind is off, and the
capabilities line says so.
"""
from __future__ import annotations

import os

import jax

from ..compat import private
from ..compat.private import ad, cd, core
from ...base import safety
from .. import records
from ..code_events import CodeEvents
from ..compat.patches import PatchSet
from ..records import ERROR, Record, Session
from .custom_rules import InstrumentedBwd, TaggedResiduals
from .retained_rules import retained

_API_FILE = os.path.join("jax", "_src", "api.py")
_ENTRIES = {"jvp": "jax.jvp", "linearize": "jax.linearize", "jacfwd.<locals>.jacfun": "jax.jacfwd"}
_REVERSE = "jacrev.<locals>.jacfun"
_DEPTH = 8   # tree levels searched for the hook's tagged residuals
REVERSE_MODE = {"jax.jacfwd": "jax.jacrev", "jax.hessian": "jax.jacrev(jax.jacrev(...))",
                "jax.jvp": "jax.vjp", "jax.linearize": "jax.vjp"}
"""The user's forward-mode transformation -> the reverse-mode one a headline names."""


def install(patches: PatchSet, sink, events: CodeEvents | None) -> None:
  if not private.has("ad.raise_custom_vjp_error_on_jvp"):
    patches.skip("custom_lin's raise_custom_vjp_error_on_jvp", "not found in this JAX")
    return
  code = ad.raise_custom_vjp_error_on_jvp.__code__
  start = lambda frame: frame if records.active() else None
  if events is None or not events.follow_raises(
      code, start, lambda frame, _value, exc: safety.safely(_report, frame, exc, sink)):
    patches.skip("custom_lin's raise_custom_vjp_error_on_jvp",
                 "followed only at its raise statement, with sys.monitoring")


def _report(frame, exc: BaseException | None, sink) -> None:
  rec = refusal(frame)
  if rec is None:
    return
  if records.current_session() is not None:
    records.record(rec)
    return
  safety.safely(sink, Session("jvp", None, records=[rec]), exc)


def refusal(frame) -> Record | None:
  """The record of JAX's refusal in ``raise_custom_vjp_error_on_jvp``'s ``frame``: the
  custom_vjp function and its bwd rule, and the transformation."""
  params, args = frame.f_locals.get("__") or {}, frame.f_locals.get("_") or ()
  named = _classic(params["bwd"], frame) if "bwd" in params else _vjp3(params.get("_prim"))
  if named is None:   # a primitive of the user's own, not a custom_vjp
    return None
  name, rule = named
  transformation = _transformation(_entry_names(frame, args))
  return retained(Record(
      kind="jvp_of_custom_vjp", severity=ERROR, function=name, source=None, path=None,
      expected=REVERSE_MODE.get(transformation, "jax.vjp"), got=transformation, rule=rule,
      site=safety.safely(_tagged_site, params),
      detail=f"{transformation or 'forward mode'} of the custom_vjp function {name or '?'}"))


def _tagged_site(params: dict):
  """The site the hook tagged the application's residuals with (its types, its
  custom_vjp: what running the reverse-mode call offered needs), from the residual tree:
  the one ``_flatten_bwd``'s ``out_trees`` holds, or hijax's ``residuals_tree`` (under
  ``jax_custom_vjp3``); None where JAX keeps no such tree."""
  trees = [params.get("residuals_tree")]
  for gen, args in getattr(params.get("bwd"), "transforms", ()):
    code = getattr(gen, "__code__", None)
    if code is not None and "out_trees" in code.co_varnames[:code.co_argcount]:
      thunk = args[code.co_varnames.index("out_trees") - 1]   # the first parameter is the function
      trees += thunk() if callable(thunk) else ()
  return next(filter(None, map(_tagged_in, trees)), None)


def _tagged_in(tree, depth: int = 0):
  """The site of the first ``TaggedResiduals`` node in ``tree``, at any depth, through the
  trees static nodes hold (JAX 0.12.1 keeps the residuals' tree as a ``Static`` value)."""
  if not isinstance(tree, jax.tree_util.PyTreeDef) or depth > _DEPTH:
    return None
  data = tree.node_data()
  if data is not None and data[0] is TaggedResiduals:
    return data[1]
  inner = _tagged_in(getattr(data[1], "val", None), depth + 1) if data is not None else None
  return inner or next(filter(None, (_tagged_in(c, depth + 1) for c in tree.children())), None)


def _classic(bwd, frame) -> tuple[str | None, str | None]:
  """(function, bwd rule) of custom_lin's ``bwd``: the primal is ``_flatten_bwd``'s
  ``primal_fun`` (JAX 0.11 on), else the ``custom_vjp`` whose ``__call__`` is on the stack."""
  primal = None
  for gen, args in getattr(bwd, "transforms", ()):
    code = getattr(gen, "__code__", None)
    if code is not None and "primal_fun" in code.co_varnames[:code.co_argcount]:
      i = code.co_varnames.index("primal_fun") - 1    # the first parameter is the function
      primal = args[i] if isinstance(args, tuple) and 0 <= i < len(args) else None
  while primal is None and frame is not None:
    if isinstance(frame.f_locals.get("self"), cd.custom_vjp):
      primal = frame.f_locals["self"].fun
    frame = frame.f_back
  return (getattr(primal, "__name__", None),
          getattr(getattr(bwd, "debug_info", None), "func_name", None))


def _vjp3(prim) -> tuple[str | None, str | None] | None:
  """(function, bwd rule) of a custom_vjp run as a hijax primitive (``jax_custom_vjp3``):
  its traced primal's name, and the user's bwd in the closure of JAX's rule around it."""
  name = getattr(getattr(prim, "traced", None), "fun_name", None)
  rule = getattr(prim, "bwd", None)
  if isinstance(rule, InstrumentedBwd):   # JAX 0.9 to 0.11 hold the hook's bwd itself
    return (name, getattr(rule.__wrapped__, "__name__", None)) if name is not None else None
  cells = dict(zip(getattr(getattr(rule, "__code__", None), "co_freevars", ()),
                   getattr(rule, "__closure__", None) or ()))
  if name is None or "bwd" not in cells:
    return None
  return name, getattr(cells["bwd"].cell_contents, "__name__", None)


def _entry_names(frame, args) -> list[str]:
  """The qualnames of JAX's api.py frames that led here, innermost first: the Python stack,
  or, lowering a jit (a lowering context in ``args``, or JAX's ``eqn`` in the caller's
  frame), the equation's traceback."""
  eqn = frame.f_back.f_locals.get("eqn") if frame.f_back is not None else None
  context = args[0] if args and not isinstance(args[0], (core.Tracer, jax.Array)) else None
  traceback = getattr(context, "traceback", None) or getattr(
      getattr(eqn, "source_info", None), "traceback", None)
  if traceback is not None:
    return [f.function_name for f in traceback.frames if f.file_name.endswith(_API_FILE)]
  names = []
  while frame is not None:
    if frame.f_code.co_filename.endswith(_API_FILE):
      names.append(frame.f_code.co_qualname)
    frame = frame.f_back
  return names


def _transformation(names: list[str]) -> str | None:
  """The outermost forward-mode entry point, as the user spelled it; jacfwd of a jacrev is
  ``jax.hessian``'s (forward over reverse)."""
  for depth in range(len(names) - 1, -1, -1):
    found = _ENTRIES.get(names[depth])
    if found == "jax.jacfwd" and _REVERSE in names[:depth]:
      return "jax.hessian"
    if found is not None:
      return found
  return None
