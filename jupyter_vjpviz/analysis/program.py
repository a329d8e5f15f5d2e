"""The forward program of a differentiated call, as a Graph with an edge table.

Every edge carries its primal aval and the cotangent aval the backward pass
must produce for it, ``aval.to_ct_aval()``: that holds for every primitive, so
no per-equation VJP is traced. Only custom rules can break it, and the capture
stage already measured what theirs produced. Nested jaxprs (pjit, scan, cond,
while, remat, custom_vjp_call, shard_map, hijax primitives) become child nodes
whose ``parent`` is the enclosing equation.
"""
from __future__ import annotations

import itertools
from typing import Any, Iterator

import jax
from jax._src import core
from jax._src import source_info_util
from jax._src.state.types import AbstractRef

from ..capture import records
from ..capture import names as capture_names
from ..capture.records import Origin
from .graph import Edge, Graph, Node

CUSTOM_PRIMITIVES = ("custom_vjp_call", "call_hi_primitive")


def trace(origin: Origin) -> core.Jaxpr:
  """The forward jaxpr of ``origin.fun`` over its array arguments, from avals alone."""
  arrays = [j for j, leaf in enumerate(origin.leaves) if _is_aval(leaf)]

  def flat(*values):
    leaves = list(origin.leaves)
    for j, v in zip(arrays, values):
      leaves[j] = v
    args, kwargs = jax.tree_util.tree_unflatten(origin.tree, leaves)
    return origin.fun(*args, **kwargs)

  records.state.suspended += 1
  try:
    return jax.make_jaxpr(flat)(*[_spec(origin.leaves[j]) for j in arrays])
  finally:
    records.state.suspended -= 1


def build(origin: Origin | None) -> Graph:
  if origin is None:
    return Graph(note="the differentiated function was not seen by the hook")
  try:
    jaxpr = _open(trace(origin))
  except Exception as e:  # noqa: BLE001 - the diagnosis stands without its graph
    return Graph(note=f"could not trace {origin.name} for its graph: {type(e).__name__}: {e}")
  return from_jaxpr(jaxpr, inputs=_input_nodes(origin))


def _input_nodes(origin: Origin) -> list[Node]:
  """One node per array argument leaf, named as the user named it.

  Differentiated leaves get ids ``in0, in1, ...`` in the VJP's input order (the
  order JAX's own paths like ``args[0]`` count in); the rest are ``static``.
  """
  names = _leaf_names(origin)
  arrays = [j for j, leaf in enumerate(origin.leaves) if _is_aval(leaf)]
  nodes = []
  for j in arrays:
    aval = (_short(origin.leaves[j]),)
    if j in origin.diff_leaves:
      k = origin.diff_leaves.index(j)
      nodes.append(Node(id=f"in{k}", kind="input", label=names[j], out_avals=aval))
    else:
      nodes.append(Node(id=f"arg{j}", kind="static", label=names[j], out_avals=aval))
  return nodes


def _leaf_names(origin: Origin) -> list[str]:
  params = capture_names.positional_names(origin.fun)
  dummy = jax.tree_util.tree_unflatten(origin.tree, list(range(len(origin.leaves))))
  names = []
  for path, _ in jax.tree_util.tree_leaves_with_path(dummy):
    group, top, rest = path[0].idx, path[1], jax.tree_util.keystr(path[2:])
    if group == 1:
      names.append(f"{top.key}{rest}")
    else:
      names.append(capture_names.argument_name(params, top.idx, rest))
  return names


def from_jaxpr(jaxpr: core.Jaxpr, inputs: list[Node] | None = None) -> Graph:
  """The graph of ``jaxpr``; ``inputs`` name its invars (default: ``args[i]``)."""
  builder = _Builder()
  if inputs is None:
    inputs = [Node(id=f"in{i}", kind="input", label=f"args[{i}]",
                   out_avals=(_short(v.aval),)) for i, v in enumerate(jaxpr.invars)]
  for node, v in zip(inputs, jaxpr.invars):
    builder.add_node(node)
    builder.env[v] = node.id
  for v in jaxpr.constvars:
    builder.env[v] = "const"
  builder.walk(jaxpr, parent=None)
  for i, v in enumerate(jaxpr.outvars):
    node = Node(id=f"out{i}", kind="output", label=f"out[{i}]", in_avals=(_short(v.aval),))
    builder.add_node(node)
    builder.add_edge(v, node.id, 0)
  return Graph(nodes=tuple(builder.nodes), edges=tuple(builder.edges))


class _Builder:
  def __init__(self):
    self.nodes: list[Node] = []
    self.edges: list[Edge] = []
    self.env: dict[Any, str] = {}
    self._names: dict[Any, str] = {}
    self._counter = itertools.count()
    self._avals: dict[Any, tuple[str, str]] = {}
    self._scopes: dict[Any, str] = {}

  def add_node(self, node: Node) -> None:
    self.nodes.append(node)

  def add_edge(self, var, dst: str, position: int) -> None:
    if isinstance(var, core.Literal):
      return
    src = self.env.get(var)
    if src is None or src == "const":
      return
    primal, cotangent = self.aval_strings(var.aval)
    self.edges.append(Edge(src=src, dst=dst, var=self._name(var), primal=primal,
                           cotangent=cotangent, position=position))

  def aval_strings(self, aval) -> tuple[str, str]:
    """(primal, expected cotangent) as written; memoised, as a model repeats few types."""
    try:
      return self._avals[aval]
    except KeyError:
      strings = self._avals[aval] = (_short(aval), _ct_short(aval))
      return strings
    except TypeError:  # an unhashable aval
      return _short(aval), _ct_short(aval)

  def walk(self, jaxpr: core.Jaxpr, parent: str | None, prefix: str | None = None) -> int:
    """Add jaxpr's equations under ``parent``; returns how many there are, recursively.

    Ids are ``prefix.i``; a parent with several sub-jaxprs (cond branches)
    numbers each branch: ``e3.0.1`` is equation 1 of e3's first branch.
    """
    total = 0
    for i, eqn in enumerate(jaxpr.eqns):
      nid = f"{prefix}.{i}" if prefix else f"e{i}"
      subs = list(sub_jaxprs(eqn))
      index = len(self.nodes)
      self.nodes.append(None)  # placeholder: n_eqns is known after the children
      for k, v in enumerate(eqn.invars):
        self.add_edge(v, nid, k)
      inner = 0
      for b, sub in enumerate(subs):
        for v in sub.invars:
          self.env[v] = nid
        for v in sub.constvars:
          self.env[v] = "const"
        inner += self.walk(sub, parent=nid, prefix=f"{nid}.{b}" if len(subs) > 1 else nid)
      self.nodes[index] = self._eqn_node(eqn, nid, parent, inner)
      for v in eqn.outvars:
        self.env[v] = nid
      total += 1 + inner
    return total

  def _eqn_node(self, eqn, nid: str, parent: str | None, n_eqns: int) -> Node:
    function, rule = custom_names(eqn)
    frame = source_info_util.user_frame(eqn.source_info.traceback)
    return Node(
        id=nid, kind="eqn", label=function or eqn.primitive.name,
        primitive=eqn.primitive.name, parent=parent,
        name_stack=self.scopes(eqn.source_info.name_stack),
        call_site=f"{frame.file_name}:{frame.start_line}" if frame else None,
        function=function, rule=rule,
        in_avals=tuple(self.aval_strings(v.aval)[0] for v in eqn.invars),
        out_avals=tuple(self.aval_strings(v.aval)[0] for v in eqn.outvars),
        n_eqns=n_eqns, custom=eqn.primitive.name in CUSTOM_PRIMITIVES)

  def scopes(self, name_stack) -> str:
    try:
      return self._scopes[name_stack]
    except KeyError:
      names = self._scopes[name_stack] = capture_names.scope_names(name_stack)
      return names

  def _name(self, var) -> str:
    if var not in self._names:
      self._names[var] = f"v{next(self._counter)}"
    return self._names[var]


def custom_names(eqn) -> tuple[str | None, str | None]:
  """(primal function, bwd rule) names of a custom-rule equation."""
  params = eqn.params
  if eqn.primitive.name == "custom_vjp_call":
    fun_info = getattr(params.get("call_jaxpr"), "debug_info", None)
    bwd_info = getattr(params.get("bwd"), "debug_info", None)
    return (fun_info.func_name if fun_info else None,
            bwd_info.func_name if bwd_info else None)
  prim = params.get("_prim")
  if prim is None:
    return None, None
  traced = getattr(prim, "traced", None)
  if traced is not None:  # hijax custom_vjp3
    return traced.fun_name, getattr(prim.bwd, "__name__", None)
  return type(prim).__name__, f"{type(prim).__name__}.vjp_bwd"


def sub_jaxprs(eqn) -> Iterator[core.Jaxpr]:
  """The jaxprs nested in an equation's params, in a stable order."""
  for value in eqn.params.values():
    yield from _jaxprs_in(value)
  prim = eqn.params.get("_prim")
  traced = getattr(prim, "traced", None)
  if traced is not None:
    yield from _jaxprs_in(getattr(traced, "jaxpr", None))


def _jaxprs_in(value) -> Iterator[core.Jaxpr]:
  if isinstance(value, core.Jaxpr):
    yield _open(value)
  elif type(value).__name__ == "ClosedJaxpr":  # JAX versions that still have it
    yield value.jaxpr
  elif isinstance(value, (tuple, list)) and value and not isinstance(value[0], (int, str)):
    for v in value:  # cond branches; skips axes=(0, 1)-style params cheaply
      yield from _jaxprs_in(v)


def _open(jaxpr):
  """The jaxpr itself: JAX 0.12 folded ClosedJaxpr into Jaxpr, older ones wrap it."""
  inner = getattr(jaxpr, "jaxpr", jaxpr)
  return inner if isinstance(inner, core.Jaxpr) else jaxpr


def _short(aval) -> str:
  try:
    return aval.str_short()
  except Exception:
    return str(aval)


def _ct_short(aval) -> str:
  try:
    inner = aval.inner_aval if isinstance(aval, AbstractRef) else aval
    return inner.to_ct_aval().str_short()
  except Exception:
    return "?"


def _is_aval(leaf) -> bool:
  return isinstance(leaf, core.AbstractValue)


def _spec(aval):
  """A ShapeDtypeStruct for ``aval``, keeping an explicit sharding (shard_map checks it)."""
  if isinstance(aval, AbstractRef):
    inner = aval.inner_aval
    return jax.ShapeDtypeStruct(inner.shape, inner.dtype, is_ref=True)
  sharding = getattr(aval, "sharding", None)
  if sharding is None or getattr(sharding.mesh, "empty", True):
    sharding = None
  return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type, sharding=sharding)
