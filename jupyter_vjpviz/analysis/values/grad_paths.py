"""Why a differentiated input gets no gradient: found on the forward jaxpr, then on values.

Structural reasons need no values: each input's dependence is carried forward through
the program, and an equation that cannot pass a cotangent back turns it into the reason
it cut there (``stop_gradient``: stopped; an integer or boolean result, ``round``,
``sign``: non_differentiable; a custom rule whose pullback does not read its output
cotangent for that operand: rule_zero). An input whose dependence reaches the outputs
only as such cuts gets the first of them; none at all: unused.

Value reasons read the one measured backward pass (``nonfinite.measure``'s per-edge
cotangent norms): from an input whose gradient is exactly zero, forward along the
variables whose cotangent is zero, to the equation whose outputs' cotangents are not:
its pullback made the zero. What it is (a mask, a saturating function, a product whose
other factor is all zero at these inputs, a product in low precision) names the reason.
"""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from ...capture.compat.private import core
from ...capture.naming.function_names import scope_names
from .. import program
from .nonfinite import eqn_source
from .nonfinite_eval import CALLS, bind, flow, inexact, pullback
from ..program import body_prefix, eqn_id, scan_groups, sub_jaxprs

LIVE = "live"
STRUCTURAL = ("unused", "stopped", "non_differentiable", "rule_zero")
VALUE = ("dead", "saturated", "zero_factor", "underflow")
FLAT = frozenset({"round", "floor", "ceil", "sign", "is_finite", "nextafter"})
"""Floating results whose derivative is zero everywhere JAX defines one."""
MASKS = frozenset({"max", "min", "select_n", "clamp", "relu", "relu6", "where", "abs",
                   "leaky_relu", "hard_tanh", "gather", "dynamic_slice", "reduce_max",
                   "reduce_min", "sort", "argmax", "cumsum"})
SATURATING = frozenset({"tanh", "logistic", "sigmoid", "softmax", "log_softmax", "exp",
                        "erf", "gelu", "silu", "swish", "softplus", "exp2"})
PRODUCTS = frozenset({"mul", "dot_general", "conv_general_dilated", "div"})
PASS = frozenset({"reshape", "broadcast_in_dim", "convert_element_type", "transpose",
                  "squeeze", "expand_dims", "copy", "copy_p", "reduce_sum", "slice"})
ROUTES = frozenset({"concatenate", "stack", "pad", "broadcast_in_dim", "reshape", "transpose", "squeeze",
                    "expand_dims", "rev", "dynamic_update_slice"})
"""Operations that only move values: a zero operand's cotangent is a part of their output's."""
UNDERFLOWS = PRODUCTS | {"convert_element_type"}
"""Where low precision rounds a non-zero cotangent to zero: a product, a cast down."""
SCALINGS = frozenset({"mul", "div", "neg"})
"""Operations that keep a value's zeros where their other operand is a constant."""
LOW = (jnp.bfloat16, jnp.float16)


@dataclasses.dataclass(frozen=True)
class Cut:
  """Where an input's gradient is cut: the reason, the graph node, its operation, the user's line."""
  reason: str
  node: str | None = None
  op: str | None = None
  source: str | None = None
  factor: int | None = None    # zero_factor: the program input that is the all-zero factor


# ------------------------------------------------------------------ structural


def structural(jaxpr: core.Jaxpr) -> list:
  """Per input of ``jaxpr``: ``LIVE`` if a cotangent can reach it, else its ``Cut``."""
  env = {v: {i: frozenset({LIVE})} for i, v in enumerate(jaxpr.invars)}
  outs = _level(jaxpr, None, env)
  found = [set() for _ in jaxpr.invars]
  for v, deps in zip(jaxpr.outvars, outs):
    if inexact(v):
      for i, tags in deps.items():
        found[i] |= tags
  return [LIVE if LIVE in tags else
          min(tags, key=lambda c: _order(c.node)) if tags else Cut("unused") for tags in found]


def _order(node: str | None) -> tuple:
  return tuple(int(p) for p in (node or "e0")[1:].split(".") if p.isdigit())


def _level(jaxpr: core.Jaxpr, prefix: str | None, env: dict, outer: str | None = None) -> list[dict]:
  """Carry ``env`` (variable -> {input: tags}) through one level; its outputs' dependences
  (``outer``: the enclosing call's line, for a library's body that keeps no user frame)."""
  for k, eqn in enumerate(jaxpr.eqns):
    ins = [env.get(v, {}) if isinstance(v, core.Var) else {} for v in eqn.invars]
    if not any(ins):
      continue
    nid = eqn_id(prefix, k)
    where = eqn_source(eqn) or outer
    outs = _through(eqn, nid, ins, where)
    for v, deps in zip(eqn.outvars, outs):
      if deps:
        env[v] = deps if inexact(v) else _cut_all(deps, Cut("non_differentiable", nid,
                                                              eqn.primitive.name, where))
  return [env.get(v, {}) if isinstance(v, core.Var) else {} for v in jaxpr.outvars]


def _through(eqn, nid: str, ins: list[dict], where: str | None) -> list[dict]:
  name = eqn.primitive.name
  subs = list(sub_jaxprs(eqn))
  if name == "stop_gradient" or name in FLAT:
    cut = Cut("stopped" if name == "stop_gradient" else "non_differentiable", nid, name, where)
    return [_cut_all(_union(ins), cut)] * len(eqn.outvars)
  if name in ("custom_vjp_call", "custom_jvp_call"):
    zero = _rule_zeros(eqn)
    function = program.custom_names(eqn)[0] or name
    cut = Cut("rule_zero", nid, function, where)
    merged = _union([_cut_all(d, cut) if j in zero else d for j, d in enumerate(ins)])
    return [merged] * len(eqn.outvars)
  if subs and (name in CALLS or name == "scan") and len(subs[0].invars) == len(eqn.invars):
    return _body(subs[0], nid, ins, scan_groups(eqn)[:2] if name == "scan" else (0, 0), where)
  if name == "cond" and subs and all(len(s.invars) == len(eqn.invars) - 1 for s in subs):
    per = [_level(s, body_prefix(nid, b, len(subs)), dict(zip(s.invars, ins[1:])), where)
           for b, s in enumerate(subs)]
    return [_union(list(outs)) for outs in zip(*per)]
  return [_union(ins)] * len(eqn.outvars)


def _body(body: core.Jaxpr, nid: str, ins: list[dict], groups: tuple[int, int],
          where: str | None) -> list[dict]:
  """A body run on the equation's operands; a scan's carry (``groups``: its constants and
  carry counts) fed back until it settles."""
  ins = list(ins)
  consts, n_carry = groups
  for _ in range(n_carry + 1):
    outs = _level(body, nid, dict(zip(body.invars, ins)), where)
    fed = [_union([ins[consts + c], outs[c]]) for c in range(n_carry)]
    if fed == ins[consts:consts + n_carry]:
      break
    ins[consts:consts + n_carry] = fed
  return outs


def _union(deps: list[dict]) -> dict:
  out: dict = {}
  for d in deps:
    for i, tags in d.items():
      out[i] = out[i] | tags if i in out else tags
  return out


def _cut_all(deps: dict, cut: Cut) -> dict:
  """Every live dependence in ``deps`` cut at ``cut`` (earlier cuts kept)."""
  return {i: (tags - {LIVE}) | {cut} if LIVE in tags else tags for i, tags in deps.items()}


def _rule_zeros(eqn) -> set[int]:
  """The operands of a custom rule whose cotangent its pullback makes without reading the
  output cotangents (a zero, or a constant): traced on types, no values."""
  wrt = [j for j, v in enumerate(eqn.invars) if inexact(v)]
  fo = [j for j, v in enumerate(eqn.outvars) if inexact(v)]
  if not wrt or not fo:
    return set()
  ins = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
  cts = [jax.ShapeDtypeStruct(eqn.outvars[j].aval.shape, eqn.outvars[j].aval.dtype) for j in fo]
  try:
    closed = jax.make_jaxpr(lambda *a: pullback(lambda full: bind(eqn, full), list(a[:len(ins)]),
                                                wrt, fo, list(a[len(ins):])))(*ins, *cts)
  except Exception:  # noqa: BLE001 - a rule we cannot trace on types is not judged
    return set()
  jaxpr = closed.jaxpr
  ct_vars = set(jaxpr.invars[len(ins):])
  reads = _reads(jaxpr, ct_vars)
  return {j for j, v in zip(wrt, jaxpr.outvars) if not (isinstance(v, core.Var) and v in reads)}


def _reads(jaxpr: core.Jaxpr, seeds: set) -> set:
  """The variables of ``jaxpr`` that depend on ``seeds``."""
  live = set(seeds)
  for eqn in jaxpr.eqns:
    if any(isinstance(v, core.Var) and v in live for v in eqn.invars):
      live.update(eqn.outvars)
  return live


# ------------------------------------------------------------------ on values


def value_cuts(jaxpr: core.Jaxpr, env: dict, edges: dict, zero: list[int]) -> dict[int, Cut]:
  """For each input index in ``zero`` (its gradient exactly zero, structurally live), the
  equation whose pullback first made its cotangent zero; ``env``: the forward values of
  the top level (``nonfinite.forward``); ``edges``: ``"node#operand"`` -> measured Flow."""
  reached = {jaxpr.invars[i]: {i} for i in zero}
  found: dict[int, Cut] = {}
  inputs = {v: i for i, v in enumerate(jaxpr.invars)}
  routed: dict = {}
  _value_level(jaxpr, None, env, edges, reached, [True] * len(jaxpr.outvars), found, inputs,
               routed=routed)
  for v, cut in routed.items():   # routed on and cut nowhere later: where it was routed
    for i in reached.get(v, ()):
      found.setdefault(i, cut)
  return found


@dataclasses.dataclass(frozen=True)
class _Enclosing:
  """The level a call's body sits in, for a zero factor traced out of the body."""
  jaxpr: object
  env: dict
  prefix: str | None
  inputs: dict
  operands: dict            # the body's input variables -> the call's operands here
                            # (empty for the level being classified)
  up: _Enclosing | None


def _value_level(jaxpr, prefix, env, edges, reached, out_nonzero, found, inputs,
                 outer: str | None = None, up: _Enclosing | None = None,
                 routed: dict | None = None) -> None:
  """``inputs``: this level's variables that are the program's inputs, by input index;
  ``outer``: the enclosing call's line, for a library's body that keeps no user frame
  (``jnp.where``'s); ``up``: the levels around this one; ``routed``: the variables that
  hold the zero cotangent in part (a stack of heads, one of them masked later), each with
  the routing equation's cut, should nothing further on cut it."""
  routed = {} if routed is None else routed
  nonzero = _nonzero(jaxpr, prefix, edges, out_nonzero)
  for k, eqn in enumerate(jaxpr.eqns):
    hit = set().union(*[reached.get(v, ()) for v in eqn.invars if isinstance(v, core.Var)
                        and inexact(v) and (v not in nonzero or v in routed)])
    hit -= set(found)
    if not hit:
      continue
    nid = eqn_id(prefix, k)
    if not any(v in nonzero for v in eqn.outvars):
      for v in eqn.outvars:
        reached.setdefault(v, set()).update(hit)
      continue
    # The zeros go on in part of its output (a stack; a cast of what is zero in part, not
    # rounded to zero by it): what cuts them is further on.
    if _routes(eqn) or (eqn.primitive.name == "convert_element_type"
                        and isinstance(eqn.invars[0], core.Var) and eqn.invars[0] in routed):
      cut = Cut("dead", nid, op_name(eqn), eqn_source(eqn) or outer)
      for v in eqn.outvars:
        reached.setdefault(v, set()).update(hit)
        routed.setdefault(v, cut)
      continue
    if eqn.primitive.name in CALLS and isinstance(env.get(k), dict):
      body = next(sub_jaxprs(eqn))
      inner = {b: reached.get(v, set()) & hit for b, v in zip(body.invars, eqn.invars)
               if isinstance(v, core.Var)}
      passed = {b: inputs[v] for b, v in zip(body.invars, eqn.invars)
                if isinstance(v, core.Var) and v in inputs}   # a Literal is no input
      _value_level(body, nid, env[k], edges, inner, [v in nonzero for v in eqn.outvars], found,
                   passed, eqn_source(eqn) or outer,
                   _Enclosing(jaxpr, env, prefix, inputs, dict(zip(body.invars, eqn.invars)), up),
                   {b: routed[v] for b, v in zip(body.invars, eqn.invars)
                    if isinstance(v, core.Var) and v in routed})
      if hit - set(found):   # not cut inside: the call as a whole
        for i in hit - set(found):
          found[i] = _classify(eqn, nid, jaxpr, env, inputs, reached, outer, up)
      continue
    cut = _classify(eqn, nid, jaxpr, env, inputs, reached, outer, up)
    for i in hit:
      found[i] = cut


def nonfinite_at(jaxpr: core.Jaxpr, edges: dict) -> Cut | None:
  """The last equation of the top level (the first going backward) whose outputs' measured
  cotangents are finite and one of its operands' is not: where the gradient went NaN/Inf
  (a jit's or scan's body as a whole; ``vv.nans`` goes inside)."""
  consumers: dict = {}
  for k, eqn in enumerate(jaxpr.eqns):
    for j, v in enumerate(eqn.invars):
      if isinstance(v, core.Var):
        consumers.setdefault(v, []).append(f"{eqn_id(None, k)}#{j}")
  finite = lambda key: edges.get(key) is None or edges[key].finite
  for k in reversed(range(len(jaxpr.eqns))):
    eqn, nid = jaxpr.eqns[k], eqn_id(None, k)
    made = any(not finite(f"{nid}#{j}") for j in range(len(eqn.invars)))
    if made and all(finite(c) for v in eqn.outvars for c in consumers.get(v, ())):
      return Cut("nonfinite", nid, op_name(eqn), eqn_source(eqn))
  return None


def primal_norms(jaxpr: core.Jaxpr, env: dict, prefix: str | None = None) -> dict[str, float]:
  """``"node#operand"`` -> the norm of that operand's value in ``env`` (the forward run's:
  a call's body by the values kept under its index), for the graph's edges."""
  found: dict[str, float] = {}
  norms: dict = {}    # per variable: a layer's activations feed several equations
  for k, eqn in enumerate(jaxpr.eqns):
    nid = eqn_id(prefix, k)
    for j, v in enumerate(eqn.invars):
      x = env.get(v) if isinstance(v, core.Var) else None
      if x is not None and inexact(v):
        if v not in norms:
          norms[v] = math.sqrt(flow(x)[2])
        found[f"{nid}#{j}"] = norms[v]
    if eqn.primitive.name in CALLS and isinstance(env.get(k), dict):
      found.update(primal_norms(next(sub_jaxprs(eqn)), env[k], nid))
  return found


def _nonzero(jaxpr, prefix, edges, out_nonzero) -> set:
  """The variables of one level whose cotangent the measured pass found non-zero."""
  got = {v for v, nz in zip(jaxpr.outvars, out_nonzero) if nz and isinstance(v, core.Var)}
  for k, eqn in enumerate(jaxpr.eqns):
    nid = eqn_id(prefix, k)
    for j, v in enumerate(eqn.invars):
      f = edges.get(f"{nid}#{j}")
      if f is not None and isinstance(v, core.Var) and (f.peak > 0 or not f.finite):
        got.add(v)
  return got


def _classify(eqn, nid: str, jaxpr, env: dict, inputs: dict, zeroed: dict,
              outer: str | None = None, up: _Enclosing | None = None) -> Cut:
  """The value reason an equation made a zero cotangent from a non-zero one (``zeroed``:
  the variables whose zero cotangent is being explained; ``inputs``: ``_value_level``'s)."""
  name, where = op_name(eqn), eqn_source(eqn) or outer
  low = any(getattr(v.aval, "dtype", None) in LOW for v in eqn.invars if inexact(v))
  inner = inside_kinds(eqn)   # jnp.where's jit, a library's activation: what its body holds
  if name in MASKS or "dead" in inner:
    return Cut("dead", nid, name, where)
  if name in SATURATING or "saturated" in inner:
    return Cut("saturated", nid, name, where)
  value = lambda v: env.get(v) if isinstance(v, core.Var) else getattr(v, "val", 1)
  others = [v for v in eqn.invars if not (isinstance(v, core.Var) and zeroed.get(v))]
  here = _Enclosing(jaxpr, env, nid.rpartition(".")[0] or None, inputs, {}, up)
  if name in PRODUCTS and (factors := [v for v in others if _all_zero(value(v))]):
    return _zero_factor(Cut("zero_factor", nid, name, where), here, factors)
  if name in PRODUCTS and (partly := [v for v in others if _any_zero(value(v))]):
    # zero wherever this input's cotangent flows (a head mask, a relu's dead units): a
    # zero factor, or the mask that made it, never an underflow; named only when all zero
    cut = _zero_factor(Cut("zero_factor", nid, name, where), here, partly)
    return dataclasses.replace(cut, factor=None)
  # Rounding makes a zero only of a product of non-zero factors, or of a cast down.
  rounds = name in UNDERFLOWS or "rounds" in inner
  return Cut("underflow" if low and rounds else "dead", nid, name, where)


def _routes(eqn) -> bool:
  """Whether ``eqn`` only moves values (a stack, a pad, a reshape; a call of nothing else):
  a zero cotangent of one operand is part of its output's, not cut here."""
  if eqn.primitive.name in ROUTES:
    return True
  bodies = list(sub_jaxprs(eqn)) if eqn.primitive.name in CALLS else []
  return bool(bodies) and all(_routes(e) for b in bodies for e in b.eqns)


def inside_kinds(eqn, depth: int = 4) -> set[str]:
  """What a call's body (a jit, a custom rule's primal) holds, through nested calls: a
  mask ("dead"), a saturating function ("saturated"), a product or cast ("rounds")."""
  kinds: set[str] = set()
  for body in (sub_jaxprs(eqn) if depth else ()):
    for e in body.eqns:
      name = e.primitive.name
      kinds |= ({"dead"} if name in MASKS else {"saturated"} if name in SATURATING else
                {"rounds"} if name in UNDERFLOWS else inside_kinds(e, depth - 1))
  return kinds


def op_name(eqn) -> str:
  """An equation's operation as the user knows it: a custom rule's or a jit's function."""
  name = eqn.primitive.name
  if name in ("custom_jvp_call", "custom_vjp_call"):
    return program.custom_names(eqn)[0] or name
  if name in ("jit", "pjit"):
    return eqn.params.get("name", name)
  return name


def _zero_factor(cut: Cut, level: _Enclosing, factors: list, hops: int = 8) -> Cut:
  """A product's all-zero factor traced back to what zeroed it: through reshapes, casts and
  scalings, the zero factor of a product before it, a sum of zeros (a residual), and the
  difference of equal values (a norm's ``h - mean(h)``): to a mask (a dead relu before a dense layer, or before an
  attention's projections), ``dead`` there, or to a saturated activation (features all
  equal), ``saturated``; else ``cut``, the product's ``zero_factor``, naming the program
  input the factor is, where it is one (a zero-initialised LoRA ``B``, a ReZero gate at 0).
  A factor that is a call body's input is followed out to the call's operand (a
  ``jax.checkpoint`` block after a dead relu)."""
  for v in factors:
    at = level
    made = producers(at.jaxpr)
    for _ in range(hops):
      while isinstance(v, core.Var) and v not in made and at.up is not None and v in at.up.operands:
        at, v = at.up, at.up.operands[v]
        made = producers(at.jaxpr)
      if not isinstance(v, core.Var) or v not in made:   # an input, or a literal 0
        break
      value = lambda u, env=at.env: env.get(u) if isinstance(u, core.Var) else getattr(u, "val", 1)
      k, producer = made[v]
      prefix = at.prefix
      name = op_name(producer)
      inside = _made_inside(producer, v)
      kinds = {"dead" if n in MASKS else "saturated" for n in (name, inside and op_name(inside))
               if n in MASKS | SATURATING} or (inside_kinds(inside) - {"rounds"} if inside else set())
      if kinds:   # jnp.where's jit, relu's rule, a jitted block's last where: the mask inside
        where = eqn_source(inside) if inside is not None else None
        return Cut("dead" if "dead" in kinds else "saturated", eqn_id(prefix, k), name,
                   where or eqn_source(producer))
      v = _zeroed_by(producer, name, value)
      if v is None:
        break
    if isinstance(v, core.Var) and v in at.inputs:
      return dataclasses.replace(cut, factor=at.inputs[v])
  return cut


def producers(jaxpr) -> dict:
  return {v: (k, e) for k, e in enumerate(jaxpr.eqns) for v in e.outvars}


def _zeroed_by(producer, name: str, value):
  """The operand of ``producer`` whose zeros its all-zero output passes on, or None."""
  operands = [u for u in producer.invars if isinstance(u, core.Var)]
  if name in PASS:
    return producer.invars[0]
  if name in SCALINGS and len(operands) == 1:   # 2 * w: still w's zeros
    return operands[0]
  if name in PRODUCTS:
    return next((u for u in producer.invars if _all_zero(value(u))), None)
  if name in ("add", "add_any", "sub") and all(_all_zero(value(u)) for u in producer.invars):
    return producer.invars[0]   # a residual h + f(h) of a dead h: its first zero
  if name == "sub" and _equal(value(producer.invars[0]), value(producer.invars[1])):
    return producer.invars[0]   # h - mean(h) of features all alike: what made them alike
  return None


def _equal(a, b) -> bool:
  try:
    return bool(np.all(np.asarray(a) == np.asarray(b)))
  except Exception:  # noqa: BLE001 - values we cannot read are not called equal
    return False


def _made_inside(call, v):
  """The equation in ``call``'s body that makes its output ``v`` (None: no call, or an
  input passed through)."""
  body = next(sub_jaxprs(call), None) if call.primitive.name in CALLS else None
  if body is None or len(body.outvars) != len(call.outvars):
    return None
  out = body.outvars[call.outvars.index(v)]
  return next((e for e in body.eqns if any(o is out for o in e.outvars)), None)


def _any_zero(x) -> bool:
  try:
    return bool(np.any(np.asarray(x) == 0))
  except Exception:  # noqa: BLE001 - a value we cannot read is not called zero
    return False


def _all_zero(x) -> bool:
  try:
    return bool(np.all(np.asarray(x) == 0))
  except Exception:  # noqa: BLE001 - a value we cannot read is not called zero
    return False


def gathered(jaxpr: core.Jaxpr) -> set[int]:
  """The inputs of ``jaxpr`` read only by gathers (as the table: an embedding's rows, some
  picked per batch), through the bodies of calls."""
  return {i for i, reads in _reads_by_input(jaxpr).items()
          if all(eqn.primitive.name in ("gather", "dynamic_slice") and j == 0 for eqn, j in reads)}


def sliced(jaxpr: core.Jaxpr) -> dict[int, list[np.ndarray]]:
  """The inputs of ``jaxpr`` read only by static slices (``w[:n]``, ``w[1]``, ``w[:, 1:]``),
  through the bodies of calls: per input, per axis, which of its indices some slice reads.
  A unit (row, column) no slice reads gets no gradient whatever the values: the program
  slices it away."""
  found = {}
  for i, reads in _reads_by_input(jaxpr).items():
    if all(eqn.primitive.name == "slice" and j == 0 for eqn, j in reads):
      masks = [_slice_masks(eqn.invars[0].aval.shape, eqn.params) for eqn, _ in reads]
      found[i] = [np.logical_or.reduce(axis) for axis in zip(*masks)]
  return found


def _reads_by_input(jaxpr: core.Jaxpr) -> dict[int, list]:
  """Per input of ``jaxpr`` it reads, the (equation, operand position) of each read, the
  reads inside the bodies of calls in place of the calls."""
  found: dict = {}
  for i, eqn, j in _input_reads(jaxpr, {v: i for i, v in enumerate(jaxpr.invars)}):
    found.setdefault(i, []).append((eqn, j))
  return found


def _input_reads(jaxpr: core.Jaxpr, inputs: dict):
  for eqn in jaxpr.eqns:
    for j, v in enumerate(eqn.invars):
      if not isinstance(v, core.Var) or v not in inputs:
        continue
      if eqn.primitive.name in CALLS:
        body = next(sub_jaxprs(eqn))
        yield from _input_reads(body, {body.invars[j]: inputs[v]})
      else:
        yield inputs[v], eqn, j


def _slice_masks(shape: tuple, params: dict) -> list[np.ndarray]:
  strides = params.get("strides") or (1,) * len(shape)
  masks = [np.zeros(n, bool) for n in shape]
  for mask, start, limit, stride in zip(masks, params["start_indices"], params["limit_indices"],
                                        strides):
    mask[start:limit:stride] = True
  return masks


# ------------------------------------------------------------------ named scopes


SEEN_THROUGH = CALLS | {"scan"}
"""Equations whose body's operands are theirs, one for one: a parameter is read where
their body reads it (a layer scan's stacked parameters in its body's scope: flax linen's
``Net/ScanBlock_0``, not ``Net``)."""


def reading_scopes(jaxpr: core.Jaxpr) -> list[tuple[str, tuple | None]]:
  """Per input of ``jaxpr``: the named scope (``jax.named_scope``, a flax module's path) of
  the first equation that reads it, through the bodies of calls and scans ('' where none), and where
  that equation is in program order (equation indices, outermost first; None: unread):
  the block a parameter belongs to, in the user's terms, and its depth."""
  return _reading_scopes(jaxpr, jaxpr.invars, "")


def _reading_scopes(jaxpr: core.Jaxpr, wanted: list, outer: str) -> list[tuple[str, tuple | None]]:
  first: dict = {}
  for i, eqn in enumerate(jaxpr.eqns):
    for j, v in enumerate(eqn.invars):
      if isinstance(v, core.Var) and v not in first:
        first[v] = (i, j)
  found: list = [("", None)] * len(wanted)
  calls: dict = {}   # equation index -> (its scope, [(wanted index, operand index)]): one walk each
  for k, v in enumerate(wanted):
    if isinstance(v, core.Var) and v in first:
      i, j = first[v]
      eqn = jaxpr.eqns[i]
      own = "/".join(s for s in (outer, scope_names(eqn.source_info.name_stack)) if s)
      if eqn.primitive.name in SEEN_THROUGH:
        calls.setdefault(i, (own, []))[1].append((k, j))
      else:
        found[k] = (own, (i,))
  for i, (own, at) in calls.items():
    body = next(sub_jaxprs(jaxpr.eqns[i]))
    inner = _reading_scopes(body, [body.invars[j] for _, j in at], own)
    for (k, _), (scope, order) in zip(at, inner):
      found[k] = (scope or own, (i, *(order or ())))
  return found
