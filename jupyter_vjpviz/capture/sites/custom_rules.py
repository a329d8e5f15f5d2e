"""Instrumenting custom_vjp rules through their public fwd/bwd contract.

Each differentiated application of a ``jax.custom_vjp`` runs a shallow clone of
the user's object whose fwd tags the residuals with a static ``RuleSite`` (the
primal input avals, paths and call site) and whose bwd compares the rule's
cotangents with those avals *before* JAX does. The comparison only records; it
never raises and returns exactly what the rule returned, so JAX's own check (and
error) is unchanged. It also sees what JAX lets through (silent dtypes).
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
import weakref
from typing import Any

import jax
import numpy as np

from ..compat.private import cd, core, hijax, source_info_util
from ...base import kinds, safety, surrogates, trees
from .. import applied, grad_logs, mesh_context, records
from ..avals import ct_aval, same_shape, same_type
from ..compat import dtype_exemption, jax_flags
from ..naming import (arguments, code_monitor, frames, function_names, leaf_paths, library_wrappers,
                      user_calls)
from ..records import ERROR, WARNING, Record, RuleSite
from . import bwd_raises, vjp3_rules
from .retained_rules import retained


class InstrumentedRule:
  """A callable that JAX cannot tell from the user's rule (name, repr, source).

  It is the one frame of ours on the stack while the user's rule runs: the rule's
  result must pass through us (the fwd's residuals get their site, the bwd's
  cotangents are compared), so one frame is the least a wrapper can be; what it does
  with the result happens after the rule has returned. Learning a library rule's
  spelling of its inputs (``arguments.Learning``) follows the call from this frame,
  adding none. An exception leaving the rule leaves without this frame
  (``frames.strip``).
  """

  def __init__(self, rule):
    functools.update_wrapper(self, rule)

  def __repr__(self):
    return repr(self.__wrapped__)


class InstrumentedFwd(InstrumentedRule):
  """Holds its custom_vjp weakly: the clone cache is keyed weakly on that object, and a
  strong reference back would keep it (and every JAX cache keyed on its functions, with
  their constants) alive forever."""

  def __init__(self, rule, custom_vjp):
    super().__init__(rule)
    self._custom_vjp = weakref.ref(custom_vjp)

  def __call__(self, *args):
    cvjp = self._custom_vjp()
    if cvjp is None:  # a JAX cache outlived the user's object: be the plain rule
      return self.__wrapped__(*args)
    flat = safety.safely(_flat_args, cvjp, args)
    follow = flat and safety.safely(_user_fwd_to_name, cvjp, flat)
    try:
      if follow is None:
        out_res, spelled = cvjp.fwd(*args), None
      else:
        code, structure, leaves = follow
        with arguments.Learning(code, structure, code_monitor.START) as learning:
          out_res = cvjp.fwd(*args)
        spelled = safety.safely(learning.learned, lambda: leaves)
    except BaseException as e:
      if isinstance(e, Exception) and records.current_session() is not None:
        safety.safely(_fwd_raised, cvjp, args, flat or _flat_args(cvjp, args), e)
      safety.safely(frames.strip, e)
      raise
    if flat is None:
      return out_res
    return safety.safely(_tagged, cvjp, args, flat, out_res, spelled, default=out_res)


class InstrumentedBwd(InstrumentedRule):
  """Needs no custom_vjp: its check reads only the site in the residuals, so it runs even
  when the custom_vjp was made for one call and is gone by the backward pass."""

  def __init__(self, rule, with_logs: bool):
    super().__init__(rule)
    self._with_logs = with_logs

  def __call__(self, *args):
    *static, tagged, ct = args
    bwd = self.__wrapped__
    if not isinstance(tagged, TaggedResiduals):
      return bwd(*args)
    site = safety.safely(_with_zero_cts, tagged.site, ct, default=tagged.site)
    code = safety.safely(_user_bwd_code, bwd)
    records.state.rule_stack.append(site)
    learning = None
    try:
      if code is None or arguments.known(code, site.in_tree):
        cts = bwd(*static, tagged.res, ct)
      else:
        with arguments.Learning(code, site.in_tree, code_monitor.RETURN) as learning:
          cts = bwd(*static, tagged.res, ct)
        safety.safely(learning.learned, lambda: _leaf_cts(site, cts, self._with_logs))
    except BaseException as e:
      if isinstance(e, Exception):
        kind = "bwd_raised"   # what a statement of a bwd raising is
        safety.safely(bwd_raises.raised, site, bwd, code, e, kind, (0,) if self._with_logs else ())
      if isinstance(e, Exception) and learning is not None and learning.returned:
        # the library's bwd raised after the user's returned
        safety.safely(bwd_raises.returned_then_raised, site, code, learning.returned.pop(), e)
      safety.safely(frames.strip, e)
      raise
    finally:
      records.state.rule_stack.pop()
    safety.safely(_check_bwd_output, site, cts, code, self._with_logs)
    if self._with_logs:
      safety.safely(grad_logs.noted, site, cts)
    return cts


class InstrumentedBwdWithAccums(InstrumentedRule):
  """A ``defvjp_with_accums`` bwd: its pushes are checked where JAX accumulates them."""

  def __init__(self, rule, n_static: int):
    super().__init__(rule)
    self._n_static = n_static

  def __call__(self, *args):
    n = self._n_static
    static, (tagged, ct), accums = args[:n], args[n:n + 2], args[n + 2:]
    if not isinstance(tagged, TaggedResiduals):
      return self.__wrapped__(*args)
    records.state.rule_stack.append(tagged.site)
    try:
      return self.__wrapped__(*static, tagged.res, ct, *accums)
    except BaseException as e:
      safety.safely(frames.strip, e)
      raise
    finally:
      records.state.rule_stack.pop()


class TaggedResiduals:
  """The user's residuals plus the ``RuleSite`` as static pytree aux data."""
  __slots__ = ("res", "site")

  def __init__(self, res, site):
    self.res = res
    self.site = site


jax.tree_util.register_pytree_node(
    TaggedResiduals, lambda t: ((t.res,), t.site),
    lambda site, children: TaggedResiduals(children[0], site))


def option(cvjp, name: str):
  """A custom_vjp option, or None on a JAX that predates it (with_logs, with_accums, ...)."""
  return getattr(cvjp, name, None)


def uses_hijax(cvjp) -> bool:
  """Whether JAX runs ``cvjp`` on its hijax path: JAX 0.12 decides as it is called (the
  flag, generic_batching); 0.9 to 0.11 as it is made (a custom_vjp3, read as a
  ``vjp3_rules.CustomVjp3``; a custom_vjp made before the flag stays classic)."""
  if vjp3_rules.separate_class() is not None:
    return isinstance(cvjp, vjp3_rules.CustomVjp3)
  return bool(jax_flags.on("jax_custom_vjp3") or getattr(cvjp, "generic_batching", False))


_clones: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _own(cvjp, own: dict, name: str):
  """``cvjp``'s attribute from its ``own`` ``__dict__`` where it is there (the user's rule,
  without the hook's descriptor: a frame lookup per read), else as it reads."""
  return own[name] if name in own else getattr(cvjp, name)


def instrumented(cvjp):
  """The instrumented clone of ``cvjp``, cached so JAX's trace caches still hit.

  The session holds ``cvjp`` from here: JAX may run the fwd only after the call that
  made a per-call rule returned (``jax.checkpoint`` and ``lax.scan`` trace it lazily,
  flax linen's ``nn.remat``/``nn.scan`` of an ``nn.custom_vjp``), and the clone's fwd
  holds it weakly. Rules registered with ``defremat`` are instrumented too
  (``_instrumented_remat``), beside or in place of the ``defvjp`` ones."""
  own = vars(cvjp)
  fwd, bwd, remat = _own(cvjp, own, "fwd"), _own(cvjp, own, "bwd"), own.get("remat_rules")
  if (fwd is None or bwd is None) and remat is None:
    return cvjp
  session = records.current_session()
  if session is not None:
    session.held[id(cvjp)] = cvjp
  key = (fwd, bwd, own.get("with_logs"), own.get("with_accums"), own.get("symbolic_zeros"),
         own.get("nondiff_argnums"), remat)
  cached = _clones.get(cvjp)
  if cached is not None and cached[0] == key:
    return cached[1]
  rules = {} if fwd is None or bwd is None else dict(
      fwd=InstrumentedFwd(fwd, cvjp),
      bwd=(InstrumentedBwdWithAccums(bwd, len(cvjp.nondiff_argnums))
           if option(cvjp, "with_accums") else
           InstrumentedBwd(bwd, bool(option(cvjp, "with_logs")))))
  if remat is not None:
    rules["remat_rules"] = _instrumented_remat(cvjp, remat)
  clone = library_wrappers.copy_of(cvjp, **rules)
  _clones[cvjp] = (key, clone)
  return clone


# ------------------------------------------------------------------ defremat

_remat_views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _instrumented_remat(cvjp, remat: tuple) -> tuple:
  """``defremat``'s ``(fwd, rem, bwd, with_logs)``, instrumented: the fwd tags its
  residuals, ``rem`` passes the tag on to its own (the bwd's), the bwd is checked as a
  ``defvjp`` bwd. JAX composes them as it does the user's (``rem`` after ``fwd`` outside
  ``jax.remat``, on the backward pass under it), so the tag reaches the bwd either way."""
  fwd, rem, bwd, *rest = remat
  with_logs = bool(rest and rest[0])
  return (InstrumentedFwd(fwd, remat_view(cvjp, remat)), RematRem(rem),
          InstrumentedBwd(bwd, with_logs), *rest)


def remat_view(cvjp, remat: tuple):
  """``cvjp`` as JAX differentiates it through its ``defremat`` rules: a copy with those
  in the ``fwd``/``bwd`` places (what the site names and a fix edits) and
  ``library_wrappers.Remat`` saying how the user registered them (how a fix is run and
  applied). Held as long as ``cvjp`` (the site refers to it weakly)."""
  cached = _remat_views.get(cvjp)
  if cached is not None and cached[0] is remat:
    return cached[1]
  fwd, rem, bwd, *rest = remat
  with_logs = bool(rest and rest[0])
  view = library_wrappers.copy_of(
      cvjp, fwd=fwd, bwd=bwd, with_logs=with_logs, with_accums=False, symbolic_zeros=False,
      remat_rules=None, **{library_wrappers.REMAT: library_wrappers.Remat(
          weakref.ref(cvjp), rem, with_logs)})
  _remat_views[cvjp] = (remat, view)
  return view


class RematRem(InstrumentedRule):
  """A ``defremat`` ``rem`` rule: handed the fwd's residuals as the user's fwd returned
  them, its own residuals (the bwd's) tagged with the same site, naming the VJP closure
  JAX traced into them (``custom_gradient(remat=True)``: the rem's closure returns it)."""

  def __call__(self, res, *args):
    if not isinstance(res, TaggedResiduals):
      return self.__wrapped__(res, *args)
    try:
      out_res = self.__wrapped__(res.res, *args)
    except BaseException as e:
      safety.safely(frames.strip, e)
      raise
    if not (isinstance(out_res, (tuple, list)) and len(out_res) == 2):
      return out_res
    site = safety.safely(_with_closed_rule, res.site, out_res[1], default=res.site)
    return type(out_res)((out_res[0], TaggedResiduals(out_res[1], site)))


# ------------------------------------------------------------------ forward

def _tagged(cvjp, args, flat, out_res, spelled):
  """What the fwd returned, its residuals tagged with the site (checked first)."""
  site = safety.safely(_site, cvjp, args, flat, spelled)
  if site is None:
    return out_res
  if not (isinstance(out_res, (tuple, list)) and len(out_res) == 2):
    records.record(retained(Record(
        kind="fwd_structure", severity=ERROR, function=site.function,
        source=site.source, rule=site.fwd_rule, site=site, path="",
        expected="(primal_out, residuals)",
        got=_structure(out_res),
        detail=f"fwd rule {site.fwd_rule} must return a pair (primal_out, residuals)")))
    return out_res
  out, res = out_res
  site = safety.safely(_placed, site, out, default=site)
  if function_names.inside_jax(site.rule_source):   # the bwd is JAX's own: jax.custom_gradient
    site = safety.safely(_with_closed_rule, site, res, default=site)
  safety.safely(_defer_fwd_check, cvjp, args, out, site)
  safety.safely(applied.remember, site, args)
  site_made.notify(site, args)
  return type(out_res)((out, TaggedResiduals(res, site)))


site_made = safety.ThreadListeners()
"""Told ``(site, args)`` of every site a fwd makes, in the thread that added the listener:
how ``vjpviz.gradcheck`` learns each rule application a function reaches, at any depth."""


def _placed(site: RuleSite, out) -> RuleSite:
  """``site`` with the mesh it is traced in, where it runs inside a shard_map."""
  mesh = mesh_context.of(out)
  return site if mesh is None else dataclasses.replace(site, mesh=mesh)


def _with_closed_rule(site: RuleSite, res) -> RuleSite:
  """Name the user's VJP function when JAX traced it into the residuals.

  ``jax.custom_gradient``'s bwd is JAX's own, applying the VJP closure the
  user's function returned, which JAX closure-converts in fwd; its debug info
  says which function that was and where it is defined.
  """
  closed = cd.Residuals
  if closed is None or not isinstance(res, closed):
    return site
  rule, rule_source = function_names.function_of(res.jaxpr)
  return dataclasses.replace(site, rule=rule, rule_source=rule_source)


def _fwd_raised(cvjp, args, flat, exc: Exception) -> None:
  """The fwd raised: a statement of the user's own fwd (``fwd_raised``), or a
  ``jax.custom_gradient``'s VJP closure where JAX traces it, in the fwd (on the cotangent
  types): ``bwd_raises`` reads the statement as it reads a bwd rule's. The closure is the
  first of the user's frames the exception passed through below JAX's fwd, unless that is
  the user's function itself (then the forward computation raised)."""
  site = _site(cvjp, args, flat)
  if not function_names.inside_jax(site.rule_source):   # the user's own bwd: not traced in fwd
    fwd = inspect.unwrap(cvjp.fwd)
    bwd_raises.raised(site, fwd, _user_fwd_code(cvjp), exc, kind="fwd_raised")
    return
  fun = getattr(function_names.unwrap(cvjp.fun), "__code__", None)
  tb = exc.__traceback__
  while tb is not None and (frames.library_file(tb.tb_frame.f_code.co_filename)
                            or frames.ours(tb)):
    tb = tb.tb_next
  code = tb.tb_frame.f_code if tb is not None else None
  if code is None or code is fun:
    return
  site = dataclasses.replace(site, rule=code.co_name,
                             rule_source=f"{code.co_filename}:{code.co_firstlineno}")
  _claim_push(site)
  within = (0,) if option(cvjp, "with_logs") else ()   # custom_gradient(with_logs=True)'s pair
  bwd_raises.raised(site, None, code, exc, kind="bwd_raised", within=within)


def _claim_push(site: RuleSite) -> None:
  """A push into an accumulator that JAX refused as it traced the closure in the fwd
  (``custom_gradient(with_accums=)``: no rule is on the stack there) is this closure's:
  its record, the session's last, gets the site, the closure and the input it fits."""
  session = records.current_session()
  rec = session.records[-1] if session is not None and session.records else None
  kind = kinds.of(rec.kind) if rec is not None else None
  if kind is None or (kind.role, kind.channel) != ("bwd", kinds.ACCUMULATED) or rec.site is not None:
    return
  path = accum_path(site, rec.expected_aval)
  session.records[-1] = retained(dataclasses.replace(
      rec, site=site, function=site.function, source=site.source, rule=site.rule, path=path,
      flat_index=site.in_paths.index(path) if path is not None else None))


def accum_path(site: RuleSite | None, aval) -> str | None:
  """The rule input whose cotangent type is ``aval``, when only one fits."""
  if site is None:
    return None
  fits = [p for p, a in zip(site.in_paths, site.in_avals) if ct_aval(a) == aval]
  return fits[0] if len(fits) == 1 else None


def _user_fwd_to_name(cvjp, flat):
  """(code, structure, leaves) when a library's fwd stands for the user's and how the
  user spells its inputs is not known yet (``arguments``); else None."""
  code = _fwd_code(cvjp)
  leaves, structure = flat
  if code is None or arguments.known(code, structure):
    return None
  return code, structure, [_unbox(x) for _, x in leaves]


def _flat_args(cvjp, args) -> tuple:
  """(leaves with their paths, tree) of an application's differentiable arguments: flattened
  once per application, for the site and for learning a library's spelling of them."""
  differentiable = tuple(a for i, a in enumerate(args) if i not in cvjp.nondiff_argnums)
  return jax.tree_util.tree_flatten_with_path(differentiable, is_leaf=_is_primal_box)


def _site(cvjp, args, flat, spelled=None) -> RuleSite:
  leaves, treedef = flat
  facts = _facts(cvjp)
  in_avals = tuple(core.typeof(_unbox(x)) for _, x in leaves)
  call_site, name_stack = call_site_and_scope()
  occurrence = None
  session = records.current_session()
  if session is not None:
    session.held[id(cvjp)] = cvjp
  if session is not None and session.entry == "vjp":
    key = (facts.names["function"], call_site, name_stack)   # as the graph tells them apart
    session.occurrences[key] += 1
    occurrence = session.occurrences[key]
  params, code, library = facts.params, facts.fwd_code, facts.library
  positions = [i for i in range(len(args)) if i not in cvjp.nondiff_argnums]
  spelled = spelled or (arguments.cached(code, treedef) if code is not None else None) or ()
  program = (user_calls.program_names([_unbox(x) for _, x in leaves])
             if library else [None] * len(leaves))
  users = [(spelled[k] if k < len(spelled) and spelled[k] else None) or program[k]
           for k in range(len(leaves))]
  in_names = tuple(
      users[k] or function_names.argument_name(params, positions[p[0].idx], jax.tree_util.keystr(p[1:]))
      for k, (p, _) in enumerate(leaves))
  return RuleSite(
      **facts.names, call_site=call_site, name_stack=name_stack, occurrence=occurrence,
      traced=session.occurrences if occurrence is not None else None,
      in_keys=tuple(leaf_paths.keys(p) for p, _ in leaves), in_names=in_names,
      unnamed=tuple(k for k, name in enumerate(users) if library and name is None),
      in_avals=in_avals, in_tree=treedef, hijax=uses_hijax(cvjp),
      perturbed=(tuple(bool(x.perturbed) for _, x in leaves)
                 if any(_is_primal_box(x) for _, x in leaves) else None),
      nondiff=tuple((i, kept_argument(args[i])) for i in cvjp.nondiff_argnums),
      custom_rule=weakref.ref(cvjp))


@dataclasses.dataclass(frozen=True)
class _Facts:
  """What a rule set's every application would compute again: its names and sources, the
  user fwd's code to follow (or None), the primal's positional parameter names and
  whether the primal is a library's."""
  key: tuple
  names: dict
  fwd_code: Any
  params: tuple
  library: bool


_facts_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _facts(cvjp) -> _Facts:
  """``cvjp``'s ``_Facts``: fixed per rule set, so computed once (``_site`` runs on every
  fwd) and again only after a new ``defvjp``."""
  own = vars(cvjp)
  key = (_own(cvjp, own, "fun"), _own(cvjp, own, "fwd"), _own(cvjp, own, "bwd"))
  cached = _facts_cache.get(cvjp)
  if cached is None or cached.key != key:
    fun, _, bwd = key
    cached = _facts_cache[cvjp] = _Facts(key, dict(
        function=function_names.function_name(fun), source=function_names.function_source(fun),
        rule=function_names.function_name(bwd),
        fwd_rule=function_names.function_name(library_wrappers.user_fwd(cvjp)[0]),
        rule_source=function_names.function_source(bwd)), _user_fwd_code(cvjp),
        function_names.positional_names(fun), function_names.library_function(fun))
    try:
      _names_by_bwd[bwd] = cached.names
    except TypeError:   # a bwd that takes no weak reference
      pass
  return cached


# The bwd JAX runs -> the names above: a staged equation holds only the library's bwd
# (equinox's ``fn_bwd_wrapped``) and the name of the library's primal.
_names_by_bwd: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def seen_names(bwd) -> dict | None:
  """The user's names of the custom_vjp whose bwd JAX runs as ``bwd``, if the hook has
  applied it: ``function``, ``rule``, ``source``, ``rule_source``."""
  try:
    return _names_by_bwd.get(bwd)
  except TypeError:
    return None


def _fwd_code(cvjp):
  return _facts(cvjp).fwd_code


def _user_fwd_code(cvjp):
  """The code of the user's fwd, when a library's (not JAX's) fwd calls it."""
  fwd, path = library_wrappers.user_fwd(cvjp)
  code = getattr(fwd, "__code__", None)
  return code if path and not function_names.inside_jax(getattr(cvjp.fwd, "__code__", code).co_filename) else None


def call_site_and_scope() -> tuple[str | None, str]:
  info = source_info_util.current()
  frame = frames.user_frame(info.traceback) or frames.live_user_frame(sys._getframe(1))
  where = f"{frame.file_name}:{frame.start_line}" if frame else None
  return where, function_names.scope_names(info.name_stack)


def _defer_fwd_check(cvjp, args, out, site) -> None:
  """Compare the fwd's primal output with the primal's, as the session ends.

  The primal's output types are those JAX itself traced for this call (``_jax_primal_out``);
  the user's primal is never run for them. Where JAX has not run it (classic custom_vjp
  under grad or vjp runs only the fwd) there is nothing to compare with, and a fwd whose
  output type differs goes unseen, as it does in JAX. The check keeps only avals.
  """
  session = records.current_session()
  if session is None:
    return
  expected = _jax_primal_out(sys._getframe())
  if expected is None:
    return
  paths_leaves, got_tree = jax.tree_util.tree_flatten_with_path(out)
  got = [(path, core.typeof(leaf)) for path, leaf in paths_leaves]
  session.deferred.append((len(session.records), lambda: [
      retained(r) for r in _check_fwd_output(expected, got, got_tree, site)]))


# The JAX frames that call a fwd rule knowing the primal's output types: classic
# custom_vjp's ``_flatten_fwd`` (its ``maybe_out_type``, filled once JAX has traced the
# primal: under jit, checkpoint, scan, ...), hijax's fwd ``rule`` (its ``traced``) and, on
# JAX 0.9 to 0.11, ``CustomVJPTraced.vjp_fwd`` of the custom_vjp3 class (its ``self``).
_JAX_FWD_CALLERS = {("_flatten_fwd", cd.__file__): ("maybe_out_type", None),
                    ("rule", hijax.__file__): ("traced", "out_avals"),
                    ("vjp_fwd", hijax.__file__): ("self", "out_aval")}


def _jax_primal_out(frame, depth: int = 12):
  """The primal's output avals (a pytree) as the JAX frame above that called the fwd
  holds them, or None where JAX has not run the primal."""
  for _ in range(depth):
    frame = frame.f_back
    if frame is None:
      return None
    caller = _JAX_FWD_CALLERS.get((frame.f_code.co_name, frame.f_code.co_filename))
    if caller is None:
      continue
    name, attribute = caller
    held = frame.f_locals.get(name)
    if attribute is not None:
      return getattr(held, attribute, None)
    try:
      out_tree, avals, _ = held()
    except Exception:  # noqa: BLE001 - lu.StoreException: the primal has not run
      return None
    return jax.tree_util.tree_unflatten(out_tree, avals)
  return None


def _check_fwd_output(expected, got_leaves, got_tree, site) -> list[Record]:
  """JAX raises on what this finds (it compares the same types); the records say where."""
  exp_leaves, exp_tree = jax.tree_util.tree_flatten(expected)
  base = dict(function=site.function, source=site.source, rule=site.fwd_rule, site=site)
  if exp_tree != got_tree:
    got = [(leaf_paths.keys(p), a.str_short()) for p, a in got_leaves]
    return [Record(kind="fwd_structure", severity=ERROR, path="",
                   expected=str(exp_tree), got=str(got_tree),
                   leaves=leaf_paths.compared(leaf_paths.of_tree(expected), got),
                   detail=f"fwd rule {site.fwd_rule}'s primal output has another "
                          f"structure than {site.function}'s output", **base)]
  found = []
  for (path, got), want in zip(got_leaves, exp_leaves):
    if same_type(want, got) is not False:
      continue
    found.append(Record(
        kind="fwd_type", severity=ERROR,
        path=jax.tree_util.keystr(path), expected=want.str_short(), got=got.str_short(),
        expected_aval=want, got_aval=got,
        leaves=(leaf_paths.Leaf(leaf_paths.keys(path), want.str_short(), got.str_short()),),
        **base))
  return found


# ----------------------------------------------------------------- backward

def _with_zero_cts(site: RuleSite, ct) -> RuleSite:
  """``site`` saying which output cotangents were symbolic zeros, where some were."""
  flags = tuple(isinstance(c, cd.SymbolicZero) for c in jax.tree_util.tree_leaves(ct, is_leaf=_is_zero))
  return dataclasses.replace(site, zero_cts=flags) if any(flags) else site


def replayed_ct(site: RuleSite, ct):
  """``ct`` (arrays) with the leaves that were symbolic zeros at ``site``'s application
  symbolic zeros again: a rule's branch on them runs as it did there."""
  if not site.zero_cts:
    return ct
  leaves, tree = jax.tree_util.tree_flatten(ct)
  if len(leaves) != len(site.zero_cts):
    return ct
  return jax.tree_util.tree_unflatten(tree, [
      cd.SymbolicZero(core.typeof(c)) if zero else c for c, zero in zip(leaves, site.zero_cts)])


def _check_bwd_output(site: RuleSite, cts, code, with_logs: bool) -> None:
  if records.current_session() is None:
    return
  returned = arguments.cached(code, site.in_tree) if code is not None else None
  for rec in safety.safely(compare_cotangents, site, _payload(cts, with_logs), default=[]):
    if not (kinds.of(rec.kind).silent and _marked(site)):   # low precision on purpose
      records.record(retained(_in_users_return(rec, returned)))


def _marked(site: RuleSite) -> bool:
  """The rule is marked ``vjpviz.surrogate``: a dtype JAX accepts is then the user's choice
  (quantisation code returning low precision), not a warning."""
  cvjp = site.custom_rule() if site.custom_rule is not None else None
  return cvjp is not None and surrogates.is_surrogate(cvjp)


def _payload(cts, with_logs: bool):
  if with_logs and isinstance(cts, (tuple, list)) and len(cts) == 2:
    return cts[0]
  return cts


def _leaf_cts(site, cts, with_logs: bool) -> list:
  """The rule's cotangent for each input leaf (None where it gave none); in a tree of
  another structure, the leaf at the same key path (so a missing leaf's siblings still
  say where the user's return has them)."""
  payload = _payload(cts, with_logs)
  flat = match_structure(site, payload)
  if not isinstance(flat, Record):
    return flat
  leaf = lambda x: x is None or _is_zero(x)
  at = {leaf_paths.keys(p): x for p, x in jax.tree_util.tree_leaves_with_path(payload, is_leaf=leaf)}
  return [at.get(k) for k in site.in_keys]


def _in_users_return(rec: Record, returned) -> Record:
  """``rec`` at the path of the user's own return, when a library's bwd put it elsewhere."""
  i = rec.flat_index
  if not returned or i is None or i >= len(returned) or returned[i] is None:
    return rec
  return dataclasses.replace(rec, path=returned[i])


_user_bwd_codes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _user_bwd_code(bwd):
  """The code of the user's bwd when a library's (not JAX's) bwd calls it, else None."""
  try:
    return _user_bwd_codes[bwd]
  except KeyError:
    pass
  user, path = library_wrappers.behind(bwd)
  own = getattr(bwd, "__code__", None) or getattr(type(bwd).__call__, "__code__", None)
  code = _user_bwd_codes[bwd] = (user.__code__ if path and own is not None
                                 and not function_names.inside_jax(own.co_filename) else None)
  return code


def compare_cotangents(site: RuleSite, cts: Any) -> list[Record]:
  """What is wrong with a bwd rule's output for ``site``; ``[]`` if nothing."""
  n_args = len(site.in_tree.children())
  base = dict(function=site.function, source=site.source, rule=site.rule, site=site)
  if isinstance(cts, list) and len(cts) == n_args:
    cts = tuple(cts)
  returned = cts
  if not isinstance(cts, tuple) or len(cts) != n_args:
    what = (f"a tuple of length {len(cts)}" if isinstance(cts, (tuple, list))
            else f"a bare {_what(cts)}, not a tuple")
    detail = f"{site.rule} returned {what}; {site.function} takes {n_args} differentiable argument(s)"
    nondiff = [i for i, _ in site.nondiff]
    if nondiff and isinstance(cts, (tuple, list)) and len(cts) == n_args + len(nondiff):
      # One entry per argument, nondiff ones included: the rest are compared where they belong.
      cts = tuple(c for i, c in enumerate(cts) if i not in nondiff)
      detail += (f"; it returned one for each argument, nondiff_argnums={tuple(nondiff)} "
                 "included, which get none")
    return [Record(kind="bwd_structure", severity=ERROR, path="",
                   expected=site.in_structure, got=_structure(returned), leaves=compared(site, cts),
                   detail=detail, **base)]
  flat = match_structure(site, cts)
  if isinstance(flat, Record):
    return [flat]
  found = []
  for i, (path, primal, ct) in enumerate(zip(site.in_paths, site.in_avals, flat)):
    if ct is None or isinstance(ct, cd.Zero):
      continue
    expected = ct_aval(primal)
    got = ct.aval if isinstance(ct, cd.SymbolicZero) else core.typeof(ct)
    if getattr(expected, "dtype", None) == jax.dtypes.float0:
      continue  # JAX drops cotangents of integer inputs
    if same_type(expected, got) is not False:
      continue
    accepted = _jax_accepts(site, expected, got, ct)
    kind = "silent_dtype" if accepted and same_shape(expected, got) else "bwd_type"
    found.append(Record(
        kind=kind, severity=WARNING if accepted else ERROR, path=path,
        expected=expected.str_short(), got=got.str_short(), flat_index=i,
        expected_aval=expected, got_aval=got, **base))
  return found


def perturbed_args(site: RuleSite) -> tuple[int, ...]:
  """The differentiable arguments with a leaf that was differentiated: what a re-check
  differentiates (a library may assert that the rest are not)."""
  flags = site.perturbed or (True,) * len(site.in_paths)
  return tuple(i for i, arg in enumerate(trees.split_args(site.in_tree, flags)) if any(arg))


def match_structure(site, cts):
  """Flatten ``cts`` against the args tree (None stands for a subtree) as JAX's own
  ``_flatten_bwd`` does: the user's pytree code is called exactly as JAX calls it (the
  args tree unflattened around sentinels, ``cts`` rebuilt around its own children)."""
  try:
    expected = jax.tree_util.tree_unflatten(site.in_tree, [object()] * len(site.in_paths))
  except Exception:  # noqa: BLE001 - the user's unflatten rejects sentinels, so JAX's check
    return _leaves_of_same_tree(site, cts)   # raises there: what it would have said is ours
  flat: list = []

  def put(ct, subtree):
    flat.extend([ct] * len(jax.tree_util.tree_leaves(subtree)))
    return ct
  try:
    jax.tree_util.tree_map(put, cts, expected, is_leaf=lambda x: x is None)
  except (ValueError, TypeError):
    leaves = compared(site, cts)
    path, want, have = _first_difference(leaves) or ("", site.in_structure, _structure(cts))
    return Record(kind="bwd_structure", severity=ERROR, function=site.function,
                  source=site.source, rule=site.rule, site=site, path=path,
                  expected=site.in_structure, got=_structure(cts), leaves=leaves,
                  detail=f"at {path or 'the top'}: expected {want}, got {have}")
  return flat


def _leaves_of_same_tree(site, cts) -> list:
  """``cts``'s leaves where its tree is the args tree, compared without unflattening
  (no leaf compared where it is not: a None subtree or another structure)."""
  leaves, tree = jax.tree_util.tree_flatten(cts, is_leaf=_is_zero)
  return leaves if tree == site.in_tree else [None] * len(site.in_paths)


def compared(site: RuleSite, cts) -> tuple[leaf_paths.Leaf, ...]:
  """Every leaf of the args tree beside what the rule returned there, and any extra one,
  by key path (the rule's output flattened, as JAX flattens it; nothing unflattened)."""
  expected = [(k, ct_aval(a).str_short()) for k, a in zip(site.in_keys, site.in_avals)]
  return leaf_paths.compared(expected, leaf_paths.of_tree(cts, is_leaf=_is_zero))


def _first_difference(leaves) -> tuple[str, str, str] | None:
  """The first key path where the rule's output differs from the args tree, and what each
  has there; None when only containers differ."""
  for leaf in leaves:
    if leaf.got == leaf_paths.MISSING:
      return leaf_paths.keystr(leaf.path), "a leaf", "nothing (missing)"
    if leaf.expected == leaf_paths.MISSING:
      return leaf_paths.keystr(leaf.path), "nothing", "an extra leaf"
  return None


def _jax_accepts(site, expected, got, ct) -> bool:
  """JAX's own predicate for this path: does it let ``got`` through?"""
  if jax_flags.on("jax_disable_bwd_checks"):
    return True
  exception = lambda a, b: dtype_exemption.exempt(cd, a, b)
  if site.hijax:
    return core.typematch(expected, got) or exception(expected, got)
  return core.typecompat(expected, got) or exception(expected, got)


def _is_zero(x) -> bool:
  return isinstance(x, (cd.SymbolicZero, cd.Zero))


def _is_primal_box(x) -> bool:
  return isinstance(x, cd.CustomVJPPrimal)


def _unbox(x):
  return x.value if isinstance(x, cd.CustomVJPPrimal) else x


def kept_argument(x):
  """A nondiff argument as a site may keep it: itself, unless a leaf must be replaced
  (``_without_arrays``); only then is the user's pytree rebuilt."""
  leaves, treedef = jax.tree_util.tree_flatten(x)
  kept = [_without_arrays(leaf) for leaf in leaves]
  if all(k is leaf for k, leaf in zip(kept, leaves)):
    return x
  return jax.tree_util.tree_unflatten(treedef, kept)


def _without_arrays(x):
  """A leaf a site may keep: arrays as ShapeDtypeStructs, callables weakly, the rest as is."""
  if isinstance(x, (jax.Array, np.ndarray)):
    return trees.shape_struct(core.typeof(x))
  if callable(x) and not isinstance(x, type):
    try:
      return records.Weak(weakref.ref(x))
    except TypeError:  # not weakly referenceable (a builtin): holds no arrays of ours
      return x
  return x


def _what(x) -> str:
  """An array or tracer by its type as the user reads it (not JAX's tracer class)."""
  try:
    return core.typeof(x).str_short()
  except TypeError:
    return type(x).__name__


def _structure(x) -> str:
  return str(jax.tree_util.tree_structure(x, is_leaf=_is_zero))


def clear_caches() -> None:
  arguments.clear()
  bwd_raises.clear()
  _user_bwd_codes.clear()
  _clones.clear()
  _facts_cache.clear()
  _names_by_bwd.clear()
