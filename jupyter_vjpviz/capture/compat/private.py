"""Every private JAX name vjpviz touches, resolved once at import, per JAX version.

An entry says where JAX keeps the object (alternatives, newest first: a name JAX moved or
renamed), the capability it serves, and what stands in where none resolves. The rest of
vjpviz reads these names from the namespaces below (``from ..compat.private import core``
then ``core.Jaxpr``), never from ``jax._src`` itself, so a JAX that drops one changes
this table and nothing else.

A name that does not resolve switches off only its capability: ``capabilities.of`` drops
the kinds recorded at it and the capabilities line names it, once. Its stand-in is the
entry's fallback, else ``Absent``, whose every use raises ``safety.Unavailable``, which
``safely`` swallows in silence (the capability is off, and that was said). The hook
points a capability names are those of ``base.kinds``; ``EVERYTHING`` is JAX's core data
model, which no part of vjpviz works without: missing one, the hook is not installed.

``VJPVIZ_PRIVATE_ABSENT=key,key`` (and ``absent(key)`` in-process) resolve entries as if
JAX lacked them: how ``tests/test_private_names.py`` checks each one's fallback.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import inspect
import os
import typing
from typing import Any

import jax

from ...base import kinds
from ...base.safety import Unavailable

EVERYTHING = "everything"
FIXES = "fixes"
NANS = "NaN localisation and gradient values"
SOURCES = "source locations"
TRACEBACKS = "tracebacks as JAX's own"
JIT_RUNS = "failures when a jit runs"
GRAD_LOGS = "the logs of defvjp_with_logs rules beside their diagnoses"
JVP, SOLVE = kinds.JVP, kinds.SOLVE
HIJAX = kinds.HIJAX_BWD
FORWARD = "custom rules checked under forward mode (jax.jvp, jacfwd, hessian, linearize)"
LINEAR_MAPS = "linear_transpose's cotangents and custom_root's tangent solves"
PROCESSES = "records gathered across a jax.distributed job's processes"
CORE = "JAX's core data model, unchanged in name since 0.4: vjpviz reads programs in it"


ABSENT = object()   # an entry without a fallback of its own


class _NoInstances:
  """A class nothing is an instance of: the fallback of a type vjpviz only tests against."""


class Absent:
  """What stands in for a name JAX lacks: any use raises ``Unavailable``; a class
  statement may still subclass it (a module defining one still imports)."""

  def __init__(self, key: str, capability: str):
    self._key, self._capability = key, capability

  def _off(self, *_args, **_kwargs):
    raise Unavailable(f"{self._capability}: JAX has no {self._key} here")

  __call__ = __instancecheck__ = __subclasscheck__ = __iter__ = _off

  def __getattr__(self, name):
    if name.startswith("__"):
      raise AttributeError(name)
    self._off()

  def __mro_entries__(self, bases):
    return (object,)

  def __bool__(self):
    return False


@dataclasses.dataclass(frozen=True)
class Name:
  key: str                      # how vjpviz spells it: namespace.attribute
  paths: tuple[str, ...]        # "module:attribute" where JAX has it, newest first
  capability: str               # a hook point of base.kinds, a feature, or EVERYTHING
  fallback: Any = None          # what stands in (ABSENT: an ``Absent``)
  params: tuple[str, ...] = ()  # frame locals read by name: its parameters (and closure's)
  nested: str = ""              # the code of a function of this name defined in the one found
  why: str = ""                 # why a name is assumed stable, or what its fallback means
  since: str = "0.6"            # the JAX versions that have it: since <= version < until
  until: str | None = None

  @property
  def attribute(self) -> str:
    return self.key.split(".", 1)[1]


def _n(key, paths, capability, fallback=ABSENT, params=(), why="", since="0.6", until=None,
       nested=""):
  paths = (paths,) if isinstance(paths, str) else paths
  return Name(key, paths, capability, fallback, params, nested, why, since, until)


_C, _AD, _PE = "jax._src.core", "jax._src.interpreters.ad", "jax._src.interpreters.partial_eval"
_CD, _API, _HI = "jax._src.custom_derivatives", "jax._src.api", "jax._src.hijax"
_SIU, _TBU = "jax._src.source_info_util", "jax._src.traceback_util"
_never_exempt = lambda got, expected: False
_nothing = lambda *args, **kwargs: None


class _Alone:
  """``distributed.global_state`` where JAX has none: no coordination service's client,
  so each process's records stay its own (none is gathered)."""
  client = None
  process_id = 0
  num_processes = 1


class _Frame(typing.NamedTuple):
  """``source_info_util.Frame``'s fields, where JAX has none: a frame told by its code."""
  file_name: str
  function_name: str
  start_line: int
  start_column: int = 0
  end_line: int = 0
  end_column: int = 0


def _frame_of(code, lasti: int) -> _Frame:
  line = next((n for start, end, n in code.co_lines() if start <= lasti < end and n), None)
  return _Frame(code.co_filename, code.co_name, line or code.co_firstlineno)

NAMES: tuple[Name, ...] = (
    *(_n(f"core.{a}", f"{_C}:{a}", EVERYTHING, why=CORE) for a in (
        "Jaxpr", "JaxprEqn", "Var", "Literal", "DropVar", "Tracer", "AbstractValue",
        "ShapedArray", "typeof", "typematch", "typecompat", "eval_jaxpr", "jaxprs_in_params",
        "trace_ctx", "EvalTrace", "trace_state_clean", "eval_context")),
    _n("core.NamedAxisEffect", f"{_C}:NamedAxisEffect", NANS, _NoInstances,
       why="an effect that stays in the program; a JAX without it has none such"),
    _n("effect_types.JaxprInputEffect", "jax._src.effects:JaxprInputEffect", NANS, _NoInstances,
       why="a Ref's reads and writes, which stay in the program; a JAX without it has none"),
    _n("core.InternalMutableArrayEffect", f"{_C}:InternalMutableArrayEffect", NANS, _NoInstances,
       why="a Ref made inside the program; a JAX without it has none"),
    # the primitives that act on the world when bound eagerly: held back in vjpviz's reruns
    *(_n(f"callbacks.{a}", f"jax._src.{m}:{a}", NANS, None, since=since,
         why="None: a JAX without it has no such primitive to hold back")
      for m, a, since in (("callback", "io_callback_p", "0.6"),
                          ("debugging", "debug_callback_p", "0.6"),
                          ("debugging", "debug_print_p", "0.7.2"))),
    _n("core.primal_dtype_to_tangent_dtype", f"{_C}:primal_dtype_to_tangent_dtype", FIXES),
    _n("pe.DynamicJaxprTrace", f"{_PE}:DynamicJaxprTrace", EVERYTHING, why=CORE),
    _n("pe.JaxprTrace", f"{_PE}:JaxprTrace", EVERYTHING, why=CORE),
    _n("pe.convert_constvars_jaxpr", f"{_PE}:convert_constvars_jaxpr", SOLVE),
    _n("pe.dce_jaxpr", f"{_PE}:dce_jaxpr", NANS),
    _n("lu.WrappedFun", "jax._src.linear_util:WrappedFun", JVP),
    _n("state.AbstractRef", "jax._src.state.types:AbstractRef", kinds.WITH_REFS),
    # custom_vjp and custom_jvp: the classes, their rule machinery, what JAX hands a rule
    _n("cd.custom_vjp", f"{_CD}:custom_vjp", EVERYTHING, why="the custom_vjp class itself"),
    _n("cd.custom_vjp.__call__", f"{_CD}:custom_vjp.__call__", kinds.RULES,
       params=("self", "args", "kwargs")),
    _n("cd.custom_jvp", f"{_CD}:custom_jvp", JVP),
    _n("cd.__file__", f"{_CD}:__file__", kinds.RULES),
    _n("cd.Zero", f"{_CD}:Zero", kinds.RULES),
    _n("cd.SymbolicZero", f"{_CD}:SymbolicZero", kinds.RULES),
    _n("cd.CustomVJPPrimal", f"{_CD}:CustomVJPPrimal", kinds.RULES),
    _n("cd.Residuals", f"{_CD}:Residuals", kinds.RULES, None,
       why="jax.custom_gradient's residuals; without it its rule is named as JAX's"),
    _n("cd._flatten_jvp", f"{_CD}:_flatten_jvp", JVP),
    _n("cd._flatten_fwd", f"{_CD}:_flatten_fwd", kinds.RULES, params=("maybe_out_type",),
       why="its frame's local holds the primal's output types"),
    _n("cd._flatten_bwd", f"{_CD}:_flatten_bwd", TRACEBACKS,
       why="where the instrumented bwd takes the place of JAX's call_wrapped frame"),
    _n("cd._temporary_dtype_exception", f"{_CD}:_temporary_dtype_exception", kinds.RULES,
       _never_exempt, why="marked for removal in 0.12: without it JAX checks dtypes strictly"),
    _n("config.enable_x64", "jax._src.config:enable_x64", FIXES,
       why="float64 for a NaN fix's reference; without it a line rewrite is unverifiable"),
    _n("config.custom_vjp3", "jax._src.config:custom_vjp3", kinds.RULES, since="0.9",
       why="a flag JAX 0.9 on has; its absence means no jax_custom_vjp3 path to watch"),
    # the VJP entry points and their check sites
    _n("api.vjp", f"{_API}:vjp", kinds.F_VJP, params=("fun", "primals")),
    _n("api._vjp3_callable", f"{_API}:_vjp3_callable", kinds.F_VJP, params=("jaxpr",),
       since="0.7"),
    _n("api._vjp3_bwd", f"{_API}:_vjp3_bwd", EVERYTHING,
       params=("jaxpr", "out_tree", "out_primal_avals", "out_ct"), since="0.7",
       why="every backward pass starts there: the session the check sites fill"),
    _n("api._vjp3_bwd_logs", f"{_API}:_vjp3_bwd", GRAD_LOGS, params=("want_logs",), since="0.12",
       why="whether the backward pass returns JAX's logs (defvjp_with_logs) with its cotangents"),
    _n("api._vjp", f"{_API}:_vjp", kinds.F_VJP, until="0.10"),
    # the forward-mode entry points: jax.jvp and jacfwd (so hessian), and jax.linearize
    _n("api._jvp", f"{_API}:_jvp", FORWARD, params=("fun", "primals")),
    _n("api.linearize", f"{_API}:linearize", FORWARD, params=("fun", "primals")),
    _n("api._vjp_pullback_wrapper", f"{_API}:_vjp_pullback_wrapper", EVERYTHING, until="0.7",
       why="every backward pass starts there before _vjp3_bwd (JAX 0.7; it stays until 0.9)"),
    _n("api._vjp_accum", f"{_API}:_vjp_accum", kinds.WITH_REFS, since="0.11"),
    _n("api._is_ref", f"{_API}:_is_ref", kinds.WITH_REFS, since="0.7"),
    _n("api._post_hook_state", f"{_API}:_post_hook_state", JIT_RUNS, None, since="0.8",
       why="JAX's cache of jitted calls, bypassed while a jit's calls are read where it has one"),
    _n("api._temporary_dtype_exception", f"{_API}:_temporary_dtype_exception", kinds.F_VJP,
       _never_exempt, why="marked for removal in 0.12: without it JAX checks dtypes strictly"),
    _n("codes.transposed_fun", (f"{_API}:_linear_transpose", f"{_API}:linear_transpose"),
       LINEAR_MAPS, nested="transposed_fun",
       params=("jaxpr", "in_avals", "in_tree", "out_avals", "out_tree", "out_cotangent"),
       why="the closure linear_transpose returns, made per call: its code is what all share "
           "(in _linear_transpose from JAX 0.12.1, whose out_tree is a tree, not a thunk)"),
    _n("ad.ct_check", f"{_AD}:ct_check", kinds.ACCUMULATE, since="0.8"),
    _n("ad.ref_accum_error", "jax._src.interpreters.batching:ref_accum_error", kinds.WITH_REFS,
       since="0.12", why="vmap's refusal of a gradient ref for a rule that takes accumulators"),
    _n("ad.RefAccum", f"{_AD}:RefAccum", kinds.WITH_REFS, since="0.7"),
    _n("ad.raise_custom_vjp_error_on_jvp", f"{_AD}:raise_custom_vjp_error_on_jvp",
       kinds.FORWARD_REFUSED, params=("_", "__"),
       why="custom_lin's impl, batching rule and lowering: a custom_vjp under forward mode"),
    _n("ad.Zero", (f"{_AD}:Zero", "jax._src.ad_util:Zero"), EVERYTHING, why=CORE),
    _n("ad.GradAccum", f"{_AD}:GradAccum", kinds.ACCUMULATE, since="0.7"),
    _n("ad.NullAccum", f"{_AD}:NullAccum", HIJAX, since="0.8"),
    _n("ad.ValAccum", f"{_AD}:ValAccum", HIJAX, since="0.7"),
    _n("ad.primitive_linearizations", f"{_AD}:primitive_linearizations", HIJAX),
    _n("ad.fancy_transposes", f"{_AD}:fancy_transposes", HIJAX, since="0.7"),
    _n("pjit._run_python_pjit", "jax._src.pjit:_run_python_pjit", JIT_RUNS, since="0.9"),
    _n("pjit._python_pjit_helper", "jax._src.pjit:_python_pjit_helper", JIT_RUNS, until="0.9"),
    _n("solves._check_shapes", "jax._src.lax.control_flow.solves:_check_shapes", SOLVE,
       params=("func_name", "expected_name", "actual", "expected")),
    _n("solves.custom_linear_solve", "jax._src.lax.control_flow.solves:custom_linear_solve",
       FIXES, params=("matvec", "b"),
       why="its frame holds the linear map a solve's fix is judged against"),
    # hijax primitives (JAX 0.8.1 on) and the custom rules JAX runs as them
    _n("hijax.HiPrim", (f"{_HI}:HiPrim", f"{_HI}:VJPHiPrimitive"), HIJAX, None,
       why="VJPHiPrimitive before JAX 0.11; None: no user primitive is one", since="0.8"),
    _n("hijax.call_hi_primitive_p", f"{_HI}:call_hi_primitive_p", HIJAX, since="0.8"),
    _n("hijax.call_hi_primitive_linearized_p", f"{_HI}:call_hi_primitive_linearized_p", HIJAX,
       since="0.8"),
    _n("hijax._accum_args_grad", f"{_HI}:_accum_args_grad", HIJAX, since="0.12",
       why="before it the default vjp_bwd accumulates inline"),
    _n("hijax.custom_jvp3", f"{_HI}:custom_jvp3", JVP, since="0.11"),
    _n("hijax.__file__", f"{_HI}:__file__", kinds.RULES, "", since="0.7",
       why="its rules' callers are told by their file; none without hijax"),
    # where the user is: JAX's record of the stack, and its traceback filter
    _n("source_info_util.current", f"{_SIU}:current", SOURCES),
    _n("source_info_util.user_frame", f"{_SIU}:user_frame", SOURCES, _nothing,
       why="None: JAX's guess at the user's frame unknown; vjpviz's own stack reading remains"),
    _n("source_info_util.Frame", f"{_SIU}:Frame", SOURCES, _Frame),
    _n("source_info_util.raw_frame_to_frame", f"{_SIU}:raw_frame_to_frame", SOURCES, _frame_of),
    _n("source_info_util.is_user_filename", f"{_SIU}:is_user_filename", SOURCES,
       lambda filename: True, why="vjpviz's own filter of library files remains"),
    _n("source_info_util.register_exclusion", f"{_SIU}:register_exclusion", TRACEBACKS, _nothing),
    _n("traceback_util.register_exclusion", f"{_TBU}:register_exclusion", TRACEBACKS, _nothing),
    _n("traceback_util.api_boundary", f"{_TBU}:api_boundary", TRACEBACKS, lambda f: f),
    # a jax.distributed job: the coordination service's client, whose key-value store
    # gathers which processes recorded the same problem (capture/processes.py)
    _n("distributed.global_state", "jax._src.distributed:global_state", PROCESSES, _Alone(),
       why="the client jax.distributed.initialize connects; without it no process gathers"),
)


class Namespace:
  """One JAX module's private names as vjpviz reads them: resolved, or stand-ins."""

  def __init__(self, name: str):
    self._name = name

  def __str__(self) -> str:
    return self._name


_BY_KEY = {n.key: n for n in NAMES}
_found: dict[str, tuple[Any, str]] = {}      # key: (its owner, its attribute there)
_spaces: dict[str, Namespace] = {}


def _lookup(path: str):
  module, _, attribute = path.partition(":")
  owner = importlib.import_module(module)
  *outer, last = attribute.split(".")
  for part in outer:
    owner = getattr(owner, part)
  return owner, last, getattr(owner, last)


def _nested_code(fn, name: str, params: tuple[str, ...]):
  """The code of the function ``name`` defined (at any depth) in ``fn``, reading the locals
  ``params`` (parameters or closure variables); None if ``fn`` defines none such."""
  found = getattr(inspect.unwrap(fn), "__code__", None)
  todo = [found] if found is not None else []
  while todo:
    code = todo.pop()
    nested = [c for c in code.co_consts if inspect.iscode(c)]
    for c in nested:
      if c.co_name == name and set(params) <= {*c.co_varnames, *c.co_freevars, *c.co_cellvars}:
        return c
    todo.extend(nested)
  return None


def _takes(fn, params: tuple[str, ...]) -> bool:
  """Whether ``fn`` takes the parameters ``params`` (its frame's locals as it starts), seen
  through JAX's wrappers (``api_boundary``, a ``linear_util`` transformation's partial)."""
  if isinstance(fn, functools.partial):
    fn = next((a for a in fn.args if hasattr(a, "__code__")), fn.func)
  code = getattr(inspect.unwrap(fn), "__code__", None)
  if code is None:
    return False
  n = (code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS)
       + bool(code.co_flags & inspect.CO_VARKEYWORDS))
  return set(params) <= set(code.co_varnames[:n])


def _resolve(name: Name, absent: set[str]) -> None:
  _found.pop(name.key, None)
  value = Absent(name.key, name.capability) if name.fallback is ABSENT else name.fallback
  if name.key not in absent:
    for path in name.paths:
      try:
        owner, attribute, found = _lookup(path)
      except Exception:  # noqa: BLE001 - not in this JAX (ImportError, AttributeError)
        continue
      if name.nested:
        found = _nested_code(found, name.nested, name.params)
        if found is not None:
          _found[name.key], value = (None, name.nested), found
          break
      elif not name.params or _takes(found, name.params):
        _found[name.key], value = (owner, attribute), found
        break
  space, _, attribute = name.key.partition(".")
  if "." not in attribute:
    setattr(_spaces.setdefault(space, Namespace(space)), attribute, value)


def _resolve_all(absent: set[str]) -> None:
  for name in NAMES:
    _resolve(name, absent)


_resolve_all({k for k in os.environ.get("VJPVIZ_PRIVATE_ABSENT", "").split(",") if k})
(core, effect_types, callbacks, cd, ad, pe, api, lu, state, config, pjit, solves, hijax,
 source_info_util, traceback_util, codes, distributed) = (
    _spaces[s] for s in ("core", "effect_types", "callbacks", "cd", "ad", "pe", "api", "lu", "state",
                         "config", "pjit", "solves", "hijax", "source_info_util",
                         "traceback_util", "codes", "distributed"))


def has(key: str) -> bool:
  """Whether JAX has the name ``key`` (and, for a function read by its locals, takes them)."""
  return key in _found


def owner(key: str) -> tuple[Any, str] | None:
  """(the module or class holding ``key``, its attribute there): where to patch it (no
  owner for a nested function's code)."""
  return _found.get(key)


def missing() -> list[Name]:
  """The entries this JAX should have and lacks: each one's capability is off."""
  return [n for n in NAMES if n.key not in _found and _due(n)]


def _release(version: str) -> tuple[int, ...]:
  return tuple(int(p) for p in version.split(".")[:3] if p.isdigit())


_HERE = _release(jax.__version__)   # as imported: the JAX these names were resolved in


def _due(name: Name) -> bool:
  """Whether the running JAX is one that has ``name`` (``since`` <= it < ``until``)."""
  return _release(name.since) <= _HERE and (name.until is None or _HERE < _release(name.until))


@contextlib.contextmanager
def reshaped(key: str, reshape):
  """Resolve ``key`` as if JAX held ``reshape(it)`` (of another shape) wherever it keeps
  it, meanwhile (install the hook inside)."""
  held = []
  for path in _BY_KEY[key].paths:
    with contextlib.suppress(Exception):   # a place this JAX does not have
      owner, attribute, found = _lookup(path)
      held.append((owner, attribute, found))
  for owner, attribute, found in held:
    setattr(owner, attribute, reshape(found))
  _resolve(_BY_KEY[key], set())
  try:
    yield _BY_KEY[key]
  finally:
    for owner, attribute, found in held:
      setattr(owner, attribute, found)
    _resolve(_BY_KEY[key], set())


@contextlib.contextmanager
def absent(key: str):
  """Resolve ``key`` as if this JAX lacked it, meanwhile (install the hook inside)."""
  _resolve(_BY_KEY[key], {key})
  try:
    yield _BY_KEY[key]
  finally:
    _resolve(_BY_KEY[key], set())
